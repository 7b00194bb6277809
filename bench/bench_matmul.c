/* bench_matmul.c - tlm's default schedule against oneDNN, side by side.
 *
 * Part 1: for each problem, tlm_run() (the default rule, as a user without a
 * model gets it) and a oneDNN matmul primitive created once, timed in
 * alternating batches on the same thread count; per-call medians, min/max
 * over batches, and the tlm/oneDNN ratio of each batch pair.
 * Part 2: compile time of new kernels: schedule + LLVM codegen +
 * optimization + native code, per distinct kernel, p50/p90.
 *
 * Usage: bench_matmul [--threads N] [--batches N] [--json FILE]
 *                     [--problems "1x768:768x768,32x768:768x768"] [--const-b]
 * --const-b declares B constant to tlm (tlm_constant_add: packed once, as
 * the serving sample's weights); oneDNN reads B as given either way.
 * oneDNN's CPU runtime here is OpenMP: --threads sets OMP_NUM_THREADS before
 * oneDNN starts, so both use the same number of threads. Batches are 30 ms
 * apart so neither side's idle spinning threads take the other's cores.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api/validate.h"
#include "engine/engine.h"
#include "train/measure.h"
#include "samples/baseline_dnnl.h"
#include "train/problem.h"
#include "bench_common.h"


int main(int argc, char **argv) {
  int threads = 1, batches = 15, const_b = 0;
  const char *json = NULL;
  const char *problems = "1x768:768x768,32x768:768x768,128x768:768x768";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--batches") && i + 1 < argc) batches = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!strcmp(argv[i], "--problems") && i + 1 < argc) problems = argv[++i];
    else if (!strcmp(argv[i], "--const-b")) const_b = 1;
    else {
      fprintf(stderr,
              "usage: %s [--threads N] [--batches N] [--json FILE] [--problems LIST] [--const-b]\n",
              argv[0]);
      return 2;
    }
  }
  if (threads < 1 || batches < 3) return 2;
  dnnl_baseline *base;
  tlm_runtime *rt = bench_setup(argv, threads, &base);
  char target[320];
  tlm_target_str(&rt->target, target, sizeof target);
  cJSON *jroot = bench_json_root(json, target, rt, threads, batches);
  cJSON *jproblems = jroot ? cJSON_AddArrayToObject(jroot, "problems") : NULL;
  printf("machine: %s\nisa: tlm %s, oneDNN %s; threads %d; %d alternating batches per contender\n", target, tlm_isa_name(rt->target.isa), dnnl_baseline_isa(), threads,
         batches);
  printf("%-22s %10s %10s %10s %10s %8s %8s %8s\n", "problem", "tlm_gflops", "(min", "max)",
         "dnnl_gflops", "ratio", "(min", "max)");
  char list[1024];
  snprintf(list, sizeof list, "%s", problems);
  for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
    tlm_mm_desc d;
    char err[256];
    if (tlm_mm_desc_parse(tok, &d, err, sizeof err) != 1 || d.nda != 2 || d.ndb != 2) {
      fprintf(stderr, "bad problem '%s' (2-D only here)\n", tok);
      return 2;
    }
    tlm_problem p;
    if (tlm_problem_make(&d, NULL, 1, &p)) return 1;
    int64_t M = d.a[0], K = d.a[1], N = d.b[1];
    float *c2 = malloc((size_t)(M * N) * sizeof(float));
    dnnl_bound *dm = dnnl_bound_matmul(base, M, K, N, p.bufs[0], p.bufs[1], c2);
    if (!dm) {
      fprintf(stderr, "oneDNN: cannot create the matmul %s\n", tok);
      return 1;
    }
    /* --const-b: B declared constant to tlm (packed once, as a served
     * model's weights); oneDNN reads it as given, as in the serving sample */
    if (const_b && tlm_constant_add(rt, p.bufs[1], (size_t)(K * N) * sizeof(float)) != TLM_OK) {
      fprintf(stderr, "tlm_constant_add: %s\n", tlm_last_error(rt));
      return 1;
    }
    bench_tlm_call tc = {rt, &p.op, p.in, p.n_in, &p.out};
    bench_tlm_run(&tc); /* compiles */
    tlm_wait_background(rt); /* TLM_ASYNC=1: time the shape's own kernel */
    double e = tlm_problem_check(&p);
    bench_dnnl_run(dm);
    /* calls per batch: about 20 ms of work at 100 GFLOPS, and at least
     * BENCH_BATCH_MS of the faster contender (bench_batch_calls) */
    double flop = 2.0 * (double)M * (double)N * (double)K;
    int calls = (int)(2e9 / flop);
    if (calls < 3) calls = 3;
    if (calls > 20000) calls = 20000;
    double warm_tlm = bench_time_batch(bench_tlm_run, &tc, calls);
    double warm_dnnl = bench_time_batch(bench_dnnl_run, dm, calls);
    calls = bench_batch_calls(warm_tlm, warm_dnnl, calls);
    double *tt = calloc((size_t)batches, sizeof *tt), *td = calloc((size_t)batches, sizeof *td),
           *ratio = calloc((size_t)batches, sizeof *ratio);
    for (int b = 0; b < batches; b++) {
      /* a pause between contenders: both keep their idle worker threads
       * spinning for a while (libgomp's OpenMP, tlm's pool), which would
       * steal the other contender's second core */
      usleep(30000);
      tt[b] = bench_time_batch(bench_tlm_run, &tc, calls);
      usleep(30000);
      td[b] = bench_time_batch(bench_dnnl_run, dm, calls);
      ratio[b] = td[b] / tt[b]; /* > 1: tlm faster */
    }
    double tmed = bench_pct(tt, batches, 0.5), tmin = tt[0], tmax = tt[batches - 1];
    double dmed = bench_pct(td, batches, 0.5);
    double rmed = bench_pct(ratio, batches, 0.5), rmin = ratio[0], rmax = ratio[batches - 1];
    char ds[64];
    tlm_mm_desc_str(&d, ds, sizeof ds);
    printf("%-22s %10.1f %10.1f %10.1f %10.1f %8.2f %8.2f %8.2f%s\n", ds, flop / tmed, flop / tmax,
           flop / tmin, flop / dmed, rmed, rmin, rmax, e <= tlm_problem_tolerance(K) ? "" : "  WRONG");
    if (jproblems) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "problem", ds);
      static const char *const names[] = {
          "tlm_gflops_median", "tlm_gflops_min", "tlm_gflops_max", "onednn_gflops_median",
          "speed_ratio_tlm_over_onednn_median", "speed_ratio_min", "speed_ratio_max",
          "tlm_ns_per_call_median", "onednn_ns_per_call_median", "max_rel_err"};
      double v[] = {flop / tmed, flop / tmax, flop / tmin, flop / dmed, rmed, rmin, rmax,
                    tmed,        dmed,        e};
      tlm_json_numbers(o, names, v, 10);
      cJSON_AddItemToArray(jproblems, o);
    }
    free(tt);
    free(td);
    free(ratio);
    free(c2);
    dnnl_bound_destroy(dm);
    if (const_b) tlm_constant_remove(rt, p.bufs[1]);
    tlm_problem_free(&p);
  }
  /* Part 2: compile time per new kernel over GPT-2 layer shapes at changing
   * token counts (a fresh runtime, so every schedule key is new once) */
  tlm_runtime *rt2 = bench_runtime(threads);
  static const int64_t kn[][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
  static const int64_t ms[] = {1, 2, 3, 5, 8, 13, 17, 31, 64, 100, 128, 374, 396};
  double cms[64];
  int nc = 0;
  const tlm_kernel *seen[64];
  for (size_t i = 0; i < sizeof kn / sizeof kn[0]; i++)
    for (size_t j = 0; j < sizeof ms / sizeof ms[0]; j++) {
      tlm_mm_desc d = {2, 2, {ms[j], kn[i][0]}, {kn[i][0], kn[i][1]}, 0, 0, ""};
      tlm_problem p;
      if (tlm_problem_make(&d, NULL, 1, &p)) return 1;
      tlm_task task;
      tlm_mm_args args;
      char err[256];
      tlm_validate_matmul(&p.op, p.in, p.n_in, &p.out, 1, &task, &args, err, sizeof err);
      const tlm_plan *plan;
      double t0 = tlm_now_ns();
      if (tlm_engine_plan(rt2, &task, &plan, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
      }
      double total_ms = (tlm_now_ns() - t0) * 1e-6;
      int dup = 0;
      for (int s = 0; s < nc; s++) dup |= seen[s] == plan->kernel;
      if (!dup && nc < 64) {
        seen[nc] = plan->kernel;
        cms[nc++] = total_ms;
      }
      tlm_problem_free(&p);
    }
  double c50 = bench_pct(cms, nc, 0.5), c90 = bench_pct(cms, nc, 0.9), cmin = cms[0], cmax = cms[nc - 1];
  printf("new kernel (schedule + JIT): %d kernels, p50 %.1f ms, p90 %.1f ms, min %.1f, max %.1f\n",
         nc, c50, c90, cmin, cmax);
  if (jroot) {
    static const char *const names[] = {"new_kernel_count", "new_kernel_ms_p50",
                                        "new_kernel_ms_p90", "new_kernel_ms_min",
                                        "new_kernel_ms_max"};
    double v[] = {nc, c50, c90, cmin, cmax};
    tlm_json_numbers(jroot, names, v, 5);
  }
  bench_json_finish(jroot, json, "bench_matmul");
  tlm_destroy(rt2);
  tlm_destroy(rt);
  dnnl_baseline_destroy(base);
  return 0;
}
