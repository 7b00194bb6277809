/* Softmax (plain, scaled, causal), layernorm and rmsnorm: default and random
 * schedules against the double-precision reference on odd shapes, in
 * place, with strided rows, and at numerically hard inputs (huge and tiny
 * magnitudes, large offsets, rows of length 1). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/validate.h"
#include "check.h"
#include "engine/engine.h"
#include "jit/jit.h"
#include "runtime/reference.h"

static uint64_t g_rng = 77;
static float frand(void) {
  return (float)((double)(tlm_rng_next(&g_rng) >> 40) / (double)(1 << 24) * 2.0 - 1.0);
}

typedef struct prob {
  tlm_op op;
  tlm_tensor in[3], out;
  int n_in;
  float *x, *y, *g, *b, *ref;
  int64_t n;
} prob;

/* x: (batch, R, C) with row stride `ld` >= C (padding between rows) */
static void make(prob *p, tlm_op_kind kind, int64_t batch, int64_t R, int64_t C, int64_t ld,
                 int causal, float scale, int inplace, float mag, float offset) {
  memset(p, 0, sizeof *p);
  p->op = tlm_op_rownorm(kind);
  p->op.u.rownorm.causal = causal;
  p->op.u.rownorm.scale = scale;
  p->n = batch * R * ld;
  p->x = malloc(sizeof(float) * (size_t)p->n);
  p->y = inplace ? p->x : malloc(sizeof(float) * (size_t)p->n);
  p->ref = malloc(sizeof(float) * (size_t)p->n);
  p->g = malloc(sizeof(float) * (size_t)C);
  p->b = malloc(sizeof(float) * (size_t)C);
  for (int64_t i = 0; i < p->n; i++) p->x[i] = offset + mag * frand();
  if (!inplace)
    for (int64_t i = 0; i < p->n; i++) p->y[i] = 12345.0f;
  for (int64_t i = 0; i < C; i++) p->g[i] = 1.0f + 0.5f * frand(), p->b[i] = frand();
  int64_t shape[3] = {batch, R, C}, strides[3] = {R * ld, ld, 1};
  tlm_tensor *t = &p->in[0];
  t->dtype = TLM_F32, t->ndim = 3, t->data = p->x;
  memcpy(t->shape, shape, sizeof shape);
  memcpy(t->strides, strides, sizeof strides);
  p->out = *t;
  p->out.data = p->y;
  p->n_in = 1;
  if (kind != TLM_OP_SOFTMAX) tlm_tensor_dense(&p->in[p->n_in++], TLM_F32, 1, &C, p->g);
  if (kind == TLM_OP_LAYERNORM) tlm_tensor_dense(&p->in[p->n_in++], TLM_F32, 1, &C, p->b);
  /* the reference, from the untouched input */
  tlm_task task;
  tlm_row_args args;
  char err[256];
  if (tlm_validate_row(&p->op, p->in, p->n_in, &p->out, 1, &task, &args, err, sizeof err) == 0) {
    args.y = p->ref;
    tlm_ref_row(&task, &args);
  }
}

static void drop(prob *p) {
  if (p->y != p->x) free(p->y);
  free(p->x);
  free(p->ref);
  free(p->g);
  free(p->b);
}

/* largest error over the (batch, R, C) elements, relative to 1 + |ref| */
static double error(const prob *p) {
  const tlm_tensor *t = &p->out;
  double worst = 0;
  for (int64_t i = 0; i < t->shape[0] * t->shape[1]; i++)
    for (int64_t c = 0; c < t->shape[2]; c++) {
      int64_t at = i * t->strides[1] + c;
      double e = fabs((double)p->y[at] - p->ref[at]) / (1.0 + fabs((double)p->ref[at]));
      if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
    }
  return worst;
}

#define TOL 1e-4

/* eltwise: every activation with no binary op, add and mul, z of x's
 * shape or broadcast over rows, in place on x or z, default and random
 * schedules, against tlm_ref_row */
static void eltwise(tlm_runtime *rt, int *checked) {
  static const int64_t shapes[][2] = {{1, 1}, {3, 17}, {5, 64}, {64, 1000}, {2, 4099}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
    for (int act = 0; act < TLM_ACT_COUNT_; act++)
      for (int bin = 0; bin < 3; bin++)
        for (int variant = 0; variant < 4; variant++) {
          int64_t R = shapes[si][0], C = shapes[si][1], n = R * C;
          /* 0: out of place; 1: z broadcast over rows; 2: y is x; 3: y is z */
          int bcast = variant == 1, inplace = variant >= 2;
          float *x = malloc(sizeof(float) * (size_t)n), *z = malloc(sizeof(float) * (size_t)n);
          float *y = malloc(sizeof(float) * (size_t)n), *ref = malloc(sizeof(float) * (size_t)n);
          for (int64_t i = 0; i < n; i++) x[i] = 6.0f * frand(), z[i] = 2.0f * frand();
          tlm_op op = tlm_op_eltwise((tlm_activation)act, (tlm_binary)bin);
          tlm_tensor in[2], out;
          tlm_tensor_dense(&in[0], TLM_F32, 2, (int64_t[]){R, C}, x);
          if (bcast) tlm_tensor_dense(&in[1], TLM_F32, 1, &C, z);
          else tlm_tensor_dense(&in[1], TLM_F32, 2, (int64_t[]){R, C}, z);
          float *yp = variant == 2 ? x : variant == 3 ? (bin ? z : x) : y;
          tlm_tensor_dense(&out, TLM_F32, 2, (int64_t[]){R, C}, yp);
          tlm_task task;
          tlm_row_args args;
          char err[256];
          tlm_status st = tlm_validate_row(&op, in, bin ? 2 : 1, &out, 1, &task, &args, err, sizeof err);
          CHECK(st == TLM_OK, "eltwise validate: %s", err);
          if (st == TLM_OK) {
            args.y = ref;
            tlm_ref_row(&task, &args);
            st = tlm_run(rt, &op, in, bin ? 2 : 1, &out, 1);
            double worst = 0;
            for (int64_t i = 0; i < n && st == TLM_OK; i++) {
              double e = fabs((double)yp[i] - ref[i]) / (1.0 + fabs((double)ref[i]));
              if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
            }
            CHECK(st == TLM_OK && worst <= 1e-5, "eltwise act %d bin %d %lldx%lld bcast %d "
                  "inplace %d: %s err %g", act, bin, (long long)R, (long long)C, bcast, inplace,
                  tlm_last_error(rt), worst);
            (*checked)++;
            /* a random schedule, out of place */
            if (yp == y) {
              tlm_space sp;
              tlm_space_init(&sp, &task, &rt->target);
              tlm_schedule sched;
              tlm_space_sample(&sp, &g_rng, &sched);
              tlm_kernel *k;
              memset(y, 0, sizeof(float) * (size_t)n);
              st = tlm_validate_row(&op, in, bin ? 2 : 1, &out, 1, &task, &args, err, sizeof err);
              if (st == TLM_OK) st = tlm_engine_kernel(rt, &task, &sched, &k, err, sizeof err);
              if (st == TLM_OK) st = tlm_engine_exec(rt, k, &task, &args, err, sizeof err);
              worst = 0;
              for (int64_t i = 0; i < n && st == TLM_OK; i++) {
                double e = fabs((double)y[i] - ref[i]) / (1.0 + fabs((double)ref[i]));
                if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
              }
              CHECK(st == TLM_OK && worst <= 1e-5, "eltwise random schedule: %s err %g", err,
                    worst);
              (*checked)++;
            }
          }
          free(x), free(z), free(y), free(ref);
        }
  /* bad input: wrong input count, z of the wrong shape, y overlapping z */
  float a[12], b[12], c[12];
  for (int i = 0; i < 12; i++) a[i] = b[i] = frand();
  tlm_tensor X, Z, Y, Zbad;
  tlm_tensor_dense(&X, TLM_F32, 2, (int64_t[]){3, 4}, a);
  tlm_tensor_dense(&Z, TLM_F32, 2, (int64_t[]){3, 4}, b);
  tlm_tensor_dense(&Zbad, TLM_F32, 2, (int64_t[]){2, 4}, b);
  tlm_tensor_dense(&Y, TLM_F32, 2, (int64_t[]){3, 4}, c);
  tlm_op add = tlm_op_eltwise(TLM_ACT_NONE, TLM_BINARY_ADD);
  CHECK(tlm_run(rt, &add, &X, 1, &Y, 1) == TLM_ERR_INVALID_ARGUMENT, "add without z");
  tlm_tensor in2[2] = {X, Zbad};
  CHECK(tlm_run(rt, &add, in2, 2, &Y, 1) == TLM_ERR_SHAPE_MISMATCH, "z of 2 rows for 3");
  tlm_tensor Yz = Y;
  Yz.data = b + 1;
  in2[1] = Z;
  CHECK(tlm_run(rt, &add, in2, 2, &Yz, 1) == TLM_ERR_ALIASING, "y overlapping z");
  /* y written while a broadcast z (row 0 of y) is still being read */
  {
    float yy[32], xx[32];
    for (int i = 0; i < 32; i++) xx[i] = (float)i, yy[i] = 100.0f + (float)i;
    tlm_tensor Xb, Yb, Zb;
    tlm_tensor_dense(&Xb, TLM_F32, 2, (int64_t[]){4, 8}, xx);
    tlm_tensor_dense(&Yb, TLM_F32, 2, (int64_t[]){4, 8}, yy);
    tlm_tensor_dense(&Zb, TLM_F32, 2, (int64_t[]){1, 8}, yy);
    tlm_tensor inb[2] = {Xb, Zb};
    CHECK(tlm_run(rt, &add, inb, 2, &Yb, 1) == TLM_ERR_ALIASING, "y over a broadcast z accepted");
    /* z repeating every 3 of 6 rows: refused, naming z */
    float z3[24] = {0}, x6[48] = {0}, y6[48];
    tlm_tensor X6, Y6, Z3;
    tlm_tensor_dense(&X6, TLM_F32, 3, (int64_t[]){2, 3, 8}, x6);
    tlm_tensor_dense(&Y6, TLM_F32, 3, (int64_t[]){2, 3, 8}, y6);
    tlm_tensor_dense(&Z3, TLM_F32, 2, (int64_t[]){3, 8}, z3);
    tlm_tensor in6[2] = {X6, Z3};
    CHECK(tlm_run(rt, &add, in6, 2, &Y6, 1) == TLM_ERR_UNSUPPORTED &&
              strstr(tlm_last_error(rt), "z "),
          "partial z broadcast: %s", tlm_last_error(rt));
  }
  tlm_op bad = tlm_op_eltwise((tlm_activation)99, TLM_BINARY_NONE);
  CHECK(tlm_run(rt, &bad, &X, 1, &Y, 1) == TLM_ERR_INVALID_ARGUMENT, "activation 99");
}

/* The NaN rule and exact zeros (issue #20): NaN in, NaN out for every
 * activation (relu's max used to turn it into 0); a masked logit of -inf
 * gets probability exactly 0; an eltwise z of shape (R, 1) or (1, 1)
 * broadcasts as documented. */
static void edges(tlm_runtime *rt) {
  static const tlm_activation acts[] = {TLM_ACT_RELU, TLM_ACT_RELU6, TLM_ACT_GELU_TANH,
                                        TLM_ACT_SILU, TLM_ACT_NONE};
  for (size_t i = 0; i < sizeof acts / sizeof *acts; i++) {
    float x[19], y[19];
    for (int j = 0; j < 19; j++) x[j] = (float)j - 9.0f;
    x[3] = NAN, x[17] = NAN; /* in a full vector and in the tail */
    tlm_op op = tlm_op_eltwise(acts[i], TLM_BINARY_NONE);
    tlm_tensor X, Y;
    tlm_tensor_dense(&X, TLM_F32, 1, (int64_t[]){19}, x);
    tlm_tensor_dense(&Y, TLM_F32, 1, (int64_t[]){19}, y);
    CHECK(tlm_run(rt, &op, &X, 1, &Y, 1) == TLM_OK, "eltwise: %s", tlm_last_error(rt));
    CHECK(isnan(y[3]) && isnan(y[17]), "activation %d: NaN in gave %g, %g", (int)acts[i], y[3],
          y[17]);
    CHECK(!isnan(y[4]) && (acts[i] != TLM_ACT_RELU || y[0] == 0.0f), "activation %d: %g, %g",
          (int)acts[i], y[0], y[4]);
    CHECK(tlm_ref_activation(acts[i], NAN) != tlm_ref_activation(acts[i], NAN),
          "reference activation %d: NaN in, not NaN out", (int)acts[i]);
  }
  {
    float x[2 * 21], y[2 * 21];
    for (int j = 0; j < 42; j++) x[j] = (float)(j % 5) * 0.25f;
    x[4] = -INFINITY, x[20] = -INFINITY, x[21 + 7] = -1e30f; /* masked logits */
    tlm_op op = tlm_op_rownorm(TLM_OP_SOFTMAX);
    tlm_tensor X, Y;
    tlm_tensor_dense(&X, TLM_F32, 2, (int64_t[]){2, 21}, x);
    tlm_tensor_dense(&Y, TLM_F32, 2, (int64_t[]){2, 21}, y);
    CHECK(tlm_run(rt, &op, &X, 1, &Y, 1) == TLM_OK, "softmax: %s", tlm_last_error(rt));
    CHECK(y[4] == 0.0f && y[20] == 0.0f && y[21 + 7] == 0.0f,
          "masked logits: probabilities %g, %g, %g, not 0", y[4], y[20], y[21 + 7]);
    double sum = 0;
    for (int j = 0; j < 21; j++) sum += y[j];
    CHECK(fabs(sum - 1.0) < 1e-5, "softmax row sums to %g", sum);
  }
  for (int zr = 0; zr < 2; zr++) { /* z (R, 1), then (1, 1) */
    enum { R = 5, C = 37 };
    float x[R * C], z[R], y[R * C];
    for (int j = 0; j < R * C; j++) x[j] = (float)j;
    for (int j = 0; j < R; j++) z[j] = 1000.0f * (float)(j + 1);
    tlm_op op = tlm_op_eltwise(TLM_ACT_NONE, TLM_BINARY_MUL);
    tlm_tensor in[2], Y;
    tlm_tensor_dense(&in[0], TLM_F32, 2, (int64_t[]){R, C}, x);
    tlm_tensor_dense(&in[1], TLM_F32, 2, (int64_t[]){zr ? 1 : R, 1}, z);
    tlm_tensor_dense(&Y, TLM_F32, 2, (int64_t[]){R, C}, y);
    CHECK(tlm_run(rt, &op, in, 2, &Y, 1) == TLM_OK, "z (%d, 1): %s", zr ? 1 : R, tlm_last_error(rt));
    int wrong = 0;
    for (int r = 0; r < R; r++)
      for (int c = 0; c < C; c++) wrong += y[r * C + c] != x[r * C + c] * z[zr ? 0 : r];
    CHECK(wrong == 0, "z (%d, 1): %d wrong elements", zr ? 1 : R, wrong);
  }
}

/* Rotary embeddings: both pair styles, odd token and head counts, D/2 odd
 * (masked tails), x inside a fused QKV buffer, in place, a non-unit
 * feature stride, the table a view starting at a position; default and
 * random schedules; a second position reuses the kernel. Elements of the
 * buffer outside y must be left as they were. */
static void rope(tlm_runtime *rt, int *checked) {
  static const int64_t shapes[][3] = {{1, 1, 2}, {3, 5, 6}, {7, 3, 64}, {5, 4, 34}, {2, 12, 128}, {9, 2, 18}};
  for (int style = 0; style < 2; style++)
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
      for (int layout = 0; layout < 4; layout++) {
        int64_t T = shapes[si][0], H = shapes[si][1], D = shapes[si][2];
        /* 0: dense, out of place; 1: Q of a fused (T, 3, H, D) QKV buffer, out of
         * place into a dense y; 2: the same in place; 3: feature stride 2 */
        int64_t fs = layout == 3 ? 2 : 1, ts = (layout == 1 || layout == 2 ? 3 : 1) * H * D * fs;
        int64_t n = T * ts, P = T + 5, pos = 4, tstride = D + 3;
        float *buf = malloc(sizeof(float) * (size_t)n), *yb = malloc(sizeof(float) * (size_t)n);
        float *ref = malloc(sizeof(float) * (size_t)n), *tab = malloc(sizeof(float) * (size_t)(P * tstride));
        for (int64_t i = 0; i < n; i++) buf[i] = 3.0f * frand(), yb[i] = 7.0f;
        for (int64_t p = 0; p < P; p++)
          for (int64_t i = 0; i < D / 2; i++) {
            double th = (double)p * pow(10000.0, -2.0 * (double)i / (double)D);
            tab[p * tstride + i] = (float)cos(th);
            tab[p * tstride + D / 2 + i] = (float)sin(th);
          }
        float *x = buf + (layout == 1 || layout == 2 ? 0 : 0);
        float *y = layout == 2 ? x : yb;
        tlm_tensor in[2], out;
        in[0] = (tlm_tensor){TLM_F32, 3, {T, H, D}, {ts, D * fs, fs}, x, TLM_DEVICE_CPU, 0};
        in[1] = (tlm_tensor){TLM_F32, 2, {T, D}, {tstride, 1}, tab + pos * tstride, TLM_DEVICE_CPU, 0};
        out = layout == 2 ? in[0] : (tlm_tensor){TLM_F32, 3, {T, H, D}, {ts, D * fs, fs}, y, TLM_DEVICE_CPU, 0};
        tlm_op op = tlm_op_rope((tlm_rope_style)style);
        tlm_task task;
        tlm_row_args args;
        char err[256];
        tlm_status st = tlm_validate_rope(&op, in, 2, &out, 1, &task, &args, err, sizeof err);
        CHECK(st == TLM_OK, "rope validate: %s", err);
        if (st != TLM_OK) goto next;
        /* the reference into a copy of y's buffer */
        memcpy(ref, layout == 2 ? buf : yb, sizeof(float) * (size_t)n);
        args.y = ref;
        tlm_ref_row(&task, &args);
        for (int rs = 0; rs < 2; rs++) { /* default, then a random schedule */
          float *ybuf = layout == 2 ? buf : yb;
          float *save = malloc(sizeof(float) * (size_t)n);
          memcpy(save, buf, sizeof(float) * (size_t)n);
          if (rs == 0) {
            st = tlm_run(rt, &op, in, 2, &out, 1);
          } else {
            tlm_space sp;
            tlm_space_init(&sp, &task, &rt->target);
            tlm_schedule sched;
            tlm_space_sample(&sp, &g_rng, &sched);
            tlm_kernel *k;
            if (layout != 2) for (int64_t i = 0; i < n; i++) yb[i] = 7.0f;
            st = tlm_validate_rope(&op, in, 2, &out, 1, &task, &args, err, sizeof err);
            if (st == TLM_OK) st = tlm_engine_kernel(rt, &task, &sched, &k, err, sizeof err);
            if (st == TLM_OK) st = tlm_engine_exec(rt, k, &task, &args, err, sizeof err);
          }
          double worst = 0;
          for (int64_t i = 0; i < n && st == TLM_OK; i++) {
            double e = fabs((double)ybuf[i] - ref[i]) / (1.0 + fabs((double)ref[i]));
            if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
          }
          CHECK(st == TLM_OK && worst <= 1e-5, "rope style %d %lldx%lldx%lld layout %d %s: %s err %g",
                style, (long long)T, (long long)H, (long long)D, layout, rs ? "random" : "default",
                rs ? err : tlm_last_error(rt), worst);
          (*checked)++;
          memcpy(buf, save, sizeof(float) * (size_t)n); /* in place: x again for the next run */
          free(save);
        }
        /* another position (table view, data pointer only): no new kernel */
        if (layout == 0) {
          tlm_stats s0, s1;
          tlm_get_stats(rt, &s0);
          in[1].data = tab + 0;
          st = tlm_run(rt, &op, in, 2, &out, 1);
          tlm_get_stats(rt, &s1);
          CHECK(st == TLM_OK && s1.compiles == s0.compiles, "rope at another position compiled %llu",
                (unsigned long long)(s1.compiles - s0.compiles));
        }
      next:
        free(buf), free(yb), free(ref), free(tab);
      }
  /* bad input */
  float x[2 * 3 * 8], t[2 * 8], y[2 * 3 * 8];
  tlm_tensor X = {TLM_F32, 3, {2, 3, 8}, {24, 8, 1}, x, TLM_DEVICE_CPU, 0}, Tb = {TLM_F32, 2, {2, 8}, {8, 1}, t, TLM_DEVICE_CPU, 0};
  tlm_tensor Y = {TLM_F32, 3, {2, 3, 8}, {24, 8, 1}, y, TLM_DEVICE_CPU, 0}, in2[2] = {X, Tb};
  tlm_op op = tlm_op_rope(TLM_ROPE_NEOX);
  CHECK(tlm_run(rt, &op, in2, 1, &Y, 1) == TLM_ERR_INVALID_ARGUMENT, "rope without a table");
  tlm_tensor X7 = {TLM_F32, 3, {2, 3, 7}, {21, 7, 1}, x, TLM_DEVICE_CPU, 0}, Y7 = {TLM_F32, 3, {2, 3, 7}, {21, 7, 1}, y, TLM_DEVICE_CPU, 0};
  tlm_tensor T7 = {TLM_F32, 2, {2, 7}, {7, 1}, t, TLM_DEVICE_CPU, 0}, in7[2] = {X7, T7};
  CHECK(tlm_run(rt, &op, in7, 2, &Y7, 1) == TLM_ERR_SHAPE_MISMATCH, "rope of odd D");
  tlm_tensor T3 = {TLM_F32, 2, {3, 8}, {8, 1}, y, TLM_DEVICE_CPU, 0}, in3[2] = {X, T3};
  CHECK(tlm_run(rt, &op, in3, 2, &Y, 1) == TLM_ERR_SHAPE_MISMATCH, "table of 3 rows for 2 tokens");
  tlm_tensor X2 = {TLM_F32, 2, {2, 8}, {8, 1}, x, TLM_DEVICE_CPU, 0}, Y2 = {TLM_F32, 2, {2, 8}, {8, 1}, y, TLM_DEVICE_CPU, 0};
  tlm_tensor i22[2] = {X2, Tb};
  CHECK(tlm_run(rt, &op, i22, 2, &Y2, 1) == TLM_ERR_INVALID_ARGUMENT, "rope of a 2-dim x");
  tlm_tensor Tover = {TLM_F32, 2, {2, 8}, {8, 1}, y, TLM_DEVICE_CPU, 0}, io[2] = {X, Tover};
  CHECK(tlm_run(rt, &op, io, 2, &Y, 1) == TLM_ERR_ALIASING, "y over the table");
  tlm_op bad = tlm_op_rope((tlm_rope_style)7);
  CHECK(tlm_run(rt, &bad, in2, 2, &Y, 1) == TLM_ERR_INVALID_ARGUMENT, "rope style 7");
}

int main(void) {
  if (check_isa_unsupported()) return CHECK_SKIP;
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.cache_dir = "none";
  cfg.model_path = "none";
  cfg.num_threads = 2;
  tlm_runtime *rt;
  if (tlm_create(&cfg, &rt)) return 1;
  /* the ISA cap reaches LLVM: no feature above it stays enabled */
  {
    const char *f = tlm_jit_features(rt->jit);
    int isa = rt->target.isa;
    CHECK(isa == TLM_ISA_AVX512 || !strstr(f, "+avx512f"), "avx512f on for %s", tlm_isa_name(isa));
    CHECK(isa >= TLM_ISA_AVX2 || (!strstr(f, "+avx2") && !strstr(f, "+fma,") && !strstr(f, "+avx,")),
          "AVX features on for %s", tlm_isa_name(isa));
    CHECK(rt->target.vec_lanes == (isa == TLM_ISA_AVX512 ? 16 : isa == TLM_ISA_AVX2 ? 8
                                   : isa == TLM_ISA_SSE  ? 4 : 1), "lanes %d for %s",
          rt->target.vec_lanes, tlm_isa_name(isa));
  }
  static const int64_t rows[] = {1, 2, 3, 7, 17, 64, 127};
  static const int64_t cols[] = {1, 2, 3, 5, 16, 17, 31, 64, 100, 257, 768, 1000};
  static const tlm_op_kind kinds[] = {TLM_OP_SOFTMAX, TLM_OP_LAYERNORM, TLM_OP_RMSNORM};
  int checked = 0;
  for (int k = 0; k < 3; k++)
    for (int ri = 0; ri < 7; ri++)
      for (int ci = 0; ci < 12; ci++) {
        int64_t R = rows[ri], C = cols[ci];
        int causal = kinds[k] == TLM_OP_SOFTMAX && (ri + ci) % 2;
        int inplace = (ri + ci) % 3 == 0;
        int64_t ld = C + (ci % 2 ? 3 : 0);
        prob p;
        make(&p, kinds[k], 1 + ri % 2, R, C, ld, causal, causal ? 0.125f : 1.0f, inplace, 3.0f, 0);
        /* the default rule through tlm_run */
        tlm_status st = tlm_run(rt, &p.op, p.in, p.n_in, &p.out, 1);
        double e = st == TLM_OK ? error(&p) : INFINITY;
        CHECK(st == TLM_OK && e <= TOL, "kind %d %lldx%lld causal %d inplace %d: %s error %g",
              kinds[k], (long long)R, (long long)C, causal, inplace, tlm_last_error(rt), e);
        drop(&p);
        checked++;
        /* random schedules (not in place: the input must stay intact) */
        for (int s = 0; s < 3; s++) {
          make(&p, kinds[k], 1 + ri % 2, R, C, ld, causal, causal ? 0.125f : 1.0f, 0, 3.0f, 0);
          tlm_task task;
          tlm_row_args args;
          char err[256];
          if (tlm_validate_row(&p.op, p.in, p.n_in, &p.out, 1, &task, &args, err, sizeof err)) {
            CHECK(0, "validate: %s", err);
            drop(&p);
            continue;
          }
          tlm_space sp;
          tlm_space_init(&sp, &task, &rt->target);
          tlm_schedule sched;
          tlm_space_sample(&sp, &g_rng, &sched);
          char ss[256];
          tlm_schedule_str(&sp, &sched, ss, sizeof ss);
          tlm_kernel *kern;
          st = tlm_engine_kernel(rt, &task, &sched, &kern, err, sizeof err);
          if (st == TLM_OK) st = tlm_engine_exec(rt, kern, &task, &args, err, sizeof err);
          e = st == TLM_OK ? error(&p) : INFINITY;
          CHECK(st == TLM_OK && e <= TOL, "kind %d %lldx%lld [%s]: %s error %g", kinds[k],
                (long long)R, (long long)C, ss, err, e);
          drop(&p);
          checked++;
        }
      }
  /* numerically hard inputs */
  struct {
    tlm_op_kind kind;
    float mag, offset;
    int64_t C;
    const char *what;
  } hard[] = {{TLM_OP_SOFTMAX, 1e30f, 0, 100, "softmax of +-1e30"},
              {TLM_OP_SOFTMAX, 1e-30f, 0, 100, "softmax of +-1e-30"},
              {TLM_OP_SOFTMAX, 50.0f, 0, 1, "softmax of rows of length 1"},
              {TLM_OP_SOFTMAX, 100.0f, 0, 257, "softmax of +-100"},
              {TLM_OP_LAYERNORM, 1.0f, 1e4f, 768, "layernorm with offset 1e4"},
              {TLM_OP_LAYERNORM, 1e-20f, 0, 768, "layernorm of +-1e-20"},
              {TLM_OP_LAYERNORM, 1e15f, 0, 100, "layernorm of +-1e15"},
              {TLM_OP_LAYERNORM, 5.0f, 0, 1, "layernorm of rows of length 1"},
              {TLM_OP_RMSNORM, 1e15f, 0, 100, "rmsnorm of +-1e15"},
              {TLM_OP_RMSNORM, 1e-30f, 0, 100, "rmsnorm of +-1e-30"},
              {TLM_OP_RMSNORM, 2.0f, 0, 1, "rmsnorm of rows of length 1"}};
  for (size_t h = 0; h < sizeof hard / sizeof hard[0]; h++) {
    prob p;
    make(&p, hard[h].kind, 2, 9, hard[h].C, hard[h].C, 0, 1.0f, 0, hard[h].mag, hard[h].offset);
    tlm_status st = tlm_run(rt, &p.op, p.in, p.n_in, &p.out, 1);
    double e = st == TLM_OK ? error(&p) : INFINITY;
    CHECK(st == TLM_OK && e <= TOL, "%s: error %g", hard[h].what, e);
    drop(&p);
    checked++;
  }
  /* bad input */
  {
    prob p;
    make(&p, TLM_OP_SOFTMAX, 1, 4, 8, 8, 0, 1.0f, 0, 1.0f, 0);
    tlm_op op = p.op;
    op.u.rownorm.causal = 2;
    CHECK(tlm_run(rt, &op, p.in, 1, &p.out, 1) == TLM_ERR_INVALID_ARGUMENT, "causal 2");
    op = p.op;
    op.u.rownorm.scale = -1;
    CHECK(tlm_run(rt, &op, p.in, 1, &p.out, 1) == TLM_ERR_INVALID_ARGUMENT, "negative scale");
    tlm_tensor o = p.out;
    o.shape[2] = 7;
    CHECK(tlm_run(rt, &p.op, p.in, 1, &o, 1) == TLM_ERR_SHAPE_MISMATCH, "y shape");
    o = p.out;
    o.data = p.x + 1;
    CHECK(tlm_run(rt, &p.op, p.in, 1, &o, 1) == TLM_ERR_ALIASING, "y overlapping x");
    tlm_op ln = tlm_op_rownorm(TLM_OP_LAYERNORM);
    CHECK(tlm_run(rt, &ln, p.in, 1, &p.out, 1) == TLM_ERR_INVALID_ARGUMENT, "layernorm without gamma");
    drop(&p);
  }
  /* x broadcast over leading dims: all rows the same x is fine; a leading
   * dim that does not collapse into the row stride is refused, never
   * walked out of bounds */
  {
    static float x[2 * 8], y[6 * 8], ref[6 * 8];
    for (int i = 0; i < 16; i++) x[i] = frand();
    tlm_op op = tlm_op_rownorm(TLM_OP_SOFTMAX);
    tlm_tensor X = {TLM_F32, 3, {2, 3, 8}, {0, 0, 1}, x, TLM_DEVICE_CPU, 0}, Y = {TLM_F32, 3, {2, 3, 8}, {24, 8, 1}, y, TLM_DEVICE_CPU, 0};
    CHECK(tlm_run(rt, &op, &X, 1, &Y, 1) == TLM_OK, "x broadcast over all rows: %s", tlm_last_error(rt));
    tlm_task task;
    tlm_row_args args;
    char err[256];
    tlm_validate_row(&op, &X, 1, &Y, 1, &task, &args, err, sizeof err);
    args.y = ref;
    tlm_ref_row(&task, &args);
    double worst = 0;
    for (int i = 0; i < 48; i++) worst = fmax(worst, fabs(y[i] - ref[i]));
    CHECK(worst < 1e-5, "broadcast rows: error %g", worst);
    tlm_tensor X2 = {TLM_F32, 3, {2, 3, 8}, {8, 0, 1}, x, TLM_DEVICE_CPU, 0};
    CHECK(tlm_run(rt, &op, &X2, 1, &Y, 1) == TLM_ERR_UNSUPPORTED, "non-collapsing broadcast accepted");
    tlm_tensor Y2 = {TLM_F32, 3, {2, 3, 8}, {0, 8, 1}, y, TLM_DEVICE_CPU, 0};
    CHECK(tlm_run(rt, &op, &X, 1, &Y2, 1) != TLM_OK, "y with a zero leading stride accepted");
  }
  eltwise(rt, &checked);
  rope(rt, &checked);
  edges(rt);
  printf("row-wise problems checked: %d\n", checked);
  tlm_destroy(rt);
  return check_report("test_rowops");
}
