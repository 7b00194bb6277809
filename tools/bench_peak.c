/* bench_peak.c - `tlm bench peak`: the machine's measured ceilings for a
 * roofline, at the ISA tlm generates for (TLM_ISA, or the host's widest):
 *   fma_gflops_core   one thread of independent vector FMAs (12 chains,
 *                     more than latency x pipes on any x86-64 core)
 *   fma_gflops_total  the same on every worker thread at once
 *   read_gbs_core / read_gbs_total   a sum over a buffer far larger than
 *                     the last-level cache (256 MiB), vector loads
 * Each figure is the best of --repeats runs of about --seconds / 4 s. */
#include "bench_peak.h"

#include <cjson/cJSON.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "train/measure.h"

/* One ISA's two loops, from its vector type, lane count and operations:
 *   fma_<isa>(iters): `iters` iterations of 12 independent vector
 *     multiply-adds (more chains than FMA latency x pipes on any x86-64
 *     core: 4 x 2), spelled out since -O2 need not unroll;
 *   read_<isa>(p, n): the sum of n floats (p aligned to the vector) in 4
 *     chains of vector loads.
 * Each returns a value that depends on every chain, so none is optimized
 * away. */
#define PEAK_CHAINS 12
#define PEAK_LOOPS(isa, attr, VT, LANES, set1, madd, add, load, storeu)                        \
  attr static float fma_##isa(long iters) {                                                     \
    VT a[12], x = set1(0.999999f), y = set1(1e-7f);                                             \
    for (int i = 0; i < 12; i++) a[i] = set1((float)i);                                         \
    for (long n = 0; n < iters; n++) {                                                          \
      a[0] = madd(a[0], x, y), a[1] = madd(a[1], x, y), a[2] = madd(a[2], x, y);                \
      a[3] = madd(a[3], x, y), a[4] = madd(a[4], x, y), a[5] = madd(a[5], x, y);                \
      a[6] = madd(a[6], x, y), a[7] = madd(a[7], x, y), a[8] = madd(a[8], x, y);                \
      a[9] = madd(a[9], x, y), a[10] = madd(a[10], x, y), a[11] = madd(a[11], x, y);            \
    }                                                                                           \
    VT s = a[0];                                                                                \
    for (int i = 1; i < 12; i++) s = add(s, a[i]);                                              \
    float o[LANES];                                                                             \
    storeu(o, s);                                                                               \
    return o[0] + o[LANES - 1];                                                                 \
  }                                                                                             \
  attr static float read_##isa(const float *p, size_t n) {                                      \
    VT s0 = set1(0.0f), s1 = s0, s2 = s0, s3 = s0;                                              \
    for (size_t i = 0; i + 4 * LANES <= n; i += 4 * LANES) {                                    \
      s0 = add(s0, load(p + i));                                                                \
      s1 = add(s1, load(p + i + LANES));                                                        \
      s2 = add(s2, load(p + i + 2 * LANES));                                                    \
      s3 = add(s3, load(p + i + 3 * LANES));                                                    \
    }                                                                                           \
    float o[LANES];                                                                             \
    storeu(o, add(add(s0, s1), add(s2, s3)));                                                   \
    return o[0] + o[LANES - 1];                                                                 \
  }

/* SSE: a multiply and an add (no FMA in the x86-64 baseline), counted as 2
 * flops per lane like an FMA */
static inline __m128 madd_sse(__m128 a, __m128 x, __m128 y) { return _mm_add_ps(_mm_mul_ps(a, x), y); }

PEAK_LOOPS(avx512, __attribute__((target("avx512f"))), __m512, 16, _mm512_set1_ps, _mm512_fmadd_ps,
           _mm512_add_ps, _mm512_load_ps, _mm512_storeu_ps)
PEAK_LOOPS(avx2, __attribute__((target("avx2,fma"))), __m256, 8, _mm256_set1_ps, _mm256_fmadd_ps,
           _mm256_add_ps, _mm256_load_ps, _mm256_storeu_ps)
PEAK_LOOPS(sse, , __m128, 4, _mm_set1_ps, madd_sse, _mm_add_ps, _mm_load_ps, _mm_storeu_ps)
#undef PEAK_LOOPS

static float fma_scalar(long iters) {
  volatile float xv = 0.999999f, yv = 1e-7f;
  float a[12], x = xv, y = yv;
  for (int i = 0; i < 12; i++) a[i] = (float)i;
#define F(i) a[i] = a[i] * x + y
  for (long n = 0; n < iters; n++) {
    F(0); F(1); F(2); F(3); F(4); F(5); F(6); F(7); F(8); F(9); F(10); F(11);
  }
#undef F
  float s = 0;
  for (int i = 0; i < 12; i++) s += a[i];
  return s;
}

typedef struct job {
  int isa, read;
  long iters;
  const float *p;
  size_t n;
  int reps;
  double ns;
  float sink;
} job;

static void *run_job(void *arg) {
  job *j = arg;
  double a = tlm_now_ns();
  for (int r = 0; r < j->reps; r++) {
    if (j->read)
      j->sink += j->isa == TLM_ISA_AVX512 ? read_avx512(j->p, j->n)
                 : j->isa == TLM_ISA_AVX2 ? read_avx2(j->p, j->n)
                                          : read_sse(j->p, j->n);
    else
      j->sink += j->isa == TLM_ISA_AVX512 ? fma_avx512(j->iters)
                 : j->isa == TLM_ISA_AVX2 ? fma_avx2(j->iters)
                 : j->isa == TLM_ISA_SSE  ? fma_sse(j->iters)
                                          : fma_scalar(j->iters);
  }
  j->ns = tlm_now_ns() - a;
  return NULL;
}

/* the slowest thread's time of `nt` threads running copies of *proto
 * (read jobs: each on its own slice of the buffer) */
static double run_threads(const job *proto, int nt, float *sink) {
  job js[64];
  pthread_t th[64];
  int started[64] = {0};
  for (int t = 0; t < nt; t++) {
    js[t] = *proto;
    if (proto->read) {
      size_t per = proto->n / (size_t)nt / 64 * 64;
      js[t].p = proto->p + per * (size_t)t;
      js[t].n = per;
    }
    if (t > 0) started[t] = pthread_create(&th[t], NULL, run_job, &js[t]) == 0;
  }
  run_job(&js[0]);
  double worst = js[0].ns;
  for (int t = 1; t < nt; t++) {
    if (!started[t]) continue;
    pthread_join(th[t], NULL);
    if (js[t].ns > worst) worst = js[t].ns;
  }
  for (int t = 0; t < nt; t++) *sink += js[t].sink;
  return worst;
}

double tlm_peak_fma_gflops(int isa, int threads, double seconds) {
  if (threads < 1) threads = 1;
  if (threads > 64) threads = 64;
  int lanes = isa == TLM_ISA_AVX512 ? 16 : isa == TLM_ISA_AVX2 ? 8 : isa == TLM_ISA_SSE ? 4 : 1;
  int chains = PEAK_CHAINS;
  float sink = 0;
  job f = {isa, 0, 1 << 18, NULL, 0, 1, 0, 0};
  run_threads(&f, 1, &sink); /* warm-up */
  double per_iter = run_threads(&f, 1, &sink) / (double)f.iters;
  f.iters = (long)(seconds * 1e9 / 3 / (per_iter > 0 ? per_iter : 1));
  if (f.iters < 1000) f.iters = 1000;
  double flops = 2.0 * lanes * chains * (double)f.iters * threads, best = 0;
  for (int r = 0; r < 3; r++) {
    double g = flops / run_threads(&f, threads, &sink);
    if (g > best) best = g;
  }
  if (sink == 12345.678f) printf(" \n"); /* keeps the loops' results alive */
  return best;
}

/* best of `repeats` reads of 256 MiB: GB/s of one thread and of nt */
static void read_bandwidth(int isa, int nt, int repeats, double *bw1, double *bwn, float *sink) {
  size_t n = (size_t)64 << 20;
  float *buf = aligned_alloc(64, n * sizeof(float));
  *bw1 = *bwn = 0;
  if (!buf) return;
  for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 7);
  job rd = {isa == TLM_ISA_SCALAR ? TLM_ISA_SSE : isa, 1, 0, buf, n, 1, 0, 0};
  run_threads(&rd, 1, sink); /* pages in */
  for (int r = 0; r < repeats; r++) {
    double b1 = (double)n * 4 / run_threads(&rd, 1, sink);
    job rn = rd;
    double bn = (double)(n / (size_t)nt / 64 * 64 * (size_t)nt) * 4 / run_threads(&rn, nt, sink);
    if (b1 > *bw1) *bw1 = b1;
    if (bn > *bwn) *bwn = bn;
  }
  free(buf);
}

double tlm_peak_read_gbs(int isa, int threads) {
  float sink = 0;
  double b1, bn;
  if (threads < 1) threads = 1;
  read_bandwidth(isa, threads > 64 ? 64 : threads, 2, &b1, &bn, &sink);
  if (sink == 12345.678f) b1 += 0; /* keeps the loads' results alive */
  return threads == 1 ? b1 : bn;
}

int tlm_cmd_bench_peak(int argc, char **argv) {
  double seconds = 2.0;
  int repeats = 3;
  const char *json = NULL;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else {
      fprintf(stderr,
              "usage: tlm bench peak [--seconds S] [--repeats R] [--json F]\n"
              "  Measured FMA peak (GFLOPS) of one core and of every worker thread, and\n"
              "  read bandwidth (GB/s) of one core and of all, at the ISA tlm generates for\n"
              "  (TLM_ISA or the host's widest); threads: TLM_NUM_THREADS or all CPUs.\n"
              "  Each figure is the best of R (default 3) runs; S (default 2) seconds in all\n"
              "  per figure.\n");
      return 2;
    }
  }
  if (!(seconds > 0 && seconds <= 600) || repeats < 1 || repeats > 50) {
    fprintf(stderr, "tlm bench peak: --seconds in (0, 600], --repeats in 1..50\n");
    return 2;
  }
  tlm_runtime *rt = tlm_tool_runtime("tlm", -1, "none", "none");
  if (!rt) return 1;
  int isa = rt->target.isa, nt = rt->nthreads > 0 ? rt->nthreads : 1;
  if (nt > 64) nt = 64;
  int lanes = rt->target.vec_lanes, chains = PEAK_CHAINS;
  char tdesc[400];
  tlm_describe_target(rt, tdesc, sizeof tdesc);
  tlm_destroy(rt);
  float sink = 0;
  /* FMA: calibrate iterations to about seconds / (4 * repeats) per run */
  job f = {isa, 0, 1 << 20, NULL, 0, 1, 0, 0};
  run_threads(&f, 1, &sink); /* warm-up */
  double per_iter = run_threads(&f, 1, &sink) / (double)f.iters;
  double target_ns = seconds * 1e9 / 4 / repeats;
  f.iters = (long)(target_ns / (per_iter > 0 ? per_iter : 1));
  if (f.iters < 1000) f.iters = 1000;
  double flops = 2.0 * lanes * chains * (double)f.iters;
  double core = 0, total = 0;
  for (int r = 0; r < repeats; r++) {
    double g1 = flops / run_threads(&f, 1, &sink);
    double gn = flops * nt / run_threads(&f, nt, &sink);
    if (g1 > core) core = g1;
    if (gn > total) total = gn;
  }
  double bw1 = 0, bwn = 0;
  read_bandwidth(isa, nt, repeats, &bw1, &bwn, &sink);
  printf("peak at %s, %d threads\n  target: %s\n", tlm_isa_name(isa), nt, tdesc);
  printf("  FMA       %8.1f GFLOPS one core, %8.1f GFLOPS %d threads\n", core, total, nt);
  printf("  read      %8.1f GB/s one core,   %8.1f GB/s %d threads (256 MiB)\n", bw1, bwn, nt);
  if (sink == 12345.678f) printf(" \n"); /* keeps the loops' results alive */
  int rc = 0;
  if (json) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "isa", tlm_isa_name(isa));
    cJSON_AddStringToObject(o, "target", tdesc);
    static const char *const keys[] = {"threads", "fma_gflops_core", "fma_gflops_total",
                                       "read_gbs_core", "read_gbs_total"};
    tlm_json_numbers(o, keys, (const double[]){nt, core, total, bw1, bwn}, 5);
    if (tlm_json_save(o, json)) {
      fprintf(stderr, "tlm bench peak: cannot write %s\n", json);
      rc = 1;
    }
    cJSON_Delete(o);
  }
  return rc;
}
