/* train.h - training the model from the records, quantizing it, and the
 * bound of a single unmeasured choice (train/). */
#ifndef TLM_TRAIN_TRAIN_H
#define TLM_TRAIN_TRAIN_H

#include <stdint.h>

#include "records.h"

/* One training run (`tlm train`; every option is documented in its usage
 * text, tools/pipeline.c): the records' training split, taught as
 * sentences to a new or given fp32 GPT-2, saved as a checkpoint. */
/* tlm train's --skip-family texts at most */
#define TLM_TRAIN_MAX_SKIP 64

/* tlm train's default --rule-margin: the gain over the rule below which a
 * task is taught the rule (timing noise). `tlm adapt`'s confirmation round
 * (train/collect.c) re-times exactly the wins above it. */
#define TLM_TRAIN_RULE_MARGIN 0.03

typedef struct tlm_train_opts {
  const char *records;     /* records files, comma-separated (required) */
  const char *out;         /* the checkpoint written (required) */
  const char *shared;      /* the shared/ folder (pretraining tasks) */
  int variants;            /* scaled copies of each task for pretraining (0..64) */
  int steps, pretrain;     /* fine-tuning and pretraining steps */
  int batch, layers, heads, width, threads;
  float lr;
  double rule_margin;      /* a target must beat the rule by this fraction
                            * (default TLM_TRAIN_RULE_MARGIN) */
  int mean_targets;        /* targets: the mean over every verification round */
  double near;             /* also teach verified schedules within this of the best */
  double equal_within;     /* the best's equals in noise */
  /* leave out the tasks whose family contains any of these texts, both
   * their measured targets and their --rule-prior sentences */
  const char *skip_family[TLM_TRAIN_MAX_SKIP];
  int nskip_family;
  int consensus;           /* among equals, the one agreeing most with the family */
  int drop_rule;           /* no task is taught the rule's schedule */
  double good;             /* teach schedules 1 + good times as fast as the rule */
  int good_k;              /* at most this many of them per task */
  uint64_t seed;
  const char *init;        /* fine-tune this checkpoint instead of a new model */
  double max_seconds;      /* stop after about this long (0: no limit) */
  int rule_prior;          /* teach the rule on the unmeasured training tasks */
  int rule_prior_variants; /* and on this many scaled copies of each (0..16) */
  int unmeasured_rule;     /* tasks whose records never timed the rule: 0 best, 1 skip, 2 rule */
  int max_round;           /* leave out verification rounds after this one */
  int epilogue_variants;   /* convolutions' targets also taught with other epilogues */
} tlm_train_opts;

/* The defaults of `tlm train`. */
void tlm_train_opts_init(tlm_train_opts *o);

/* 0, or -1 when an option is missing or out of range. */
int tlm_train_opts_check(const tlm_train_opts *o);

/* Trains (o checked): 0, or 1 with a message on stderr. */
int tlm_train_run(const tlm_train_opts *o);

/* Quantizes the fp32 checkpoint ckpt into the int8 model file `model`,
 * listing only the hardware prompts `only` (nonly of them; 0: all the
 * checkpoint's), with the sentence margin `margin` (nats) recorded in it
 * when it is not NaN (the margin it was gated at; model.h). 0, 1
 * (unreadable checkpoint, unwritable model), or 2 (a prompt of `only` is
 * not in the checkpoint). */
int tlm_quantize_run(const char *ckpt, const char *model, const char *const *only, int nonly,
                     double margin);

/* For every pair of verification rounds, how often round A's fastest
 * schedule beats the rule when timed again in round B (training tasks,
 * families containing skip_family left out when not NULL); prints a
 * table. 0, or 1 (unreadable records). */
int tlm_bound_run(const char *records, const char *skip_family);

#endif
