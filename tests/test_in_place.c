/* In-place residuals: the residual input is the output itself.
 *  1. convolutions (oneDNN's sum post-op): every path a convolution runs
 *     on (direct kernels NCHW and NHWC, 1x1 as a matmul with the reduction
 *     in several K blocks, KxK over im2col, channel blocks), with and without an
 *     activation, against the same problem run out of place (itself
 *     checked against the double-precision reference), and a second call
 *     on a warm cache;
 *  2. the public matmul, C += A x B (+ bias): K over several blocks, odd
 *     extents, a batch, one kernel serving K in one block and in several;
 *     against the reference;
 *  3. what stays refused: a matmul with an activation (TLM_ERR_ALIASING),
 *     a residual that overlaps C without being it (both families).
 * Runs once per ISA (TLM_ISA, tests/CMakeLists.txt).
 * usage: test_in_place */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "train/conv_problem.h"
#include "train/problem.h"

static double max_rel_diff(const float *a, const float *b, size_t n) {
  double e = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]) / (1.0 + fabs((double)b[i]));
    if (!(d <= e)) e = d; /* NaN counts */
  }
  return e;
}

static size_t elems(const tlm_tensor *t) {
  size_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
  return n;
}

static void conv_in_place(tlm_runtime *rt) {
  /* direct 3x3 (both layouts), 1x1 as a matmul with K = 600 (several K
   * blocks) and an odd one, KxK with few pixels over im2col (K = 2700),
   * a strided 1x1, a 3-D one */
  const char *descs[] = {"mb1ic13ih11oc17oh11kh3ph1", "mb2ic600ih5oc37oh5kh1",
                         "mb1ic7ih9oc5oh9kh1",        "mb1ic300ih5oc7oh5kh3ph1",
                         "mb1ic64ih12oc96oh6kh1sh2",  "mb1ic3id4ih4iw4oc5od4oh4ow4kd3kh3kw3pd1ph1pw1",
                         /* few pixels, 256 channels: channel blocks on AVX-512
                          * (weights declared constant, below) */
                         "mb1ic128ih8oc256oh8kh3ph1"};
  char err[256];
  for (size_t i = 0; i < sizeof descs / sizeof descs[0]; i++) {
    tlm_conv_prb prb;
    CHECK(tlm_conv_prb_parse(descs[i], &prb, err, sizeof err) == 1, "%s: %s", descs[i], err);
    for (int act = 0; act < 2; act++)
      for (int lay = 0; lay < 2; lay++) {
        tlm_conv_epi epi = {1, 0, 1, act ? TLM_ACT_RELU : TLM_ACT_NONE};
        tlm_layout L = lay ? TLM_LAYOUT_NHWC : TLM_LAYOUT_NCHW;
        tlm_weight_layout WL = lay ? TLM_WEIGHTS_HWIO : TLM_WEIGHTS_OIHW;
        tlm_conv_problem p, q;
        if (tlm_conv_problem_make(&prb, L, WL, &epi, 17, &p)) continue;
        if (tlm_conv_problem_make(&prb, L, WL, &epi, 17, &q)) {
          tlm_conv_problem_free(&p);
          continue;
        }
        /* the weights declared constant (packed once; channel blocks) on
         * every other layout */
        int cw = lay == 1;
        size_t wbytes = elems(&p.in[1]) * sizeof(float);
        if (cw) {
          CHECK(tlm_constant_add(rt, p.in[1].data, wbytes) == TLM_OK, "constant p");
          CHECK(tlm_constant_add(rt, q.in[1].data, wbytes) == TLM_OK, "constant q");
        }
        /* out of place, against the reference */
        tlm_status st = tlm_run(rt, &p.op, p.in, p.n_in, &p.out, 1);
        CHECK(st == TLM_OK, "%s act %d lay %d: %s", descs[i], act, lay, tlm_last_error(rt));
        double tol = tlm_problem_tolerance((int64_t)prb.ic * prb.kd * prb.kh * prb.kw);
        double e = tlm_conv_problem_check(&p, -1, 5);
        CHECK(e >= 0 && e <= tol, "%s act %d lay %d: out of place max rel err %.3g", descs[i],
              act, lay, e);
        /* in place: dst is the residual (the last input) */
        tlm_tensor *R = &q.in[q.n_in - 1];
        size_t n = elems(R);
        float *saved = malloc(n * sizeof *saved);
        if (!saved) break;
        memcpy(saved, R->data, n * sizeof *saved);
        CHECK(R->ndim == q.out.ndim && !memcmp(R->strides, q.out.strides, sizeof R->strides),
              "%s: the residual is laid out as dst", descs[i]);
        tlm_tensor out = *R;
        for (int rep = 0; rep < 2; rep++) { /* the second on a warm cache */
          memcpy(R->data, saved, n * sizeof *saved);
          st = tlm_run(rt, &q.op, q.in, q.n_in, &out, 1);
          CHECK(st == TLM_OK, "%s act %d lay %d in place: %s", descs[i], act, lay,
                tlm_last_error(rt));
          e = max_rel_diff(R->data, p.out.data, n);
          CHECK(e <= 4 * tol, "%s act %d lay %d in place (call %d): max rel diff %.3g", descs[i],
                act, lay, rep + 1, e);
        }
        /* the same memory as another view (H and W strides swapped):
         * overlapping dst without being it */
        int nd = R->ndim;
        if (nd == 4 && R->shape[2] == R->shape[3] && R->shape[2] > 1) {
          tlm_tensor in2[6];
          memcpy(in2, q.in, sizeof in2);
          int64_t t = in2[q.n_in - 1].strides[2];
          in2[q.n_in - 1].strides[2] = in2[q.n_in - 1].strides[3];
          in2[q.n_in - 1].strides[3] = t;
          st = tlm_run(rt, &q.op, in2, q.n_in, &out, 1);
          CHECK(st == TLM_ERR_ALIASING, "%s: a transposed view of dst as the residual: %s",
                descs[i], tlm_status_str(st));
        }
        free(saved);
        if (cw) {
          CHECK(tlm_constant_remove(rt, p.in[1].data) == TLM_OK, "remove p");
          CHECK(tlm_constant_remove(rt, q.in[1].data) == TLM_OK, "remove q");
        }
        tlm_conv_problem_free(&p);
        tlm_conv_problem_free(&q);
      }
  }
}

/* C += A x B (+ bias) through the public matmul: K = 1000 reduces in
 * several blocks; odd extents; a batch of 3 */
static void matmul_in_place(tlm_runtime *rt) {
  /* 128x64 then 128x1000, and 96x1000 then 96x64: one schedule each, so
   * one kernel (its key leaves M, N and K out) compiled for K in one block
   * and run over several, and the other way round */
  const char *descs[] = {"37x1000:1000x61", "1x300:300x13",      "3x17x129:3x129x33",
                         "128x64:64x256",   "128x1000:1000x256", "96x1000:1000x128",
                         "96x64:64x128"};
  char err[256];
  for (size_t i = 0; i < sizeof descs / sizeof descs[0]; i++)
    for (int bias = 0; bias < 2; bias++) {
      tlm_mm_desc d;
      CHECK(tlm_mm_desc_parse(descs[i], &d, err, sizeof err) == 1, "%s: %s", descs[i], err);
      tlm_matmul_desc epi = {0, 0, bias, TLM_ACT_NONE, 1};
      tlm_problem p;
      if (tlm_problem_make(&d, &epi, 23, &p)) continue;
      tlm_tensor *R = &p.in[p.n_in - 1];
      size_t n = elems(R);
      float *r0 = malloc(n * sizeof *r0);
      if (!r0) {
        tlm_problem_free(&p);
        break;
      }
      memcpy(r0, R->data, n * sizeof *r0);
      CHECK(R->ndim == p.out.ndim && !memcmp(R->shape, p.out.shape, sizeof R->shape) &&
                !memcmp(R->strides, p.out.strides, sizeof R->strides),
            "%s: the residual is laid out as C", descs[i]);
      /* out of place first: the reference check reads the residual */
      tlm_status st = tlm_run(rt, &p.op, p.in, p.n_in, &p.out, 1);
      CHECK(st == TLM_OK, "%s: %s", descs[i], tlm_last_error(rt));
      double tol = tlm_problem_tolerance(d.a[d.nda - 1]);
      double e = tlm_problem_check(&p);
      CHECK(e >= 0 && e <= tol, "%s bias %d: out of place max rel err %.3g", descs[i], bias, e);
      float *want = malloc(n * sizeof *want);
      if (want) memcpy(want, p.out.data, n * sizeof *want);
      tlm_tensor out = *R;
      for (int rep = 0; rep < 2 && want; rep++) { /* the second through the hit path */
        memcpy(R->data, r0, n * sizeof *r0);
        st = tlm_run(rt, &p.op, p.in, p.n_in, &out, 1);
        CHECK(st == TLM_OK, "%s in place: %s", descs[i], tlm_last_error(rt));
        e = max_rel_diff(R->data, want, n);
        CHECK(e <= 4 * tol, "%s bias %d in place (call %d): max rel diff %.3g", descs[i], bias,
              rep + 1, e);
      }
      /* then out of place again with the same shapes: the memo of the
       * in-place call must not serve it */
      memcpy(R->data, r0, n * sizeof *r0);
      memset(p.out.data, 0, n * sizeof(float));
      st = tlm_run(rt, &p.op, p.in, p.n_in, &p.out, 1);
      e = tlm_problem_check(&p);
      CHECK(st == TLM_OK && e >= 0 && e <= tol, "%s bias %d: out of place after in place: %.3g",
            descs[i], bias, e);
      /* an activation comes before a matmul's residual: refused in place */
      tlm_op op = p.op;
      op.u.matmul.activation = TLM_ACT_RELU;
      st = tlm_run(rt, &op, p.in, p.n_in, &out, 1);
      CHECK(st == TLM_ERR_ALIASING, "%s: in place with ReLU: %s", descs[i], tlm_status_str(st));
      free(want);
      free(r0);
      tlm_problem_free(&p);
    }
}

int main(void) {
  if (check_isa_unsupported()) return CHECK_SKIP;
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.cache_dir = "none";
  tlm_runtime *rt;
  if (tlm_create(&cfg, &rt) != TLM_OK) {
    fprintf(stderr, "tlm_create failed\n");
    return 1;
  }
  conv_in_place(rt);
  matmul_in_place(rt);
  tlm_destroy(rt);
  return check_report("in_place");
}
