/* eval.h - evaluation of the model against the rule and random search on
 * measured kernels (train/; `tlm eval`). */
#ifndef TLM_TRAIN_EVAL_H
#define TLM_TRAIN_EVAL_H

#define TLM_EVAL_MAX_FILES 64

/* One evaluation (`tlm eval`; every option is documented in its usage
 * text, tools/pipeline.c). */
typedef struct tlm_eval_opts {
  int k;                   /* the model's top k, measured (TLM-k); 0: TLM-1 only */
  int nrand;               /* best of this many random schedules; 0: none */
  int threads;             /* the runtime's worker threads */
  int max_tasks, skip;     /* at most max_tasks tasks, after skipping `skip` */
  int heldout;             /* the held-out families of the workload task list */
  int rounds;              /* side-by-side timing rounds of the finalists */
  double max_gflop;        /* leave out tasks above this many GFLOP (0: no limit) */
  double rule_bonus;       /* the rule's logit bonus; NAN: the model's own */
  double margin;           /* sentence margin (nats, >= 0; 0: plain greedy); NAN: the model's */
  const char *model;       /* the model file (NULL: the runtime's default) */
  const char *json;        /* the report written (NULL: none) */
  const char *shared;      /* the shared/ folder */
  const char *rcache_path; /* random searches kept between runs (NULL: none) */
  const char *family;      /* only families containing this text */
  const char *files[TLM_EVAL_MAX_FILES]; /* task files (benchdnn or task text) */
  int nfiles;
  const struct tlm_task_spec *specs; /* and these tasks (not owned; NULL: none) */
  int nspecs;
} tlm_eval_opts;

/* The defaults of `tlm eval`. */
void tlm_eval_opts_init(tlm_eval_opts *o);

/* 0, or -1 when an option is out of range or there are no tasks to name. */
int tlm_eval_opts_check(const tlm_eval_opts *o);

/* Evaluates (o checked), prints the table and writes the report: 0, or 1
 * with a message on stderr. */
int tlm_eval_run(const tlm_eval_opts *o);

#endif
