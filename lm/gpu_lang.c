/* gpu_lang.c - GPU schedules as sentences (see gpu_lang.h). */
#include "gpu_lang.h"

#include "vocab.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct out {
  char *buf;
  int cap, len;
} out;

static void word(out *o, const char *fmt, ...) {
  if (o->len >= o->cap - 1) return;
  if (o->len) o->buf[o->len++] = ' ';
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(o->buf + o->len, (size_t)(o->cap - o->len), fmt, ap);
  va_end(ap);
  o->len += n > 0 ? n : 0;
  if (o->len > o->cap - 1) o->len = o->cap - 1;
}

static int ilog2(uint64_t x) {
  int l = 0;
  while (x > 1) x >>= 1, l++;
  return l;
}

/* magnitude, quarter of the octave and trailing zero bits, as the CPU
 * prompt spells them */
static void extent(out *o, const char *axis, int64_t e) {
  int mag, frac, p2;
  tlm_lm_extent_words(e, 6, &mag, &frac, &p2);
  word(o, "ax:%s", axis);
  word(o, "mag:%d", mag);
  word(o, "frac:%d", frac);
  word(o, "p2:%d", p2);
}

static void decisions(out *o, const tlm_gpu_space *sp, const tlm_schedule *s) {
  for (int p = 0; p < sp->npoints; p++) word(o, "%s:%d", sp->points[p].name, s->v[p]);
}

char *tlm_gpu_sentence(const tlm_task *task, const tlm_gpu_target *tg, const tlm_schedule *sched,
                       char *buf, int cap) {
  static const char *const acts[] = {"none", "relu", "gelu", "silu", "relu6"};
  out o = {buf, cap, 0};
  buf[0] = 0;
  if (cap < 2) return buf;
  tlm_gpu_space sp;
  if (tlm_gpu_space_init(&sp, task, tg)) return buf;
  if (task->kind == TLM_OP_MATMUL) {
    const tlm_matmul_task *t = &task->u.mm;
    word(&o, "op:matmul");
    word(&o, "bias:%d", t->has_bias);
    word(&o, "act:%s", t->act >= 0 && t->act < 5 ? acts[t->act] : "none");
    word(&o, "res:%d", t->has_residual != 0);
    word(&o, "uA:%d", (t->unit & TLM_UNIT_A_K) != 0);
    word(&o, "uB:%d", (t->unit & TLM_UNIT_B_N) != 0);
    word(&o, "uC:%d", (t->unit & TLM_UNIT_C_N) != 0);
    extent(&o, "b", tlm_task_batch_total(task));
    extent(&o, "m", t->M);
    extent(&o, "n", t->N);
    extent(&o, "k", t->K);
  } else {
    const tlm_row_task *t = &task->u.row;
    word(&o, "op:%s", task->kind == TLM_OP_SOFTMAX     ? "softmax"
                      : task->kind == TLM_OP_LAYERNORM ? "layernorm"
                                                       : "rmsnorm");
    word(&o, "causal:%d", t->causal);
    word(&o, "act:none");
    word(&o, "res:0");
    word(&o, "uA:%d", (t->unit & TLM_UNIT_ROW_X) != 0);
    word(&o, "uB:%d", (t->unit & TLM_UNIT_ROW_G) != 0);
    word(&o, "uC:%d", (t->unit & TLM_UNIT_ROW_Y) != 0);
    extent(&o, "b", 1);
    extent(&o, "m", t->rows);
    extent(&o, "n", t->cols);
    extent(&o, "k", 1);
  }
  word(&o, "gpu:sm%d", tg->sm);
  word(&o, "sms:%d", ilog2((uint64_t)(tg->sm_count > 0 ? tg->sm_count : 1)));
  word(&o, "smem:%d", ilog2((uint64_t)(tg->smem_per_sm > 0 ? tg->smem_per_sm : 1)));
  word(&o, "regs:%d", ilog2((uint64_t)(tg->regs_per_sm > 0 ? tg->regs_per_sm : 1)));
  word(&o, "warp:%d", tg->warp);
  tlm_schedule rule;
  tlm_gpu_space_default(&sp, &rule);
  word(&o, "<rule>");
  decisions(&o, &sp, &rule);
  word(&o, "<sep>");
  decisions(&o, &sp, sched);
  return buf;
}
