/* block.h - what the tier-0 kernels of one ISA build share (internal to
 * generic/): the register block and the activations. */
#ifndef TLM_GENERIC_BLOCK_H
#define TLM_GENERIC_BLOCK_H

#include <math.h>

#include "tlm.h"

#ifndef TLM_GENERIC_SUFFIX
#error "build with -DTLM_GENERIC_SUFFIX=<isa>"
#endif
#define TLM_GCAT2(a, b) a##_##b
#define TLM_GCAT(a, b) TLM_GCAT2(a, b)
#define FN(name) TLM_GCAT(name, TLM_GENERIC_SUFFIX)

/* columns of a register block: two vectors of the build's width, so PB
 * rows x 2 vectors = 8 accumulators with 2 operand vectors and a broadcast
 * fit AVX2's and SSE's 16 registers */
#if defined(__AVX512F__)
#define OCB 32
#elif defined(__AVX__)
#define OCB 16
#else
#define OCB 8
#endif
#define PB 4 /* rows (output pixels, matmul rows) of a register block */

/* the activations of tlm_ref_activation, in float */
static inline float tlm_generic_act(int act, float x) {
  switch (act) {
  case TLM_ACT_RELU: return x < 0.0f ? 0.0f : x;
  case TLM_ACT_GELU_TANH:
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
  case TLM_ACT_SILU: return x / (1.0f + expf(-x));
  case TLM_ACT_RELU6: return x < 0.0f ? 0.0f : (x > 6.0f ? 6.0f : x);
  default: return x;
  }
}

#endif
