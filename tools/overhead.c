/* overhead.c - `tlm bench overhead`: what the cache costs.
 *   hit_overhead_ns      tlm_run() on a cached shape minus a direct call of
 *                        the same kernel (M=1, K=N=768, one thread),
 *                        alternating batches, median of per-batch
 *                        differences
 *   disk_warm_start_ms   first call of a shape in a new runtime whose disk
 *                        cache holds its plan and kernel, minus the kernel's
 *                        own run time, per kernel
 *   new_shape_reuse_ms   first call of a new M whose schedule already has a
 *                        compiled kernel (one decode or rule, no JIT),
 *                        minus the kernel's run time */
#include "overhead.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api/validate.h"
#include "engine/engine.h"
#include "train/conv_problem.h"
#include "train/measure.h"
#include "train/problem.h"


static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, tlm_cmp_double);
  return v[n / 2];
}

static tlm_runtime *make_async(const char *dir, const char *model, int async) {
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.num_threads = 1;
  cfg.async_compile = async;
  cfg.cache_dir = dir;
  if (model) cfg.model_path = model;
  tlm_runtime *rt = NULL;
  if (tlm_create(&cfg, &rt)) fprintf(stderr, "tlm: %s\n", tlm_last_error(NULL));
  return rt;
}

static tlm_runtime *make(const char *dir, const char *model) { return make_async(dir, model, 0); }

/* Where new kernels' compile time goes, ms per compiled kernel: IR, passes,
 * object emission, linking (tlm_stats), for matmuls of transformer layers
 * (GPT-2, BERT, GPT-J, LLaMA widths; prefill and decode rows) and NHWC
 * convolutions (ResNet 3x3 and 1x1, the 7x7 stem, MobileNet depthwise and
 * pointwise), each shape in a new runtime of its own family.
 * out[family][phase]: family 0 matmul, 1 conv; phase 0 IR, 1 passes,
 * 2 emission, 3 link, 4 all (means over every compile). wall[family]:
 * 0 the process's first compile of that family's runtime (LLVM's one-time
 * set-up included), 1 p50 and 2 p90 of the compiles after it. each: print
 * every compile's wall time. */
static void compile_breakdown(const char *model, int each, double out[2][5], int kernels[2],
                              double wall[2][3]) {
  static const char *const mm[] = {
      "64x1024:1024x3072", "64x3072:3072x1024", "1x768:768x768",     "128x768:768x768",
      "32x768:768x2304",   "512x768:768x3072",  "1x4096:4096x4096",  "128x4096:4096x4096",
      "7x1024:1024x4096",  "200x2560:2560x2560", "1x2048:2048x8192", "24x4096:4096x16384",
      "13x512:512x64",     "100x1:1x1",          "384x1024:1024x1024", "3x4096:4096x11008"};
  static const char *const cv[] = {
      "mb1ic64ih56oc64oh56kh3ph1",       "mb1ic3ih224oc64oh112kh7sh2ph3",
      "g128mb1ic128ih56oc128oh56kh3ph1", "g512mb1ic512ih14oc512oh14kh3ph1",
      "mb1ic256ih56oc64oh56kh1",         "mb1ic64ih56oc256oh56kh1",
      "mb1ic512ih28oc128oh28kh1",        "mb1ic128ih28oc128oh28kh3ph1",
      "mb1ic1024ih14oc256oh14kh1",       "mb1ic256ih14oc256oh14kh3ph1",
      "g32mb1ic32ih112oc32oh112kh3ph1",  "mb1ic32ih112oc16oh112kh1",
      "g144mb1ic144ih56oc144oh28kh3sh2ph1", "mb1ic96ih56oc24oh56kh1"};
  enum { NMM = sizeof mm / sizeof mm[0], NCV = sizeof cv / sizeof cv[0] };
  char err[256];
  for (int f = 0; f < 2; f++) {
    for (int i = 0; i < 5; i++) out[f][i] = -1;
    for (int i = 0; i < 3; i++) wall[f][i] = -1;
    kernels[f] = 0;
    tlm_runtime *rt = make("none", model);
    if (!rt) continue;
    int n = f == 0 ? NMM : NCV, nk = 0;
    double ms_of[NMM > NCV ? NMM : NCV], first = -1, before = 0;
    uint64_t compiles_before = 0;
    for (int i = 0; i < n; i++) {
      if (f == 0) {
        tlm_mm_desc d;
        tlm_problem p;
        if (tlm_mm_desc_parse(mm[i], &d, err, sizeof err) != 1 || tlm_problem_make(&d, NULL, 1, &p))
          continue;
        tlm_run(rt, &p.op, p.in, p.n_in, &p.out, 1);
        tlm_problem_free(&p);
      } else {
        tlm_conv_prb prb;
        tlm_conv_problem p;
        if (tlm_conv_prb_parse(cv[i], &prb, err, sizeof err) != 1 ||
            tlm_conv_problem_make(&prb, TLM_LAYOUT_NHWC, TLM_WEIGHTS_HWIO, NULL, 1, &p))
          continue;
        tlm_run(rt, &p.op, p.in, p.n_in, &p.out, 1);
        tlm_conv_problem_free(&p);
      }
      tlm_stats s;
      tlm_get_stats(rt, &s);
      if (s.compiles == compiles_before + 1) { /* this shape compiled one kernel */
        double ms = s.compile_ms - before;
        if (each) printf("  compile %s: %.2f ms\n", f == 0 ? mm[i] : cv[i], ms);
        if (first < 0) first = ms;
        else ms_of[nk++] = ms;
      }
      compiles_before = s.compiles;
      before = s.compile_ms;
    }
    tlm_stats s;
    tlm_get_stats(rt, &s);
    tlm_destroy(rt);
    if (!s.compiles) continue;
    double c = (double)s.compiles;
    kernels[f] = (int)s.compiles;
    out[f][0] = s.compile_ir_ms / c, out[f][1] = s.compile_opt_ms / c;
    out[f][2] = s.compile_emit_ms / c, out[f][3] = s.compile_link_ms / c;
    out[f][4] = s.compile_ms / c;
    wall[f][0] = first;
    if (nk > 0) {
      qsort(ms_of, (size_t)nk, sizeof *ms_of, tlm_cmp_double);
      wall[f][1] = ms_of[nk / 2];
      wall[f][2] = ms_of[(nk * 9) / 10 < nk ? (nk * 9) / 10 : nk - 1];
    }
  }
}

/* First call of NSTALL new shapes of an operator the runtime already has
 * a kernel for (64xK:KxN, K and N new each time), over the median of the
 * next 3 calls: the stall a new shape costs the caller. async: with
 * tlm_config.async_compile. Fills p50 and p99 (ms). 128 shapes, so that
 * the p99 (nearest rank) is the second largest stall, not the largest: one
 * scheduler tick (4 ms at 250 Hz) in 32 samples decided it before. */
enum { NSTALL = 128 };
static void new_shape_stall(const char *model, int async, int each, double *p50, double *p99) {
  *p50 = *p99 = -1;
  tlm_runtime *rt = make_async("none", model, async);
  if (!rt) return;
  tlm_mm_desc d;
  tlm_problem p;
  char err[256], desc[64];
  if (tlm_mm_desc_parse("64x768:768x768", &d, err, sizeof err) == 1 &&
      tlm_problem_make(&d, NULL, 1, &p) == 0) {
    tlm_run(rt, &p.op, p.in, p.n_in, &p.out, 1);
    tlm_problem_free(&p);
  }
  double stall[NSTALL];
  int n = 0;
  for (int i = 0; i < NSTALL; i++) {
    snprintf(desc, sizeof desc, "64x%d:%dx%d", 640 + 13 * i, 640 + 13 * i, 512 + 17 * i);
    if (tlm_mm_desc_parse(desc, &d, err, sizeof err) != 1 || tlm_problem_make(&d, NULL, 1, &p)) continue;
    double a = tlm_now_ns();
    tlm_status st = tlm_run(rt, &p.op, p.in, p.n_in, &p.out, 1);
    double first = tlm_now_ns() - a, warm[3];
    for (int r = 0; r < 3; r++) {
      a = tlm_now_ns();
      tlm_run(rt, &p.op, p.in, p.n_in, &p.out, 1);
      warm[r] = tlm_now_ns() - a;
    }
    if (st == TLM_OK) stall[n++] = (first - median(warm, 3)) * 1e-6;
    if (each && st == TLM_OK)
      printf("  stall %s %s: first %.3f ms, warm %.3f ms\n", async ? "async" : "sync", desc,
             first * 1e-6, median(warm, 3) * 1e-6);
    tlm_problem_free(&p);
  }
  tlm_wait_background(rt);
  tlm_destroy(rt);
  if (n == 0) return;
  qsort(stall, (size_t)n, sizeof *stall, tlm_cmp_double);
  *p50 = stall[n / 2];
  int i99 = (n * 99 + 99) / 100 - 1; /* nearest rank */
  *p99 = stall[i99 < n ? i99 : n - 1];
}

/* time of one direct kernel call for problem p, ns (median of 31) */
static double kernel_ns(tlm_runtime *rt, tlm_problem *p) {
  tlm_task task;
  tlm_mm_args args;
  char err[256];
  tlm_validate_matmul(&p->op, p->in, p->n_in, &p->out, 1, &task, &args, err, sizeof err);
  const tlm_plan *plan;
  if (tlm_engine_plan(rt, &task, &plan, err, sizeof err)) return 0;
  double t[31];
  for (int i = 0; i < 31; i++) {
    double a = tlm_now_ns();
    tlm_engine_exec(rt, plan->kernel, &task, &args, err, sizeof err);
    t[i] = tlm_now_ns() - a;
  }
  return median(t, 31);
}

int tlm_cmd_bench_overhead(int argc, char **argv) {
  const char *json = NULL, *model = NULL;
  int each = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
    else if (!strcmp(argv[i], "--each")) each = 1;
    else {
      fprintf(stderr, "usage: tlm bench overhead [--json FILE] [--model MODEL] [--each]\n");
      return !strcmp(argv[i], "--help") ? 0 : 2;
    }
  }
  char dir[256];
  snprintf(dir, sizeof dir, "/tmp/tlm_bench_overhead_%d", (int)getpid());
  char err[256];
  /* 1. hit overhead, M=1, K=N=768 */
  tlm_runtime *rt = make("none", model);
  if (!rt) return 1;
  tlm_mm_desc d;
  tlm_mm_desc_parse("1x768:768x768", &d, err, sizeof err);
  tlm_problem p;
  tlm_problem_make(&d, NULL, 1, &p);
  tlm_task task;
  tlm_mm_args args;
  tlm_validate_matmul(&p.op, p.in, p.n_in, &p.out, 1, &task, &args, err, sizeof err);
  const tlm_plan *plan;
  tlm_engine_plan(rt, &task, &plan, err, sizeof err);
  const tlm_kernel *k = plan->kernel;
  enum { BATCHES = 41, CALLS = 2000 };
  double diff[BATCHES], hit[BATCHES], direct[BATCHES];
  for (int b = -3; b < BATCHES; b++) {
    double t0 = tlm_now_ns();
    for (int i = 0; i < CALLS; i++) tlm_run(rt, &p.op, p.in, p.n_in, &p.out, 1);
    double t1 = tlm_now_ns();
    for (int i = 0; i < CALLS; i++) tlm_engine_exec(rt, k, &task, &args, err, sizeof err);
    double t2 = tlm_now_ns();
    if (b < 0) continue; /* warm-up */
    hit[b] = (t1 - t0) / CALLS;
    direct[b] = (t2 - t1) / CALLS;
    diff[b] = hit[b] - direct[b];
  }
  double dmed = median(diff, BATCHES), dlo = diff[0], dhi = diff[BATCHES - 1];
  double hmed = median(hit, BATCHES), kmed_direct = median(direct, BATCHES);
  /* the same without the kernel body: the dispatch cost alone, free of the
   * kernel's own noise (the pool and the kernel are identical on both
   * sides, so the difference is what tlm_run adds) */
  rt->dry_run = 1;
  double ddiff[BATCHES];
  for (int b = -3; b < BATCHES; b++) {
    double t0 = tlm_now_ns();
    for (int i = 0; i < CALLS * 10; i++) tlm_run(rt, &p.op, p.in, p.n_in, &p.out, 1);
    double t1 = tlm_now_ns();
    for (int i = 0; i < CALLS * 10; i++) tlm_engine_exec(rt, k, &task, &args, err, sizeof err);
    double t2 = tlm_now_ns();
    if (b >= 0) ddiff[b] = ((t1 - t0) - (t2 - t1)) / (CALLS * 10);
  }
  rt->dry_run = 0;
  double xmed = median(ddiff, BATCHES), xlo = ddiff[0], xhi = ddiff[BATCHES - 1];
  printf("cache hit dispatch (kernel body skipped on both sides): overhead %.1f ns per call "
         "(min %.1f, max %.1f)\n", xmed, xlo, xhi);
  tlm_problem_free(&p);
  tlm_destroy(rt);
  printf("cache hit: tlm_run %.1f ns vs direct kernel call %.1f ns per call: overhead %.1f ns "
         "(min %.1f, max %.1f over %d batches of %d)\n",
         hmed, kmed_direct, dmed, dlo, dhi, BATCHES, CALLS);

  /* 2. disk warm start: 12 kernels (GPT-2 layers at 3 token counts) */
  static const char *shapes[] = {"64x768:768x2304", "64x768:768x768", "64x768:768x3072",
                                 "64x3072:3072x768", "1x768:768x2304", "1x768:768x768",
                                 "1x768:768x3072",   "1x3072:3072x768", "7x768:768x2304",
                                 "7x768:768x768",    "7x768:768x3072", "7x3072:3072x768"};
  enum { NS = 12 };
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) return 1;
  tlm_problem probs[NS];
  double kern[NS];
  rt = make(dir, model);
  for (int i = 0; i < NS; i++) {
    tlm_mm_desc_parse(shapes[i], &d, err, sizeof err);
    tlm_problem_make(&d, NULL, 1, &probs[i]);
    tlm_run(rt, &probs[i].op, probs[i].in, probs[i].n_in, &probs[i].out, 1);
    kern[i] = kernel_ns(rt, &probs[i]);
  }
  tlm_stats st0;
  tlm_get_stats(rt, &st0);
  tlm_destroy(rt);
  rt = make(dir, model);
  double warm[NS], with_kernel[NS];
  int nwk = 0;
  for (int i = 0; i < NS; i++) {
    tlm_stats b0;
    tlm_get_stats(rt, &b0);
    double a = tlm_now_ns();
    tlm_run(rt, &probs[i].op, probs[i].in, probs[i].n_in, &probs[i].out, 1);
    warm[i] = (tlm_now_ns() - a - kern[i]) * 1e-6;
    tlm_stats b1;
    tlm_get_stats(rt, &b1);
    if (b1.disk_kernel_hits > b0.disk_kernel_hits) with_kernel[nwk++] = warm[i];
  }
  tlm_stats st;
  tlm_get_stats(rt, &st);
  tlm_destroy(rt);
  /* per kernel: total over the shapes divided by kernels loaded */
  double warm_total = 0;
  for (int i = 0; i < NS; i++) warm_total += warm[i];
  double per_kernel = st.disk_kernel_hits ? warm_total / (double)st.disk_kernel_hits : 0;
  double kmed = nwk ? median(with_kernel, nwk) : -1;
  printf("disk warm start: %d shapes, %llu kernels loaded, %llu compiles; first call of a shape "
         "that loads its kernel: median %.3f ms; of any shape: median %.3f ms; total / kernels "
         "%.3f ms\n",
         NS, (unsigned long long)st.disk_kernel_hits, (unsigned long long)st.compiles, kmed,
         median(warm, NS), per_kernel);

  /* 3. new shape reusing a compiled schedule: M = 200..231 at K=N=768 */
  rt = make("none", model);
  tlm_mm_desc_parse("199x768:768x768", &d, err, sizeof err);
  tlm_problem_make(&d, NULL, 1, &p);
  tlm_run(rt, &p.op, p.in, p.n_in, &p.out, 1);
  tlm_problem_free(&p);
  double reuse[32];
  int nr = 0;
  tlm_stats before;
  tlm_get_stats(rt, &before);
  for (int m = 200; m < 232; m++) {
    d.a[0] = m;
    tlm_problem_make(&d, NULL, 1, &p);
    tlm_stats s0, s1;
    tlm_get_stats(rt, &s0);
    double a = tlm_now_ns();
    tlm_run(rt, &p.op, p.in, p.n_in, &p.out, 1);
    double t = tlm_now_ns() - a;
    tlm_get_stats(rt, &s1);
    if (s1.compiles == s0.compiles) reuse[nr++] = (t - kernel_ns(rt, &p)) * 1e-6;
    tlm_problem_free(&p);
  }
  double rmed = nr ? median(reuse, nr) : -1;
  printf("new shape reusing a compiled schedule: %d of 32 new M values, median %.3f ms\n", nr,
         rmed);
  tlm_destroy(rt);

  /* 4. first call of a new shape when a kernel of the operator exists */
  double sync50, sync99, async50, async99;
  new_shape_stall(model, 0, each, &sync50, &sync99);
  new_shape_stall(model, 1, each, &async50, &async99);
  printf("new shape, a kernel of the operator compiled (64xK:KxN, %d new K and N), stall over a "
         "warm call: synchronous p50 %.3f ms p99 %.3f ms; async_compile (TLM_ASYNC=1) p50 %.3f ms "
         "p99 %.3f ms\n", NSTALL, sync50, sync99, async50, async99);
  /* 5. compile time by phase */
  double cb[2][5], cw[2][3];
  int ck[2];
  compile_breakdown(model, each, cb, ck, cw);
  for (int f = 0; f < 2; f++)
    printf("compile, %s (%d kernels), mean ms per kernel: IR %.2f, passes %.2f, object emission "
           "%.2f, link %.2f; all %.2f; first of the process %.2f, the others p50 %.2f p90 %.2f\n",
           f ? "convolution" : "matmul", ck[f], cb[f][0], cb[f][1], cb[f][2], cb[f][3], cb[f][4],
           cw[f][0], cw[f][1], cw[f][2]);
  for (int i = 0; i < NS; i++) tlm_problem_free(&probs[i]);
  if (system(cmd)) return 1;

  /* 4. run-time M vs M baked in: the same schedule compiled both ways,
   * timed in alternating batches; ratio = specialized time / dynamic time */
  rt = make("none", model);
  static const char *sp[] = {"1x768:768x768", "32x768:768x768", "128x768:768x768",
                             "500x768:768x3072"};
  double ratios[4];
  printf("run-time M, N, K vs constants (same schedule, 1 thread):\n");
  for (int i = 0; i < 4; i++) {
    tlm_mm_desc_parse(sp[i], &d, err, sizeof err);
    tlm_problem_make(&d, NULL, 1, &p);
    tlm_validate_matmul(&p.op, p.in, p.n_in, &p.out, 1, &task, &args, err, sizeof err);
    tlm_space space;
    tlm_space_init(&space, &task, &rt->target);
    tlm_schedule sched;
    tlm_engine_schedule(rt, &space, &sched);
    tlm_kernel *kd = NULL, *ks = NULL;
    tlm_engine_kernel_variant(rt, &task, &sched, 0, &kd, NULL, err, sizeof err);
    tlm_engine_kernel_variant(rt, &task, &sched, 1, &ks, NULL, err, sizeof err);
    double r[15];
    for (int b = -2; b < 15; b++) {
      double flop_ns = 2e9 * 0.02; /* ~20 ms of work per batch at 100 GFLOPS */
      int calls = (int)(flop_ns / (2.0 * d.a[0] * d.a[1] * d.b[1]) * 1e0) + 1;
      double t0 = tlm_now_ns();
      for (int c = 0; c < calls; c++) tlm_engine_exec(rt, kd, &task, &args, err, sizeof err);
      double t1 = tlm_now_ns();
      for (int c = 0; c < calls; c++) tlm_engine_exec(rt, ks, &task, &args, err, sizeof err);
      double t2 = tlm_now_ns();
      if (b >= 0) r[b] = (t2 - t1) / (t1 - t0);
    }
    ratios[i] = median(r, 15);
    printf("  %-18s specialized/dynamic time %.3f (min %.3f, max %.3f)\n", sp[i], ratios[i], r[0],
           r[14]);
    tlm_engine_kernel_free(rt, kd);
    tlm_engine_kernel_free(rt, ks);
    tlm_problem_free(&p);
  }
  tlm_destroy(rt);
  if (json) {
    cJSON *o = cJSON_CreateObject();
    static const char *const names[] = {
        "threads", "hit_overhead_ns", "hit_overhead_ns_min", "hit_overhead_ns_max",
        "hit_overhead_with_kernel_ns", "hit_overhead_with_kernel_ns_min",
        "hit_overhead_with_kernel_ns_max", "tlm_run_hit_ns", "direct_call_ns",
        "disk_warm_start_ms_per_kernel", "disk_warm_start_ms_total_per_kernel",
        "disk_kernels_loaded", "disk_warm_start_compiles", "new_shape_reuse_ms",
        "new_shapes_reusing", "static_over_dynamic_m_time_1x768x768",
        "static_over_dynamic_m_time_32x768x768", "static_over_dynamic_m_time_128x768x768",
        "static_over_dynamic_m_time_500x768x3072", "new_shape_stall_sync_ms_p50",
        "new_shape_stall_sync_ms_p99", "new_shape_stall_async_ms_p50",
        "new_shape_stall_async_ms_p99"};
    double v[] = {1,          xmed,      xlo,       xhi,       dmed,      dlo,
                  dhi,        hmed,      kmed_direct, kmed,    per_kernel,
                  (double)st.disk_kernel_hits, (double)st.compiles, rmed, nr,
                  ratios[0],  ratios[1], ratios[2], ratios[3], sync50,    sync99,
                  async50,    async99};
    _Static_assert(sizeof names / sizeof names[0] == sizeof v / sizeof v[0], "one name a value");
    tlm_json_numbers(o, names, v, (int)(sizeof v / sizeof v[0]));
    cJSON_AddStringToObject(o, "model", model ? model : "default");
    static const char *const parts[] = {"ir_ms", "passes_ms", "emission_ms", "link_ms", "all_ms"};
    tlm_json_numbers(cJSON_AddObjectToObject(o, "compile_matmul_ms_per_kernel"), parts, cb[0], 5);
    tlm_json_numbers(cJSON_AddObjectToObject(o, "compile_conv_ms_per_kernel"), parts, cb[1], 5);
    static const char *const walls[] = {"first_ms", "p50_ms", "p90_ms"};
    tlm_json_numbers(cJSON_AddObjectToObject(o, "compile_matmul_wall"), walls, cw[0], 3);
    tlm_json_numbers(cJSON_AddObjectToObject(o, "compile_conv_wall"), walls, cw[1], 3);
    if (tlm_json_save(o, json)) fprintf(stderr, "tlm bench overhead: cannot write %s\n", json);
    cJSON_Delete(o);
  }
  return 0;
}
