/* The search contender (train/search.c, issue #18) on small spaces whose
 * every schedule is measured: each space is enumerated through the
 * walker, every schedule gets a synthetic time (a product of per-decision
 * factors, smooth in the log of each value, as kernel times mostly are,
 * with a deterministic +-10% per-schedule jitter), and the search, given a
 * quarter of the space as its budget, must find the true optimum; given
 * the whole space it must measure every schedule once; given a wall-time
 * budget it must stop early and say so. The target is fixed
 * (an AVX2 core with Zen 3's caches), not the host's, so the spaces are the
 * same on every machine. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "api/validate.h"
#include "check.h"
#include "runtime/clock.h"
#include "train/problem.h"
#include "train/search.h"

enum { MAX_ALL = 20000 };

typedef struct enum_ctx {
  tlm_schedule *all;
  int n;
  int idx[TLM_MAX_POINTS]; /* the branch being walked */
} enum_ctx;

/* every schedule of s, depth first over the candidates */
static void enumerate(const tlm_space *s, enum_ctx *e, int p, int32_t *v) {
  if (e->n >= MAX_ALL) return;
  if (p == s->npoints) {
    tlm_schedule *o = &e->all[e->n++];
    memset(o, 0, sizeof *o);
    o->n = s->npoints;
    memcpy(o->v, v, sizeof(int32_t) * (size_t)s->npoints);
    return;
  }
  int32_t c[TLM_MAX_CANDIDATES];
  int n = tlm_space_candidates(s, p, v, c);
  for (int i = 0; i < n; i++) {
    v[p] = c[i];
    enumerate(s, e, p + 1, v);
  }
}

/* the synthetic time of a schedule: each decision's value has a preferred
 * magnitude (a different one per point), its time factor grows with the
 * squared log-distance from it; times a jitter fixed by the schedule */
static double synth_ns(const tlm_schedule *s) {
  double lt = 0;
  for (int p = 0; p < s->n; p++) {
    double pref = (double)((p * 7) % 6); /* log2 of the preferred value */
    double d = log2(1.0 + fabs((double)s->v[p])) - pref;
    lt += 0.05 * d * d;
  }
  uint64_t h = XXH3_64bits(s->v, sizeof s->v[0] * (size_t)s->n);
  double jitter = 0.9 + 0.2 * (double)(h % 1000) / 1000.0;
  return 1e5 * exp(lt) * jitter;
}

typedef struct meas {
  int calls;
  int schedules;
  int invalid;
  const tlm_space *s;
  uint64_t *seen;
  int nseen, dup;
} meas;

static void measure(void *ctx, const tlm_schedule *b, int n, double *ns) {
  meas *m = ctx;
  m->calls++;
  for (int i = 0; i < n; i++) {
    m->schedules++;
    if (!tlm_space_accepts(m->s, &b[i])) m->invalid++;
    uint64_t h = XXH3_64bits(b[i].v, sizeof b[i].v[0] * (size_t)b[i].n);
    for (int j = 0; j < m->nseen; j++)
      if (m->seen[j] == h) m->dup++;
    if (m->nseen < MAX_ALL) m->seen[m->nseen++] = h;
    ns[i] = synth_ns(&b[i]);
  }
}

/* as measure, each batch taking 20 ms of wall time */
static void measure_slow(void *ctx, const tlm_schedule *b, int n, double *ns) {
  double until = tlm_clock_ms() + 20;
  measure(ctx, b, n, ns);
  while (tlm_clock_ms() < until) {
  }
}

static void fixed_target(tlm_target *t) {
  memset(t, 0, sizeof *t);
  t->isa = t->host_isa = TLM_ISA_AVX2;
  t->vec_lanes = 8;
  t->vec_regs = 16;
  t->cores = t->threads = 2;
  t->fma_pipes = 2;
  t->fma_bits = 256;
  t->fma_latency = 4;
  t->l1d_bytes = 32 << 10;
  t->l2_bytes = 512 << 10;
  t->l3_bytes = 32 << 20;
  t->l3_sharing = 2;
  t->vendor = 2;
  t->family = 25;
  t->model = 1;
  tlm_target_complete(t);
}

static void one_space(const char *name, const tlm_task *task, const tlm_target *tg) {
  tlm_space s;
  CHECK(tlm_space_init(&s, task, tg) == 0, "%s: no space", name);
  enum_ctx e = {malloc(sizeof(tlm_schedule) * MAX_ALL), 0, {0}};
  int32_t v[TLM_MAX_POINTS] = {0};
  if (!e.all) return;
  enumerate(&s, &e, 0, v);
  CHECK(e.n >= 16 && e.n < MAX_ALL, "%s: %d schedules (want a small space, >= 16)", name, e.n);
  int opt = 0;
  for (int i = 1; i < e.n; i++)
    if (synth_ns(&e.all[i]) < synth_ns(&e.all[opt])) opt = i;
  double opt_ns = synth_ns(&e.all[opt]);

  /* a quarter of the space: the model-guided search must find the optimum */
  meas m = {0, 0, 0, &s, malloc(sizeof(uint64_t) * MAX_ALL), 0, 0};
  tlm_search_opts o;
  int budget = e.n / 4 > 16 ? e.n / 4 : 16;
  tlm_search_opts_init(&o, budget, 42);
  tlm_search_result r;
  CHECK(tlm_search_run(&s, &o, measure, &m, &r) == 0, "%s: search failed", name);
  CHECK(m.invalid == 0, "%s: %d schedules outside the space measured", name, m.invalid);
  CHECK(m.dup == 0, "%s: %d schedules measured twice", name, m.dup);
  CHECK(r.measured <= budget && r.measured == m.schedules, "%s: %d measured, %d calls, budget %d",
        name, r.measured, m.schedules, budget);
  CHECK(r.best_ns == opt_ns, "%s: best found %.1f ns after %d trials, optimum %.1f (of %d)", name,
        r.best_ns, r.measured, opt_ns, e.n);
  for (int i = 1; i < r.measured; i++)
    CHECK(r.curve[i] <= r.curve[i - 1], "%s: the best-so-far curve rises at %d", name, i);
  printf("%-28s %6d schedules: optimum found at trial %d of a budget of %d\n", name, e.n,
         r.best_trial, budget);
  int quarter_trial = r.best_trial;
  free(r.curve);

  /* the same seed again: the same trials in the same order */
  meas m2 = {0, 0, 0, &s, malloc(sizeof(uint64_t) * MAX_ALL), 0, 0};
  tlm_search_result r2;
  CHECK(tlm_search_run(&s, &o, measure, &m2, &r2) == 0, "%s: second search failed", name);
  CHECK(r2.best_trial == quarter_trial && r2.measured == r.measured &&
            !memcmp(m.seen, m2.seen, sizeof(uint64_t) * (size_t)m.nseen),
        "%s: not deterministic for a seed", name);
  free(r2.curve);
  free(m2.seen);

  /* the whole space as budget: every schedule measured once */
  if (e.n <= 400) {
    meas m3 = {0, 0, 0, &s, malloc(sizeof(uint64_t) * MAX_ALL), 0, 0};
    tlm_search_opts_init(&o, e.n, 7);
    tlm_search_result r3;
    CHECK(tlm_search_run(&s, &o, measure, &m3, &r3) == 0, "%s: full search failed", name);
    CHECK(m3.dup == 0 && m3.invalid == 0, "%s: full: %d twice, %d invalid", name, m3.dup,
          m3.invalid);
    CHECK(r3.best_ns == opt_ns, "%s: full budget missed the optimum", name);
    CHECK(r3.measured == e.n, "%s: full budget measured %d of %d", name, r3.measured, e.n);
    printf("%-28s %6d schedules: whole-space budget measured %d\n", name, e.n, r3.measured);
    free(r3.curve);
    free(m3.seen);
  }

  /* a wall-time budget of 0.1 s over 20 ms batches: the first generation,
   * then a few more, far short of the whole space; without a budget the
   * same search reports none hit */
  CHECK(!r.budget_hit, "%s: a budget hit without a budget", name);
  meas m4 = {0, 0, 0, &s, malloc(sizeof(uint64_t) * MAX_ALL), 0, 0};
  tlm_search_opts_init(&o, e.n, 7);
  o.budget_s = 0.1;
  tlm_search_result r4;
  CHECK(tlm_search_run(&s, &o, measure_slow, &m4, &r4) == 0, "%s: budgeted search failed", name);
  CHECK(r4.budget_hit && r4.measured >= o.init && r4.measured <= o.init + 8 * o.batch &&
            r4.measured == m4.schedules && m4.dup == 0,
        "%s: budget of 0.1 s: hit %d, %d measured (%d calls)", name, r4.budget_hit, r4.measured,
        m4.calls);
  free(r4.curve);
  free(m4.seen);
  free(m.seen);
  free(e.all);
}

int main(void) {
  tlm_target tg;
  fixed_target(&tg);
  /* row operators' spaces (a few hundred schedules; a matmul's run to
   * tens of thousands even at 2x8:8x8) */
  const char *rows[] = {"softmax:64x1000", "layernorm:33x768", "gelu:64x3000"};
  for (int i = 0; i < 3; i++) {
    tlm_op op;
    int64_t R, C;
    char err[256];
    CHECK(tlm_row_desc_parse(rows[i], &op, &R, &C, err, sizeof err) == 1, "%s: %s", rows[i], err);
    float *x = calloc((size_t)(R * C), sizeof *x), *y = calloc((size_t)(R * C), sizeof *y);
    float *gb = calloc((size_t)C, sizeof *gb);
    tlm_tensor in[3], out;
    int64_t shape[2] = {R, C}, vshape[1] = {C};
    tlm_tensor_dense(&in[0], TLM_F32, 2, shape, x);
    tlm_tensor_dense(&in[1], TLM_F32, 1, vshape, gb);
    tlm_tensor_dense(&in[2], TLM_F32, 1, vshape, gb);
    tlm_tensor_dense(&out, TLM_F32, 2, shape, y);
    tlm_task task;
    tlm_row_args args;
    int nin = op.kind == TLM_OP_LAYERNORM ? 3 : 1;
    tlm_status st = tlm_validate_row(&op, in, nin, &out, 1, &task, &args, err, sizeof err);
    CHECK(st == TLM_OK, "%s: %s", rows[i], err);
    if (st == TLM_OK) one_space(rows[i], &task, &tg);
    free(x);
    free(y);
    free(gb);
  }
  return check_report("test_search");
}
