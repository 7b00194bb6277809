/* op_row.c - the row-wise families (softmax, layernorm, rmsnorm,
 * elementwise functions and rotary embeddings: one row task, tlm_row_task):
 * their schedule space (ROW_* in space.h), rule, FLOPs, text and run-time
 * fields. Row of the family table: tlm_family_row (family.h). */
#include "family.h"

#include <stdio.h>
#include <string.h>

static const tlm_point k_row_points[ROW_NPOINTS] = {
    [ROW_VEC] = {"vec", TLM_PK_VEC},
    [ROW_UNROLL] = {"unroll", TLM_PK_UNROLL},
    [ROW_TILE] = {"tile_rows", TLM_PK_TILE},
    [ROW_PARALLEL] = {"parallel", TLM_PK_PARALLEL},
};

static int row_candidates(const tlm_space *s, int p, const int32_t *d, int32_t *c) {
  const tlm_row_task *t = &s->task.u.row;
  int n = 0;
  (void)d;
  switch (p) {
  case ROW_VEC: {
    n = vec_width_candidates(s, c, n);
    break;
  }
  case ROW_UNROLL: {
    n = unroll_candidates(c, n);
    break;
  }
  /* up to 16 rows per block whatever the row count, so the rule's choice
   * (and the kernel) need not depend on it */
  case ROW_TILE: n = tile_candidates(t->rows > 16 ? t->rows : 16, 1, c); break;
  case ROW_PARALLEL:
    c[n++] = 0;
    c[n++] = 1;
    break;
  default: break;
  }
  return n;
}

static int row_default(const tlm_space *s, int p, const int32_t *d, const int32_t *c, int n) {
  const tlm_row_task *t = &s->task.u.row;
  int workers = s->target.threads > 0 ? s->target.threads : 1;
  (void)d;
  switch (p) {
  case ROW_VEC: return n - 1;
  case ROW_UNROLL: return 1; /* two accumulators: any length, one kernel */
  case ROW_TILE: return pick_at_most(c, n, 4); /* blocks of 4 rows, claimed dynamically */
  case ROW_PARALLEL: return workers > 1 && t->rows > 1 ? 1 : 0;
  default: return 0;
  }
}


static int row_rule_version(const tlm_task *task, const tlm_target *tg) {
  (void)tg; /* the same on every target */
  (void)task;
  return 2;
}

static double row_flops(const tlm_task *t) {
  return 5.0 * (double)t->u.row.rows * (double)t->u.row.cols;
}

static void row_str(const tlm_task *t, char *buf, int cap) {
  if (t->kind == TLM_OP_ELTWISE) {
    static const char *acts[] = {"none", "relu", "gelu", "silu", "relu6"};
    static const char *bins[] = {"", "_add", "_mul"};
    snprintf(buf, (size_t)cap, "eltwise_%s%s:%lldx%lld",
             acts[t->u.row.act >= 0 && t->u.row.act < 5 ? t->u.row.act : 0],
             bins[t->u.row.binary >= 0 && t->u.row.binary < 3 ? t->u.row.binary : 0],
             (long long)t->u.row.rows, (long long)t->u.row.cols);
    return;
  }
  if (t->kind == TLM_OP_ROPE) {
    snprintf(buf, (size_t)cap, "rope_%s:%lldx%lldx%lld",
             t->u.row.rope_style == TLM_ROPE_INTERLEAVED ? "interleaved" : "neox",
             (long long)(t->u.row.rows / (t->u.row.mrows > 0 ? t->u.row.mrows : 1)),
             (long long)t->u.row.mrows, (long long)t->u.row.cols);
    return;
  }
  static const char *names[] = {"", "", "softmax", "layernorm", "rmsnorm"};
  snprintf(buf, (size_t)cap, "%s:%lldx%lld%s", names[t->kind], (long long)t->u.row.rows,
           (long long)t->u.row.cols, t->u.row.causal ? "_causal" : "");
}

static void row_clear_runtime(tlm_task *t) {
  /* rows and the strides */
  tlm_row_task *r = &t->u.row;
  r->rows = r->cols = r->mrows = 0;
  memset(r->sx, 0, sizeof r->sx);
  memset(r->sy, 0, sizeof r->sy);
  r->sg = r->sb = 0;
  memset(r->sz, 0, sizeof r->sz);
  r->sxh = r->syh = 0;
}

static int64_t row_parallel_count(const tlm_task *task, const tlm_schedule *s,
                                  const ln_nest *nest, int64_t workers) {
  (void)workers;
  (void)nest;
  if (!s->v[ROW_PARALLEL]) return 1;
  int64_t t = s->v[ROW_TILE];
  return (task->u.row.rows + t - 1) / t;
}

static double row_extent_distance(const tlm_task *a, const tlm_task *b) {
  return log_gap(a->u.row.rows, b->u.row.rows) + log_gap(a->u.row.cols, b->u.row.cols);
}

const tlm_family tlm_family_row = {
    .name = "row",
    .points = k_row_points,
    .npoints = ROW_NPOINTS,
    .candidates = row_candidates,
    .rule = row_default,
    .rule_version = row_rule_version,
    .flops = row_flops,
    .str = row_str,
    .clear_runtime = row_clear_runtime,
    .parallel_count = row_parallel_count,
    .extent_distance = row_extent_distance,
};
