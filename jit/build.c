/* build.c - task + schedule -> LLVM module -> object code or IR (build.h). */
#include "build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen.h"
#include "../runtime/clock.h"

static double now_ms(void) { return tlm_clock_ms(); }

/* 1 for the kinds whose schedule lowers to a loop nest first (matmuls:
 * every kind without a code generator of its own) */
static int lowers_to_nest(const tlm_task *t) {
  return !tlm_task_is_row(t) && t->kind != TLM_OP_ATTENTION && t->kind != TLM_OP_POOL &&
         t->kind != TLM_OP_CONV;
}

/* the operator's code generator; 0, or -1 with a message */
static int generate(tlm_jit *j, const tlm_jit_request *r, LLVMContextRef ctx, LLVMModuleRef *mod,
                    char *err, int errcap) {
  const tlm_task *t = r->task;
  const char *cpu = tlm_jit_cpu(j), *f = tlm_jit_features(j);
  if (lowers_to_nest(t))
    return r->static_m
               ? tlm_codegen_matmul_static_m(ctx, t, r->nest, r->name, cpu, f, mod, err, errcap)
               : tlm_codegen_matmul(ctx, t, r->nest, r->name, cpu, f, mod, err, errcap);
  if (tlm_task_is_row(t))
    return tlm_codegen_row(ctx, t, r->sched, r->name, cpu, f, mod, err, errcap);
  if (t->kind == TLM_OP_ATTENTION)
    return tlm_codegen_attention(ctx, t, r->sched, r->name, cpu, f, mod, err, errcap);
  if (t->kind == TLM_OP_POOL)
    return tlm_codegen_pool(ctx, t, r->sched, r->name, cpu, f, mod, err, errcap);
  return tlm_codegen_conv(ctx, t, r->sched, r->name, cpu, f, mod, err, errcap);
}

tlm_status tlm_jit_build(tlm_jit *j, const tlm_jit_request *r, void **obj, size_t *len,
                         char **ir, int optimize_ir, tlm_jit_build_times *times, char *err,
                         int errcap) {
  if (obj) *obj = NULL, *len = 0;
  if (ir) *ir = NULL;
  if (times) memset(times, 0, sizeof *times);
  if (lowers_to_nest(r->task)) {
    if (!r->nest || ln_lower_matmul(r->task, r->sched, r->nest)) {
      snprintf(err, (size_t)errcap, "schedule does not lower to a loop nest");
      return TLM_ERR_INTERNAL;
    }
    ln_set_fma_chains(r->nest, r->fma_chains);
  }
  double t0 = now_ms();
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMModuleRef mod = NULL;
  tlm_status st = generate(j, r, ctx, &mod, err, errcap) ? TLM_ERR_JIT : TLM_OK;
  if (times) times->ir_ms = now_ms() - t0;
  if (st == TLM_OK && obj) {
    if (tlm_jit_compile_object(j, mod, r->pipeline, obj, len, times ? &times->jit : NULL, err,
                               errcap))
      st = TLM_ERR_JIT;
  } else if (st == TLM_OK && ir) {
    if (optimize_ir && tlm_jit_optimize(j, mod, r->pipeline, err, errcap)) st = TLM_ERR_JIT;
    if (st == TLM_OK) {
      char *s = LLVMPrintModuleToString(mod);
      *ir = s ? strdup(s) : NULL;
      LLVMDisposeMessage(s);
      if (!*ir) {
        snprintf(err, (size_t)errcap, "out of memory");
        st = TLM_ERR_OUT_OF_MEMORY;
      }
    }
  }
  if (mod) LLVMDisposeModule(mod);
  LLVMContextDispose(ctx);
  return st;
}
