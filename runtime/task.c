/* task.c - helpers over canonical tasks. */
#include "task.h"

#include "family.h"

#include <string.h>

#include <stdio.h>

int64_t tlm_task_batch_total(const tlm_task *t) {
  int64_t n = 1;
  if (t->kind == TLM_OP_MATMUL)
    for (int i = 0; i < t->u.mm.nbatch; i++) n *= t->u.mm.batch[i];
  return n;
}

double tlm_task_flops(const tlm_task *t) {
  const tlm_family *f = tlm_family_of(t);
  return f ? f->flops(t) : 0.0;
}

char *tlm_task_str(const tlm_task *t, char *buf, int cap) {
  const tlm_family *f = tlm_family_of(t);
  if (f)
    f->str(t, buf, cap);
  else
    snprintf(buf, (size_t)cap, "kind%d", (int)t->kind);
  return buf;
}

void tlm_task_clear_runtime(tlm_task *t) {
  const tlm_family *f = tlm_family_of(t);
  if (f) f->clear_runtime(t);
}
