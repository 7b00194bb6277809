/* conv.c - the tier-0 convolution (generic.h), built once per ISA with
 * TLM_GENERIC_SUFFIX naming it and the ISA's -m flags (CMakeLists.txt).
 *
 * Register block: PB output pixels of one row x OCB output channels of one
 * group, accumulated over the window and the group's input channels: the
 * Goto/BLIS outer-product micro-kernel with the pixel as the row, the
 * channels as the vector axis. OCB is two vectors of the build's width
 * (AVX-512 32, AVX2 16, SSE 8), so PB * 2 = 8 accumulator vectors plus the
 * two weight vectors and a broadcast fit the 16 registers of AVX2 and SSE
 * (and half of AVX-512's 32). Depthwise convolutions (one input and one
 * output channel per group) take the channels of PB pixels as vectors
 * instead, the weights one vector per window position. Padding: a pixel
 * whose window position falls outside the input reads a block of zeros
 * (stride 0), so the inner loops have no branch. Sums in float, in the
 * order kd, kh, kw, input channel. */
#include <stddef.h>

#include "block.h"
#include "generic.h"

static const float k_zeros[OCB] __attribute__((aligned(64)));

/* [lo, hi) of window positions k in [0, K) with 0 <= o*s - p + k*d < I */
static void window(int64_t o, int32_t s, int32_t p, int32_t d, int32_t K, int64_t I, int64_t *lo,
                   int64_t *hi) {
  int64_t base = o * s - p;
  *lo = 0, *hi = K;
  while (*lo < K && base + *lo * d < 0) (*lo)++;
  while (*hi > *lo && base + (*hi - 1) * d >= I) (*hi)--;
}

/* the input of window column kw for PB output pixels from ow of the row
 * `row` (src at n, the block's first channel, id, ih): each pixel's
 * address and channel stride, or the zero block with stride 0 for a
 * pixel in the padding or past the np real ones */
static inline void pixels(const tlm_conv_task *t, const tlm_conv_args *a, const float *row,
                          int64_t ow, int np, int64_t kw, const float *xp[PB], int64_t xs[PB]) {
  for (int p = 0; p < PB; p++) {
    int64_t iw = (ow + p) * t->sw - t->pw + kw * t->dw;
    int in = p < np && iw >= 0 && iw < a->IW;
    xp[p] = in ? row + iw * a->ss[4] : k_zeros;
    xs[p] = in ? a->ss[1] : 0;
  }
}

/* whether a full block's epilogue is vector code straight from the
 * accumulators: channels-last output, unit-stride epilogue operands, an
 * activation that is a select per lane */
static int vec_epilogue(const tlm_conv_task *t, const tlm_conv_args *a) {
  return a->sd[1] == 1 && (!t->has_bias || a->sbias == 1) &&
         (!t->has_ss || (a->sscale == 1 && a->sshift == 1)) && (!t->has_residual || a->sr[1] == 1) &&
         (t->act == TLM_ACT_NONE || t->act == TLM_ACT_RELU || t->act == TLM_ACT_RELU6);
}

/* vec_epilogue's store of np pixels x OCB channels from oc from their
 * accumulator vectors */
static inline __attribute__((always_inline)) void
store_vec(const tlm_conv_task *t, const tlm_conv_args *a, tlm_gvec va[PB][2], int np, int64_t n,
          int64_t oc, int64_t od, int64_t oh, int64_t ow) {
  float *dst = a->dst + n * a->sd[0] + od * a->sd[2] + oh * a->sd[3] + ow * a->sd[4] + oc;
  const float *res =
      t->has_residual ? a->res + n * a->sr[0] + od * a->sr[2] + oh * a->sr[3] + ow * a->sr[4] + oc
                      : NULL;
  for (int j = 0; j < 2; j++) {
    tlm_gvec bias = t->has_bias ? tlm_gload(a->bias + oc + j * VL) : tlm_gsplat(0.0f);
    tlm_gvec scale = t->has_ss ? tlm_gload(a->scale + oc + j * VL) : tlm_gsplat(1.0f);
    tlm_gvec shift = t->has_ss ? tlm_gload(a->shift + oc + j * VL) : tlm_gsplat(0.0f);
    for (int p = 0; p < np; p++) {
      tlm_gvec v = va[p][j];
      if (t->has_bias) v += bias;
      if (t->has_ss) v = v * scale + shift;
      if (res) v += tlm_gload(res + p * a->sr[4] + j * VL);
      v = tlm_gact(t->act, v);
      __builtin_memcpy(dst + p * a->sd[4] + j * VL, &v, sizeof v);
    }
  }
}

/* the epilogue of np pixels x ocn channels from oc, then the store */
static void store_block(const tlm_conv_task *t, const tlm_conv_args *a, float acc[PB][OCB],
                        int np, int ocn, int64_t n, int64_t oc, int64_t od, int64_t oh,
                        int64_t ow) {
  if (ocn == OCB && vec_epilogue(t, a)) { /* channels-last: whole vectors */
    tlm_gvec va[PB][2];
    for (int p = 0; p < np; p++) va[p][0] = tlm_gload(acc[p]), va[p][1] = tlm_gload(acc[p] + VL);
    store_vec(t, a, va, np, n, oc, od, oh, ow);
    return;
  }
  for (int p = 0; p < np; p++) {
    float *dst = a->dst + n * a->sd[0] + od * a->sd[2] + oh * a->sd[3] + (ow + p) * a->sd[4];
    const float *res = t->has_residual ? a->res + n * a->sr[0] + od * a->sr[2] + oh * a->sr[3] +
                                             (ow + p) * a->sr[4]
                                       : NULL;
    for (int o = 0; o < ocn; o++) {
      int64_t c = oc + o;
      float v = acc[p][o];
      if (t->has_bias) v += a->bias[c * a->sbias];
      if (t->has_ss) v = v * a->scale[c * a->sscale] + a->shift[c * a->sshift];
      if (res) v += res[c * a->sr[1]];
      dst[c * a->sd[1]] = tlm_generic_act(t->act, v);
    }
  }
}

/* one block of a convolution with input channels per group: PB pixels from
 * ow, channels [oc, oc + ocn) of group g; `full`: ocn = OCB and the
 * weights unit-stride along output channels (constant, so the compiler
 * makes this two functions) */
static inline __attribute__((always_inline)) void
dense_block(const tlm_conv_task *t, const tlm_conv_args *a, int64_t n, int64_t od, int64_t oh,
            int64_t ow, int np, int64_t g, int64_t oc, int ocn, const int64_t kdr[2],
            const int64_t khr[2], const int full) {
  float acc[PB][OCB];
  tlm_gvec va[PB][2];
  tlm_gzero(va, acc, full);
  const int64_t icg_stride = a->ss[1];
  for (int64_t kd = kdr[0]; kd < kdr[1]; kd++) {
    int64_t id = od * t->sd - t->pd + kd * t->dd;
    for (int64_t kh = khr[0]; kh < khr[1]; kh++) {
      int64_t ih = oh * t->sh - t->ph + kh * t->dh;
      const float *row = a->src + n * a->ss[0] + g * t->ICg * icg_stride + id * a->ss[2] +
                         ih * a->ss[3];
      for (int64_t kw = 0; kw < t->KW; kw++) {
        const float *xp[PB];
        int64_t xs[PB];
        pixels(t, a, row, ow, np, kw, xp, xs);
        const float *wb = a->wei + oc * a->sw[0] + kd * a->sw[2] + kh * a->sw[3] + kw * a->sw[4];
        for (int64_t i = 0; i < t->ICg; i++) {
          const float *w = wb + i * a->sw[1];
          float x[PB];
          for (int p = 0; p < PB; p++) x[p] = xp[p][i * xs[p]];
          tlm_gstep(va, acc, x, w, a->sw[0], ocn, full);
        }
      }
    }
  }
  if (full && np == PB && vec_epilogue(t, a)) {
    store_vec(t, a, va, PB, n, oc, od, oh, ow);
    return;
  }
  if (full) tlm_gspill(va, acc);
  store_block(t, a, acc, np, ocn, n, oc, od, oh, ow);
}

/* one block of a depthwise convolution: PB pixels from ow, channels
 * [c, c + cn); `full`: cn = OCB and src's and the weights' channels
 * unit-stride */
static inline __attribute__((always_inline)) void
dw_block(const tlm_conv_task *t, const tlm_conv_args *a, int64_t n, int64_t od, int64_t oh,
         int64_t ow, int np, int64_t c, int cn, const int64_t kdr[2], const int64_t khr[2],
         const int full) {
  float acc[PB][OCB];
  tlm_gvec va[PB][2];
  tlm_gzero(va, acc, full);
  /* all PB pixels' windows inside the input row: first and last columns */
  const int interior = np == PB && ow * t->sw - t->pw >= 0 &&
                       (ow + PB - 1) * t->sw - t->pw + (t->KW - 1) * t->dw < a->IW;
  for (int64_t kd = kdr[0]; kd < kdr[1]; kd++) {
    int64_t id = od * t->sd - t->pd + kd * t->dd;
    for (int64_t kh = khr[0]; kh < khr[1]; kh++) {
      int64_t ih = oh * t->sh - t->ph + kh * t->dh;
      const float *row = a->src + n * a->ss[0] + c * a->ss[1] + id * a->ss[2] + ih * a->ss[3];
      if (full && interior && t->KW == 3 && t->sw == t->dw) {
        /* the 3-wide window with the pixel step equal to the window's
         * (stride 1, no dilation): pixel p at kw reads input column p + kw,
         * so the row needs PB + 2 loads per vector column, not 3 PB */
        const int64_t px = t->sw * a->ss[4];
        const float *x = row + (ow * t->sw - t->pw) * a->ss[4];
        const float *w = a->wei + c * a->sw[0] + kd * a->sw[2] + kh * a->sw[3];
        const tlm_gvec wa[3] = {tlm_gload(w), tlm_gload(w + a->sw[4]), tlm_gload(w + 2 * a->sw[4])};
        const tlm_gvec wb[3] = {tlm_gload(w + VL), tlm_gload(w + a->sw[4] + VL),
                                tlm_gload(w + 2 * a->sw[4] + VL)};
        for (int j = 0; j < PB + 2; j++, x += px) {
          tlm_gvec xa = tlm_gload(x), xb = tlm_gload(x + VL);
          for (int k = 0; k < 3; k++) {
            int p = j - k;
            if (p < 0 || p >= PB) continue; /* constant after unrolling */
            va[p][0] += xa * wa[k];
            va[p][1] += xb * wb[k];
          }
        }
        continue;
      }
      if (full && interior) { /* every pixel's window inside the row: addresses by adds */
        const int64_t px = t->sw * a->ss[4], kx = t->dw * a->ss[4];
        const float *xq[PB]; /* one pointer per pixel, stepped by adds */
        xq[0] = row + (ow * t->sw - t->pw) * a->ss[4];
        for (int p = 1; p < PB; p++) xq[p] = xq[p - 1] + px;
        const float *w = a->wei + c * a->sw[0] + kd * a->sw[2] + kh * a->sw[3];
        for (int64_t kw = 0; kw < t->KW; kw++, w += a->sw[4]) {
          tlm_gvec w0 = tlm_gload(w), w1 = tlm_gload(w + VL);
          for (int p = 0; p < PB; p++) {
            va[p][0] += tlm_gload(xq[p]) * w0;
            va[p][1] += tlm_gload(xq[p] + VL) * w1;
            xq[p] += kx;
          }
        }
        continue;
      }
      for (int64_t kw = 0; kw < t->KW; kw++) {
        const float *xp[PB];
        int64_t xs[PB];
        pixels(t, a, row, ow, np, kw, xp, xs);
        const float *w = a->wei + c * a->sw[0] + kd * a->sw[2] + kh * a->sw[3] + kw * a->sw[4];
        if (full) {
          tlm_gvec w0 = tlm_gload(w), w1 = tlm_gload(w + VL);
          for (int p = 0; p < PB; p++) {
            va[p][0] += tlm_gload(xp[p]) * w0;
            va[p][1] += tlm_gload(xp[p] + VL) * w1;
          }
        } else {
          for (int p = 0; p < PB; p++)
            for (int o = 0; o < cn; o++) acc[p][o] += xp[p][o * xs[p]] * w[o * a->sw[0]];
        }
      }
    }
  }
  if (full && np == PB && vec_epilogue(t, a)) {
    store_vec(t, a, va, PB, n, c, od, oh, ow);
    return;
  }
  if (full) tlm_gspill(va, acc);
  store_block(t, a, acc, np, cn, n, c, od, oh, ow);
}

void FN(tlm_generic_conv)(const tlm_conv_task *t, const tlm_conv_args *a, int64_t begin,
                          int64_t end) {
  int dw = t->ICg == 1 && t->OCg == 1;
  for (int64_t r = begin; r < end; r++) {
    int64_t oh = r % a->OH, od = r / a->OH % a->OD, n = r / (a->OH * a->OD);
    int64_t kdr[2], khr[2];
    window(od, t->sd, t->pd, t->dd, t->KD, a->ID, &kdr[0], &kdr[1]);
    window(oh, t->sh, t->ph, t->dh, t->KH, a->IH, &khr[0], &khr[1]);
    if (dw) {
      int unit = a->ss[1] == 1 && a->sw[0] == 1;
      for (int64_t c = 0; c < t->G; c += OCB) {
        int cn = t->G - c < OCB ? (int)(t->G - c) : OCB;
        for (int64_t ow = 0; ow < a->OW; ow += PB) {
          int np = a->OW - ow < PB ? (int)(a->OW - ow) : PB;
          if (unit && cn == OCB) dw_block(t, a, n, od, oh, ow, np, c, cn, kdr, khr, 1);
          else dw_block(t, a, n, od, oh, ow, np, c, cn, kdr, khr, 0);
        }
      }
      continue;
    }
    for (int64_t g = 0; g < t->G; g++)
      for (int64_t o0 = 0; o0 < t->OCg; o0 += OCB) {
        int ocn = t->OCg - o0 < OCB ? (int)(t->OCg - o0) : OCB;
        int64_t oc = g * t->OCg + o0;
        for (int64_t ow = 0; ow < a->OW; ow += PB) {
          int np = a->OW - ow < PB ? (int)(a->OW - ow) : PB;
          if (a->sw[0] == 1 && ocn == OCB)
            dense_block(t, a, n, od, oh, ow, np, g, oc, ocn, kdr, khr, 1);
          else dense_block(t, a, n, od, oh, ow, np, g, oc, ocn, kdr, khr, 0);
        }
      }
  }
}
