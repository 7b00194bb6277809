/* op_pool.c - the pooling family (max and average, 1-3 spatial
 * dimensions): its schedule space (PL_* in space.h), rule, FLOPs, text and
 * run-time fields. Row of the family table: tlm_family_pool (family.h). */
#include "family.h"

#include <stdio.h>
#include <string.h>

static const tlm_point k_pool_points[PL_NPOINTS] = {
    [PL_VEC] = {"vec", TLM_PK_VEC},
    [PL_UNROLL] = {"unroll", TLM_PK_UNROLL},
    [PL_PARALLEL] = {"parallel", TLM_PK_PARALLEL},
};

static int pool_candidates(const tlm_space *s, int p, const int32_t *d, int32_t *c) {
  int n = 0;
  (void)d;
  switch (p) {
  case PL_VEC: {
    n = vec_width_candidates(s, c, n);
    break;
  }
  case PL_UNROLL: {
    n = unroll_candidates(c, n);
    break;
  }
  case PL_PARALLEL:
    c[n++] = 0;
    c[n++] = 1;
    break;
  default: break;
  }
  return n;
}

static int pool_default(const tlm_space *s, int p, const int32_t *d, const int32_t *c, int n) {
  const tlm_pool_task *t = &s->task.u.pool;
  int workers = s->target.threads > 0 ? s->target.threads : 1;
  (void)c;
  switch (p) {
  case PL_VEC: return n - 1;
  case PL_UNROLL: return t->C >= 4 * (int64_t)d[PL_VEC] ? 2 : t->C >= 2 * (int64_t)d[PL_VEC] ? 1 : 0;
  case PL_PARALLEL: return workers > 1 && t->N * t->OD * t->OH > 1 ? 1 : 0;
  default: return 0;
  }
}


static int pool_rule_version(const tlm_task *task, const tlm_target *tg) {
  (void)tg; /* the same on every target */
  (void)task;
  return 2;
}

static double pool_flops(const tlm_task *t) {
  /* one operation per window position */
  const tlm_pool_task *p = &t->u.pool;
  return (double)p->N * (double)p->C * (double)(p->OD * p->OH * p->OW) *
         (p->KD ? p->KD : p->ID) * (p->KH ? p->KH : p->IH) * (p->KW ? p->KW : p->IW);
}

static void pool_str(const tlm_task *t, char *buf, int cap) {
  const tlm_pool_task *p = &t->u.pool;
  snprintf(buf, (size_t)cap, "pool_%s:mb%lldc%lld_id%lldih%lldiw%lld_od%lldoh%lldow%lld_k%dx%dx%d"
           "_s%dx%dx%d_p%dx%dx%d", p->alg == TLM_POOL_MAX ? "max" : "avg", (long long)p->N,
           (long long)p->C, (long long)p->ID, (long long)p->IH, (long long)p->IW,
           (long long)p->OD, (long long)p->OH, (long long)p->OW, p->KD, p->KH, p->KW, p->sd,
           p->sh, p->sw, p->pd, p->ph, p->pw);
}

static void pool_clear_runtime(tlm_task *t) {
  /* N, spatial extents, strides */
  tlm_pool_task *c = &t->u.pool;
  c->N = c->ID = c->IH = c->IW = c->OD = c->OH = c->OW = 0;
  memset(c->ss, 0, sizeof c->ss);
  memset(c->sdst, 0, sizeof c->sdst);
  c->ndim_sp = 0;
}

static int64_t pool_parallel_count(const tlm_task *task, const tlm_schedule *s,
                                   const ln_nest *nest, int64_t workers) {
  (void)workers;
  (void)nest;
  const tlm_pool_task *p = &task->u.pool;
  return s->v[PL_PARALLEL] ? p->N * p->OD * p->OH : 1;
}

static double pool_extent_distance(const tlm_task *a, const tlm_task *b) {
  return log_gap(TLM_OUT_PIXELS(&a->u.pool), TLM_OUT_PIXELS(&b->u.pool));
}

const tlm_family tlm_family_pool = {
    .name = "pool",
    .points = k_pool_points,
    .npoints = PL_NPOINTS,
    .candidates = pool_candidates,
    .rule = pool_default,
    .rule_version = pool_rule_version,
    .flops = pool_flops,
    .str = pool_str,
    .clear_runtime = pool_clear_runtime,
    .parallel_count = pool_parallel_count,
    .extent_distance = pool_extent_distance,
};
