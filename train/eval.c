/* eval.c - `tlm eval`: the language model's schedules against the default
 * rule and random search, measured side by side per task.
 *
 * Per task: TLM-1 (greedy decode), TLM-k (best of the k most probable
 * schedules), the default rule, and the best of N random schedules from
 * the full space (N = --random, 64 by default; also best-of-64 when N is
 * larger). Speeds are reported relative to the best random schedule
 * (> 1 = faster), with geometric means over tasks, and the time each method
 * spends per task to produce its kernel (decode + compile, plus timing for
 * the methods that measure).
 *
 * Two stages: every candidate is screened (compiled, checked, timed once
 * for ~10 ms); then each method's finalists (the rule, TLM-1, TLM-k's two
 * fastest, the best of the first 64 random and the 4 fastest random) are
 * re-checked and timed again side by side in one interleaved run (7 rounds
 * of 4 ms each). The reported times are the final's: screening times taken
 * minutes or sessions apart differ by more than the schedules do. */
#include "eval.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "api/validate.h"
#include "lm/model.h"
#include "engine/engine.h"
#include "train/measure.h"
#include "train/problem.h"
#include "train/tasks.h"
#include "train/train.h"
#include "runtime/clock.h"

static double now_ms(void) { return tlm_clock_ms(); }

typedef struct method_result {
  double ns;         /* best median time, INFINITY if none ran */
  double make_ms;    /* decode + compile (+ measuring when the method measures) */
} method_result;

enum { M_TLM1, M_TLMK, M_DEFAULT, M_RAND64, M_RANDN, M_COUNT };
static const char *const k_names[M_COUNT] = {"tlm1", "tlmk", "default", "random64", "randomN"};

/* compiles, checks and times one schedule; returns median ns or INFINITY.
 * The first call is timed: a kernel over 3x `best` (and over 0.2 ms) cannot
 * win, so that single time is returned unchecked (pass INFINITY to always
 * check and time it fully). */
static double measure(tlm_runtime *rt, const tlm_task *task, const void *args,
                      const tlm_spec_problem *p, const tlm_schedule *s, double best, double *compile_ms,
                      int *wrong) {
  tlm_kernel *k;
  char err[256];
  double t0 = now_ms();
  if (tlm_engine_kernel(rt, task, s, &k, err, sizeof err)) return INFINITY;
  *compile_ms += now_ms() - t0;
  double first = tlm_now_ns();
  if (tlm_engine_exec(rt, k, task, args, err, sizeof err)) return INFINITY;
  first = tlm_now_ns() - first;
  if (first > 3 * best && first > 2e5) return first;
  double e = tlm_spec_problem_check(p, 32, 5);
  if (!(e >= 0 && e <= tlm_spec_problem_tolerance(p))) {
    (*wrong)++;
    return INFINITY;
  }
  tlm_timing tm;
  tlm_time_kernel(rt, k, task, args, 10, best, &tm);
  return tm.median_ns;
}

/* compiles a schedule on another core while this one compiles its pair */
typedef struct precompile {
  tlm_runtime *rt;
  const tlm_task *task;
  tlm_schedule sched;
} precompile;

static void *precompile_main(void *arg) {
  precompile *p = arg;
  tlm_kernel *k;
  char err[256];
  tlm_engine_kernel(p->rt, p->task, &p->sched, &k, err, sizeof err);
  return NULL;
}

enum { RAND_TOP = 4 }; /* random schedules that go on to the side-by-side final */

/* the fastest RAND_TOP schedules seen, ascending */
typedef struct rand_top {
  tlm_schedule sched[RAND_TOP];
  double ns[RAND_TOP];
  int n;
  tlm_schedule best64; /* the fastest among the first 64 */
} rand_top;

static void rand_top_add(rand_top *t, const tlm_schedule *s, double ns) {
  if (!isfinite(ns) || (t->n == RAND_TOP && ns >= t->ns[RAND_TOP - 1])) return;
  int i = t->n < RAND_TOP ? t->n++ : RAND_TOP - 1;
  while (i > 0 && t->ns[i - 1] > ns) t->sched[i] = t->sched[i - 1], t->ns[i] = t->ns[i - 1], i--;
  t->sched[i] = *s, t->ns[i] = ns;
}

/* Random search: up to n distinct schedules of the space (fewer when it
 * has fewer; 50 draws in a row that repeat end it), compiled two at a time
 * on both cores and then checked and timed one by one. Writes the best
 * median after 64 and after all, and the fastest schedules into *top;
 * returns how many were measured. */
static int random_search(tlm_runtime *rt, const tlm_task *task, const tlm_spec_problem *p,
                         const tlm_space *s, uint64_t seed, int n, double *best64,
                         double *bestn, rand_top *top, int *wrong) {
  uint64_t rng = seed, *seen = malloc(sizeof *seen * (size_t)n);
  int nseen = 0, repeats = 0;
  double best = INFINITY;
  *best64 = *bestn = INFINITY;
  tlm_schedule batch[2];
  while (seen && nseen < n && repeats < 50) {
    int nb = 0;
    while (nb < 2 && nseen < n && repeats < 50) {
      tlm_space_sample(s, &rng, &batch[nb]);
      uint64_t h = XXH3_64bits(batch[nb].v, sizeof batch[nb].v[0] * (size_t)batch[nb].n);
      int dup = 0;
      for (int i = 0; i < nseen && !dup; i++) dup = seen[i] == h;
      if (dup) {
        repeats++;
        continue;
      }
      repeats = 0;
      seen[nseen++] = h;
      nb++;
    }
    pthread_t th;
    precompile pc = {rt, task, nb == 2 ? batch[1] : batch[0]};
    int started = nb == 2 && pthread_create(&th, NULL, precompile_main, &pc) == 0;
    for (int i = 0; i < nb; i++) {
      if (i == 1 && started) pthread_join(th, NULL), started = 0;
      double c = 0;
      double ns = measure(rt, task, p->args, p, &batch[i], best, &c, wrong);
      if (ns < best) best = ns;
      rand_top_add(top, &batch[i], ns);
      if (nseen - nb + i + 1 <= 64 && top->n && top->ns[0] == best) top->best64 = top->sched[0];
      if (nseen - nb + i + 1 == 64) *best64 = best;
    }
    if (started) pthread_join(th, NULL);
  }
  if (nseen < 64) *best64 = best;
  *bestn = best;
  free(seen);
  return nseen;
}

/* --random-cache: random-search results kept per (task, N, hardware), so
 * evaluating another model does not repeat the 1,000-schedule searches */
typedef struct rcache {
  cJSON *root; /* array of {"task","random","hw","best64_ns","bestn_ns","measured","make_ms",
                "top":[[decisions]...] (fastest first),"best64":[decisions]} */
  const char *path;
} rcache;

static const cJSON *rcache_find(const rcache *c, const char *task, int n, const char *hw) {
  const cJSON *e;
  cJSON_ArrayForEach(e, c->root) {
    const cJSON *t = cJSON_GetObjectItem(e, "task"), *r = cJSON_GetObjectItem(e, "random"),
                *h = cJSON_GetObjectItem(e, "hw");
    if (cJSON_IsString(t) && cJSON_IsNumber(r) && cJSON_IsString(h) &&
        !strcmp(t->valuestring, task) && r->valueint == n && !strcmp(h->valuestring, hw) &&
        cJSON_IsNumber(cJSON_GetObjectItem(e, "best64_ns")) &&
        cJSON_IsNumber(cJSON_GetObjectItem(e, "bestn_ns")) &&
        cJSON_IsNumber(cJSON_GetObjectItem(e, "make_ms")) && cJSON_IsArray(cJSON_GetObjectItem(e, "top")))
      return e; /* entries without "top" (before the side-by-side final) are measured again */
  }
  return NULL;
}

static void rcache_load(rcache *c, const char *path) {
  c->path = path;
  c->root = NULL;
  FILE *f = path ? fopen(path, "rb") : NULL;
  if (f) {
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = len > 0 ? malloc((size_t)len + 1) : NULL;
    if (text && fread(text, 1, (size_t)len, f) == (size_t)len) {
      text[len] = 0;
      c->root = cJSON_Parse(text);
    }
    free(text);
    fclose(f);
    if (!c->root || !cJSON_IsArray(c->root)) {
      fprintf(stderr, "tlm eval: %s is not a random-search cache; starting a new one\n", path);
      cJSON_Delete(c->root);
      c->root = NULL;
    }
  }
  if (!c->root) c->root = cJSON_CreateArray();
}

/* writes the cache whole to a temporary file, then renames it over */
static void rcache_save(const rcache *c) {
  if (c->path && tlm_json_save(c->root, c->path))
    fprintf(stderr, "tlm eval: cannot write %s\n", c->path);
}

static cJSON *sched_json(const tlm_schedule *s) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; a && i < s->n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(s->v[i]));
  return a;
}

/* a cached schedule, accepted only if it is a point of this space */
static int sched_from_json(const cJSON *a, const tlm_space *s, tlm_schedule *out) {
  memset(out, 0, sizeof *out);
  if (!cJSON_IsArray(a)) return -1;
  for (const cJSON *x = a->child; x; x = x->next) {
    if (!cJSON_IsNumber(x) || out->n == TLM_MAX_POINTS) return -1;
    out->v[out->n++] = (int32_t)x->valueint;
  }
  return tlm_space_accepts(s, out) ? 0 : -1;
}

/* ---- the side-by-side final ----------------------------------------------- */

/* Each method's best candidates (by the screening times above) are timed
 * again, all in one interleaved run (tlm_time_side_by_side): the reported
 * times compare like with like, and the winner's luck of a single noisy
 * screening sample (best of 1,000 draws is biased fast) is measured away. */
typedef struct finalist {
  tlm_schedule sched;
  unsigned methods; /* bit m: counts for method m */
} finalist;

static void finalist_add(finalist *f, int *n, const tlm_schedule *s, int method) {
  if (s->n == 0) return;
  for (int i = 0; i < *n; i++)
    if (f[i].sched.n == s->n && !memcmp(f[i].sched.v, s->v, sizeof s->v[0] * (size_t)s->n)) {
      f[i].methods |= 1u << method;
      return;
    }
  if (*n == TLM_SIDE_MAX) return;
  f[*n].sched = *s;
  f[(*n)++].methods = 1u << method;
}


void tlm_eval_opts_init(tlm_eval_opts *o) {
  *o = (tlm_eval_opts){.k = 10, .nrand = 64, .threads = 2, .max_tasks = 1 << 30, .rounds = 7,
                       .rule_bonus = NAN, .margin = NAN, .shared = "../shared"};
}

int tlm_eval_opts_check(const tlm_eval_opts *o) {
  int bad = o->k < 0 || o->nrand < 0 || o->threads < 1 || o->skip < 0 || o->rounds < 1 ||
            o->rounds > TLM_SIDE_ROUNDS || isinf(o->rule_bonus) || o->margin < 0 ||
            isinf(o->margin) || (!o->heldout && !o->nfiles && !o->nspecs) || o->nspecs < 0 ||
            (o->nspecs && !o->specs) || o->nfiles < 0 || o->nfiles > TLM_EVAL_MAX_FILES;
  return bad ? -1 : 0;
}

/* Appends nadd specs to the malloc'd list (*specs, *n). 0, or -1 out of
 * memory (the list freed, a message on stderr). */
static int append_specs(tlm_task_spec **specs, int *n, const tlm_task_spec *add, int nadd) {
  tlm_task_spec *more = realloc(*specs, sizeof *more * (size_t)(*n + nadd));
  if (!more) {
    fprintf(stderr, "tlm eval: out of memory\n");
    free(*specs);
    *specs = NULL;
    return -1;
  }
  memcpy(more + *n, add, sizeof *more * (size_t)nadd);
  *specs = more, *n += nadd;
  return 0;
}

int tlm_eval_run(const tlm_eval_opts *o) {
  int k = o->k, nrand = o->nrand, threads = o->threads, max_tasks = o->max_tasks, skip = o->skip;
  int heldout = o->heldout, rounds = o->rounds;
  double max_gflop = o->max_gflop, rule_bonus = o->rule_bonus;
  const char *model = o->model, *json = o->json, *shared = o->shared;
  const char *rcache_path = o->rcache_path, *family = o->family;
  const char *const *files = o->files;
  int nfiles = o->nfiles;
  tlm_task_spec *specs = NULL;
  int n = 0;
  char err[512];
  if (heldout && (n = tlm_tasks_heldout(shared, &specs, err, sizeof err)) < 0) {
    fprintf(stderr, "tlm eval: %s\n", err);
    return 1;
  }
  for (int f = 0; f < nfiles; f++) {
    tlm_task_spec *fs;
    int nf = tlm_tasks_from_file(files[f], &fs, err, sizeof err);
    if (nf < 0) {
      fprintf(stderr, "tlm eval: %s\n", err);
      free(specs);
      return 1;
    }
    int bad = append_specs(&specs, &n, fs, nf);
    free(fs);
    if (bad) return 1;
  }
  if (o->nspecs > 0 && append_specs(&specs, &n, o->specs, o->nspecs)) return 1;
  if (!specs || n == 0) {
    fprintf(stderr, "tlm eval: no tasks\n");
    free(specs);
    return 1;
  }
  if (family) {
    int kept = 0;
    for (int i = 0; i < n; i++)
      if (strstr(specs[i].family, family)) specs[kept++] = specs[i];
    n = kept;
  }
  if (max_gflop > 0) { /* keep the tasks a 1,000-schedule search can afford */
    int kept = 0;
    for (int i = 0; i < n; i++)
      if (tlm_task_spec_flop(&specs[i]) <= max_gflop * 1e9) specs[kept++] = specs[i];
    if (kept < n) printf("%d of %d tasks above %g GFLOP left out\n", n - kept, n, max_gflop);
    n = kept;
  }
  if (skip > 0) { /* e.g. a validation set of the first tasks, a test set after them */
    if (skip > n) skip = n;
    memmove(specs, specs + skip, sizeof *specs * (size_t)(n - skip));
    n -= skip;
  }
  if (n > max_tasks) n = max_tasks;
  /* with --random 0 the rule is the reference every speed is relative to */
  const int ref_m = nrand ? M_RANDN : M_DEFAULT;
  const char *ref_key = nrand ? "random" : "default";
  int used[M_COUNT]; /* the methods this run measures */
  for (int m = 0; m < M_COUNT; m++)
    used[m] = m == M_TLMK ? k > 0 : (m == M_RAND64 || m == M_RANDN) ? nrand > 0 : 1;
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.cache_dir = "none"; /* measure compiles, never reuse them */
  cfg.async_compile = 0; /* every kernel its own, built before the call returns */
  cfg.num_threads = threads;
  if (model) cfg.model_path = model;
  /* the JSON, built as the run goes and written whole at its end
   * (tlm_json_save: a temporary file renamed, never a partial file) */
  cJSON *jroot = json ? cJSON_CreateObject() : NULL, *jtasks = NULL;
  if (jroot) {
    static const char *const setup[] = {"k", "random", "threads", "final_rounds", "skipped_tasks",
                                        "rule_bonus", "sentence_margin"};
    tlm_json_numbers(jroot, setup,
                     (const double[]){k, nrand, threads, rounds, skip,
                                      !isnan(rule_bonus) ? rule_bonus : TLM_LM_RULE_BONUS,
                                      !isnan(o->margin) ? o->margin : TLM_LM_SENTENCE_MARGIN},
                     7);
    jtasks = cJSON_AddArrayToObject(jroot, "tasks");
  }
  double logsum[M_COUNT] = {0}, make_sum[M_COUNT] = {0};
  int counted = 0, tlm_beats_default = 0, tlm_same_default = 0, wrong = 0, cached = 0;
  int tlm_near_default = 0; /* different schedule, within 2% of the rule's time either way */
  int tlm_win2 = 0, tlm_loss2 = 0; /* TLM-1 faster / slower than the rule by more than 2% */
  rcache rc;
  rcache_load(&rc, rcache_path);
  /* per family: sums of log speed vs random-N and counts */
  enum { MAX_FAM = 64 };
  /* plain greedy decoding (--margin 0): what selective decoding at the
   * default margin would give, from the two schedules' log-probabilities
   * (a task under the margin runs the rule's kernel: speed 1) */
  double sel_margin = TLM_LM_SENTENCE_MARGIN, sel_logsum = 0, sel_fam_log[MAX_FAM] = {0};
  int sel_on = 0, sel_used = 0;
  char fam_name[MAX_FAM][48]; /* as tlm_task_spec.family */
  double fam_log[MAX_FAM][M_COUNT];
  int fam_n[MAX_FAM], fam_beats[MAX_FAM], nfam = 0;
  memset(fam_log, 0, sizeof fam_log);
  if (nrand)
    printf("%-44s %9s %9s %9s %9s   (speed vs best-of-%d random; 1.00 = equal)\n", "task", "tlm1",
           "tlmk", "default", "rand64", nrand);
  else
    printf("%-44s %9s %9s   (speed vs the default rule; 1.00 = equal)\n", "task", "tlm1", "tlmk");
  for (int t = 0; t < n; t++) {
    tlm_runtime *rt;
    if (tlm_create(&cfg, &rt)) {
      fprintf(stderr, "tlm eval: %s\n", tlm_last_error(NULL));
      return 1;
    }
    if (!rt->model && t == 0) {
      /* no model, or one trained for another ISA or rule version
       * (TLM_VERBOSE=1 says which): tlm_run schedules with the rule, and
       * so does TLM-1 here */
      fprintf(stderr, "tlm eval: no model serves this target (%s): TLM-1 is the rule, as in "
                      "tlm_run; no TLM-k\n", model ? model : "the shipped one");
      k = 0;
    }
    if (rt->model && !isnan(rule_bonus)) rt->model->rule_bonus = rule_bonus;
    if (rt->model && !isnan(o->margin)) rt->model->sentence_margin = o->margin;
    tlm_spec_problem p;
    if (tlm_spec_problem_make(&specs[t], 3, &p)) {
      tlm_destroy(rt);
      continue;
    }
    const tlm_task task = p.task;
    tlm_space s;
    tlm_space_init(&s, &task, &rt->target);
    method_result r[M_COUNT];
    for (int m = 0; m < M_COUNT; m++) r[m] = (method_result){INFINITY, 0};
    /* default rule */
    tlm_schedule sched;
    double t0 = now_ms();
    tlm_space_default(&s, &sched);
    r[M_DEFAULT].make_ms = now_ms() - t0;
    r[M_DEFAULT].ns = measure(rt, &task, p.args, &p, &sched, INFINITY, &r[M_DEFAULT].make_ms, &wrong);
    tlm_schedule rule = sched;
    /* TLM-1; the rule's own schedule is the rule's kernel: its time is the
     * rule's, a tie (measuring it again would only draw noise) */
    t0 = now_ms();
    /* as tlm_run: the model where it knows the task's family */
    int covered = rt->model && tlm_lm_covers_task(rt->model, &task, &s.target);
    if (covered) tlm_lm_decode(rt->model, &s, &sched, NULL);
    r[M_TLM1].make_ms = now_ms() - t0;
    /* how sure the model is: natural-log probabilities of both schedules
     * (for the JSON, and for selective decoding after the fact) */
    double lp1 = 0, lp0 = 0;
    int have_lp = rt->model && (jtasks || covered) &&
                  tlm_lm_score(rt->model, &s, &sched, &lp1) == TLM_OK &&
                  tlm_lm_score(rt->model, &s, &rule, &lp0) == TLM_OK;
    int sel_task = have_lp && covered && rt->model->sentence_margin == 0;
    sel_on |= sel_task;
    int same = !memcmp(sched.v, rule.v, sizeof rule.v[0] * (size_t)rule.n);
    if (same) r[M_TLM1].ns = r[M_DEFAULT].ns;
    else r[M_TLM1].ns = measure(rt, &task, p.args, &p, &sched, INFINITY, &r[M_TLM1].make_ms, &wrong);
    finalist fin[TLM_SIDE_MAX];
    int nfin = 0;
    finalist_add(fin, &nfin, &rule, M_DEFAULT);
    finalist_add(fin, &nfin, &sched, M_TLM1);
    /* TLM-k: its two fastest by screening go to the final */
    tlm_schedule *top = k ? malloc(sizeof *top * (size_t)k) : NULL;
    t0 = now_ms();
    int nk = top && covered ? tlm_lm_decode_topk(rt->model, &s, k, top, NULL) : 0;
    r[M_TLMK].make_ms = now_ms() - t0;
    double k2_ns = INFINITY;
    tlm_schedule k1 = {0}, k2 = {0};
    for (int i = 0; i < nk; i++) {
      double c = 0, st = now_ms();
      double ns = measure(rt, &task, p.args, &p, &top[i], r[M_TLMK].ns, &c, &wrong);
      r[M_TLMK].make_ms += now_ms() - st;
      if (ns < r[M_TLMK].ns) k2 = k1, k2_ns = r[M_TLMK].ns, k1 = top[i], r[M_TLMK].ns = ns;
      else if (ns < k2_ns) k2 = top[i], k2_ns = ns;
      if (!memcmp(top[i].v, sched.v, sizeof sched.v[0] * (size_t)sched.n))
        finalist_add(fin, &nfin, &sched, M_TLMK); /* TLM-1 is one of the k */
    }
    finalist_add(fin, &nfin, &k1, M_TLMK);
    finalist_add(fin, &nfin, &k2, M_TLMK);
    free(top);
    /* random search */
    char hw[200];
    snprintf(hw, sizeof hw, "%s; %d threads", tlm_jit_cpu(rt->jit), threads);
    const cJSON *hit = nrand ? rcache_find(&rc, specs[t].text, nrand, hw) : NULL;
    rand_top rtop;
    memset(&rtop, 0, sizeof rtop);
    if (hit) {
      r[M_RAND64].ns = cJSON_GetObjectItem(hit, "best64_ns")->valuedouble;
      r[M_RANDN].ns = cJSON_GetObjectItem(hit, "bestn_ns")->valuedouble;
      r[M_RAND64].make_ms = r[M_RANDN].make_ms = cJSON_GetObjectItem(hit, "make_ms")->valuedouble;
      if (r[M_RAND64].ns <= 0) r[M_RAND64].ns = INFINITY;
      if (r[M_RANDN].ns <= 0) r[M_RANDN].ns = INFINITY;
      const cJSON *e;
      cJSON_ArrayForEach(e, cJSON_GetObjectItem(hit, "top")) {
        if (rtop.n < RAND_TOP && !sched_from_json(e, &s, &rtop.sched[rtop.n])) rtop.n++;
      }
      if (sched_from_json(cJSON_GetObjectItem(hit, "best64"), &s, &rtop.best64)) rtop.best64.n = 0;
      cached++;
    } else if (nrand) {
      t0 = now_ms();
      int got = random_search(rt, &task, &p, &s, XXH3_64bits(specs[t].text, strlen(specs[t].text)),
                              nrand, &r[M_RAND64].ns, &r[M_RANDN].ns, &rtop, &wrong);
      r[M_RANDN].make_ms = now_ms() - t0;
      r[M_RAND64].make_ms = r[M_RANDN].make_ms * (got < 64 ? 1.0 : 64.0 / got);
      if (rcache_path) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "task", specs[t].text);
        cJSON_AddNumberToObject(e, "random", nrand);
        cJSON_AddStringToObject(e, "hw", hw);
        cJSON_AddNumberToObject(e, "measured", got);
        cJSON_AddNumberToObject(e, "best64_ns", isfinite(r[M_RAND64].ns) ? r[M_RAND64].ns : -1);
        cJSON_AddNumberToObject(e, "bestn_ns", isfinite(r[M_RANDN].ns) ? r[M_RANDN].ns : -1);
        cJSON_AddNumberToObject(e, "make_ms", r[M_RANDN].make_ms);
        cJSON *ta = cJSON_AddArrayToObject(e, "top");
        for (int i = 0; i < rtop.n; i++) cJSON_AddItemToArray(ta, sched_json(&rtop.sched[i]));
        if (rtop.best64.n) cJSON_AddItemToObject(e, "best64", sched_json(&rtop.best64));
        cJSON_AddItemToArray(rc.root, e);
        rcache_save(&rc);
      }
    }
    finalist_add(fin, &nfin, &rtop.best64, M_RAND64);
    finalist_add(fin, &nfin, &rtop.best64, M_RANDN);
    for (int i = 0; i < rtop.n; i++) finalist_add(fin, &nfin, &rtop.sched[i], M_RANDN);
    /* the final: every finalist checked, then all timed side by side */
    method_result screen[M_COUNT];
    memcpy(screen, r, sizeof screen);
    const tlm_kernel *fk[TLM_SIDE_MAX];
    int fi[TLM_SIDE_MAX], nf = 0;
    for (int i = 0; i < nfin; i++) {
      tlm_kernel *kk;
      if (tlm_engine_kernel(rt, &task, &fin[i].sched, &kk, err, sizeof err) ||
          tlm_engine_exec(rt, kk, &task, p.args, err, sizeof err))
        continue;
      double e = tlm_spec_problem_check(&p, 32, 7);
      if (!(e >= 0 && e <= tlm_spec_problem_tolerance(&p))) {
        wrong++;
        continue;
      }
      fk[nf] = kk;
      fi[nf++] = i;
    }
    tlm_timing ftm[TLM_SIDE_MAX];
    tlm_time_side_by_side(rt, fk, nf, &task, p.args, rounds, 4.0, ftm);
    int win[M_COUNT]; /* the finalist each method's time comes from (-1: none) */
    for (int m = 0; m < M_COUNT; m++) {
      r[m].ns = INFINITY;
      win[m] = -1;
      for (int j = 0; j < nf; j++)
        if ((fin[fi[j]].methods >> m & 1) && ftm[j].median_ns < r[m].ns)
          r[m].ns = ftm[j].median_ns, win[m] = fi[j];
    }
    double ref = r[ref_m].ns;
    char label[48];
    snprintf(label, sizeof label, "%.43s", specs[t].text);
    printf("%-44s", label);
    for (int m = 0; m < (nrand ? M_COUNT - 1 : M_DEFAULT); m++)
      if (isfinite(r[m].ns)) printf(" %9.2f", ref / r[m].ns);
      else printf(" %9s", "-");
    printf("\n");
    fflush(stdout);
    if (isfinite(ref)) {
      counted++;
      for (int m = 0; m < M_COUNT; m++)
        if (used[m]) {
          logsum[m] += log(ref / r[m].ns);
          make_sum[m] += r[m].make_ms;
        }
      tlm_beats_default += r[M_TLM1].ns < r[M_DEFAULT].ns;
      tlm_same_default += same;
      tlm_near_default += !same && fabs(r[M_TLM1].ns / r[M_DEFAULT].ns - 1) <= 0.02;
      tlm_win2 += r[M_DEFAULT].ns > 1.02 * r[M_TLM1].ns;
      tlm_loss2 += r[M_TLM1].ns > 1.02 * r[M_DEFAULT].ns;
      int f = 0;
      while (f < nfam && strcmp(fam_name[f], specs[t].family)) f++;
      if (f == nfam && nfam < MAX_FAM) {
        snprintf(fam_name[f], sizeof fam_name[f], "%s", specs[t].family);
        fam_n[f] = fam_beats[f] = 0;
        nfam++;
      }
      double sel_log =
          sel_task && lp1 - lp0 >= sel_margin ? log(r[M_DEFAULT].ns / r[M_TLM1].ns) : 0.0;
      sel_used += sel_task && !same && lp1 - lp0 >= sel_margin;
      sel_logsum += sel_log;
      if (f < nfam) {
        fam_n[f]++;
        sel_fam_log[f] += sel_log;
        fam_beats[f] += r[M_TLM1].ns < r[M_DEFAULT].ns;
        for (int m = 0; m < M_COUNT; m++)
          if (used[m]) fam_log[f][m] += log(ref / r[m].ns);
      }
    }
    if (jtasks) {
      char s1[512], s0[512], key[64];
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "task", specs[t].text);
      cJSON_AddStringToObject(o, "family", specs[t].family);
      cJSON_AddBoolToObject(o, "tlm1_is_default", same);
      cJSON_AddStringToObject(o, "tlm1_schedule", tlm_schedule_str(&s, &sched, s1, sizeof s1));
      cJSON_AddStringToObject(o, "default_schedule", tlm_schedule_str(&s, &rule, s0, sizeof s0));
      if (have_lp) {
        cJSON_AddNumberToObject(o, "tlm1_logp", lp1);
        cJSON_AddNumberToObject(o, "default_logp", lp0);
      }
      if (used[M_TLMK] && win[M_TLMK] >= 0)
        cJSON_AddStringToObject(o, "tlmk_schedule",
                                tlm_schedule_str(&s, &fin[win[M_TLMK]].sched, s1, sizeof s1));
      for (int m = 0; m < M_COUNT; m++)
        if (used[m]) {
          snprintf(key, sizeof key, "%s_ns", k_names[m]);
          cJSON_AddNumberToObject(o, key, isfinite(r[m].ns) ? r[m].ns : -1.0);
          snprintf(key, sizeof key, "%s_screen_ns", k_names[m]);
          cJSON_AddNumberToObject(o, key, isfinite(screen[m].ns) ? screen[m].ns : -1.0);
          snprintf(key, sizeof key, "%s_make_ms", k_names[m]);
          cJSON_AddNumberToObject(o, key, r[m].make_ms);
        }
      cJSON_AddItemToArray(jtasks, o);
    }
    tlm_spec_problem_free(&p);
    tlm_destroy(rt);
  }
  if (nrand) printf("\n%d tasks; geometric mean speed relative to best-of-%d random:\n", counted, nrand);
  else printf("\n%d tasks; geometric mean speed relative to the default rule:\n", counted);
  for (int m = 0; m < M_COUNT; m++)
    if (used[m])
      printf("  %-9s %.3f   (%.1f ms per task to make the kernel)\n", k_names[m],
           counted ? exp(logsum[m] / counted) : 0, counted ? make_sum[m] / counted : 0);
  printf("  TLM-1 faster than the default rule on %d of %d tasks (%.0f%%); the rule's own schedule on %d;\n"
         "  another schedule within 2%% of the rule's time on %d\n",
         tlm_beats_default, counted, counted ? 100.0 * tlm_beats_default / counted : 0,
         tlm_same_default, tlm_near_default);
  printf("  TLM-1 faster than the rule by more than 2%% on %d, slower by more than 2%% on %d\n",
         tlm_win2, tlm_loss2);
  printf("\nper family (geometric mean speed vs %s; TLM-1 faster than rule):\n",
         nrand ? "best-of-N random" : "the rule");
  printf("  %-28s %5s %7s %7s %7s %7s %s\n", "family", "tasks", "tlm1", "tlmk", "rule", "rand64",
         "tlm1>rule");
  for (int f = 0; f < nfam; f++) {
    printf("  %-28s %5d", fam_name[f], fam_n[f]);
    const int cols[4] = {M_TLM1, M_TLMK, M_DEFAULT, M_RAND64};
    for (int c = 0; c < 4; c++)
      if (used[cols[c]]) printf(" %7.3f", exp(fam_log[f][cols[c]] / fam_n[f]));
      else printf(" %7s", "-");
    printf(" %d/%d\n", fam_beats[f], fam_n[f]);
  }
  int sel_low = -1;
  for (int f = 0; f < nfam; f++)
    if (sel_low < 0 || sel_fam_log[f] / fam_n[f] < sel_fam_log[sel_low] / fam_n[sel_low]) sel_low = f;
  if (sel_on && counted && sel_low >= 0)
    printf("\nselective decoding at margin %.2f (from the log-probabilities): TLM-1 / rule %.3f,\n"
           "  greedy used on %d tasks, lowest family %s %.3f\n",
           sel_margin, exp(sel_logsum / counted), sel_used, fam_name[sel_low],
           exp(sel_fam_log[sel_low] / fam_n[sel_low]));
  if (cached) printf("  (random search of %d tasks reused from %s)\n", cached, rcache_path);
  if (wrong) printf("  WARNING: %d kernels failed the reference check\n", wrong);
  int rc_json = 0;
  if (jroot) {
    char key[96];
    cJSON_AddNumberToObject(jroot, "counted", counted);
    for (int m = 0; m < M_COUNT; m++)
      if (used[m]) {
        snprintf(key, sizeof key, "%s_geomean_speed_vs_%s", k_names[m], ref_key);
        cJSON_AddNumberToObject(jroot, key, counted ? exp(logsum[m] / counted) : 0);
        snprintf(key, sizeof key, "%s_make_ms_mean", k_names[m]);
        cJSON_AddNumberToObject(jroot, key, counted ? make_sum[m] / counted : 0);
      }
    cJSON_AddNumberToObject(jroot, "tlm1_faster_than_default_fraction",
                            counted ? (double)tlm_beats_default / counted : 0);
    static const char *const counts[] = {
        "wrong_kernels", "tlm1_same_schedule_as_default", "tlm1_within_2pct_of_default",
        "tlm1_faster_by_2pct_than_default", "tlm1_slower_by_2pct_than_default",
        "random_searches_reused"};
    tlm_json_numbers(jroot, counts,
                     (const double[]){wrong, tlm_same_default, tlm_near_default, tlm_win2,
                                      tlm_loss2, cached},
                     6);
    if (sel_on && counted && sel_low >= 0) {
      cJSON *o = cJSON_AddObjectToObject(jroot, "selective_from_logp");
      cJSON_AddNumberToObject(o, "sentence_margin", sel_margin);
      cJSON_AddNumberToObject(o, "tlm1_geomean_speed_vs_default", exp(sel_logsum / counted));
      cJSON_AddNumberToObject(o, "greedy_used", sel_used);
      cJSON_AddStringToObject(o, "lowest_family", fam_name[sel_low]);
      cJSON_AddNumberToObject(o, "lowest_family_speed_vs_default",
                              exp(sel_fam_log[sel_low] / fam_n[sel_low]));
    }
    cJSON *fams = cJSON_AddArrayToObject(jroot, "families");
    for (int f = 0; f < nfam; f++) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "family", fam_name[f]);
      cJSON_AddNumberToObject(o, "tasks", fam_n[f]);
      cJSON_AddNumberToObject(o, "tlm1_faster_than_default", fam_beats[f]);
      for (int m = 0; m < M_COUNT; m++)
        if (used[m]) {
          snprintf(key, sizeof key, "%s_geomean_speed_vs_%s", k_names[m], ref_key);
          cJSON_AddNumberToObject(o, key, exp(fam_log[f][m] / fam_n[f]));
        }
      if (sel_on) cJSON_AddNumberToObject(o, "selective_tlm1_speed_vs_default",
                                          exp(sel_fam_log[f] / fam_n[f]));
      cJSON_AddItemToArray(fams, o);
    }
    if (tlm_json_save(jroot, json)) {
      fprintf(stderr, "tlm eval: cannot write %s\n", json);
      rc_json = 1;
    }
    cJSON_Delete(jroot);
  }
  cJSON_Delete(rc.root);
  free(specs);
  return wrong || rc_json ? 1 : 0;
}
