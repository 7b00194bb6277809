/* build.c - task + schedule -> LLVM module -> object code or IR (build.h). */
#include "build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen.h"
#include "../runtime/clock.h"

static double now_ms(void) { return tlm_clock_ms(); }

/* The code generators, one row per operator kind. A matmul schedule is
 * lowered to a loop nest first (r->nest); the others generate from the
 * schedule's decisions. */
typedef int (*codegen_fn)(LLVMContextRef ctx, const tlm_jit_request *r, const char *cpu,
                          const char *features, LLVMModuleRef *mod, char *err, int errcap);

static int gen_matmul(LLVMContextRef ctx, const tlm_jit_request *r, const char *cpu,
                      const char *f, LLVMModuleRef *mod, char *err, int errcap) {
  return r->static_m
             ? tlm_codegen_matmul_static_m(ctx, r->task, r->nest, r->name, cpu, f, mod, err, errcap)
             : tlm_codegen_matmul(ctx, r->task, r->nest, r->name, cpu, f, mod, err, errcap);
}
static int gen_row(LLVMContextRef ctx, const tlm_jit_request *r, const char *cpu, const char *f,
                   LLVMModuleRef *mod, char *err, int errcap) {
  return tlm_codegen_row(ctx, r->task, r->sched, r->name, cpu, f, mod, err, errcap);
}
static int gen_conv(LLVMContextRef ctx, const tlm_jit_request *r, const char *cpu, const char *f,
                    LLVMModuleRef *mod, char *err, int errcap) {
  return tlm_codegen_conv(ctx, r->task, r->sched, r->name, cpu, f, mod, err, errcap);
}
static int gen_pool(LLVMContextRef ctx, const tlm_jit_request *r, const char *cpu, const char *f,
                    LLVMModuleRef *mod, char *err, int errcap) {
  return tlm_codegen_pool(ctx, r->task, r->sched, r->name, cpu, f, mod, err, errcap);
}
static int gen_attention(LLVMContextRef ctx, const tlm_jit_request *r, const char *cpu,
                         const char *f, LLVMModuleRef *mod, char *err, int errcap) {
  return tlm_codegen_attention(ctx, r->task, r->sched, r->name, cpu, f, mod, err, errcap);
}

static const struct {
  codegen_fn gen;
  int nest; /* 1: lowered to a loop nest first */
} k_codegen[] = {
    [TLM_OP_MATMUL] = {gen_matmul, 1},  [TLM_OP_SOFTMAX] = {gen_row, 0},
    [TLM_OP_LAYERNORM] = {gen_row, 0},  [TLM_OP_RMSNORM] = {gen_row, 0},
    [TLM_OP_CONV] = {gen_conv, 0},      [TLM_OP_POOL] = {gen_pool, 0},
    [TLM_OP_ELTWISE] = {gen_row, 0},    [TLM_OP_ROPE] = {gen_row, 0},
    [TLM_OP_ATTENTION] = {gen_attention, 0},
};

static int known_kind(const tlm_task *t) {
  return (int)t->kind > 0 && (int)t->kind < (int)(sizeof k_codegen / sizeof k_codegen[0]) &&
         k_codegen[t->kind].gen;
}

/* 1 for the kinds whose schedule lowers to a loop nest first */
static int lowers_to_nest(const tlm_task *t) { return known_kind(t) && k_codegen[t->kind].nest; }

/* the operator's code generator; 0, or -1 with a message */
static int generate(tlm_jit *j, const tlm_jit_request *r, LLVMContextRef ctx, LLVMModuleRef *mod,
                    char *err, int errcap) {
  if (!known_kind(r->task)) {
    snprintf(err, (size_t)errcap, "no code generator for operator kind %d", (int)r->task->kind);
    return -1;
  }
  return k_codegen[r->task->kind].gen(ctx, r, tlm_jit_cpu(j), tlm_jit_features(j), mod, err,
                                      errcap);
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

int tlm_jit_conv_strength_reduced(const tlm_task *task, const tlm_schedule *sched) {
  return tlm_codegen_conv_strength_reduced(task, sched);
}
