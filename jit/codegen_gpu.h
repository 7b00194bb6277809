/* codegen_gpu.h - GPU matmul schedules to LLVM IR and PTX (internal).
 *
 * One emitter writes a GPU schedule (runtime/gpu.h) in two forms that
 * differ only in how a thread learns who it is and how it waits:
 *  - TLM_GPU_CODE_PTX: a kernel for nvptx64-nvidia-cuda taking the
 *    GA_COUNT 8-byte arguments of tlm_gpu_mm_args by value, thread and
 *    block indices from the PTX special registers, the staged tiles in
 *    shared memory (address space 3), barriers by bar.sync 0;
 *  - TLM_GPU_CODE_HOST: a host function
 *      void name(const int64_t *args, const int32_t *ids, float *smem,
 *                void (*barrier)(void *), void *barrier_ctx)
 *    (ids = thread index, block x, y, z) that runtime/gpu_emu.c runs with
 *    one host thread per GPU thread of a block, so every schedule's
 *    indexing, staging and barriers are checked against the reference on
 *    machines without a GPU.
 */
#ifndef TLM_JIT_CODEGEN_GPU_H
#define TLM_JIT_CODEGEN_GPU_H

#include <stddef.h>

#include <llvm-c/Core.h>

#include "../runtime/gpu.h"

enum { TLM_GPU_CODE_PTX = 0, TLM_GPU_CODE_HOST = 1 };

/* Emits the kernel `name` for a valid matmul task and GPU schedule into a
 * new module of ctx (the caller owns *out). Deterministic: the same inputs
 * give byte-identical IR. Returns 0, or -1 with a message. */
int tlm_codegen_gpu_matmul(LLVMContextRef ctx, const tlm_task *task, const tlm_schedule *sched,
                           int code, const char *name, LLVMModuleRef *out, char *err, int errcap);

/* Optimizes a TLM_GPU_CODE_PTX module (LLVM's O3 with the NVPTX target's
 * passes) and writes its PTX for compute capability `sm` (e.g. 90 for
 * sm_90): *ptx is malloc'd, NUL-terminated, the caller frees it. The
 * module is changed (optimized). Thread-safe. Returns 0, or -1 with a
 * message (also when this LLVM has no NVPTX target). */
int tlm_gpu_emit_ptx(LLVMModuleRef mod, int sm, char **ptx, char *err, int errcap);

/* The same for a softmax, layernorm or rmsnorm task and GPU row schedule
 * (GR_* decisions; arguments GRA_*). */
int tlm_codegen_gpu_row(LLVMContextRef ctx, const tlm_task *task, const tlm_schedule *sched, int code,
                        const char *name, LLVMModuleRef *out, char *err, int errcap);

/* Either of the above by the task's kind. */
int tlm_gpu_kernel_module(LLVMContextRef ctx, const tlm_task *task, const tlm_schedule *sched, int code,
                          const char *name, LLVMModuleRef *out, char *err, int errcap);

/* One call: task + schedule -> PTX text of kernel `name` (any kind of
 * tlm_gpu_supports). */
int tlm_gpu_kernel_ptx(const tlm_task *task, const tlm_schedule *sched, int sm, const char *name,
                       char **ptx, char *err, int errcap);

#endif
