/* eval.c - `tlm eval`: the language model's schedules against the default
 * rule and random search, measured side by side per task.
 *
 * Per task: TLM-1 (greedy decode), TLM-k (best of the k most probable
 * schedules), the default rule, and the best of N random schedules from
 * the full space (N = --random, 64 by default; also best-of-64 when N is
 * larger). Speeds are reported relative to the best random schedule
 * (> 1 = faster), with geometric means over tasks, and the time each method
 * spends per task to produce its kernel (decode + compile, plus timing for
 * the methods that measure). */
#include "eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "api/validate.h"
#include "lm/model.h"
#include "runtime/engine.h"
#include "tools/measure.h"
#include "tools/problem.h"
#include "tools/tasks.h"
#include "tools/train.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

typedef struct method_result {
  double ns;         /* best median time, INFINITY if none ran */
  double make_ms;    /* decode + compile (+ measuring when the method measures) */
} method_result;

enum { M_TLM1, M_TLMK, M_DEFAULT, M_RAND64, M_RANDN, M_COUNT };
static const char *const k_names[M_COUNT] = {"tlm1", "tlmk", "default", "random64", "randomN"};

/* compiles, checks and times one schedule; returns median ns or INFINITY */
static double measure(tlm_runtime *rt, const tlm_task *task, const void *args,
                      const tlm_spec_problem *p, const tlm_schedule *s, double best, double *compile_ms,
                      int *wrong) {
  tlm_kernel *k;
  char err[256];
  double t0 = now_ms();
  if (tlm_engine_kernel(rt, task, s, &k, err, sizeof err)) return INFINITY;
  *compile_ms += now_ms() - t0;
  tlm_engine_exec(rt, k, task, args, err, sizeof err);
  double e = tlm_spec_problem_check(p, 32, 5);
  if (!(e >= 0 && e <= tlm_spec_problem_tolerance(p))) {
    (*wrong)++;
    return INFINITY;
  }
  tlm_timing tm;
  tlm_time_kernel(rt, k, task, args, 10, best, &tm);
  return tm.median_ns;
}

static void usage(void) {
  fprintf(stderr,
          "usage: tlm eval [--k K] [--random N] [--model MODEL] [--threads T] [--json FILE]\n"
          "                [--max-tasks N] [--heldout] [--shared DIR] [FILE...]\n"
          "  FILE: benchdnn matmul or convolution shape files (convolutions in NHWC at\n"
          "  minibatch 1). --heldout: the held-out families of the\n"
          "  collection's task list. Tasks above 4 GFLOP have M reduced, as in collect.\n");
}

int tlm_cmd_eval(int argc, char **argv) {
  int k = 10, nrand = 64, threads = 2, max_tasks = 1 << 30, heldout = 0;
  const char *model = NULL, *json = NULL, *shared = "../shared";
  const char *files[64];
  int nfiles = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    int more = i + 1 < argc;
    if (!strcmp(a, "--k") && more) k = atoi(argv[++i]);
    else if (!strcmp(a, "--random") && more) nrand = atoi(argv[++i]);
    else if (!strcmp(a, "--model") && more) model = argv[++i];
    else if (!strcmp(a, "--threads") && more) threads = atoi(argv[++i]);
    else if (!strcmp(a, "--json") && more) json = argv[++i];
    else if (!strcmp(a, "--max-tasks") && more) max_tasks = atoi(argv[++i]);
    else if (!strcmp(a, "--shared") && more) shared = argv[++i];
    else if (!strcmp(a, "--heldout")) heldout = 1;
    else if (a[0] == '-') {
      usage();
      return !strcmp(a, "--help") ? 0 : 2;
    } else if (nfiles < 64) files[nfiles++] = a;
  }
  if (k < 1 || nrand < 1 || threads < 1 || (!heldout && !nfiles)) {
    usage();
    return 2;
  }
  tlm_task_spec *specs = NULL;
  int n = 0;
  char err[512];
  if (heldout) {
    tlm_task_spec *all;
    int na = tlm_tasks_build(shared, 1, &all, err, sizeof err);
    if (na < 0) {
      fprintf(stderr, "tlm eval: %s\n", err);
      return 1;
    }
    /* held-out tasks, families round-robin so --max-tasks samples them all */
    specs = malloc(sizeof *specs * (size_t)na);
    for (int i = 0; i < na && specs; i++)
      if (tlm_family_heldout(all[i].family)) specs[n++] = all[i];
    if (specs && tlm_tasks_interleave(specs, n)) n = 0;
    free(all);
  }
  for (int f = 0; f < nfiles; f++) {
    tlm_task_spec *fs;
    int nf = tlm_tasks_from_file(files[f], &fs, err, sizeof err);
    if (nf < 0) {
      fprintf(stderr, "tlm eval: %s\n", err);
      free(specs);
      return 1;
    }
    specs = realloc(specs, sizeof *specs * (size_t)(n + nf));
    if (specs) memcpy(specs + n, fs, sizeof *fs * (size_t)nf), n += nf;
    free(fs);
  }
  if (!specs || n == 0) {
    fprintf(stderr, "tlm eval: no tasks\n");
    free(specs);
    return 1;
  }
  if (n > max_tasks) n = max_tasks;
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.cache_dir = "none"; /* measure compiles, never reuse them */
  cfg.num_threads = threads;
  if (model) cfg.model_path = model;
  FILE *jf = json ? fopen(json, "w") : NULL;
  if (jf) fprintf(jf, "{\"k\": %d, \"random\": %d, \"threads\": %d, \"tasks\": [", k, nrand, threads);
  double logsum[M_COUNT] = {0}, make_sum[M_COUNT] = {0};
  int counted = 0, tlm_beats_default = 0, wrong = 0;
  printf("%-44s %9s %9s %9s %9s   (speed vs best-of-%d random; 1.00 = equal)\n", "task", "tlm1",
         "tlmk", "default", "rand64", nrand);
  for (int t = 0; t < n; t++) {
    tlm_runtime *rt;
    if (tlm_create(&cfg, &rt)) {
      fprintf(stderr, "tlm eval: %s\n", tlm_last_error(NULL));
      return 1;
    }
    if (!rt->model) {
      fprintf(stderr, "tlm eval: no model loaded (--model or the shipped one)\n");
      tlm_destroy(rt);
      free(specs);
      return 1;
    }
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
    /* TLM-1 */
    t0 = now_ms();
    tlm_lm_decode(rt->model, &s, &sched, NULL);
    r[M_TLM1].make_ms = now_ms() - t0;
    r[M_TLM1].ns = measure(rt, &task, p.args, &p, &sched, r[M_DEFAULT].ns, &r[M_TLM1].make_ms, &wrong);
    /* TLM-k */
    tlm_schedule *top = malloc(sizeof *top * (size_t)k);
    t0 = now_ms();
    int nk = top ? tlm_lm_decode_topk(rt->model, &s, k, top, NULL) : 0;
    r[M_TLMK].make_ms = now_ms() - t0;
    for (int i = 0; i < nk; i++) {
      double c = 0, st = now_ms();
      double ns = measure(rt, &task, p.args, &p, &top[i], r[M_TLMK].ns, &c, &wrong);
      r[M_TLMK].make_ms += now_ms() - st;
      if (ns < r[M_TLMK].ns) r[M_TLMK].ns = ns;
    }
    free(top);
    /* random search */
    uint64_t rng = XXH3_64bits(specs[t].text, strlen(specs[t].text));
    double rbest = INFINITY;
    t0 = now_ms();
    for (int i = 0; i < nrand; i++) {
      tlm_space_sample(&s, &rng, &sched);
      double c = 0;
      double ns = measure(rt, &task, p.args, &p, &sched, rbest, &c, &wrong);
      if (ns < rbest) rbest = ns;
      if (i == 63 || (i == nrand - 1 && nrand < 64)) {
        r[M_RAND64].ns = rbest;
        r[M_RAND64].make_ms = now_ms() - t0;
      }
    }
    r[M_RANDN].ns = rbest;
    r[M_RANDN].make_ms = now_ms() - t0;
    double ref = r[M_RANDN].ns;
    char label[48];
    snprintf(label, sizeof label, "%.43s", specs[t].text);
    printf("%-44s", label);
    for (int m = 0; m < M_COUNT - 1; m++) printf(" %9.2f", ref / r[m].ns);
    printf("\n");
    if (isfinite(ref)) {
      counted++;
      for (int m = 0; m < M_COUNT; m++) {
        logsum[m] += log(ref / r[m].ns);
        make_sum[m] += r[m].make_ms;
      }
      tlm_beats_default += r[M_TLM1].ns < r[M_DEFAULT].ns;
    }
    if (jf) {
      fprintf(jf, "%s{\"task\": \"%s\", \"family\": \"%s\"", t ? ", " : "", specs[t].text,
              specs[t].family);
      for (int m = 0; m < M_COUNT; m++)
        fprintf(jf, ", \"%s_ns\": %.1f, \"%s_make_ms\": %.2f", k_names[m],
                isfinite(r[m].ns) ? r[m].ns : -1.0, k_names[m], r[m].make_ms);
      fprintf(jf, "}");
    }
    tlm_spec_problem_free(&p);
    tlm_destroy(rt);
  }
  printf("\n%d tasks; geometric mean speed relative to best-of-%d random:\n", counted, nrand);
  for (int m = 0; m < M_COUNT; m++)
    printf("  %-9s %.3f   (%.1f ms per task to make the kernel)\n", k_names[m],
           counted ? exp(logsum[m] / counted) : 0, counted ? make_sum[m] / counted : 0);
  printf("  TLM-1 faster than the default rule on %d of %d tasks (%.0f%%)\n", tlm_beats_default,
         counted, counted ? 100.0 * tlm_beats_default / counted : 0);
  if (wrong) printf("  WARNING: %d kernels failed the reference check\n", wrong);
  if (jf) {
    fprintf(jf, "], \"counted\": %d", counted);
    for (int m = 0; m < M_COUNT; m++)
      fprintf(jf, ", \"%s_geomean_speed_vs_random\": %.4f, \"%s_make_ms_mean\": %.2f", k_names[m],
              counted ? exp(logsum[m] / counted) : 0, k_names[m],
              counted ? make_sum[m] / counted : 0);
    fprintf(jf, ", \"tlm1_faster_than_default_fraction\": %.4f, \"wrong_kernels\": %d}\n",
            counted ? (double)tlm_beats_default / counted : 0, wrong);
    fclose(jf);
  }
  free(specs);
  return wrong ? 1 : 0;
}
