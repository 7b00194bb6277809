/* bench_chain.c - layers in a network's order: a depthwise-separable block
 * (1x1 convolution C -> C, 3x3 depthwise convolution with padding 1,
 * another 1x1), NHWC f32, minibatch 1, bias and ReLU, at H x H pixels
 * (MobileNet's conv5_x block at the defaults, H 14 and C 512), through
 * tlm_run and through oneDNN, and through a second tlm runtime whose
 * settings differ (an A/B of one setting inside one process).
 *
 *   bench_chain [--threads T] [--size H] [--channels C] [--rounds R]
 *               [--calls N] [--mode chain|alone|pause]
 *               [--b-override TEXT] [--b-spin-us US]
 *
 * Contenders: tlm runtime A (the environment's settings), tlm runtime B
 * (A's, with TLM_SCHEDULE_OVERRIDE set to --b-override and spin_us to
 * --b-spin-us where given) and oneDNN (weights reordered once, threads
 * pinned to T). Each of R rounds (default 21) runs every contender in
 * turn, the order rotating, after a 30 ms pause, for N calls (default
 * 30) of:
 *   chain  the three layers back to back, each timed: a layer right after
 *          the one that wrote its input, as in a network;
 *   alone  each layer N times in a row: its operands stay where its own
 *          last call left them, as in a single-layer benchmark;
 *   pause  the calling thread reads 8 MiB, then one depthwise call, timed:
 *          a layer after the application's own work (the pool's workers
 *          idle meanwhile).
 * Reported per layer: each contender's median over rounds of its round
 * medians (us), and the per-round ratios B/A and oneDNN/A (median, first
 * and third quartile): these VMs drift by 10-40% between minutes, which
 * moves the contenders of one round alike. The chain's output is checked
 * against oneDNN's first (exit 1 above 1e-4 relative).
 *
 * Found with it (docs/design.md, Threads and "Measured, session 54"):
 * workers that slept cost a call after a pause their wake-up, and the
 * depthwise layer runs 20-40% slower right after its 1x1 producer than
 * alone, on both threads alike. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_common.h"

enum { MAX_ROUNDS = 101, MAX_CALLS = 200, CONTENDERS = 3, LAYERS = 3 };

typedef struct block {
  int h, c;
  float *x[3];           /* activations, (1, h, h, c) each */
  float *w1, *w2, *b1;   /* 1x1 weights (1, 1, c, c) HWIO, bias (c) */
  float *wd, *bd;        /* depthwise weights (3, 3, 1, c) HWIO, bias (c) */
} block;

static float *filled(size_t n, unsigned seed) {
  float *p = aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
  if (!p) {
    fprintf(stderr, "bench_chain: out of memory\n");
    exit(1);
  }
  for (size_t i = 0; i < n; i++) p[i] = (float)((i * 2654435761u + seed) % 1000) * 1e-3f - 0.45f;
  return p;
}

static tlm_tensor dense(float *data, int nd, const int64_t *shape) {
  tlm_tensor t;
  tlm_tensor_dense(&t, TLM_F32, nd, shape, data);
  return t;
}

/* layer l (0: first 1x1, 1: depthwise, 2: second 1x1) from src to dst */
static void layer_tlm(tlm_runtime *rt, const block *b, int l, float *src, float *dst) {
  int dw = l == 1;
  int64_t xs[4] = {1, b->h, b->h, b->c};
  tlm_op op = tlm_op_conv(TLM_LAYOUT_NHWC);
  tlm_conv_desc *d = &op.u.conv;
  d->weight_layout = TLM_WEIGHTS_HWIO;
  d->groups = dw ? b->c : 1;
  d->stride[1] = d->stride[2] = 1;
  d->pad[1] = d->pad[2] = dw ? 1 : 0;
  d->has_bias = 1;
  d->activation = TLM_ACT_RELU;
  int k = dw ? 3 : 1;
  tlm_tensor in[3] = {dense(src, 4, xs),
                      dense(dw ? b->wd : l == 0 ? b->w1 : b->w2, 4,
                            (int64_t[]){k, k, dw ? 1 : b->c, b->c}),
                      dense(dw ? b->bd : b->b1, 1, (int64_t[]){b->c})};
  tlm_tensor out = dense(dst, 4, xs);
  if (tlm_run(rt, &op, in, 3, &out, 1) != TLM_OK) {
    fprintf(stderr, "bench_chain: tlm_run: %s\n", tlm_last_error(rt));
    exit(1);
  }
}

static void layer_dnnl(dnnl_baseline *db, const block *b, int l, float *src, float *dst) {
  int dw = l == 1;
  baseline_window w = {1, b->c, b->h, b->h, b->c, b->h, b->h, dw ? 3 : 1, dw ? 3 : 1, 1, 1,
                       dw ? 1 : 0, dw ? 1 : 0, dw ? b->c : 1, 0, 0};
  if (dnnl_baseline_conv(db, &w, src, dw ? b->wd : l == 0 ? b->w1 : b->w2, dw ? b->bd : b->b1,
                         BASELINE_ACT_RELU, 0, dst)) {
    fprintf(stderr, "bench_chain: oneDNN convolution failed\n");
    exit(1);
  }
}

typedef struct contenders {
  tlm_runtime *rt[2];
  dnnl_baseline *db;
} contenders;

/* layer l of contender k (0: tlm A, 1: tlm B, 2: oneDNN) from x[l] to x[l+1 mod 3] */
static void run_layer(const contenders *cs, const block *b, int k, int l) {
  float *src = b->x[l], *dst = b->x[(l + 1) % 3];
  if (k < 2) layer_tlm(cs->rt[k], b, l, src, dst);
  else layer_dnnl(cs->db, b, l, src, dst);
}

static double now_us(void) { return tlm_now_ns() * 1e-3; }

static void pause_ms(int ms) {
  struct timespec ts = {0, (long)ms * 1000000L}, rem;
  while (nanosleep(&ts, &rem) != 0) ts = rem;
}

static volatile float g_sink;

/* the caller alone reads 8 MiB (its caches lose the block's operands) */
static void read_8mib(const float *buf) {
  float s = 0;
  for (size_t i = 0; i < ((size_t)8 << 20) / sizeof(float); i += 16) s += buf[i];
  g_sink = s;
}

static double median(double *v, int n) { return bench_pct(v, n, 0.5); }

/* Creates tlm runtime B: A's settings, with TLM_SCHEDULE_OVERRIDE (read at
 * tlm_create) set to override for the call, and spin_us. */
static tlm_runtime *runtime_b(int threads, const char *override, int spin_us) {
  const char *old = getenv("TLM_SCHEDULE_OVERRIDE");
  char *saved = old ? strdup(old) : NULL;
  if (override) setenv("TLM_SCHEDULE_OVERRIDE", override, 1);
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.cache_dir = "none";
  cfg.async_compile = 0;
  cfg.num_threads = threads;
  if (spin_us >= 0) cfg.spin_us = spin_us;
  tlm_runtime *rt = NULL;
  tlm_status st = tlm_create(&cfg, &rt);
  if (override) {
    if (saved) setenv("TLM_SCHEDULE_OVERRIDE", saved, 1);
    else unsetenv("TLM_SCHEDULE_OVERRIDE");
  }
  free(saved);
  if (st) {
    fprintf(stderr, "bench_chain: tlm_create (B): %s\n", tlm_last_error(NULL));
    exit(1);
  }
  return rt;
}

int main(int argc, char **argv) {
  int threads = 2, rounds = 21, calls = 30, spin_b = -1, mode = 0;
  block b = {.h = 14, .c = 512};
  const char *override_b = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--threads") && v) threads = atoi(v), i++;
    else if (!strcmp(a, "--size") && v) b.h = atoi(v), i++;
    else if (!strcmp(a, "--channels") && v) b.c = atoi(v), i++;
    else if (!strcmp(a, "--rounds") && v) rounds = atoi(v), i++;
    else if (!strcmp(a, "--calls") && v) calls = atoi(v), i++;
    else if (!strcmp(a, "--b-override") && v) override_b = v, i++;
    else if (!strcmp(a, "--b-spin-us") && v) spin_b = atoi(v), i++;
    else if (!strcmp(a, "--mode") && v) {
      mode = !strcmp(v, "chain") ? 0 : !strcmp(v, "alone") ? 1 : !strcmp(v, "pause") ? 2 : -1;
      i++;
    } else {
      mode = -1;
      break;
    }
  }
  if (mode < 0 || threads < 1 || threads > 1024 || b.h < 1 || b.h > 512 || b.c < 1 ||
      b.c > 8192 || rounds < 1 || rounds > MAX_ROUNDS || calls < 1 || calls > MAX_CALLS ||
      spin_b > 1000000) {
    fprintf(stderr,
            "usage: bench_chain [--threads T] [--size H<=512] [--channels C<=8192]\n"
            "                   [--rounds R<=%d] [--calls N<=%d] [--mode chain|alone|pause]\n"
            "                   [--b-override TEXT] [--b-spin-us US]\n",
            MAX_ROUNDS, MAX_CALLS);
    return 2;
  }
  contenders cs;
  cs.rt[0] = bench_setup(argv, threads, &cs.db);
  cs.rt[1] = runtime_b(threads, override_b, spin_b);
  size_t n = (size_t)b.h * b.h * b.c;
  for (int i = 0; i < 3; i++) b.x[i] = filled(n, 11u * (unsigned)i);
  b.w1 = filled((size_t)b.c * b.c, 3);
  b.w2 = filled((size_t)b.c * b.c, 5);
  b.wd = filled((size_t)9 * b.c, 7);
  b.b1 = filled((size_t)b.c, 13);
  b.bd = filled((size_t)b.c, 17);
  for (size_t i = 0; i < (size_t)b.c * b.c; i++) b.w1[i] *= 0.05f, b.w2[i] *= 0.05f;
  for (int k = 0; k < 2; k++) {
    tlm_constant_add(cs.rt[k], b.w1, sizeof(float) * (size_t)b.c * b.c);
    tlm_constant_add(cs.rt[k], b.w2, sizeof(float) * (size_t)b.c * b.c);
    tlm_constant_add(cs.rt[k], b.wd, sizeof(float) * (size_t)9 * b.c);
  }
  float *flush = filled(((size_t)8 << 20) / sizeof(float), 19);
  /* the check: the chain from the same input through A, B and oneDNN */
  float *in0 = filled(n, 23), *out[CONTENDERS];
  for (int k = 0; k < CONTENDERS; k++) {
    memcpy(b.x[0], in0, n * sizeof(float));
    for (int l = 0; l < LAYERS; l++) run_layer(&cs, &b, k, l);
    out[k] = filled(n, 0);
    memcpy(out[k], b.x[0], n * sizeof(float));
  }
  double diff = 0;
  for (int k = 0; k < 2; k++)
    for (size_t i = 0; i < n; i++) {
      double e = fabs((double)out[k][i] - out[2][i]) / (1.0 + fabs((double)out[2][i]));
      if (!(e <= diff)) diff = isnan(e) ? INFINITY : e;
    }
  static const char *const modes[] = {"chain", "alone", "pause"};
  printf("bench_chain: 1x1 %d->%d, 3x3 depthwise, 1x1, %dx%d NHWC, %d threads, mode %s, %d rounds "
         "of %d calls\n  tlm A: %s; tlm B: override %s, spin_us %d; oneDNN %s\n",
         b.c, b.c, b.h, b.h, threads, modes[mode], rounds, calls, tlm_isa_name(cs.rt[0]->target.isa),
         override_b ? override_b : "(as A)", spin_b, dnnl_baseline_isa());
  printf("  chain output vs oneDNN: max rel diff %.2g %s\n", diff, diff <= 1e-4 ? "PASS" : "FAIL");
  if (!(diff <= 1e-4)) return 1;
  /* warm-up: every kernel compiled and every oneDNN primitive created */
  for (int k = 0; k < CONTENDERS; k++)
    for (int i = 0; i < 5; i++)
      for (int l = 0; l < LAYERS; l++) run_layer(&cs, &b, k, l);
  static double rmed[CONTENDERS][LAYERS][MAX_ROUNDS];
  double t[LAYERS][MAX_CALLS];
  for (int r = 0; r < rounds; r++)
    for (int j = 0; j < CONTENDERS; j++) {
      int k = (j + r) % CONTENDERS;
      pause_ms(30);
      for (int l = 0; l < LAYERS; l++) run_layer(&cs, &b, k, l);
      for (int i = 0; i < calls; i++) {
        if (mode == 0) {
          for (int l = 0; l < LAYERS; l++) {
            double t0 = now_us();
            run_layer(&cs, &b, k, l);
            t[l][i] = now_us() - t0;
          }
        } else if (mode == 2) {
          read_8mib(flush);
          double t0 = now_us();
          run_layer(&cs, &b, k, 1);
          t[1][i] = now_us() - t0;
          t[0][i] = t[2][i] = 0;
        }
      }
      if (mode == 1)
        for (int l = 0; l < LAYERS; l++)
          for (int i = 0; i < calls; i++) {
            double t0 = now_us();
            run_layer(&cs, &b, k, l);
            t[l][i] = now_us() - t0;
          }
      for (int l = 0; l < LAYERS; l++) rmed[k][l][r] = median(t[l], calls);
    }
  static const char *const names[] = {"1x1 (first)", "depthwise 3x3", "1x1 (second)"};
  printf("%-14s %9s %9s %9s   %-22s %-22s\n", "layer, us", "tlm A", "tlm B", "oneDNN",
         "B/A time [q1 q3]", "oneDNN/A time [q1 q3]");
  for (int l = 0; l < LAYERS; l++) {
    if (mode == 2 && l != 1) continue;
    double ba[MAX_ROUNDS], da[MAX_ROUNDS], m[CONTENDERS];
    for (int r = 0; r < rounds; r++) {
      ba[r] = rmed[1][l][r] / rmed[0][l][r];
      da[r] = rmed[2][l][r] / rmed[0][l][r];
    }
    for (int k = 0; k < CONTENDERS; k++) m[k] = median(rmed[k][l], rounds);
    double ba2 = bench_pct(ba, rounds, 0.5), da2 = bench_pct(da, rounds, 0.5);
    printf("%-14s %9.1f %9.1f %9.1f   %5.3f [%5.3f %5.3f]    %5.3f [%5.3f %5.3f]\n", names[l], m[0],
           m[1], m[2], ba2, bench_pct(ba, rounds, 0.25), bench_pct(ba, rounds, 0.75), da2,
           bench_pct(da, rounds, 0.25), bench_pct(da, rounds, 0.75));
  }
  for (int k = 0; k < CONTENDERS; k++) free(out[k]);
  free(in0);
  free(flush);
  for (int i = 0; i < 3; i++) free(b.x[i]);
  free(b.w1), free(b.w2), free(b.wd), free(b.b1), free(b.bd);
  tlm_destroy(cs.rt[0]);
  tlm_destroy(cs.rt[1]);
  dnnl_baseline_destroy(cs.db);
  return 0;
}
