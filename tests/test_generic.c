/* The tier-0 kernels (generic/, issue #17) against the reference; the
 * convolution:
 * every ISA build the host runs, on odd shapes (1, primes, channel counts
 * and widths that fill no register block), groups and depthwise, padding,
 * strides, dilation, 1-D and 3-D, every activation with bias, scale and
 * shift and residual, NCHW and NHWC with OIHW and HWIO weights, the rows
 * split among calls as the thread pool splits them; the matmul on odd
 * shapes, batches and transposes with random epilogues; the pooling,
 * max and average, padded, global, 1-D to 3-D, NaN through max. Then
 * through the
 * runtime: with TLM_ASYNC a new convolution with no kernel of its operator
 * is answered by the tier-0 kernel (stats.provisional) and by its own
 * kernel once the background build is done, both correct. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/validate.h"
#include "check.h"
#include "pool_case.h"
#include "generic/generic.h"
#include "runtime/reference.h"
#include "runtime/space.h"
#include "runtime/target.h"
#include "train/conv_problem.h"
#include "train/problem.h"

static const char *k_descs[] = {
    "mb2ic7ih11oc13oh11kh3ph1",       "mb1ic16ih9oc5oh5kh3sh2ph1",
    "g3mb1ic6ih10oc9oh10kh3ph1dh1",   "g8mb1ic8ih7oc8oh7kh3ph1",
    "mb1ic5iw17oc3ow17kw3pw1",        "mb1ic2id5ih5iw5oc3od5oh5ow5kd3kh3kw3pd1ph1pw1",
    "mb1ic10ih1iw1oc24oh1ow1kh1kw1",  "mb1ic3ih13oc37oh7kh3sh2ph1",
    "mb1ic40ih6oc33oh6kh1",           "g37mb2ic37ih9oc37oh9kh3ph1",
    "g64mb1ic64ih14oc64oh7kh3sh2ph1", "g19mb1ic19ih5oc38oh5kh3ph1",
    "g3mb1ic3ih1iw1oc3oh1ow1kh1kw1",  "g1mb1ic1ih1oc1oh1kh1",
    "g32mb1ic32ih9oc32oh5kh5sh2ph2dh0"};

static double tol_of(const tlm_task *task) {
  const tlm_conv_task *t = &task->u.conv;
  return tlm_problem_tolerance((int64_t)t->ICg * t->KD * t->KH * t->KW);
}

static void direct(int host_isa) {
  char err[256], what[256];
  for (int isa = TLM_ISA_SCALAR; isa <= host_isa; isa++) {
    tlm_generic_conv_fn fn = tlm_generic_conv(isa);
    int cases = 0;
    for (size_t i = 0; i < sizeof k_descs / sizeof k_descs[0]; i++) {
      tlm_conv_prb prb;
      CHECK(tlm_conv_prb_parse(k_descs[i], &prb, err, sizeof err) == 1, "%s: %s", k_descs[i], err);
      for (int act = 0; act < TLM_ACT_COUNT_; act++)
        for (int lay = 0; lay < 4; lay++) {
          tlm_conv_epi epi = {act & 1, (act + 1) & 1, act >= 2, (tlm_activation)act};
          tlm_conv_problem p;
          if (tlm_conv_problem_make(&prb, lay & 1 ? TLM_LAYOUT_NHWC : TLM_LAYOUT_NCHW,
                                    lay & 2 ? TLM_WEIGHTS_HWIO : TLM_WEIGHTS_OIHW, &epi, 7, &p))
            continue;
          snprintf(what, sizeof what, "%s %s act %d layouts %d", tlm_isa_name(isa), k_descs[i],
                   act, lay);
          tlm_task task;
          tlm_conv_args args;
          tlm_status st = tlm_validate_conv(&p.op, p.in, p.n_in, &p.out, 1, &task, &args, err,
                                            sizeof err);
          CHECK(st == TLM_OK, "%s: validate: %s", what, err);
          if (st == TLM_OK) {
            int64_t rows = tlm_generic_conv_rows(&args), half = rows / 2;
            fn(&task.u.conv, &args, 0, half); /* two chunks, as two threads */
            fn(&task.u.conv, &args, half, rows);
            double e = tlm_conv_problem_check(&p, -1, 1);
            CHECK(e >= 0 && e <= tol_of(&task), "%s: max rel err %.3g", what, e);
            cases++;
          }
          tlm_conv_problem_free(&p);
        }
    }
    printf("%-7s %d convolutions checked\n", tlm_isa_name(isa), cases);
  }
}

/* matmuls: 1, primes, tails of every block, batch dims and broadcasting,
 * transposed operands, each with a random epilogue */
static void direct_matmul(int host_isa) {
  static const char *descs[] = {"1x1:1x1",          "1x768:768x768",     "7x13:13x37",
                                "5x3:3x300",        "33x65:65x257",      "2x3x17:2x17x19",
                                "4x2x5x7:4x2x7x33", "3x1x9x11:1x4x11x5", "64x1:1x64"};
  char err[256];
  for (int isa = TLM_ISA_SCALAR; isa <= host_isa; isa++) {
    tlm_generic_matmul_fn fn = tlm_generic_matmul(isa);
    uint64_t rng = 99;
    int cases = 0;
    for (size_t i = 0; i < sizeof descs / sizeof descs[0]; i++)
      for (int v = 0; v < 6; v++) {
        tlm_mm_desc d;
        CHECK(tlm_mm_desc_parse(descs[i], &d, err, sizeof err) == 1, "%s: %s", descs[i], err);
        tlm_matmul_desc epi;
        uint64_t x = tlm_rng_next(&rng);
        tlm_mm_random_variant(x, &epi, &d);
        tlm_problem p;
        if (tlm_problem_make(&d, &epi, x, &p)) {
          CHECK(0, "%s: no problem", descs[i]);
          continue;
        }
        tlm_task task;
        tlm_mm_args args;
        tlm_status st = tlm_validate_matmul(&p.op, p.in, p.n_in, &p.out, 1, &task, &args, err,
                                            sizeof err);
        CHECK(st == TLM_OK, "%s: validate: %s", descs[i], err);
        if (st == TLM_OK) {
          const tlm_matmul_task *t = &task.u.mm;
          int64_t n = tlm_generic_matmul_iters(tlm_task_batch_total(&task), t->M, t->N);
          fn(t, &args, 0, n / 2);
          fn(t, &args, n / 2, n);
          double e = tlm_problem_check(&p);
          CHECK(e >= 0 && e <= tlm_problem_tolerance(t->K),
                "%s %s variant %d (tA%d tB%d bias%d act%d res%d): error %g", tlm_isa_name(isa),
                descs[i], v, d.transpose_a, d.transpose_b, epi.has_bias, (int)epi.activation,
                epi.has_residual, e);
          cases++;
        }
        tlm_problem_free(&p);
      }
    printf("%-7s %d matmuls checked\n", tlm_isa_name(isa), cases);
  }
}

/* poolings: max and average, NCHW and NHWC, padded, strided, global,
 * 1-D to 3-D, 1 channel to more than a block; NaN propagates through max */
static void direct_pool(int host_isa) {
  static const pool_case cases[] = {
      {4, 1, 64, {1, 30, 30}, {1, 3, 3}, {1, 2, 2}, {0, 1, 1}},
      {4, 2, 5, {1, 13, 11}, {1, 2, 3}, {1, 2, 1}, {0, 1, 0}},
      {4, 1, 300, {1, 7, 7}, {1, 0, 0}, {1, 1, 1}, {0, 0, 0}},
      {5, 1, 33, {5, 6, 7}, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}},
      {3, 2, 7, {1, 1, 29}, {1, 1, 4}, {1, 1, 3}, {0, 0, 2}},
      {4, 1, 1, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}},
  };
  uint64_t rng = 5;
  char err[256];
  for (int isa = TLM_ISA_SCALAR; isa <= host_isa; isa++) {
    tlm_generic_pool_fn fn = tlm_generic_pool(isa);
    int checked = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
      for (int alg = 0; alg < 2; alg++)
        for (int lay = 0; lay < 2; lay++) {
          int nd = cases[ci].nd;
          int64_t xs[5], ys[5], nx, ny;
          tlm_op op = pool_case_shapes(&cases[ci], alg, lay, xs, ys, &nx, &ny);
          float *x = malloc(sizeof(float) * (size_t)nx), *y = malloc(sizeof(float) * (size_t)ny);
          float *ref = malloc(sizeof(float) * (size_t)ny);
          for (int64_t i = 0; i < nx; i++)
            x[i] = (float)((tlm_rng_next(&rng) >> 40) % 1000) / 100.0f - 5.0f;
          if (nx > 3) x[nx / 3] = NAN;
          tlm_tensor X, Y;
          tlm_tensor_dense(&X, TLM_F32, nd, xs, x);
          tlm_tensor_dense(&Y, TLM_F32, nd, ys, y);
          tlm_task task;
          tlm_pool_args args;
          tlm_status st = tlm_validate_pool(&op, &X, 1, &Y, 1, &task, &args, err, sizeof err);
          CHECK(st == TLM_OK, "pool case %zu: %s", ci, err);
          if (st == TLM_OK) {
            args.dst = ref;
            tlm_ref_pool(&task, &args);
            args.dst = y;
            const tlm_pool_task *t = &task.u.pool;
            int64_t rows = t->N * t->OD * t->OH;
            fn(t, &args, 0, rows / 2);
            fn(t, &args, rows / 2, rows);
            int bad = 0;
            for (int64_t i = 0; i < ny; i++) {
              if (isnan(ref[i]) != isnan(y[i])) bad++;
              else if (!isnan(ref[i]) && fabs((double)y[i] - ref[i]) > 1e-5 * (1.0 + fabs((double)ref[i])))
                bad++;
            }
            CHECK(bad == 0, "%s pool case %zu alg %d layout %d: %d wrong of %lld", tlm_isa_name(isa),
                  ci, alg, lay, bad, (long long)ny);
            checked++;
          }
          free(x), free(y), free(ref);
        }
    printf("%-7s %d poolings checked\n", tlm_isa_name(isa), checked);
  }
}

static void through_runtime(void) {
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.cache_dir = "none";
  cfg.async_compile = 1;
  cfg.num_threads = 2;
  tlm_runtime *rt;
  if (tlm_create(&cfg, &rt) != TLM_OK) {
    CHECK(0, "tlm_create: %s", tlm_last_error(NULL));
    return;
  }
  const char *descs[] = {"g32mb1ic32ih12oc32oh12kh3ph1", "mb1ic8ih9oc12oh9kh3ph1"};
  for (int i = 0; i < 2; i++) {
    char err[256];
    tlm_conv_prb prb;
    CHECK(tlm_conv_prb_parse(descs[i], &prb, err, sizeof err) == 1, "%s: %s", descs[i], err);
    tlm_conv_epi epi = {1, 0, 0, TLM_ACT_RELU};
    tlm_conv_problem p;
    if (tlm_conv_problem_make(&prb, TLM_LAYOUT_NHWC, TLM_WEIGHTS_HWIO, &epi, 3, &p)) continue;
    tlm_stats before, after;
    tlm_get_stats(rt, &before);
    tlm_status st = tlm_run(rt, &p.op, p.in, p.n_in, &p.out, 1);
    tlm_get_stats(rt, &after);
    CHECK(st == TLM_OK, "%s: tlm_run: %s", descs[i], tlm_last_error(rt));
    CHECK(after.provisional == before.provisional + 1 && after.compiles == before.compiles,
          "%s: first call: %llu provisional, %llu compiles (want the tier-0 kernel, no compile)",
          descs[i], (unsigned long long)(after.provisional - before.provisional),
          (unsigned long long)(after.compiles - before.compiles));
    double e = tlm_conv_problem_check(&p, -1, 1);
    CHECK(e >= 0 && e <= 1e-4, "%s: tier-0 answer: max rel err %.3g", descs[i], e);
    tlm_wait_background(rt);
    memset(p.out.data, 0xff, tlm_tensor_span_bytes(&p.out));
    st = tlm_run(rt, &p.op, p.in, p.n_in, &p.out, 1);
    tlm_get_stats(rt, &after);
    CHECK(st == TLM_OK && after.compiles > before.compiles, "%s: own kernel: %s, %llu compiles",
          descs[i], tlm_last_error(rt), (unsigned long long)(after.compiles - before.compiles));
    e = tlm_conv_problem_check(&p, -1, 1);
    CHECK(e >= 0 && e <= 1e-4, "%s: own kernel: max rel err %.3g", descs[i], e);
    tlm_conv_problem_free(&p);
  }
  tlm_destroy(rt);
}

int main(void) {
  tlm_target t;
  tlm_target_detect(&t);
  direct(t.host_isa);
  direct_matmul(t.host_isa);
  direct_pool(t.host_isa);
  through_runtime();
  return check_report("generic");
}
