/* engine.c - the dispatcher: task -> plan (schedule + kernel) -> run.
 *
 * Two cache levels: shape key -> plan (decisions), schedule key -> kernel
 * (M and the strides are run-time arguments, so many shapes share one
 * kernel; the kernels are entries of cache/table.h's kind-agnostic table,
 * which keeps their states, claims and CLOCK ring). Both levels are single
 * flight: the first caller of a missing key
 * builds it, the others wait for it. Lookups take the map's read lock;
 * every change takes the write lock. Eviction (with a capacity) takes the
 * write lock and then the execution lock, and the hit path takes the
 * execution lock before it drops the read lock, so no kernel is freed
 * while it may still run. */
#define _GNU_SOURCE /* SCHED_IDLE */
#include "engine.h"

#include <llvm-c/Core.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "../cache/disk.h"
#include "../cache/key.h"
#include "../generic/generic.h"
#include "../jit/build.h"
#include "../runtime/status.h"
#include "../runtime/clock.h"
#include "../runtime/family.h"

/* LLVM pass pipelines (tlm_config.passes, TLM_PASSES). TLM_PASSES_FAST,
 * the default: the generated code is already tiled, unrolled and
 * vectorized, so it needs SROA (accumulators into registers), CSE,
 * combining, CFG cleanup and hoisting; measured on GPT-2 layer kernels it
 * compiles 30-40% faster than default<O1> at the same GFLOPS. Loop
 * strength reduction (taken out of the code generator,
 * tlm_jit_llvm_options) runs where the addressing needs it: convolutions
 * with vectors along the output pixels (NCHW: without LSR 0.37-0.55x on
 * the held-out 1x1 layers) or along groups (depthwise: 5-20% slower
 * without it, except where the code generator steps its own pointers per
 * kernel row, tlm_jit_conv_strength_reduced: the same speed and 5-8 ms
 * less compile, 3x3 depthwise on the Zen 3), with fewer than 8
 * input channels per group (the RGB stems: 0.42-0.75x), or with a channel
 * tail (a masked tile version: 0.65-0.75x at 36 and 40 channels);
 * pooling; attention. Matmul, row and channels-last dense convolution
 * kernels in whole channel tiles skip it: a third of a matmul's object
 * emission and a fifth of a 3x3 convolution's, no GFLOPS lost
 * (docs/design.md, "Compile time"). Only these fixed texts reach LLVM (it
 * aborts on some malformed pipelines). */
static int conv_needs_lsr(const tlm_task *task, const tlm_schedule *sched) {
  if (tlm_jit_conv_strength_reduced(task, sched)) return 0;
  if (sched->v[CV_AXIS] != 0 || task->u.conv.ICg < 8) return 1;
  int64_t c_t, w_t, c_ext;
  tlm_conv_tile_dims(task, sched->v, &c_t, &w_t, &c_ext);
  return c_t <= 0 || c_ext % c_t != 0;
}

#define FAST_PASSES                                                                  \
  "function(sroa,early-cse,instcombine<no-verify-fixpoint>,simplifycfg,"             \
  "loop-mssa(licm),instcombine<no-verify-fixpoint>)"
/* matmul kernels skip the second instcombine: 0.3-0.6 ms of a 16 ms compile,
 * the same GFLOPS natively and under AVX2 (1x768, 32x768, 128x768,
 * 512x768:768x3072, 37x61:61x131; tlm run --compile-repeats, three
 * alternations, Zen 5 VM); row kernels lost 1-1.5% without it
 * (layernorm, rmsnorm 512x768) and keep it */
#define FAST_PASSES_MATMUL                                                           \
  "function(sroa,early-cse,instcombine<no-verify-fixpoint>,simplifycfg,"             \
  "loop-mssa(licm))"
static const char *pipeline(const tlm_runtime *rt, const tlm_task *task,
                            const tlm_schedule *sched) {
  static const char *const texts[2][4] = {
      {FAST_PASSES, "default<O1>", "default<O2>", "default<O3>"},
      {FAST_PASSES "," TLM_PIPELINE_LSR, "default<O1>," TLM_PIPELINE_LSR,
       "default<O2>," TLM_PIPELINE_LSR, "default<O3>," TLM_PIPELINE_LSR}};
  int p = rt->target.passes & ~TLM_PASSES_CODEGEN_LSR;
  int lsr = !(rt->target.passes & TLM_PASSES_CODEGEN_LSR) &&
            ((task->kind == TLM_OP_CONV && conv_needs_lsr(task, sched)) ||
             task->kind == TLM_OP_POOL || task->kind == TLM_OP_ATTENTION);
  if (p == 0 && !lsr && task->kind == TLM_OP_MATMUL) return FAST_PASSES_MATMUL;
  return texts[lsr][p >= 0 && p < 4 ? p : 0];
}

static double now_ms(void) { return tlm_clock_ms(); }

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

/* ---- per-thread last error ------------------------------------------------------- */

static _Thread_local struct {
  const tlm_runtime *rt;
  char msg[TLM_ERRMSG];
} tls_error;

tlm_status tlm_set_error(const tlm_runtime *rt, tlm_status st, const char *msg) {
  tls_error.rt = rt;
  snprintf(tls_error.msg, sizeof tls_error.msg, "%s: %s", tlm_status_text(st), msg);
  if (rt) tlm_log(rt, TLM_LOG_ERROR, "%s", tls_error.msg);
  return st;
}

const char *tlm_error_message(const tlm_runtime *rt) {
  return tls_error.rt == rt ? tls_error.msg : "";
}

void tlm_error_clear(const tlm_runtime *rt, int forget) {
  if (tls_error.rt != rt) return;
  if (forget)
    tls_error.rt = NULL;
  else
    tls_error.msg[0] = 0;
}

/* ---- waiting for builds ---------------------------------------------------------- */

static void notify(tlm_runtime *rt) {
  pthread_mutex_lock(&rt->state_mu);
  atomic_fetch_add(&rt->build_gen, 1);
  pthread_cond_broadcast(&rt->state_cv);
  pthread_mutex_unlock(&rt->state_mu);
}

/* waits until some entry changed state after generation g was read */
static void wait_change(tlm_runtime *rt, uint64_t g) {
  pthread_mutex_lock(&rt->state_mu);
  while (atomic_load(&rt->build_gen) == g) pthread_cond_wait(&rt->state_cv, &rt->state_mu);
  pthread_mutex_unlock(&rt->state_mu);
}

static int push(void ***list, size_t *n, size_t *cap, void *p) {
  if (*n == *cap) {
    size_t c = *cap ? *cap * 2 : 64;
    void **nl = realloc(*list, c * sizeof *nl);
    if (!nl) return -1;
    *list = nl;
    *cap = c;
  }
  (*list)[(*n)++] = p;
  return 0;
}

/* ---- building kernels ----------------------------------------------------------------- */

static tlm_jit_request jit_request(const tlm_runtime *rt, const tlm_task *task,
                                   const tlm_schedule *sched, ln_nest *nest, const char *name) {
  return (tlm_jit_request){.task = task,
                           .sched = sched,
                           .nest = nest,
                           .fma_chains = rt->target.fma_chains,
                           .name = name,
                           .pipeline = pipeline(rt, task, sched)};
}

static void kernel_name(const tlm_key *key, char *buf, size_t cap) {
  char hex[33];
  snprintf(buf, cap, "tlm_mm_%s", tlm_key_hex(key, hex));
}

/* A kernel's object code from the disk cache, verified (tlm_disk_load_kernel:
 * metadata, size, checksum) and naming the symbol `name` (two whole
 * entries swapped would pass the rest). 0 with *obj malloc'd, else -1. */
static int disk_object(tlm_runtime *rt, const tlm_key *key, const char *name, void **obj,
                       size_t *len) {
  char sym[64];
  *obj = NULL;
  if (tlm_disk_load_kernel(rt->disk, key, obj, len, sym, sizeof sym) == 0 && !strcmp(sym, name))
    return 0;
  free(*obj);
  *obj = NULL;
  return -1;
}

/* The builder's part: object code from disk or compiled now, linked. */
/* cached 0: a private kernel (a tuning candidate) that neither comes from
 * nor goes to the disk cache */
/* The schedule that names a family's tier-0 kernel (generic/): no point
 * of any space takes -1, so it is no schedule a space accepts and its key
 * is no compiled kernel's. */
static void generic_sched(tlm_schedule *s) {
  memset(s, 0, sizeof *s);
  s->v[0] = -1;
}

static int is_generic_sched(const tlm_schedule *s) { return s->v[0] == -1; }

/* the operator families with a tier-0 kernel */
static int has_generic(const tlm_task *t) {
  return t->kind == TLM_OP_CONV || t->kind == TLM_OP_MATMUL || t->kind == TLM_OP_POOL;
}

/* whether a new shape with no sibling runs on its family's tier-0 kernel
 * (tlm_config.tier0): convolutions and poolings by default, whose kernels
 * are one per layer (channels and window are compiled in), so a network's
 * first pass would otherwise compile before nearly every layer; matmuls
 * only when asked, as their first kernel serves every later shape of its
 * epilogue as a sibling and the unpacked tier-0 matmul runs at a fraction
 * of it
 * (vision cold, MobileNet: 0.45x oneDNN with tier-0 convolutions, 0.29x
 * with both; docs/design.md) */
static int uses_generic(const tlm_runtime *rt, const tlm_task *t) {
  int tier = rt->cfg.tier0;
  if (tier < 0 || !has_generic(t)) return 0;
  return t->kind != TLM_OP_MATMUL || tier >= 1;
}

static tlm_status build_kernel(tlm_runtime *rt, tlm_kernel *k, int cached, char *err,
                               int errcap) {
  double t0 = now_ms();
  if (is_generic_sched(&k->sched)) {
    if (!has_generic(&k->task)) {
      snprintf(err, (size_t)errcap, "no generic kernel for operator kind %d", (int)k->task.kind);
      return TLM_ERR_INTERNAL;
    }
    k->generic = 1;
    k->fn = k->task.kind == TLM_OP_CONV   ? (void *)tlm_generic_conv(rt->target.isa)
            : k->task.kind == TLM_OP_POOL ? (void *)tlm_generic_pool(rt->target.isa)
                                          : (void *)tlm_generic_matmul(rt->target.isa);
    k->scratch_bytes = 0;
    k->code_bytes = 0;
    k->from_disk = 0;
    k->compile_ms = now_ms() - t0;
    return TLM_OK;
  }
  if (k->task.kind == TLM_OP_MATMUL && ln_lower_matmul(&k->task, &k->sched, &k->nest)) {
    snprintf(err, (size_t)errcap, "schedule does not lower to a loop nest");
    return TLM_ERR_INTERNAL;
  }
  k->scratch_bytes = tlm_scratch_bytes(&k->task, &k->sched);
  void *obj = NULL;
  size_t len = 0;
  void *fn = NULL;
  if (cached && rt->disk && disk_object(rt, &k->entry.key, k->name, &obj, &len) == 0 &&
      tlm_jit_load(rt->jit, obj, len, k->name, &fn, &k->code, err, errcap) == 0) {
    free(obj);
    k->from_disk = 1;
    k->code_bytes = len;
    k->fn = fn;
    k->compile_ms = now_ms() - t0;
    atomic_fetch_add(&rt->disk_kernel_hits, 1);
    atomic_add_double(&rt->disk_load_ms, k->compile_ms);
    return TLM_OK;
  }
  free(obj);
  tlm_jit_request req = jit_request(rt, &k->task, &k->sched, &k->nest, k->name);
  tlm_jit_build_times bt;
  tlm_status st = tlm_jit_build(rt->jit, &req, &obj, &len, NULL, 0, &bt, err, errcap);
  double t_ir = bt.ir_ms;
  tlm_jit_times jt = bt.jit;
  double t_link = now_ms();
  if (st == TLM_OK && tlm_jit_load(rt->jit, obj, len, k->name, &fn, &k->code, err, errcap))
    st = TLM_ERR_JIT;
  t_link = now_ms() - t_link;
  if (st != TLM_OK) {
    free(obj);
    if (!tlm_jit_cancel_requested()) atomic_fetch_add(&rt->compile_fail, 1);
    return st;
  }
  k->fn = fn;
  k->code_bytes = len;
  k->from_disk = 0;
  k->compile_ms = now_ms() - t0;
  atomic_fetch_add(&rt->compiles, 1);
  atomic_add_double(&rt->compile_ms, k->compile_ms);
  atomic_add_double(&rt->compile_ir_ms, t_ir);
  atomic_add_double(&rt->compile_opt_ms, jt.tm_ms + jt.opt_ms);
  atomic_add_double(&rt->compile_emit_ms, jt.emit_ms);
  atomic_add_double(&rt->compile_link_ms, t_link);
  if (cached && rt->disk) {
    char problem[160], decisions[512];
    tlm_space sp;
    tlm_space_init(&sp, &k->task, &rt->target);
    tlm_task_str(&k->task, problem, sizeof problem);
    tlm_schedule_str(&sp, &k->sched, decisions, sizeof decisions);
    tlm_disk_store_kernel(rt->disk, &k->entry.key, obj, len, k->name, problem, decisions);
  }
  free(obj);
  return TLM_OK;
}

static void free_kernel_entry(tlm_table_entry *e, void *ctx) {
  tlm_runtime *rt = ctx;
  free(e); /* the entry is the kernel's first member */
  atomic_fetch_add(&rt->epoch, 1);
}

/* Evicted kernels that no plan points to are freed whole (their struct,
 * key and loop nest), so memory stays bounded over any number of distinct
 * kernels under a capacity: an evicted kernel that a plan still names
 * stays as the rebuild's record. Caller holds the map's write lock and
 * the execution lock. Nothing else keeps a kernel pointer across an unlock
 * (get_kernel hands its kernel to the caller's plan under the lock;
 * nearest_sibling returns copies; the background build's plan is
 * rt->bg_plan, marked here too). */
static void free_unreferenced_locked(tlm_runtime *rt, const tlm_kernel *keep_k) {
  if (tlm_table_count(&rt->kernels, TLM_ENTRY_EVICTED) == 0) return;
  tlm_table_clear_marks(&rt->kernels);
  for (size_t i = 0; i < rt->nplans; i++)
    if (rt->plan_list[i]->kernel) rt->plan_list[i]->kernel->entry.mark = 1;
  for (int t = 0; t < 2; t++) /* a background build's */
    if (rt->bg_plan[t].kernel) rt->bg_plan[t].kernel->entry.mark = 1;
  tlm_table_sweep(&rt->kernels, keep_k ? &keep_k->entry : NULL, free_kernel_entry, rt);
}

/* keep_k: the kernel the caller just built, freed at the next eviction at
 * the earliest (the caller still reads it) */
static void evict_locked(tlm_runtime *rt, const tlm_kernel *keep_k) {
  if (!tlm_table_over(&rt->kernels)) return;
  pthread_mutex_lock(&rt->exec_lock); /* nothing runs while code is freed */
  tlm_table_entry *e;
  while ((e = tlm_table_victim(&rt->kernels)) != NULL) {
    tlm_kernel *k = (tlm_kernel *)e;
    tlm_jit_unload(rt->jit, k->code);
    k->code = NULL;
    k->fn = NULL;
    tlm_table_evicted(&rt->kernels, e);
    atomic_fetch_add(&rt->evictions, 1);
    atomic_fetch_add(&rt->epoch, 1);
  }
  /* plans: at most 16 per kernel of capacity (and 1024) stay */
  size_t cap = rt->kernels.capacity;
  size_t plan_cap = cap * 16 > 1024 ? cap * 16 : 1024;
  if (rt->nplans > plan_cap) {
    size_t keep = 0;
    for (size_t i = 0; i < rt->nplans; i++) {
      tlm_plan *p = rt->plan_list[i];
      int ready = atomic_load(&p->state) == TLM_ENTRY_READY;
      if (ready && !atomic_exchange(&p->used, 0) && rt->nplans - (i - keep) > plan_cap / 2) {
        tlm_map_remove(&rt->plans, &p->key);
        free(p);
        atomic_fetch_add(&rt->epoch, 1);
      } else {
        rt->plan_list[keep++] = p;
      }
    }
    rt->nplans = keep;
  }
  free_unreferenced_locked(rt, keep_k);
  pthread_mutex_unlock(&rt->exec_lock);
}

/* What get_kernel did, read under the lock (the kernel may be gone by the
 * time its caller looks at it, unless a plan holds it) */
typedef struct kernel_info {
  int built, from_disk;
  double compile_ms;
} kernel_info;

/* A READY kernel for (task, sched), single flight. *out is set under the
 * map's write or read lock, so a plan's kernel field passed as out keeps
 * the kernel from being freed (free_unreferenced_locked). */
static tlm_status get_kernel(tlm_runtime *rt, const tlm_task *task, const tlm_schedule *sched,
                             tlm_kernel **out, kernel_info *info, char *err, int errcap) {
  if (info) memset(info, 0, sizeof *info);
  tlm_key key;
  tlm_key_schedule(&key, task, &rt->target, sched);
  for (;;) {
    pthread_rwlock_wrlock(&rt->map_lock);
    tlm_kernel *k = (tlm_kernel *)tlm_table_get(&rt->kernels, &key);
    int owner = 0;
    if (!k) {
      k = calloc(1, sizeof *k);
      if (k) k->entry.key = key;
      if (!k || tlm_table_insert(&rt->kernels, &k->entry)) {
        pthread_rwlock_unlock(&rt->map_lock);
        free(k);
        snprintf(err, (size_t)errcap, "out of memory");
        return TLM_ERR_OUT_OF_MEMORY;
      }
      k->sched = *sched;
      k->task = *task;
      kernel_name(&key, k->name, sizeof k->name);
      owner = 1;
    } else if (tlm_table_claim(&k->entry)) {
      owner = 1;
    } else if (atomic_load(&k->entry.state) == TLM_ENTRY_READY) {
      atomic_store(&k->entry.used, 1);
      *out = k;
      pthread_rwlock_unlock(&rt->map_lock);
      return TLM_OK;
    }
    uint64_t g = atomic_load(&rt->build_gen);
    pthread_rwlock_unlock(&rt->map_lock);
    if (!owner) {
      wait_change(rt, g);
      continue;
    }
    tlm_status st = build_kernel(rt, k, 1, err, errcap);
    if (info) {
      info->built = st == TLM_OK;
      info->from_disk = k->from_disk;
      info->compile_ms = k->compile_ms;
    }
    pthread_rwlock_wrlock(&rt->map_lock);
    int ready = 0;
    if (st == TLM_OK) {
      tlm_table_ready(&rt->kernels, &k->entry, k->code_bytes);
      /* handed out before eviction runs: *out is the caller's plan's
       * kernel field, which keeps k from being freed */
      *out = k;
      evict_locked(rt, k);
      /* eviction may have taken it right away with a capacity of 0
       * kernels left; loop to rebuild in that case */
      ready = atomic_load(&k->entry.state) == TLM_ENTRY_READY;
    } else {
      tlm_table_failed(&k->entry);
    }
    pthread_rwlock_unlock(&rt->map_lock);
    notify(rt);
    if (st != TLM_OK) return st;
    if (ready) return TLM_OK;
  }
}

tlm_status tlm_engine_kernel(tlm_runtime *rt, const tlm_task *task, const tlm_schedule *sched,
                             tlm_kernel **out, char *err, int errcap) {
  return get_kernel(rt, task, sched, out, NULL, err, errcap);
}

/* ---- scheduling ----------------------------------------------------------------------- */

/* how far apart two tasks of one kernel family are in their run-time
 * extents (the family's extent_distance) */
static double extent_distance(const tlm_task *a, const tlm_task *b) {
  const tlm_family *f = tlm_family_of(a);
  return f ? f->extent_distance(a, b) : 0.0;
}

/* A kernel this runtime already has for the same operator at other
 * extents (the kernel takes them at run time) whose schedule the task's
 * space accepts, the nearest in extents; FAILED ones never, and only READY
 * ones when `ready` (a kernel that can run now). With `any_fit`, a
 * matmul's nearest kernel of the family whose schedule the space does not
 * offer when none it offers exists: a matmul kernel computes any M, N and
 * K (its tiles, K blocks and packing only take their tails), so a first
 * call can run on it while its own kernel is built (test_matmul_random
 * runs random schedules on other extents). Returns 1 with copies of its
 * schedule and schedule key (kernels can be freed once unlocked: look it
 * up again by key under the lock to use it), 0 when none. */
static int nearest_sibling(tlm_runtime *rt, const tlm_space *space, int ready, int any_fit,
                           tlm_schedule *sched, tlm_key *key) {
  tlm_schedule none;
  memset(&none, 0, sizeof none);
  tlm_key fam, kf;
  tlm_key_schedule(&fam, &space->task, &rt->target, &none);
  tlm_kernel *best = NULL, *other = NULL;
  double best_d = 0, other_d = 0;
  any_fit = any_fit && space->task.kind == TLM_OP_MATMUL;
  pthread_rwlock_rdlock(&rt->map_lock);
  for (size_t i = 0; i < rt->kernels.n; i++) {
    tlm_kernel *k = (tlm_kernel *)rt->kernels.list[i];
    int state = atomic_load(&k->entry.state);
    if (state == TLM_ENTRY_FAILED || (ready && state != TLM_ENTRY_READY) ||
        is_generic_sched(&k->sched))
      continue;
    tlm_key_schedule(&kf, &k->task, &rt->target, &none);
    if (!tlm_key_equal(&fam, &kf)) continue;
    double d = extent_distance(&space->task, &k->task);
    if (!tlm_space_accepts(space, &k->sched)) {
      if (any_fit && (!other || d < other_d)) other = k, other_d = d;
      continue;
    }
    if (!best || d < best_d) best = k, best_d = d;
  }
  if (!best) best = other;
  if (best) {
    if (sched) *sched = best->sched;
    if (key) *key = best->entry.key;
  }
  pthread_rwlock_unlock(&rt->map_lock);
  return best != NULL;
}

/* what decides a shape's schedule, for the plan keys: the model (by its
 * file checksum) and whether kernel reuse anchors its decoding */
static uint64_t scheduler_id(const tlm_runtime *rt) {
  /* forced schedules (TLM_SCHEDULE_OVERRIDE): by the text's hash, made
   * once at creation (this runs on every call's key) */
  uint64_t forced = rt->sched_override_id;
  if (!rt->model) return forced;
  uint64_t id = rt->model->checksum ^ forced ^
                (rt->cfg.disable_kernel_reuse ? 0x9e3779b97f4a7c15ull : 0);
  if (rt->model->sentence_margin > 0) { /* selective decoding, by its margin's bits */
    uint64_t bits;
    double margin = rt->model->sentence_margin;
    memcpy(&bits, &margin, sizeof bits);
    id ^= (bits * 0xff51afd7ed558ccdull) | 1;
  }
  return id;
}

uint64_t tlm_engine_scheduler_id(const tlm_runtime *rt) { return scheduler_id(rt); }

static int schedule_chosen(tlm_runtime *rt, const tlm_space *space, tlm_schedule *out);

/* TLM_SCHEDULE_OVERRIDE: entries "TEXT=DECISIONS" separated by ';'; the
 * first entry whose TEXT occurs in the task's descriptor (tlm_task_str, as
 * TLM_VERBOSE=3 prints it) and whose DECISIONS (tlm_schedule_str's form,
 * every point) the space accepts replaces *out. Returns 1 when one did. */
static int override_schedule(tlm_runtime *rt, const tlm_space *space, tlm_schedule *out) {
  if (!rt->sched_override) return 0;
  char desc[512];
  tlm_task_str(&space->task, desc, sizeof desc);
  for (const char *e = rt->sched_override; *e;) {
    const char *end = strchr(e, ';');
    size_t len = end ? (size_t)(end - e) : strlen(e);
    char item[1024];
    if (len > 0 && len < sizeof item) {
      memcpy(item, e, len);
      item[len] = 0;
      char *eq = strchr(item, '=');
      if (eq && eq > item) {
        *eq = 0;
        if (strstr(desc, item)) {
          tlm_schedule forced;
          char perr[256];
          if (tlm_schedule_parse(space, eq + 1, &forced, perr, sizeof perr) == 0 &&
              tlm_space_accepts(space, &forced)) {
            *out = forced;
            tlm_log(rt, TLM_LOG_INFO, "TLM_SCHEDULE_OVERRIDE: schedule of %s forced", desc);
            return 1;
          }
          tlm_log(rt, TLM_LOG_WARN,
                  "TLM_SCHEDULE_OVERRIDE: '%s' matches %s, but its decisions are not a schedule "
                  "of that task's space; ignored",
                  item, desc);
        }
      }
    }
    if (!end) break;
    e = end + 1;
  }
  return 0;
}

int tlm_engine_schedule(tlm_runtime *rt, const tlm_space *space, tlm_schedule *out) {
  int by_model = schedule_chosen(rt, space, out);
  if (override_schedule(rt, space, out)) return 0;
  return by_model;
}

static int schedule_chosen(tlm_runtime *rt, const tlm_space *space, tlm_schedule *out) {
  /* the tensor language (vocabulary v5) has words for every operator */
  int covered = rt->model && tlm_lm_covers_task(rt->model, &space->task, &space->target);
  if (rt->model && !covered) {
    if (space->task.kind == TLM_OP_MATMUL && space->task.u.mm.b_const)
      tlm_log(rt, TLM_LOG_INFO, "matmul of a constant B (one kernel for every M; the model's "
              "sentences have none): scheduled by the rule");
    else
      tlm_log(rt, TLM_LOG_INFO,
              "model trained against rule version %u; this operator family's rule or kernels "
              "changed in version %d, or the model has no words for it: scheduled by the rule",
              rt->model->rule_version, tlm_rule_family_version(&space->task, &space->target));
  }
  if (covered && space->task.kind >= TLM_OP_MATMUL && space->task.kind <= TLM_OP_ELTWISE) {
    tlm_schedule sibling;
    int has_sibling =
        !rt->cfg.disable_kernel_reuse && nearest_sibling(rt, space, 0, 0, &sibling, NULL);
    if (tlm_lm_decode_anchored(rt->model, space, has_sibling ? &sibling : NULL, rt->model->reuse_bonus,
                               out, NULL) == TLM_OK &&
        tlm_space_accepts(space, out)) {
      atomic_fetch_add(&rt->decodes, 1);
      return 1;
    }
    tlm_log(rt, TLM_LOG_WARN, "language model could not schedule a task; using the default rule");
  }
  tlm_space_default(space, out);
  atomic_fetch_add(&rt->rule_schedules, 1);
  return 0;
}

tlm_status tlm_engine_store_measured_plan(tlm_runtime *rt, const tlm_task *task,
                                          const tlm_schedule *sched, double kernel_ns, char *err,
                                          int errcap) {
  tlm_space space;
  if (tlm_space_init(&space, task, &rt->target) || !tlm_space_accepts(&space, sched) ||
      !(kernel_ns > 0)) {
    snprintf(err, (size_t)errcap, "not a schedule of this task, or no measured time");
    return TLM_ERR_INVALID_ARGUMENT;
  }
  if (!rt->disk) {
    snprintf(err, (size_t)errcap, "no disk cache (TLM_CACHE_DIR=none?): nowhere to keep the plan");
    return TLM_ERR_UNSUPPORTED;
  }
  tlm_key key;
  tlm_key_shape(&key, task, &rt->target, scheduler_id(rt));
  char ts[160];
  tlm_task_str(task, ts, sizeof ts);
  if (tlm_disk_store_plan(rt->disk, &key, sched, ts, kernel_ns)) {
    snprintf(err, (size_t)errcap, "cannot write the plan under %s", tlm_disk_dir(rt->disk));
    return TLM_ERR_IO;
  }
  return TLM_OK;
}

/* 1 when the disk cache holds the shape's plan and that plan's kernel is in
 * memory or loads from disk (verified as build_kernel will: its metadata,
 * size, checksum and symbol; a damaged entry would make the caller compile): then
 * the builder loads both in well under a millisecond (tlm bench overhead,
 * disk_warm_start_ms), and a background build would only run another
 * shape's kernel meanwhile. build_plan reads both again. */
static int plan_on_disk(tlm_runtime *rt, const tlm_key *key, const tlm_task *task,
                        const tlm_space *space) {
  tlm_schedule s;
  if (!rt->disk || tlm_disk_load_plan(rt->disk, key, &s, NULL) || !tlm_space_accepts(space, &s))
    return 0;
  tlm_key kk;
  tlm_key_schedule(&kk, task, &rt->target, &s);
  pthread_rwlock_rdlock(&rt->map_lock);
  tlm_kernel *k = (tlm_kernel *)tlm_table_get(&rt->kernels, &kk);
  int in_memory = k && atomic_load(&k->entry.state) == TLM_ENTRY_READY;
  pthread_rwlock_unlock(&rt->map_lock);
  if (in_memory) return 1;
  void *obj = NULL;
  size_t len = 0;
  char name[48];
  kernel_name(&kk, name, sizeof name);
  int ok = disk_object(rt, &kk, name, &obj, &len) == 0;
  free(obj);
  return ok;
}

/* The builder's part of a plan: decisions from disk, the model or the rule. */
static tlm_status build_plan(tlm_runtime *rt, tlm_plan *p, const tlm_task *task, char *err,
                             int errcap) {
  double t0 = now_ms();
  tlm_space space;
  if (tlm_space_init(&space, task, &rt->target)) {
    snprintf(err, (size_t)errcap, "operator kind %d has no schedule space", task->kind);
    return TLM_ERR_UNSUPPORTED;
  }
  p->from_disk = 0;
  int measured = 0;
  p->measured = 0;
  if (rt->disk && tlm_disk_load_plan(rt->disk, &p->key, &p->sched, &measured) == 0 &&
      tlm_space_accepts(&space, &p->sched)) {
    p->from_disk = 1;
    p->measured = measured;
    p->by_model = rt->model != NULL;
    atomic_fetch_add(&rt->disk_plan_hits, 1);
  } else {
    p->by_model = tlm_engine_schedule(rt, &space, &p->sched);
  }
  p->schedule_ms = now_ms() - t0;
  atomic_add_double(&rt->schedule_ms, p->schedule_ms);
  kernel_info ki;
  tlm_status st = get_kernel(rt, task, &p->sched, &p->kernel, &ki, err, errcap);
  if (st != TLM_OK) return st;
  char ts[160], ss[512];
  if (rt->disk && !p->from_disk) {
    tlm_task_str(task, ts, sizeof ts);
    tlm_disk_store_plan(rt->disk, &p->key, &p->sched, ts, 0);
  }
  if (rt->cfg.verbose >= TLM_LOG_INFO)
    tlm_log(rt, TLM_LOG_INFO,
            "new plan %s schedule(%s%s) [%s] schedule %.3f ms kernel %s %.2f ms",
            tlm_task_str(task, ts, sizeof ts), p->by_model ? "lm" : "rule",
            p->from_disk ? ", disk" : "", tlm_schedule_str(&space, &p->sched, ss, sizeof ss),
            p->schedule_ms,
            !ki.built ? "reused" : ki.from_disk ? "loaded" : "compiled",
            ki.built ? ki.compile_ms : 0.0);
  return TLM_OK;
}

/* ---- background builds (cfg.async_compile) ---------------------------------------------- */

#define TUNE_MAX_BUFS 8
/* Most bytes of operand copies all queued and running tuning jobs hold
 * together: one job's largest (api/tlm.c TUNE_COPY_MAX). A shape whose
 * copies would pass it is not tuned (as one over TUNE_COPY_MAX alone):
 * an application that never pauses queued a job per new shape and ran
 * none, 4 MB a shape without bound (a helper's reproducer: 56 -> 406 MB
 * of RSS in 80 shapes). */
#define TUNE_HELD_MAX ((size_t)256 << 20)
typedef struct tlm_bg_job {
  struct tlm_bg_job *next;
  tlm_task task;
  tlm_key key; /* the shape's plan key */
  int tune;    /* 0: build the shape's own kernel (async); 1: measured top-k */
  int urgent;  /* the shape runs on a tier-0 kernel meanwhile: before the
                  shapes that run on a compiled sibling when neither has
                  run long on its provisional kernel (bg_pick) */
  int rescue_only; /* a build the idle thread gave up starved (bg_cancel):
                      for the rescue thread while one runs */
  tlm_any_args args; /* tuning: into private copies of the operands */
  int nbufs;
  void *bufs[TUNE_MAX_BUFS];
  size_t sizes[TUNE_MAX_BUFS];
  int is_in[TUNE_MAX_BUFS], is_out[TUNE_MAX_BUFS];
} tlm_bg_job;

static void job_free(tlm_bg_job *j) {
  for (int i = 0; i < j->nbufs; i++) free(j->bufs[i]);
  free(j);
}

static int bg_tune(tlm_runtime *rt, tlm_bg_job *j);

/* With bg_mu held: 1 when a build (not a tuning job) is queued. */
static int bg_build_queued_locked(const tlm_runtime *rt) {
  for (const tlm_bg_job *q = rt->bg_head; q; q = q->next)
    if (!q->tune) return 1;
  return 0;
}

/* With bg_mu held: the workers spin at most the short budget while builds are
 * queued or running (the idle thread compiles only in CPU time the
 * application leaves idle, and a spinning worker's is not), the
 * runtime's own otherwise. Tuning jobs wait for pauses of 5 ms, longer
 * than any spin, so they leave it as it is. */
/* With bg_mu held: 1 while a build (not a tuning job) is queued or running. */
static int bg_building_locked(const tlm_runtime *rt) {
  return rt->bg_busy > rt->bg_busy_tune || bg_build_queued_locked(rt);
}

static void bg_spin_locked(tlm_runtime *rt) {
  int building = bg_building_locked(rt);
  int64_t spin = rt->spin_ns;
  if (building && spin > TLM_POOL_SPIN_SHORT_NS) spin = TLM_POOL_SPIN_SHORT_NS;
  tlm_pool_set_spin_ns(rt->pool, spin);
}

/* Builds the shape's own plan and puts its kernel in place of the
 * provisional one (if the plan is still there and still provisional). */
static int bg_build(tlm_runtime *rt, const tlm_bg_job *j, int t) {
  tlm_plan *tmp = &rt->bg_plan[t];
  /* tmp is the calling thread's rt->bg_plan[]: no plan of the map, but
   * eviction keeps its kernel until the swap below. Its kernel field is
   * written under the map's lock only (here, and by get_kernel). */
  pthread_rwlock_wrlock(&rt->map_lock);
  memset(tmp, 0, sizeof *tmp);
  tmp->key = j->key;
  pthread_rwlock_unlock(&rt->map_lock);
  char err[TLM_ERRMSG];
  tlm_status st = build_plan(rt, tmp, &j->task, err, sizeof err);
  if (st != TLM_OK) {
    /* the provisional kernel stays: correct, only not this shape's own */
    int cancelled = atomic_load(&rt->bg_cancel[t]);
    if (!cancelled)
      tlm_log(rt, TLM_LOG_WARN, "background build failed (%s): %s", tlm_status_text(st), err);
    pthread_rwlock_wrlock(&rt->map_lock);
    tmp->kernel = NULL;
    pthread_rwlock_unlock(&rt->map_lock);
    return cancelled;
  }
  pthread_rwlock_wrlock(&rt->map_lock);
  pthread_mutex_lock(&rt->exec_lock); /* tlm_engine_rerun reads plan->kernel under it */
  tlm_plan *p = tlm_map_get(&rt->plans, &j->key);
  tlm_kernel *nk = tmp->kernel;
  tmp->kernel = NULL;
  if (p && atomic_load(&p->state) == TLM_ENTRY_READY && p->provisional && nk) {
    /* nk may be EVICTED: the plan then rebuilds it on its next run */
    p->kernel = nk;
    p->sched = tmp->sched;
    p->by_model = tmp->by_model;
    p->from_disk = tmp->from_disk;
    p->schedule_ms = tmp->schedule_ms;
    p->provisional = 0;
    atomic_fetch_add(&rt->epoch, 1); /* reruns of the old kernel look again */
    atomic_fetch_add(&rt->upgrades, 1);
  }
  pthread_mutex_unlock(&rt->exec_lock);
  pthread_rwlock_unlock(&rt->map_lock);
  return 0;
}

/* Takes the next job off the queue: the build of the shape whose calls
 * have spent the most time on their provisional kernel (hot and slow: a
 * big layer on the tier-0 kernel, or on a sibling whose schedule was made
 * for other extents), the queue's order breaking ties (urgent ones first,
 * then first come first served); a tuning job only when no build is
 * queued, and never for the rescue thread (tuning waits for the
 * application's pauses: a rescue parked in one held every later build off
 * the cores while the application ran). MobileNet's pointwise layers
 * on the first pointwise kernel ran 1.4x slower than on their own, yet
 * queued behind nine depthwise builds (docs/design.md, "Which build
 * first"). NULL when stopping, or when no build is queued for the rescue
 * thread, which is then marked exited (bg_rescue = 2) under the same lock.
 * Takes the map's read lock before bg_mu, the order ensure_plan holds
 * them in. */
static tlm_bg_job *bg_pick(tlm_runtime *rt, int rescue, int *wait) {
  pthread_rwlock_rdlock(&rt->map_lock);
  pthread_mutex_lock(&rt->bg_mu);
  tlm_bg_job *best = NULL, *best_prev = NULL, *prev = NULL;
  uint64_t best_ns = 0;
  for (tlm_bg_job *q = rt->bg_head; q && !rt->bg_stop; prev = q, q = q->next) {
    if (q->tune) {
      if (!best && !rescue) best = q, best_prev = prev;
      continue;
    }
    if (!rescue && q->rescue_only && rt->bg_rescue == 1) continue;
    tlm_plan *p = tlm_map_get(&rt->plans, &q->key);
    uint64_t ns = p ? atomic_load_explicit(&p->provisional_ns, memory_order_relaxed) : 0;
    if (!best || best->tune || ns > best_ns) best = q, best_prev = prev, best_ns = ns;
  }
  if (best) {
    if (best_prev) best_prev->next = best->next;
    else rt->bg_head = best->next;
    if (rt->bg_tail == best) rt->bg_tail = best_prev;
    best->next = NULL;
    rt->bg_busy++; /* with the take, under bg_mu: tlm_engine_bg_wait sees one or the other */
    rt->bg_busy_tune += best->tune;
    if (!rescue) {
      rt->bg_idle_build = !best->tune;
      rt->bg_idle_since_ns = (uint64_t)tlm_clock_ns();
    }
  } else if (rescue && !rt->bg_stop && rt->bg_idle_build && atomic_load(&rt->bg_cancel[0])) {
    *wait = 1; /* the idle thread's build is on its way back to the queue */
  } else if (rescue) {
    rt->bg_rescue = 2;
    atomic_store(&rt->bg_rescue_running, 0);
  }
  pthread_mutex_unlock(&rt->bg_mu);
  pthread_rwlock_unlock(&rt->map_lock);
  return best;
}

/* Runs one job taken by bg_pick (t: 0 the idle thread, 1 the rescue),
 * then records the progress. A tuning job that gave way to a queued build
 * goes back to the end of the queue (its private operands as they were),
 * to start again once no build waits; so does a build the idle thread at
 * BG_NICE_LOW gave up starved (bg_cancel[0]), for the rescue thread. */
static void bg_run_job(tlm_runtime *rt, tlm_bg_job *j, int t) {
  int requeue = 0, tune = j->tune;
  if (tune) requeue = bg_tune(rt, j);
  else if (bg_build(rt, j, t)) requeue = j->rescue_only = 1; /* cancelled */
  pthread_mutex_lock(&rt->bg_mu);
  if (t == 0) {
    rt->bg_idle_build = 0;
    if (!rt->bg_stop) atomic_store(&rt->bg_cancel[0], 0);
  }
  if (requeue && !rt->bg_stop) {
    if (rt->bg_tail) rt->bg_tail->next = j;
    else rt->bg_head = j;
    rt->bg_tail = j;
    j = NULL;
  } else if (tune) {
    for (int i = 0; i < j->nbufs; i++) rt->bg_tune_bytes -= j->sizes[i];
  }
  pthread_mutex_unlock(&rt->bg_mu);
  if (j) job_free(j);
  pthread_mutex_lock(&rt->bg_mu);
  rt->bg_busy--;
  rt->bg_busy_tune -= tune;
  bg_spin_locked(rt);
  atomic_store(&rt->bg_progress_ns, (uint64_t)tlm_clock_ns());
  pthread_cond_broadcast(&rt->bg_cv); /* tlm_engine_bg_wait */
  pthread_mutex_unlock(&rt->bg_mu);
}

/* The background thread compiles in the CPU time the application leaves
 * idle: SCHED_IDLE (Linux), which any other thread preempts at once. At
 * nice 10 a compile on one of two cores made MobileNet's warm pass 1.8x
 * slower (each parallel kernel waited for the worker the compile held
 * off its core: EEVDF lets a running nice-10 thread finish its protected
 * slice), under SCHED_IDLE 0-10% (docs/design.md, "Which build first").
 * An unprivileged thread cannot leave SCHED_IDLE, so when the application
 * keeps every core busy and the queue makes no progress for
 * BG_RESCUE_MS, tlm_run or tlm_wait_background starts a rescue thread at
 * BG_NICE (bg_rescue_if_starved_locked) that works until no build is
 * queued. */
#define BG_NICE 10
#define BG_RESCUE_MS 1000
/* Where the idle thread cannot have SCHED_IDLE (no privilege to lift it
 * out again): nice 19 with a 100 us EEVDF slice (sched_setattr's
 * sched_runtime, Linux 6.12+; elsewhere nice 19 alone). Against nice 10,
 * MobileNet's cold pass as an unprivileged process 0.68 -> 0.80x oneDNN
 * natively and 0.66 -> 0.76x under AVX2 (medians of 8 alternated runs,
 * Zen 4): the woken kernel workers preempt it at once, as they do a
 * SCHED_IDLE thread. Its weight is a seventh of nice 10's, so a build it
 * holds when the cores turn busy would take that much longer: such a
 * build is cancelled at its next compile stage and handed to the rescue
 * thread (bg_rescue_if_starved_locked). */
#define BG_NICE_LOW 19
#define BG_SLICE_NS 100000

/* An application thread lifts the idle thread to SCHED_OTHER at BG_NICE
 * (before joining it in tlm_destroy, and when builds starve), so a build
 * it holds is not left on idle time; this needs the privilege to leave
 * SCHED_IDLE (root, CAP_SYS_NICE or RLIMIT_NICE), else nothing changes.
 * The thread goes back to SCHED_IDLE when it next finds the queue empty. */
static void bg_raise_idle(tlm_runtime *rt) {
#ifdef __linux__
  if (atomic_load(&rt->bg_idle_lowprio)) return; /* not SCHED_IDLE, and not to be lifted */
  int tid = atomic_load(&rt->bg_tid);
  struct sched_param sp = {0};
  if (tid > 0 && !atomic_load(&rt->bg_raised) && sched_setscheduler(tid, SCHED_OTHER, &sp) == 0) {
    setpriority(PRIO_PROCESS, (id_t)tid, BG_NICE);
    atomic_store(&rt->bg_raised, 1);
  }
#else
  (void)rt;
#endif
}

/* SCHED_IDLE only where an application thread can lift the thread out of
 * it again (bg_raise_idle: root, or RLIMIT_NICE allowing nice BG_NICE);
 * elsewhere nice BG_NICE, as a held build under SCHED_IDLE could wait for
 * minutes on busy cores (and tlm_destroy with it: 33 s measured). */
static void bg_set_idle(tlm_runtime *rt) {
#ifdef __linux__
  struct rlimit rl;
  int reversible = geteuid() == 0 ||
                   (getrlimit(RLIMIT_NICE, &rl) == 0 && rl.rlim_cur >= (rlim_t)(20 - BG_NICE));
  struct sched_param sp = {0};
  if (!reversible || sched_setscheduler(0, SCHED_IDLE, &sp) != 0) {
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), BG_NICE_LOW);
#ifdef SYS_sched_setattr
    struct { /* struct sched_attr, linux/sched/types.h (glibc 2.36 has no wrapper) */
      uint32_t size, policy;
      uint64_t flags;
      int32_t nice;
      uint32_t priority;
      uint64_t runtime, deadline, period;
    } at = {sizeof at, SCHED_OTHER, 0, BG_NICE_LOW, 0, BG_SLICE_NS, 0, 0};
    syscall(SYS_sched_setattr, 0, &at, 0); /* older kernels: the nice value alone */
#endif
    atomic_store(&rt->bg_idle_lowprio, 1);
  }
#else
  (void)rt;
#endif
}

/* With bg_mu held: waits on bg_cv for at most ms milliseconds (bg_cv
 * runs on CLOCK_MONOTONIC: tlm_engine_bg_init) */
static void bg_cv_wait_ms_locked(tlm_runtime *rt, long ms) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_nsec += ms * 1000000L;
  ts.tv_sec += ts.tv_nsec / 1000000000L;
  ts.tv_nsec %= 1000000000L;
  pthread_cond_timedwait(&rt->bg_cv, &rt->bg_mu, &ts);
}

static void *bg_main(void *arg) {
  tlm_runtime *rt = arg;
#ifdef __linux__
  atomic_store(&rt->bg_tid, (int)syscall(SYS_gettid));
#endif
  tlm_jit_set_cancel(&rt->bg_cancel[0]);
  bg_set_idle(rt);
  pthread_mutex_lock(&rt->bg_mu);
  for (;;) {
    if (!rt->bg_head && atomic_exchange(&rt->bg_raised, 0)) bg_set_idle(rt);
    while (!rt->bg_stop && !rt->bg_head) pthread_cond_wait(&rt->bg_cv, &rt->bg_mu);
    if (rt->bg_stop) break;
    pthread_mutex_unlock(&rt->bg_mu);
    tlm_bg_job *j = bg_pick(rt, 0, NULL);
    if (j) bg_run_job(rt, j, 0);
    pthread_mutex_lock(&rt->bg_mu);
    if (!j && !rt->bg_stop) bg_cv_wait_ms_locked(rt, 20); /* only jobs for the running rescue */
  }
  pthread_mutex_unlock(&rt->bg_mu);
  return NULL;
}

static void *bg_rescue_main(void *arg) {
  tlm_runtime *rt = arg;
#ifdef __linux__
  /* the creating application thread's policy, then a lower priority (a
   * thread may always raise its nice value) */
  setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), BG_NICE);
#endif
  tlm_jit_set_cancel(&rt->bg_cancel[1]);
  for (;;) {
    int wait = 0;
    tlm_bg_job *j = bg_pick(rt, 1, &wait);
    if (j) {
      bg_run_job(rt, j, 1);
      continue;
    }
    if (!wait) break;
    /* the idle thread is giving up its build (at its next compile stage) */
    pthread_mutex_lock(&rt->bg_mu);
    bg_cv_wait_ms_locked(rt, 20);
    pthread_mutex_unlock(&rt->bg_mu);
  }
  return NULL;
}

/* 1 when the background has made no progress for BG_RESCUE_MS by `now`
 * (bg_progress_ns is 0 until the first job is queued) */
static int bg_no_progress(tlm_runtime *rt, uint64_t now) {
  uint64_t last = atomic_load_explicit(&rt->bg_progress_ns, memory_order_relaxed);
  return last && now >= last && now - last >= (uint64_t)BG_RESCUE_MS * 1000000u;
}

/* With bg_mu held: when builds are queued, no rescue thread runs and the
 * background has made no progress for BG_RESCUE_MS, starts the rescue
 * thread; 1 when it did (the caller logs it once the lock is dropped: the
 * log callback is the application's). The caller is an application thread
 * (tlm_run, or tlm_wait_background), so the new thread does not inherit
 * SCHED_IDLE. */
static int bg_rescue_if_starved_locked(tlm_runtime *rt) {
  uint64_t now = (uint64_t)tlm_clock_ns();
  if (rt->bg_stop || !bg_no_progress(rt, now)) return 0;
  if (rt->bg_busy) bg_raise_idle(rt); /* the build it holds, when privileged */
  /* at BG_NICE_LOW, a build it has held for the whole period goes to the
   * rescue thread (one it took since stays: the check runs every 250 ms
   * from tlm_wait_background while a slow rescue may not progress) */
  int handed = rt->bg_idle_build && atomic_load(&rt->bg_idle_lowprio) &&
               now - rt->bg_idle_since_ns >= (uint64_t)BG_RESCUE_MS * 1000000u &&
               !atomic_load(&rt->bg_cancel[0]);
  if (handed) atomic_store(&rt->bg_cancel[0], 1);
  if (rt->bg_rescue == 1 || (!bg_build_queued_locked(rt) && !handed)) return 0;
  if (rt->bg_rescue == 2) pthread_join(rt->bg_rescue_thread, NULL); /* it has returned */
  rt->bg_rescue = 0;
  int started = pthread_create(&rt->bg_rescue_thread, NULL, bg_rescue_main, rt) == 0;
  if (started) {
    rt->bg_rescue = 1;
    atomic_store(&rt->bg_rescue_running, 1);
    atomic_fetch_add(&rt->bg_rescues, 1);
  }
  atomic_store(&rt->bg_progress_ns, now); /* a failed start is retried a period later */
  return started;
}

static void log_rescue(tlm_runtime *rt) {
  tlm_log(rt, TLM_LOG_INFO,
          "background builds made no progress for %d ms: a rescue thread at nice %d takes them",
          BG_RESCUE_MS, BG_NICE);
}

/* Called by tlm_run after a call on a provisional kernel (no lock held):
 * the cheap test first, bg_mu only when the period has passed. */
static void bg_check_starved(tlm_runtime *rt) {
  if (!bg_no_progress(rt, (uint64_t)tlm_clock_ns()) ||
      atomic_load_explicit(&rt->bg_rescue_running, memory_order_relaxed))
    return;
  pthread_mutex_lock(&rt->bg_mu);
  int started = bg_rescue_if_starved_locked(rt);
  pthread_mutex_unlock(&rt->bg_mu);
  if (started) log_rescue(rt);
}

/* Queues a job (the queue owns it on success); 0, or -1 (no thread,
 * stopping). */
static int bg_push(tlm_runtime *rt, tlm_bg_job *j) {
  pthread_mutex_lock(&rt->bg_mu);
  if (rt->bg_stop || (!rt->bg_started && pthread_create(&rt->bg_thread, NULL, bg_main, rt))) {
    pthread_mutex_unlock(&rt->bg_mu);
    return -1;
  }
  rt->bg_started = 1;
  if (!rt->bg_head && !rt->bg_busy) /* the wait for progress starts now */
    atomic_store(&rt->bg_progress_ns, (uint64_t)tlm_clock_ns());
  if (j->urgent && rt->bg_head && !rt->bg_head->urgent) { /* first */
    j->next = rt->bg_head;
    rt->bg_head = j;
  } else if (j->urgent && rt->bg_head) { /* after the urgent ones, in order */
    tlm_bg_job *q = rt->bg_head;
    while (q->next && q->next->urgent) q = q->next;
    j->next = q->next;
    q->next = j;
    if (!j->next) rt->bg_tail = j;
  } else {
    if (rt->bg_tail) rt->bg_tail->next = j;
    else rt->bg_head = j;
    rt->bg_tail = j;
  }
  bg_spin_locked(rt);
  pthread_cond_broadcast(&rt->bg_cv);
  pthread_mutex_unlock(&rt->bg_mu);
  return 0;
}

/* Queues the shape's build; 0, or -1 (no memory, no thread, stopping):
 * then the caller builds it itself. urgent: the shape runs on a tier-0
 * kernel meanwhile (several times slower than a compiled sibling), so its
 * build goes before those of shapes that have one, first come first
 * served within each class. */
static int bg_enqueue(tlm_runtime *rt, const tlm_task *task, const tlm_key *key, int urgent) {
  tlm_bg_job *j = calloc(1, sizeof *j);
  if (!j) return -1;
  j->task = *task;
  j->key = *key;
  j->urgent = urgent;
  if (bg_push(rt, j)) {
    free(j);
    return -1;
  }
  return 0;
}

void tlm_engine_bg_init(tlm_runtime *rt) {
  pthread_mutex_init(&rt->bg_mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* tlm_engine_bg_wait's timed waits */
  pthread_cond_init(&rt->bg_cv, &ca);
  pthread_condattr_destroy(&ca);
}

void tlm_engine_bg_stop(tlm_runtime *rt) {
  pthread_mutex_lock(&rt->bg_mu);
  rt->bg_stop = 1;
  /* compiles in progress stop at their next stage (tlm_jit_set_cancel) */
  atomic_store(&rt->bg_cancel[0], 1);
  atomic_store(&rt->bg_cancel[1], 1);
  pthread_cond_broadcast(&rt->bg_cv);
  int started = rt->bg_started;
  if (rt->bg_busy) bg_raise_idle(rt); /* its build in progress, when privileged */
  pthread_mutex_unlock(&rt->bg_mu);
  if (started) pthread_join(rt->bg_thread, NULL);
  /* no rescue starts once bg_stop is set; one running sees it in bg_pick */
  pthread_mutex_lock(&rt->bg_mu);
  int rescue = rt->bg_rescue;
  pthread_mutex_unlock(&rt->bg_mu);
  if (rescue) pthread_join(rt->bg_rescue_thread, NULL);
  for (tlm_bg_job *j = rt->bg_head, *next; j; j = next) {
    next = j->next;
    job_free(j);
  }
  rt->bg_head = rt->bg_tail = NULL;
  pthread_cond_destroy(&rt->bg_cv);
  pthread_mutex_destroy(&rt->bg_mu);
}

/* With bg_mu held: 1 while tlm_engine_bg_wait has work to wait for. The
 * builds always; the tuning jobs only while no other thread has called
 * tlm_run since the wait began (runs0): tuning runs only in the
 * application's pauses, so with another thread calling on it could wait
 * for as long as those calls go on. */
static int bg_wait_pending_locked(tlm_runtime *rt, uint64_t runs0) {
  if (bg_building_locked(rt)) return 1;
  if (atomic_load_explicit(&rt->runs, memory_order_relaxed) != runs0) return 0;
  return rt->bg_head != NULL || rt->bg_busy > 0;
}

void tlm_engine_bg_wait(tlm_runtime *rt) {
  int started = 0;
  uint64_t runs0 = atomic_load_explicit(&rt->runs, memory_order_relaxed);
  pthread_mutex_lock(&rt->bg_mu);
  /* the caller waits, so the idle thread should have the cores: unless
   * other processes keep them busy, then the rescue thread takes over */
  while (!rt->bg_stop && bg_wait_pending_locked(rt, runs0)) {
    bg_cv_wait_ms_locked(rt, BG_RESCUE_MS / 4);
    started += bg_rescue_if_starved_locked(rt);
  }
  pthread_mutex_unlock(&rt->bg_mu);
  if (started) log_rescue(rt);
}

/* Makes sure the plan of `key` exists and is READY (building it as the
 * owner, or waiting for its builder). Returns with no lock held. */
/* *how (when not NULL): TLM_RUN_BUILT when this call planned or built
 * (counted as a miss), else TLM_RUN_WAITED when it waited for another
 * thread's build of the same shape; left alone otherwise. */
enum { TLM_RUN_HIT = 0, TLM_RUN_BUILT = 1, TLM_RUN_WAITED = 2 };
static tlm_status ensure_plan(tlm_runtime *rt, const tlm_task *task, const tlm_key *key,
                              int *how, char *err, int errcap) {
  for (;;) {
    pthread_rwlock_wrlock(&rt->map_lock);
    tlm_plan *p = tlm_map_get(&rt->plans, key);
    int owner = 0;
    if (!p) {
      p = calloc(1, sizeof *p);
      int ok = p && tlm_map_put(&rt->plans, key, p) == 0;
      if (ok && push((void ***)&rt->plan_list, &rt->nplans, &rt->capplans, p)) {
        tlm_map_remove(&rt->plans, key);
        ok = 0;
      }
      if (!ok) {
        pthread_rwlock_unlock(&rt->map_lock);
        free(p);
        snprintf(err, (size_t)errcap, "out of memory");
        return TLM_ERR_OUT_OF_MEMORY;
      }
      p->key = *key;
      atomic_store(&p->state, TLM_ENTRY_BUILDING);
      owner = 1;
    } else if (atomic_load(&p->state) == TLM_ENTRY_FAILED) {
      atomic_store(&p->state, TLM_ENTRY_BUILDING);
      owner = 1;
    } else if (atomic_load(&p->state) == TLM_ENTRY_READY) {
      tlm_kernel *k = p->kernel;
      int kernel_ready = atomic_load(&k->entry.state) == TLM_ENTRY_READY;
      /* copies: once unlocked, the plan may be trimmed and k freed */
      tlm_task ktask = k->task;
      tlm_schedule ksched = k->sched;
      pthread_rwlock_unlock(&rt->map_lock);
      if (kernel_ready) return TLM_OK;
      /* its kernel was evicted: rebuild it (from disk when present); the
       * plan still names it, so it is the same record, READY again */
      if (how) *how = TLM_RUN_BUILT;
      tlm_kernel *again;
      tlm_status st = get_kernel(rt, &ktask, &ksched, &again, NULL, err, errcap);
      if (st != TLM_OK) return st;
      continue;
    }
    uint64_t g = atomic_load(&rt->build_gen);
    pthread_rwlock_unlock(&rt->map_lock);
    if (!owner) {
      if (how && *how != TLM_RUN_BUILT) *how = TLM_RUN_WAITED;
      wait_change(rt, g);
      continue;
    }
    if (how) *how = TLM_RUN_BUILT;
    tlm_space space;
    tlm_key sib_key;
    /* in the background unless the disk cache has this shape's plan */
    int later = rt->cfg.async_compile && tlm_space_init(&space, task, &rt->target) == 0 &&
                !plan_on_disk(rt, key, task, &space);
    int has_sib = later && nearest_sibling(rt, &space, 1, 1, NULL, &sib_key);
    if (!has_sib && later && uses_generic(rt, task)) {
      /* no sibling: the family's tier-0 kernel (generic/), ready at once */
      tlm_schedule gs;
      generic_sched(&gs);
      tlm_kernel *gk;
      if (get_kernel(rt, task, &gs, &gk, NULL, err, errcap) == TLM_OK) {
        tlm_key_schedule(&sib_key, task, &rt->target, &gs);
        has_sib = 1;
      }
    }
    if (has_sib) {
      /* answer now with another shape's kernel of this operator; the
       * background thread builds this shape's own (bg_build). The plan is
       * READY and provisional before the job is queued, so the build can
       * never finish before there is a provisional plan to replace. The
       * sibling is looked up again under the lock: it may have gone. */
      pthread_rwlock_wrlock(&rt->map_lock);
      tlm_kernel *sib = (tlm_kernel *)tlm_table_get(&rt->kernels, &sib_key);
      if (!sib || atomic_load(&sib->entry.state) != TLM_ENTRY_READY) {
        pthread_rwlock_unlock(&rt->map_lock);
        goto build_here;
      }
      p->kernel = sib;
      p->sched = sib->sched;
      p->by_model = 0;
      p->from_disk = 0;
      p->schedule_ms = 0;
      p->provisional = 1;
      atomic_store(&p->used, 1);
      atomic_store(&p->state, TLM_ENTRY_READY);
      int queued = bg_enqueue(rt, task, key, sib->generic) == 0;
      if (!queued) { /* no thread or memory: build it here */
        p->provisional = 0;
        atomic_store(&p->state, TLM_ENTRY_BUILDING);
      }
      pthread_rwlock_unlock(&rt->map_lock);
      if (queued) {
        atomic_fetch_add(&rt->provisional, 1);
        notify(rt);
        continue;
      }
    }
  build_here:;
    tlm_status st = build_plan(rt, p, task, err, errcap);
    pthread_rwlock_wrlock(&rt->map_lock);
    atomic_store(&p->used, 1);
    atomic_store(&p->state, st == TLM_OK ? TLM_ENTRY_READY : TLM_ENTRY_FAILED);
    pthread_rwlock_unlock(&rt->map_lock);
    notify(rt);
    if (st != TLM_OK) return st;
  }
}

tlm_status tlm_engine_plan(tlm_runtime *rt, const tlm_task *task, const tlm_plan **out,
                           char *err, int errcap) {
  tlm_key key;
  tlm_key_shape(&key, task, &rt->target, scheduler_id(rt));
  for (;;) {
    pthread_rwlock_rdlock(&rt->map_lock);
    tlm_plan *p = tlm_map_get(&rt->plans, &key);
    int ready = p && atomic_load(&p->state) == TLM_ENTRY_READY &&
                atomic_load(&p->kernel->entry.state) == TLM_ENTRY_READY;
    pthread_rwlock_unlock(&rt->map_lock);
    if (ready) {
      *out = p;
      return TLM_OK;
    }
    tlm_status st = ensure_plan(rt, task, &key, NULL, err, errcap);
    if (st != TLM_OK) return st;
  }
}

/* ---- running ---------------------------------------------------------------------------- */

typedef struct exec_ctx {
  const tlm_kernel *k;
  const void *args;
  float **scratch;
} exec_ctx;

/* one chunk of the kernel's parallel loop, per kernel ABI (kernel_abi.h) */
static void exec_mm_chunk(void *ctx, int64_t begin, int64_t end, int tid) {
  exec_ctx *e = ctx;
  if (e->k->generic) {
    ((tlm_generic_matmul_fn)e->k->fn)(&e->k->task.u.mm, e->args, begin, end);
    return;
  }
  ((tlm_mm_kernel_fn)e->k->fn)(e->args, begin, end, e->scratch ? e->scratch[tid] : NULL);
}

static void exec_row_chunk(void *ctx, int64_t begin, int64_t end, int tid) {
  exec_ctx *e = ctx;
  ((tlm_row_kernel_fn)e->k->fn)(e->args, begin, end, e->scratch ? e->scratch[tid] : NULL);
}

static void exec_pool_chunk(void *ctx, int64_t begin, int64_t end, int tid) {
  exec_ctx *e = ctx;
  if (e->k->generic) {
    ((tlm_generic_pool_fn)e->k->fn)(&e->k->task.u.pool, e->args, begin, end);
    return;
  }
  ((tlm_pool_kernel_fn)e->k->fn)(e->args, begin, end, e->scratch ? e->scratch[tid] : NULL);
}

static void exec_attn_chunk(void *ctx, int64_t begin, int64_t end, int tid) {
  exec_ctx *e = ctx;
  ((tlm_attn_kernel_fn)e->k->fn)(e->args, begin, end, e->scratch ? e->scratch[tid] : NULL);
}

static void exec_conv_chunk(void *ctx, int64_t begin, int64_t end, int tid) {
  exec_ctx *e = ctx;
  if (e->k->generic)
    ((tlm_generic_conv_fn)e->k->fn)(&e->k->task.u.conv, e->args, begin, end);
  else
    ((tlm_conv_kernel_fn)e->k->fn)(e->args, begin, end, e->scratch ? e->scratch[tid] : NULL);
}

/* iterations [begin, end) of (channel block, kernel iteration) pairs,
 * block major (tlm_conv_task.oc_blocks) */
typedef struct conv_blocks_ctx {
  const tlm_kernel *k;
  const tlm_conv_args *blocks;
  int64_t n; /* the kernel's parallel iterations per block */
  float **scratch;
} conv_blocks_ctx;

static void exec_conv_blocks_chunk(void *ctx, int64_t begin, int64_t end, int tid) {
  conv_blocks_ctx *c = ctx;
  while (begin < end) {
    int64_t b = begin / c->n, i0 = begin % c->n;
    int64_t i1 = end - b * c->n < c->n ? end - b * c->n : c->n;
    exec_ctx e = {c->k, &c->blocks[b], c->scratch};
    exec_conv_chunk(&e, i0, i1, tid);
    begin = b * c->n + i1;
  }
}

/* the executor of each operator kind: its kernels' ABI */
static void (*const k_exec_chunk[])(void *, int64_t, int64_t, int) = {
    [TLM_OP_MATMUL] = exec_mm_chunk,     [TLM_OP_SOFTMAX] = exec_row_chunk,
    [TLM_OP_LAYERNORM] = exec_row_chunk, [TLM_OP_RMSNORM] = exec_row_chunk,
    [TLM_OP_CONV] = exec_conv_chunk,     [TLM_OP_POOL] = exec_pool_chunk,
    [TLM_OP_ELTWISE] = exec_row_chunk,   [TLM_OP_ROPE] = exec_row_chunk,
    [TLM_OP_ATTENTION] = exec_attn_chunk,
};

/* iterations of the kernel's parallel loop for this task on `workers`
 * threads */
static int64_t parallel_count(const tlm_kernel *k, const tlm_task *task, int64_t workers) {
  if (k->generic && task->kind == TLM_OP_MATMUL)
    return tlm_generic_matmul_iters(tlm_task_batch_total(task), task->u.mm.M, task->u.mm.N);
  if (k->generic) /* convolution and pooling: rows (n, od, oh) */
    return task->kind == TLM_OP_POOL ? task->u.pool.N * task->u.pool.OD * task->u.pool.OH
                                     : task->u.conv.N * task->u.conv.OD * task->u.conv.OH;
  const tlm_family *f = tlm_family_of(task);
  return f ? f->parallel_count(task, &k->sched, &k->nest, workers) : 1;
}

/* Most bytes of undeclared weights copied per call; output pixels a
 * call needs before it copies. */
#define WCOPY_MAX_BYTES ((size_t)16 << 20)
#define WCOPY_MIN_PIXELS 256

/* Undeclared convolution weights that start off a 64-byte line, copied
 * onto one for this call (the runtime's buffer, under exec_lock), or NULL
 * to read them where they are. A direct kernel streams its C tile's
 * weights once per register tile of pixels, R of them (at most
 * TLM_CONV_PTR_ROWS), so over P output pixels it reads the weights about
 * P / R times; the copy reads and writes them once, 2R / P of that, under
 * 5% from 256 pixels on (6-row tiles). Measured on the AMD Zen 3 of
 * session 52 (one thread, vision --no-prepack, --sizes 224): ResNet-50's
 * res3b-d 3x3 layers (784 pixels, 576 KiB of weights 16 or 48 bytes off
 * a line) 0.65-0.68x oneDNN as given; see "Dynamic and static dimensions"
 * in docs/design.md. */
static const float *conv_weights_on_line(tlm_runtime *rt, const tlm_conv_task *t,
                                         const tlm_conv_args *a) {
  if (!a->wei || !((uintptr_t)a->wei & 63)) return NULL;
  if (a->N * a->OD * a->OH * a->OW < WCOPY_MIN_PIXELS) return NULL;
  int64_t floats = tlm_conv_weight_span(t, a->sw);
  if (floats < 1 || (size_t)floats > WCOPY_MAX_BYTES / sizeof(float)) return NULL;
  size_t bytes = (size_t)floats * sizeof(float);
  if (bytes > rt->wcopy_bytes) {
    size_t cap = (bytes + 63) & ~(size_t)63;
    float *p = aligned_alloc(64, cap);
    if (!p) return NULL; /* not an error: the kernel reads the caller's */
    free(rt->wcopy);
    rt->wcopy = p;
    rt->wcopy_bytes = cap;
  }
  memcpy(rt->wcopy, a->wei, bytes);
  return rt->wcopy;
}

/* caller holds exec_lock */
static tlm_status exec_locked(tlm_runtime *rt, const tlm_kernel *k, const tlm_task *task,
                              const void *args, char *err, int errcap) {
  int64_t n = parallel_count(k, task, rt->nthreads);
  if (k->scratch_bytes > rt->scratch_bytes) {
    size_t bytes = ((size_t)k->scratch_bytes + 63) & ~(size_t)63;
    for (int t = 0; t < rt->nthreads; t++) {
      float *p = aligned_alloc(64, bytes);
      if (!p) {
        snprintf(err, (size_t)errcap, "out of memory for %zu bytes of scratch", bytes);
        return TLM_ERR_OUT_OF_MEMORY;
      }
      free(rt->scratch[t]);
      rt->scratch[t] = p;
    }
    rt->scratch_bytes = (int64_t)bytes;
  }
  /* matmuls: B packed ahead when it is constant, else per block (bpk is
   * always the engine's: callers' args need not set it) */
  tlm_mm_args mm_args;
  if (task->kind == TLM_OP_MATMUL) {
    mm_args = *(const tlm_mm_args *)args;
    mm_args.bpk = k->scratch_bytes > 0 ? tlm_prepack_lookup_locked(rt, k, task, &mm_args) : NULL;
    /* M's parallel blocks cut at run time where the nest says so (n above
     * counts them the same way) */
    mm_args.mblock = k->generic ? 0 : ln_parallel_m_block(&k->nest, task, rt->nthreads);
    args = &mm_args;
  }
  /* direct convolutions: weights off a cache line read from an aligned
   * copy, kept when they are declared constant, else made for this call
   * when it pays (conv_weights_on_line) */
  tlm_conv_args conv_args;
  if (task->kind == TLM_OP_CONV && task->u.conv.oc_blocks <= 1) {
    const tlm_conv_args *ca = args;
    const float *w = tlm_prepack_conv_aligned_locked(rt, &task->u.conv, ca->wei, ca->sw);
    if (!w) w = conv_weights_on_line(rt, &task->u.conv, ca);
    if (w) {
      conv_args = *ca;
      conv_args.wei = w;
      args = &conv_args;
    }
  }
  exec_ctx e = {k, args, rt->scratch};
  if (task->kind == TLM_OP_CONV && task->u.conv.oc_blocks > 1) {
    /* the channel blocks: one parallel loop over (block, iteration), block
     * major, so a thread's share is whole blocks where there are enough
     * (it reads only their weights) and the blocks' iterations otherwise */
    const tlm_conv_task *t = &task->u.conv;
    const tlm_conv_args *a = args;
    int64_t W = t->OCg, OC = W * t->oc_blocks, K = (int64_t)t->KD * t->KH * t->KW * t->ICg;
    const float *packed = tlm_prepack_conv_lookup_locked(rt, task, a->wei);
    tlm_conv_args local[16], *blocks = local;
    if (t->oc_blocks > 16) blocks = malloc(sizeof *blocks * (size_t)t->oc_blocks);
    if (!blocks) {
      snprintf(err, (size_t)errcap, "out of memory for %d channel blocks", (int)t->oc_blocks);
      return TLM_ERR_OUT_OF_MEMORY;
    }
    for (int64_t b = 0; b < t->oc_blocks; b++) {
      tlm_conv_args *ab = &blocks[b];
      int64_t c0 = b * W;
      *ab = *a;
      if (packed) {
        ab->wei = packed + b * K * W;
      } else { /* the caller's dense HWIO weights, a block's columns */
        const int64_t sw[5] = {1, OC, (int64_t)t->KH * t->KW * t->ICg * OC,
                               (int64_t)t->KW * t->ICg * OC, (int64_t)t->ICg * OC};
        memcpy(ab->sw, sw, sizeof sw);
        ab->wei = a->wei + c0;
      }
      ab->dst = a->dst + c0 * a->sd[1];
      ab->bias = a->bias ? a->bias + c0 * a->sbias : NULL;
      ab->scale = a->scale ? a->scale + c0 * a->sscale : NULL;
      ab->shift = a->shift ? a->shift + c0 * a->sshift : NULL;
      ab->res = a->res ? a->res + c0 * a->sr[1] : NULL;
    }
    conv_blocks_ctx bc = {k, blocks, n, rt->scratch};
    if (!rt->dry_run) tlm_pool_run(rt->pool, n * t->oc_blocks, exec_conv_blocks_chunk, &bc);
    if (blocks != local) free(blocks);
    return TLM_OK;
  }
  if ((int)task->kind <= 0 || (int)task->kind >= (int)(sizeof k_exec_chunk / sizeof k_exec_chunk[0]) ||
      !k_exec_chunk[task->kind]) {
    snprintf(err, (size_t)errcap, "no executor for operator kind %d", (int)task->kind);
    return TLM_ERR_INTERNAL;
  }
  if (!rt->dry_run)
    tlm_pool_run(rt->pool, n, k_exec_chunk[task->kind], &e);
  return TLM_OK;
}

tlm_status tlm_engine_exec(tlm_runtime *rt, const tlm_kernel *k, const tlm_task *task,
                           const void *args, char *err, int errcap) {
  pthread_mutex_lock(&rt->exec_lock);
  tlm_status st = exec_locked(rt, k, task, args, err, errcap);
  pthread_mutex_unlock(&rt->exec_lock);
  return st;
}

/* exec_locked for a plan's call; a call on a provisional kernel adds its
 * wall time to the plan's provisional_ns (bg_pick's order). The caller
 * holds the execution lock (so p lives: evict_locked needs it too) and
 * calls bg_check_starved after dropping it when provisional. */
static tlm_status exec_plan_locked(tlm_runtime *rt, tlm_plan *p, const tlm_kernel *k,
                                   int provisional, const tlm_task *task, const void *args,
                                   char *err, int errcap) {
  uint64_t t0 = provisional ? (uint64_t)tlm_clock_ns() : 0;
  tlm_status st = exec_locked(rt, k, task, args, err, errcap);
  if (provisional)
    atomic_fetch_add_explicit(&p->provisional_ns, (uint64_t)tlm_clock_ns() - t0,
                              memory_order_relaxed);
  return st;
}

int tlm_engine_rerun(tlm_runtime *rt, tlm_plan *plan, uint64_t epoch, const tlm_task *task,
                     const void *args) {
  pthread_mutex_lock(&rt->exec_lock);
  if (atomic_load_explicit(&rt->epoch, memory_order_acquire) != epoch ||
      atomic_load_explicit(&plan->kernel->entry.state, memory_order_acquire) != TLM_ENTRY_READY) {
    pthread_mutex_unlock(&rt->exec_lock);
    return 0;
  }
  char err[64];
  int provisional = plan->provisional; /* bg_build swaps it under the execution lock too */
  int ok = exec_plan_locked(rt, plan, plan->kernel, provisional, task, args, err, sizeof err) ==
           TLM_OK;
  pthread_mutex_unlock(&rt->exec_lock);
  if (provisional) bg_check_starved(rt);
  if (ok) atomic_fetch_add_explicit(&rt->hits, 1, memory_order_relaxed);
  return ok;
}

tlm_status tlm_engine_run(tlm_runtime *rt, const tlm_task *task, const void *args,
                          tlm_plan **plan_out, uint64_t *epoch_out, int *tune_out, char *err,
                          int errcap) {
  tlm_key key;
  tlm_key_shape(&key, task, &rt->target, scheduler_id(rt));
  int how = TLM_RUN_HIT;
  for (;;) {
    pthread_rwlock_rdlock(&rt->map_lock);
    tlm_plan *p = tlm_map_get(&rt->plans, &key);
    if (p && atomic_load(&p->state) == TLM_ENTRY_READY &&
        atomic_load(&p->kernel->entry.state) == TLM_ENTRY_READY) {
      tlm_kernel *k = p->kernel;
      int provisional = p->provisional;
      *plan_out = p;
      *epoch_out = atomic_load(&rt->epoch);
      atomic_store_explicit(&p->used, 1, memory_order_relaxed);
      atomic_store_explicit(&k->entry.used, 1, memory_order_relaxed);
      /* one tuning job per plan, once it runs its own kernel */
      if (tune_out && rt->cfg.tune_k > 0 && !p->provisional && !p->measured &&
          !atomic_load_explicit(&p->tune_state, memory_order_relaxed) &&
          !atomic_exchange(&p->tune_state, 1))
        *tune_out = 1;
      /* take the execution lock before dropping the read lock: eviction
       * needs both, so k cannot be freed under us */
      pthread_mutex_lock(&rt->exec_lock);
      pthread_rwlock_unlock(&rt->map_lock);
      tlm_status st = exec_plan_locked(rt, p, k, provisional, task, args, err, errcap);
      pthread_mutex_unlock(&rt->exec_lock);
      if (provisional) bg_check_starved(rt);
      /* exactly one of hits, misses, waits per successful run */
      if (st == TLM_OK)
        atomic_fetch_add_explicit(how == TLM_RUN_BUILT    ? &rt->misses
                                  : how == TLM_RUN_WAITED ? &rt->waits
                                                          : &rt->hits,
                                  1, memory_order_relaxed);
      return st;
    }
    pthread_rwlock_unlock(&rt->map_lock);
    tlm_status st = ensure_plan(rt, task, &key, &how, err, errcap);
    if (st != TLM_OK) return st;
  }
}

tlm_status tlm_engine_ir(tlm_runtime *rt, const tlm_task *task, const tlm_schedule *sched,
                         int optimize, char **ir, char *err, int errcap) {
  *ir = NULL;
  tlm_key key;
  tlm_key_schedule(&key, task, &rt->target, sched);
  char name[48];
  kernel_name(&key, name, sizeof name);
  ln_nest nest;
  tlm_jit_request req = jit_request(rt, task, sched, &nest, name);
  return tlm_jit_build(rt->jit, &req, NULL, NULL, ir, optimize, NULL, err, errcap);
}

tlm_status tlm_engine_kernel_variant(tlm_runtime *rt, const tlm_task *task,
                                     const tlm_schedule *sched, int static_m, tlm_kernel **out,
                                     double phase_ms[4], char *err, int errcap) {
  static atomic_int serial;
  double t0 = now_ms();
  tlm_kernel *k = calloc(1, sizeof *k);
  if (!k) return TLM_ERR_OUT_OF_MEMORY;
  k->task = *task;
  k->sched = *sched;
  snprintf(k->name, sizeof k->name, "tlm_variant_%d_%d", static_m, atomic_fetch_add(&serial, 1));
  k->scratch_bytes = tlm_scratch_bytes(task, sched);
  tlm_jit_request req = jit_request(rt, task, sched, &k->nest, k->name);
  req.static_m = static_m;
  void *obj = NULL, *fn = NULL;
  size_t len = 0;
  tlm_jit_build_times bt;
  tlm_status st = tlm_jit_build(rt->jit, &req, &obj, &len, NULL, 0, &bt, err, errcap);
  if (st != TLM_OK) {
    free(k);
    return st;
  }
  double t_link = now_ms();
  int bad = tlm_jit_load(rt->jit, obj, len, k->name, &fn, &k->code, err, errcap);
  t_link = now_ms() - t_link;
  free(obj);
  if (phase_ms) {
    phase_ms[0] = bt.ir_ms;
    phase_ms[1] = bt.jit.tm_ms + bt.jit.opt_ms;
    phase_ms[2] = bt.jit.emit_ms;
    phase_ms[3] = t_link;
  }
  if (bad) {
    free(k);
    return TLM_ERR_JIT;
  }
  k->fn = fn;
  k->code_bytes = len;
  k->compile_ms = now_ms() - t0;
  atomic_store(&k->entry.state, TLM_ENTRY_READY);
  *out = k;
  return TLM_OK;
}

void tlm_engine_kernel_free(tlm_runtime *rt, tlm_kernel *k) {
  if (!k) return;
  tlm_jit_unload(rt->jit, k->code);
  free(k);
}

/* ---- measured top-k (cfg.tune_k, TLM_TUNE) ------------------------------------------------ */

typedef struct neighbour_ctx {
  const tlm_schedule *pick;
  int change[2]; /* points to move (-1: none) */
  int dir[2];    /* +1 / -1: to the next / previous candidate */
} neighbour_ctx;

/* keeps the pick's value where it is a candidate (the nearest one where it
 * is not); at a changed point takes the adjacent candidate */
static int choose_neighbour(void *ctx, const tlm_space *s, int p, const int32_t *decided,
                            const int32_t *cands, int n) {
  (void)s, (void)decided;
  const neighbour_ctx *c = ctx;
  int32_t want = p < c->pick->n ? c->pick->v[p] : cands[0];
  int at = 0;
  for (int i = 1; i < n; i++)
    if (llabs((long long)cands[i] - want) < llabs((long long)cands[at] - want)) at = i;
  for (int j = 0; j < 2; j++)
    if (c->change[j] == p && n > 1) {
      int to = at + c->dir[j];
      at = to < 0 ? 1 : to >= n ? n - 2 : to;
    }
  return at;
}

static int same_sched(const tlm_schedule *a, const tlm_schedule *b) {
  return a->n == b->n && !memcmp(a->v, b->v, sizeof a->v[0] * (size_t)a->n);
}

static int add_distinct(tlm_schedule *list, int n, const tlm_schedule *s) {
  for (int i = 0; i < n; i++)
    if (same_sched(&list[i], s)) return n;
  list[n] = *s;
  return n + 1;
}

int tlm_engine_tune_candidates(tlm_runtime *rt, const tlm_space *s, const tlm_schedule *pick,
                               int k, uint64_t seed, tlm_schedule *out, int *n_model) {
  if (k > TLM_TUNE_MAX_K) k = TLM_TUNE_MAX_K;
  int n = 0;
  out[n++] = *pick;
  if (rt->model && tlm_lm_covers_task(rt->model, &s->task, &s->target) && k > 1) {
    tlm_schedule top[TLM_TUNE_MAX_K];
    int nt = tlm_lm_decode_topk(rt->model, s, k, top, NULL);
    for (int i = 0; i < nt && n < k; i++)
      if (tlm_space_accepts(s, &top[i])) n = add_distinct(out, n, &top[i]);
  }
  if (n_model) *n_model = n - 1;
  uint64_t rng = seed;
  for (int attempt = 0; attempt < 400 && n < k && s->npoints > 0; attempt++) {
    neighbour_ctx c = {pick, {-1, -1}, {1, 1}};
    int changes = 1 + (attempt >= 2 * s->npoints && (tlm_rng_next(&rng) & 1));
    for (int j = 0; j < changes; j++) {
      /* every single move first (both directions), then random pairs */
      int idx = attempt < 2 * s->npoints ? attempt / 2
                                         : (int)(tlm_rng_next(&rng) % (uint64_t)s->npoints);
      c.change[j] = idx;
      c.dir[j] = attempt < 2 * s->npoints ? (attempt % 2 ? -1 : 1)
                                          : (tlm_rng_next(&rng) & 1 ? 1 : -1);
    }
    tlm_schedule m;
    tlm_space_walk(s, choose_neighbour, &c, &m);
    if (tlm_space_accepts(s, &m)) n = add_distinct(out, n, &m);
  }
  return n;
}

int tlm_engine_tune_enqueue(tlm_runtime *rt, const tlm_task *task, const void *args,
                            size_t args_bytes, void **bufs, const size_t *sizes,
                            const int *is_in, const int *is_out, int nbufs) {
  tlm_bg_job *j = calloc(1, sizeof *j);
  if (!j || nbufs < 1 || nbufs > TUNE_MAX_BUFS || args_bytes > sizeof j->args) {
    free(j);
    return -1;
  }
  size_t bytes = 0;
  for (int i = 0; i < nbufs; i++) bytes += sizes[i];
  j->tune = 1;
  j->task = *task;
  tlm_key_shape(&j->key, task, &rt->target, scheduler_id(rt));
  memcpy(&j->args, args, args_bytes);
  j->nbufs = nbufs;
  for (int i = 0; i < nbufs; i++) {
    j->bufs[i] = bufs[i];
    j->sizes[i] = sizes[i];
    j->is_in[i] = is_in[i];
    j->is_out[i] = is_out[i];
  }
  /* the copies held by tuning jobs are bounded: an application that never
   * pauses queues one per new shape and runs none */
  pthread_mutex_lock(&rt->bg_mu);
  int room = rt->bg_tune_bytes <= TUNE_HELD_MAX && bytes <= TUNE_HELD_MAX - rt->bg_tune_bytes;
  if (room) rt->bg_tune_bytes += bytes;
  pthread_mutex_unlock(&rt->bg_mu);
  if (!room || bg_push(rt, j)) {
    if (room) {
      pthread_mutex_lock(&rt->bg_mu);
      rt->bg_tune_bytes -= bytes;
      pthread_mutex_unlock(&rt->bg_mu);
    }
    j->nbufs = 0; /* the caller keeps them */
    free(j);
    return -1;
  }
  return 0;
}

int tlm_engine_outputs_agree(const float *out, const float *ref, size_t n) {
  float big = 0;
  for (size_t e = 0; e < n; e++)
    if (fabsf(ref[e]) > big) big = fabsf(ref[e]);
  for (size_t e = 0; e < n; e++)
    if (!(fabsf(out[e] - ref[e]) <= 1e-3f * (big + 1e-30f)) && !(isnan(out[e]) && isnan(ref[e])))
      return 0;
  return 1;
}

/* -1 when the runtime is being destroyed, 1 when a build is queued (a
 * tuning job gives way to it), else 0. The thread that asks is awake, so
 * it is getting CPU time: that counts as progress for the rescue's test
 * (a tuning job parked in wait_idle is not a starved build). */
static int bg_tune_should_stop(tlm_runtime *rt) {
  pthread_mutex_lock(&rt->bg_mu);
  int s = rt->bg_stop ? -1 : bg_build_queued_locked(rt);
  atomic_store(&rt->bg_progress_ns, (uint64_t)tlm_clock_ns());
  pthread_mutex_unlock(&rt->bg_mu);
  return s;
}

/* Waits until the application has made no tlm_run call for TUNE_IDLE_MS
 * (its runs counter stood still): tuning compiles and times only in such
 * pauses, so a busy application never shares its cores with it (on 2
 * cores, serving with tuning at any time ran 30% slower). 0, or what
 * bg_tune_should_stop says when it is not 0: builds go first, so an
 * application that never pauses cannot park the background thread in a
 * tuning job while its new shapes run on provisional kernels. */
#define TUNE_IDLE_MS 5
static int wait_idle(tlm_runtime *rt) {
  for (;;) {
    uint64_t r0 = atomic_load_explicit(&rt->runs, memory_order_relaxed);
    struct timespec ts = {0, TUNE_IDLE_MS * 1000000L};
    nanosleep(&ts, NULL);
    int s = bg_tune_should_stop(rt);
    if (s) return s;
    if (atomic_load_explicit(&rt->runs, memory_order_relaxed) == r0) return 0;
  }
}

/* The execution lock, taken only in an idle pause (wait_idle) and when no
 * kernel runs: tuning never delays an application's kernel by more than
 * one batch. 0, or wait_idle's -1 or 1. */
static int lock_when_idle(tlm_runtime *rt) {
  for (;;) {
    int s = wait_idle(rt);
    if (s) return s;
    if (pthread_mutex_trylock(&rt->exec_lock) == 0) return 0;
  }
}

static void restore_inputs(tlm_bg_job *j, void *const *pristine) {
  for (int i = 0; i < j->nbufs; i++)
    if (pristine[i]) memcpy(j->bufs[i], pristine[i], j->sizes[i]);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#define TUNE_ROUNDS 5

/* Compiles the candidates privately (not in the kernel table, not on
 * disk), checks each against the shape's current kernel (the pick) on the
 * job's copies, times them side by side while no kernel of the
 * application runs, and gives the plan the fastest (more than 2% faster
 * than the pick) through the kernel table, as the background build does.
 * The plan is stored on disk as measured either way. 1 when it gave way
 * to a queued build (the job is to be queued again, its in-place operands
 * restored), else 0. */
static int bg_tune(tlm_runtime *rt, tlm_bg_job *j) {
  double t0 = now_ms();
  char err[TLM_ERRMSG];
  tlm_schedule pick;
  memset(&pick, 0, sizeof pick);
  int found = 0;
  pthread_rwlock_rdlock(&rt->map_lock);
  tlm_plan *p = tlm_map_get(&rt->plans, &j->key);
  if (p && atomic_load(&p->state) == TLM_ENTRY_READY && !p->provisional && !p->measured) {
    pick = p->sched;
    found = 1;
  }
  pthread_rwlock_unlock(&rt->map_lock);
  tlm_space s;
  if (!found || tlm_space_init(&s, &j->task, &rt->target)) return 0;
  static const int k_cap = TLM_TUNE_MAX_K;
  tlm_schedule cand[TLM_TUNE_MAX_K];
  int k = rt->cfg.tune_k < k_cap ? rt->cfg.tune_k : k_cap;
  int nc = tlm_engine_tune_candidates(rt, &s, &pick, k, j->key.hash_lo, cand, NULL);
  /* constant weights (a matmul's B declared with tlm_constant_add, a
   * channel-blocked convolution's): the job's private copy is declared
   * constant while it is tuned, so every candidate runs on weights packed
   * ahead, as the application's calls do, not packing them per call (the
   * candidates with packed B were charged the packing, and a blocked
   * convolution read unpacked weights through their strides). The range
   * lies in the job's own buffer: no caller's pointer can fall in it. */
  const void *cw = j->task.kind == TLM_OP_MATMUL && j->task.u.mm.b_const ? (const void *)j->args.mm.b
                   : j->task.kind == TLM_OP_CONV && j->task.u.conv.oc_blocks > 1
                       ? (const void *)j->args.conv.wei
                       : NULL;
  void *const_range = NULL;
  for (int i = 0; cw && i < j->nbufs; i++)
    if ((const char *)cw >= (const char *)j->bufs[i] &&
        (const char *)cw < (const char *)j->bufs[i] + j->sizes[i]) {
      pthread_mutex_lock(&rt->exec_lock);
      if (tlm_prepack_add_locked(rt, j->bufs[i], j->sizes[i]) == 0) const_range = j->bufs[i];
      pthread_mutex_unlock(&rt->exec_lock);
      break;
    }
  tlm_kernel *ks[TLM_TUNE_MAX_K];
  memset(ks, 0, sizeof ks);
  void *pristine[TUNE_MAX_BUFS];
  memset(pristine, 0, sizeof pristine);
  float *ref = NULL, *outp = NULL;
  size_t out_n = 0;
  int ok = 1, yield = 0;
  for (int i = 0; i < j->nbufs; i++) {
    if (j->is_in[i] && j->is_out[i]) { /* in place: restored before each run */
      pristine[i] = malloc(j->sizes[i]);
      ok &= pristine[i] != NULL;
      if (pristine[i]) memcpy(pristine[i], j->bufs[i], j->sizes[i]);
    }
    if (j->is_out[i] && !outp) outp = j->bufs[i], out_n = j->sizes[i] / sizeof(float);
  }
  ref = ok && outp ? malloc(out_n * sizeof(float)) : NULL;
  ok &= ref != NULL;
  /* build and check: the pick's output is the reference */
  double check_ms = 0;
  for (int i = 0; ok && i < nc; i++) {
    int w = wait_idle(rt); /* compiles too wait for a pause */
    if (w) {
      ok = 0, yield = w > 0;
      break;
    }
    static atomic_int serial;
    tlm_kernel *kk = calloc(1, sizeof *kk);
    if (!kk) break;
    kk->task = j->task;
    kk->sched = cand[i];
    tlm_key_schedule(&kk->entry.key, &j->task, &rt->target, &cand[i]);
    snprintf(kk->name, sizeof kk->name, "tlm_tune_%d", atomic_fetch_add(&serial, 1));
    if (build_kernel(rt, kk, 0, err, sizeof err) != TLM_OK) {
      free(kk);
      if (i == 0) ok = 0;
      continue;
    }
    atomic_store(&kk->entry.state, TLM_ENTRY_READY);
    ks[i] = kk;
    restore_inputs(j, pristine);
    if ((w = lock_when_idle(rt)) != 0) {
      ok = 0, yield = w > 0;
      break;
    }
    double te = now_ms();
    tlm_status st = exec_locked(rt, kk, &j->task, &j->args, err, sizeof err);
    te = now_ms() - te;
    pthread_mutex_unlock(&rt->exec_lock);
    if (i == 0) {
      check_ms = te;
      if (st != TLM_OK) ok = 0;
      else memcpy(ref, outp, out_n * sizeof(float));
      continue;
    }
    /* the same answer as the pick's, up to rounding in another order */
    if (st != TLM_OK || !tlm_engine_outputs_agree(outp, ref, out_n)) {
      tlm_log(rt, TLM_LOG_WARN, "tuning: candidate %d's output differs from the pick's: dropped",
              i);
      tlm_engine_kernel_free(rt, kk);
      ks[i] = NULL;
    }
  }
  /* side-by-side timing: rounds over the candidates, each a batch of calls
   * long enough to time (about 0.2 ms), the execution lock held per batch */
  double med[TLM_TUNE_MAX_K] = {0};
  int best = 0;
  if (ok) {
    int reps = check_ms > 0 ? (int)(0.2 / check_ms) : 100;
    reps = reps < 1 ? 1 : reps > 1000 ? 1000 : reps;
    double times[TLM_TUNE_MAX_K][TUNE_ROUNDS] = {{0}};
    for (int r = 0; ok && r < TUNE_ROUNDS; r++)
      for (int i = 0; ok && i < nc; i++) {
        if (!ks[i]) continue;
        restore_inputs(j, pristine);
        int w = lock_when_idle(rt);
        if (w) {
          ok = 0, yield = w > 0;
          break;
        }
        double ts = now_ms();
        for (int q = 0; q < reps; q++) exec_locked(rt, ks[i], &j->task, &j->args, err, sizeof err);
        times[i][r] = (now_ms() - ts) / reps;
        pthread_mutex_unlock(&rt->exec_lock);
      }
    for (int i = 0; ok && i < nc; i++) {
      if (!ks[i]) continue;
      qsort(times[i], TUNE_ROUNDS, sizeof times[i][0], cmp_double);
      med[i] = times[i][TUNE_ROUNDS / 2];
      if (med[i] < med[best]) best = i;
    }
    if (ok && best != 0 && !(med[best] < 0.98 * med[0])) best = 0; /* noise keeps the pick */
  }
  for (int i = 0; i < nc; i++) tlm_engine_kernel_free(rt, ks[i]);
  if (yield) restore_inputs(j, pristine); /* as queued, for the next try */
  for (int i = 0; i < j->nbufs; i++) free(pristine[i]);
  free(ref);
  if (const_range) { /* and its packed copies freed */
    pthread_mutex_lock(&rt->exec_lock);
    tlm_prepack_remove_locked(rt, const_range);
    pthread_mutex_unlock(&rt->exec_lock);
  }
  if (!ok) return yield;
  /* the winner into the kernel table, then the plan, as bg_build does */
  tlm_kernel *nk = NULL;
  if (best != 0 && get_kernel(rt, &j->task, &cand[best], &nk, NULL, err, sizeof err) != TLM_OK)
    best = 0;
  tlm_key kkey;
  tlm_key_schedule(&kkey, &j->task, &rt->target, &cand[best]);
  int improved = 0;
  pthread_rwlock_wrlock(&rt->map_lock);
  pthread_mutex_lock(&rt->exec_lock);
  p = tlm_map_get(&rt->plans, &j->key);
  nk = (tlm_kernel *)tlm_table_get(&rt->kernels, &kkey);
  if (p && atomic_load(&p->state) == TLM_ENTRY_READY && !p->provisional &&
      same_sched(&p->sched, &pick)) {
    if (best != 0 && nk) {
      p->kernel = nk; /* nk may be EVICTED: the plan then rebuilds it on its next run */
      p->sched = cand[best];
      atomic_fetch_add(&rt->epoch, 1);
      improved = 1;
    }
    p->measured = 1;
  }
  pthread_mutex_unlock(&rt->exec_lock);
  pthread_rwlock_unlock(&rt->map_lock);
  if (rt->disk) {
    char ts[160];
    tlm_task_str(&j->task, ts, sizeof ts);
    tlm_disk_store_plan(rt->disk, &j->key, &cand[improved ? best : 0], ts,
                        med[improved ? best : 0] * 1e6);
  }
  atomic_fetch_add(&rt->tunes, 1);
  if (improved) atomic_fetch_add(&rt->tune_improved, 1);
  atomic_add_double(&rt->tune_ms, now_ms() - t0);
  if (rt->cfg.verbose >= TLM_LOG_INFO) {
    char ts[160], ss[512];
    tlm_log(rt, TLM_LOG_INFO, "tuned %s: %d candidates%s, %s [%s] %.2f us (pick %.2f us), %.0f ms",
            tlm_task_str(&j->task, ts, sizeof ts), nc,
            const_range ? " on weights packed ahead" : "", improved ? "new kernel" : "pick kept",
            tlm_schedule_str(&s, &cand[improved ? best : 0], ss, sizeof ss),
            med[improved ? best : 0] * 1e3, med[0] * 1e3, now_ms() - t0);
  }
  return 0;
}
