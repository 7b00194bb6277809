/* Convolutions against the double-precision reference:
 *  1. every line of every shared benchdnn convolution file (minibatch 1 for
 *     the three model sets), default schedule in NCHW/OIHW and NHWC/HWIO,
 *     plus random schedules from the full space in a random layout;
 *  2. every epilogue (bias, folded batch norm, residual, each activation)
 *     in both layouts and both weight layouts, on odd shapes;
 *  3. non-dense tensors (a channel slice of a larger buffer, NHWC memory
 *     described as NCHW with permuted strides);
 *  4. one kernel serves every image size of a layer (run-time extents);
 *  5. bad descriptors and bad tensors give the documented status.
 * usage: test_conv SHARED_DIR RANDOM_PER_LINE */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/conv_as_matmul.h"
#include "api/validate.h"
#include "check.h"
#include "pool_case.h"
#include "engine/engine.h"
#include "jit/build.h"
#include "runtime/reference.h"
#include "train/conv_problem.h"
#include "train/problem.h"
#include "train/records.h"

static int g_random = 1;
static uint64_t g_rng = 99;

/* runs problem p with schedule `sched` (NULL = tlm_run's own) and checks it */
static void run_check(tlm_runtime *rt, tlm_conv_problem *p, const char *what,
                      const tlm_schedule *sched) {
  char err[512];
  tlm_task task;
  tlm_conv_args args;
  tlm_status st = tlm_validate_conv(&p->op, p->in, p->n_in, &p->out, 1, &task, &args, err,
                                    sizeof err);
  CHECK(st == TLM_OK, "%s: validate: %s", what, err);
  if (st) return;
  if (!sched) {
    st = tlm_run(rt, &p->op, p->in, p->n_in, &p->out, 1);
    CHECK(st == TLM_OK, "%s: tlm_run: %s", what, tlm_last_error(rt));
  } else {
    tlm_kernel *k;
    st = tlm_engine_kernel(rt, &task, sched, &k, err, sizeof err);
    CHECK(st == TLM_OK, "%s: compile: %s", what, err);
    if (st) return;
    st = tlm_engine_exec(rt, k, &task, &args, err, sizeof err);
    CHECK(st == TLM_OK, "%s: exec: %s", what, err);
  }
  if (st) return;
  const tlm_conv_task *t = &task.u.conv;
  double tol = tlm_problem_tolerance((int64_t)t->ICg * t->KD * t->KH * t->KW);
  int points = tlm_task_flops(&task) <= 2e7 ? -1 : 1500;
  double e = tlm_conv_problem_check(p, points, g_rng);
  CHECK(e >= 0 && e <= tol, "%s: max rel err %.3g > %.3g", what, e, tol);
}

static int g_stride = 1; /* TLM_TEST_STRIDE */
/* argv[3] "alternate": each shape in one layout, NCHW and NHWC by turns
 * (the narrower-ISA variants; the native run checks both) */
static int g_one_layout;

static void shared_files(tlm_runtime *rt, const char *dir) {
  static const char *const files[] = {"shapes_tails", "shapes_regression_padding",
                                      "shapes_mobilenet_dw", "shapes_resnet_50",
                                      "shapes_mobilenet", "shapes_efficientdet"};
  int lines = 0;
  for (size_t fi = 0; fi < sizeof files / sizeof files[0]; fi++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/workloads/benchdnn/conv/%s", dir, files[fi]);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot read %s", path);
    if (!f) continue;
    char line[1024], err[256];
    int lineno = 0;
    while (fgets(line, sizeof line, f)) {
      lineno++;
      tlm_conv_prb prb;
      int pr = tlm_conv_prb_parse(line, &prb, err, sizeof err);
      CHECK(pr >= 0, "%s:%d: %s", files[fi], lineno, err);
      if (pr <= 0) continue;
      if (fi >= 3) prb.mb = 1; /* the model sets: minibatch 1 keeps the check short */
      lines++;
      /* a sample of the model sets under TLM_TEST_STRIDE; every tail and
       * padding shape always */
      if (fi >= 3 && lines % g_stride) continue;
      char what[1200];
      for (int lay = 0; lay < 2; lay++) {
        if (g_one_layout && lay != lines % 2) continue; /* NCHW and NHWC by turns */
        tlm_conv_problem p;
        tlm_layout L = lay ? TLM_LAYOUT_NHWC : TLM_LAYOUT_NCHW;
        tlm_weight_layout WL = lay ? TLM_WEIGHTS_HWIO : TLM_WEIGHTS_OIHW;
        if (tlm_conv_problem_make(&prb, L, WL, NULL, (uint64_t)lineno, &p)) {
          CHECK(0, "%s:%d: cannot make the problem", files[fi], lineno);
          continue;
        }
        snprintf(what, sizeof what, "%s:%d %s default", files[fi], lineno, lay ? "nhwc" : "nchw");
        run_check(rt, &p, what, NULL);
        tlm_conv_problem_free(&p);
      }
      for (int r = 0; r < g_random; r++) {
        uint64_t x = tlm_rng_next(&g_rng);
        tlm_conv_problem p;
        tlm_conv_epi epi = {(int)(x & 1), (int)((x >> 1) & 1), (int)((x >> 2) & 1),
                            (tlm_activation)((x >> 3) % TLM_ACT_COUNT_)};
        tlm_layout L = (x >> 8) & 1 ? TLM_LAYOUT_NHWC : TLM_LAYOUT_NCHW;
        tlm_weight_layout WL = (x >> 9) & 1 ? TLM_WEIGHTS_HWIO : TLM_WEIGHTS_OIHW;
        if (tlm_conv_problem_make(&prb, L, WL, &epi, x, &p)) continue;
        tlm_task task;
        tlm_conv_args args;
        if (tlm_validate_conv(&p.op, p.in, p.n_in, &p.out, 1, &task, &args, err, sizeof err)) {
          CHECK(0, "%s:%d: %s", files[fi], lineno, err);
          tlm_conv_problem_free(&p);
          continue;
        }
        tlm_space space;
        tlm_space_init(&space, &task, &rt->target);
        tlm_schedule s;
        tlm_space_sample(&space, &g_rng, &s);
        char ss[512];
        snprintf(what, sizeof what, "%s:%d random [%s] layout %d/%d", files[fi], lineno,
                 tlm_schedule_str(&space, &s, ss, sizeof ss), (int)L, (int)WL);
        run_check(rt, &p, what, &s);
        tlm_conv_problem_free(&p);
      }
    }
    fclose(f);
  }
  CHECK(lines >= 199, "only %d descriptors read from the shared files", lines);
  printf("shared conv files: %d descriptors\n", lines);
}

static void epilogues(tlm_runtime *rt) {
  const char *descs[] = {"mb2ic7ih11oc13oh11kh3ph1", "mb1ic16ih9oc5oh5kh3sh2ph1",
                         "g3mb1ic6ih10oc9oh10kh3ph1dh1", "g8mb1ic8ih7oc8oh7kh3ph1",
                         "mb1ic5iw17oc3ow17kw3pw1", "mb1ic2id5ih5iw5oc3od5oh5ow5kd3kh3kw3pd1ph1pw1",
                         /* 1x1 without padding: run as a matmul (tlm_conv_as_matmul):
                          * one pixel, a dense plane, strided, 3-D, 1-D, odd sizes */
                         "mb1ic10ih1iw1oc24oh1ow1kh1kw1", "mb3ic17ih1iw1oc5oh1ow1kh1kw1sh2sw2",
                         "mb2ic7ih11oc13oh11kh1", "mb2ic5ih9iw10oc6oh5ow5kh1kw1sh2sw2",
                         "mb1ic4id3ih5iw5oc3od3oh5ow5kd1kh1kw1", "mb2ic5iw9oc7ow9kw1",
                         "mb1ic33ih7oc17oh4kh1sh2",
                         /* KxK with few pixels for the reduction (M <= K/4): im2col
                          * and a matmul; padded, 1-D, 3-D, strided, dilated, odd,
                          * one output channel (NCHW too) */
                         "mb1ic32ih5oc7oh5kh3ph1", "mb2ic16iw9oc5ow5kw5",
                         "mb1ic8id3ih4iw4oc3od3oh4ow4kd3kh3kw3pd1ph1pw1",
                         "mb1ic24ih9oc11oh4kh3sh2", "mb1ic24ih9oc6oh7kh3ph1dh1",
                         "mb1ic9ih6iw5oc4oh6ow5kh3kw5ph1pw2", "mb1ic16ih5oc1oh5kh3ph1",
                         /* tiles of 2048 FMAs or more (no fast version): padding,
                          * a channel tail, odd rows, stride 2 with a batch */
                         "mb1ic72ih13oc40oh13kh3ph1", "mb2ic96ih15oc24oh8kh3sh2ph1"};
  char err[256], what[256];
  for (size_t i = 0; i < sizeof descs / sizeof descs[0]; i++) {
    tlm_conv_prb prb;
    CHECK(tlm_conv_prb_parse(descs[i], &prb, err, sizeof err) == 1, "%s: %s", descs[i], err);
    for (int act = 0; act < TLM_ACT_COUNT_; act++)
      for (int lay = 0; lay < 4; lay++) {
        tlm_conv_epi epi = {act & 1, (act + 1) & 1, act >= 2, (tlm_activation)act};
        tlm_conv_problem p;
        if (tlm_conv_problem_make(&prb, lay & 1 ? TLM_LAYOUT_NHWC : TLM_LAYOUT_NCHW,
                                  lay & 2 ? TLM_WEIGHTS_HWIO : TLM_WEIGHTS_OIHW, &epi, 5, &p))
          continue;
        snprintf(what, sizeof what, "%s act %d layouts %d", descs[i], act, lay);
        run_check(rt, &p, what, NULL);
        tlm_conv_problem_free(&p);
      }
  }
}

/* src is channels 3..8 of a 12-channel NCHW buffer; and NHWC memory
 * described as NCHW through permuted strides */
static void strided(tlm_runtime *rt) {
  int64_t N = 2, C = 12, H = 9, W = 10, OC = 7;
  float *big = malloc(sizeof(float) * (size_t)(N * C * H * W));
  float *wt = malloc(sizeof(float) * (size_t)(OC * 5 * 9));
  float *y = malloc(sizeof(float) * (size_t)(N * OC * H * W));
  for (int64_t i = 0; i < N * C * H * W; i++) big[i] = (float)((i * 37) % 19) / 9.0f - 1.0f;
  for (int64_t i = 0; i < OC * 5 * 9; i++) wt[i] = (float)((i * 11) % 7) / 3.0f - 1.0f;
  tlm_conv_problem p;
  memset(&p, 0, sizeof p);
  p.op = tlm_op_conv(TLM_LAYOUT_NCHW);
  p.op.u.conv.pad[1] = p.op.u.conv.pad[2] = 1;
  tlm_tensor *x = &p.in[0];
  x->dtype = TLM_F32, x->ndim = 4, x->data = big + 3 * H * W;
  int64_t xs[4] = {N, 5, H, W}, xst[4] = {C * H * W, H * W, W, 1};
  memcpy(x->shape, xs, sizeof xs), memcpy(x->strides, xst, sizeof xst);
  tlm_tensor_dense(&p.in[1], TLM_F32, 4, (int64_t[]){OC, 5, 3, 3}, wt);
  tlm_tensor_dense(&p.out, TLM_F32, 4, (int64_t[]){N, OC, H, W}, y);
  p.n_in = 2;
  run_check(rt, &p, "channel slice of src", NULL);
  /* NHWC memory (N, H, W, C) as logical NCHW */
  int64_t yst[4] = {H * W * OC, 1, W * OC, OC};
  memcpy(p.out.strides, yst, sizeof yst);
  int64_t xst2[4] = {H * W * C, 1, W * C, C};
  x->data = big + 3;
  memcpy(x->strides, xst2, sizeof xst2);
  run_check(rt, &p, "NHWC memory through NCHW strides", NULL);
  /* the same two with a 1x1 kernel, which runs as a matmul: batch dims
   * where the images are not adjacent */
  p.in[1].shape[2] = p.in[1].shape[3] = 1;
  p.in[1].strides[0] = 5, p.in[1].strides[1] = 1, p.in[1].strides[2] = p.in[1].strides[3] = 1;
  p.op.u.conv.pad[1] = p.op.u.conv.pad[2] = 0;
  run_check(rt, &p, "1x1, NHWC memory through NCHW strides", NULL);
  x->data = big + 3 * H * W;
  memcpy(x->strides, xst, sizeof xst);
  int64_t yst1[4] = {OC * H * W, H * W, W, 1};
  memcpy(p.out.strides, yst1, sizeof yst1);
  run_check(rt, &p, "1x1, channel slice of src", NULL);
  free(big), free(wt), free(y);
}

/* squeeze-and-excitation convolutions (one pixel, 1x1 kernel) run as the
 * matrix product: the same product as a matmul afterwards is a hit of the
 * same kernel; with disable_conv_as_matmul it is not; a channel slice of a
 * wider NCHW buffer (strided src) gives the right result either way */
/* a strided 1x1 NHWC convolution runs as the matmul over its gathered
 * pixels (tlm_conv_gather): the same product as a dense matmul afterwards
 * is a hit of the same plan, no compile; with disable_conv_as_matmul it
 * is not. The result is checked against the reference either way. */
static void strided_as_matmul(void) {
  for (int off = 0; off < 2; off++) {
    tlm_config cfg;
    tlm_config_init(&cfg);
    cfg.cache_dir = "none";
    cfg.model_path = "none";
    cfg.disable_conv_as_matmul = off;
    tlm_runtime *rt;
    if (tlm_create(&cfg, &rt)) return;
    char err[256];
    tlm_conv_prb prb;
    tlm_conv_problem p;
    if (tlm_conv_prb_parse("mb1ic8ih9oc16oh5kh1sh2", &prb, err, sizeof err) == 1 &&
        tlm_conv_problem_make(&prb, TLM_LAYOUT_NHWC, TLM_WEIGHTS_HWIO, NULL, 3, &p) == 0) {
      run_check(rt, &p, off ? "strided 1x1, conv kernels" : "strided 1x1 as matmul", NULL);
      tlm_conv_problem_free(&p);
      float a[25 * 8] = {0}, b[8 * 16] = {0}, c[25 * 16];
      tlm_op mm = tlm_op_matmul();
      tlm_tensor min[2], mout;
      tlm_tensor_dense(&min[0], TLM_F32, 2, (int64_t[]){25, 8}, a);
      tlm_tensor_dense(&min[1], TLM_F32, 2, (int64_t[]){8, 16}, b);
      tlm_tensor_dense(&mout, TLM_F32, 2, (int64_t[]){25, 16}, c);
      tlm_stats s0, s1;
      tlm_get_stats(rt, &s0);
      CHECK(tlm_run(rt, &mm, min, 2, &mout, 1) == TLM_OK, "matmul: %s", tlm_last_error(rt));
      tlm_get_stats(rt, &s1);
      CHECK((s1.cache_misses == s0.cache_misses) == !off,
            "strided 1x1 (as matmul %d): the dense matmul after it missed %llu times", !off,
            (unsigned long long)(s1.cache_misses - s0.cache_misses));
    }
    /* a 3x3 over 5x5 pixels and 32 channels (M 25, K 288) runs as the
     * matmul (25, 288) x (288, 16) over its im2col copy */
    if (tlm_conv_prb_parse("mb1ic32ih5oc16oh5kh3ph1", &prb, err, sizeof err) == 1 &&
        tlm_conv_problem_make(&prb, TLM_LAYOUT_NHWC, TLM_WEIGHTS_HWIO, NULL, 3, &p) == 0) {
      run_check(rt, &p, off ? "3x3 few pixels, conv kernels" : "3x3 few pixels as im2col matmul",
                NULL);
      tlm_conv_problem_free(&p);
      float *a = calloc(25 * 288, sizeof(float)), *b = calloc(288 * 16, sizeof(float));
      float c[25 * 16];
      tlm_op mm = tlm_op_matmul();
      tlm_tensor min[2], mout;
      tlm_tensor_dense(&min[0], TLM_F32, 2, (int64_t[]){25, 288}, a);
      tlm_tensor_dense(&min[1], TLM_F32, 2, (int64_t[]){288, 16}, b);
      tlm_tensor_dense(&mout, TLM_F32, 2, (int64_t[]){25, 16}, c);
      tlm_stats s0, s1;
      tlm_get_stats(rt, &s0);
      CHECK(a && b && tlm_run(rt, &mm, min, 2, &mout, 1) == TLM_OK, "matmul: %s",
            tlm_last_error(rt));
      tlm_get_stats(rt, &s1);
      CHECK((s1.cache_misses == s0.cache_misses) == !off,
            "3x3 few pixels (as matmul %d): the im2col matmul after it missed %llu times", !off,
            (unsigned long long)(s1.cache_misses - s0.cache_misses));
      free(a), free(b);
    }
    tlm_destroy(rt);
  }
}

static void as_matmul(void) {
  for (int off = 0; off < 2; off++) {
    tlm_config cfg;
    tlm_config_init(&cfg);
    cfg.cache_dir = "none";
    cfg.disable_conv_as_matmul = off;
    tlm_runtime *rt;
    if (tlm_create(&cfg, &rt)) return;
    int64_t IC = 40, OC = 96, C = 64;
    float *src = malloc(sizeof(float) * (size_t)C), *wt = malloc(sizeof(float) * (size_t)(OC * IC));
    float *bias = malloc(sizeof(float) * (size_t)OC), *y = malloc(sizeof(float) * (size_t)OC);
    float *ref = malloc(sizeof(float) * (size_t)OC), *y2 = malloc(sizeof(float) * (size_t)OC);
    for (int64_t i = 0; i < C; i++) src[i] = (float)((i * 13) % 11) / 5.0f - 1.0f;
    for (int64_t i = 0; i < OC * IC; i++) wt[i] = (float)((i * 7) % 17) / 8.0f - 1.0f;
    for (int64_t i = 0; i < OC; i++) bias[i] = (float)(i % 5) - 2.0f;
    for (int64_t o = 0; o < OC; o++) {
      double acc = bias[o];
      for (int64_t c = 0; c < IC; c++) acc += (double)wt[o * IC + c] * src[8 + c];
      ref[o] = acc > 0 ? (float)acc : 0.0f;
    }
    tlm_op op = tlm_op_conv(TLM_LAYOUT_NCHW);
    op.u.conv.has_bias = 1;
    op.u.conv.activation = TLM_ACT_RELU;
    tlm_tensor in[3], out;
    memset(in, 0, sizeof in);
    /* channels 8..47 of a 64-channel one-pixel image, through strides */
    in[0].dtype = TLM_F32, in[0].ndim = 4, in[0].data = src + 8;
    int64_t xs[4] = {1, IC, 1, 1}, xst[4] = {C, 1, 1, 1};
    memcpy(in[0].shape, xs, sizeof xs), memcpy(in[0].strides, xst, sizeof xst);
    tlm_tensor_dense(&in[1], TLM_F32, 4, (int64_t[]){OC, IC, 1, 1}, wt);
    tlm_tensor_dense(&in[2], TLM_F32, 1, &OC, bias);
    tlm_tensor_dense(&out, TLM_F32, 4, (int64_t[]){1, OC, 1, 1}, y);
    CHECK(tlm_run(rt, &op, in, 3, &out, 1) == TLM_OK, "SE conv (as matmul %d): %s", !off,
          tlm_last_error(rt));
    double e = 0;
    for (int64_t o = 0; o < OC; o++) {
      double d = fabs((double)y[o] - ref[o]) / (1 + fabs(ref[o]));
      if (d > e) e = d;
    }
    CHECK(e <= 1e-5, "SE conv (as matmul %d): max rel err %.3g", !off, e);
    tlm_stats s0, s1;
    tlm_get_stats(rt, &s0);
    tlm_op mm = tlm_op_matmul();
    mm.u.matmul.transpose_b = 1, mm.u.matmul.has_bias = 1, mm.u.matmul.activation = TLM_ACT_RELU;
    tlm_tensor min[3], mout;
    tlm_tensor_dense(&min[0], TLM_F32, 2, (int64_t[]){1, IC}, src + 8);
    tlm_tensor_dense(&min[1], TLM_F32, 2, (int64_t[]){OC, IC}, wt);
    min[2] = in[2];
    tlm_tensor_dense(&mout, TLM_F32, 2, (int64_t[]){1, OC}, y2);
    CHECK(tlm_run(rt, &mm, min, 3, &mout, 1) == TLM_OK, "matmul: %s", tlm_last_error(rt));
    tlm_get_stats(rt, &s1);
    CHECK((s1.compiles == s0.compiles) == !off, "as matmul %d: the matmul compiled %llu kernels", !off,
          (unsigned long long)(s1.compiles - s0.compiles));
    CHECK(!memcmp(y, y2, sizeof(float) * (size_t)OC) || off, "conv and matmul results differ");
    free(src), free(wt), free(bias), free(y), free(ref), free(y2);
    tlm_destroy(rt);
  }
}

/* a ResNet layer at five image sizes: one compile when the rule's
 * decisions do not depend on the size */
static void sizes(void) {
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.cache_dir = "none";
  cfg.model_path = "none";
  tlm_runtime *rt;
  if (tlm_create(&cfg, &rt)) return;
  int res[] = {160, 192, 224, 256, 288};
  char d[128], err[256];
  for (int i = 0; i < 5; i++) {
    snprintf(d, sizeof d, "mb1ic64ih%doc64oh%dkh3ph1", res[i] / 4, res[i] / 4);
    tlm_conv_prb prb;
    tlm_conv_prb_parse(d, &prb, err, sizeof err);
    tlm_conv_problem p;
    if (tlm_conv_problem_make(&prb, TLM_LAYOUT_NHWC, TLM_WEIGHTS_HWIO, NULL, 3, &p)) continue;
    run_check(rt, &p, d, NULL);
    tlm_conv_problem_free(&p);
  }
  tlm_stats st;
  tlm_get_stats(rt, &st);
  CHECK(st.compiles == 1, "5 image sizes of one layer took %llu compiles (want 1)",
        (unsigned long long)st.compiles);
  tlm_destroy(rt);
}

static void bad(tlm_runtime *rt) {
  static const char *const descs[] = {"mb1ic3ih5", "mb1ic3ih5oc4kh9", "g2ic3ih5oc4kh3",
                                      "mb1ic3ih5oc4kh3xx1", "mb1ic3ih5oc4kh3ph", "ic0ih5oc4kh3",
                                      "mb1ic3id4ih5oc4kh3", "ic3ih5oc4kh3sh0", "ic3ih5oc4kh3ih6",
                                      "ic99999999999ih5oc4kh3"};
  char err[256];
  for (size_t i = 0; i < sizeof descs / sizeof descs[0]; i++) {
    tlm_conv_prb prb;
    err[0] = 0;
    int r = tlm_conv_prb_parse(descs[i], &prb, err, sizeof err);
    CHECK(r == -1 && err[0], "'%s' parsed (%d) without an error", descs[i], r);
  }
  tlm_conv_prb prb;
  tlm_conv_prb_parse("mb1ic4ih6oc4oh6kh3ph1", &prb, err, sizeof err);
  tlm_conv_problem p;
  if (tlm_conv_problem_make(&prb, TLM_LAYOUT_NCHW, TLM_WEIGHTS_OIHW, NULL, 1, &p)) return;
  tlm_op op = p.op;
  op.u.conv.groups = 3;
  CHECK(tlm_run(rt, &op, p.in, 2, &p.out, 1) == TLM_ERR_SHAPE_MISMATCH, "groups 3 of 4 channels");
  op = p.op;
  op.u.conv.stride[2] = 0;
  CHECK(tlm_run(rt, &op, p.in, 2, &p.out, 1) == TLM_ERR_INVALID_ARGUMENT, "stride 0");
  op = p.op;
  op.u.conv.dilation[1] = 0;
  CHECK(tlm_run(rt, &op, p.in, 2, &p.out, 1) == TLM_ERR_INVALID_ARGUMENT, "dilation 0");
  op = p.op;
  op.u.conv.pad[1] = -1;
  CHECK(tlm_run(rt, &op, p.in, 2, &p.out, 1) == TLM_ERR_INVALID_ARGUMENT, "pad -1");
  op = p.op;
  op.u.conv.layout = (tlm_layout)7;
  CHECK(tlm_run(rt, &op, p.in, 2, &p.out, 1) == TLM_ERR_INVALID_ARGUMENT, "layout 7");
  op = p.op;
  CHECK(tlm_run(rt, &op, p.in, 1, &p.out, 1) == TLM_ERR_INVALID_ARGUMENT, "one input");
  tlm_tensor w = p.in[1];
  w.shape[1] = 3;
  tlm_tensor in2[2] = {p.in[0], w};
  CHECK(tlm_run(rt, &op, in2, 2, &p.out, 1) == TLM_ERR_SHAPE_MISMATCH, "weights IC 3 of 4");
  tlm_tensor alias = p.out;
  alias.data = p.in[0].data;
  CHECK(tlm_run(rt, &op, p.in, 2, &alias, 1) == TLM_ERR_ALIASING, "dst == src");
  tlm_tensor y5 = p.out;
  y5.ndim = 5;
  y5.shape[4] = 1;
  y5.strides[4] = 1;
  CHECK(tlm_run(rt, &op, p.in, 2, &y5, 1) == TLM_ERR_SHAPE_MISMATCH, "dst of 5 dims");
  tlm_conv_problem_free(&p);
}

/* pooling: max and average (padding excluded), global, 3-D and 1-D, odd
 * extents and channel tails, both layouts, default and random schedules,
 * against tlm_ref_pool */
static void pooling(tlm_runtime *rt) {
  static const pool_case cases[] = {
      {4, 1, 64, {1, 112, 112}, {1, 3, 3}, {1, 2, 2}, {0, 1, 1}}, /* ResNet's stem pool */
      {4, 2, 5, {1, 13, 11}, {1, 2, 3}, {1, 2, 1}, {0, 1, 0}},
      {4, 1, 2048, {1, 7, 7}, {1, 0, 0}, {1, 1, 1}, {0, 0, 0}}, /* global average */
      {4, 3, 17, {1, 9, 9}, {1, 0, 0}, {1, 1, 1}, {0, 0, 0}},
      {5, 1, 33, {5, 6, 7}, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}},
      {3, 2, 7, {1, 1, 29}, {1, 1, 4}, {1, 1, 3}, {0, 0, 2}},
      {4, 1, 1, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}},
  };
  char err[256];
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
    for (int alg = 0; alg < 2; alg++)
      for (int lay = 0; lay < 2; lay++)
        for (int rep = 0; rep < 3; rep++) {
          int nd = cases[ci].nd;
          int64_t xs[5], ys[5], nx, ny;
          tlm_op op = pool_case_shapes(&cases[ci], alg, lay, xs, ys, &nx, &ny);
          float *x = malloc(sizeof(float) * (size_t)nx), *y = malloc(sizeof(float) * (size_t)ny);
          float *ref = malloc(sizeof(float) * (size_t)ny);
          for (int64_t i = 0; i < nx; i++) x[i] = (float)((tlm_rng_next(&g_rng) >> 40) % 1000) / 100.0f - 5.0f;
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
            if (rep == 0) {
              st = tlm_run(rt, &op, &X, 1, &Y, 1);
              snprintf(err, sizeof err, "%s", tlm_last_error(rt));
            } else {
              tlm_space sp;
              tlm_space_init(&sp, &task, &rt->target);
              tlm_schedule sched;
              tlm_space_sample(&sp, &g_rng, &sched);
              tlm_kernel *k;
              st = tlm_engine_kernel(rt, &task, &sched, &k, err, sizeof err);
              if (st == TLM_OK) st = tlm_engine_exec(rt, k, &task, &args, err, sizeof err);
            }
            double worst = 0;
            for (int64_t i = 0; i < ny && st == TLM_OK; i++) {
              double e = fabs((double)y[i] - ref[i]) / (1.0 + fabs((double)ref[i]));
              if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
            }
            CHECK(st == TLM_OK && worst <= (alg ? 1e-6 : 0.0), "pool case %zu alg %d layout %d "
                  "rep %d: %s err %g", ci, alg, lay, rep, err, worst);
          }
          free(x), free(y), free(ref);
        }
  /* bad input */
  float a[64], b[64];
  tlm_tensor X, Y;
  tlm_tensor_dense(&X, TLM_F32, 4, (int64_t[]){1, 1, 8, 8}, a);
  tlm_tensor_dense(&Y, TLM_F32, 4, (int64_t[]){1, 1, 4, 4}, b);
  tlm_op op = tlm_op_pool(TLM_LAYOUT_NCHW, TLM_POOL_MAX);
  op.u.pool.kernel[1] = op.u.pool.kernel[2] = 2;
  op.u.pool.stride[1] = op.u.pool.stride[2] = 2;
  CHECK(tlm_run(rt, &op, &X, 1, &Y, 1) == TLM_OK, "2x2/2 max pool: %s", tlm_last_error(rt));
  op.u.pool.pad[1] = 2;
  CHECK(tlm_run(rt, &op, &X, 1, &Y, 1) == TLM_ERR_INVALID_ARGUMENT, "pad >= kernel");
  op.u.pool.pad[1] = 0;
  op.u.pool.kernel[1] = 0;
  CHECK(tlm_run(rt, &op, &X, 1, &Y, 1) == TLM_ERR_SHAPE_MISMATCH, "global pool with dst extent 4");
  op.u.pool.kernel[1] = 2;
  tlm_tensor Yb = Y;
  Yb.shape[2] = 9;
  Yb.strides[1] = 36;
  Yb.strides[0] = 36;
  CHECK(tlm_run(rt, &op, &X, 1, &Yb, 1) != TLM_OK, "dst windows beyond the input");
  op.u.pool.alg = (tlm_pool_alg)5;
  CHECK(tlm_run(rt, &op, &X, 1, &Y, 1) == TLM_ERR_INVALID_ARGUMENT, "pool alg 5");
  /* max propagates NaN; an average over 25 million positions of 1.0 (a
   * broadcast src: stride 0) is exactly 1 (a float sum stalls at 2^24) */
  {
    float q[4] = {NAN, NAN, -INFINITY, 1.0f}, o[2] = {0, 0};
    tlm_tensor Q, O;
    tlm_tensor_dense(&Q, TLM_F32, 3, (int64_t[]){1, 1, 4}, q);
    tlm_tensor_dense(&O, TLM_F32, 3, (int64_t[]){1, 1, 2}, o);
    tlm_op mp = tlm_op_pool(TLM_LAYOUT_NCHW, TLM_POOL_MAX);
    mp.u.pool.kernel[2] = mp.u.pool.stride[2] = 2;
    CHECK(tlm_run(rt, &mp, &Q, 1, &O, 1) == TLM_OK && isnan(o[0]) && o[1] == 1.0f,
          "max pool of {NaN, NaN} gave %g (want NaN), of {-inf, 1} %g", o[0], o[1]);
    float one = 1.0f, avg = 0;
    tlm_tensor B = {TLM_F32, 4, {1, 1, 5000, 5000}, {0, 0, 0, 0}, &one, TLM_DEVICE_CPU, 0}, A;
    tlm_tensor_dense(&A, TLM_F32, 4, (int64_t[]){1, 1, 1, 1}, &avg);
    tlm_op gp = tlm_op_pool(TLM_LAYOUT_NCHW, TLM_POOL_AVG);
    gp.u.pool.kernel[1] = gp.u.pool.kernel[2] = 0;
    CHECK(tlm_run(rt, &gp, &B, 1, &A, 1) == TLM_OK && avg == 1.0f,
          "global average of 25M ones is %.9g", avg);
  }
}

/* The space offers lanes along ow (vec_axis 1) for an NHWC destination only
 * when the channels along the lanes do not fill a vector of the target: a
 * depthwise layer of as many groups as lanes gets the channel axes only,
 * one of fewer groups, and any NCHW layer, get ow too. */
static void ow_lanes(tlm_runtime *rt) {
  const int lanes = rt->target.vec_lanes;
  if (lanes < 2) return; /* scalar target: no vector to fill */
  struct {
    int64_t g;
    tlm_layout layout;
    int want_ow;
  } cases[] = {{lanes, TLM_LAYOUT_NHWC, 0}, {4 * lanes, TLM_LAYOUT_NHWC, 0},
               {lanes - 1, TLM_LAYOUT_NHWC, 1}, {lanes, TLM_LAYOUT_NCHW, 1}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char line[160], err[256];
    snprintf(line, sizeof line, "g%lldmb1ic%lldih14oc%lldoh14kh3ph1n\"dw\"", (long long)cases[i].g,
             (long long)cases[i].g, (long long)cases[i].g);
    tlm_conv_prb prb;
    tlm_conv_problem p;
    tlm_task task;
    tlm_conv_args args;
    if (tlm_conv_prb_parse(line, &prb, err, sizeof err) != 1 ||
        tlm_conv_problem_make(&prb, cases[i].layout, TLM_WEIGHTS_OIHW, NULL, 1, &p)) {
      CHECK(0, "%s: %s", line, err);
      continue;
    }
    if (tlm_validate_conv(&p.op, p.in, p.n_in, &p.out, 1, &task, &args, err, sizeof err) == TLM_OK) {
      tlm_space space;
      tlm_space_init(&space, &task, &rt->target);
      int32_t d[TLM_MAX_POINTS] = {0}, c[TLM_MAX_CANDIDATES];
      int n = tlm_space_candidates(&space, CV_AXIS, d, c), ow = 0;
      for (int j = 0; j < n; j++) ow |= c[j] == 1;
      CHECK(ow == cases[i].want_ow, "%s layout %d: lanes along ow %s (%d lanes)", line,
            (int)cases[i].layout, ow ? "offered" : "not offered", lanes);
    } else {
      CHECK(0, "%s: %s", line, err);
    }
    tlm_conv_problem_free(&p);
  }
}

/* rule 15: tiles of at most TLM_CONV_PTR_ROWS rows (each row's src pixel
 * has a register of its own in the safe version; depthwise too), rows that leave no tail
 * over a short extent (12 pixels: 6 + 6), at both layouts; the rule's
 * schedules pass the reference check */
static void rule_rows(tlm_runtime *rt) {
  static const struct {
    const char *line;
    int nhwc_rows; /* the rule's rows in NHWC on 32 registers of 16 lanes; 0: only the bound */
  } cases[] = {{"mb1ic25iw13oc24ow12kw3", 6},     {"mb1ic20ih13oc32oh13kh3ph1", 0},
               {"mb1ic256ih13oc32oh13kh1", 0},    {"mb1ic20iw13oc32ow13kw3", 0},
               {"mb1ic16ih10oc16oh8kh5ph1", 0},   {"mb1ic7ih9oc5oh9kh3ph1", 0},
               {"g16mb1ic16ih56oc16oh56kh3ph1", 0}, {"g16mb1ic16ih28oc16oh28kh5ph2", 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int lay = 0; lay < 2; lay++) {
      char err[256], ss[512], what[700];
      tlm_conv_prb prb;
      tlm_conv_problem p;
      tlm_task task;
      tlm_conv_args args;
      tlm_layout L = lay ? TLM_LAYOUT_NHWC : TLM_LAYOUT_NCHW;
      if (tlm_conv_prb_parse(cases[i].line, &prb, err, sizeof err) != 1 ||
          tlm_conv_problem_make(&prb, L, TLM_WEIGHTS_OIHW, NULL, 3 + i, &p)) {
        CHECK(0, "%s: %s", cases[i].line, err);
        continue;
      }
      if (tlm_validate_conv(&p.op, p.in, p.n_in, &p.out, 1, &task, &args, err, sizeof err)) {
        CHECK(0, "%s: %s", cases[i].line, err);
        tlm_conv_problem_free(&p);
        continue;
      }
      tlm_space space;
      tlm_space_init(&space, &task, &rt->target);
      tlm_schedule s;
      tlm_space_default(&space, &s);
      tlm_schedule_str(&space, &s, ss, sizeof ss);
      CHECK(s.v[CV_ROWS] <= TLM_CONV_PTR_ROWS, "%s layout %d: %d tile rows, at most %d [%s]",
            cases[i].line, lay, s.v[CV_ROWS], TLM_CONV_PTR_ROWS, ss);
      if (lay && cases[i].nhwc_rows && rt->target.vec_regs == 32 && rt->target.vec_lanes == 16)
        CHECK(s.v[CV_ROWS] == cases[i].nhwc_rows, "%s: %d tile rows, want %d [%s]", cases[i].line,
              s.v[CV_ROWS], cases[i].nhwc_rows, ss);
      snprintf(what, sizeof what, "%s layout %d rule [%s]", cases[i].line, lay, ss);
      run_check(rt, &p, what, &s);
      tlm_conv_problem_free(&p);
    }
}

/* a problem of `line` (NHWC, HWIO weights) with epilogue e (NULL: none),
 * validated into task; 0, or -1 (checked) on a bad line */
static int nhwc_problem(const char *line, const tlm_conv_epi *e, uint64_t seed, tlm_conv_problem *p,
                        tlm_task *task) {
  char err[256];
  tlm_conv_prb prb;
  tlm_conv_args args;
  if (tlm_conv_prb_parse(line, &prb, err, sizeof err) != 1 ||
      tlm_conv_problem_make(&prb, TLM_LAYOUT_NHWC, TLM_WEIGHTS_HWIO, e, seed, p)) {
    CHECK(0, "%s: %s", line, err);
    return -1;
  }
  if (tlm_validate_conv(&p->op, p->in, p->n_in, &p->out, 1, task, &args, err, sizeof err)) {
    CHECK(0, "%s: %s", line, err);
    tlm_conv_problem_free(p);
    return -1;
  }
  return 0;
}

/* line's NHWC problem (HWIO weights) with the rule's schedule for this
 * runtime's target, printed into ss; 0, or -1 (checked) on a bad line */
static int nhwc_rule(tlm_runtime *rt, const char *line, uint64_t seed, tlm_conv_problem *p,
                     tlm_task *task, tlm_schedule *s, char *ss, size_t sscap) {
  if (nhwc_problem(line, NULL, seed, p, task)) return -1;
  tlm_space space;
  tlm_space_init(&space, task, &rt->target);
  tlm_space_default(&space, s);
  tlm_schedule_str(&space, s, ss, (int)sscap);
  return 0;
}

/* rule 16: an NHWC depthwise layer's tile takes the most vectors (up to
 * 4) whose tiles leave the fewest lanes without data (144 groups: 3 x 48
 * lanes on AVX-512, 6 x 24 on AVX2, not 64 + 64 + 16), the widest where
 * 4 vectors divide the groups; reference checks of each, odd maps */
static void dw_lanes(tlm_runtime *rt) {
  static const char *const lines[] = {"g144mb1ic144ih11oc144oh11kh3ph1", "g240mb1ic240ih9oc240oh5kh5sh2ph2",
                                      "g96mb1ic96ih13oc96oh13kh3ph1",    "g120mb1ic120ih7oc120oh7kh3ph1",
                                      "g64mb1ic64ih7oc64oh7kh3ph1",      "g40mb1ic40ih5oc40oh5kh3ph1"};
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
    char ss[512], what[700];
    tlm_conv_problem p;
    tlm_task task;
    tlm_schedule s;
    if (nhwc_rule(rt, lines[i], 40 + i, &p, &task, &s, ss, sizeof ss)) continue;
    int64_t G = task.u.conv.G, W = s.v[CV_VEC], tile = s.v[CV_TILE_V];
    CHECK(s.v[CV_AXIS] == 2, "%s: lanes on axis %d, want the groups [%s]", lines[i], s.v[CV_AXIS], ss);
    int64_t most = (G + W - 1) / W < 4 ? (G + W - 1) / W : 4;
    int64_t lanes = (G + tile - 1) / tile * tile;
    for (int64_t nv = 1; nv <= most; nv++) {
      int64_t l = (G + nv * W - 1) / (nv * W) * nv * W;
      CHECK(l > lanes || (l == lanes && nv * W <= tile),
            "%s: a tile of %lld lanes covers the groups in %lld lanes, the rule's %lld in %lld [%s]",
            lines[i], (long long)(nv * W), (long long)l, (long long)tile, (long long)lanes, ss);
    }
    if (W == 16 && G == 144)
      CHECK(tile == 48, "%s: %lld lanes a tile on AVX-512, want 48 [%s]", lines[i], (long long)tile, ss);
    if (W == 8 && G == 144)
      CHECK(tile == 24, "%s: %lld lanes a tile on AVX2, want 24 [%s]", lines[i], (long long)tile, ss);
    snprintf(what, sizeof what, "%s depthwise rule [%s]", lines[i], ss);
    run_check(rt, &p, what, &s);
    tlm_conv_problem_free(&p);
  }
}

/* codegen 34: a tile with only the safe version (lanes along output
 * channels, 2048+ FMAs and ICg x vectors >= 128: emit_tile's bound,
 * restated as this test's premise) over a map with padding along ow runs
 * the interior columns first, then the edge columns (pixel_of,
 * pixel_next), skipping kernel rows and columns that every row of a tile
 * reads in the padding. Reference checks with the rule and sampled
 * schedules that take that version: tiles that wrap, straddle the
 * interior and an edge column, or cross from one edge column to the
 * next; strides, dilation, 5x5, a channel tail, padding wider than the
 * kernel (whole windows in it), an ow short of the padding, maps of 1
 * and 2 pixels (no interior) and a minibatch of 2. */
static int safe_only_tile(const tlm_task *task, const tlm_schedule *s) {
  const tlm_conv_task *t = &task->u.conv;
  int64_t nv = s->v[CV_TILE_V] / s->v[CV_VEC];
  return s->v[CV_AXIS] == 0 && t->ICg * nv >= 128 &&
         (int64_t)t->ICg * t->KD * t->KH * t->KW * s->v[CV_ROWS] * nv >= 2048;
}

static void edges_apart(tlm_runtime *rt) {
  static const char *const lines[] = {
      "mb1ic128ih14oc128oh14kh3ph1",        "mb2ic96ih7oc80oh7kh3ph1",
      "mb1ic128ih13iw17oc128oh13ow17kh3kw3ph1pw1", "mb1ic64ih12oc64oh6kh5sh2ph2",
      "mb1ic64ih11oc64oh11kh3ph2dh1",       "mb1ic128oc128_ih10kh5_ph7sh1",
      "mb1ic128oc128_ih16kh3ph1oh16_iw16kw3pw1ow15", "mb1ic153oc153_ih5oh5kh3ph1",
      "mb1ic64ih2oc64oh2kh3ph1",            "mb1ic128ih1oc128oh1kh3ph1",
      "mb1ic96ih9oc96oh5kh3sh2ph1"};
  int rule_safe = 0, sampled = 0;
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
    char ss[512], what[700];
    tlm_conv_problem p;
    tlm_task task;
    tlm_schedule s;
    if (nhwc_rule(rt, lines[i], 60 + i, &p, &task, &s, ss, sizeof ss)) continue;
    rule_safe += safe_only_tile(&task, &s);
    snprintf(what, sizeof what, "%s edges apart, rule [%s]", lines[i], ss);
    run_check(rt, &p, what, &s);
    tlm_space space;
    tlm_space_init(&space, &task, &rt->target);
    for (int tries = 0, taken = 0; tries < 200 && taken < 2; tries++) {
      tlm_space_sample(&space, &g_rng, &s);
      if (!safe_only_tile(&task, &s)) continue;
      taken++, sampled++;
      snprintf(what, sizeof what, "%s edges apart, sampled [%s]", lines[i],
               tlm_schedule_str(&space, &s, ss, sizeof ss));
      run_check(rt, &p, what, &s);
    }
    tlm_conv_problem_free(&p);
  }
  CHECK(rule_safe >= 5 && sampled >= 10,
        "the safe-only tile is the rule's on %d shapes and sampled %d times: too few to test it",
        rule_safe, sampled);
}

/* codegen 35: depthwise-like tiles with the window unrolled address the
 * input through a pointer per kernel row (no loop strength reduction
 * pass), and every tile the fast one-row version does not take runs as
 * runs of pixels within one output row (runs_version): edge tiles one
 * run, tiles that wrap to the next output row two or more, the block's
 * partial last tile stopped at its end, rows past a run's end computed on
 * zeros and not stored. Reference checks with the rule and sampled
 * schedules that take that path: widths R does not divide (tiles that
 * wrap, some more than once), stride 2 and 3, dilation, 5x5, padding
 * wider than the window's reach, maps of 1 and 2 pixels, a channel tail
 * (the masked runs), two input channels per group, a minibatch of 2, a
 * 3-D map (the pointers set again for each kernel plane). */
/* run_check with dst a view whose output rows are two pixels apart more
 * than dense (NHWC, 4-D): the pixels between rows must keep their value
 * (a run stores only its own rows, none past an output row's end) */
static void run_check_row_gaps(tlm_runtime *rt, tlm_conv_problem *p, const char *what,
                               const tlm_schedule *sched) {
  tlm_tensor dense = p->out;
  if (dense.ndim != 4) return;
  int64_t N = dense.shape[0], OH = dense.shape[1], OW = dense.shape[2], C = dense.shape[3];
  int64_t rs = (OW + 2) * C, n = N * OH * rs;
  float *buf = malloc((size_t)n * sizeof *buf);
  CHECK(buf != NULL, "out of memory");
  if (!buf) return;
  for (int64_t i = 0; i < n; i++) buf[i] = 12345.0f;
  p->out.data = buf;
  p->out.strides[0] = OH * rs, p->out.strides[1] = rs, p->out.strides[2] = C, p->out.strides[3] = 1;
  char w2[800];
  snprintf(w2, sizeof w2, "%s, dst rows 2 pixels apart", what);
  run_check(rt, p, w2, sched);
  int64_t touched = 0;
  for (int64_t b = 0; b < N * OH; b++)
    for (int64_t i = OW * C; i < rs; i++) touched += buf[b * rs + i] != 12345.0f;
  CHECK(touched == 0, "%s: %lld values stored between output rows", w2, (long long)touched);
  p->out = dense;
  free(buf);
}

static void dw_runs(tlm_runtime *rt) {
  static const char *const lines[] = {
      "g40mb1ic40ih7oc40oh7kh3ph1",          "g24mb2ic24ih9iw5oc24oh5ow3kh3kw3sh2sw2ph1pw1",
      "g17mb1ic17ih10oc17oh4kh3sh3ph2dh1",   "g32mb1ic32ih1oc32oh1kh3ph1",
      "g64mb1ic64ih13iw11oc64oh13ow11kh5kw5ph2pw2", "g48mb1ic48ih6oc48oh10kh3ph3",
      "g16mb1ic16ih9iw2oc16oh9ow4kh3kw3ph1pw2", "g8mb1ic16ih7oc16oh7kh3ph1",
      "g128mb1ic128ih14oc128oh7kh3sh2ph1",   "g72mb1ic72ih3iw2oc72oh3ow2kh3kw3ph1pw1",
      "g16mb1ic16id5ih6iw7oc16od5oh6ow7kd3kh3kw3pd1ph1pw1"};
  int reduced = 0, wrapping = 0;
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
    char ss[512], what[700];
    tlm_conv_problem p;
    tlm_task task;
    tlm_schedule s;
    if (nhwc_rule(rt, lines[i], 90 + i, &p, &task, &s, ss, sizeof ss)) continue;
    tlm_space space;
    tlm_space_init(&space, &task, &rt->target);
    for (int tries = 0, taken = 0; tries < 300 && taken < 4; tries++) {
      if (tries > 0) tlm_space_sample(&space, &g_rng, &s);
      if (!tlm_jit_conv_strength_reduced(&task, &s)) continue;
      taken++, reduced++;
      wrapping += task.u.conv.OW % s.v[CV_ROWS] != 0;
      snprintf(what, sizeof what, "%s row pointers, %s [%s]", lines[i], tries ? "sampled" : "rule",
               tlm_schedule_str(&space, &s, ss, sizeof ss));
      if (taken == 1) run_check_row_gaps(rt, &p, what, &s);
      else run_check(rt, &p, what, &s);
    }
    tlm_conv_problem_free(&p);
  }
  CHECK(reduced >= 25 && wrapping >= 8,
        "%d schedules with row pointers, %d with tiles that wrap: too few to test them", reduced,
        wrapping);
}

/* rule 23: with more than one worker, an NHWC depthwise convolution splits
 * its groups into channel blocks of the fewest register tiles (a power of
 * two) whose block of 8 pixel tiles holds 4096 channel-pixels (or one
 * block of them all), and runs them minor in its parallel loop (parallel
 * = 3), so the workers share a small map's groups; with one worker, one
 * block and no parallel loop, and so below TLM_PARALLEL_MIN_FLOPS (the
 * maps under 10x10 of fewer than 512 groups). The rule version follows.
 * The schedules made for 1, 2 and 3 workers pass the reference check in
 * this runtime (5x5 and 7x7 maps, tile and block tails, stride 2, 5x5
 * windows, two images), and so do 3, 5 and 7 workers' on a runtime of
 * that many threads. */
static void dw_split(tlm_runtime *rt) {
  static const char *const lines[] = {
      "g1024mb1ic1024ih5oc1024oh5kh3ph1", "g144mb1ic144ih7oc144oh7kh3ph1",
      "g96mb1ic96ih9oc96oh5kh3sh2ph1",   "g40mb1ic40ih6oc40oh6kh5ph2",
      "g32mb1ic32ih11oc32oh11kh3ph1",    "g200mb2ic200ih3oc200oh3kh3ph1",
      "g512mb1ic512ih10oc512oh10kh3ph1", "g2048mb1ic2048ih4oc2048oh4kh3ph1",
      "g1000mb1ic1000ih7oc1000oh7kh3ph1", "g200mb2ic200ih9oc200oh9kh3ph1",
      "g480mb1ic480ih14oc480oh7kh5sh2ph2"};
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
    tlm_conv_problem p;
    tlm_task task;
    if (nhwc_problem(lines[i], NULL, 60 + i, &p, &task)) continue;
    for (int workers = 1; workers <= 3; workers++) {
      tlm_target tg = rt->target;
      tg.threads = workers;
      tlm_space space;
      tlm_space_init(&space, &task, &tg);
      tlm_schedule s;
      tlm_space_default(&space, &s);
      char ss[512], what[700];
      tlm_schedule_str(&space, &s, ss, sizeof ss);
      CHECK(s.v[CV_AXIS] == 2, "%s: lanes on axis %d [%s]", lines[i], s.v[CV_AXIS], ss);
      int64_t G = task.u.conv.G, c_t = s.v[CV_TILE_V], k = s.v[CV_TILE_C2];
      int64_t per_tile = c_t * s.v[CV_ROWS] * 8;
      double flops = tlm_task_flops(&task);
      int par = workers > 1 && flops >= 2e5;
      if (!par) {
        CHECK(k * c_t >= G && s.v[CV_PARALLEL] == 0,
              "%s, %d workers: channel blocks of %lld tiles, parallel %d [%s]", lines[i], workers,
              (long long)k, s.v[CV_PARALLEL], ss);
      } else {
        CHECK((k * per_tile >= 4096 || k * c_t >= G) && (k == 1 || (k / 2) * per_tile < 4096),
              "%s, %d workers: channel blocks of %lld tiles of %lld channel-pixels [%s]", lines[i],
              workers, (long long)k, (long long)per_tile, ss);
        CHECK(s.v[CV_PARALLEL] == 3, "%s, %d workers: parallel %d [%s]", lines[i], workers,
              s.v[CV_PARALLEL], ss);
      }
      int version = tlm_rule_family_version(&task, &tg);
      CHECK((version == 23) == par, "%s, %d workers: rule version %d [%s]", lines[i], workers,
            version, ss);
      snprintf(what, sizeof what, "%s, the rule for %d workers [%s]", lines[i], workers, ss);
      run_check(rt, &p, what, &s);
    }
    tlm_conv_problem_free(&p);
  }
  /* runtimes of 3, 5 and 7 threads (the pool's chunks split the groups
   * among more workers than cores): each its own rule's schedule */
  for (int threads = 3; threads <= 7; threads += 2) {
    tlm_config cfg;
    tlm_config_init(&cfg);
    cfg.cache_dir = "none";
    cfg.model_path = "none";
    cfg.num_threads = threads;
    cfg.async_compile = 0;
    tlm_runtime *rn;
    if (tlm_create(&cfg, &rn) != TLM_OK) {
      CHECK(0, "tlm_create (%d threads): %s", threads, tlm_last_error(NULL));
      continue;
    }
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
      tlm_conv_problem p;
      tlm_task task;
      if (nhwc_problem(lines[i], NULL, 80 + i, &p, &task)) continue;
      tlm_space space;
      tlm_space_init(&space, &task, &rn->target);
      tlm_schedule s;
      tlm_space_default(&space, &s);
      char ss[512], what[700];
      tlm_schedule_str(&space, &s, ss, sizeof ss);
      snprintf(what, sizeof what, "%s, %d threads [%s]", lines[i], threads, ss);
      run_check(rn, &p, what, &s);
      tlm_conv_problem_free(&p);
    }
    tlm_destroy(rn);
  }
}

/* rule 18: lanes along output channels that do not fill the full width
 * take the narrowest vector of at least 4 lanes that holds them (8
 * channels a group: 8 lanes; 4: 4; 5: 8; 20: the full width), at both
 * layouts where the rule puts the lanes on the channels; reference checks */
static void narrow_vec(tlm_runtime *rt) {
  static const char *const lines[] = {"g8mb1ic64ih15oc64oh8kh3sh2ph1", "g4mb1ic16ih13oc16oh13kh3ph1",
                                      "g4mb1ic20ih5oc20oh5kh3ph1",     "mb1ic96ih1oc4oh1kh1",
                                      "mb1ic19ih7oc3oh7kh3ph1",        "g2mb1ic40ih6oc40oh6kh3ph1"};
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
    char ss[512], what[700];
    tlm_conv_problem p;
    tlm_task task;
    tlm_schedule s;
    if (nhwc_rule(rt, lines[i], 50 + i, &p, &task, &s, ss, sizeof ss)) continue;
    int64_t ocg = task.u.conv.OCg, full = rt->target.vec_lanes;
    if (s.v[CV_AXIS] == 0) {
      int64_t want = full;
      if (ocg < full)
        for (int64_t w = 4; w <= full; w *= 2)
          if (w >= ocg) {
            want = w;
            break;
          }
      if (full < 4) want = full;
      CHECK(s.v[CV_VEC] == want, "%s: %d lanes for %lld channels a group, want %lld [%s]",
            lines[i], s.v[CV_VEC], (long long)ocg, (long long)want, ss);
    }
    snprintf(what, sizeof what, "%s narrow vectors rule [%s]", lines[i], ss);
    run_check(rt, &p, what, &s);
    tlm_conv_problem_free(&p);
  }
}

/* a two-thread runtime without a disk cache; room 0: no weight copy fits
 * (prepack_bytes 1). NULL if it cannot be created. */
static tlm_runtime *prepack_runtime(int room) {
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.cache_dir = "none";
  cfg.num_threads = 2;
  if (!room) cfg.prepack_bytes = 1; /* no copy fits */
  tlm_runtime *rt;
  return tlm_create(&cfg, &rt) == TLM_OK ? rt : NULL;
}

/* channel blocks (api/tlm.c conv_oc_blocked): an NHWC convolution with a
 * window, HWIO weights declared constant and >= 256 output channels in
 * whole blocks of 64 runs block by block over a packed copy of its
 * weights; every epilogue, padding, strides, dilation, a minibatch, 3-D;
 * with no room for the copy (the blocks read the caller's weights); the
 * copy made once and freed by tlm_constant_remove; not blocked with the
 * weights undeclared, 300 channels, or OIHW weights (still correct) */
static void oc_blocks(void) {
  const char *descs[] = {"mb1ic32ih14oc256oh14kh3ph1", "mb2ic37ih13iw11oc320oh7ow6kh3kw3sh2sw2ph1pw1",
                         "mb1ic16ih20oc256oh16kh3dh1", "mb1ic8id4ih6iw6oc256od4oh6ow6kd3kh3kw3pd1ph1pw1",
                         "mb1ic8ih9oc512oh9kh5ph2",
                         /* not blocked: few pixels (im2col but under AVX-512; blocked
                          * with a scale/shift, which im2col does not take), 300 channels */
                         "mb1ic256ih14oc256oh14kh3ph1", "mb1ic40ih7oc300oh7kh3ph1",
                         /* few pixels, a block's weights (K = 4140 rows of 64: 1.01 MiB)
                          * over a 1 MiB L2 and within twice it: blocked where AVX-512 is
                          * double-pumped (Zen 4), im2col on full-width AVX-512 */
                         "mb1ic460ih3oc256oh3kh3ph1"};
  int nblocked = 0;
  char err[256], what[300];
  for (int room = 0; room < 2; room++) {
    tlm_runtime *rt = prepack_runtime(room);
    if (!rt) return;
    for (size_t i = 0; i < sizeof descs / sizeof descs[0]; i++) {
      tlm_conv_prb prb;
      CHECK(tlm_conv_prb_parse(descs[i], &prb, err, sizeof err) == 1, "%s: %s", descs[i], err);
      for (int v = 0; v < 5; v++) {
        int act = v % TLM_ACT_COUNT_;
        tlm_conv_epi epi = {v & 1, v >= 3, v == 2 || v == 4, (tlm_activation)act};
        int declared = v != 3, hwio = v != 4 || room == 0;
        tlm_conv_problem p;
        if (tlm_conv_problem_make(&prb, TLM_LAYOUT_NHWC, hwio ? TLM_WEIGHTS_HWIO : TLM_WEIGHTS_OIHW,
                                  &epi, 11 + v, &p))
          continue;
        size_t wbytes = tlm_tensor_span_bytes(&p.in[1]);
        if (declared)
          CHECK(tlm_constant_add(rt, p.in[1].data, wbytes) == TLM_OK, "constant_add: %s",
                tlm_last_error(rt));
        tlm_stats s0, s1;
        tlm_get_stats(rt, &s0);
        snprintf(what, sizeof what, "%s epilogue %d room %d declared %d hwio %d", descs[i], v, room,
                 declared, hwio);
        for (int rep = 0; rep < 2; rep++) { /* packs, then reuses the copy */
          memset(p.out.data, 0xff, tlm_tensor_span_bytes(&p.out)); /* NaN: all must be written */
          run_check(rt, &p, what, NULL);
        }
        tlm_get_stats(rt, &s1);
        tlm_task vt;
        tlm_conv_args va;
        int blocked = declared && tlm_validate_conv(&p.op, p.in, p.n_in, &p.out, 1, &vt, &va, err,
                                                    sizeof err) == TLM_OK &&
                      tlm_conv_oc_blocks(&vt, &p.op, &rt->target) > 1;
        /* the few-pixel one goes to im2col under AVX2 and narrower, but not
         * with a scale/shift; under AVX-512 to blocks where a block's
         * weights (K = 2304 rows of 64) fit the L2 (few_pixels_direct in api/conv_as_matmul.c) */
        int64_t l2 = rt->target.l2_bytes; /* twice that where AVX-512 is double-pumped */
        if (tlm_target_double_pumped(&rt->target)) l2 = l2 * 32 * rt->target.vec_lanes / rt->target.fma_bits;
        int64_t kb = i == 7 ? 4140 : 2304; /* the few-pixel ones' K */
        int avx512 = rt->target.isa == TLM_ISA_AVX512 && kb * 64 * 4 <= l2;
        CHECK(blocked == (declared && hwio && (i < 5 || ((i == 5 || i == 7) && (epi.bn || avx512)))),
              "%s: blocked %d", what, blocked);
        nblocked += blocked;
        /* (unblocked ones may run as matmuls over B packed ahead) */
        CHECK(!blocked || s1.prepacks - s0.prepacks == (uint64_t)room, "%s: %llu copies packed",
              what, (unsigned long long)(s1.prepacks - s0.prepacks));
        if (declared) {
          CHECK(tlm_constant_remove(rt, p.in[1].data) == TLM_OK, "constant_remove");
          tlm_get_stats(rt, &s1);
          CHECK(s1.prepacked_bytes == 0, "%s: %llu bytes of copies after remove", what,
                (unsigned long long)s1.prepacked_bytes);
        }
        tlm_conv_problem_free(&p);
      }
    }
    tlm_destroy(rt);
  }
  CHECK(nblocked >= 30, "only %d blocked runs", nblocked);
  /* the few-pixel bound by target: a block's weights within L2 (Zen 5,
   * full-width AVX-512), within twice L2 where AVX-512 is double-pumped
   * (Zen 4): ResNet-50's res5 3x3 (K 4608, 1.1 MiB a block) in blocks on
   * the Zen 4 only, a 3x3 over 1024 channels (2.25 MiB) on neither, res4's
   * (576 KiB) on both */
  tlm_target z4, z5;
  CHECK(tlm_target_from_hw("znver4; avx512+vnni 16 lanes, 32 regs, FMA 2x256 lat 4 (4 chains), 2 "
                           "cores, L1 32K L2 1024K L3 32768K; host avx512; AMD EPYC (family 25 "
                           "model 17)", &z4) == 0 &&
            tlm_target_from_hw("znver5; avx512+vnni 16 lanes, 32 regs, FMA 2x512 lat 4 (8 "
                               "chains), 2 cores, L1 48K L2 1024K L3 32768K; host avx512; AMD "
                               "EPYC (family 26 model 2)", &z5) == 0,
        "the Zen 4 and Zen 5 descriptions");
  static const struct { const char *desc; int z4, z5; } k_few[] = {
      {"mb1ic512ih7oc512oh7kh3ph1", 8, 0},
      {"mb1ic1024ih7oc512oh7kh3ph1", 0, 0},
      {"mb1ic256ih14oc256oh14kh3ph1", 4, 4}};
  for (size_t i = 0; i < sizeof k_few / sizeof k_few[0]; i++) {
    tlm_conv_prb prb;
    tlm_conv_problem p;
    tlm_conv_epi epi = {0, 0, 0, TLM_ACT_NONE};
    if (tlm_conv_prb_parse(k_few[i].desc, &prb, err, sizeof err) != 1 ||
        tlm_conv_problem_make(&prb, TLM_LAYOUT_NHWC, TLM_WEIGHTS_HWIO, &epi, 3, &p)) {
      CHECK(0, "%s: cannot make the problem", k_few[i].desc);
      continue;
    }
    tlm_task vt;
    tlm_conv_args va;
    CHECK(tlm_validate_conv(&p.op, p.in, p.n_in, &p.out, 1, &vt, &va, err, sizeof err) == TLM_OK,
          "%s: %s", k_few[i].desc, err);
    int b4 = tlm_conv_oc_blocks(&vt, &p.op, &z4), b5 = tlm_conv_oc_blocks(&vt, &p.op, &z5);
    CHECK(b4 == k_few[i].z4 && b5 == k_few[i].z5, "%s: %d blocks on the Zen 4, %d on the Zen 5",
          k_few[i].desc, b4, b5);
    tlm_conv_problem_free(&p);
  }
}

/* constant weights that start off a 64-byte line (where malloc puts them)
 * run from an aligned copy of the same layout (engine/prepack.c,
 * tlm_prepack_conv_aligned_locked): the same kernel, so the output is bit
 * for bit that of undeclared weights; one copy, made on first use, reused,
 * freed by tlm_constant_remove; none for aligned weights or with no room.
 * An NHWC 3x3 under the channel-block bound, a depthwise one, an NCHW one
 * with OIHW weights, and odd extents (a 5x5 over 7 to 13 channels). */
static void aligned_weights(void) {
  static const struct { const char *desc; tlm_layout layout; tlm_weight_layout wl; } k_cases[] = {
      {"mb1ic128ih28oc128oh28kh3ph1", TLM_LAYOUT_NHWC, TLM_WEIGHTS_HWIO},
      {"g64mb1ic64ih15oc64oh15kh3ph1", TLM_LAYOUT_NHWC, TLM_WEIGHTS_HWIO},
      {"mb2ic16ih19oc24oh19kh3ph1", TLM_LAYOUT_NCHW, TLM_WEIGHTS_OIHW},
      {"mb1ic7ih13iw11oc13oh9ow7kh5kw5", TLM_LAYOUT_NHWC, TLM_WEIGHTS_HWIO}};
  char err[256];
  for (int room = 0; room < 2; room++) {
    tlm_runtime *rt = prepack_runtime(room);
    if (!rt) return;
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
      tlm_conv_prb prb;
      tlm_conv_problem p;
      tlm_conv_epi epi = {1, 0, 0, TLM_ACT_RELU};
      if (tlm_conv_prb_parse(k_cases[i].desc, &prb, err, sizeof err) != 1 ||
          tlm_conv_problem_make(&prb, k_cases[i].layout, k_cases[i].wl, &epi, 5 + i, &p)) {
        CHECK(0, "%s: cannot make the problem", k_cases[i].desc);
        continue;
      }
      size_t wbytes = tlm_tensor_span_bytes(&p.in[1]), obytes = tlm_tensor_span_bytes(&p.out);
      float *wbuf = aligned_alloc(64, (wbytes + 128 + 63) / 64 * 64);
      float *ref = malloc(obytes);
      void *own = p.in[1].data;
      if (!wbuf || !ref) {
        CHECK(0, "out of memory");
        free(wbuf), free(ref);
        tlm_conv_problem_free(&p);
        continue;
      }
      for (int off = 0; off < 2; off++) { /* 16 bytes past a line, then on one */
        float *w = wbuf + (off ? 0 : 4);
        memcpy(w, own, wbytes);
        p.in[1].data = w;
        char what[128];
        snprintf(what, sizeof what, "%s room %d %s", k_cases[i].desc, room,
                 off ? "aligned" : "off a line");
        tlm_stats s0, s1;
        run_check(rt, &p, what, NULL); /* undeclared */
        memcpy(ref, p.out.data, obytes);
        CHECK(tlm_constant_add(rt, w, wbytes) == TLM_OK, "%s: constant_add: %s", what,
              tlm_last_error(rt));
        tlm_get_stats(rt, &s0);
        for (int rep = 0; rep < 2; rep++) {
          memset(p.out.data, 0xff, obytes);
          run_check(rt, &p, what, NULL);
          CHECK(!memcmp(ref, p.out.data, obytes), "%s: declared differs from undeclared (run %d)",
                what, rep);
        }
        tlm_get_stats(rt, &s1);
        uint64_t want = room && !off ? 1 : 0;
        CHECK(s1.prepacks - s0.prepacks == want, "%s: %llu copies, want %llu", what,
              (unsigned long long)(s1.prepacks - s0.prepacks), (unsigned long long)want);
        CHECK((s1.prepacked_bytes >= wbytes) == (want == 1), "%s: %llu bytes of copies", what,
              (unsigned long long)s1.prepacked_bytes);
        CHECK(tlm_constant_remove(rt, w) == TLM_OK, "%s: constant_remove", what);
        tlm_get_stats(rt, &s1);
        CHECK(s1.prepacked_bytes == 0, "%s: %llu bytes of copies after remove", what,
              (unsigned long long)s1.prepacked_bytes);
      }
      p.in[1].data = own;
      free(wbuf);
      free(ref);
      tlm_conv_problem_free(&p);
    }
    tlm_destroy(rt);
  }
}

/* the aligned copies copy only weights that fill their span: weights
 * with gaps (a kh stride of twice the dense one, NaN between) off a line
 * get no copy, declared or not, and stay correct (a copy of the span
 * read the gaps: a crash on an unreadable gap, a race with a thread
 * writing one, 16 MiB copied for 72 bytes). And a plain aligned copy in
 * a declared range does not make a matmul B in the same range constant
 * when B's own copy does not fit (tlm_prepack_b_constant). */
static void aligned_weights_gaps(void) {
  char err[256];
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.cache_dir = "none";
  cfg.num_threads = 2;
  tlm_runtime *rt;
  if (tlm_create(&cfg, &rt)) return;
  tlm_conv_prb prb;
  tlm_conv_problem p;
  tlm_conv_epi epi = {1, 0, 0, TLM_ACT_RELU};
  if (tlm_conv_prb_parse("mb1ic32ih20oc48oh20kh3ph1", &prb, err, sizeof err) != 1 ||
      tlm_conv_problem_make(&prb, TLM_LAYOUT_NHWC, TLM_WEIGHTS_HWIO, &epi, 9, &p)) {
    CHECK(0, "gaps: cannot make the problem");
    tlm_destroy(rt);
    return;
  }
  const int64_t KH = 3, KW = 3, IC = 32, OC = 48, slab = KW * IC * OC;
  size_t gapped = (size_t)(2 * KH * slab) * sizeof(float);
  float *buf = aligned_alloc(64, gapped + 64), *w = buf + 4; /* 16 bytes off a line */
  const float *dense = p.in[1].data;
  void *own = p.in[1].data;
  if (!buf) {
    CHECK(0, "out of memory");
    tlm_conv_problem_free(&p);
    tlm_destroy(rt);
    return;
  }
  for (size_t i = 0; i < 2 * (size_t)KH * slab; i++) w[i] = NAN;
  for (int64_t kh = 0; kh < KH; kh++)
    memcpy(w + 2 * kh * slab, dense + kh * slab, sizeof(float) * (size_t)slab);
  p.in[1].data = w;
  p.in[1].strides[0] = 2 * slab;
  for (int declared = 0; declared < 2; declared++) {
    if (declared)
      CHECK(tlm_constant_add(rt, w, gapped) == TLM_OK, "gaps: constant_add: %s", tlm_last_error(rt));
    tlm_stats s0, s1;
    tlm_get_stats(rt, &s0);
    run_check(rt, &p, declared ? "gapped weights, declared" : "gapped weights", NULL);
    tlm_get_stats(rt, &s1);
    CHECK(s1.prepacks == s0.prepacks && s1.prepacked_bytes == 0, "gapped weights: %llu copies",
          (unsigned long long)(s1.prepacks - s0.prepacks));
    if (declared) CHECK(tlm_constant_remove(rt, w) == TLM_OK, "gaps: constant_remove");
  }
  p.in[1].data = own;
  p.in[1].strides[0] = slab;
  free(buf);

  /* one declared range: the conv's weights off a line, then a 64x64 B */
  size_t wbytes = tlm_tensor_span_bytes(&p.in[1]), bbytes = 64 * 64 * sizeof(float);
  tlm_config c1 = cfg;
  c1.prepack_bytes = (wbytes + 63) / 64 * 64; /* the conv's copy, nothing more */
  tlm_runtime *r1;
  float *range = aligned_alloc(64, wbytes + bbytes + 128);
  if (range && tlm_create(&c1, &r1) == TLM_OK) {
    float *cw = range + 4, *b = range + 4 + wbytes / sizeof(float);
    memcpy(cw, own, wbytes);
    for (int i = 0; i < 64 * 64; i++) b[i] = (float)(i % 7) * 0.125f;
    CHECK(tlm_constant_add(r1, range, wbytes + bbytes + 128) == TLM_OK, "budget: constant_add");
    p.in[1].data = cw;
    run_check(r1, &p, "conv beside a B, one range", NULL);
    tlm_stats st;
    tlm_get_stats(r1, &st);
    CHECK(st.prepacks == 1, "budget: %llu copies, want the conv's one", (unsigned long long)st.prepacks);
    tlm_op mm = tlm_op_matmul();
    float a[8 * 64], c[8 * 64];
    for (int i = 0; i < 8 * 64; i++) a[i] = 1.0f;
    tlm_tensor in[2], out;
    tlm_tensor_dense(&in[0], TLM_F32, 2, (int64_t[]){8, 64}, a);
    tlm_tensor_dense(&in[1], TLM_F32, 2, (int64_t[]){64, 64}, b);
    tlm_tensor_dense(&out, TLM_F32, 2, (int64_t[]){8, 64}, c);
    tlm_task task;
    tlm_mm_args args;
    CHECK(tlm_validate_matmul(&mm, in, 2, &out, 1, &task, &args, err, sizeof err) == TLM_OK,
          "budget: %s", err);
    CHECK(tlm_prepack_b_constant(r1, &task, &args) == 0,
          "a B whose copy does not fit counts as constant beside a conv's aligned copy");
    p.in[1].data = own;
    tlm_destroy(r1);
  }
  free(range);
  tlm_conv_problem_free(&p);
  tlm_destroy(rt);
}

/* TLM_SCHEDULE_OVERRIDE: a runtime created with it runs the forced
 * schedule for the tasks whose descriptor contains the entry's text (the
 * result still the reference's), keeps its own schedule for the others and
 * for an entry whose decisions are not a schedule of the task's space, and
 * its scheduler id differs from a runtime's without it (forced plans are
 * never another runtime's) */
static void schedule_override(void) {
  const char *line = "g24mb1ic24ih9oc24oh9kh3ph1", *other = "g8mb1ic8ih6oc8oh6kh3ph1";
  tlm_conv_problem p, q;
  tlm_task task, task2;
  if (nhwc_problem(line, NULL, 7, &p, &task)) return;
  if (nhwc_problem(other, NULL, 8, &q, &task2)) {
    tlm_conv_problem_free(&p);
    return;
  }
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.cache_dir = "none";
  cfg.async_compile = 0;
  tlm_runtime *plain = NULL, *rt = NULL;
  CHECK(tlm_create(&cfg, &plain) == TLM_OK, "override: runtime");
  /* a schedule of the space that is not the rule's */
  tlm_space space;
  tlm_space_init(&space, &task, &plain->target);
  tlm_schedule rule, want = {0};
  tlm_space_default(&space, &rule);
  uint64_t rng = 11;
  for (int i = 0; i < 100; i++) {
    tlm_space_sample(&space, &rng, &want);
    if (memcmp(want.v, rule.v, sizeof want.v)) break;
  }
  char ss[512], env[1400], desc[256];
  tlm_schedule_str(&space, &want, ss, sizeof ss);
  tlm_task_str(&task, desc, sizeof desc);
  snprintf(env, sizeof env, "g8mb1_ic8ih6=vec=99 nonsense;%.14s=%s", desc, ss);
  setenv("TLM_SCHEDULE_OVERRIDE", env, 1);
  CHECK(tlm_create(&cfg, &rt) == TLM_OK, "override: runtime with it");
  unsetenv("TLM_SCHEDULE_OVERRIDE");
  if (rt && plain) {
    CHECK(tlm_engine_scheduler_id(rt) != tlm_engine_scheduler_id(plain),
          "override: the same scheduler id with and without it");
    run_check(rt, &p, "override: forced schedule", NULL);
    run_check(rt, &q, "override: bad entry, rule", NULL);
    const tlm_plan *plan;
    char err[256];
    CHECK(tlm_engine_plan(rt, &task, &plan, err, sizeof err) == TLM_OK, "override: plan %s", err);
    CHECK(!memcmp(plan->sched.v, want.v, sizeof want.v), "override: %s ran another schedule than [%s]",
          desc, ss);
    tlm_space s2;
    tlm_space_init(&s2, &task2, &rt->target);
    tlm_schedule rule2;
    tlm_space_default(&s2, &rule2);
    CHECK(tlm_engine_plan(rt, &task2, &plan, err, sizeof err) == TLM_OK, "override: plan %s", err);
    CHECK(!memcmp(plan->sched.v, rule2.v, sizeof rule2.v),
          "override: an entry with bad decisions changed %s's schedule", other);
  }
  tlm_destroy(rt);
  tlm_destroy(plain);
  tlm_conv_problem_free(&p);
  tlm_conv_problem_free(&q);
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "../shared";
  if (check_isa_unsupported()) return CHECK_SKIP;
  if (argc > 2) g_random = atoi(argv[2]);
  g_stride = check_sample_stride();
  g_one_layout = argc > 3 && !strcmp(argv[3], "alternate");
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.cache_dir = "none";
  tlm_runtime *rt;
  if (tlm_create(&cfg, &rt)) {
    fprintf(stderr, "tlm_create: %s\n", tlm_last_error(NULL));
    return 1;
  }
  bad(rt);
  ow_lanes(rt);
  rule_rows(rt);
  dw_lanes(rt);
  edges_apart(rt);
  dw_runs(rt);
  schedule_override();
  dw_split(rt);
  narrow_vec(rt);
  epilogues(rt);
  strided(rt);
  as_matmul();
  strided_as_matmul();
  oc_blocks();
  aligned_weights();
  aligned_weights_gaps();
  pooling(rt);
  sizes();
  shared_files(rt, dir);
  tlm_destroy(rt);
  return check_report("conv");
}
