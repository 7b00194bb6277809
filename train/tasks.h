/* tasks.h - the task list for data collection and evaluation, drawn from
 * ../shared/workloads (benchdnn matmul files, models.json layers at prefill
 * lengths from the Azure trace and decode lengths 1..64, attention batched
 * matmuls), deduplicated by canonical text. */
#ifndef TLM_TRAIN_TASKS_H
#define TLM_TRAIN_TASKS_H

#include <stdint.h>

#include "conv_problem.h"
#include "problem.h"
#include "runtime/kernel_abi.h"
#include "runtime/task.h"

/* 2-D pooling of N x C images (kernel 0: global along that axis). */
typedef struct tlm_pool_spec {
  int alg; /* tlm_pool_alg */
  int64_t n, c, ih, iw, oh, ow;
  int kh, kw, sh, sw, ph, pw;
} tlm_pool_spec;

/* A matmul task (op TLM_OP_MATMUL: d, epi), a convolution (TLM_OP_CONV:
 * cp, layout with its natural weight layout, cepi), a pooling (TLM_OP_POOL:
 * pool, layout) or an elementwise op (TLM_OP_ELTWISE: rows x cols, act,
 * bin; z of x's shape). */
typedef struct tlm_task_spec {
  int op;
  tlm_mm_desc d;
  tlm_matmul_desc epi;
  tlm_conv_prb cp;
  tlm_layout layout;
  tlm_conv_epi cepi;
  tlm_pool_spec pool;
  int64_t rows, cols;
  int act, bin;
  char family[48]; /* split unit, e.g. "gpt2-124m:prefill", "benchdnn:bert" */
  char text[200];  /* canonical text: descriptor + transposes + epilogue */
} tlm_task_spec;

/* A spec's runnable problem: random tensors, the canonical task and the
 * kernel arguments. */
/* Floating-point operations of a task (pooling: one per window element
 * read; elementwise: one per element). */
double tlm_task_spec_flop(const tlm_task_spec *s);

typedef struct tlm_spec_problem {
  int op;
  tlm_problem mm;
  tlm_conv_problem cv;
  float *buf[4];    /* pooling and eltwise: x, z, y, reference */
  int64_t nout;     /* their output elements */
  tlm_task task;
  tlm_mm_args mm_args;
  tlm_conv_args cv_args;
  tlm_pool_args pool_args;
  tlm_row_args row_args;
  const void *args; /* the one of the op */
} tlm_spec_problem;

/* Builds it (random data from seed). Returns 0, -1 (too large, out of
 * memory, or it does not validate). */
int tlm_spec_problem_make(const tlm_task_spec *s, uint64_t seed, tlm_spec_problem *p);
void tlm_spec_problem_free(tlm_spec_problem *p);
/* Largest relative error of `points` sampled outputs against the
 * reference (tlm_problem_check_sampled / tlm_conv_problem_check), -1 if
 * it cannot be checked. */
double tlm_spec_problem_check(const tlm_spec_problem *p, int points, uint64_t seed);
/* Tolerance of that check (by the reduction length). */
double tlm_spec_problem_tolerance(const tlm_spec_problem *p);

/* Largest task measured, in FLOP; larger ones have M reduced to fit. */
#define TLM_TASK_MAX_FLOP 4.0e9
/* Largest operand footprint (A + B + C bytes); larger batched tasks have
 * their outer batch dim halved until they fit. */
#define TLM_TASK_MAX_BYTES (64.0 * 1024 * 1024)

/* Builds the list (deterministic for a seed). *out is malloc'd. Returns the
 * count, or -1 with a message. With tlm_tasks_set_synthetic(n) before, the
 * layers of n synthetic transformer models follow (families
 * "synth<i>-d<d_model>:<phase>", training families; train/tasks.c says how
 * they are drawn). Not thread-safe. */
void tlm_tasks_set_synthetic(int n);
/* With tlm_tasks_set_synthetic_conv(n), the convolutions of n synthetic
 * mobile networks (inverted-residual blocks) follow too (families
 * "synthconv<i>-r<input>:<kind>", training families). Not thread-safe. */
void tlm_tasks_set_synthetic_conv(int n);
int tlm_tasks_build(const char *shared_dir, uint64_t seed, tlm_task_spec **out, char *err,
                    int errcap);

/* Tasks of one benchdnn matmul or convolution shape file (family
 * "file:<name>"; convolutions in NHWC with bias and ReLU at minibatch 1),
 * reduced and deduplicated like tlm_tasks_build. Returns the count or -1. */
int tlm_tasks_from_file(const char *path, tlm_task_spec **out, char *err, int errcap);
/* The same, and (count non-NULL) *count malloc'd: how many lines of the
 * file gave each task (a repeated line, or lines equal once reduced, give
 * one task). */
int tlm_tasks_from_file_counted(const char *path, tlm_task_spec **out, int **count, char *err,
                                int errcap);
/* With tlm_tasks_set_exact(1) before, tlm_tasks_from_file keeps every
 * task at its extents (no reduction of batch or M: `tlm tune` must tune
 * the shapes applications run). Not thread-safe. */
void tlm_tasks_set_exact(int on);

/* Reorders tasks round-robin over their families (first task of each
 * family, then the second of each, ...), keeping the order within a family.
 * Returns 0, -1 out of memory. */
int tlm_tasks_interleave(tlm_task_spec *tasks, int n);

/* The held-out split (tlm eval --heldout, tlm tune --heldout): the tasks of
 * tlm_tasks_build(shared_dir, 1) whose family is held out
 * (tlm_family_heldout), families in turn (tlm_tasks_interleave) so a prefix
 * samples them all. *out malloc'd. Returns the count, or -1 with a message
 * in err. */
int tlm_tasks_heldout(const char *shared_dir, tlm_task_spec **out, char *err, int errcap);

/* Canonical text of a spec into spec->text. */
void tlm_task_spec_text(tlm_task_spec *s);

/* The canonical task of a spec without allocating its tensors (the data
 * pointers are placeholders never dereferenced). Returns 0 or -1. */
int tlm_task_spec_task(const tlm_task_spec *s, tlm_task *task);

/* Parses the text written by tlm_task_spec_text. Returns 0 or -1. */
int tlm_task_spec_parse(const char *text, tlm_task_spec *s);

#endif
