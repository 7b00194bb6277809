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
 * 10-20%. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  double sum = 0;
  for (int i = 0; i < ITERS; i++) sum += g_out[i * 16];
  printf("(checksum %g)\n", sum);
  tlm_pool_destroy(one);
  tlm_pool_destroy(many);
  return 0;
}
