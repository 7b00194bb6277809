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
#define VL 16
#elif defined(__AVX__)
#define VL 8
#else
#define VL 4
#endif
#define OCB (2 * VL)
#define PB 4 /* rows (output pixels, matmul rows) of a register block */

/* one vector of the build (GCC vector extensions: the accumulators are
 * explicit vector values, so they stay in registers whatever the
 * auto-vectorizer's cost model says; with -ffp-contract=fast, GNU C's
 * default, a * b + c is one FMA) */
typedef float tlm_gvec __attribute__((vector_size(VL * 4)));

static inline tlm_gvec tlm_gload(const float *p) {
  tlm_gvec v;
  __builtin_memcpy(&v, p, sizeof v); /* unaligned load */
  return v;
}

static inline tlm_gvec tlm_gsplat(float x) { return (tlm_gvec){0} + x; }

/* the activations that are a select per lane (none, ReLU, ReLU6; NaN
 * stays NaN as in tlm_ref_activation: x < 0 is false for it) */
static inline tlm_gvec tlm_gact(int act, tlm_gvec x) {
  typedef int ivec __attribute__((vector_size(VL * 4)));
  if (act == TLM_ACT_RELU || act == TLM_ACT_RELU6) {
    ivec neg = x < tlm_gsplat(0.0f); /* all ones where x < 0 */
    x = (tlm_gvec)((ivec)x & ~neg);
    if (act == TLM_ACT_RELU6) {
      tlm_gvec six = tlm_gsplat(6.0f);
      ivec big = x > six;
      x = (tlm_gvec)(((ivec)x & ~big) | ((ivec)six & big));
    }
  }
  return x;
}

/* zeroed accumulators: the vectors of a full block, the floats of a tail
 * (full: acc is not read before tlm_gspill writes it) */
static inline void tlm_gzero(tlm_gvec va[PB][2], float acc[PB][OCB], const int full) {
  for (int p = 0; p < PB; p++) {
    va[p][0] = va[p][1] = tlm_gsplat(0.0f);
    for (int o = 0; o < OCB && !full; o++) acc[p][o] = 0.0f;
  }
}

/* one step of the outer product: x[p] times the row w of the block's
 * columns, into va (full: OCB unit-stride columns) or into acc (nn columns
 * of stride ws) */
static inline __attribute__((always_inline)) void
tlm_gstep(tlm_gvec va[PB][2], float acc[PB][OCB], const float x[PB], const float *w, int64_t ws,
          int nn, const int full) {
  if (full) {
    tlm_gvec w0 = tlm_gload(w), w1 = tlm_gload(w + VL);
    for (int p = 0; p < PB; p++) {
      tlm_gvec xb = tlm_gsplat(x[p]);
      va[p][0] += xb * w0;
      va[p][1] += xb * w1;
    }
  } else {
    for (int p = 0; p < PB; p++)
      for (int o = 0; o < nn; o++) acc[p][o] += x[p] * w[o * ws];
  }
}

/* PB x 2 vector accumulators, stored to a PB x OCB array for the epilogue */
static inline void tlm_gspill(tlm_gvec acc[PB][2], float out[PB][OCB]) {
  for (int p = 0; p < PB; p++) {
    __builtin_memcpy(out[p], &acc[p][0], sizeof acc[p][0]);
    __builtin_memcpy(out[p] + VL, &acc[p][1], sizeof acc[p][1]);
  }
}

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
