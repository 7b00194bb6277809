/* test_pool.c - the fork-join pool (runtime/threadpool.c): every iteration
 * of every run runs exactly once, on a thread id in range, for odd counts
 * (1, primes, fewer iterations than threads, more than 2^16), on 1-5
 * threads, thousands of runs back to back (the workers still spinning on
 * the last run, so late workers meet the next one) and two callers at
 * once (runs serialized). With the caller's share slowed, another thread
 * runs part of it (stealing). Workers given a spin budget of 10 s do not
 * sleep in a 30 ms pause; lowered to 1 us while they spin, they go to
 * sleep; a pool spinning 10 s is destroyed at once. Run under
 * TSan by `make test-tsan`. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/threadpool.h"

static int g_fail, g_pass;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void pause_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L}, rem;
  while (nanosleep(&ts, &rem) != 0) ts = rem;
}

#define CHECK(cond, ...)                                                  \
  do {                                                                    \
    if (cond) g_pass++;                                                   \
    else {                                                                \
      g_fail++;                                                           \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                \
      fprintf(stderr, __VA_ARGS__);                                       \
      fputc('\n', stderr);                                                \
    }                                                                     \
  } while (0)

typedef struct count_ctx {
  atomic_int *hits; /* one per iteration */
  int threads;
  atomic_int bad_tid, calls;
  int64_t stall_below; /* iterations [0, stall_below) sleep (a slow thread) */
  atomic_int *ran_by;   /* optional: the thread that ran each iteration */
} count_ctx;

static void count_body(void *p, int64_t b, int64_t e, int tid) {
  count_ctx *c = p;
  if (tid < 0 || tid >= c->threads) atomic_store(&c->bad_tid, 1);
  atomic_fetch_add(&c->calls, 1);
  for (int64_t i = b; i < e; i++) {
    atomic_fetch_add_explicit(&c->hits[i], 1, memory_order_relaxed);
    if (c->ran_by) atomic_store_explicit(&c->ran_by[i], tid, memory_order_relaxed);
    if (i < c->stall_below) {
      struct timespec ts = {0, 2000000}; /* 2 ms */
      nanosleep(&ts, NULL);
    }
  }
}

/* runs [0, n) `runs` times on p; 1 when every iteration ran exactly runs
 * times (ran_by, optional: who ran each iteration in the last run) */
static int run_counted(tlm_pool *p, int threads, int64_t n, int runs, int64_t stall_below,
                       atomic_int *ran_by) {
  count_ctx c = {.threads = threads, .stall_below = stall_below, .ran_by = ran_by};
  c.hits = calloc((size_t)n, sizeof *c.hits);
  if (!c.hits) return 0;
  for (int r = 0; r < runs; r++) tlm_pool_run(p, n, count_body, &c);
  int ok = !atomic_load(&c.bad_tid);
  for (int64_t i = 0; i < n && ok; i++) ok = atomic_load(&c.hits[i]) == runs;
  free(c.hits);
  return ok;
}

typedef struct caller_arg {
  tlm_pool *p;
  int threads, ok;
} caller_arg;

static void *caller(void *arg) {
  caller_arg *a = arg;
  a->ok = run_counted(a->p, a->threads, 37, 500, 0, NULL);
  return NULL;
}

int main(void) {
  static const int64_t counts[] = {1, 2, 3, 5, 7, 8, 9, 13, 64, 101, 1000, 70001};
  for (int threads = 1; threads <= 5; threads++) {
    tlm_pool *p = NULL;
    CHECK(tlm_pool_create(threads, &p) == 0 && p, "create %d threads", threads);
    if (!p) continue;
    CHECK(tlm_pool_threads(p) == threads, "threads %d", threads);
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
      int runs = counts[k] > 10000 ? 3 : 300;
      CHECK(run_counted(p, threads, counts[k], runs, 0, NULL),
            "%d threads, n %lld: an iteration ran other than once per run", threads,
            (long long)counts[k]);
    }
    /* a slow first share (its first 10 iterations sleep 2 ms each): the
     * others finish theirs and take what is left of it */
    atomic_int ran_by[40];
    for (int i = 0; i < 40; i++) atomic_init(&ran_by[i], -1);
    CHECK(run_counted(p, threads, 40, 1, 10, ran_by), "%d threads: slow share", threads);
    int stolen = 0;
    for (int i = 0; i < 40 / threads; i++) stolen |= atomic_load(&ran_by[i]) != 0;
    CHECK(threads == 1 || stolen, "%d threads: no other thread took part of the slow share",
          threads);
    /* two callers at once */
    caller_arg a = {p, threads, 0}, b = {p, threads, 0};
    pthread_t ta, tb;
    int sa = pthread_create(&ta, NULL, caller, &a), sb = pthread_create(&tb, NULL, caller, &b);
    if (!sa) pthread_join(ta, NULL);
    if (!sb) pthread_join(tb, NULL);
    CHECK(!sa && !sb && a.ok && b.ok, "%d threads: two callers", threads);
    tlm_pool_destroy(p);
  }
  /* the spin budget: workers that spin 10 s never sleep in a pause of
   * 30 ms; with 1 us they sleep in it, and a budget lowered while they
   * spin applies at once; a pool whose workers spin 10 s is destroyed at
   * once (the stop flag ends the spin) */
  for (int threads = 2; threads <= 3; threads++) {
    tlm_pool *sp = NULL;
    if (tlm_pool_create(threads, &sp)) {
      CHECK(0, "create %d threads (spin)", threads);
      continue;
    }
    tlm_pool_set_spin_ns(sp, 10000000000ll);
    pause_ms(30); /* workers spinning since their start may have slept: */
    CHECK(run_counted(sp, threads, 64, 3, 0, NULL), "spin 10 s: runs");
    uint64_t s0 = tlm_pool_sleeps(sp);
    pause_ms(30);
    CHECK(run_counted(sp, threads, 64, 1, 0, NULL), "spin 10 s: run after the pause");
    CHECK(tlm_pool_sleeps(sp) == s0, "%d threads: spin 10 s, a worker slept in a 30 ms pause",
          threads);
    /* lowered while they spin: every worker sleeps soon (within 5 s: after
     * the budget a worker yields 50 times, and on a loaded machine each
     * yield may give the CPU away for a whole time slice) */
    tlm_pool_set_spin_ns(sp, 1000);
    double t1 = now_ms();
    while (tlm_pool_sleeps(sp) < s0 + (uint64_t)(threads - 1) && now_ms() - t1 < 5000) pause_ms(5);
    CHECK(tlm_pool_sleeps(sp) >= s0 + (uint64_t)(threads - 1),
          "%d threads: budget lowered to 1 us while spinning, %llu sleeps in %.0f ms", threads,
          (unsigned long long)(tlm_pool_sleeps(sp) - s0), now_ms() - t1);
    CHECK(run_counted(sp, threads, 64, 3, 0, NULL), "spin 1 us: runs after sleeping");
    tlm_pool_set_spin_ns(sp, -5); /* negative: no spin */
    CHECK(run_counted(sp, threads, 13, 20, 0, NULL), "spin 0: runs");
    tlm_pool_set_spin_ns(sp, 10000000000ll);
    CHECK(run_counted(sp, threads, 64, 2, 0, NULL), "spin 10 s: runs before destroy");
    double t0 = now_ms();
    tlm_pool_destroy(sp);
    CHECK(now_ms() - t0 < 2000, "destroy with workers spinning 10 s took %.0f ms", now_ms() - t0);
  }
  /* n <= 0 runs nothing */
  tlm_pool *p = NULL;
  if (tlm_pool_create(2, &p) == 0) {
    count_ctx c = {.threads = 2};
    atomic_int one;
    atomic_init(&one, 0);
    c.hits = &one;
    tlm_pool_run(p, 0, count_body, &c);
    tlm_pool_run(p, -3, count_body, &c);
    CHECK(atomic_load(&c.calls) == 0, "n <= 0 called the body");
    tlm_pool_destroy(p);
  }
  printf("test_pool: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
