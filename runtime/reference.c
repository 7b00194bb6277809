/* reference.c - triple-loop matmul with the epilogue, no tiling. */
#include "reference.h"

#include <math.h>

float tlm_ref_activation(int act, float x) {
  switch (act) {
  case TLM_ACT_RELU: return x > 0.0f ? x : 0.0f;
  case TLM_ACT_GELU_TANH:
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
  case TLM_ACT_SILU: return x / (1.0f + expf(-x));
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
        x = tlm_ref_activation(t->act, x);
        if (t->has_residual) x += a->res[ro + m * a->sr[4] + n * a->sr[5]];
        a->c[co + m * a->sc[4] + n * a->sc[5]] = x;
      }
  }
}

void tlm_ref_row(const tlm_task *task, const tlm_row_args *a) {
  const tlm_row_task *t = &task->u.row;
  for (int64_t r = 0; r < t->rows; r++) {
    const float *x = a->x + r * a->sx[0];
    float *y = a->y + r * a->sy[0];
    int64_t C = t->cols;
    if (task->kind == TLM_OP_SOFTMAX) {
      int64_t lim = C;
      if (t->causal) {
        lim = r % t->mrows + C - t->mrows + 1;
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
