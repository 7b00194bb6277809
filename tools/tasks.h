/* tasks.h - the task list for data collection and evaluation, drawn from
 * ../shared/workloads (benchdnn matmul files, models.json layers at prefill
 * lengths from the Azure trace and decode lengths 1..64, attention batched
 * matmuls), deduplicated by canonical text. */
#ifndef TLM_TOOLS_TASKS_H
#define TLM_TOOLS_TASKS_H

#include <stdint.h>

#include "problem.h"
#include "runtime/task.h"

typedef struct tlm_task_spec {
  tlm_mm_desc d;
  tlm_matmul_desc epi;
  char family[48]; /* split unit, e.g. "gpt2-124m:prefill", "benchdnn:bert" */
  char text[160];  /* canonical text: descriptor + transposes + epilogue */
} tlm_task_spec;

/* Largest task measured, in FLOP; larger ones have M reduced to fit. */
#define TLM_TASK_MAX_FLOP 4.0e9
/* Largest operand footprint (A + B + C bytes); larger batched tasks have
 * their outer batch dim halved until they fit. */
#define TLM_TASK_MAX_BYTES (64.0 * 1024 * 1024)

/* Builds the list (deterministic for a seed). *out is malloc'd. Returns the
 * count, or -1 with a message. */
int tlm_tasks_build(const char *shared_dir, uint64_t seed, tlm_task_spec **out, char *err,
                    int errcap);

/* Tasks of one benchdnn matmul shape file (family "file:<name>"), reduced
 * and deduplicated like tlm_tasks_build. Returns the count or -1. */
int tlm_tasks_from_file(const char *path, tlm_task_spec **out, char *err, int errcap);

/* Reorders tasks round-robin over their families (first task of each
 * family, then the second of each, ...), keeping the order within a family.
 * Returns 0, -1 out of memory. */
int tlm_tasks_interleave(tlm_task_spec *tasks, int n);

/* Canonical text of a spec into spec->text. */
void tlm_task_spec_text(tlm_task_spec *s);

/* The canonical task of a spec without allocating its tensors (the data
 * pointers are placeholders never dereferenced). Returns 0 or -1. */
int tlm_task_spec_task(const tlm_task_spec *s, tlm_task *task);

/* Parses the text written by tlm_task_spec_text. Returns 0 or -1. */
int tlm_task_spec_parse(const char *text, tlm_task_spec *s);

#endif
