/* Measured top-k (tlm_config.tune_k, TLM_TUNE; issue #17): for a call of
 * each family (matmul with an epilogue, a 3x3 and a 1x1 convolution,
 * pooling, softmax in place, layernorm, eltwise in place), the first
 * answer and every answer after the background tuning equal those of a
 * runtime without tuning; the caller's buffers are freed right after the
 * first call (the tuner must only read its own copies: ASan would see it);
 * every shape is tuned once; a second runtime on the same disk cache takes
 * the measured plans and tunes nothing; tlm_destroy while jobs are queued
 * or running returns promptly and leaks nothing. Calls with constant
 * weights (a matmul's B, a channel-blocked convolution's) are tuned on
 * weights packed ahead, as they run (the tuner's log line says so). */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "tlm.h"

#define MAXN 2048

typedef struct call {
  const char *name;
  tlm_op op;
  int n_in;
  int64_t shape[4][5];
  int ndim[4];
  int64_t oshape[5];
  int ondim;
  int in_place; /* output is input 0 */
  int const_w;  /* input 1 declared constant (tlm_constant_add) for the call */
} call;

static int64_t numel(const int64_t *s, int n) {
  int64_t x = 1;
  for (int i = 0; i < n; i++) x *= s[i];
  return x;
}

static char g_dir[256];

/* tuner log lines that say the candidates ran on weights packed ahead */
static _Atomic int g_packed_lines;

static void on_log(void *user, tlm_log_level level, const char *line) {
  (void)user, (void)level;
  if (strstr(line, "tuned ") && strstr(line, "on weights packed ahead")) g_packed_lines++;
}

static tlm_runtime *make_rt(int tune_k, const char *dir) {
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.verbose = TLM_LOG_INFO;
  cfg.log_fn = on_log;
  cfg.cache_dir = dir;
  cfg.model_path = "none";
  cfg.num_threads = 2;
  cfg.tune_k = tune_k;
  tlm_runtime *rt = NULL;
  CHECK(tlm_create(&cfg, &rt) == TLM_OK, "tlm_create: %s", tlm_last_error(NULL));
  return rt;
}

/* runs c once on fresh malloc'd operands (values from seed) into out;
 * frees the operands before returning */
static int run_once(tlm_runtime *rt, const call *c, float *out) {
  float *buf[4];
  tlm_tensor in[4], o;
  uint64_t s = 12345;
  for (int i = 0; i < c->n_in; i++) {
    int64_t n = numel(c->shape[i], c->ndim[i]);
    buf[i] = malloc((size_t)n * sizeof(float));
    for (int64_t e = 0; e < n; e++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      buf[i][e] = (float)((s >> 40) % 2001) / 1000.0f - 1.0f;
    }
    tlm_tensor_dense(&in[i], TLM_F32, c->ndim[i], c->shape[i], buf[i]);
  }
  int64_t on = numel(c->oshape, c->ondim);
  float *obuf = c->in_place ? buf[0] : malloc((size_t)on * sizeof(float));
  tlm_tensor_dense(&o, TLM_F32, c->ondim, c->oshape, obuf);
  if (c->const_w && tlm_constant_add(rt, buf[1], (size_t)numel(c->shape[1], c->ndim[1]) *
                                                     sizeof(float)) != TLM_OK)
    fprintf(stderr, "%s: %s\n", c->name, tlm_last_error(rt));
  tlm_status st = tlm_run(rt, &c->op, in, c->n_in, &o, 1);
  if (st != TLM_OK) fprintf(stderr, "%s: %s\n", c->name, tlm_last_error(rt));
  if (c->const_w) tlm_constant_remove(rt, buf[1]);
  memcpy(out, obuf, (size_t)on * sizeof(float));
  for (int i = 0; i < c->n_in; i++) free(buf[i]); /* the tuner must not need them */
  if (!c->in_place) free(obuf);
  return st == TLM_OK;
}

static int close_to(const float *a, const float *b, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (!(fabsf(a[i] - b[i]) <= 1e-4f * (1.0f + fabsf(b[i])))) return 0;
  return 1;
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/tlm_test_tune_%d", (int)getpid());
  call calls[11];
  int nc = 0;
  call *c;
  memset(calls, 0, sizeof calls);
  c = &calls[nc++];
  c->name = "matmul+bias+gelu";
  c->op = tlm_op_matmul();
  c->op.u.matmul = (tlm_matmul_desc){0, 0, 1, TLM_ACT_GELU_TANH, 0};
  c->n_in = 3;
  memcpy(c->shape, (int64_t[4][5]){{13, 40}, {40, 24}, {24}}, sizeof c->shape);
  memcpy(c->ndim, (int[4]){2, 2, 1}, sizeof c->ndim);
  memcpy(c->oshape, (int64_t[5]){13, 24}, sizeof c->oshape);
  c->ondim = 2;
  c = &calls[nc++];
  c->name = "conv 3x3 nhwc";
  c->op = tlm_op_conv(TLM_LAYOUT_NHWC);
  c->op.u.conv.pad[1] = c->op.u.conv.pad[2] = 1;
  c->op.u.conv.has_bias = 1;
  c->op.u.conv.activation = TLM_ACT_RELU;
  c->n_in = 3;
  memcpy(c->shape, (int64_t[4][5]){{1, 7, 7, 8}, {16, 8, 3, 3}, {16}}, sizeof c->shape);
  memcpy(c->ndim, (int[4]){4, 4, 1}, sizeof c->ndim);
  memcpy(c->oshape, (int64_t[5]){1, 7, 7, 16}, sizeof c->oshape);
  c->ondim = 4;
  c = &calls[nc++];
  c->name = "conv 3x3 nhwc, 256 channels, constant HWIO weights (channel blocks)";
  c->op = tlm_op_conv(TLM_LAYOUT_NHWC);
  c->op.u.conv.weight_layout = TLM_WEIGHTS_HWIO;
  c->op.u.conv.pad[1] = c->op.u.conv.pad[2] = 1;
  c->op.u.conv.has_bias = 1;
  c->n_in = 3;
  c->const_w = 1;
  memcpy(c->shape, (int64_t[4][5]){{1, 2, 3, 2}, {3, 3, 2, 256}, {256}}, sizeof c->shape);
  memcpy(c->ndim, (int[4]){4, 4, 1}, sizeof c->ndim);
  memcpy(c->oshape, (int64_t[5]){1, 2, 3, 256}, sizeof c->oshape);
  c->ondim = 4;
  c = &calls[nc++];
  c->name = "matmul, constant B";
  c->op = tlm_op_matmul();
  c->n_in = 2;
  c->const_w = 1;
  memcpy(c->shape, (int64_t[4][5]){{9, 64}, {64, 80}}, sizeof c->shape);
  memcpy(c->ndim, (int[4]){2, 2}, sizeof c->ndim);
  memcpy(c->oshape, (int64_t[5]){9, 80}, sizeof c->oshape);
  c->ondim = 2;
  c = &calls[nc++];
  c->name = "conv 1x1 (as matmul)";
  c->op = tlm_op_conv(TLM_LAYOUT_NHWC);
  c->n_in = 2;
  memcpy(c->shape, (int64_t[4][5]){{1, 6, 6, 24}, {20, 24, 1, 1}}, sizeof c->shape);
  memcpy(c->ndim, (int[4]){4, 4}, sizeof c->ndim);
  memcpy(c->oshape, (int64_t[5]){1, 6, 6, 20}, sizeof c->oshape);
  c->ondim = 4;
  c = &calls[nc++];
  c->name = "max pool 3x3/2";
  c->op = tlm_op_pool(TLM_LAYOUT_NHWC, TLM_POOL_MAX);
  c->op.u.pool.kernel[1] = c->op.u.pool.kernel[2] = 3;
  c->op.u.pool.stride[1] = c->op.u.pool.stride[2] = 2;
  c->n_in = 1;
  memcpy(c->shape, (int64_t[4][5]){{1, 9, 9, 16}}, sizeof c->shape);
  c->ndim[0] = 4;
  memcpy(c->oshape, (int64_t[5]){1, 4, 4, 16}, sizeof c->oshape);
  c->ondim = 4;
  c = &calls[nc++];
  c->name = "softmax in place";
  c->op = tlm_op_rownorm(TLM_OP_SOFTMAX);
  c->n_in = 1;
  c->in_place = 1;
  memcpy(c->shape, (int64_t[4][5]){{7, 61}}, sizeof c->shape);
  c->ndim[0] = 2;
  memcpy(c->oshape, (int64_t[5]){7, 61}, sizeof c->oshape);
  c->ondim = 2;
  c = &calls[nc++];
  c->name = "layernorm";
  c->op = tlm_op_rownorm(TLM_OP_LAYERNORM);
  c->n_in = 3;
  memcpy(c->shape, (int64_t[4][5]){{5, 96}, {96}, {96}}, sizeof c->shape);
  memcpy(c->ndim, (int[4]){2, 1, 1}, sizeof c->ndim);
  memcpy(c->oshape, (int64_t[5]){5, 96}, sizeof c->oshape);
  c->ondim = 2;
  c = &calls[nc++];
  c->name = "eltwise silu*z in place";
  c->op = tlm_op_eltwise(TLM_ACT_SILU, TLM_BINARY_MUL);
  c->n_in = 2;
  c->in_place = 1;
  memcpy(c->shape, (int64_t[4][5]){{6, 50}, {6, 50}}, sizeof c->shape);
  memcpy(c->ndim, (int[4]){2, 2}, sizeof c->ndim);
  memcpy(c->oshape, (int64_t[5]){6, 50}, sizeof c->oshape);
  c->ondim = 2;

  static float want[11][MAXN], got[MAXN];
  /* the answers without tuning */
  tlm_runtime *plain = make_rt(0, "none");
  for (int i = 0; plain && i < nc; i++)
    CHECK(run_once(plain, &calls[i], want[i]), "%s: untuned run", calls[i].name);
  tlm_destroy(plain);

  /* tuned: first answers, then the answers after tuning */
  tlm_runtime *rt = make_rt(6, g_dir);
  for (int i = 0; rt && i < nc; i++) {
    CHECK(run_once(rt, &calls[i], got) &&
              close_to(got, want[i], numel(calls[i].oshape, calls[i].ondim)),
          "%s: first tuned-mode answer differs", calls[i].name);
  }
  if (rt) tlm_wait_background(rt);
  tlm_stats s;
  memset(&s, 0, sizeof s);
  if (rt) tlm_get_stats(rt, &s);
  printf("tuned %llu shapes (%llu given a faster kernel) in %.0f ms\n",
         (unsigned long long)s.tunes, (unsigned long long)s.tune_improved, s.tune_ms);
  CHECK(s.tunes == (uint64_t)nc, "%llu of %d shapes tuned", (unsigned long long)s.tunes, nc);
  /* the constant-B matmul and the channel-blocked convolution */
  CHECK(g_packed_lines == 2, "%d shapes tuned on weights packed ahead (want 2)", (int)g_packed_lines);
  for (int r = 0; r < 2; r++)
    for (int i = 0; rt && i < nc; i++)
      CHECK(run_once(rt, &calls[i], got) &&
                close_to(got, want[i], numel(calls[i].oshape, calls[i].ondim)),
            "%s: answer after tuning differs", calls[i].name);
  if (rt) tlm_wait_background(rt);
  memset(&s, 0, sizeof s);
  if (rt) tlm_get_stats(rt, &s);
  CHECK(s.tunes == (uint64_t)nc, "shapes tuned again: %llu", (unsigned long long)s.tunes);
  tlm_destroy(rt);

  /* a new process on the same cache: measured plans, nothing to tune */
  rt = make_rt(6, g_dir);
  for (int i = 0; rt && i < nc; i++)
    CHECK(run_once(rt, &calls[i], got) &&
              close_to(got, want[i], numel(calls[i].oshape, calls[i].ondim)),
          "%s: answer from the measured plan differs", calls[i].name);
  if (rt) tlm_wait_background(rt);
  memset(&s, 0, sizeof s);
  if (rt) tlm_get_stats(rt, &s);
  CHECK(s.tunes == 0 && s.disk_plan_hits == (uint64_t)nc,
        "second runtime: %llu tuned, %llu plans from disk", (unsigned long long)s.tunes,
        (unsigned long long)s.disk_plan_hits);
  tlm_destroy(rt);

  /* destroy with tuning queued and running: prompt, nothing leaked */
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  CHECK(system(cmd) == 0, "rm");
  for (int pass = 0; pass < 3; pass++) {
    rt = make_rt(TLM_TUNE_MAX, "none");
    for (int i = 0; rt && i < nc; i++) run_once(rt, &calls[i], got);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    tlm_destroy(rt);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ms = (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
    /* at most one candidate's compile is in flight when it stops */
    CHECK(ms < 2000, "tlm_destroy took %.0f ms with tuning under way", ms);
  }
  return check_report("test_tune");
}
