/* search.c - evolutionary search with an online cost model over tlm's
 * schedule space (see search.h). */
#include "search.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "runtime/clock.h"

/* features: log2(1 + v) per point, then (point, value) one-hot hashed into
 * SEARCH_BUCKETS, then a constant */
enum { SEARCH_BUCKETS = 128, SEARCH_D = TLM_MAX_POINTS + SEARCH_BUCKETS + 1 };
#define SEARCH_RIDGE 1e-2 /* the ridge term: every weight pulled toward 0 */

static uint64_t splitmix(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int below(uint64_t *rng, int n) { return n > 1 ? (int)(splitmix(rng) % (uint64_t)n) : 0; }

static uint64_t sched_hash(const tlm_schedule *s) {
  return XXH3_64bits(s->v, sizeof s->v[0] * (size_t)s->n);
}

static void features(const tlm_schedule *s, double *x) {
  memset(x, 0, sizeof(double) * SEARCH_D);
  for (int p = 0; p < s->n && p < TLM_MAX_POINTS; p++) {
    x[p] = log2(1.0 + fabs((double)s->v[p]));
    uint64_t key = ((uint64_t)(uint32_t)p << 32) | (uint32_t)s->v[p];
    x[TLM_MAX_POINTS + XXH3_64bits(&key, sizeof key) % SEARCH_BUCKETS] += 1.0;
  }
  x[SEARCH_D - 1] = 1.0;
}

/* the cost model: normal equations of ridge regression, kept as sums */
typedef struct model {
  double *ata; /* D x D: sum x x^T */
  double atb[SEARCH_D], w[SEARCH_D];
  int n;       /* samples added */
  int fitted;
} model;

static void model_add(model *m, const tlm_schedule *s, double y) {
  double x[SEARCH_D];
  features(s, x);
  for (int i = 0; i < SEARCH_D; i++) {
    if (x[i] == 0) continue;
    m->atb[i] += x[i] * y;
    for (int j = 0; j < SEARCH_D; j++) m->ata[i * SEARCH_D + j] += x[i] * x[j];
  }
  m->n++;
}

/* solves (A + ridge I) w = b by Cholesky; the factor in scratch L */
static int model_fit(model *m, double *L) {
  const int D = SEARCH_D;
  for (int i = 0; i < D * D; i++) L[i] = m->ata[i];
  for (int i = 0; i < D; i++) L[i * D + i] += SEARCH_RIDGE;
  for (int j = 0; j < D; j++) {
    double d = L[j * D + j];
    for (int k = 0; k < j; k++) d -= L[j * D + k] * L[j * D + k];
    if (!(d > 0)) return -1;
    d = sqrt(d);
    L[j * D + j] = d;
    for (int i = j + 1; i < D; i++) {
      double v = L[i * D + j];
      for (int k = 0; k < j; k++) v -= L[i * D + k] * L[j * D + k];
      L[i * D + j] = v / d;
    }
  }
  double z[SEARCH_D];
  for (int i = 0; i < D; i++) { /* L z = b */
    double v = m->atb[i];
    for (int k = 0; k < i; k++) v -= L[i * D + k] * z[k];
    z[i] = v / L[i * D + i];
  }
  for (int i = D - 1; i >= 0; i--) { /* L^T w = z */
    double v = z[i];
    for (int k = i + 1; k < D; k++) v -= L[k * D + i] * m->w[k];
    m->w[i] = v / L[i * D + i];
  }
  m->fitted = 1;
  return 0;
}

static double model_predict(const model *m, const tlm_schedule *s) {
  double x[SEARCH_D], y = 0;
  features(s, x);
  for (int i = 0; i < SEARCH_D; i++) y += m->w[i] * x[i];
  return y;
}

/* ---- children through the space's walker ----------------------------------- */

typedef struct build_ctx {
  const int32_t *want; /* wanted value per point */
  const uint8_t *redraw; /* 1: draw this point at random */
  uint64_t *rng;
} build_ctx;

/* the wanted value if it is a candidate, else the candidate nearest to it
 * in log scale (the smaller on a tie); a random one where redraw is set */
static int choose_build(void *ctx, const tlm_space *s, int p, const int32_t *decided,
                        const int32_t *cands, int n) {
  (void)s;
  (void)decided;
  build_ctx *b = ctx;
  if (b->redraw[p]) return below(b->rng, n);
  int best = 0;
  double bd = INFINITY, lw = log2(1.0 + fabs((double)b->want[p]));
  for (int i = 0; i < n; i++) {
    if (cands[i] == b->want[p]) return i;
    double d = fabs(log2(1.0 + fabs((double)cands[i])) - lw);
    if (d < bd) bd = d, best = i;
  }
  return best;
}

/* ---- the measured set ------------------------------------------------------- */

typedef struct trials {
  tlm_schedule *s;
  double *ns;
  uint64_t *h;
  int n, cap;
} trials;

static int seen(const trials *t, uint64_t h) {
  for (int i = 0; i < t->n; i++)
    if (t->h[i] == h) return 1;
  return 0;
}

/* indices of the `k` fastest finite trials into idx; returns how many */
static int fastest(const trials *t, int k, int *idx) {
  int n = 0;
  for (int i = 0; i < t->n; i++) {
    if (!isfinite(t->ns[i])) continue;
    int j;
    if (n < k) j = n++;
    else if (t->ns[i] < t->ns[idx[k - 1]]) j = k - 1;
    else continue;
    while (j > 0 && t->ns[idx[j - 1]] > t->ns[i]) idx[j] = idx[j - 1], j--;
    idx[j] = i;
  }
  return n;
}

/* Unmeasured schedules by a depth-first walk of the space (at most
 * `limit` leaves visited): what is left once the children run dry, so a
 * budget as large as a small space measures all of it. */
typedef struct dfs_ctx {
  const tlm_space *s;
  const trials *t;
  tlm_schedule *out;
  uint64_t *oh;
  int n, cap;
  long leaves, limit;
} dfs_ctx;

static void dfs(dfs_ctx *c, int p, int32_t *v) {
  if (c->n >= c->cap || c->leaves >= c->limit) return;
  if (p == c->s->npoints) {
    c->leaves++;
    tlm_schedule x;
    memset(&x, 0, sizeof x);
    x.n = c->s->npoints;
    memcpy(x.v, v, sizeof(int32_t) * (size_t)x.n);
    uint64_t h = sched_hash(&x);
    if (!seen(c->t, h)) c->oh[c->n] = h, c->out[c->n++] = x;
    return;
  }
  int32_t cands[TLM_MAX_CANDIDATES];
  int n = tlm_space_candidates(c->s, p, v, cands);
  for (int i = 0; i < n; i++) {
    v[p] = cands[i];
    dfs(c, p + 1, v);
  }
}

void tlm_search_opts_init(tlm_search_opts *o, int trials, uint64_t seed) {
  o->trials = trials;
  o->seed = seed;
  o->init = 16;
  o->batch = 8;
  o->children = 256;
  o->budget_s = 0;
}

/* measures the batch, records it, updates the curve and the model */
static void measure_batch(const tlm_schedule *b, int nb, tlm_search_measure_fn measure, void *ctx,
                          trials *t, model *m, tlm_search_result *r) {
  double ns[64];
  measure(ctx, b, nb, ns);
  for (int i = 0; i < nb; i++) {
    int k = t->n++;
    t->s[k] = b[i];
    t->ns[k] = ns[i];
    t->h[k] = sched_hash(&b[i]);
    if (ns[i] < r->best_ns) {
      r->best_ns = ns[i];
      r->best = b[i];
      r->best_trial = k + 1;
    }
    r->curve[k] = r->best_ns;
    r->measured = t->n;
    if (isfinite(ns[i]) && ns[i] > 0) model_add(m, &b[i], log(ns[i]));
  }
}

int tlm_search_run(const tlm_space *s, const tlm_search_opts *o, tlm_search_measure_fn measure,
                   void *ctx, tlm_search_result *r) {
  memset(r, 0, sizeof *r);
  r->best_ns = INFINITY;
  int budget = o->trials > 0 ? o->trials : 1;
  int init = o->init > 0 ? o->init : 1, batch = o->batch > 0 ? o->batch : 1;
  if (batch > 64) batch = 64;
  if (init > 64) init = 64;
  int nchild = o->children > batch ? o->children : batch;
  uint64_t rng = o->seed;
  /* the clock is read only under a budget: without one nothing depends on it */
  double t_end = o->budget_s > 0 ? tlm_clock_ms() + 1e3 * o->budget_s : 0;
  trials t = {0};
  model m = {0};
  t.cap = budget;
  t.s = malloc(sizeof *t.s * (size_t)budget);
  t.ns = malloc(sizeof *t.ns * (size_t)budget);
  t.h = malloc(sizeof *t.h * (size_t)budget);
  r->curve = malloc(sizeof *r->curve * (size_t)budget);
  m.ata = calloc((size_t)SEARCH_D * SEARCH_D, sizeof *m.ata);
  double *L = malloc(sizeof *L * (size_t)SEARCH_D * SEARCH_D);
  tlm_schedule *kids = malloc(sizeof *kids * (size_t)nchild);
  double *pred = malloc(sizeof *pred * (size_t)nchild);
  uint64_t *kh = malloc(sizeof *kh * (size_t)nchild);
  int rc = 0;
  if (!t.s || !t.ns || !t.h || !r->curve || !m.ata || !L || !kids || !pred || !kh) {
    rc = -1;
    goto done;
  }
  /* generation 0: the rule and random draws */
  {
    tlm_schedule b[64];
    int nb = 0, misses = 0;
    tlm_space_default(s, &b[nb++]);
    uint64_t h0 = sched_hash(&b[0]);
    while (nb < init && nb < budget && misses < 200) {
      tlm_space_sample(s, &rng, &b[nb]);
      uint64_t h = sched_hash(&b[nb]);
      int dup = h == h0;
      for (int i = 1; i < nb && !dup; i++) dup = sched_hash(&b[i]) == h;
      if (dup) {
        misses++;
        continue;
      }
      nb++;
    }
    measure_batch(b, nb, measure, ctx, &t, &m, r);
  }
  int idle = 0; /* generations that found no new schedule */
  while (t.n < budget && idle < 3) {
    if (t_end > 0 && tlm_clock_ms() >= t_end) {
      r->budget_hit = 1;
      break;
    }
    int fitted = m.n >= 4 && model_fit(&m, L) == 0;
    int par[8];
    int np = fastest(&t, 8, par);
    /* children: mutations and crossovers of the fastest, some draws */
    int nk = 0;
    for (int tries = 0; nk < nchild && tries < 4 * nchild; tries++) {
      int32_t want[TLM_MAX_POINTS];
      uint8_t redraw[TLM_MAX_POINTS];
      memset(redraw, 0, sizeof redraw);
      int kind = below(&rng, 10); /* 0-5 mutation, 6-8 crossover, 9 a draw */
      if (np == 0) kind = 9;
      tlm_schedule c;
      if (kind == 9) {
        tlm_space_sample(s, &rng, &c);
      } else {
        const tlm_schedule *a = &t.s[par[below(&rng, np)]];
        memcpy(want, a->v, sizeof want);
        if (kind <= 5) {
          int changes = 1 + (below(&rng, 2) == 0);
          for (int i = 0; i < changes; i++) redraw[below(&rng, s->npoints)] = 1;
        } else {
          const tlm_schedule *bp = &t.s[par[below(&rng, np)]];
          for (int p = 0; p < s->npoints; p++)
            if (below(&rng, 2)) want[p] = bp->v[p];
        }
        build_ctx bc = {want, redraw, &rng};
        tlm_space_walk(s, choose_build, &bc, &c);
      }
      uint64_t h = sched_hash(&c);
      if (seen(&t, h)) continue;
      int dup = 0;
      for (int i = 0; i < nk && !dup; i++) dup = kh[i] == h;
      if (dup) continue;
      kids[nk] = c;
      kh[nk] = h;
      pred[nk] = fitted ? model_predict(&m, &c) : (double)below(&rng, 1 << 20);
      nk++;
    }
    if (nk == 0) { /* nothing new near the fastest: walk the space */
      dfs_ctx dc = {s, &t, kids, kh, 0, nchild, 0, 100000};
      int32_t v[TLM_MAX_POINTS] = {0};
      dfs(&dc, 0, v);
      nk = dc.n;
      for (int i = 0; i < nk; i++) pred[i] = fitted ? model_predict(&m, &kids[i]) : (double)i;
    }
    if (nk == 0) {
      idle++;
      continue;
    }
    idle = 0;
    /* the best predicted, and one of the rest at random */
    int want_n = batch < budget - t.n ? batch : budget - t.n;
    if (want_n > nk) want_n = nk;
    tlm_schedule b[64];
    int nb = 0;
    int explore = want_n > 1 && nk > want_n;
    for (; nb < want_n - explore; nb++) {
      int best = nb;
      for (int i = nb + 1; i < nk; i++)
        if (pred[i] < pred[best]) best = i;
      tlm_schedule ts = kids[nb];
      kids[nb] = kids[best], kids[best] = ts;
      double tp = pred[nb];
      pred[nb] = pred[best], pred[best] = tp;
      b[nb] = kids[nb];
    }
    if (explore) {
      int j = nb + below(&rng, nk - nb);
      b[nb++] = kids[j];
    }
    measure_batch(b, nb, measure, ctx, &t, &m, r);
  }
done:
  free(t.s);
  free(t.ns);
  free(t.h);
  free(m.ata);
  free(L);
  free(kids);
  free(pred);
  free(kh);
  return rc;
}
