/* search.h - a search-based tuner over tlm's own schedule space (train/).
 *
 * The contender of `tlm bench kernels` that stands for Ansor and
 * MetaSchedule: the same space, code generator and kernels as TLM-1, so a
 * comparison with it isolates how the schedule was chosen. Evolutionary
 * search: a population of the fastest measured schedules, children by
 * mutation (one or two decisions redrawn) and crossover (each decision from
 * one of two parents), every child rebuilt through the space's walker so it
 * is always a point of the space (a value that is no longer a candidate
 * after an earlier change takes the nearest candidate). A cost model
 * fitted online to every trial measured so far (ridge regression of log
 * time on the decisions: log2 of each value and a one-hot of each (point,
 * value) pair, hashed) ranks the children; the best predicted of each
 * generation are measured, plus one drawn at random (exploration). Nothing
 * is measured twice. Deterministic for a seed and a measurement sequence
 * (and no wall-time budget).
 */
#ifndef TLM_TRAIN_SEARCH_H
#define TLM_TRAIN_SEARCH_H

#include <stdint.h>

#include "runtime/space.h"

/* Measures n schedules (compile, check, time): writes each one's time in ns
 * to ns[i], INFINITY for one that failed or gave a wrong answer. A batch
 * lets the caller compile several at once. */
typedef void (*tlm_search_measure_fn)(void *ctx, const tlm_schedule *s, int n, double *ns);

typedef struct tlm_search_opts {
  int trials;     /* schedules measured at most (>= 1) */
  uint64_t seed;  /* random draws (splitmix64) */
  int init;       /* first generation: the rule plus init - 1 random (default 16) */
  int batch;      /* schedules measured per later generation (default 8) */
  int children;   /* children ranked by the model per generation (default 256) */
  double budget_s; /* wall time: no generation starts after this many seconds
                      from the first (0: none, the default; the first always
                      runs). Without one the search is deterministic. */
} tlm_search_opts;

/* Defaults above for a budget of `trials`. */
void tlm_search_opts_init(tlm_search_opts *o, int trials, uint64_t seed);

typedef struct tlm_search_result {
  tlm_schedule best;  /* the fastest measured (n = 0 when nothing ran) */
  double best_ns;     /* its time, INFINITY if none */
  int measured;       /* distinct schedules measured (< trials when the space
                         has fewer, or when no new child could be made) */
  int best_trial;     /* the trial (1-based) that measured `best` */
  int budget_hit;     /* 1: stopped by budget_s before `trials` */
  double *curve;      /* curve[i]: best time after i + 1 trials; `measured`
                         entries, malloc'd, owned by the caller (free) */
} tlm_search_result;

/* Runs the search on space s. Returns 0, or -1 out of memory (then
 * *r holds what was found before). */
int tlm_search_run(const tlm_space *s, const tlm_search_opts *o, tlm_search_measure_fn measure,
                   void *ctx, tlm_search_result *r);

#endif
