/* threadpool.h - the runtime's own pthread pool for parallel kernel loops
 * (internal). The calling thread takes part as thread 0. */
#ifndef TLM_RUNTIME_THREADPOOL_H
#define TLM_RUNTIME_THREADPOOL_H

#include <stdint.h>

typedef struct tlm_pool tlm_pool;

/* fn runs iterations [begin, end) on thread `tid` (0..threads-1). */
typedef void (*tlm_pool_fn)(void *ctx, int64_t begin, int64_t end, int tid);

/* A worker's spin between runs under a runtime's background builds, and a
 * new pool's budget: about what 4000 PAUSEs took on Zen 3 (threadpool.c). */
#define TLM_POOL_SPIN_SHORT_NS 100000

/* Starts threads-1 workers, with the spin budget TLM_POOL_SPIN_SHORT_NS.
 * Returns 0, or -1 if a thread cannot start. */
int tlm_pool_create(int threads, tlm_pool **out);
void tlm_pool_destroy(tlm_pool *p);
int tlm_pool_threads(const tlm_pool *p);

/* How long an idle worker spins for the next run before it yields and
 * sleeps, in ns (negative: 0). Takes effect at once, also for workers
 * spinning now. Thread-safe. */
void tlm_pool_set_spin_ns(tlm_pool *p, int64_t ns);

/* The spin budget now, ns. Thread-safe. */
int64_t tlm_pool_spin_ns(const tlm_pool *p);

/* How many times a worker has gone to sleep between runs (its spin budget
 * ran out). Thread-safe. */
uint64_t tlm_pool_sleeps(const tlm_pool *p);

/* Splits [0, n) into contiguous, nearly equal chunks (at most 4 per
 * thread; an empty chunk is skipped), runs each once and returns when all
 * are done. Thread t runs the chunks of the t-th contiguous share first,
 * then any chunk still unclaimed in the other shares, so fn may be called
 * several times per thread in one run, and which thread runs a chunk
 * depends on timing. Calls from several threads are serialized. */
void tlm_pool_run(tlm_pool *p, int64_t n, tlm_pool_fn fn, void *ctx);

#endif
