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

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/disk.h"
#include "lm/model.h"
#include "tools/measure.h"
#include "runtime/engine.h"
#include "tools/tasks.h"
#include "tlm.h"

enum { TUNE_MAX_K = TLM_SIDE_MAX };

static double now_ms(void) { return tlm_now_ns() * 1e-6; }

static void usage(void) {
  fprintf(stderr,
          "usage: tlm tune [--k K] [--threads T] [--rounds R] [--dry-run] [--json F] FILE...\n"
          "  Measured tuning of every shape of benchdnn matmul or convolution files\n"
          "  (convolutions as NHWC with bias and ReLU, minibatch 1; shapes at their\n"
          "  own extents): K candidates a task (default 10, at most %d: the pick of\n"
          "  tlm_run, the model's next best, neighbours of the pick), each checked\n"
          "  against the reference and timed side by side (R rounds, default 5) with\n"
          "  T threads (default: TLM_NUM_THREADS or all CPUs, as tlm_run). The\n"
          "  fastest goes into the disk cache (TLM_CACHE_DIR) as the task's measured\n"
          "  plan, with its kernel: later runs with this model and target use it.\n"
          "  --dry-run measures and reports without storing.\n",
          TUNE_MAX_K);
}

/* the K candidates of one task, the pick first (tlm_engine_tune_candidates:
 * the model's next best, then neighbours of the pick); returns how many */
static int candidates(tlm_runtime *rt, const tlm_space *s, int k, uint64_t seed,
                      tlm_schedule *out) {
  tlm_schedule pick;
  tlm_engine_schedule(rt, s, &pick);
  return tlm_engine_tune_candidates(rt, s, &pick, k, seed, out);
}

int tlm_cmd_tune(int argc, char **argv) {
  int k = 10, threads = 0, rounds = 5, dry = 0, nfiles = 0;
  const char *json = NULL;
  const char **files = calloc((size_t)(argc > 0 ? argc : 1), sizeof *files);
  if (!files) return 1;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--k") && i + 1 < argc) k = atoi(argv[++i]);
    else if (!strcmp(a, "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(a, "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (!strcmp(a, "--json") && i + 1 < argc) json = argv[++i];
    else if (!strcmp(a, "--dry-run")) dry = 1;
    else if (a[0] == '-') {
      usage();
      free(files);
      return 2;
    } else files[nfiles++] = a;
  }
  if (nfiles == 0 || k < 1 || k > TUNE_MAX_K || threads < 0 || rounds < 1 ||
      rounds > TLM_SIDE_ROUNDS) {
    usage();
    free(files);
    return 2;
  }
  tlm_config cfg;
  tlm_config_init(&cfg); /* TLM_CACHE_DIR, TLM_MODEL, TLM_ISA as tlm_run reads them */
  if (threads) cfg.num_threads = threads;
  cfg.cache_capacity = 0; /* no eviction: the candidates' kernels stay valid while timed */
  tlm_runtime *rt = NULL;
  if (tlm_create(&cfg, &rt) != TLM_OK) {
    fprintf(stderr, "tlm tune: %s\n", tlm_last_error(NULL));
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
  FILE *jf = json ? fopen(json, "w") : NULL;
  if (json && !jf) {
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
  if (jf)
    fprintf(jf, "{\"k\": %d, \"threads\": %d, \"rounds\": %d, \"scheduler\": \"%s\", \"stored\": %s, \"tasks\": [",
            k, rt->nthreads, rounds, rt->model ? "model" : "rule", dry ? "false" : "true");
  double logsum = 0, tune_total = 0;
  int counted = 0, improved = 0, failed = 0, wrong = 0, first = 1;
  tlm_tasks_set_exact(1);
  for (int f = 0; f < nfiles; f++) {
    tlm_task_spec *specs = NULL;
    char err[512];
    int n = tlm_tasks_from_file(files[f], &specs, err, sizeof err);
    if (n < 0) {
      fprintf(stderr, "tlm tune: %s\n", err);
      failed++;
      continue;
    }
    for (int t = 0; t < n; t++) {
      double t0 = now_ms();
      /* a runtime per task: its kernels live until the task is done */
      tlm_runtime *trt = NULL;
      if (tlm_create(&cfg, &trt) != TLM_OK) {
        fprintf(stderr, "tlm tune: %s\n", tlm_last_error(NULL));
        failed++;
        continue;
      }
      tlm_spec_problem p;
      if (tlm_spec_problem_make(&specs[t], 3, &p)) {
        fprintf(stderr, "tlm tune: %s: cannot build (too large or out of memory)\n", specs[t].text);
        failed++;
        tlm_destroy(trt);
        continue;
      }
      tlm_space s;
      if (tlm_space_init(&s, &p.task, &trt->target)) {
        tlm_spec_problem_free(&p);
        tlm_destroy(trt);
        failed++;
        continue;
      }
      tlm_schedule cand[TUNE_MAX_K];
      int nc = candidates(trt, &s, k, 0x74756e65ull ^ (uint64_t)t, cand);
      const tlm_kernel *kern[TUNE_MAX_K];
      int idx[TUNE_MAX_K], nk = 0;
      for (int i = 0; i < nc; i++) {
        tlm_kernel *kk;
        if (tlm_engine_kernel(trt, &p.task, &cand[i], &kk, err, sizeof err) ||
            tlm_engine_exec(trt, kk, &p.task, p.args, err, sizeof err))
          continue;
        double e = tlm_spec_problem_check(&p, 32, 7);
        if (!(e >= 0 && e <= tlm_spec_problem_tolerance(&p))) {
          wrong++; /* never kept; a bug to report, counted in the summary */
          continue;
        }
        kern[nk] = kk;
        idx[nk++] = i;
      }
      if (nk == 0 || idx[0] != 0) {
        fprintf(stderr, "tlm tune: %s: the pick did not compile or run correctly: skipped\n",
                specs[t].text);
        tlm_spec_problem_free(&p);
        tlm_destroy(trt);
        failed++;
        continue;
      }
      tlm_timing tm[TUNE_MAX_K];
      tlm_time_side_by_side(trt, kern, nk, &p.task, p.args, rounds, 4.0, tm);
      int best = 0;
      for (int j = 1; j < nk; j++)
        if (tm[j].median_ns < tm[best].median_ns) best = j;
      if (tm[best].median_ns > 0.98 * tm[0].median_ns) best = 0; /* within noise: keep the pick */
      double tune_ms = now_ms() - t0;
      int stored = 0;
      if (!dry) {
        tlm_status st = tlm_engine_store_measured_plan(trt, &p.task, &cand[idx[best]],
                                                       tm[best].median_ns, err, sizeof err);
        if (st != TLM_OK) fprintf(stderr, "tlm tune: %s: %s\n", specs[t].text, err);
        stored = st == TLM_OK;
      }
      double speedup = tm[0].median_ns / tm[best].median_ns;
      logsum += log(speedup);
      tune_total += tune_ms;
      counted++;
      improved += best != 0;
      printf("%-58.58s %6d %10.2f %10.2f %7.3f %9.0f\n", specs[t].text, nk, tm[0].median_ns * 1e-3,
             tm[best].median_ns * 1e-3, speedup, tune_ms);
      if (jf) {
        char ss[512];
        tlm_schedule_str(&s, &cand[idx[best]], ss, sizeof ss);
        fprintf(jf,
                "%s\n  {\"task\": \"%s\", \"candidates\": %d, \"pick_ns\": %.1f, \"tuned_ns\": %.1f, "
                "\"speedup\": %.4f, \"changed\": %s, \"stored\": %s, \"tune_ms\": %.1f, "
                "\"schedule\": \"%s\"}",
                first ? "" : ",", specs[t].text, nk, tm[0].median_ns, tm[best].median_ns, speedup,
                best ? "true" : "false", stored ? "true" : "false", tune_ms, ss);
        first = 0;
      }
      tlm_spec_problem_free(&p);
      tlm_destroy(trt);
    }
    free(specs);
  }
  double gm = counted ? exp(logsum / counted) : 1.0;
  printf("tuned %d tasks: geometric-mean speedup over the pick %.3fx, %d changed, %.0f ms a task; "
         "%d skipped, %d wrong candidates dropped\n",
         counted, gm, improved, counted ? tune_total / counted : 0.0, failed, wrong);
  if (jf) {
    fprintf(jf,
            "\n], \"tasks_tuned\": %d, \"geomean_speedup\": %.4f, \"changed\": %d, "
            "\"tune_ms_mean\": %.1f, \"skipped\": %d, \"wrong_dropped\": %d}\n",
            counted, gm, improved, counted ? tune_total / counted : 0.0, failed, wrong);
    fclose(jf);
  }
  tlm_destroy(rt);
  free(files);
  return failed || wrong ? 1 : 0;
}
