/* activation.c - the epilogue activations as LLVM IR (see activation.h). */
#include "activation.h"

#include "tlm.h"

static LLVMValueRef fmul(const tlm_act_ir *m, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFMul(m->b, a, b, "");
}

static LLVMValueRef fadd(const tlm_act_ir *m, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFAdd(m->b, a, b, "");
}

/* x < c ? c : x (below) or x > c ? c : x: a NaN x compares false and stays */
static LLVMValueRef clamp_below(const tlm_act_ir *m, LLVMValueRef x, double c) {
  LLVMValueRef k = m->splat(m, c);
  return LLVMBuildSelect(m->b, LLVMBuildFCmp(m->b, LLVMRealOLT, x, k, ""), k, x, "");
}

static LLVMValueRef clamp_above(const tlm_act_ir *m, LLVMValueRef x, double c) {
  LLVMValueRef k = m->splat(m, c);
  return LLVMBuildSelect(m->b, LLVMBuildFCmp(m->b, LLVMRealOGT, x, k, ""), k, x, "");
}

LLVMValueRef tlm_emit_activation(const tlm_act_ir *m, int act, LLVMValueRef x) {
  switch (act) {
  case TLM_ACT_RELU: /* max(x, 0) */
    return clamp_below(m, x, 0.0);
  case TLM_ACT_RELU6: /* min(max(x, 0), 6) */
    return clamp_above(m, clamp_below(m, x, 0.0), 6.0);
  case TLM_ACT_SILU: { /* x / (1 + exp(-x)) */
    LLVMValueRef e = m->exp(m, LLVMBuildFNeg(m->b, x, ""));
    return LLVMBuildFDiv(m->b, x, fadd(m, e, m->splat(m, 1.0)), "");
  }
  case TLM_ACT_GELU_TANH: {
    /* 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), and
     * tanh(u) = 1 - 2 / (exp(2u) + 1): exact limits +-1 at +-inf */
    LLVMValueRef x3 = fmul(m, fmul(m, x, x), x);
    LLVMValueRef inner = fadd(m, x, fmul(m, m->splat(m, 0.044715), x3));
    LLVMValueRef e = m->exp(m, fmul(m, inner, m->splat(m, 2.0 * 0.7978845608028654)));
    LLVMValueRef two_over = LLVMBuildFDiv(m->b, m->splat(m, 2.0), fadd(m, e, m->splat(m, 1.0)), "");
    LLVMValueRef th = LLVMBuildFSub(m->b, m->splat(m, 1.0), two_over, "");
    return fmul(m, fmul(m, x, m->splat(m, 0.5)), fadd(m, th, m->splat(m, 1.0)));
  }
  default: return x;
  }
}
