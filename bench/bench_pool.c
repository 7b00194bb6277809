/* bench_pool.c - round trip of the runtime's fork-join pool
 * (runtime/threadpool.c): tlm_pool_run of 8 iterations, each a fixed
 * amount of arithmetic, on one thread and on T, the median of 9 batches
 * of 20,000 runs. What a small kernel (a depthwise layer of 10-30 us, a
 * decode step) pays for its parallel loop on top of its work.
 *
 *   bench_pool [--threads T]     (default 2)
 *
 * Prints us per run for 0, 100, 1,000 and 5,000 multiply-adds per
 * iteration. Run old and new builds alternately: these VMs' noise is
 * 10-20%.
 *
 * Then runs after a pause: the caller alone busy for G us (50 to 5,000),
 * then one run of 8 x 1,000 multiply-adds, timed; the median of 101 such
 * runs for workers that spin 100 us (TLM_POOL_SPIN_SHORT_NS: the pool
 * under background builds) and TLM_SPIN_US_DEFAULT between runs, the two
 * alternating, and how often a worker slept. A pause longer than the spin
 * makes the next run wait for a worker's wake-up. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/tlm.h"
#include "runtime/clock.h"
#include "runtime/threadpool.h"
#include "train/measure.h"

#define ITERS 8
#define RUNS 20000
#define BATCHES 9

static int64_t g_work;           /* multiply-adds per iteration */
double g_out[ITERS * 16]; /* one cache line per iteration; read at the end */

static void body(void *ctx, int64_t b, int64_t e, int tid) {
  (void)ctx, (void)tid;
  for (int64_t i = b; i < e; i++) {
    double s = 0;
    for (int64_t j = 0; j < g_work; j++) s = s * 0.999999 + (double)j;
    g_out[i * 16] = s;
  }
}

static double us_per_run(tlm_pool *p) {
  double t[BATCHES];
  for (int i = 0; i < RUNS / 10; i++) tlm_pool_run(p, ITERS, body, NULL); /* warm */
  for (int k = 0; k < BATCHES; k++) {
    double t0 = tlm_clock_ms();
    for (int i = 0; i < RUNS; i++) tlm_pool_run(p, ITERS, body, NULL);
    t[k] = (tlm_clock_ms() - t0) * 1e3 / RUNS;
  }
  qsort(t, BATCHES, sizeof t[0], tlm_cmp_double);
  return t[BATCHES / 2];
}

/* the caller alone, busy for us microseconds */
static void busy_us(double us) {
  double t0 = tlm_clock_ns();
  while (tlm_clock_ns() - t0 < us * 1e3) {
  }
}

#define GAP_RUNS 101

/* median us of one run after each pause of gap_us, over GAP_RUNS runs,
 * pools p[0] and p[1] alternating; *sleeps: their workers' sleeps */
static void runs_after_gap(tlm_pool *const p[2], double gap_us, double med[2], uint64_t sleeps[2]) {
  static double t[2][GAP_RUNS];
  uint64_t s0[2] = {tlm_pool_sleeps(p[0]), tlm_pool_sleeps(p[1])};
  for (int i = 0; i < GAP_RUNS; i++)
    for (int k = 0; k < 2; k++) {
      int j = (i + k) % 2;
      for (int w = 0; w < 3; w++) tlm_pool_run(p[j], ITERS, body, NULL); /* the worker awake */
      busy_us(gap_us);
      double t0 = tlm_clock_ns();
      tlm_pool_run(p[j], ITERS, body, NULL);
      t[j][i] = (tlm_clock_ns() - t0) * 1e-3;
      busy_us(2.0 * TLM_SPIN_US_DEFAULT + 1000); /* this pool's worker asleep again */
    }
  for (int k = 0; k < 2; k++) {
    qsort(t[k], GAP_RUNS, sizeof(double), tlm_cmp_double);
    med[k] = t[k][GAP_RUNS / 2];
    sleeps[k] = tlm_pool_sleeps(p[k]) - s0[k];
  }
}

int main(int argc, char **argv) {
  int threads = 2;
  if (argc == 3 && !strcmp(argv[1], "--threads")) threads = atoi(argv[2]);
  else if (argc != 1) {
    fprintf(stderr, "usage: bench_pool [--threads T]\n");
    return 2;
  }
  if (threads < 2) {
    fprintf(stderr, "bench_pool: --threads must be at least 2\n");
    return 2;
  }
  tlm_pool *one, *many;
  if (tlm_pool_create(1, &one) || tlm_pool_create(threads, &many)) {
    fprintf(stderr, "bench_pool: cannot create the pools\n");
    return 1;
  }
  static const int64_t work[] = {0, 100, 1000, 5000};
  printf("%-28s %12s %12s\n", "work per iteration", "1 thread", "threads");
  for (size_t w = 0; w < sizeof work / sizeof work[0]; w++) {
    g_work = work[w];
    double t1 = us_per_run(one), tn = us_per_run(many);
    printf("%5lld multiply-adds x %d      %9.2f us %9.2f us (%d)\n", (long long)work[w], ITERS, t1,
           tn, threads);
  }
  tlm_pool *gp[2];
  if (tlm_pool_create(threads, &gp[0]) || tlm_pool_create(threads, &gp[1])) {
    fprintf(stderr, "bench_pool: cannot create the pools\n");
    return 1;
  }
  tlm_pool_set_spin_ns(gp[0], TLM_POOL_SPIN_SHORT_NS);
  tlm_pool_set_spin_ns(gp[1], (int64_t)TLM_SPIN_US_DEFAULT * 1000);
  g_work = 1000;
  printf("\none run of %d x 1000 multiply-adds after the caller alone for G us (median of %d,"
         " alternating; sleeps: of the workers)\n",
         ITERS, GAP_RUNS);
  printf("%-10s %24s %24s\n", "G", "spin 100 us", "spin " "1000 us");
  static const double gaps[] = {50, 200, 500, 900, 2000, 5000};
  for (size_t g = 0; g < sizeof gaps / sizeof gaps[0]; g++) {
    double med[2];
    uint64_t sl[2];
    runs_after_gap(gp, gaps[g], med, sl);
    printf("%7.0f us %12.2f us %5llu sl %12.2f us %5llu sl\n", gaps[g], med[0],
           (unsigned long long)sl[0], med[1], (unsigned long long)sl[1]);
  }
  tlm_pool_destroy(gp[0]);
  tlm_pool_destroy(gp[1]);
  double sum = 0;
  for (int i = 0; i < ITERS; i++) sum += g_out[i * 16];
  printf("(checksum %g)\n", sum);
  tlm_pool_destroy(one);
  tlm_pool_destroy(many);
  return 0;
}
