/* collect.c - `tlm collect`: measured schedules for the language model.
 *
 * For each task of tlm_tasks_build(): the default schedule and random
 * schedules from the full space are compiled, checked against the reference
 * on sampled outputs, and timed warm (repeats until --min-time-ms, median,
 * min and max kept). Failures are records too. Each finished task is
 * appended to the output as one gzip member of JSON lines, so an
 * interrupted run loses at most the task in progress and resumes where it
 * stopped.
 *
 * Record (one JSON object per line):
 *   {"v":1,"hw":"...","threads":2,"task":"<task text>","family":"...",
 *    "kind":"default"|"random"|"model"|"mutant"|"verify","round":R (search
 *    rounds),"rule":true|false (verify),"seed":N,"sched":[...],"status":"ok"|
 *    "compile_error"|"wrong"|"run_error","ns":median,"ns_min":..,"ns_max":..,
 *    "reps":N,"compile_ms":..}
 */
#include "collect.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>
#include <zlib.h>

#include "api/validate.h"
#include "engine/engine.h"
#include "runtime/clock.h"
#include "train/measure.h"
#include "train/tasks.h"
#include "train/train.h"


static double now_s(void) { return tlm_clock_ms() * 1e-3; }

/* ---- collection ------------------------------------------------------------ */

/* schedule number s of a task: 0 is the default rule, the rest random */
static void schedule_for(const tlm_space *space, uint64_t task_seed, int s, tlm_schedule *out) {
  if (s == 0) {
    tlm_space_default(space, out);
  } else {
    uint64_t r = task_seed + (uint64_t)s;
    tlm_space_sample(space, &r, out);
  }
}

typedef struct prefetch {
  tlm_runtime *rt;
  const tlm_task *task;
  tlm_schedule sched;
  int status;
} prefetch;

static void *prefetch_main(void *arg) {
  prefetch *p = arg;
  tlm_kernel *k;
  char err[256];
  p->status = tlm_engine_kernel(p->rt, p->task, &p->sched, &k, err, sizeof err);
  return NULL;
}

typedef struct done_count {
  char **task;
  int *count;
  int n, cap;
  int round;        /* > 0: count only the records of this round and kind */
  const char *kind; /* "model" or "mutant" when round > 0 */
} done_count;

static int count_record(void *ctx, const cJSON *r) {
  done_count *d = ctx;
  const cJSON *t = cJSON_GetObjectItem(r, "task");
  if (!cJSON_IsString(t)) return 0;
  if (d->round > 0) {
    const cJSON *k = cJSON_GetObjectItem(r, "kind"), *rd = cJSON_GetObjectItem(r, "round");
    int kind_ok = cJSON_IsString(k) && (!strcmp(k->valuestring, d->kind) ||
                                        /* a local-search round measures the rule too */
                                        (!strcmp(d->kind, "mutant") && !strcmp(k->valuestring, "default")));
    if (!kind_ok || !cJSON_IsNumber(rd) ||
        (int)rd->valuedouble != d->round)
      return 0;
  }
  for (int i = 0; i < d->n; i++)
    if (!strcmp(d->task[i], t->valuestring)) {
      d->count[i]++;
      return 0;
    }
  if (d->n == d->cap) {
    int ncap = d->cap ? d->cap * 2 : 1024;
    char **nt = realloc(d->task, (size_t)ncap * sizeof *d->task);
    if (!nt) return 1;
    d->task = nt;
    int *nc = realloc(d->count, (size_t)ncap * sizeof *d->count);
    if (!nc) return 1;
    d->count = nc;
    d->cap = ncap;
  }
  if (!(d->task[d->n] = strdup(t->valuestring))) return 1;
  d->count[d->n++] = 1;
  return 0;
}

static int done_for(const done_count *d, const char *task) {
  for (int i = 0; i < d->n; i++)
    if (!strcmp(d->task[i], task)) return d->count[i];
  return 0;
}

typedef struct buf {
  char *p;
  size_t len, cap;
} buf;

static void buf_add(buf *b, const char *s) {
  size_t n = strlen(s);
  if (b->len + n + 1 > b->cap) {
    size_t cap = (b->len + n + 1) * 2;
    char *p = realloc(b->p, cap);
    if (!p) return;
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n + 1);
  b->len += n;
}

/* ---- local search: mutants of a task's best measured schedules ---------------- */

/* every measured schedule of the training split, for --mutate */
typedef struct measured {
  char *task;
  tlm_schedule sched;
  double ns; /* INFINITY unless status ok */
} measured;

typedef struct measured_set {
  measured *v;
  int n, cap;
} measured_set;

static int measured_record(void *ctx, const cJSON *r) {
  measured_set *m = ctx;
  const cJSON *task = cJSON_GetObjectItem(r, "task"), *fam = cJSON_GetObjectItem(r, "family");
  const cJSON *status = cJSON_GetObjectItem(r, "status"), *ns = cJSON_GetObjectItem(r, "ns");
  const cJSON *sched = cJSON_GetObjectItem(r, "sched");
  if (!cJSON_IsString(task) || !cJSON_IsString(fam) || !cJSON_IsString(status) ||
      !cJSON_IsNumber(ns) || !cJSON_IsArray(sched) || tlm_family_heldout(fam->valuestring))
    return 0;
  if (m->n == m->cap) {
    int cap = m->cap ? m->cap * 2 : 4096;
    measured *nv = realloc(m->v, (size_t)cap * sizeof *nv);
    if (!nv) return 1;
    m->v = nv, m->cap = cap;
  }
  measured *e = &m->v[m->n];
  memset(e, 0, sizeof *e);
  for (const cJSON *x = sched->child; x && e->sched.n < TLM_MAX_POINTS; x = x->next)
    e->sched.v[e->sched.n++] = (int32_t)x->valueint;
  e->ns = !strcmp(status->valuestring, "ok") && ns->valuedouble > 0 ? ns->valuedouble : INFINITY;
  e->task = strdup(task->valuestring);
  if (!e->task) return 1;
  m->n++;
  return 0;
}

/* one task's search state: measured schedules (ranked by ns) and their hashes */
typedef struct search_pool {
  tlm_schedule *sched;
  double *ns;
  uint64_t *hash;
  int n, cap;
} search_pool;

static uint64_t sched_hash(const tlm_schedule *s) {
  return XXH3_64bits(s->v, sizeof s->v[0] * (size_t)s->n);
}

static int pool_has(const search_pool *p, uint64_t h) {
  for (int i = 0; i < p->n; i++)
    if (p->hash[i] == h) return 1;
  return 0;
}

/* adds a measured schedule, keeping the pool sorted by ns (ties: older first) */
static void pool_add(search_pool *p, const tlm_schedule *s, double ns) {
  if (p->n == p->cap) {
    int cap = p->cap ? p->cap * 2 : 64;
    tlm_schedule *a = realloc(p->sched, (size_t)cap * sizeof *a);
    if (a) p->sched = a;
    double *b = realloc(p->ns, (size_t)cap * sizeof *b);
    if (b) p->ns = b;
    uint64_t *c = realloc(p->hash, (size_t)cap * sizeof *c);
    if (c) p->hash = c;
    if (!a || !b || !c) return;
    p->cap = cap;
  }
  int i = p->n++;
  while (i > 0 && p->ns[i - 1] > ns) {
    p->sched[i] = p->sched[i - 1], p->ns[i] = p->ns[i - 1], p->hash[i] = p->hash[i - 1];
    i--;
  }
  p->sched[i] = *s, p->ns[i] = ns, p->hash[i] = sched_hash(s);
}

static void pool_free(search_pool *p) {
  free(p->sched);
  free(p->ns);
  free(p->hash);
  memset(p, 0, sizeof *p);
}

typedef struct mutant_ctx {
  const tlm_schedule *parent;
  uint8_t change[TLM_MAX_POINTS];
  uint64_t *rng;
} mutant_ctx;

/* keeps the parent's value where it is still a candidate; at a changed
 * point moves one candidate up or down (half the time) or jumps anywhere;
 * where the parent's value is no longer valid, takes the nearest one */
static int choose_mutant(void *ctx, const tlm_space *s, int p, const int32_t *d,
                         const int32_t *c, int n) {
  (void)s, (void)d;
  mutant_ctx *m = ctx;
  int32_t want = p < m->parent->n ? m->parent->v[p] : c[0];
  int keep = -1, near = 0;
  for (int i = 0; i < n; i++) {
    if (c[i] == want) keep = i;
    if (llabs((long long)c[i] - want) < llabs((long long)c[near] - want)) near = i;
  }
  if (keep < 0) return near;
  if (!m->change[p] || n < 2) return keep;
  uint64_t r = tlm_rng_next(m->rng);
  if (r & 1) { /* a step to a neighbouring candidate */
    if (keep == 0) return 1;
    if (keep == n - 1) return n - 2;
    return (r & 2) ? keep + 1 : keep - 1;
  }
  int i = (int)((r >> 2) % (uint64_t)(n - 1));
  return i >= keep ? i + 1 : i;
}

/* a schedule not measured yet, 1-3 decisions away from one of the four
 * best of the pool (the best most often); 0, or -1 when none was found */
static int make_mutant(const tlm_space *space, const search_pool *pool, uint64_t *rng,
                       tlm_schedule *out) {
  if (pool->n == 0 || !isfinite(pool->ns[0])) return -1;
  int top = 0;
  while (top < pool->n && top < 4 && isfinite(pool->ns[top])) top++;
  static const int rank_of[8] = {0, 0, 0, 0, 1, 1, 2, 3};
  for (int attempt = 0; attempt < 200; attempt++) {
    int r = rank_of[tlm_rng_next(rng) % 8];
    if (r >= top) r = 0;
    mutant_ctx m = {&pool->sched[r], {0}, rng};
    uint64_t u = tlm_rng_next(rng) % 10;
    int changes = u < 6 ? 1 : u < 9 ? 2 : 3;
    for (int c = 0; c < changes; c++) m.change[tlm_rng_next(rng) % (uint64_t)space->npoints] = 1;
    tlm_space_walk(space, choose_mutant, &m, out);
    if (!pool_has(pool, sched_hash(out))) return 0;
  }
  return -1;
}

/* removes entry j of the pool */
static void pool_remove(search_pool *p, int j) {
  memmove(p->sched + j, p->sched + j + 1, sizeof *p->sched * (size_t)(p->n - j - 1));
  memmove(p->ns + j, p->ns + j + 1, sizeof *p->ns * (size_t)(p->n - j - 1));
  memmove(p->hash + j, p->hash + j + 1, sizeof *p->hash * (size_t)(p->n - j - 1));
  p->n--;
}

/* appends one record line to *ob (format: the comment at the top) */
static void record_add(buf *ob, const char *hw, int threads, const tlm_task_spec *ts, const char *kind,
                       int round_no, int seed, int rule, const tlm_schedule *sched, const char *status,
                       double med, double lo, double hi, int reps, double compile_ms) {
  cJSON *r = cJSON_CreateObject();
  cJSON_AddNumberToObject(r, "v", TLM_RECORD_VERSION);
  cJSON_AddStringToObject(r, "hw", hw);
  cJSON_AddNumberToObject(r, "threads", threads);
  cJSON_AddStringToObject(r, "task", ts->text);
  cJSON_AddStringToObject(r, "family", ts->family);
  cJSON_AddStringToObject(r, "kind", kind);
  if (round_no > 0) cJSON_AddNumberToObject(r, "round", round_no);
  cJSON_AddNumberToObject(r, "seed", seed);
  if (rule >= 0) cJSON_AddBoolToObject(r, "rule", rule);
  cJSON *arr = cJSON_AddArrayToObject(r, "sched");
  for (int pnt = 0; pnt < sched->n; pnt++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(sched->v[pnt]));
  cJSON_AddStringToObject(r, "status", status);
  cJSON_AddNumberToObject(r, "ns", round(med));
  cJSON_AddNumberToObject(r, "ns_min", round(lo));
  cJSON_AddNumberToObject(r, "ns_max", round(hi));
  cJSON_AddNumberToObject(r, "reps", reps);
  cJSON_AddNumberToObject(r, "compile_ms", round(compile_ms * 100) / 100);
  char *line = cJSON_PrintUnformatted(r);
  if (line) {
    buf_add(ob, line);
    buf_add(ob, "\n");
  }
  free(line);
  cJSON_Delete(r);
}

/* ---- verification: the best candidates re-timed side by side ------------------ */

/* Compiles the candidates of one task (two at a time, on both cores),
 * checks each against the reference and re-times the correct ones side by
 * side (tlm_time_side_by_side, 5 rounds), so that training compares times
 * from one run rather than records taken hours apart under different
 * load. cand[0] is the rule. Appends "verify" records to *ob; returns nc.
 * med (may be NULL): each candidate's median ns, NAN where it failed. */
static int time_candidates(tlm_runtime *rt, const tlm_task_spec *ts, const tlm_spec_problem *p,
                           const tlm_schedule *cand, int nc, int round_no, int threads,
                           double min_time_ms, const char *hw, buf *ob, double *med) {
  const tlm_task task = p->task;
  const char *status[TLM_SIDE_MAX];
  double compile_ms[TLM_SIDE_MAX] = {0};
  const tlm_kernel *ok_k[TLM_SIDE_MAX];
  int ok_i[TLM_SIDE_MAX], nok = 0;
  char err[256];
  for (int i = 0; i < nc; i += 2) {
    prefetch pf = {rt, &task, {0}, 0};
    pthread_t th;
    int started = 0;
    if (i + 1 < nc) {
      pf.sched = cand[i + 1];
      started = pthread_create(&th, NULL, prefetch_main, &pf) == 0;
    }
    tlm_kernel *kk;
    tlm_engine_kernel(rt, &task, &cand[i], &kk, err, sizeof err);
    if (started) pthread_join(th, NULL);
  }
  double tol = tlm_spec_problem_tolerance(p);
  for (int i = 0; i < nc; i++) {
    tlm_kernel *kk;
    status[i] = "ok";
    if (tlm_engine_kernel(rt, &task, &cand[i], &kk, err, sizeof err)) {
      status[i] = "compile_error";
      continue;
    }
    compile_ms[i] = kk->compile_ms;
    if (tlm_engine_exec(rt, kk, &task, p->args, err, sizeof err)) {
      status[i] = "run_error";
      continue;
    }
    double e = tlm_spec_problem_check(p, 64, 11 + (uint64_t)i);
    if (!(e >= 0 && e <= tol)) {
      status[i] = "wrong";
      continue;
    }
    ok_k[nok] = kk;
    ok_i[nok++] = i;
  }
  tlm_timing tm[TLM_SIDE_MAX];
  tlm_time_side_by_side(rt, ok_k, nok, &task, p->args, 5, min_time_ms / 5, tm);
  for (int i = 0; i < nc; i++) {
    tlm_timing t = {0, 0, 0, 0};
    for (int j = 0; j < nok; j++)
      if (ok_i[j] == i) t = tm[j];
    record_add(ob, hw, threads, ts, "verify", round_no, i, i == 0, &cand[i], status[i], t.median_ns,
               t.reps ? t.min_ns : 0, t.max_ns, t.reps, compile_ms[i]);
    if (med) med[i] = t.reps ? t.median_ns : NAN;
  }
  return nc;
}

/* One task of a --verify round: the rule and the task's `k` fastest
 * distinct measured schedules (time_candidates). */
static int verify_task(tlm_runtime *rt, const tlm_task_spec *ts, const tlm_spec_problem *p,
                       const tlm_space *space, const measured_set *known, int k, int round_no,
                       int threads, double min_time_ms, const char *hw, buf *ob) {
  /* each distinct schedule ranked by its fastest record */
  search_pool pool = {0};
  for (int i = 0; i < known->n; i++) {
    const measured *m = &known->v[i];
    if (strcmp(m->task, ts->text) || !isfinite(m->ns) || !tlm_space_accepts(space, &m->sched)) continue;
    uint64_t h = sched_hash(&m->sched);
    int j = 0;
    while (j < pool.n && pool.hash[j] != h) j++;
    if (j < pool.n && pool.ns[j] <= m->ns) continue;
    if (j < pool.n) pool_remove(&pool, j); /* faster again: re-rank it */
    pool_add(&pool, &m->sched, m->ns);
  }
  tlm_schedule cand[TLM_SIDE_MAX];
  int nc = 0;
  tlm_space_default(space, &cand[nc++]);
  uint64_t rule_h = sched_hash(&cand[0]);
  for (int i = 0; i < pool.n && nc < k + 1 && nc < TLM_SIDE_MAX; i++)
    if (pool.hash[i] != rule_h) cand[nc++] = pool.sched[i];
  pool_free(&pool);
  return time_candidates(rt, ts, p, cand, nc, round_no, threads, min_time_ms, hw, ob, NULL);
}

/* One task of an adaptation round (tlm adapt): the rule, the base model's
 * `topk` best distinct schedules for this target (its beam, whether or not
 * the model was trained on this hardware) and `mutants` schedules 1-3
 * decisions away from the rule, timed side by side (time_candidates). */
static int adapt_task(tlm_runtime *rt, const tlm_task_spec *ts, const tlm_spec_problem *p,
                      const tlm_space *space, const tlm_lm_model *base, int topk, int mutants,
                      uint64_t seed, int round_no, int threads, double min_time_ms, const char *hw,
                      buf *ob) {
  tlm_schedule cand[TLM_SIDE_MAX];
  int nc = 0;
  search_pool pool = {0};
  tlm_space_default(space, &cand[nc++]);
  pool_add(&pool, &cand[0], 0); /* the mutants' parent */
  tlm_schedule top[64];
  int ntop = base && topk > 0 ? tlm_lm_decode_topk(base, space, topk, top, NULL) : 0;
  for (int i = 0; i < ntop && nc < TLM_SIDE_MAX; i++)
    if (!pool_has(&pool, sched_hash(&top[i]))) {
      cand[nc++] = top[i];
      pool_add(&pool, &top[i], INFINITY);
    }
  uint64_t rng = XXH3_64bits(ts->text, strlen(ts->text)) ^ seed;
  for (int i = 0; i < mutants && nc < TLM_SIDE_MAX; i++) {
    if (make_mutant(space, &pool, &rng, &cand[nc])) break;
    pool_add(&pool, &cand[nc++], INFINITY);
  }
  pool_free(&pool);
  double med[TLM_SIDE_MAX];
  int n = time_candidates(rt, ts, p, cand, nc, round_no, threads, min_time_ms, hw, ob, med);
  /* the fastest of ~13 noisy medians is biased fast (the winner's curse:
   * of the held-out tasks' top 10, a quarter of the "wins" over 2% read
   * under it timed again, docs/design.md "Measured top-k"). Where it beats
   * the rule by the trainer's margin, it and the rule are timed again by
   * themselves as round + 1, the round the trainer takes the task's
   * target from (its latest): a gain the second timing does not show
   * teaches the rule, not a schedule that only won once */
  int b = -1;
  for (int i = 1; i < nc; i++)
    if (isfinite(med[i]) && (b < 0 || med[i] < med[b])) b = i;
  if (b > 0 && isfinite(med[0]) && med[b] * (1 + TLM_TRAIN_RULE_MARGIN) < med[0]) {
    tlm_schedule pair[2] = {cand[0], cand[b]};
    n += time_candidates(rt, ts, p, pair, 2, round_no + 1, threads, min_time_ms, hw, ob, NULL);
  }
  return n;
}

void tlm_collect_opts_init(tlm_collect_opts *o) {
  *o = (tlm_collect_opts){.shared = "../shared", .out = "data/records.jsonl.gz", .schedules = 32,
                          .threads = 2, .max_tasks = 1 << 30, .min_time_ms = 10, .seed = 1,
                          .topk = 8, .round_no = 1, .mutants = 4};
}

int tlm_collect_opts_check(tlm_collect_opts *o) {
  if (o->propose) o->schedules = o->topk;
  if (o->mutate) o->schedules = o->mutate;
  if (o->verify || o->adapt) o->schedules = 1; /* a task is done once verified in this round */
  int bad = (o->propose && o->mutate) || (o->verify && (o->propose || o->mutate)) ||
            (o->adapt && (o->propose || o->mutate || o->verify)) || o->verify < 0 ||
            o->verify >= TLM_SIDE_MAX || o->mutate < 0 || o->schedules < 1 || o->threads < 1 ||
            o->min_time_ms <= 0 || o->topk < 1 || o->topk > 64 || o->round_no < 1 ||
            o->mutants < 0 || o->mutants >= TLM_SIDE_MAX || !(o->minutes >= 0);
  return bad ? -1 : 0;
}

int tlm_collect_run(const tlm_collect_opts *o) {
  const char *shared = o->shared, *out = o->out;
  int schedules = o->schedules, threads = o->threads, max_tasks = o->max_tasks, list = o->list;
  double min_time_ms = o->min_time_ms;
  uint64_t seed = o->seed;
  const char *propose = o->propose, *known_path = o->known_path;
  int topk = o->topk, round_no = o->round_no, mutate = o->mutate, verify = o->verify;
  int mutants = o->mutants;
  const char *adapt = o->adapt;
  double minutes = o->minutes;
  char err[512];
  tlm_task_spec *tasks;
  int ntasks = tlm_tasks_build(shared, seed, &tasks, err, sizeof err);
  if (ntasks < 0) {
    fprintf(stderr, "tlm collect: %s\n", err);
    return 1;
  }
  /* visit families round-robin, so a partial collection covers them all */
  if (tlm_tasks_interleave(tasks, ntasks)) {
    fprintf(stderr, "tlm collect: out of memory\n");
    free(tasks);
    return 1;
  }
  if (list) {
    for (int i = 0; i < ntasks; i++) printf("%-28s %s\n", tasks[i].family, tasks[i].text);
    printf("%d tasks\n", ntasks);
    free(tasks);
    return 0;
  }
  done_count done = {0};
  int search = propose || mutate || verify || adapt; /* a round over the training tasks only */
  done.round = search ? round_no : 0;
  done.kind = propose ? "model" : verify || adapt ? "verify" : "mutant";
  int have = tlm_records_read(out, count_record, &done);
  if (have > 0) fprintf(stderr, "tlm collect: %s holds %d records; resuming\n", out, have);
  measured_set known = {0};
  if (!known_path) known_path = out;
  if ((mutate || verify) && tlm_records_read(known_path, measured_record, &known) < 0) {
    fprintf(stderr, "tlm collect: --mutate and --verify need the records in %s\n", known_path);
    free(tasks);
    return 1;
  }
  /* the base model of an adaptation round, loaded whatever hardware it
   * was trained on (its proposals are candidates, timed here) */
  tlm_lm_model *base = NULL;
  if (adapt && strcmp(adapt, "none")) {
    base = calloc(1, sizeof *base);
    if (!base || tlm_lm_load(base, adapt, err, sizeof err)) {
      fprintf(stderr, "tlm collect: %s\n", base ? err : "out of memory");
      free(base);
      free(tasks);
      return 1;
    }
  }
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.cache_dir = "none"; /* measure compiles, never reuse them */
  cfg.async_compile = 0; /* every kernel its own, built before the call returns */
  cfg.num_threads = threads;
  cfg.model_path = propose ? propose : "none";
  int todo = 0;
  for (int i = 0; i < ntasks && i < max_tasks; i++)
    if (done_for(&done, tasks[i].text) < schedules &&
        !(search && tlm_family_heldout(tasks[i].family)))
      todo++;
  double t_start = now_s();
  int measured = 0, tasks_done = 0;
  for (int ti = 0; ti < ntasks && ti < max_tasks; ti++) {
    tlm_task_spec *ts = &tasks[ti];
    int start = done_for(&done, ts->text);
    if (start >= schedules) continue;
    if (search && tlm_family_heldout(ts->family)) continue; /* never trained on */
    if (minutes > 0 && now_s() - t_start > minutes * 60) {
      fprintf(stderr, "tlm collect: --minutes %g reached; %d tasks done (resumable)\n", minutes,
              tasks_done);
      break;
    }
    /* a fresh runtime per task: its JIT memory goes with it */
    tlm_runtime *rt;
    if (tlm_create(&cfg, &rt)) {
      fprintf(stderr, "tlm collect: %s\n", tlm_last_error(NULL));
      if (base) tlm_lm_free(base);
      free(base);
      return 1;
    }
    char hw[400], ts_buf[320];
    snprintf(hw, sizeof hw, "%s; %s", tlm_jit_cpu(rt->jit),
             tlm_target_str(&rt->target, ts_buf, sizeof ts_buf));
    tlm_spec_problem p;
    if (tlm_spec_problem_make(ts, 7, &p)) {
      fprintf(stderr, "tlm collect: skipping %s: cannot build it\n", ts->text);
      tlm_destroy(rt);
      continue;
    }
    const tlm_task task = p.task;
    tlm_space space;
    tlm_space_init(&space, &task, &rt->target);
    uint64_t task_seed = XXH3_64bits(ts->text, strlen(ts->text)) ^ seed;
    buf out_buf = {0};
    double tol = tlm_spec_problem_tolerance(&p);
    double best_ns = INFINITY; /* fastest median of this task so far */
    int task_count = 0;          /* schedules measured for this task */
    if (verify) {
      task_count = verify_task(rt, ts, &p, &space, &known, verify, round_no, threads, min_time_ms, hw, &out_buf);
      measured += task_count;
      goto publish;
    }
    if (adapt) {
      task_count = adapt_task(rt, ts, &p, &space, base, topk, mutants, seed, round_no, threads,
                              min_time_ms, hw, &out_buf);
      measured += task_count;
      goto publish;
    }
    /* proposal rounds: the model's top-k, distinct schedules in rank order */
    tlm_schedule top[64];
    int ntop = 0;
    if (propose) {
      if (!rt->model) {
        fprintf(stderr, "tlm collect: cannot load the model %s\n", propose);
        tlm_spec_problem_free(&p);
        tlm_destroy(rt);
        return 1;
      }
      ntop = tlm_lm_decode_topk(rt->model, &space, topk, top, NULL);
      if (ntop < 0) ntop = 0;
    }
    /* local search: this task's measured schedules seed the pool */
    search_pool pool = {0};
    uint64_t mrng = task_seed ^ ((uint64_t)round_no << 32);
    for (int i = 0; mutate && i < known.n; i++)
      if (!strcmp(known.v[i].task, ts->text) && tlm_space_accepts(&space, &known.v[i].sched))
        pool_add(&pool, &known.v[i].sched, known.v[i].ns);
    if (mutate && (pool.n == 0 || !isfinite(pool.ns[0]))) {
      pool_free(&pool);
      tlm_spec_problem_free(&p);
      tlm_destroy(rt);
      continue; /* nothing measured to search from */
    }
    if (mutate) best_ns = pool.ns[0];
    tlm_schedule next_mutant, rule;
    int have_next = 0;
    /* the rule of this code may differ from the one measured when the task
     * was collected: measure it first (training compares against it) */
    tlm_space_default(&space, &rule);
    int need_rule = mutate && !pool_has(&pool, sched_hash(&rule));
    int task_schedules = propose ? ntop : schedules;
    for (int s = start; s < task_schedules; s++) {
      tlm_schedule sched;
      uint64_t sseed = task_seed + (uint64_t)s;
      int is_rule = 0;
      if (propose) {
        sched = top[s];
      } else if (mutate && need_rule) {
        sched = rule, need_rule = 0, is_rule = 1;
        pool_add(&pool, &sched, INFINITY);
      } else if (mutate) {
        if (have_next) {
          sched = next_mutant, have_next = 0; /* already in the pool */
        } else if (make_mutant(&space, &pool, &mrng, &sched)) {
          break; /* the neighbourhood is exhausted */
        } else {
          pool_add(&pool, &sched, INFINITY); /* taken: the pair's other one differs */
        }
      } else {
        schedule_for(&space, task_seed, s, &sched);
      }
      /* compile the next schedule on the other core meanwhile; timing
       * starts only when both compiles are done */
      prefetch pf = {rt, &task, {0}, 0};
      pthread_t th;
      int started = 0;
      if ((s - start) % 2 == 0 && s + 1 < task_schedules) {
        if (propose) {
          pf.sched = top[s + 1];
        } else if (mutate) {
          have_next = make_mutant(&space, &pool, &mrng, &next_mutant) == 0;
          if (have_next) pool_add(&pool, &next_mutant, INFINITY);
          pf.sched = next_mutant;
        } else {
          schedule_for(&space, task_seed, s + 1, &pf.sched);
        }
        if (!mutate || have_next) started = pthread_create(&th, NULL, prefetch_main, &pf) == 0;
      }
      tlm_kernel *k0 = NULL;
      tlm_engine_kernel(rt, &task, &sched, &k0, err, sizeof err); /* result reused below */
      if (started) pthread_join(th, NULL);
      const char *status = "ok";
      double med = 0, lo = 0, hi = 0, compile_ms = 0;
      int reps = 0;
      tlm_kernel *k = NULL;
      if (tlm_engine_kernel(rt, &task, &sched, &k, err, sizeof err)) {
        status = "compile_error";
      } else {
        compile_ms = k->compile_ms;
        if (tlm_engine_exec(rt, k, &task, p.args, err, sizeof err)) {
          status = "run_error";
        } else {
          double e = tlm_spec_problem_check(&p, 64, sseed);
          if (!(e >= 0 && e <= tol)) {
            status = "wrong";
          } else {
            tlm_timing tm;
            tlm_time_kernel(rt, k, &task, p.args, min_time_ms, best_ns, &tm);
            med = tm.median_ns, lo = tm.min_ns, hi = tm.max_ns, reps = tm.reps;
            if (med < best_ns) best_ns = med;
          }
        }
      }
      if (mutate) { /* the placeholder of this schedule now has its time */
        uint64_t h = sched_hash(&sched);
        for (int i = 0; i < pool.n; i++)
          if (pool.hash[i] == h) {
            pool_remove(&pool, i);
            break;
          }
        pool_add(&pool, &sched, med > 0 && !strcmp(status, "ok") ? med : INFINITY);
      }
      record_add(&out_buf, hw, threads, ts,
                 propose ? "model" : is_rule ? "default" : mutate ? "mutant" : s == 0 ? "default" : "random",
                 search ? round_no : 0, s, -1, &sched, status, med, lo, hi, reps, compile_ms);
      measured++;
      task_count++;
    }
    pool_free(&pool);
  publish:
    tlm_spec_problem_free(&p);
    tlm_destroy(rt);
    /* publish this task's records as one gzip member */
    gzFile gz = gzopen(out, "ab");
    if (!gz || gzwrite(gz, out_buf.p, (unsigned)out_buf.len) != (int)out_buf.len) {
      fprintf(stderr, "tlm collect: cannot append to %s\n", out);
      if (gz) gzclose(gz);
      free(out_buf.p);
      if (base) tlm_lm_free(base);
      free(base);
      return 1;
    }
    gzclose(gz);
    free(out_buf.p);
    tasks_done++;
    double el = now_s() - t_start, rate = measured / el;
    double eta = (double)(todo - tasks_done) * el / tasks_done;
    fprintf(stderr, "[%d/%d tasks] %s: %d schedules, %.1f schedules/s, ETA %.0f min\n",
            tasks_done, todo, ts->text, task_count, rate, eta / 60);
  }
  for (int i = 0; i < known.n; i++) free(known.v[i].task);
  free(known.v);
  if (base) tlm_lm_free(base);
  free(base);
  for (int i = 0; i < done.n; i++) free(done.task[i]);
  free(done.task);
  free(done.count);
  free(tasks);
  fprintf(stderr, "tlm collect: %d schedules measured in %.0f s\n", measured, now_s() - t_start);
  return 0;
}
