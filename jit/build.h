/* build.h - one path from a task and schedule to object code or IR
 * (internal): an LLVM context, the module of the operator's code
 * generator, the pass pipeline, the target machine's object code. Every
 * CPU kernel tlm builds (the runtime's kernels, tuning candidates,
 * measurement variants, `tlm run --emit-ir`) goes through it. */
#ifndef TLM_JIT_BUILD_H
#define TLM_JIT_BUILD_H

#include <stddef.h>

#include "../runtime/loopnest.h"
#include "../runtime/task.h"
#include "jit.h"

typedef struct tlm_jit_request {
  const tlm_task *task;
  const tlm_schedule *sched;
  /* matmul only: receives the schedule lowered to a loop nest (the
   * executor needs it too); NULL for other kinds */
  ln_nest *nest;
  int fma_chains;       /* matmul: independent FMA chains (ln_set_fma_chains) */
  int static_m;         /* matmul: 1 = M a constant (a measurement variant) */
  const char *name;     /* the kernel's symbol */
  const char *pipeline; /* LLVM pass pipeline text */
} tlm_jit_request;

/* Where a build's time went, ms (IR generation here; the rest as
 * tlm_jit_times). */
typedef struct tlm_jit_build_times {
  double ir_ms;
  tlm_jit_times jit;
} tlm_jit_build_times;

/* Builds the kernel of r: with obj, optimized object code (*obj malloc'd,
 * *len bytes, the caller frees it); with ir instead, the module as text
 * (*ir malloc'd; optimized by r->pipeline when optimize_ir). times may be
 * NULL. Returns TLM_OK; TLM_ERR_INTERNAL (a matmul schedule that does not
 * lower to a loop nest); TLM_ERR_JIT (code generation, optimization or
 * emission failed); TLM_ERR_OUT_OF_MEMORY; with a message in err.
 * Thread-safe (each call has its own LLVM context). */
tlm_status tlm_jit_build(tlm_jit *j, const tlm_jit_request *r, void **obj, size_t *len,
                         char **ir, int optimize_ir, tlm_jit_build_times *times, char *err,
                         int errcap);

/* 1 when the convolution kernel of this task and schedule addresses its
 * input through pointers its code generator steps itself, so the IR loop
 * strength reduction pass has nothing to add (tlm_codegen_conv_strength_
 * reduced); 0 otherwise (and for other kinds). Pure; thread-safe. */
int tlm_jit_conv_strength_reduced(const tlm_task *task, const tlm_schedule *sched);

#endif
