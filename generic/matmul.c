/* matmul.c - the tier-0 matmul (generic.h), built once per ISA like conv.c.
 *
 * C (batch..., M, N) = act(A (batch..., M, K) x B (batch..., K, N) + bias)
 * + residual (has_residual 2: the residual inside the activation; 3: the
 * same, the residual being C itself), in the
 * order of tlm_ref_matmul. Register block: PB rows x
 * OCB columns (block.h), accumulated over all of K with a broadcast of A
 * and OCB columns of B: the Goto/BLIS outer product without packing, so B
 * is streamed from where it lies (L2 or L3) once per PB rows; enough for a
 * first answer. Iteration i of the parallel loop: column chunk i % nc of
 * NCHUNK columns, row block i / nc % mb of PB rows, batch i / (nc * mb),
 * so a single row (decode) still splits among threads by columns. */
#include <stddef.h>

#include "block.h"
#include "generic.h"

#define NCHUNK 256

static const float k_zero_row[1];

static inline __attribute__((always_inline)) void
mm_block(const tlm_matmul_task *t, const tlm_mm_args *a, int64_t ao, int64_t bo, int64_t co,
         int64_t ro, int64_t m0, int np, int64_t n0, int nn, const int full) {
  float acc[PB][OCB];
  tlm_gvec va[PB][2];
  tlm_gzero(va, acc, full);
  const float *ap[PB];
  int64_t as[PB];
  for (int p = 0; p < PB; p++) {
    ap[p] = p < np ? a->a + ao + (m0 + p) * a->sa[4] : k_zero_row;
    as[p] = p < np ? a->sa[5] : 0;
  }
  const float *bb = a->b + bo + n0 * a->sb[5];
  for (int64_t k = 0; k < a->K; k++) {
    const float *w = bb + k * a->sb[4];
    float x[PB];
    for (int p = 0; p < PB; p++) x[p] = ap[p][k * as[p]];
    tlm_gstep(va, acc, x, w, a->sb[5], nn, full);
  }
  if (full) tlm_gspill(va, acc);
  for (int p = 0; p < np; p++) {
    float *c = a->c + co + (m0 + p) * a->sc[4];
    const float *r = t->has_residual ? a->res + ro + (m0 + p) * a->sr[4] : NULL;
    for (int o = 0; o < nn; o++) {
      int64_t n = n0 + o;
      float v = acc[p][o];
      if (t->has_bias) v += a->bias[n * a->sbias];
      /* a convolution's order; 3: the residual is C itself, read before
       * it is written */
      if (r && t->has_residual >= 2) v += r[n * a->sr[5]];
      v = tlm_generic_act(t->act, v);
      if (r && t->has_residual == 1) v += r[n * a->sr[5]];
      c[n * a->sc[5]] = v;
    }
  }
}

void FN(tlm_generic_matmul)(const tlm_matmul_task *t, const tlm_mm_args *a, int64_t begin,
                            int64_t end) {
  int64_t nc = (a->N + NCHUNK - 1) / NCHUNK, mb = (a->M + PB - 1) / PB;
  for (int64_t i = begin; i < end; i++) {
    int64_t ci = i % nc, bi = i / nc / mb, m0 = i / nc % mb * PB;
    int64_t ao = 0, bo = 0, co = 0, ro = 0, q = bi;
    for (int d = t->nbatch - 1; d >= 0; d--) { /* the last batch dim fastest */
      int64_t x = q % t->batch[d];
      q /= t->batch[d];
      ao += x * a->sa[d], bo += x * a->sb[d], co += x * a->sc[d], ro += x * a->sr[d];
    }
    int np = a->M - m0 < PB ? (int)(a->M - m0) : PB;
    int64_t hi = (ci + 1) * NCHUNK < a->N ? (ci + 1) * NCHUNK : a->N;
    for (int64_t n0 = ci * NCHUNK; n0 < hi; n0 += OCB) {
      int nn = hi - n0 < OCB ? (int)(hi - n0) : OCB;
      if (nn == OCB && a->sb[5] == 1) mm_block(t, a, ao, bo, co, ro, m0, np, n0, nn, 1);
      else mm_block(t, a, ao, bo, co, ro, m0, np, n0, nn, 0);
    }
  }
}
