/* conv_as_matmul.c - convolutions that run as matrix products (internal;
 * declared in conv_as_matmul.h): a 1x1 convolution over its pixels, a
 * strided one or a small-output KxK one over a dense copy of the pixels it
 * reads (im2col). It rewrites a validated convolution into a matmul op over
 * views of the caller's memory, which tlm_run then plans like any matmul;
 * validation (validate.c) only checks the convolution. */
#include "conv_as_matmul.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "validate.h"

/* an n-D view of the caller's memory; a stride of an extent of 1 is made
 * the dense one (validation ignores it either way) */
static void view_nd(tlm_tensor *v, void *data, int nd, const int64_t *ext, const int64_t *str) {
  (void)tlm_tensor_dense(v, TLM_F32, nd, ext, data); /* extents were validated */
  for (int i = 0; i < nd; i++)
    if (ext[i] != 1) v->strides[i] = str[i];
}

/* The pixel loops (n, d, h, w) of a 1x1 unpadded convolution as matmul
 * rows: dims of extent 1 dropped, a dim folded into the next inner one
 * when every tensor's strides compose (a dense plane of dense images is
 * one row axis), the rest batch dims. str[t][i]: tensor t's stride of
 * pixel dim i (src's with the convolution stride applied); nt tensors.
 * Fills ext and out (per tensor) with the batch dims, then the pixel axis
 * last; returns their count (at least 1). */
static int pixel_dims(const int64_t pe[4], int64_t str[3][4], int nt, int64_t ext[4],
                      int64_t out[3][4]) {
  int n = 0;
  for (int i = 0; i < 4; i++) {
    if (pe[i] == 1) continue;
    ext[n] = pe[i];
    for (int t = 0; t < nt; t++) out[t][n] = str[t][i];
    n++;
  }
  if (n == 0) { /* one pixel */
    ext[0] = 1;
    for (int t = 0; t < nt; t++) out[t][0] = 0;
    return 1;
  }
  /* from the inside out: dim j-1 folds into dim j when its stride is dim
   * j's extent times dim j's stride in every tensor; the grown dim then
   * faces the next outer one */
  for (int j = n - 1; j > 0; j--) {
    int ok = 1;
    for (int t = 0; t < nt; t++)
      if (out[t][j - 1] != ext[j] * out[t][j]) ok = 0;
    if (!ok) continue;
    ext[j - 1] *= ext[j];
    for (int t = 0; t < nt; t++) out[t][j - 1] = out[t][j];
    for (int k = j; k + 1 < n; k++) {
      ext[k] = ext[k + 1];
      for (int t = 0; t < nt; t++) out[t][k] = out[t][k + 1];
    }
    n--;
  }
  return n;
}

/* which matmul a 1x1 convolution is (0: none): 1 dst (pixels, OC) = src
 * (pixels, IC) x W with dst's channels unit-stride, 2 dst (OC, pixels) =
 * W x src (IC, pixels) with its pixels unit-stride and no bias; and the
 * pixel dims as the caller's tensors allow (src dense if `dense_src`) */
typedef struct conv_mm {
  int form, np, nt;
  int64_t xe[5], xs[5], ye[5], ys[5], re[5], rs[5];
  int64_t ext[4], ps[3][4];
} conv_mm;

static int conv_mm_plan(const tlm_task *task, const tlm_op *op, const tlm_tensor *in,
                        const tlm_tensor *out, int dense_src, conv_mm *c) {
  const tlm_conv_task *t = &task->u.conv;
  memset(c, 0, sizeof *c);
  /* (a residual before the activation, as a convolution adds it, is the
   * internal matmul epilogue has_residual = 2: tlm_conv_mm_residual) */
  if (task->kind != TLM_OP_CONV || t->G != 1 || t->KD != 1 || t->KH != 1 || t->KW != 1 ||
      t->pd || t->ph || t->pw || t->has_ss)
    return 0;
  const tlm_conv_desc *d = &op->u.conv;
  const tlm_tensor *R = d->has_residual ? &in[2 + d->has_bias] : NULL;
  tlm_act_view(&in[0], d->layout, c->xe, c->xs);
  tlm_act_view(&out[0], d->layout, c->ye, c->ys);
  if (R) tlm_act_view(R, d->layout, c->re, c->rs);
  int64_t IC = c->xe[1], OC = c->ye[1];
  int64_t pe[4] = {c->ye[0], c->ye[2], c->ye[3], c->ye[4]};
  int64_t str[3][4] = {{c->xs[0], c->xs[2] * t->sd, c->xs[3] * t->sh, c->xs[4] * t->sw},
                       {c->ys[0], c->ys[2], c->ys[3], c->ys[4]},
                       {c->rs[0], c->rs[2], c->rs[3], c->rs[4]}};
  int64_t ext[4], ps[3][4];
  /* dst and residual alone decide the form */
  int64_t dstr[3][4];
  memcpy(dstr[0], str[1], sizeof dstr[0]);
  memcpy(dstr[1], str[2], sizeof dstr[1]);
  int np = pixel_dims(pe, dstr, R ? 2 : 1, ext, ps);
  int64_t P = ext[np - 1];
  if (OC == 1 || c->ys[1] == 1) c->form = 1;
  else if (P > 1 && ps[0][np - 1] == 1 && !d->has_bias) c->form = 2;
  else return 0;
  if (dense_src) { /* src as tlm_conv_gather writes it */
    int64_t Pall = c->ye[2] * c->ye[3] * c->ye[4];
    if (c->form == 1) {
      c->xs[1] = 1, c->xs[4] = IC, c->xs[3] = c->ye[4] * IC, c->xs[2] = c->ye[3] * c->ye[4] * IC;
      c->xs[0] = Pall * IC;
    } else {
      c->xs[4] = 1, c->xs[3] = c->ye[4], c->xs[2] = c->ye[3] * c->ye[4], c->xs[1] = Pall;
      c->xs[0] = IC * Pall;
    }
    str[0][0] = c->xs[0], str[0][1] = c->xs[2], str[0][2] = c->xs[3], str[0][3] = c->xs[4];
  }
  c->nt = R ? 3 : 2;
  c->np = pixel_dims(pe, str, c->nt, c->ext, c->ps);
  /* the caller's src must fold as dst does (else gather it: a strided 1x1
   * would run one small matmul per output row, streaming the weights each) */
  return dense_src || c->np <= np;
}

/* ---- KxK convolutions as im2col + matmul ---- */

/* A convolution with a KxK window (one group, no scale/shift, not a
 * scale and shift) whose output has few pixels M for its
 * reduction length K = KD*KH*KW*IC (M <= K / TLM_IM2COL_K_PER_M) runs as a
 * matmul over an im2col copy: (M, K) x W(K, OC). The direct kernels
 * stream the weights (a lone line every k step when OC is wide) once per
 * tile of pixels, and with few pixels that stream dominates, while the
 * matmul packs it into panels. Measured side by side on Zen 3 (AVX2, NHWC,
 * bench_conv, tlm/oneDNN): ResNet-50 3x3 at 7x7 pixels, 512 channels (K/M
 * 94) 0.37 -> 0.80; 14x14, 256 (K/M 12) 0.58 -> 0.70-0.95; 28x28, 128 (K/M
 * 1.5) 1.06-1.18 direct against 0.77-0.80 lowered, so that one stays. The
 * bound is that one CPU's measurement, to be checked on AVX-512 machines
 * (TLM_CONV_AS_MATMUL=0 turns every lowering off). The copy is M x K floats,
 * KH*KW times the input, bounded by TLM_CONV_GATHER_MAX_BYTES. The
 * weights must be one dense (K, OC) matrix: HWIO with (kd, kh, kw, ic)
 * composing, or OIHW with (ic, kd, kh, kw) composing (then the columns
 * follow that order); dst's channels unit-stride and its (and the
 * residual's) pixels one foldable axis. */
#define TLM_IM2COL_K_PER_M 4

typedef struct conv_im2col {
  int64_t M, K, IC, OC;
  int ic_major;           /* column order (ic, kd, kh, kw) (OIHW) instead of (kd, kh, kw, ic) */
  int64_t w_k, w_oc;      /* the weights' strides of K (its innermost) and OC */
  int64_t y_m, r_m;       /* dst's and the residual's pixel stride (one axis) */
  int64_t xe[5], xs[5];   /* src */
} conv_im2col;

static int im2col_plan(const tlm_task *task, const tlm_op *op, const tlm_tensor *in,
                       const tlm_tensor *out, conv_im2col *c) {
  const tlm_conv_task *t = &task->u.conv;
  memset(c, 0, sizeof *c);
  if (task->kind != TLM_OP_CONV || t->G != 1 || (t->KD == 1 && t->KH == 1 && t->KW == 1) ||
      t->has_ss)
    return 0;
  const tlm_conv_desc *d = &op->u.conv;
  const tlm_tensor *Wt = &in[1], *R = d->has_residual ? &in[2 + d->has_bias] : NULL;
  int64_t ye[5], ys[5], re[5], rs[5];
  tlm_act_view(&in[0], d->layout, c->xe, c->xs);
  tlm_act_view(&out[0], d->layout, ye, ys);
  if (R) tlm_act_view(R, d->layout, re, rs);
  c->IC = c->xe[1], c->OC = ye[1];
  c->M = ye[0] * ye[2] * ye[3] * ye[4];
  c->K = (int64_t)t->KD * t->KH * t->KW * c->IC;
  if (c->M * TLM_IM2COL_K_PER_M > c->K ||
      c->M * c->K > TLM_CONV_GATHER_MAX_BYTES / (int64_t)sizeof(float))
    return 0;
  if (c->OC > 1 && ys[1] != 1) return 0;
  /* dst (and residual) pixels (n, d, h, w) fold into one axis */
  int64_t pe[4] = {ye[0], ye[2], ye[3], ye[4]}, ext[4], ps[3][4];
  int64_t str[3][4] = {{ys[0], ys[2], ys[3], ys[4]}, {rs[0], rs[2], rs[3], rs[4]}, {0}};
  if (pixel_dims(pe, str, R ? 2 : 1, ext, ps) != 1) return 0;
  c->y_m = ps[0][0], c->r_m = R ? ps[1][0] : 0;
  if (R && c->OC > 1 && rs[1] != 1) return 0;
  /* the weights as one (K, OC) matrix */
  int S = Wt->ndim - 2;
  int64_t kext[3] = {1, 1, 1}, kstr[3] = {0, 0, 0};
  int64_t ic_s, oc_s;
  if (S < 1 || S > 3) return 0;
  if (d->weight_layout == TLM_WEIGHTS_HWIO) {
    for (int j = 0; j < S; j++) kext[j] = Wt->shape[j], kstr[j] = Wt->strides[j];
    ic_s = Wt->strides[S], oc_s = Wt->strides[S + 1];
    int64_t inner = c->IC * ic_s; /* (kd, kh, kw, ic) from the inside out */
    for (int j = S - 1; j >= 0; j--) {
      if (kext[j] > 1 && kstr[j] != inner) return 0;
      inner *= kext[j];
    }
    c->ic_major = 0, c->w_k = ic_s;
  } else {
    for (int j = 0; j < S; j++) kext[j] = Wt->shape[2 + j], kstr[j] = Wt->strides[2 + j];
    ic_s = Wt->strides[1], oc_s = Wt->strides[0];
    int64_t inner = kstr[S - 1]; /* (ic, kd, kh, kw) from the inside out */
    for (int j = S - 1; j >= 0; j--) {
      if (kext[j] > 1 && kstr[j] != inner) return 0;
      inner *= kext[j];
    }
    if (c->IC > 1 && ic_s != inner) return 0;
    c->ic_major = 1, c->w_k = kstr[S - 1];
  }
  c->w_oc = oc_s;
  return c->K > 1;
}

/* the im2col copy: row m = (n, od, oh, ow), columns in the weights' order,
 * zeros where the window lies in the padding; rows [m0, m1) of it */
static void im2col_fill(const tlm_conv_task *t, const conv_im2col *c, const float *x, float *buf,
                        int64_t m0, int64_t m1) {
  const int64_t *xe = c->xe, *xs = c->xs;
  int64_t IC = c->IC, OD = t->OD, OH = t->OH, OW = t->OW;
  float *o = buf + m0 * c->K;
  for (int64_t m = m0; m < m1; m++) {
    int64_t ow = m % OW, oh = m / OW % OH, od = m / (OW * OH) % OD, n = m / (OW * OH * OD);
    const float *xn = x + n * xs[0];
    if (!c->ic_major) {
      for (int64_t kd = 0; kd < t->KD; kd++)
        for (int64_t kh = 0; kh < t->KH; kh++)
          for (int64_t kw = 0; kw < t->KW; kw++, o += IC) {
            int64_t id = od * t->sd - t->pd + kd * t->dd, ih = oh * t->sh - t->ph + kh * t->dh,
                    iw = ow * t->sw - t->pw + kw * t->dw;
            if (id < 0 || id >= xe[2] || ih < 0 || ih >= xe[3] || iw < 0 || iw >= xe[4]) {
              memset(o, 0, sizeof(float) * (size_t)IC);
              continue;
            }
            const float *p = xn + id * xs[2] + ih * xs[3] + iw * xs[4];
            if (xs[1] == 1 || IC == 1) memcpy(o, p, sizeof(float) * (size_t)IC);
            else
              for (int64_t ic = 0; ic < IC; ic++) o[ic] = p[ic * xs[1]];
          }
    } else {
      for (int64_t ic = 0; ic < IC; ic++)
        for (int64_t kd = 0; kd < t->KD; kd++)
          for (int64_t kh = 0; kh < t->KH; kh++)
            for (int64_t kw = 0; kw < t->KW; kw++) {
              int64_t id = od * t->sd - t->pd + kd * t->dd, ih = oh * t->sh - t->ph + kh * t->dh,
                      iw = ow * t->sw - t->pw + kw * t->dw;
              *o++ = (id < 0 || id >= xe[2] || ih < 0 || ih >= xe[3] || iw < 0 || iw >= xe[4])
                         ? 0.0f
                         : xn[ic * xs[1] + id * xs[2] + ih * xs[3] + iw * xs[4]];
            }
    }
  }
}

size_t tlm_conv_gather_bytes(const tlm_task *task, const tlm_op *op, const tlm_tensor *in,
                             const tlm_tensor *out) {
  conv_mm c;
  conv_im2col ic;
  if (im2col_plan(task, op, in, out, &ic))
    return (size_t)(ic.M * ic.K) * sizeof(float);
  if (conv_mm_plan(task, op, in, out, 0, &c)) return 0; /* runs as is */
  if (!conv_mm_plan(task, op, in, out, 1, &c)) return 0; /* no matmul at all */
  int64_t n = c.xe[0] * c.xe[1] * c.ye[2] * c.ye[3] * c.ye[4];
  /* a bounded copy: beyond it the convolution kernels run, with no
   * allocation the caller did not ask for */
  if (n <= 0 || n > TLM_CONV_GATHER_MAX_BYTES / (int64_t)sizeof(float)) return 0;
  return (size_t)n * sizeof(float);
}

int64_t tlm_conv_gather_rows(const tlm_task *task, const tlm_op *op, const tlm_tensor *in,
                             const tlm_tensor *out) {
  conv_im2col icp;
  if (im2col_plan(task, op, in, out, &icp)) return icp.M;
  conv_mm c;
  if (!conv_mm_plan(task, op, in, out, 1, &c)) return 0;
  return c.ye[0] * c.ye[2] * c.ye[3]; /* (n, od, oh) output rows */
}

void tlm_conv_gather_range(const tlm_task *task, const tlm_op *op, const tlm_tensor *in,
                           const tlm_tensor *out, float *buf, int64_t begin, int64_t end) {
  const tlm_conv_task *t = &task->u.conv;
  if (begin < 0) begin = 0;
  conv_im2col icp;
  if (im2col_plan(task, op, in, out, &icp)) {
    if (end > icp.M) end = icp.M;
    if (begin < end) im2col_fill(t, &icp, in[0].data, buf, begin, end);
    return;
  }
  conv_mm c;
  if (!conv_mm_plan(task, op, in, out, 1, &c)) return;
  int64_t xe[5], xs[5]; /* the caller's src */
  tlm_act_view(&in[0], op->u.conv.layout, xe, xs);
  const float *x = in[0].data;
  int64_t N = xe[0], IC = xe[1], OD = c.ye[2], OH = c.ye[3], OW = c.ye[4];
  if (end > N * OD * OH) end = N * OD * OH;
  for (int64_t r = begin; r < end; r++) { /* r = (n, od, oh) */
    int64_t oh = r % OH, od = r / OH % OD, n = r / (OH * OD);
    const float *row = x + n * xs[0] + od * t->sd * xs[2] + oh * t->sh * xs[3];
    if (c.form == 1) { /* (n, od, oh, ow, ic) */
      float *o = buf + r * OW * IC;
      for (int64_t ow = 0; ow < OW; ow++, o += IC) {
        const float *p = row + ow * t->sw * xs[4];
        if (xs[1] == 1 || IC == 1) memcpy(o, p, sizeof(float) * (size_t)IC);
        else
          for (int64_t ic = 0; ic < IC; ic++) o[ic] = p[ic * xs[1]];
      }
    } else { /* (n, ic, od, oh, ow) */
      for (int64_t ic = 0; ic < IC; ic++) {
        float *o = buf + ((n * IC + ic) * OD + od) * OH * OW + oh * OW;
        const float *p = row + ic * xs[1];
        for (int64_t ow = 0; ow < OW; ow++) o[ow] = p[ow * t->sw * xs[4]];
      }
    }
  }
}

void tlm_conv_gather(const tlm_task *task, const tlm_op *op, const tlm_tensor *in,
                     const tlm_tensor *out, float *buf) {
  tlm_conv_gather_range(task, op, in, out, buf, 0, tlm_conv_gather_rows(task, op, in, out));
}

int tlm_conv_as_matmul(const tlm_task *task, const tlm_op *op, const tlm_tensor *in,
                       const tlm_tensor *out, float *gathered, tlm_op *mop, tlm_tensor min[4],
                       int *n_min, tlm_tensor *mout) {
  conv_im2col icp;
  if (gathered && im2col_plan(task, op, in, out, &icp)) {
    /* (M, K) x W(K, OC) -> dst (M, OC), bias and residual as for 1x1 */
    const tlm_conv_desc *d = &op->u.conv;
    int n = 0;
    *mop = tlm_op_matmul();
    mop->u.matmul.activation = d->activation;
    view_nd(&min[n++], gathered, 2, (int64_t[]){icp.M, icp.K}, (int64_t[]){icp.K, 1});
    view_nd(&min[n++], in[1].data, 2, (int64_t[]){icp.K, icp.OC}, (int64_t[]){icp.w_k, icp.w_oc});
    if (d->has_bias) {
      min[n++] = in[2];
      mop->u.matmul.has_bias = 1;
    }
    view_nd(mout, out[0].data, 2, (int64_t[]){icp.M, icp.OC}, (int64_t[]){icp.y_m, 1});
    if (d->has_residual) {
      view_nd(&min[n++], in[2 + d->has_bias].data, 2, (int64_t[]){icp.M, icp.OC},
              (int64_t[]){icp.r_m, 1});
      mop->u.matmul.has_residual = 1;
    }
    *n_min = n;
    return 1;
  }
  conv_mm c;
  if (!conv_mm_plan(task, op, in, out, gathered != NULL, &c)) return 0;
  const tlm_conv_desc *d = &op->u.conv;
  const tlm_tensor *Wt = &in[1], *Y = &out[0];
  const tlm_tensor *R = d->has_residual ? &in[2 + d->has_bias] : NULL;
  void *xdata = gathered ? (void *)gathered : in[0].data;
  int64_t IC = c.xe[1], OC = c.ye[1];
  int S = Wt->ndim - 2;
  int wo = d->weight_layout == TLM_WEIGHTS_OIHW ? 0 : S + 1;
  int wi = d->weight_layout == TLM_WEIGHTS_OIHW ? 1 : S;
  int64_t w_oc = Wt->strides[wo], w_ic = Wt->strides[wi];
  int nb = c.np - 1; /* batch dims; the last pixel dim is the row (or column) axis */
  int64_t P = c.ext[nb];
  int64_t e[6], s_[6];
  int n = 0;
  *mop = tlm_op_matmul();
  mop->u.matmul.activation = d->activation;
  for (int i = 0; i < nb; i++) e[i] = c.ext[i], s_[i] = c.ps[0][i];
  if (c.form == 1) {
    e[nb] = P, s_[nb] = c.ps[0][nb], e[nb + 1] = IC, s_[nb + 1] = c.xs[1];
    view_nd(&min[n++], xdata, nb + 2, e, s_);
    view_nd(&min[n++], Wt->data, 2, (int64_t[]){IC, OC}, (int64_t[]){w_ic, w_oc});
  } else {
    view_nd(&min[n++], Wt->data, 2, (int64_t[]){OC, IC}, (int64_t[]){w_oc, w_ic});
    e[nb] = IC, s_[nb] = c.xs[1], e[nb + 1] = P, s_[nb + 1] = c.ps[0][nb];
    view_nd(&min[n++], xdata, nb + 2, e, s_);
  }
  if (d->has_bias) {
    min[n++] = in[2];
    mop->u.matmul.has_bias = 1;
  }
  /* dst and residual: (batch..., P, OC) or (batch..., OC, P) */
  for (int k = 0; k < (R ? 2 : 1); k++) {
    int ti = k == 0 ? 1 : 2;
    int64_t cstr = k == 0 ? c.ys[1] : c.rs[1];
    for (int i = 0; i < nb; i++) e[i] = c.ext[i], s_[i] = c.ps[ti][i];
    if (c.form == 1)
      e[nb] = P, s_[nb] = c.ps[ti][nb], e[nb + 1] = OC, s_[nb + 1] = cstr;
    else
      e[nb] = OC, s_[nb] = cstr, e[nb + 1] = P, s_[nb + 1] = c.ps[ti][nb];
    if (k == 0) {
      view_nd(mout, Y->data, nb + 2, e, s_);
    } else {
      view_nd(&min[n++], R->data, nb + 2, e, s_);
      mop->u.matmul.has_residual = 1;
    }
  }
  *n_min = n;
  return 1;
}

/* Whether a KxK convolution with few output pixels (the im2col case above)
 * and a reduction of K = KD*KH*KW*ICg runs in channel blocks on target tg
 * (NULL: never) when it qualifies for them: where the register tile spans
 * a whole block (4 vectors of 16 lanes, room for 6 rows of them in 32
 * registers: AVX-512), so each input value is read once per block, while
 * AVX2's 8-lane tiles read it 2-4 times per block (an explanation, not a
 * measurement); and where one block's weights (K x 64 floats), which every
 * register tile of pixels reads again, fit the core's L2. Measured in
 * blocks over im2col + matmul with the weights constant, natively on the
 * Zen 5 VM (family 26 model 2, L2 1 MiB): bench_conv --layout nhwc, tlm /
 * oneDNN, ResNet-50's 3x3 res4 layers (K 2304: 576 KiB a block) at 10-18
 * px 0.68-0.86 -> 0.88-0.92 at 2 threads, 0.82-0.87 -> 0.87-0.94 at 1; in
 * the network (vision --profile, 2 threads) res4 0.78-0.88 -> 0.90-0.99,
 * but res5 (K 4608: 1.1 MiB a block) 0.91-0.95 -> 0.84-0.89, so it keeps
 * im2col here. An Intel Xeon (family 6 model 167, L2 2 MiB, vision
 * --profile, 2 threads, session 34): res4 1.24x faster in blocks, res5
 * even. Under AVX2 the Xeon ran res4 8% and res5 1.3x slower in blocks,
 * the Zen 5 res4 1.06-1.25x faster and res5 0.93-0.96x: AVX2 keeps
 * im2col. */
/* Where the vectors are wider than the FMA pipes (double-pumped:
 * AVX-512 on Zen 4), a register tile takes twice the cycles for each k
 * step's weight vectors, so it asks for its block's weights at half the
 * rate a full-width core does; beyond L2 they then come from L3 fast
 * enough, and the bound is L2 times vector bits over FMA bits. Measured
 * after codegen 33 (direct tiles skip kernel rows in the padding, which
 * im2col multiplies as zeros) on the Zen 4 (family 25 model 17, L2 1 MiB,
 * bench_conv --layout nhwc, tlm/oneDNN, im2col -> blocks, three runs):
 * ResNet-50's res5 3x3 (K 4608: 1.1 MiB a block) at 5x5-9x9 px, 1 thread
 * 0.72-1.01 -> 0.87-1.07, 2 threads 0.61-0.85 -> 0.81-1.00. Full-width
 * targets keep the L2 bound (the Zen 5 measurement above). */
static int few_pixels_direct(const tlm_target *tg, int64_t K) {
  if (!tg || tg->vec_regs < 32 || 4 * (int64_t)tg->vec_lanes < TLM_CONV_OC_BLOCK) return 0;
  int64_t l2 = tg->l2_bytes;
  l2 = (int64_t)((double)l2 / tlm_target_fma_width(tg));
  return K * TLM_CONV_OC_BLOCK * (int64_t)sizeof(float) <= l2;
}

int tlm_conv_oc_blocks(const tlm_task *task, const tlm_op *op, const tlm_target *tg) {
  const tlm_conv_task *t = &task->u.conv;
  const int32_t need = TLM_UNIT_CONV_SRC_C | TLM_UNIT_CONV_DST_C | TLM_UNIT_CONV_WEI_O |
                       TLM_UNIT_CONV_WEI_HWIO;
  if (task->kind != TLM_OP_CONV || op->u.conv.layout != TLM_LAYOUT_NHWC || t->G != 1 ||
      (t->unit & need) != need || (int64_t)t->KD * t->KH * t->KW < 2 ||
      t->OCg < TLM_CONV_OC_BLOCK_MIN || t->OCg % TLM_CONV_OC_BLOCK)
    return 0;
  /* few pixels for the reduction: the im2col lowering's case, when it
   * takes it (im2col_plan: no scale/shift, a copy within the bound), on
   * targets whose register tile does not span a block
   * (few_pixels_direct; measured against blocks in ResNet-50 at 2
   * threads on an Intel Xeon: the 7x7-9x9 512-channel 3x3 layers 1.3x
   * slower in blocks under AVX2, even natively) */
  int64_t M = t->N * t->OD * t->OH * t->OW, K = (int64_t)t->KD * t->KH * t->KW * t->ICg;
  if (!few_pixels_direct(tg, K) && M * TLM_IM2COL_K_PER_M <= K && !t->has_ss &&
      M * K <= TLM_CONV_GATHER_MAX_BYTES / (int64_t)sizeof(float))
    return 0;
  return t->OCg / TLM_CONV_OC_BLOCK;
}
