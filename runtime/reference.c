/* reference.c - triple-loop matmul with the epilogue, no tiling. */
#include "reference.h"

#include <math.h>
#include <stdlib.h>

float tlm_ref_activation(int act, float x) {
  switch (act) {
  case TLM_ACT_RELU: return x < 0.0f ? 0.0f : x; /* NaN stays NaN */
  case TLM_ACT_GELU_TANH:
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
  case TLM_ACT_SILU: return x / (1.0f + expf(-x));
  case TLM_ACT_RELU6: return x < 0.0f ? 0.0f : (x > 6.0f ? 6.0f : x);
  default: return x;
  }
}

static int64_t batch_off(const tlm_matmul_task *t, int64_t bi, const int64_t *s) {
  int64_t off = 0;
  for (int d = t->nbatch - 1; d >= 0; d--) {
    off += (bi % t->batch[d]) * s[d];
    bi /= t->batch[d];
  }
  return off;
}

void tlm_ref_matmul(const tlm_task *task, const tlm_mm_args *a) {
  const tlm_matmul_task *t = &task->u.mm;
  int64_t btot = tlm_task_batch_total(task);
  for (int64_t b = 0; b < btot; b++) {
    int64_t ao = batch_off(t, b, a->sa), bo = batch_off(t, b, a->sb);
    int64_t co = batch_off(t, b, a->sc), ro = batch_off(t, b, a->sr);
    for (int64_t m = 0; m < t->M; m++)
      for (int64_t n = 0; n < t->N; n++) {
        double acc = 0.0;
        for (int64_t k = 0; k < t->K; k++)
          acc += (double)a->a[ao + m * a->sa[4] + k * a->sa[5]] *
                 (double)a->b[bo + k * a->sb[4] + n * a->sb[5]];
        float x = (float)acc;
        if (t->has_bias) x += a->bias[n * a->sbias];
        if (t->has_residual >= 2) x += a->res[ro + m * a->sr[4] + n * a->sr[5]]; /* 3: C */
        x = tlm_ref_activation(t->act, x);
        if (t->has_residual == 1) x += a->res[ro + m * a->sr[4] + n * a->sr[5]];
        a->c[co + m * a->sc[4] + n * a->sc[5]] = x;
      }
  }
}

/* rotary position embedding: row r is token r / H, head r % H; pair (p, q)
 * of feature i turned by the table's angle i */
static void ref_rope(const tlm_task *task, const tlm_row_args *a) {
  const tlm_row_task *t = &task->u.row;
  int64_t H = a->mrows, half = a->cols / 2;
  for (int64_t r = 0; r < a->rows; r++) {
    int64_t tok = r / H, h = r % H;
    const float *x = a->x + tok * a->sx[0] + h * a->sxh;
    float *y = a->y + tok * a->sy[0] + h * a->syh;
    const float *tb = a->z + tok * a->sz[0];
    for (int64_t i = 0; i < half; i++) {
      int64_t p = t->rope_style == TLM_ROPE_INTERLEAVED ? 2 * i : i;
      int64_t q = t->rope_style == TLM_ROPE_INTERLEAVED ? 2 * i + 1 : i + half;
      double c = tb[i * a->sz[1]], sn = tb[(i + half) * a->sz[1]];
      double xp = x[p * a->sx[1]], xq = x[q * a->sx[1]]; /* both read first: y may be x */
      y[p * a->sy[1]] = (float)(xp * c - xq * sn);
      y[q * a->sy[1]] = (float)(xq * c + xp * sn);
    }
  }
}

void tlm_ref_row(const tlm_task *task, const tlm_row_args *a) {
  const tlm_row_task *t = &task->u.row;
  if (task->kind == TLM_OP_ROPE) {
    ref_rope(task, a);
    return;
  }
  for (int64_t r = 0; r < t->rows; r++) {
    const float *x = a->x + r * a->sx[0];
    float *y = a->y + r * a->sy[0];
    int64_t C = a->cols;
    if (task->kind == TLM_OP_ELTWISE) {
      const float *z = a->z ? a->z + r * a->sz[0] : NULL;
      for (int64_t c = 0; c < C; c++) {
        float v = tlm_ref_activation(t->act, x[c * a->sx[1]]);
        if (t->binary == TLM_BINARY_ADD) v += z[c * a->sz[1]];
        if (t->binary == TLM_BINARY_MUL) v *= z[c * a->sz[1]];
        y[c * a->sy[1]] = v;
      }
    } else if (task->kind == TLM_OP_SOFTMAX) {
      int64_t lim = C;
      if (t->causal) {
        lim = r % a->mrows + C - a->mrows + 1;
        if (lim > C) lim = C;
        if (lim < 0) lim = 0;
      }
      double mx = -INFINITY, sum = 0;
      for (int64_t c = 0; c < lim; c++) mx = fmax(mx, (double)t->scale * x[c * a->sx[1]]);
      for (int64_t c = 0; c < lim; c++) sum += exp((double)t->scale * x[c * a->sx[1]] - mx);
      /* read everything before writing: y may be x */
      for (int64_t c = 0; c < C; c++) {
        double v = c < lim ? exp((double)t->scale * x[c * a->sx[1]] - mx) / sum : 0.0;
        y[c * a->sy[1]] = (float)v;
      }
    } else {
      double mean = 0, var = 0;
      if (task->kind == TLM_OP_LAYERNORM) {
        for (int64_t c = 0; c < C; c++) mean += x[c * a->sx[1]];
        mean /= (double)C;
      }
      for (int64_t c = 0; c < C; c++) {
        double d = x[c * a->sx[1]] - mean;
        var += d * d;
      }
      var /= (double)C;
      double rs = 1.0 / sqrt(var + t->eps);
      for (int64_t c = 0; c < C; c++) {
        double v = (x[c * a->sx[1]] - mean) * rs * a->gamma[c * a->sg];
        if (task->kind == TLM_OP_LAYERNORM) v += a->beta[c * a->sb];
        y[c * a->sy[1]] = (float)v;
      }
    }
  }
}

double tlm_ref_conv_point(const tlm_conv_task *t, const tlm_conv_args *a, int64_t n, int64_t oc,
                          int64_t od, int64_t oh, int64_t ow, double *mag) {
  int64_t g = oc / t->OCg;
  double acc = 0, m = 0;
  for (int64_t icg = 0; icg < t->ICg; icg++) {
    int64_t ic = g * t->ICg + icg;
    for (int64_t kd = 0; kd < t->KD; kd++) {
      int64_t id = od * t->sd - t->pd + kd * t->dd;
      if (id < 0 || id >= a->ID) continue;
      for (int64_t kh = 0; kh < t->KH; kh++) {
        int64_t ih = oh * t->sh - t->ph + kh * t->dh;
        if (ih < 0 || ih >= a->IH) continue;
        for (int64_t kw = 0; kw < t->KW; kw++) {
          int64_t iw = ow * t->sw - t->pw + kw * t->dw;
          if (iw < 0 || iw >= a->IW) continue;
          double x = a->src[n * a->ss[0] + ic * a->ss[1] + id * a->ss[2] + ih * a->ss[3] +
                            iw * a->ss[4]];
          double w = a->wei[oc * a->sw[0] + icg * a->sw[1] + kd * a->sw[2] + kh * a->sw[3] +
                            kw * a->sw[4]];
          acc += x * w;
          m += fabs(x * w);
        }
      }
    }
  }
  if (t->has_bias) {
    acc += a->bias[oc * a->sbias];
    m += fabs(a->bias[oc * a->sbias]);
  }
  if (t->has_ss) {
    double sc = a->scale[oc * a->sscale], sh = a->shift[oc * a->sshift];
    acc = acc * sc + sh;
    m = m * fabs(sc) + fabs(sh);
  }
  if (t->has_residual) {
    double r = a->res[n * a->sr[0] + oc * a->sr[1] + od * a->sr[2] + oh * a->sr[3] + ow * a->sr[4]];
    acc += r;
    m += fabs(r);
  }
  if (mag) *mag = m;
  return acc;
}

void tlm_ref_conv(const tlm_task *task, const tlm_conv_args *a) {
  const tlm_conv_task *t = &task->u.conv;
  for (int64_t n = 0; n < a->N; n++)
    for (int64_t oc = 0; oc < (int64_t)t->G * t->OCg; oc++)
      for (int64_t od = 0; od < a->OD; od++)
        for (int64_t oh = 0; oh < a->OH; oh++)
          for (int64_t ow = 0; ow < a->OW; ow++) {
            float y = (float)tlm_ref_conv_point(t, a, n, oc, od, oh, ow, NULL);
            a->dst[n * a->sd[0] + oc * a->sd[1] + od * a->sd[2] + oh * a->sd[3] +
                   ow * a->sd[4]] = tlm_ref_activation(t->act, y);
          }
}

void tlm_ref_pool(const tlm_task *task, const tlm_pool_args *a) {
  const tlm_pool_task *t = &task->u.pool;
  int64_t K[3] = {t->KD ? t->KD : a->ID, t->KH ? t->KH : a->IH, t->KW ? t->KW : a->IW};
  for (int64_t n = 0; n < a->N; n++)
    for (int64_t c = 0; c < t->C; c++)
      for (int64_t od = 0; od < a->OD; od++)
        for (int64_t oh = 0; oh < a->OH; oh++)
          for (int64_t ow = 0; ow < a->OW; ow++) {
            double acc = t->alg == TLM_POOL_MAX ? -INFINITY : 0.0;
            int64_t count = 0;
            for (int64_t kd = 0; kd < K[0]; kd++) {
              int64_t id = od * t->sd - t->pd + kd;
              if (id < 0 || id >= a->ID) continue;
              for (int64_t kh = 0; kh < K[1]; kh++) {
                int64_t ih = oh * t->sh - t->ph + kh;
                if (ih < 0 || ih >= a->IH) continue;
                for (int64_t kw = 0; kw < K[2]; kw++) {
                  int64_t iw = ow * t->sw - t->pw + kw;
                  if (iw < 0 || iw >= a->IW) continue;
                  double x = a->src[n * a->ss[0] + c * a->ss[1] + id * a->ss[2] + ih * a->ss[3] +
                                    iw * a->ss[4]];
                  /* max propagates NaN, as oneDNN and PyTorch do */
                  acc = t->alg == TLM_POOL_MAX ? (x != x || acc != acc ? NAN : fmax(acc, x)) : acc + x;
                  count++;
                }
              }
            }
            if (t->alg == TLM_POOL_AVG) acc /= (double)(count ? count : 1);
            a->dst[n * a->sd[0] + c * a->sd[1] + od * a->sd[2] + oh * a->sd[3] + ow * a->sd[4]] =
                (float)acc;
          }
}

void tlm_ref_attention(const tlm_task *task, const tlm_attn_args *a) {
  const tlm_attn_task *t = &task->u.attn;
  int64_t G = a->Hq / a->Hkv, D = t->D, Dv = t->Dv;
  double *p = malloc(sizeof(double) * (size_t)(a->Tk > 0 ? a->Tk : 1));
  if (!p) return;
  for (int64_t b = 0; b < a->B; b++)
    for (int64_t h = 0; h < a->Hq; h++)
      for (int64_t i = 0; i < a->Tq; i++) {
        const float *q = a->q + b * a->sq[0] + h * a->sq[1] + i * a->sq[2];
        int64_t kh = h / G, lim = t->causal ? i + a->Tk - a->Tq + 1 : a->Tk;
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < lim; j++) {
          const float *k = a->k + b * a->sk[0] + kh * a->sk[1] + j * a->sk[2];
          double s = 0;
          for (int64_t c = 0; c < D; c++) s += (double)q[c * a->sq[3]] * k[c * a->sk[3]];
          p[j] = s * a->scale;
          if (p[j] > mx) mx = p[j];
        }
        for (int64_t j = 0; j < lim; j++) sum += (p[j] = exp(p[j] - mx));
        float *o = a->o + b * a->so[0] + h * a->so[1] + i * a->so[2];
        for (int64_t c = 0; c < Dv; c++) {
          double acc = 0;
          for (int64_t j = 0; j < lim; j++)
            acc += p[j] * a->v[b * a->sv[0] + kh * a->sv[1] + j * a->sv[2] + c * a->sv[3]];
          o[c * a->so[3]] = (float)(acc / sum);
        }
      }
  free(p);
}
