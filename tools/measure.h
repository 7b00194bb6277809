/* measure.h - warm timing of a compiled kernel (tools). */
#ifndef TLM_TOOLS_MEASURE_H
#define TLM_TOOLS_MEASURE_H

#include "runtime/engine.h"

/* CLOCK_MONOTONIC in nanoseconds. */
double tlm_now_ns(void);
/* qsort comparator for doubles, ascending. */
int tlm_cmp_double(const void *a, const void *b);

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

/* The kernel `tlm run --schedule S` asks for: auto (what tlm_run does),
 * rule, random:SEED or explicit decisions. Prints its own error to stderr;
 * returns the status (TLM_ERR_INVALID_ARGUMENT for a bad S). */
tlm_status tlm_run_pick_kernel(tlm_runtime *rt, const tlm_task *task, const tlm_space *space,
                               const char *sched_text, tlm_schedule *sched,
                               const tlm_kernel **k, double *schedule_ms);

#endif
