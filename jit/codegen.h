/* codegen.h - the operators' code generators: schedule (and, for matmuls,
 * loop-nest IR) to an LLVM module through the LLVM-C API (internal). One
 * entry per family; jit/build.c picks the one a task needs. */
#ifndef TLM_JIT_CODEGEN_H
#define TLM_JIT_CODEGEN_H

#include <llvm-c/Core.h>

#include "../runtime/loopnest.h"
#include "../runtime/task.h"

/* Emits `void name(const tlm_mm_args *, i64 begin, i64 end, float *scratch)`
 * for a matmul loop nest into a new module owned by `ctx`. `cpu` and
 * `features` are set as function attributes (may be NULL). The output is a
 * pure function of its inputs: the same inputs give byte-identical IR.
 * Returns 0 and *out (the caller owns it), or -1 with a message in err. */
int tlm_codegen_matmul(LLVMContextRef ctx, const tlm_task *task,
                       const ln_nest *nest, const char *name, const char *cpu,
                       const char *features, LLVMModuleRef *out, char *err,
                       int errcap);

/* The same with M baked in as a constant (task->u.mm.M), for measuring what
 * the run-time M costs against a fully specialized kernel. */
int tlm_codegen_matmul_static_m(LLVMContextRef ctx, const tlm_task *task,
                                const ln_nest *nest, const char *name, const char *cpu,
                                const char *features, LLVMModuleRef *out, char *err,
                                int errcap);

/* Emits `void name(const tlm_row_args *, i64 begin, i64 end, float *)` for a
 * softmax, layernorm or rmsnorm task and schedule (ROW_* decisions). */
int tlm_codegen_row(LLVMContextRef ctx, const tlm_task *task, const tlm_schedule *sched,
                    const char *name, const char *cpu, const char *features, LLVMModuleRef *out,
                    char *err, int errcap);

/* 1 when the convolution kernel for this task and schedule addresses its
 * input through pointers stepped per kernel row (depthwise-like tiles with
 * the window unrolled): the IR loop strength reduction pass has nothing
 * to add there and is skipped (engine.c's pipeline); 0 otherwise. */
int tlm_codegen_conv_strength_reduced(const tlm_task *task, const tlm_schedule *sched);

/* Emits `void name(const tlm_conv_args *, i64 begin, i64 end, float *)` for
 * a convolution task and schedule (CV_* decisions). */
int tlm_codegen_conv(LLVMContextRef ctx, const tlm_task *task, const tlm_schedule *sched,
                     const char *name, const char *cpu, const char *features, LLVMModuleRef *out,
                     char *err, int errcap);

/* Emits `void name(const tlm_pool_args *, i64 begin, i64 end, float *)` for
 * a pooling task and schedule (PL_* decisions). */
int tlm_codegen_pool(LLVMContextRef ctx, const tlm_task *task, const tlm_schedule *sched,
                     const char *name, const char *cpu, const char *features, LLVMModuleRef *out,
                     char *err, int errcap);

/* Emits `void name(const tlm_attn_args *, i64 begin, i64 end, float *)`
 * for a fused attention task and schedule (ATT_* decisions); with
 * ATT_PARALLEL 0 the kernel runs every tile for begin = 0, end = 1. */
int tlm_codegen_attention(LLVMContextRef ctx, const tlm_task *task, const tlm_schedule *sched,
                          const char *name, const char *cpu, const char *features,
                          LLVMModuleRef *out, char *err, int errcap);

#endif
