/* task.c - helpers over canonical tasks. */
#include "task.h"

#include <stdio.h>

int64_t tlm_task_batch_total(const tlm_task *t) {
  int64_t n = 1;
  if (t->kind == TLM_OP_MATMUL)
    for (int i = 0; i < t->u.mm.nbatch; i++) n *= t->u.mm.batch[i];
  return n;
}

double tlm_task_flops(const tlm_task *t) {
  if (tlm_task_is_row(t)) return 5.0 * (double)t->u.row.rows * (double)t->u.row.cols;
  const tlm_matmul_task *m = &t->u.mm;
  return 2.0 * (double)tlm_task_batch_total(t) * (double)m->M * (double)m->N * (double)m->K;
}

char *tlm_task_str(const tlm_task *t, char *buf, int cap) {
  if (tlm_task_is_row(t)) {
    static const char *names[] = {"", "", "softmax", "layernorm", "rmsnorm"};
    snprintf(buf, (size_t)cap, "%s:%lldx%lld%s", names[t->kind], (long long)t->u.row.rows,
             (long long)t->u.row.cols, t->u.row.causal ? "_causal" : "");
    return buf;
  }
  static const char *acts[] = {"", "_relu", "_gelu", "_silu"};
  const tlm_matmul_task *m = &t->u.mm;
  char bp[80] = "";
  int l = 0;
  for (int i = 0; i < m->nbatch; i++)
    l += snprintf(bp + l, sizeof bp - (size_t)l, "%lldx", (long long)m->batch[i]);
  snprintf(buf, (size_t)cap, "%s%lldx%lld:%s%lldx%lld%s%s%s", bp, (long long)m->M,
           (long long)m->K, bp, (long long)m->K, (long long)m->N,
           m->has_bias ? "_bias" : "", (m->act > 0 && m->act < 4) ? acts[m->act] : "",
           m->has_residual ? "_residual" : "");
  return buf;
}
