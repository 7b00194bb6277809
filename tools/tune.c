/* tune.c - `tlm tune`: offline measured tuning of the shapes of benchdnn
 * files into the disk cache (issue #17, item 4).
 *
 * Per task: the schedule tlm_run would pick (the model's, or the rule's
 * where no model serves the host), the model's next most probable ones
 * (beam search) when a model serves it, and neighbours of the pick (one or
 * two decisions moved to an adjacent candidate) up to K candidates; each is
 * compiled, run once on the task's own random operands and checked against
 * the reference (a wrong kernel is never kept), then all are timed side by
 * side. The fastest is stored as the task's plan, marked measured, under
 * the key tlm_run computes, so later processes run it without decoding or
 * compiling. The pick is kept unless another candidate is more than 2%
 * faster (timing noise must not replace it). */
#include "tools/tune.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/disk.h"
#include "cache/key.h"
#include "lm/model.h"
#include "train/measure.h"
#include "engine/engine.h"
#include "runtime/clock.h"
#include "train/tasks.h"
#include "tlm.h"

enum { TUNE_MAX_K = TLM_SIDE_MAX };

static double now_ms(void) { return tlm_clock_ms(); }

static void usage(void) {
  fprintf(stderr,
          "usage: tlm tune [--k K] [--threads T] [--rounds R] [--dry-run] [--json F]\n"
          "                [--from-cache] [--heldout [--shared DIR] [--max-tasks N]] [FILE...]\n"
          "  Measured tuning of every shape of benchdnn matmul or convolution files\n"
          "  (convolutions as NHWC with bias and ReLU, minibatch 1; shapes at their\n"
          "  own extents): K candidates a task (default 10, at most %d: the pick of\n"
          "  tlm_run, the model's next best, neighbours of the pick), each checked\n"
          "  against the reference and timed side by side (R rounds, default 5) with\n"
          "  T threads (default: TLM_NUM_THREADS or all CPUs, as tlm_run). The\n"
          "  fastest goes into the disk cache (TLM_CACHE_DIR) as the task's measured\n"
          "  plan, with its kernel: later runs with this model and target use it.\n"
          "  --from-cache: also every shape the disk cache holds a plan for (the\n"
          "  user's own shapes, at their own strides; plans of this target, versions\n"
          "  and scheduler not measured yet), with the cached plan as the pick and\n"
          "  the candidates checked against its output on random operands.\n"
          "  --heldout: also the held-out families of the collection's task list\n"
          "  (as tlm eval --heldout: M reduced above 4 GFLOP; families in turn, so\n"
          "  --max-tasks N samples them all; workloads under DIR, default ../shared):\n"
          "  the measured top-k mode's figure against tlm_run's pick.\n"
          "  --dry-run measures and reports without storing.\n",
          TUNE_MAX_K);
}

/* What a task's candidates are checked against: the reference of a
 * benchdnn problem, or (a task read from the cache, no tensors) the
 * pick's own output on the same operands. */
typedef struct tune_check {
  tlm_spec_problem *p;     /* reference check, or NULL */
  tlm_task_operands *o;    /* differential check against ref */
  float *ref;
} tune_check;

/* 1 when the output of the candidate just run is right; i: its index (0:
 * the pick, whose output becomes the reference of the differential check) */
static int check_output(tune_check *c, int i) {
  if (c->p) {
    double e = tlm_spec_problem_check(c->p, 32, 7);
    return e >= 0 && e <= tlm_spec_problem_tolerance(c->p);
  }
  const float *out = c->o->buf[c->o->out];
  size_t n = c->o->n[c->o->out];
  if (i == 0) {
    memcpy(c->ref, out, n * sizeof(float));
    return 1;
  }
  return tlm_engine_outputs_agree(out, c->ref, n);
}

typedef struct tune_totals {
  double logsum, tune_total;
  int counted, improved, failed, wrong;
  /* against the rule's schedule (#17's figure), timed beside the
   * candidates where the pick is not the rule's (then not a candidate) */
  double rule_logsum, confirmed_logsum;
  int beats_rule, confirmed_beats;
} tune_totals;

/* Tunes one task in a runtime of its own (its kernels live until the task
 * is done): K candidates from `pick` (NULL: what tlm_run would pick),
 * checked, timed side by side, the fastest stored unless dry. */
static void tune_task(const tlm_config *cfg, int k, int rounds, int dry, cJSON *jf,
                      const char *text, const tlm_task *task, const void *args, tune_check *chk,
                      const tlm_schedule *pick, uint64_t seed, tune_totals *tt) {
  double t0 = now_ms();
  char err[512];
  tlm_runtime *trt = NULL;
  if (tlm_create(cfg, &trt) != TLM_OK) {
    fprintf(stderr, "tlm tune: %s\n", tlm_last_error(NULL));
    tt->failed++;
    return;
  }
  tlm_space s;
  if (tlm_space_init(&s, task, &trt->target) || (pick && !tlm_space_accepts(&s, pick))) {
    tlm_destroy(trt);
    tt->failed++;
    return;
  }
  tlm_schedule p0, cand[TUNE_MAX_K];
  if (pick) p0 = *pick;
  else tlm_engine_schedule(trt, &s, &p0);
  int n_model = 0;
  int nc = tlm_engine_tune_candidates(trt, &s, &p0, k, seed, cand, &n_model);
  /* the rule's schedule: the reference of the speed against the rule; a
   * candidate where it is one, else timed beside them and never kept */
  tlm_schedule rule;
  tlm_space_default(&s, &rule);
  int rule_at = -1;
  for (int i = 0; i < nc; i++)
    if (rule.n == cand[i].n && !memcmp(rule.v, cand[i].v, sizeof rule.v[0] * (size_t)rule.n))
      rule_at = i;
  const tlm_kernel *kern[TUNE_MAX_K + 1];
  int idx[TUNE_MAX_K], nk = 0;
  for (int i = 0; i < nc; i++) {
    tlm_kernel *kk;
    if (tlm_engine_kernel(trt, task, &cand[i], &kk, err, sizeof err) ||
        tlm_engine_exec(trt, kk, task, args, err, sizeof err))
      continue;
    if (!check_output(chk, i)) {
      tt->wrong += i > 0 || chk->p; /* never kept; a bug to report, counted in the summary */
      if (i == 0) break;
      continue;
    }
    kern[nk] = kk;
    idx[nk++] = i;
  }
  if (nk == 0 || idx[0] != 0) {
    fprintf(stderr, "tlm tune: %s: the pick did not compile or run correctly: skipped\n", text);
    tlm_destroy(trt);
    tt->failed++;
    return;
  }
  int rule_k = -1; /* the rule's kernel among kern[] */
  for (int j = 0; j < nk; j++)
    if (idx[j] == rule_at) rule_k = j;
  int extra = 0;
  if (rule_k < 0 && nk < TLM_SIDE_MAX) {
    tlm_kernel *kk;
    if (!tlm_engine_kernel(trt, task, &rule, &kk, err, sizeof err) &&
        !tlm_engine_exec(trt, kk, task, args, err, sizeof err) && check_output(chk, 1)) {
      kern[nk] = kk;
      rule_k = nk;
      extra = 1;
    }
  }
  tlm_timing tm[TUNE_MAX_K + 1];
  tlm_time_side_by_side(trt, kern, nk + extra, task, args, rounds, 4.0, tm);
  int best = 0;
  for (int j = 1; j < nk; j++)
    if (tm[j].median_ns < tm[best].median_ns) best = j;
  if (tm[best].median_ns > 0.98 * tm[0].median_ns) best = 0; /* within noise: keep the pick */
  double tune_ms = now_ms() - t0;
  int stored = 0;
  if (!dry) {
    tlm_status st = tlm_engine_store_measured_plan(trt, task, &cand[idx[best]],
                                                   tm[best].median_ns, err, sizeof err);
    if (st != TLM_OK) fprintf(stderr, "tlm tune: %s: %s\n", text, err);
    stored = st == TLM_OK;
  }
  double speedup = tm[0].median_ns / tm[best].median_ns;
  double vs_rule = rule_k >= 0 ? tm[rule_k].median_ns / tm[best].median_ns : speedup;
  tt->rule_logsum += log(vs_rule);
  tt->beats_rule += vs_rule > 1.02;
  /* the kept kernel against the rule's once more, in a timing of their
   * own: the fastest of K noisy medians is biased fast (the winner's
   * curse), the figure of this second timing is not */
  double confirmed = 1.0;
  if (rule_k >= 0 && best != rule_k) {
    const tlm_kernel *pair[2] = {kern[rule_k], kern[best]};
    tlm_timing tc[2];
    tlm_time_side_by_side(trt, pair, 2, task, args, rounds, 4.0, tc);
    confirmed = tc[0].median_ns / tc[1].median_ns;
  }
  tt->confirmed_logsum += log(confirmed);
  tt->confirmed_beats += confirmed > 1.02;
  tt->logsum += log(speedup);
  tt->tune_total += tune_ms;
  tt->counted++;
  tt->improved += best != 0;
  printf("%-58.58s %6d %10.2f %10.2f %7.3f %9.0f\n", text, nk, tm[0].median_ns * 1e-3,
         tm[best].median_ns * 1e-3, speedup, tune_ms);
  if (jf) {
    char ss[512];
    tlm_schedule_str(&s, &cand[idx[best]], ss, sizeof ss);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "task", text);
    cJSON_AddNumberToObject(o, "candidates", nk);
    cJSON_AddNumberToObject(o, "pick_ns", tm[0].median_ns);
    cJSON_AddNumberToObject(o, "tuned_ns", tm[best].median_ns);
    cJSON_AddNumberToObject(o, "speedup", speedup);
    if (rule_k >= 0) cJSON_AddNumberToObject(o, "rule_ns", tm[rule_k].median_ns);
    cJSON_AddNumberToObject(o, "speedup_vs_rule", vs_rule);
    cJSON_AddNumberToObject(o, "confirmed_speedup_vs_rule", confirmed);
    cJSON_AddBoolToObject(o, "changed", best != 0);
    /* where the kept schedule came from: 0 the pick, 1..model_candidates
     * the model's top-k, after them the pick's neighbours */
    cJSON_AddNumberToObject(o, "winner_index", idx[best]);
    cJSON_AddNumberToObject(o, "model_candidates", n_model);
    /* every timed candidate: its index in the candidate list, median ns */
    cJSON *ca = cJSON_AddArrayToObject(o, "candidate_ns");
    for (int j = 0; j < nk; j++) {
      cJSON *pair = cJSON_CreateArray();
      cJSON_AddItemToArray(pair, cJSON_CreateNumber(idx[j]));
      cJSON_AddItemToArray(pair, cJSON_CreateNumber(tm[j].median_ns));
      cJSON_AddItemToArray(ca, pair);
    }
    cJSON_AddBoolToObject(o, "stored", stored);
    cJSON_AddNumberToObject(o, "tune_ms", tune_ms);
    cJSON_AddStringToObject(o, "schedule", ss);
    cJSON_AddItemToArray(jf, o);
  }
  tlm_destroy(trt);
}

/* --from-cache: every plan in the disk cache made for this runtime's
 * target and scheduler (the task is in its key) and not measured yet */
static void tune_from_cache(tlm_runtime *rt, const tlm_config *cfg, int k, int rounds, int dry,
                            cJSON *jf, tune_totals *tt) {
  char dir[3200];
  snprintf(dir, sizeof dir, "%s/plans", tlm_disk_dir(rt->disk));
  DIR *dp = opendir(dir);
  struct dirent *e;
  int seen = 0, other = 0, measured = 0;
  while (dp && (e = readdir(dp))) {
    if (tlm_disk_entry_name(e->d_name) != TLM_DISK_NAME_META) continue;
    char path[3500];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "rb");
    char *text = f ? calloc(1, 1 << 16) : NULL;
    if (text) fread(text, 1, (1 << 16) - 1, f);
    if (f) fclose(f);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *kh = cJSON_GetObjectItem(j, "key");
    tlm_key key;
    memset(&key, 0, sizeof key);
    size_t hl = cJSON_IsString(kh) ? strlen(kh->valuestring) : 0;
    int ok = hl > 0 && hl % 2 == 0 && hl / 2 <= TLM_KEY_MAX;
    for (size_t i = 0; ok && i < hl / 2; i++) {
      unsigned v;
      ok = sscanf(kh->valuestring + 2 * i, "%2x", &v) == 1;
      key.bytes[i] = (uint8_t)v;
    }
    key.len = (uint32_t)(hl / 2);
    tlm_task task;
    tlm_schedule pick;
    int is_measured = 0;
    seen++;
    if (!ok || tlm_key_shape_task(&key, &rt->target, tlm_engine_scheduler_id(rt), &task)) {
      other++; /* another target, version or scheduler: not this runtime's */
      cJSON_Delete(j);
      continue;
    }
    const cJSON *dec = cJSON_GetObjectItem(j, "decisions");
    const cJSON *pr = cJSON_GetObjectItem(j, "problem");
    is_measured = cJSON_IsTrue(cJSON_GetObjectItem(j, "measured"));
    memset(&pick, 0, sizeof pick);
    for (const cJSON *x = cJSON_IsArray(dec) ? dec->child : NULL; x && pick.n < TLM_MAX_POINTS;
         x = x->next)
      pick.v[pick.n++] = (int32_t)x->valuedouble;
    char ptext[160];
    snprintf(ptext, sizeof ptext, "%s", cJSON_IsString(pr) ? pr->valuestring : "?");
    cJSON_Delete(j);
    if (is_measured) {
      measured++;
      continue;
    }
    tlm_task_operands o;
    if (tlm_task_operands_make(&task, 0x74756e65ull ^ (uint64_t)seen, (size_t)1 << 30, &o)) {
      fprintf(stderr, "tlm tune: %s: operands too large or out of memory: skipped\n", ptext);
      tt->failed++;
      continue;
    }
    tune_check chk = {NULL, &o, malloc(o.n[o.out] * sizeof(float))};
    if (chk.ref)
      tune_task(cfg, k, rounds, dry, jf, ptext, &task, &o.args, &chk, &pick,
                0x74756e65ull ^ (uint64_t)seen, tt);
    else
      tt->failed++;
    free(chk.ref);
    tlm_task_operands_free(&o);
  }
  if (dp) closedir(dp);
  printf("tlm tune: %d plans in %s: %d of another target, version or scheduler, %d measured "
         "already\n",
         seen, dir, other, measured);
}

/* Tunes every task of specs[0..n) */
static void tune_specs(const tlm_config *cfg, int k, int rounds, int dry, cJSON *jf,
                       tlm_task_spec *specs, int n, tune_totals *tt) {
  for (int t = 0; t < n; t++) {
    tlm_spec_problem p;
    if (tlm_spec_problem_make(&specs[t], 3, &p)) {
      fprintf(stderr, "tlm tune: %s: cannot build (too large or out of memory)\n", specs[t].text);
      tt->failed++;
      continue;
    }
    tune_check chk = {&p, NULL, NULL};
    tune_task(cfg, k, rounds, dry, jf, specs[t].text, &p.task, p.args, &chk, NULL,
              0x74756e65ull ^ (uint64_t)t, tt);
    tlm_spec_problem_free(&p);
  }
}

int tlm_cmd_tune(int argc, char **argv) {
  int k = 10, threads = 0, rounds = 5, dry = 0, nfiles = 0, from_cache = 0, heldout = 0;
  int max_tasks = 1 << 30;
  const char *json = NULL, *shared = "../shared";
  const char **files = calloc((size_t)(argc > 0 ? argc : 1), sizeof *files);
  if (!files) return 1;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--k") && i + 1 < argc) k = atoi(argv[++i]);
    else if (!strcmp(a, "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(a, "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (!strcmp(a, "--json") && i + 1 < argc) json = argv[++i];
    else if (!strcmp(a, "--dry-run")) dry = 1;
    else if (!strcmp(a, "--from-cache")) from_cache = 1;
    else if (!strcmp(a, "--heldout")) heldout = 1;
    else if (!strcmp(a, "--shared") && i + 1 < argc) shared = argv[++i];
    else if (!strcmp(a, "--max-tasks") && i + 1 < argc) max_tasks = atoi(argv[++i]);
    else if (a[0] == '-') {
      usage();
      free(files);
      return 2;
    } else files[nfiles++] = a;
  }
  if ((nfiles == 0 && !from_cache && !heldout) || k < 1 || k > TUNE_MAX_K || threads < 0 ||
      rounds < 1 || rounds > TLM_SIDE_ROUNDS || max_tasks < 1) {
    usage();
    free(files);
    return 2;
  }
  tlm_config cfg;
  tlm_config_init(&cfg); /* TLM_CACHE_DIR, TLM_MODEL, TLM_ISA as tlm_run reads them */
  if (threads) cfg.num_threads = threads;
  cfg.cache_capacity = 0; /* no eviction: the candidates' kernels stay valid while timed */
  cfg.async_compile = 0; /* every kernel its own, built before the call returns */
  tlm_runtime *rt = NULL;
  if (tlm_create(&cfg, &rt) != TLM_OK) {
    fprintf(stderr, "tlm tune: %s\n", tlm_last_error(NULL));
    free(files);
    return 1;
  }
  if (from_cache && !rt->disk) {
    fprintf(stderr, "tlm tune: --from-cache needs a disk cache (TLM_CACHE_DIR)\n");
    tlm_destroy(rt);
    free(files);
    return 1;
  }
  if (!rt->disk && !dry) {
    fprintf(stderr, "tlm tune: no disk cache (TLM_CACHE_DIR=none): nothing to store; use "
                    "--dry-run to measure only\n");
    tlm_destroy(rt);
    free(files);
    return 1;
  }
  FILE *probe = json ? fopen(json, "w") : NULL; /* fail before tuning, not after */
  if (probe) fclose(probe);
  if (json && !probe) {
    fprintf(stderr, "tlm tune: cannot write %s\n", json);
    tlm_destroy(rt);
    free(files);
    return 1;
  }
  printf("tlm tune: %d candidates a task, %d threads, scheduler: %s, cache: %s\n", k,
         rt->nthreads, rt->model ? "model" : "rule",
         rt->disk ? tlm_disk_dir(rt->disk) : "none");
  printf("%-58s %6s %10s %10s %7s %9s\n", "task", "cands", "pick_us", "tuned_us", "speedup",
         "tune_ms");
  cJSON *jroot = json ? cJSON_CreateObject() : NULL, *jf = NULL;
  if (jroot) {
    cJSON_AddNumberToObject(jroot, "k", k);
    cJSON_AddNumberToObject(jroot, "threads", rt->nthreads);
    cJSON_AddNumberToObject(jroot, "rounds", rounds);
    cJSON_AddStringToObject(jroot, "scheduler", rt->model ? "model" : "rule");
    cJSON_AddBoolToObject(jroot, "stored", !dry);
    jf = cJSON_AddArrayToObject(jroot, "tasks");
  }
  tune_totals tt;
  memset(&tt, 0, sizeof tt);
  if (from_cache) tune_from_cache(rt, &cfg, k, rounds, dry, jf, &tt);
  if (heldout) {
    tlm_task_spec *hs = NULL;
    char err[512];
    int nh = tlm_tasks_heldout(shared, &hs, err, sizeof err);
    if (nh < 0) {
      fprintf(stderr, "tlm tune: %s\n", err);
      tt.failed++;
    } else {
      tune_specs(&cfg, k, rounds, dry, jf, hs, nh < max_tasks ? nh : max_tasks, &tt);
    }
    free(hs);
  }
  tlm_tasks_set_exact(1);
  for (int f = 0; f < nfiles; f++) {
    tlm_task_spec *specs = NULL;
    char err[512];
    int n = tlm_tasks_from_file(files[f], &specs, err, sizeof err);
    if (n < 0) {
      fprintf(stderr, "tlm tune: %s\n", err);
      tt.failed++;
      continue;
    }
    tune_specs(&cfg, k, rounds, dry, jf, specs, n, &tt);
    free(specs);
  }
  double gm = tt.counted ? exp(tt.logsum / tt.counted) : 1.0;
  printf("tuned %d tasks: geometric-mean speedup over the pick %.3fx, %d changed (%.1f%%: a "
         "candidate over 2%% faster than the pick), %.0f ms a task; %d skipped, %d wrong "
         "candidates dropped\n",
         tt.counted, gm, tt.improved, tt.counted ? 100.0 * tt.improved / tt.counted : 0.0,
         tt.counted ? tt.tune_total / tt.counted : 0.0, tt.failed, tt.wrong);
  double gr = tt.counted ? exp(tt.rule_logsum / tt.counted) : 1.0;
  printf("against the rule's schedule: geometric mean %.3fx, faster by over 2%% on %d (%.1f%%)\n",
         gr, tt.beats_rule, tt.counted ? 100.0 * tt.beats_rule / tt.counted : 0.0);
  double gc = tt.counted ? exp(tt.confirmed_logsum / tt.counted) : 1.0;
  printf("confirmed (the kept kernel and the rule's timed again, by themselves): geometric mean "
         "%.3fx, faster by over 2%% on %d (%.1f%%)\n",
         gc, tt.confirmed_beats, tt.counted ? 100.0 * tt.confirmed_beats / tt.counted : 0.0);
  if (jroot) {
    cJSON_AddNumberToObject(jroot, "confirmed_geomean_speedup_vs_rule", gc);
    cJSON_AddNumberToObject(jroot, "confirmed_faster_than_rule_percent",
                            tt.counted ? 100.0 * tt.confirmed_beats / tt.counted : 0.0);
    cJSON_AddNumberToObject(jroot, "geomean_speedup_vs_rule", gr);
    cJSON_AddNumberToObject(jroot, "faster_than_rule", tt.beats_rule);
    cJSON_AddNumberToObject(jroot, "faster_than_rule_percent",
                            tt.counted ? 100.0 * tt.beats_rule / tt.counted : 0.0);
    cJSON_AddNumberToObject(jroot, "tasks_tuned", tt.counted);
    cJSON_AddNumberToObject(jroot, "geomean_speedup", gm);
    cJSON_AddNumberToObject(jroot, "changed", tt.improved);
    cJSON_AddNumberToObject(jroot, "changed_percent",
                            tt.counted ? 100.0 * tt.improved / tt.counted : 0.0);
    cJSON_AddNumberToObject(jroot, "tune_ms_mean", tt.counted ? tt.tune_total / tt.counted : 0.0);
    cJSON_AddNumberToObject(jroot, "skipped", tt.failed);
    cJSON_AddNumberToObject(jroot, "wrong_dropped", tt.wrong);
    if (tlm_json_save(jroot, json)) {
      fprintf(stderr, "tlm tune: cannot write %s\n", json);
      tt.failed++;
    }
    cJSON_Delete(jroot);
  }
  tlm_destroy(rt);
  free(files);
  return tt.failed || tt.wrong ? 1 : 0;
}
