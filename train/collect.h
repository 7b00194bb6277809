/* collect.h - collection rounds: measured schedules of the workload tasks,
 * appended to a records file (train/). */
#ifndef TLM_TRAIN_COLLECT_H
#define TLM_TRAIN_COLLECT_H

#include <stdint.h>

#include "records.h"

/* One collection run (`tlm collect`; its options are documented in its
 * usage text, tools/pipeline.c). */
typedef struct tlm_collect_opts {
  const char *shared;     /* the shared/ folder with workloads/ */
  const char *out;        /* records file appended to */
  int schedules;          /* records per task (random: schedules incl. the rule) */
  int threads;            /* the runtime's worker threads */
  int max_tasks;          /* at most this many tasks */
  int list;               /* print the task list and stop */
  double min_time_ms;     /* timing per schedule */
  uint64_t seed;          /* task list and schedule draws */
  const char *propose;    /* a model's proposals round: the model file */
  const char *known_path; /* measured schedules for --mutate / --verify (NULL: out) */
  int topk;               /* proposals per task */
  int round_no;           /* the round's number */
  int mutate;             /* a local-search round: mutants per task */
  int verify;             /* a verification round: schedules re-timed per task */
  int mutants;            /* an adaptation round: mutants of the rule per task */
  const char *adapt;      /* an adaptation round: the model whose top-k is measured */
  double minutes;         /* start no task after this many minutes (0: no limit) */
} tlm_collect_opts;

/* The defaults of `tlm collect`. */
void tlm_collect_opts_init(tlm_collect_opts *o);

/* Derives the per-round settings (schedules per task) and checks the
 * combination: 0, or -1 when the options contradict or are out of range. */
int tlm_collect_opts_check(tlm_collect_opts *o);

/* Runs the collection (o checked): 0, or 1 with a message on stderr. */
int tlm_collect_run(const tlm_collect_opts *o);

#endif
