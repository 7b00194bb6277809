/* pool.c - the tier-0 pooling (generic.h), built once per ISA like conv.c.
 *
 * Max and average pooling as tlm_ref_pool defines them: max propagates
 * NaN, average divides by the positions inside the input (padding not
 * counted) and sums in double. Per output pixel, channels in blocks of
 * OCB kept in a local array, the window outside. */
#include <math.h>

#include "block.h"
#include "generic.h"

#define PCB (4 * OCB) /* channels per block */

/* [lo, hi) of window positions k in [0, K) with 0 <= o*s - p + k < I */
static void pwindow(int64_t o, int32_t s, int32_t p, int64_t K, int64_t I, int64_t *lo,
                    int64_t *hi) {
  int64_t base = o * s - p;
  *lo = base < 0 ? -base : 0;
  *hi = I - base < K ? I - base : K;
  if (*hi < *lo) *hi = *lo;
}

void FN(tlm_generic_pool)(const tlm_pool_task *t, const tlm_pool_args *a, int64_t begin,
                          int64_t end) {
  /* a window of 0 is global: the whole input extent */
  int64_t K[3] = {t->KD ? t->KD : a->ID, t->KH ? t->KH : a->IH, t->KW ? t->KW : a->IW};
  int is_max = t->alg == TLM_POOL_MAX;
  for (int64_t r = begin; r < end; r++) {
    int64_t oh = r % a->OH, od = r / a->OH % a->OD, n = r / (a->OH * a->OD);
    int64_t lo[3], hi[3];
    pwindow(od, t->sd, t->pd, K[0], a->ID, &lo[0], &hi[0]);
    pwindow(oh, t->sh, t->ph, K[1], a->IH, &lo[1], &hi[1]);
    for (int64_t ow = 0; ow < a->OW; ow++) {
      pwindow(ow, t->sw, t->pw, K[2], a->IW, &lo[2], &hi[2]);
      int64_t count = (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]);
      float *dst = a->dst + n * a->sd[0] + od * a->sd[2] + oh * a->sd[3] + ow * a->sd[4];
      for (int64_t c0 = 0; c0 < t->C; c0 += PCB) {
        int cn = t->C - c0 < PCB ? (int)(t->C - c0) : PCB;
        float m[PCB];
        double s[PCB];
        for (int c = 0; c < cn; c++) m[c] = -INFINITY, s[c] = 0.0;
        for (int64_t kd = lo[0]; kd < hi[0]; kd++)
          for (int64_t kh = lo[1]; kh < hi[1]; kh++)
            for (int64_t kw = lo[2]; kw < hi[2]; kw++) {
              const float *x = a->src + n * a->ss[0] + c0 * a->ss[1] +
                               (od * t->sd - t->pd + kd) * a->ss[2] +
                               (oh * t->sh - t->ph + kh) * a->ss[3] +
                               (ow * t->sw - t->pw + kw) * a->ss[4];
              if (is_max) {
                for (int c = 0; c < cn; c++) {
                  float v = x[c * a->ss[1]];
                  m[c] = v != v || m[c] != m[c] ? NAN : (v > m[c] ? v : m[c]);
                }
              } else {
                for (int c = 0; c < cn; c++) s[c] += x[c * a->ss[1]];
              }
            }
        double inv = 1.0 / (double)(count ? count : 1);
        for (int c = 0; c < cn; c++)
          dst[(c0 + c) * a->sd[1]] = is_max ? m[c] : (float)(s[c] * inv);
      }
    }
  }
}
