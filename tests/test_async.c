/* test_async.c - background builds (tlm_config.async_compile, TLM_ASYNC=1).
 *
 * A new shape of an operator the runtime already has a kernel for is
 * answered at once by that kernel (provisional) while its own is built on
 * the background thread: every answer is checked against a plain
 * reference, before and after the upgrade; tlm_destroy racing queued and
 * running builds neither hangs nor leaks (ASan); two threads on one new
 * shape and a waiter; a capacity of 1 kernel, so provisional kernels are
 * evicted under the builds; a disk cache the builds fill and a second
 * runtime loads before each first call returns, without compiling; every
 * core kept busy, so the rescue thread builds what the idle-priority
 * background thread cannot; tuning jobs giving way to builds while the
 * application never pauses, and tlm_wait_background beside a thread that
 * goes on calling; the workers' spin budget (tlm_config.spin_us): its
 * default, at most 100 us with more threads than CPUs, back to the
 * runtime's own once the background builds are done, never raised above a
 * shorter one (TSan runs this file too).
 */
#define _GNU_SOURCE /* pthread_setaffinity_np, sched_getaffinity */
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "engine/engine.h"
#include "tlm.h"

typedef struct shape {
  int64_t M, K, N;
} shape;

/* one operator family (plain row-major matmul, no epilogue) at extents
 * that divide no tile, a prime K, M = 1 */
static const shape k_shapes[] = {{17, 64, 48}, {33, 40, 7},  {5, 101, 129}, {1, 64, 48},
                                 {64, 7, 300}, {3, 257, 16}, {29, 31, 37}};
#define NSHAPES ((int)(sizeof k_shapes / sizeof k_shapes[0]))

static int g_tier0; /* tlm_config.tier0: 0 default (no tier-0 matmul), 1 with it */

static tlm_runtime *make_rt_dir(int async, size_t capacity, const char *dir) {
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.tier0 = g_tier0;
  cfg.cache_dir = dir;
  cfg.model_path = "none";
  cfg.num_threads = 2;
  cfg.async_compile = async;
  cfg.cache_capacity = capacity;
  tlm_runtime *rt = NULL;
  CHECK(tlm_create(&cfg, &rt) == TLM_OK, "tlm_create: %s", tlm_last_error(NULL));
  return rt;
}

static tlm_runtime *make_rt(int async, size_t capacity) { return make_rt_dir(async, capacity, "none"); }

/* runs shape s with inputs from `seed` and checks C against a double
 * reference; returns 0 when right */
static int run_check(tlm_runtime *rt, const shape *s, int seed) {
  float *a = malloc(sizeof(float) * (size_t)(s->M * s->K));
  float *b = malloc(sizeof(float) * (size_t)(s->K * s->N));
  float *c = malloc(sizeof(float) * (size_t)(s->M * s->N));
  if (!a || !b || !c) {
    free(a), free(b), free(c);
    return -1;
  }
  for (int64_t i = 0; i < s->M * s->K; i++) a[i] = (float)((i * 7 + seed) % 13) / 6.0f - 1.0f;
  for (int64_t i = 0; i < s->K * s->N; i++) b[i] = (float)((i * 5 + 3 * seed) % 11) / 5.0f - 1.0f;
  tlm_op op = tlm_op_matmul();
  tlm_tensor in[2], out;
  tlm_tensor_dense(&in[0], TLM_F32, 2, (int64_t[]){s->M, s->K}, a);
  tlm_tensor_dense(&in[1], TLM_F32, 2, (int64_t[]){s->K, s->N}, b);
  tlm_tensor_dense(&out, TLM_F32, 2, (int64_t[]){s->M, s->N}, c);
  int bad = tlm_run(rt, &op, in, 2, &out, 1) != TLM_OK;
  for (int64_t m = 0; m < s->M && !bad; m++)
    for (int64_t n = 0; n < s->N && !bad; n++) {
      double ref = 0, mag = 0;
      for (int64_t k = 0; k < s->K; k++) {
        ref += (double)a[m * s->K + k] * b[k * s->N + n];
        mag += fabs((double)a[m * s->K + k] * b[k * s->N + n]);
      }
      if (fabs(c[m * s->N + n] - ref) > 1e-5 * (1 + mag)) bad = 1;
    }
  free(a), free(b), free(c);
  return bad;
}

static void provisional_then_own(void) {
  tlm_runtime *rt = make_rt(1, 0);
  if (!rt) return;
  int wrong = 0;
  for (int i = 0; i < NSHAPES; i++) wrong += run_check(rt, &k_shapes[i], i) != 0;
  CHECK(wrong == 0, "%d wrong results from provisional kernels", wrong);
  tlm_stats s;
  tlm_get_stats(rt, &s);
  /* the first shape has no sibling: built before tlm_run returned, or
   * (tier0 = 1) answered by the tier-0 matmul */
  CHECK(g_tier0 == 0 ? s.provisional >= 1 && s.provisional <= (uint64_t)NSHAPES - 1
                     : s.provisional == (uint64_t)NSHAPES,
        "%llu of %d new shapes provisional", (unsigned long long)s.provisional, NSHAPES);
  CHECK(tlm_wait_background(rt) == TLM_OK, "tlm_wait_background");
  CHECK(tlm_pool_spin_ns(rt->pool) == rt->spin_ns,
        "after the builds the workers spin %lld ns, the runtime's budget is %lld",
        (long long)tlm_pool_spin_ns(rt->pool), (long long)rt->spin_ns);
  tlm_get_stats(rt, &s);
  CHECK(s.upgrades == s.provisional, "%llu of %llu provisional shapes upgraded",
        (unsigned long long)s.upgrades, (unsigned long long)s.provisional);
  /* after the upgrade: each shape runs its own plan (a hit), still right */
  uint64_t misses = s.cache_misses;
  for (int i = 0; i < NSHAPES; i++) wrong += run_check(rt, &k_shapes[i], 100 + i) != 0;
  tlm_get_stats(rt, &s);
  CHECK(wrong == 0, "%d wrong results after the upgrades", wrong);
  CHECK(s.cache_misses == misses, "upgraded shapes missed again (%llu -> %llu)",
        (unsigned long long)misses, (unsigned long long)s.cache_misses);
  tlm_destroy(rt);
}

/* tlm_destroy right after queueing builds: no hang, no leak */
static void destroy_races_builds(void) {
  for (int rep = 0; rep < 4; rep++) {
    tlm_runtime *rt = make_rt(1, 0);
    if (!rt) return;
    int wrong = 0;
    for (int i = 0; i < NSHAPES; i++) wrong += run_check(rt, &k_shapes[i], rep + i) != 0;
    CHECK(wrong == 0, "destroy race %d: %d wrong results", rep, wrong);
    tlm_destroy(rt); /* builds queued or running */
  }
}

typedef struct thr {
  tlm_runtime *rt;
  int idx, wrong;
} thr;

static void *same_shape(void *p) {
  thr *t = p;
  for (int r = 0; r < 3; r++) t->wrong += run_check(t->rt, &k_shapes[t->idx], r) != 0;
  return NULL;
}

static void *waiter(void *p) {
  thr *t = p;
  t->wrong += tlm_wait_background(t->rt) != TLM_OK;
  return NULL;
}

/* two threads on each new shape at once, and one waiting meanwhile */
static void threads_on_one_shape(size_t capacity) {
  tlm_runtime *rt = make_rt(1, capacity);
  if (!rt) return;
  int wrong = run_check(rt, &k_shapes[0], 0) != 0;
  for (int i = 1; i < NSHAPES; i++) {
    thr t[3] = {{rt, i, 0}, {rt, i, 0}, {rt, i, 0}};
    pthread_t th[3];
    pthread_create(&th[0], NULL, same_shape, &t[0]);
    pthread_create(&th[1], NULL, same_shape, &t[1]);
    pthread_create(&th[2], NULL, waiter, &t[2]);
    for (int j = 0; j < 3; j++) {
      pthread_join(th[j], NULL);
      wrong += t[j].wrong;
    }
  }
  tlm_wait_background(rt);
  for (int i = 0; i < NSHAPES; i++) wrong += run_check(rt, &k_shapes[i], 7) != 0;
  CHECK(wrong == 0, "capacity %zu: %d wrong results with threads on new shapes", capacity, wrong);
  tlm_stats s;
  tlm_get_stats(rt, &s);
  CHECK(s.upgrades == s.provisional, "capacity %zu: %llu of %llu provisional shapes upgraded",
        capacity, (unsigned long long)s.upgrades, (unsigned long long)s.provisional);
  tlm_destroy(rt);
}

/* a capacity of one kernel and one caller re-running 16 shapes: the
 * callers' evictions run while the background thread builds, and a kernel
 * built for a shape must survive them until it is swapped in (a build
 * whose kernel was freed before the swap left its shape on another
 * shape's kernel for good, now and then under load) */
static void capacity_one_upgrades(void) {
  tlm_runtime *rt = make_rt(1, 1);
  if (!rt) return;
  int wrong = 0;
  for (int rep = 0; rep < 3; rep++)
    for (int i = 0; i < 16; i++) {
      shape s = {1 + (7 * i + rep) % 41, 3 + (11 * i) % 37, 1 + (5 * i) % 29};
      wrong += run_check(rt, &s, rep + i) != 0;
    }
  tlm_wait_background(rt);
  tlm_stats st;
  tlm_get_stats(rt, &st);
  CHECK(wrong == 0, "capacity 1, 16 shapes: %d wrong results", wrong);
  CHECK(st.upgrades == st.provisional, "capacity 1, 16 shapes: %llu of %llu provisional upgraded",
        (unsigned long long)st.upgrades, (unsigned long long)st.provisional);
  tlm_destroy(rt);
}

/* with a disk cache: background builds store their plans and kernels; a
 * second runtime on the same directory loads them (its background builds
 * read the disk instead of compiling) */
static void with_disk(void) {
  char dir[] = "/tmp/tlm_test_async_XXXXXX";
  if (!mkdtemp(dir)) return;
  for (int pass = 0; pass < 2; pass++) {
    tlm_runtime *rt = make_rt_dir(1, 0, dir);
    if (!rt) break;
    int wrong = 0;
    for (int i = 0; i < NSHAPES; i++) wrong += run_check(rt, &k_shapes[i], 50 + i) != 0;
    tlm_wait_background(rt);
    for (int i = 0; i < NSHAPES; i++) wrong += run_check(rt, &k_shapes[i], 60 + i) != 0;
    tlm_stats s;
    tlm_get_stats(rt, &s);
    CHECK(wrong == 0, "disk pass %d: %d wrong results", pass, wrong);
    CHECK(s.upgrades == s.provisional, "disk pass %d: %llu of %llu upgraded", pass,
          (unsigned long long)s.upgrades, (unsigned long long)s.provisional);
    if (pass == 1) {
      CHECK(s.compiles == 0, "second runtime on the disk cache compiled %llu kernels",
            (unsigned long long)s.compiles);
      /* plans and kernels on disk load before tlm_run returns: no call of
       * the second runtime ran another shape's kernel */
      CHECK(s.provisional == 0, "second runtime: %llu shapes provisional with their plans on disk",
            (unsigned long long)s.provisional);
    }
    tlm_destroy(rt);
  }
  /* the kernel objects damaged (cut to 100 bytes), the plans intact: a
   * third runtime must not take a plan on disk for a quick load (the load
   * fails its checks, and the caller would compile): its shapes after the
   * first run on a sibling meanwhile, and all still come out right */
  DIR *kd;
  char path[256];
  snprintf(path, sizeof path, "%s/kernels", dir);
  int cut = 0;
  if ((kd = opendir(path)) != NULL) {
    struct dirent *e;
    while ((e = readdir(kd)) != NULL) {
      size_t n = strlen(e->d_name);
      if (n < 3 || strcmp(e->d_name + n - 2, ".o")) continue;
      char f[512];
      snprintf(f, sizeof f, "%s/%s", path, e->d_name);
      cut += truncate(f, 100) == 0;
    }
    closedir(kd);
  }
  CHECK(cut > 0, "no kernel object to damage under %s", path);
  tlm_runtime *rt = make_rt_dir(1, 0, dir);
  if (rt) {
    int wrong = 0;
    for (int i = 0; i < NSHAPES; i++) wrong += run_check(rt, &k_shapes[i], 70 + i) != 0;
    tlm_wait_background(rt);
    tlm_stats s;
    tlm_get_stats(rt, &s);
    CHECK(wrong == 0, "damaged kernels: %d wrong results", wrong);
    CHECK(s.provisional >= 1 && s.upgrades == s.provisional,
          "damaged kernels: %llu shapes provisional (want some), %llu upgraded",
          (unsigned long long)s.provisional, (unsigned long long)s.upgrades);
    tlm_destroy(rt);
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) CHECK(0, "could not remove %s", dir);
}

/* Every core kept busy by threads of the application's own priority: the
 * background thread (SCHED_IDLE) gets next to no time, and after a second
 * without progress a rescue thread at nice 10 builds the queued shapes,
 * started from tlm_run (run_path = 1: the calls on provisional kernels go
 * on) or from tlm_wait_background (run_path = 0). Every answer is checked. */
static atomic_int g_spin_stop;
static void *spinner(void *p) {
#ifdef __linux__
  /* one spinner on each CPU this process may use, so no core is ever left
   * to the idle thread by the load balancer's placement */
  int cpu = (int)(intptr_t)p;
  if (cpu >= 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
  }
#else
  (void)p;
#endif
  volatile unsigned x = 0;
  while (!atomic_load_explicit(&g_spin_stop, memory_order_relaxed)) x++;
  return NULL;
}

static void starved_builds_rescued(int run_path) {
  int cpus[64], nspin = 0;
#ifdef __linux__
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0)
    for (int c = 0; c < CPU_SETSIZE && nspin < 64; c++)
      if (CPU_ISSET(c, &allowed)) cpus[nspin++] = c;
#endif
  if (nspin == 0) { /* no affinity: as many as online CPUs, unpinned */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    for (nspin = 0; nspin < (ncpu < 1 ? 1 : ncpu > 64 ? 64 : ncpu); nspin++) cpus[nspin] = -1;
  }
  pthread_t spin[64];
  tlm_runtime *rt = make_rt(1, 0);
  if (!rt) return;
  int wrong = run_check(rt, &k_shapes[0], 0) != 0; /* built before it returns */
  atomic_store(&g_spin_stop, 0);
  int started = 0;
  while (started < nspin &&
         pthread_create(&spin[started], NULL, spinner, (void *)(intptr_t)cpus[started]) == 0)
    started++;
  for (int i = 1; i < NSHAPES; i++) wrong += run_check(rt, &k_shapes[i], i) != 0;
  tlm_stats s;
  tlm_get_stats(rt, &s);
  if (run_path) {
    /* the application keeps calling; about 60 s at most */
    for (int round = 0; round < 3000 && s.upgrades < s.provisional; round++) {
      for (int i = 1; i < NSHAPES; i++) wrong += run_check(rt, &k_shapes[i], 10 + i) != 0;
      struct timespec ts = {0, 20 * 1000000L};
      nanosleep(&ts, NULL);
      tlm_get_stats(rt, &s);
    }
  } else {
    CHECK(tlm_wait_background(rt) == TLM_OK, "tlm_wait_background");
    tlm_get_stats(rt, &s);
  }
  atomic_store(&g_spin_stop, 1);
  for (int t = 0; t < started; t++) pthread_join(spin[t], NULL);
  CHECK(wrong == 0, "busy cores (%s): %d wrong results", run_path ? "runs" : "wait", wrong);
  CHECK(s.provisional >= 1 && s.upgrades == s.provisional,
        "busy cores (%s): %llu of %llu provisional shapes upgraded", run_path ? "runs" : "wait",
        (unsigned long long)s.upgrades, (unsigned long long)s.provisional);
#ifdef __linux__
  /* the background thread is under SCHED_IDLE only where it can be lifted
   * out again (root or RLIMIT_NICE >= 10, engine.c bg_set_idle); elsewhere
   * it runs at nice 19, keeps a small share of the busy cores and may
   * finish each build within the rescue's second, so a rescue is not
   * required there (the answers and the upgrades still are) */
  struct rlimit rl;
  if (geteuid() == 0 || (getrlimit(RLIMIT_NICE, &rl) == 0 && rl.rlim_cur >= 10))
    CHECK(s.bg_rescues >= 1, "busy cores (%s): no rescue thread started (%d spinning threads)",
          run_path ? "runs" : "wait", started);
#endif
  for (int i = 0; i < NSHAPES; i++) wrong += run_check(rt, &k_shapes[i], 50 + i) != 0;
  CHECK(wrong == 0, "busy cores (%s): %d wrong results after the upgrades",
        run_path ? "runs" : "wait", wrong);
  tlm_destroy(rt);
}

/* Measured top-k on (tune_k = 2) and an application that never pauses:
 * tuning waits for a pause of the application's calls, so a thread that
 * has taken a tuning job would wait in it for good. New shapes keep
 * coming, and each must get its own kernel while the calls go on (a
 * tuning job gives way to a queued build, and the rescue thread takes no
 * tuning job: before, the background thread and the rescue each sat in
 * one and the third new shape stayed on a provisional kernel for as long
 * as the calls went on). Once the calls stop, the tuning jobs finish. */
/* calls the first n shapes over and over until ca_stop (or 15 s) */
typedef struct caller_arg {
  tlm_runtime *rt;
  int n, wrong;
} caller_arg;
static atomic_int ca_stop;
static void *caller(void *p) {
  caller_arg *a = p;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int round = 0; !atomic_load(&ca_stop); round++) {
    for (int j = 0; j < a->n; j++) a->wrong += run_check(a->rt, &k_shapes[j], round + j) != 0;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (t1.tv_sec - t0.tv_sec > 15) break;
  }
  return NULL;
}

static void tuning_gives_way_to_builds(void) {
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.cache_dir = "none";
  cfg.model_path = "none";
  cfg.num_threads = 1;
  cfg.async_compile = 1;
  cfg.tune_k = 2;
  tlm_runtime *rt = NULL;
  CHECK(tlm_create(&cfg, &rt) == TLM_OK, "tlm_create: %s", tlm_last_error(NULL));
  if (!rt) return;
  int wrong = 0, stuck = -1;
  const int nnew = 5;
  for (int i = 0; i <= nnew && stuck < 0; i++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    tlm_stats s;
    /* every shape so far, over and over, no sleep: about 20 s at most */
    for (;;) {
      for (int j = 0; j <= i; j++) wrong += run_check(rt, &k_shapes[j], i + j) != 0;
      tlm_get_stats(rt, &s);
      clock_gettime(CLOCK_MONOTONIC, &t1);
      double el = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
      if (s.upgrades == s.provisional && el > 0.05) break; /* and the tuning job queued */
      if (el > 20) {
        stuck = i;
        break;
      }
    }
  }
  CHECK(stuck < 0, "tuning on, calls without a pause: new shape %d not upgraded in 20 s", stuck);
  CHECK(wrong == 0, "tuning on, calls without a pause: %d wrong results", wrong);
  /* tlm_wait_background while another thread goes on calling: it waits
   * for the builds (none left), not for tuning jobs that only run in a
   * pause (it returned only when the calls stopped) */
  caller_arg ca = {rt, nnew + 1, 0};
  atomic_store(&ca_stop, 0);
  pthread_t th;
  if (pthread_create(&th, NULL, caller, &ca) == 0) {
    struct timespec t0, t1, pause = {0, 50 * 1000000L};
    nanosleep(&pause, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(tlm_wait_background(rt) == TLM_OK, "tlm_wait_background");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double el = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    atomic_store(&ca_stop, 1);
    pthread_join(th, NULL);
    CHECK(el < 5, "tlm_wait_background beside a calling thread: %.1f s (builds were done)", el);
    wrong += ca.wrong;
  }
  CHECK(tlm_wait_background(rt) == TLM_OK, "tlm_wait_background");
  tlm_stats s;
  tlm_get_stats(rt, &s);
  CHECK(stuck >= 0 || s.tunes == (uint64_t)nnew + 1, "tuning on: %llu of %d shapes tuned",
        (unsigned long long)s.tunes, nnew + 1);
  for (int j = 0; j <= nnew; j++) wrong += run_check(rt, &k_shapes[j], 90 + j) != 0;
  CHECK(wrong == 0, "tuning on: %d wrong results after tuning", wrong);
  tlm_destroy(rt);
}

/* tlm_config.spin_us: the default, a value of its own, at most the short
 * spin with more threads than CPUs, and a budget under the short one kept
 * through background builds */
static void spin_budget(void) {
  cpu_set_t allowed;
  int ncpu = sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? CPU_COUNT(&allowed) : 1;
  static const struct {
    int threads_over, spin_us;
    int64_t want_ns;
  } cases[] = {{0, 0, (int64_t)TLM_SPIN_US_DEFAULT * 1000},
               {0, 5000, 5000000},
               {0, 1, 1000},
               {1, 5000, TLM_POOL_SPIN_SHORT_NS},
               {1, 1, 1000}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    tlm_config cfg;
    tlm_config_init(&cfg);
    cfg.cache_dir = "none";
    cfg.model_path = "none";
    cfg.num_threads = cases[c].threads_over ? ncpu + 1 : 1;
    cfg.spin_us = cases[c].spin_us;
    cfg.async_compile = 1;
    tlm_runtime *rt = NULL;
    CHECK(tlm_create(&cfg, &rt) == TLM_OK, "tlm_create: %s", tlm_last_error(NULL));
    if (!rt) continue;
    CHECK(rt->spin_ns == cases[c].want_ns && tlm_pool_spin_ns(rt->pool) == cases[c].want_ns,
          "%d threads (%d CPUs), spin_us %d: %lld ns (pool %lld), want %lld", cfg.num_threads,
          ncpu, cfg.spin_us, (long long)rt->spin_ns, (long long)tlm_pool_spin_ns(rt->pool),
          (long long)cases[c].want_ns);
    int wrong = 0;
    for (int i = 0; i < 3; i++) wrong += run_check(rt, &k_shapes[i], 300 + i) != 0;
    CHECK(wrong == 0, "spin case %zu: %d wrong results", c, wrong);
    /* builds queued or running (or just done): the short spin, or less */
    int64_t during = tlm_pool_spin_ns(rt->pool), shorter = cases[c].want_ns;
    if (shorter > TLM_POOL_SPIN_SHORT_NS) shorter = TLM_POOL_SPIN_SHORT_NS;
    CHECK(during == shorter || during == cases[c].want_ns,
          "spin_us %d: %lld ns while building, want %lld (or %lld once built)", cfg.spin_us,
          (long long)during, (long long)shorter, (long long)cases[c].want_ns);
    CHECK(tlm_wait_background(rt) == TLM_OK, "tlm_wait_background");
    CHECK(tlm_pool_spin_ns(rt->pool) == cases[c].want_ns,
          "spin_us %d: %lld ns after the builds, want %lld", cfg.spin_us,
          (long long)tlm_pool_spin_ns(rt->pool), (long long)cases[c].want_ns);
    tlm_destroy(rt);
  }
}

int main(void) {
  spin_budget();
  tuning_gives_way_to_builds();
  starved_builds_rescued(1);
  starved_builds_rescued(0);
  for (g_tier0 = 0; g_tier0 < 2; g_tier0++) {
    provisional_then_own();
    with_disk();
    destroy_races_builds();
    threads_on_one_shape(0);
    threads_on_one_shape(1); /* provisional kernels evicted under the builds */
    capacity_one_upgrades();
  }
  return check_report("test_async");
}
