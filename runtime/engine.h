/* engine.h - the dispatcher that ties space, scheduler, lowering, JIT and
 * cache together, and the runtime object (internal; tools and tests use it
 * to run chosen schedules). */
#ifndef TLM_RUNTIME_ENGINE_H
#define TLM_RUNTIME_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>

#include "../cache/map.h"
#include "../jit/jit.h"
#include "../lm/model.h"
#include "kernel_abi.h"
#include "loopnest.h"
#include "space.h"
#include "target.h"
#include "task.h"
#include "threadpool.h"
#include "tlm.h"

#define TLM_ERRMSG 1024

/* A compiled kernel, shared by every task with its schedule key. */
typedef struct tlm_kernel {
  tlm_mm_kernel_fn fn;
  tlm_schedule sched;
  ln_nest nest;
  int64_t scratch_bytes; /* per thread */
  double compile_ms;     /* codegen + optimization + native compile */
  char name[48];
} tlm_kernel;

/* What a shape maps to: its schedule and the kernel that runs it. */
typedef struct tlm_plan {
  tlm_kernel *kernel;
  tlm_schedule sched;
  double schedule_ms;
  int by_model; /* 1: the language model chose the schedule */
} tlm_plan;

struct tlm_runtime {
  tlm_config cfg;
  char *cache_dir, *model_path;
  tlm_target target;
  tlm_pool *pool;
  int nthreads;
  tlm_jit *jit;
  tlm_lm_model *model; /* NULL: the default rule schedules */
  /* plans by shape key, kernels by schedule key */
  pthread_rwlock_t map_lock;
  tlm_map plans, kernels;
  pthread_mutex_t build_lock; /* one build at a time */
  /* per-thread scratch, grown under exec_lock */
  pthread_mutex_t exec_lock;
  float **scratch;
  int64_t scratch_bytes;
  /* statistics */
  atomic_uint_fast64_t runs, hits, misses, schedules, compiles, compile_fail;
  _Atomic double schedule_ms, compile_ms;
  /* every plan and kernel ever made, for freeing */
  pthread_mutex_t list_lock;
  void **owned;
  size_t nowned, capowned;
};

/* Logs a formatted line at `level` through the runtime's sink. */
void tlm_log(const tlm_runtime *rt, tlm_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The plan for a task: from the cache, or scheduled (default rule; the
 * language model once configured) and compiled now. */
tlm_status tlm_engine_plan(tlm_runtime *rt, const tlm_task *task, const tlm_plan **out,
                           char *err, int errcap);

/* The kernel for a given schedule of a task (cached by schedule key). */
tlm_status tlm_engine_kernel(tlm_runtime *rt, const tlm_task *task,
                             const tlm_schedule *sched, tlm_kernel **out, char *err,
                             int errcap);

/* Runs a kernel over the runtime's threads. */
tlm_status tlm_engine_exec(tlm_runtime *rt, const tlm_kernel *k, const tlm_task *task,
                           const tlm_mm_args *args, char *err, int errcap);

/* The optimized LLVM IR text of a schedule (for tests and `tlm explain`).
 * *ir is malloc'd; the caller frees it. `optimize` 0 gives the IR as
 * generated. */
tlm_status tlm_engine_ir(tlm_runtime *rt, const tlm_task *task, const tlm_schedule *sched,
                         int optimize, char **ir, char *err, int errcap);

/* Chooses the schedule of a task: the language model when one is loaded
 * (falling back to the rule if decoding fails), else the default rule.
 * Returns 1 if the model chose it. */
int tlm_engine_schedule(tlm_runtime *rt, const tlm_space *space, tlm_schedule *out);

/* Sets the calling thread's last error for rt and returns st. */
tlm_status tlm_set_error(const tlm_runtime *rt, tlm_status st, const char *msg);

#endif
