/* measure.h - warm timing of a compiled kernel (train/: the collector,
 * evaluation, the tools and the benches share it). */
#ifndef TLM_TRAIN_MEASURE_H
#define TLM_TRAIN_MEASURE_H

#include "engine/engine.h"

/* CLOCK_MONOTONIC in nanoseconds. */
double tlm_now_ns(void);
/* qsort comparator for doubles, ascending. */
int tlm_cmp_double(const void *a, const void *b);

/* Median time (ns) per call of call(ctx), back-to-back calls batched to at
 * least 20 us, over about ms milliseconds (at least 3 and at most 200
 * batches); *lo and *hi are lowered / raised to the fastest and slowest
 * batch's. For library contenders (oneDNN, OpenBLAS, LIBXSMM). */
double tlm_time_calls(void (*call)(void *ctx), void *ctx, double ms, double *lo, double *hi);

/* Element offsets of batch o (row-major over the task's batch dims) into
 * a matmul's A, B and C. */
void tlm_mm_batch_offsets(const tlm_task *task, const tlm_mm_args *a, int64_t o, int64_t *oa,
                          int64_t *ob, int64_t *oc);

/* Writes `root` (a cJSON tree) as indented JSON to `path` through a
 * temporary file renamed over it: a failure leaves no partial file.
 * Returns 0, or -1 (nothing written). */
struct cJSON;
int tlm_json_save(const struct cJSON *root, const char *path);

/* Adds n numbers to the JSON object obj under the given names. */
void tlm_json_numbers(struct cJSON *obj, const char *const *names, const double *v, int n);

typedef struct tlm_timing {
  double median_ns, min_ns, max_ns; /* per call */
  int reps;                         /* timed samples */
} tlm_timing;

/* Times warm calls of k: one untimed call, then samples of back-to-back
 * calls lasting >= 20 us each, until >= 3 samples and min_time_ms have
 * passed (at most 200 samples or 2 s). A kernel whose first call takes
 * over 3x `give_up_ns` (and over 0.2 ms) gets a single sample: it is
 * ranked, not measured precisely. */
void tlm_time_kernel(tlm_runtime *rt, const tlm_kernel *k, const tlm_task *task,
                     const void *args, double min_time_ms, double give_up_ns,
                     tlm_timing *out);

/* Side-by-side timing of n kernels of one task (n <= TLM_SIDE_MAX): `rounds`
 * rounds (<= TLM_SIDE_ROUNDS), each timing every kernel for round_ms with
 * tlm_time_kernel (no give-up), in an order rotated by one per round so
 * that no kernel always follows the same one. out[i].median_ns is the
 * median of kernel i's per-round medians, min/max over all its samples,
 * reps the samples summed. Drift of the machine (another process, clock
 * changes) then hits every kernel alike, which separately timed kernels
 * do not get (design/MEASURING.md: compare side by side in one run). */
enum { TLM_SIDE_MAX = 32, TLM_SIDE_ROUNDS = 15 };
void tlm_time_side_by_side(tlm_runtime *rt, const tlm_kernel *const *k, int n,
                           const tlm_task *task, const void *args, int rounds, double round_ms,
                           tlm_timing *out);

/* The kernel `tlm run --schedule S` asks for: auto (what tlm_run does),
 * rule, random:SEED or explicit decisions. Prints its own error to stderr;
 * returns the status (TLM_ERR_INVALID_ARGUMENT for a bad S). */
tlm_status tlm_run_pick_kernel(tlm_runtime *rt, const tlm_task *task, const tlm_space *space,
                               const char *sched_text, tlm_schedule *sched,
                               const tlm_kernel **k, double *schedule_ms);

/* After a tlm_validate_* call that returned `validated` with message verr:
 * prints that error and returns it, or initializes *space for the task and
 * returns tlm_run_pick_kernel's status. */
tlm_status tlm_run_validated_kernel(tlm_runtime *rt, tlm_status validated, const char *verr,
                                    const tlm_task *task, tlm_space *space, const char *sched_text,
                                    tlm_schedule *sched, const tlm_kernel **k, double *schedule_ms);

/* `tlm run ... --vs S`: the picked kernel ka (schedule sa) and the kernel of
 * schedule text S timed side by side in alternating batches of about 20 ms
 * (2 x min_time seconds in all, at least 5 pairs); prints both medians and
 * the speed ratio A/B per batch pair. args: the task's kernel arguments
 * (tlm_mm_args, tlm_conv_args, ...). Returns 0, or 1 when S is not a
 * schedule of the task or a kernel fails. */
int tlm_run_vs(tlm_runtime *rt, const tlm_task *task, const tlm_space *space, const void *args,
               const tlm_schedule *sa, const tlm_kernel *ka, const char *vs_text, double min_time);

/* `tlm run ... --compile-repeats N`: compiles the schedule N more times in
 * this (warm) process, private kernels neither cached nor run, and prints
 * the median, minimum and maximum compile time and the median of each
 * phase (IR, passes, object emission, linking), ms. med_ms (may be NULL)
 * receives the median. Returns 0, or 1 when a compile fails. */
int tlm_run_compile_repeats(tlm_runtime *rt, const tlm_task *task, const tlm_schedule *sched,
                            int n, double *med_ms);

/* Operands for a task alone (a task read back from a cache key: no
 * tensors, only its extents and strides): one buffer per operand spanning
 * what the task's strides reach, filled with values in [-1, 1) from
 * `seed`, and the kernel arguments pointing into them. *args points into
 * *o (one of the kernel_abi.h structs, by family). Returns 0, or -1 (out
 * of memory, or more than max_bytes in all). */
typedef struct tlm_task_operands {
  tlm_any_args args;
  float *buf[7];
  size_t n[7];   /* floats in buf[i] */
  int out;       /* index of the output buffer */
  int nbuf;
} tlm_task_operands;
int tlm_task_operands_make(const tlm_task *task, uint64_t seed, size_t max_bytes,
                           tlm_task_operands *o);
void tlm_task_operands_free(tlm_task_operands *o);

/* A runtime for a tool: the environment's configuration (tlm_config_init),
 * with `threads` workers when threads >= 0, and cache_dir and model_path
 * when not NULL ("none" turns either off). NULL after printing
 * "<who>: <reason>" on stderr. */
tlm_runtime *tlm_tool_runtime(const char *who, int threads, const char *cache_dir,
                              const char *model_path);

#endif
