/* threadpool.c - fork-join pool: workers spin briefly on a generation
 * counter (kernels of microseconds should not pay a futex wake-up), then
 * sleep on a condition variable. */
#include "threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define SPIN_ITERATIONS 20000

struct tlm_pool {
  int threads;
  pthread_t *tids;
  pthread_mutex_t run_lock; /* serializes tlm_pool_run callers */
  pthread_mutex_t lock;
  pthread_cond_t wake;
  atomic_uint_fast64_t generation;
  atomic_int pending; /* workers still busy with this generation */
  atomic_int stop;
  /* the job; written before generation is bumped */
  tlm_pool_fn fn;
  void *ctx;
  int64_t n;
};

typedef struct worker_arg {
  tlm_pool *pool;
  int tid;
} worker_arg;

static void run_chunk(tlm_pool *p, int tid) {
  int64_t b = p->n * tid / p->threads, e = p->n * (tid + 1) / p->threads;
  if (b < e) p->fn(p->ctx, b, e, tid);
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static void *worker(void *arg) {
  worker_arg *wa = arg;
  tlm_pool *p = wa->pool;
  int tid = wa->tid;
  free(wa);
  uint_fast64_t seen = 0;
  for (;;) {
    int spins = 0;
    while (atomic_load_explicit(&p->generation, memory_order_acquire) == seen &&
           !atomic_load(&p->stop)) {
      if (++spins < SPIN_ITERATIONS) {
        cpu_relax();
        continue;
      }
      pthread_mutex_lock(&p->lock);
      while (atomic_load(&p->generation) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->wake, &p->lock);
      pthread_mutex_unlock(&p->lock);
    }
    if (atomic_load(&p->stop)) break;
    seen = atomic_load(&p->generation);
    run_chunk(p, tid);
    atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
  }
  return NULL;
}

int tlm_pool_create(int threads, tlm_pool **out) {
  *out = NULL;
  if (threads < 1) threads = 1;
  tlm_pool *p = calloc(1, sizeof *p);
  if (!p) return -1;
  p->threads = threads;
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
  pthread_cond_destroy(&p->wake);
  pthread_mutex_destroy(&p->lock);
  pthread_mutex_destroy(&p->run_lock);
  free(p);
}

int tlm_pool_threads(const tlm_pool *p) { return p->threads; }

void tlm_pool_run(tlm_pool *p, int64_t n, tlm_pool_fn fn, void *ctx) {
  if (n <= 0) return;
  pthread_mutex_lock(&p->run_lock);
  if (p->threads == 1 || n == 1) {
    fn(ctx, 0, n, 0);
    pthread_mutex_unlock(&p->run_lock);
    return;
  }
  p->fn = fn;
  p->ctx = ctx;
  p->n = n;
  atomic_store(&p->pending, p->threads - 1);
  pthread_mutex_lock(&p->lock);
  atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->lock);
  run_chunk(p, 0);
  while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) cpu_relax();
  pthread_mutex_unlock(&p->run_lock);
}
