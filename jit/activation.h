/* activation.h - the epilogue activations (tlm_activation) as LLVM IR, one
 * definition for every code generator (internal).
 *
 * The CPU generators apply them to vectors of W lanes, the GPU generator to
 * one float per thread; both hand in how to make a constant of their type
 * and how to compute exp() on it. Adding an activation is its enum value in
 * api/tlm.h, its case here and its scalar definition in runtime/reference.c
 * (the reference every kernel is checked against): the elementwise operator,
 * the matmul and convolution epilogues, their spaces, tokens and tests
 * take it from there. */
#ifndef TLM_JIT_ACTIVATION_H
#define TLM_JIT_ACTIVATION_H

#include <llvm-c/Core.h>

typedef struct tlm_act_ir {
  LLVMBuilderRef b;
  /* a constant of the value type (float or a vector of floats) */
  LLVMValueRef (*splat)(const struct tlm_act_ir *m, double c);
  /* exp(x) of the value type */
  LLVMValueRef (*exp)(const struct tlm_act_ir *m, LLVMValueRef x);
  void *gen; /* the generator's state, for splat and exp */
  int lanes; /* lanes of the value type (1: a float) */
} tlm_act_ir;

/* act(x); x itself for TLM_ACT_NONE or an unknown value (validation
 * rejects those before any code is generated). NaN in gives NaN out. */
LLVMValueRef tlm_emit_activation(const tlm_act_ir *m, int act, LLVMValueRef x);

#endif
