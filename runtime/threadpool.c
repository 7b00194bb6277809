/* threadpool.c - fork-join pool: each thread its own range, then stealing.
 *
 * A run splits [0, n) into at most 4 chunks per thread, and thread t owns
 * the t-th contiguous share of them. Each thread claims its own chunks
 * from the front of its slot first, then claims from the other slots, so
 * a worker that the OS has not scheduled yet (another process on the
 * core, say) delays nothing: the others take its chunks. While no thread
 * is late, every thread runs one contiguous part of the iteration space,
 * the same part in every run of the same shape: its loads stream through
 * one range of memory (a 5-row product's weights under AVX2 on two
 * threads, 5x768:768x2304: 0.24 -> 0.19 ms against one shared claim
 * counter, whose chunks went to whichever thread asked first), and what
 * a thread wrote in one call it reads again in the next. Each slot's claim
 * counter carries the run's generation in its high 32 bits, and a claim is
 * a compare-and-swap that fails on a newer generation, so a late worker
 * never runs a chunk of a run it did not see start.
 *
 * Between runs a worker spins (kernels of microseconds should not pay a
 * futex wake-up), then yields a few times, then sleeps on a condition
 * variable. The spin is measured in time, not in PAUSE instructions
 * (a PAUSE takes 3 to 140 cycles across x86 cores: Zen 3 here 27-31 ns),
 * and it is the pool's spin budget (tlm_pool_set_spin_ns): a sleeping
 * worker's wake-up cost the next run 30-100 us on a 2-vCPU KVM guest
 * (Zen 3, session 54: 600 of 620 wake-ups), the whole of a small
 * kernel's time, so the caller ran it alone. The budget is a policy, not
 * a machine constant: the runtime spins long (tlm_config.spin_us, default
 * 1 ms, as OpenMP runtimes spin for milliseconds by default) except while
 * its background builds wait for idle CPU time or it has more threads than
 * CPUs, when it spins at most TLM_POOL_SPIN_SHORT_NS (what 4000 PAUSEs
 * took on that Zen 3). */
#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"

#define YIELD_ITERATIONS 50
#define CHUNKS_PER_THREAD 4
#define SPIN_CLOCK_EVERY 64 /* PAUSEs between clock reads (about 2 us on Zen 3) */

struct tlm_pool {
  int threads;
  pthread_t *tids;
  pthread_mutex_t run_lock; /* serializes tlm_pool_run callers */
  pthread_mutex_t lock;
  pthread_cond_t wake;
  atomic_int stop;
  _Atomic int_fast64_t spin_ns; /* tlm_pool_set_spin_ns */
  atomic_uint_fast64_t sleeps;  /* tlm_pool_sleeps */
  /* Each on its own cache line: spinning workers read `generation`, so a
   * line that the caller also writes the job into would travel between
   * the cores at every one of those writes (2.5 us a run of 0.45 us of
   * work on two threads of the Xeon, 0.9 us apart); the claims (in the
   * slots) and the finished count have their own writers too. */
  _Alignas(64) atomic_uint_fast32_t generation;
  struct pool_slot *slots; /* one per thread, each on its own cache line; set at creation */
  _Alignas(64) atomic_int_fast64_t done;   /* chunks finished in this run */
  /* the job; written before the run opens. Atomic (relaxed) because a
   * late worker may read them while the next job is being written; its
   * claim then fails, so the values it read are never used */
  _Alignas(64) _Atomic(tlm_pool_fn) fn;
  _Atomic(void *) ctx;
  atomic_int_fast64_t n, chunks;
};

/* A thread's share of a run: one word, generation << 32 | end << 16 |
 * next chunk (chunks of a run < 2^16), so a claim reads the bound it
 * claims against in the same atomic load, and a run opens by writing
 * each slot once (no close: a late worker's compare-and-swap fails on the
 * generation, and a share whose next reached its end has nothing left) */
typedef struct pool_slot {
  _Alignas(64) atomic_uint_fast64_t claim;
} pool_slot;

#define SLOT_WORD(gen, end, next) ((uint64_t)(gen) << 32 | (uint64_t)(end) << 16 | (uint64_t)(next))

typedef struct worker_arg {
  tlm_pool *pool;
  int tid;
} worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* claims and runs chunks of generation gen until none is left: its own
 * slot's first, then the other slots' */
static void work(tlm_pool *p, uint32_t gen, int tid) {
  for (int k = 0; k < p->threads; k++) {
    pool_slot *sl = &p->slots[(tid + k) % p->threads];
    for (;;) {
      uint64_t c = atomic_load_explicit(&sl->claim, memory_order_acquire);
      if ((uint32_t)(c >> 32) != gen) return;
      int64_t chunk = (int64_t)(c & 0xffffu);
      if (chunk >= (int64_t)((c >> 16) & 0xffffu)) break;
      if (!atomic_compare_exchange_weak_explicit(&sl->claim, &c, c + 1, memory_order_acq_rel,
                                                 memory_order_relaxed))
        continue;
      /* the claim succeeded for this run: its job fields are current */
      int64_t n = atomic_load_explicit(&p->n, memory_order_relaxed);
      int64_t chunks = atomic_load_explicit(&p->chunks, memory_order_relaxed);
      int64_t b = n * chunk / chunks, e = n * (chunk + 1) / chunks;
      tlm_pool_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
      if (b < e) fn(atomic_load_explicit(&p->ctx, memory_order_relaxed), b, e, tid);
      atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel);
    }
  }
}

/* Waits for a generation other than `seen`: spins for the pool's spin
 * budget (read again at each clock read, so a shorter budget set meanwhile
 * applies at once), yields, then sleeps. */
static void wait_for_run(tlm_pool *p, uint32_t seen) {
  double t0 = tlm_clock_ns();
  unsigned spins = 0;
  while ((uint32_t)atomic_load_explicit(&p->generation, memory_order_acquire) == seen &&
         !atomic_load_explicit(&p->stop, memory_order_relaxed)) {
    cpu_relax();
    if (++spins % SPIN_CLOCK_EVERY) continue;
    if (tlm_clock_ns() - t0 < (double)atomic_load_explicit(&p->spin_ns, memory_order_relaxed))
      continue;
    for (int y = 0; y < YIELD_ITERATIONS; y++) {
      if ((uint32_t)atomic_load_explicit(&p->generation, memory_order_acquire) != seen) return;
      sched_yield();
    }
    pthread_mutex_lock(&p->lock);
    if ((uint32_t)atomic_load(&p->generation) == seen && !atomic_load(&p->stop))
      atomic_fetch_add_explicit(&p->sleeps, 1, memory_order_relaxed);
    while ((uint32_t)atomic_load(&p->generation) == seen && !atomic_load(&p->stop))
      pthread_cond_wait(&p->wake, &p->lock);
    pthread_mutex_unlock(&p->lock);
    return;
  }
}

static void *worker(void *arg) {
  worker_arg *wa = arg;
  tlm_pool *p = wa->pool;
  int tid = wa->tid;
  free(wa);
  uint32_t seen = 0;
  for (;;) {
    wait_for_run(p, seen);
    if (atomic_load(&p->stop)) break;
    seen = (uint32_t)atomic_load_explicit(&p->generation, memory_order_acquire);
    work(p, seen, tid);
  }
  return NULL;
}

int tlm_pool_create(int threads, tlm_pool **out) {
  *out = NULL;
  if (threads < 1) threads = 1;
  tlm_pool *p = aligned_alloc(64, sizeof *p); /* a multiple of 64: the struct's alignment */
  if (!p) return -1;
  memset(p, 0, sizeof *p);
  p->threads = threads;
  atomic_init(&p->spin_ns, TLM_POOL_SPIN_SHORT_NS);
  atomic_init(&p->sleeps, 0);
  p->slots = aligned_alloc(64, sizeof(pool_slot) * (size_t)threads);
  if (!p->slots) {
    free(p);
    return -1;
  }
  for (int t = 0; t < threads; t++) atomic_init(&p->slots[t].claim, 0); /* no run open: 0 of 0 */
  pthread_mutex_init(&p->run_lock, NULL);
  pthread_mutex_init(&p->lock, NULL);
  pthread_cond_init(&p->wake, NULL);
  p->tids = calloc((size_t)threads, sizeof *p->tids);
  if (!p->tids) {
    tlm_pool_destroy(p);
    return -1;
  }
  for (int t = 1; t < threads; t++) {
    worker_arg *wa = malloc(sizeof *wa);
    if (!wa) goto fail;
    wa->pool = p;
    wa->tid = t;
    if (pthread_create(&p->tids[t], NULL, worker, wa)) {
      free(wa);
      goto fail;
    }
  }
  *out = p;
  return 0;
fail:
  tlm_pool_destroy(p);
  return -1;
}

void tlm_pool_destroy(tlm_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->lock);
  atomic_store(&p->stop, 1);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->lock);
  for (int t = 1; t < p->threads && p->tids; t++)
    if (p->tids[t]) pthread_join(p->tids[t], NULL);
  free(p->tids);
  free(p->slots);
  pthread_cond_destroy(&p->wake);
  pthread_mutex_destroy(&p->lock);
  pthread_mutex_destroy(&p->run_lock);
  free(p);
}

int tlm_pool_threads(const tlm_pool *p) { return p->threads; }

void tlm_pool_set_spin_ns(tlm_pool *p, int64_t ns) {
  atomic_store_explicit(&p->spin_ns, ns < 0 ? 0 : ns, memory_order_relaxed);
}

int64_t tlm_pool_spin_ns(const tlm_pool *p) {
  return (int64_t)atomic_load_explicit(&((tlm_pool *)p)->spin_ns, memory_order_relaxed);
}

uint64_t tlm_pool_sleeps(const tlm_pool *p) {
  return atomic_load_explicit(&((tlm_pool *)p)->sleeps, memory_order_relaxed);
}

void tlm_pool_run(tlm_pool *p, int64_t n, tlm_pool_fn fn, void *ctx) {
  if (n <= 0) return;
  pthread_mutex_lock(&p->run_lock);
  if (p->threads == 1 || n == 1) {
    fn(ctx, 0, n, 0);
    pthread_mutex_unlock(&p->run_lock);
    return;
  }
  int64_t chunks = (int64_t)p->threads * CHUNKS_PER_THREAD;
  if (chunks > n) chunks = n;
  if (chunks > 0xffff) chunks = 0xffff;
  atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
  atomic_store_explicit(&p->ctx, ctx, memory_order_relaxed);
  atomic_store_explicit(&p->n, n, memory_order_relaxed);
  atomic_store_explicit(&p->chunks, chunks, memory_order_relaxed);
  atomic_store(&p->done, 0);
  uint32_t gen = (uint32_t)atomic_load(&p->generation) + 1;
  for (int t = 0; t < p->threads; t++)
    atomic_store_explicit(&p->slots[t].claim,
                          SLOT_WORD(gen, chunks * (t + 1) / p->threads, chunks * t / p->threads),
                          memory_order_release);
  pthread_mutex_lock(&p->lock);
  atomic_store_explicit(&p->generation, gen, memory_order_release);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->lock);
  work(p, gen, 0);
  while (atomic_load_explicit(&p->done, memory_order_acquire) < chunks) cpu_relax();
  pthread_mutex_unlock(&p->run_lock);
}
