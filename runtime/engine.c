/* engine.c - the dispatcher: task -> plan (schedule + kernel) -> run. */
#include "engine.h"

#include <llvm-c/Core.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../cache/key.h"
#include "../jit/codegen.h"

static const char *pipeline(void) {
  const char *p = getenv("TLM_PASSES");
  return p && *p ? p : "default<O1>";
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void atomic_add_double(_Atomic double *x, double v) {
  double old = atomic_load(x);
  while (!atomic_compare_exchange_weak(x, &old, old + v)) {
  }
}

void tlm_log(const tlm_runtime *rt, tlm_log_level level, const char *fmt, ...) {
  if (!rt || level > rt->cfg.verbose || level == TLM_LOG_NONE) return;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (rt->cfg.log_fn)
    rt->cfg.log_fn(rt->cfg.log_user, level, line);
  else
    fprintf(stderr, "tlm: %s\n", line);
}

static int remember(tlm_runtime *rt, void *p) {
  pthread_mutex_lock(&rt->list_lock);
  int rc = 0;
  if (rt->nowned == rt->capowned) {
    size_t cap = rt->capowned ? rt->capowned * 2 : 64;
    void **n = realloc(rt->owned, cap * sizeof *n);
    if (!n) rc = -1;
    else rt->owned = n, rt->capowned = cap;
  }
  if (!rc) rt->owned[rt->nowned++] = p;
  pthread_mutex_unlock(&rt->list_lock);
  return rc;
}

/* Lowers, generates and optimizes the module of a schedule. */
static tlm_status make_module(tlm_runtime *rt, const tlm_task *task, const tlm_schedule *sched,
                              LLVMContextRef ctx, const char *name, int optimize,
                              ln_nest *nest, LLVMModuleRef *mod, char *err, int errcap) {
  if (ln_lower_matmul(task, sched, nest)) {
    snprintf(err, (size_t)errcap, "schedule does not lower to a loop nest");
    return TLM_ERR_INTERNAL;
  }
  if (tlm_codegen_matmul(ctx, task, nest, name, tlm_jit_cpu(rt->jit), tlm_jit_features(rt->jit),
                         mod, err, errcap))
    return TLM_ERR_JIT;
  if (optimize && tlm_jit_optimize(rt->jit, *mod, pipeline(), err, errcap)) {
    LLVMDisposeModule(*mod);
    *mod = NULL;
    return TLM_ERR_JIT;
  }
  return TLM_OK;
}

/* Compiles a kernel; the caller holds build_lock. */
static tlm_status kernel_locked(tlm_runtime *rt, const tlm_task *task, const tlm_schedule *sched,
                                tlm_kernel **out, char *err, int errcap) {
  tlm_key key;
  tlm_key_schedule(&key, task, &rt->target, sched);
  pthread_rwlock_rdlock(&rt->map_lock);
  tlm_kernel *k = tlm_map_get(&rt->kernels, &key);
  pthread_rwlock_unlock(&rt->map_lock);
  if (k) {
    *out = k;
    return TLM_OK;
  }
  k = calloc(1, sizeof *k);
  if (!k) {
    snprintf(err, (size_t)errcap, "out of memory");
    return TLM_ERR_OUT_OF_MEMORY;
  }
  char hex[33];
  snprintf(k->name, sizeof k->name, "tlm_mm_%s", tlm_key_hex(&key, hex));
  k->sched = *sched;
  k->scratch_bytes = tlm_mm_scratch_bytes(task, sched);
  double t0 = now_ms();
  LLVMOrcThreadSafeContextRef tsc = tlm_jit_new_context();
  LLVMModuleRef mod = NULL;
  tlm_status st = make_module(rt, task, sched, LLVMOrcThreadSafeContextGetContext(tsc), k->name,
                              1, &k->nest, &mod, err, errcap);
  void *fn = NULL;
  if (st == TLM_OK) {
    if (tlm_jit_add(rt->jit, tsc, mod, k->name, &fn, err, errcap)) st = TLM_ERR_JIT;
  } else {
    LLVMOrcDisposeThreadSafeContext(tsc);
  }
  if (st != TLM_OK) {
    atomic_fetch_add(&rt->compile_fail, 1);
    free(k);
    return st;
  }
  k->fn = (tlm_mm_kernel_fn)fn;
  k->compile_ms = now_ms() - t0;
  atomic_fetch_add(&rt->compiles, 1);
  atomic_add_double(&rt->compile_ms, k->compile_ms);
  pthread_rwlock_wrlock(&rt->map_lock);
  int rc = tlm_map_put(&rt->kernels, &key, k);
  pthread_rwlock_unlock(&rt->map_lock);
  if (rc || remember(rt, k)) {
    /* the JIT keeps the code; without a map entry we cannot reuse it, but
     * it stays valid for this call */
    snprintf(err, (size_t)errcap, "out of memory");
    return TLM_ERR_OUT_OF_MEMORY;
  }
  *out = k;
  return TLM_OK;
}

tlm_status tlm_engine_kernel(tlm_runtime *rt, const tlm_task *task, const tlm_schedule *sched,
                             tlm_kernel **out, char *err, int errcap) {
  pthread_mutex_lock(&rt->build_lock);
  tlm_status st = kernel_locked(rt, task, sched, out, err, errcap);
  pthread_mutex_unlock(&rt->build_lock);
  return st;
}

int tlm_engine_schedule(tlm_runtime *rt, const tlm_space *space, tlm_schedule *out) {
  if (rt->model) {
    if (tlm_lm_decode(rt->model, space, out, NULL) == TLM_OK && tlm_space_accepts(space, out))
      return 1;
    tlm_log(rt, TLM_LOG_WARN, "language model could not schedule a task; using the default rule");
  }
  tlm_space_default(space, out);
  return 0;
}

tlm_status tlm_engine_plan(tlm_runtime *rt, const tlm_task *task, const tlm_plan **out,
                           char *err, int errcap) {
  tlm_key key;
  tlm_key_shape(&key, task, &rt->target, rt->model ? rt->model->checksum : 0);
  pthread_rwlock_rdlock(&rt->map_lock);
  tlm_plan *plan = tlm_map_get(&rt->plans, &key);
  pthread_rwlock_unlock(&rt->map_lock);
  if (plan) {
    atomic_fetch_add_explicit(&rt->hits, 1, memory_order_relaxed);
    *out = plan;
    return TLM_OK;
  }
  pthread_mutex_lock(&rt->build_lock);
  tlm_status st = TLM_OK;
  pthread_rwlock_rdlock(&rt->map_lock);
  plan = tlm_map_get(&rt->plans, &key); /* built while we waited? */
  pthread_rwlock_unlock(&rt->map_lock);
  if (plan) {
    atomic_fetch_add(&rt->hits, 1);
    goto done;
  }
  atomic_fetch_add(&rt->misses, 1);
  plan = calloc(1, sizeof *plan);
  if (!plan) {
    snprintf(err, (size_t)errcap, "out of memory");
    st = TLM_ERR_OUT_OF_MEMORY;
    goto done;
  }
  double t0 = now_ms();
  tlm_space space;
  if (tlm_space_init(&space, task, &rt->target)) {
    snprintf(err, (size_t)errcap, "operator kind %d has no schedule space", task->kind);
    st = TLM_ERR_UNSUPPORTED;
    free(plan);
    plan = NULL;
    goto done;
  }
  plan->by_model = tlm_engine_schedule(rt, &space, &plan->sched);
  plan->schedule_ms = now_ms() - t0;
  atomic_fetch_add(&rt->schedules, 1);
  atomic_add_double(&rt->schedule_ms, plan->schedule_ms);
  st = kernel_locked(rt, task, &plan->sched, &plan->kernel, err, errcap);
  if (st != TLM_OK) {
    free(plan);
    plan = NULL;
    goto done;
  }
  if (rt->cfg.verbose >= TLM_LOG_INFO) {
    char ts[160], ss[512];
    tlm_log(rt, TLM_LOG_INFO, "create matmul %s schedule(%s) [%s] schedule %.3f ms compile %.2f ms",
            tlm_task_str(task, ts, sizeof ts), plan->by_model ? "lm" : "rule",
            tlm_schedule_str(&space, &plan->sched, ss, sizeof ss),
            plan->schedule_ms, plan->kernel->compile_ms);
  }
  pthread_rwlock_wrlock(&rt->map_lock);
  int rc = tlm_map_put(&rt->plans, &key, plan);
  pthread_rwlock_unlock(&rt->map_lock);
  if (rc || remember(rt, plan)) {
    snprintf(err, (size_t)errcap, "out of memory");
    st = TLM_ERR_OUT_OF_MEMORY;
    if (rc) free(plan);
    plan = NULL;
  }
done:
  pthread_mutex_unlock(&rt->build_lock);
  *out = plan;
  return st;
}

typedef struct exec_ctx {
  const tlm_kernel *k;
  const tlm_mm_args *args;
  float **scratch;
} exec_ctx;

static void exec_chunk(void *ctx, int64_t begin, int64_t end, int tid) {
  exec_ctx *e = ctx;
  e->k->fn(e->args, begin, end, e->scratch ? e->scratch[tid] : NULL);
}

tlm_status tlm_engine_exec(tlm_runtime *rt, const tlm_kernel *k, const tlm_task *task,
                           const tlm_mm_args *args, char *err, int errcap) {
  int64_t n = ln_parallel_count(&k->nest, task);
  pthread_mutex_lock(&rt->exec_lock);
  if (k->scratch_bytes > rt->scratch_bytes) {
    int threads = tlm_pool_threads(rt->pool);
    size_t bytes = ((size_t)k->scratch_bytes + 63) & ~(size_t)63;
    for (int t = 0; t < threads; t++) {
      float *p = aligned_alloc(64, bytes);
      if (!p) {
        pthread_mutex_unlock(&rt->exec_lock);
        snprintf(err, (size_t)errcap, "out of memory for %zu bytes of scratch", bytes);
        return TLM_ERR_OUT_OF_MEMORY;
      }
      free(rt->scratch[t]);
      rt->scratch[t] = p;
    }
    rt->scratch_bytes = (int64_t)bytes;
  }
  exec_ctx e = {k, args, rt->scratch};
  tlm_pool_run(rt->pool, n, exec_chunk, &e);
  pthread_mutex_unlock(&rt->exec_lock);
  return TLM_OK;
}

tlm_status tlm_engine_ir(tlm_runtime *rt, const tlm_task *task, const tlm_schedule *sched,
                         int optimize, char **ir, char *err, int errcap) {
  *ir = NULL;
  tlm_key key;
  tlm_key_schedule(&key, task, &rt->target, sched);
  char name[48], hex[33];
  snprintf(name, sizeof name, "tlm_mm_%s", tlm_key_hex(&key, hex));
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMModuleRef mod = NULL;
  ln_nest nest;
  tlm_status st = make_module(rt, task, sched, ctx, name, optimize, &nest, &mod, err, errcap);
  if (st == TLM_OK) {
    char *s = LLVMPrintModuleToString(mod);
    *ir = strdup(s);
    LLVMDisposeMessage(s);
    LLVMDisposeModule(mod);
    if (!*ir) st = TLM_ERR_OUT_OF_MEMORY;
  }
  LLVMContextDispose(ctx);
  return st;
}
