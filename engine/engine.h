/* engine.h - the dispatcher that ties space, scheduler, lowering, JIT and
 * cache together, and the runtime object (internal; tools and tests use it
 * to run chosen schedules). */
#ifndef TLM_RUNTIME_ENGINE_H
#define TLM_RUNTIME_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "../cache/map.h"
#include "../cache/table.h"
#include "../jit/jit.h"
#include "../lm/model.h"
#include "../runtime/kernel_abi.h"
#include "../runtime/loopnest.h"
#include "../runtime/space.h"
#include "../runtime/target.h"
#include "../runtime/task.h"
#include "../runtime/threadpool.h"
#include "tlm.h"

#define TLM_ERRMSG 1024

/* States of cache entries. A BUILDING entry has one builder; everyone
 * else who needs it waits (single flight). FAILED entries are rebuilt by
 * the next caller (a failure is reported, never cached for good). */

/* A compiled kernel, shared by every task with its schedule key. Kernel
 * structs live until tlm_destroy; eviction frees their JIT code only. */
typedef struct tlm_kernel {
  /* key (the schedule key), state, CLOCK bit, resident bytes: the kernel
   * table's entry (cache/table.h); first, so an entry is its kernel */
  tlm_table_entry entry;
  void *fn;              /* tlm_mm_kernel_fn or tlm_row_kernel_fn by the
                            task's kind; valid while state is READY */
  tlm_schedule sched;
  ln_nest nest;
  int64_t scratch_bytes; /* per thread */
  double compile_ms;     /* codegen + optimization + native code, or disk load */
  char name[48];
  tlm_task task;         /* a task of this key, to rebuild after eviction */
  tlm_jit_code *code;
  size_t code_bytes;     /* object code size */
  int from_disk;
  int generic;           /* 1: a tier-0 kernel of generic/ (no code of its
                            own: fn is that ISA's build, run on task's
                            static fields), schedule tlm_engine_generic_sched */
} tlm_kernel;
_Static_assert(offsetof(tlm_kernel, entry) == 0, "a table entry is its kernel");

/* What a shape maps to: its schedule and the kernel that runs it. */
typedef struct tlm_plan {
  /* under map_lock (and exec_lock when it changes after being READY:
   * tlm_engine_rerun reads it under exec_lock only) */
  tlm_kernel *kernel;
  int provisional; /* 1: another shape's kernel until the background build */
  /* wall time its calls have spent on the provisional kernel, in ns: the
   * background thread builds the shape with the most first (bg_pick) */
  atomic_uint_fast64_t provisional_ns;
  tlm_schedule sched;
  double schedule_ms;
  int by_model;  /* 1: the language model chose the schedule */
  int from_disk; /* 1: the schedule came from the disk cache */
  int measured;  /* 1: chosen by timing (TLM_TUNE, tlm tune), here or on disk */
  atomic_int tune_state; /* 1: a tuning job was queued (tlm_engine_run) */
  tlm_key key;   /* shape key */
  _Atomic int state;
  atomic_int used;
} tlm_plan;

struct tlm_runtime {
  tlm_config cfg;
  char *cache_dir, *model_path;
  /* TLM_SCHEDULE_OVERRIDE at tlm_create (NULL: unset): schedules forced
   * for tasks by descriptor text (tlm_engine_schedule); part of the
   * scheduler id, so plans it forced never serve a runtime without it */
  char *sched_override;
  uint64_t sched_override_id; /* its text's hash (odd), 0 when unset: scheduler_id */
  tlm_target target;
  tlm_pool *pool;
  int nthreads;
  /* the workers' spin between parallel loops (tlm_config.spin_us), ns;
   * the pool spins TLM_POOL_SPIN_SHORT_NS instead while background
   * builds are pending (bg_spin_locked) */
  int64_t spin_ns;
  tlm_jit *jit;
  tlm_lm_model *model;     /* NULL: the default rule schedules */
  struct tlm_disk *disk;   /* NULL: no disk cache */
  /* plans by shape key, kernels by schedule key; lookups take the read
   * lock, every change the write lock */
  pthread_rwlock_t map_lock;
  tlm_map plans;
  /* the kernel table: kernels by schedule key, single flight, CLOCK
   * eviction down to cfg.cache_capacity kernels and cache_capacity_bytes
   * of object code (0 = unlimited) */
  tlm_table kernels;
  /* live plans, under map_lock */
  tlm_plan **plan_list;
  size_t nplans, capplans, plan_hand;
  /* waiting for builds: build_gen grows after every state change */
  pthread_mutex_t state_mu;
  pthread_cond_t state_cv;
  atomic_uint_fast64_t build_gen;
  /* kernel execution and per-thread scratch */
  pthread_mutex_t exec_lock;
  float **scratch;
  int64_t scratch_bytes;
  float *wcopy;               /* undeclared convolution weights on a line, per call */
  size_t wcopy_bytes;
  uint64_t serial;            /* unique per runtime ever created */
  int dry_run;                /* benchmarks only: skip kernel bodies */
  atomic_uint_fast64_t epoch; /* grows whenever eviction frees anything */
  /* background builds (cfg.async_compile): shapes (task, shape key) whose
   * plan runs a provisional kernel, built by one thread started on first
   * use (SCHED_IDLE: idle CPU time only) and, while that one is starved, a
   * rescue thread at nice 10 that exits when the queue is empty (bg_rescue:
   * 0 none, 1 running, 2 exited and not joined yet); bg_mu guards the
   * queue, bg_busy (jobs in progress; bg_busy_tune of them tuning jobs),
   * bg_tune_bytes (operand copies held by queued and running tuning jobs),
   * bg_rescue and bg_stop */
  pthread_mutex_t bg_mu;
  pthread_cond_t bg_cv;
  pthread_t bg_thread, bg_rescue_thread;
  int bg_started, bg_stop, bg_busy, bg_busy_tune, bg_rescue;
  size_t bg_tune_bytes;
  struct tlm_bg_job *bg_head, *bg_tail;
  /* CLOCK_MONOTONIC ns of the background's last progress: a job finished,
   * or one queued while none was queued or in progress; 0 before any */
  atomic_uint_fast64_t bg_progress_ns;
  atomic_int bg_rescue_running; /* bg_rescue == 1, read without bg_mu */
  /* the idle thread's kernel id (0 before it starts) and whether an
   * application thread has raised it to SCHED_OTHER at BG_NICE (possible
   * only with the privilege to: bg_raise_idle) */
  atomic_int bg_tid, bg_raised;
  /* the idle thread runs at BG_NICE_LOW (no privilege to lift it out of
   * SCHED_IDLE); its compiles and the rescue thread's stop at the next
   * stage boundary when their flag is set (tlm_jit_set_cancel: [0] the
   * idle thread's, [1] the rescue's), by tlm_destroy, or when the idle
   * thread at BG_NICE_LOW holds a build (bg_idle_build, under bg_mu) that
   * starves: the rescue thread then takes it */
  atomic_int bg_idle_lowprio;
  atomic_int bg_cancel[2];
  int bg_idle_build;
  uint64_t bg_idle_since_ns; /* when the idle thread took that build (bg_mu) */
  atomic_uint_fast64_t bg_rescues;
  /* each background thread's plan under construction (bg_build; [0] the
   * idle thread's, [1] the rescue thread's): no plan of the map, but its
   * kernel field, set and cleared under map_lock, keeps that kernel from
   * being freed by an eviction before the swap (free_unreferenced_locked) */
  tlm_plan bg_plan[2];
  atomic_uint_fast64_t provisional, upgrades;
  /* measured top-k (cfg.tune_k): shapes tuned by the background thread,
   * of which given a faster kernel, and its time */
  atomic_uint_fast64_t tunes, tune_improved;
  _Atomic double tune_ms;
  /* constant weights (tlm_constant_add) and the B matrices packed ahead
   * from them (engine/prepack.c), under exec_lock; the _pub copies are
   * for lock-free reads (statistics, the skip when nothing is declared) */
  struct tlm_const_range *consts; /* also under const_lock (read by tlm_run) */
  size_t nconsts, capconsts;
  pthread_rwlock_t const_lock;
  struct tlm_prepacked *prepacked;
  size_t nprepacked, capprepacked;
  size_t prepacked_bytes, prepack_limit;
  atomic_size_t nconsts_pub, prepacked_bytes_pub;
  atomic_uint_fast64_t prepacks;
  /* statistics */
  atomic_uint_fast64_t runs, hits, misses, waits, decodes, rule_schedules, compiles, compile_fail,
      evictions, disk_plan_hits, disk_kernel_hits;
  _Atomic double schedule_ms, compile_ms, disk_load_ms;
  /* GPU tensors (engine/gpu_engine.c): created by the first call with
   * them, freed by tlm_destroy */
  _Atomic(struct tlm_gpu_state *) gpu;
  /* compile_ms by phase (build_kernel) */
  _Atomic double compile_ir_ms, compile_opt_ms, compile_emit_ms, compile_link_ms;
};

/* Background builds: init with the runtime; stop joins the thread (after
 * the build in progress, if any) and drops queued shapes; wait blocks
 * until the queue is empty and the thread idle. */
void tlm_engine_bg_init(tlm_runtime *rt);
void tlm_engine_bg_stop(tlm_runtime *rt);
void tlm_engine_bg_wait(tlm_runtime *rt);

/* Constant weights, all called with exec_lock held (engine/prepack.c).
 * add: 0, 1 when [data, data + bytes) overlaps a declared range, -1 out of
 * memory. remove: 0, 1 when no range starts at data; frees its copies.
 * lookup: the copy of B packed ahead for kernel k's nest when B lies in a
 * declared range (packed now if new and within prepack_limit), else NULL. */
int tlm_prepack_add_locked(tlm_runtime *rt, const void *data, size_t bytes);
int tlm_prepack_remove_locked(tlm_runtime *rt, const void *data);
const float *tlm_prepack_lookup_locked(tlm_runtime *rt, const tlm_kernel *k, const tlm_task *task,
                                       const tlm_mm_args *a);
void tlm_prepack_free_all(tlm_runtime *rt);

/* 1 when B's view (a->b through a->sb over task's extents) lies inside a
 * declared constant range: the task's b_const. Takes const_lock to read;
 * any thread, no other lock needed. */
int tlm_prepack_b_constant(tlm_runtime *rt, const tlm_task *task, const tlm_mm_args *a);

/* Channel-blocked convolutions (tlm_conv_task.oc_blocks, api/tlm.c):
 * constant: 1 when the dense weights of t (OCg * G output channels) lie
 * inside a declared constant range (any thread; takes const_lock).
 * lookup (exec_lock held): the weights of the blocked task packed per
 * block, [block][kd][kh][kw][icg][OCg], packed now if new and within
 * prepack_limit; NULL when they cannot be (the blocks then read the
 * caller's weights through their own strides). */
int tlm_prepack_conv_constant(tlm_runtime *rt, const tlm_conv_task *t, const float *wei);
const float *tlm_prepack_conv_lookup_locked(tlm_runtime *rt, const tlm_task *task,
                                            const float *wei);

/* A direct convolution's weights (t not in channel blocks; strides sw as
 * in tlm_conv_args) copied to a 64-byte boundary, the same layout, when
 * they lie inside a declared constant range and start off one: made on
 * first use within prepack_limit and kept until the range is removed
 * (exec_lock held). NULL when they are aligned, not constant, or the copy
 * does not fit: the kernel then reads the caller's weights. */
const float *tlm_prepack_conv_aligned_locked(tlm_runtime *rt, const tlm_conv_task *t,
                                             const float *wei, const int64_t sw[5]);

/* Floats from a convolution's first weight to its last through strides
 * sw (tlm_conv_args) when the weights fill that span (dense in some order
 * of their dims); 0 when they leave gaps, a stride is negative or the span
 * overflows. */
int64_t tlm_conv_weight_span(const tlm_conv_task *t, const int64_t sw[5]);

/* Logs a formatted line at `level` through the runtime's sink. */
void tlm_log(const tlm_runtime *rt, tlm_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Runs a task: the cached plan and kernel (the hit path takes the map's
 * read lock only), or scheduled and compiled now with single flight. On
 * success *plan and *epoch tell the caller what ran, for tlm_engine_rerun. */
/* *tune_out (when not NULL) is set to 1 when the caller should queue a
 * tuning job for this shape (cfg.tune_k > 0, its plan is its own, not
 * measured, and nobody queued one before): tlm_engine_tune_enqueue. */
tlm_status tlm_engine_run(tlm_runtime *rt, const tlm_task *task, const void *args,
                          tlm_plan **plan_out, uint64_t *epoch_out, int *tune_out, char *err,
                          int errcap);

/* Runs `plan` again without any lookup, if nothing was evicted since
 * `epoch` (checked under the execution lock, which eviction holds).
 * Returns 1 when it ran, 0 when the caller must take tlm_engine_run. */
int tlm_engine_rerun(tlm_runtime *rt, tlm_plan *plan, uint64_t epoch, const tlm_task *task,
                     const void *args);

/* The plan for a task, built if missing (for tools). The pointer stays
 * valid until the entry is evicted, which only a capacity can cause. */
tlm_status tlm_engine_plan(tlm_runtime *rt, const tlm_task *task, const tlm_plan **out,
                           char *err, int errcap);

/* The kernel for a given schedule of a task (cached by schedule key).
 * Without a capacity it stays until tlm_destroy; with one, only until the
 * next kernel is built (no plan holds it: eviction may then free it
 * whole). */
tlm_status tlm_engine_kernel(tlm_runtime *rt, const tlm_task *task,
                             const tlm_schedule *sched, tlm_kernel **out, char *err,
                             int errcap);

/* Runs a kernel over the runtime's threads. */
tlm_status tlm_engine_exec(tlm_runtime *rt, const tlm_kernel *k, const tlm_task *task,
                           const void *args, char *err, int errcap);

/* The optimized LLVM IR text of a schedule (for tests and `tlm explain`).
 * *ir is malloc'd; the caller frees it. `optimize` 0 gives the IR as
 * generated. */
tlm_status tlm_engine_ir(tlm_runtime *rt, const tlm_task *task, const tlm_schedule *sched,
                         int optimize, char **ir, char *err, int errcap);

/* Chooses the schedule of a task: the language model when one is loaded
 * (falling back to the rule if decoding fails), else the default rule.
 * With the model, a kernel this runtime already has for the same operator
 * at other extents anchors the decoding (TLM_LM_REUSE_BONUS, lm/model.h;
 * the nearest in extents), so the schedule, and with it the kernel, may
 * depend on the shapes run before: the same calls in the same order give
 * the same schedules. A matching TLM_SCHEDULE_OVERRIDE entry (README)
 * replaces either. Returns 1 if the model chose it (0 when forced). */
int tlm_engine_schedule(tlm_runtime *rt, const tlm_space *space, tlm_schedule *out);

/* Stores `sched` in the disk cache as the measured plan of `task` (`tlm
 * tune`): under the shape key tlm_run computes for the task with this
 * runtime's scheduler (model checksum, or the rule), so a later runtime
 * with the same model, target and cache directory runs it without
 * decoding. kernel_ns (> 0): the winner's median time per call, kept in
 * the entry. Plans this runtime already holds in memory are not changed.
 * Returns TLM_OK, TLM_ERR_INVALID_ARGUMENT (sched is not a point of the
 * task's space, or kernel_ns <= 0), TLM_ERR_UNSUPPORTED (no disk cache) or
 * TLM_ERR_IO (the entry could not be written), with a message in err. */
tlm_status tlm_engine_store_measured_plan(tlm_runtime *rt, const tlm_task *task,
                                          const tlm_schedule *sched, double kernel_ns, char *err,
                                          int errcap);

/* Compiles a standalone kernel (not cached; the caller frees it with
 * tlm_engine_kernel_free) with M a run-time argument (static_m 0, what the
 * runtime uses) or a constant (1), for benchmarks. phase_ms (NULL: not
 * wanted) receives where the compile went, ms: IR, passes (with the target
 * machine), object emission, linking; (*out)->compile_ms is the whole. */
tlm_status tlm_engine_kernel_variant(tlm_runtime *rt, const tlm_task *task,
                                     const tlm_schedule *sched, int static_m, tlm_kernel **out,
                                     double phase_ms[4], char *err, int errcap);
void tlm_engine_kernel_free(tlm_runtime *rt, tlm_kernel *k);

/* The scheduler's identity in shape keys: the model's checksum (with the
 * kernel-reuse setting), 0 for the rule. */
uint64_t tlm_engine_scheduler_id(const tlm_runtime *rt);

/* Measured top-k (TLM_TUNE). Most candidates a tuning job times. */
#define TLM_TUNE_MAX_K TLM_TUNE_MAX

/* The candidates of a shape, `pick` (its current schedule) first: the
 * model's next best (top-k beam decoding, when the model covers the
 * task), then neighbours of the pick (one, then two decisions moved to an
 * adjacent candidate) up to k distinct points of the space. Deterministic
 * for a seed. Returns how many (>= 1); *n_model (may be NULL): how many of
 * them after the pick are the model's (out[1..*n_model]). */
int tlm_engine_tune_candidates(tlm_runtime *rt, const tlm_space *s, const tlm_schedule *pick,
                               int k, uint64_t seed, tlm_schedule *out, int *n_model);

/* 1 when a candidate kernel's output (n floats) is the reference's up to
 * rounding in another order: every element within 1e-3 of the
 * reference's largest magnitude (NaN where the reference has NaN). The
 * check of TLM_TUNE's candidates and of `tlm tune --from-cache`'s. */
int tlm_engine_outputs_agree(const float *out, const float *ref, size_t n);

/* Queues a tuning job for the shape of `task`: args (args_bytes, one of
 * the kernel_abi.h structs) point into bufs[0..nbufs), private copies of
 * the caller's operands (is_in: holds an input, restored before every run
 * when also is_out; is_out: written by the kernel) that the job owns from
 * here on, freeing them when it ends or is dropped. The background thread
 * compiles the candidates, checks each against the current kernel's
 * output, times them side by side only while no tlm_run executes a
 * kernel, and keeps the fastest (by more than 2%) for the shape; the
 * winner is stored in the disk cache as measured. tlm_destroy cancels it
 * at its next step. Returns 0, or -1 (the caller still owns bufs). */
int tlm_engine_tune_enqueue(tlm_runtime *rt, const tlm_task *task, const void *args,
                            size_t args_bytes, void **bufs, const size_t *sizes,
                            const int *is_in, const int *is_out, int nbufs);

/* A runtime from a checked configuration (api/tlm.c checks it): locks, the
 * kernel table, the target (restricted to config->isa), the worker threads
 * and their scratch, the JIT, the model (config->model_path, else the
 * adapted or shipped one), the disk cache (at most disk_cap_bytes; none when
 * cache_dir is "none" or unusable, with a warning). Returns TLM_OK with *out
 * set, or the status with a message in err (errcap bytes) and *out NULL:
 * TLM_ERR_OUT_OF_MEMORY, TLM_ERR_UNSUPPORTED (an ISA the CPU lacks),
 * TLM_ERR_THREAD, TLM_ERR_JIT, or a model load's status for a model named
 * explicitly. */
tlm_status tlm_engine_create(const tlm_config *config, int64_t disk_cap_bytes, tlm_runtime **out,
                             char *err, int errcap);

/* Stops the background thread, adds this runtime's counters to the disk
 * cache's lifetime ones, and frees everything (NULL: nothing). */
void tlm_engine_destroy(tlm_runtime *rt);

/* The runtime's counters (tlm_get_stats). Thread-safe. */
void tlm_engine_stats(const tlm_runtime *rt, tlm_stats *out);

/* Where `tlm adapt` writes, and tlm_create looks first for, the model
 * adapted to this machine at this target ISA:
 * <disk cache dir>/models/adapted-<isa>-<CPU identity, 16 hex digits>.tlmq
 * (tlm_target.cpu_id: vendor, family, model, stepping and brand). Returns
 * buf, or NULL when the runtime has no disk cache (cache_dir "none") or
 * the path does not fit in cap bytes. Thread-safe. */
char *tlm_adapted_model_path(const tlm_runtime *rt, char *buf, size_t cap);

/* The shipped models' folder: the first of its places (beside the
 * library, the install prefix, the source tree) that holds a *.tlmq file
 * (tlm_lm_list_dir), copied into dir. Returns 1, or 0 when there is none
 * or it does not fit in cap bytes. Thread-safe. */
int tlm_engine_shipped_models(char *dir, size_t cap);

/* Sets the calling thread's last error for rt ("<status text>: msg"), logs
 * it at TLM_LOG_ERROR when rt is not NULL, and returns st. */
tlm_status tlm_set_error(const tlm_runtime *rt, tlm_status st, const char *msg);

/* The calling thread's last error for rt ("" when its last error was for
 * another runtime, or none). Valid until the thread's next error. */
const char *tlm_error_message(const tlm_runtime *rt);

/* Clears the calling thread's last error if it is rt's; with forget != 0
 * also drops the thread's reference to rt (tlm_destroy). */
void tlm_error_clear(const tlm_runtime *rt, int forget);

#endif
