/* bench_conv.c - tlm's convolution kernels (the schedule tlm_run picks)
 * against oneDNN on benchdnn convolution sets, side by side in one run.
 *
 * Method (../shared/design/MEASURING.md): per problem, both contenders are
 * compiled and warmed, then timed in alternating batches of about 20 ms of
 * work with a 30 ms pause between contenders (idle OpenMP and tlm workers
 * spin for a while); the report gives medians over batches and the
 * min-max of the per-batch speed ratio. oneDNN gets src/dst in the same
 * layout as tlm and chooses its own weight layout ("any"), reordered once
 * outside the timing, as an inference deployment would; tlm reads the
 * user's weights as given (OIHW for NCHW, HWIO for NHWC).
 *
 * usage: bench_conv [--threads N] [--batches N] [--layout nchw|nhwc]
 *                   [--mb N] [--json FILE] FILE...   (benchdnn conv sets)
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "train/conv_problem.h"
#include "train/measure.h"
#include "train/problem.h"
#include "bench_common.h"

int main(int argc, char **argv) {
  int threads = 1, batches = 9, nhwc = 0, mb = 1, prepack = 1;
  const char *json = NULL;
  const char *files[16];
  int nfiles = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--batches") && i + 1 < argc) batches = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!strcmp(argv[i], "--mb") && i + 1 < argc) mb = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--layout") && i + 1 < argc) nhwc = !strcmp(argv[++i], "nhwc");
    else if (!strcmp(argv[i], "--no-prepack")) prepack = 0;
    else if (argv[i][0] != '-' && nfiles < 16) files[nfiles++] = argv[i];
    else {
      fprintf(stderr, "usage: %s [--threads N] [--batches N] [--layout nchw|nhwc] [--mb N] "
              "[--no-prepack] [--json FILE] FILE...\n"
              "  NHWC weights are declared constant to tlm (tlm_constant_add) unless --no-prepack,\n"
              "  as oneDNN's are reordered once outside the timing\n", argv[0]);
      return 2;
    }
  }
  /* declared weights matter only where tlm packs them: channels-last
   * convolutions run as matmuls (channels-first ones make them input A) */
  if (!nhwc) prepack = 0;
  if (threads < 1 || batches < 3 || mb < 1 || !nfiles) {
    fprintf(stderr, "bench_conv: need >= 1 thread, >= 3 batches, mb >= 1 and a file\n");
    return 2;
  }
  dnnl_baseline *base;
  tlm_runtime *rt = bench_setup(argv, threads, &base);
  char target[320];
  tlm_target_str(&rt->target, target, sizeof target);
  cJSON *jroot = bench_json_root(json, target, rt, threads, batches), *jsets = NULL;
  if (jroot) {
    cJSON_AddStringToObject(jroot, "layout", nhwc ? "nhwc" : "nchw");
    cJSON_AddNumberToObject(jroot, "mb", mb);
    cJSON_AddBoolToObject(jroot, "tlm_weights_constant", prepack);
    jsets = cJSON_AddArrayToObject(jroot, "sets");
  }
  printf("machine: %s\nisa: tlm %s, oneDNN %s; threads %d; layout %s; mb %d; %d alternating batches\n"
         "weights: oneDNN reordered once, untimed; tlm %s\n", target, tlm_isa_name(rt->target.isa), dnnl_baseline_isa(), threads,
         nhwc ? "nhwc" : "nchw", mb, batches,
         prepack ? "declared constant (packed once on first use, in the untimed first call)"
                 : nhwc ? "read as given on every call (--no-prepack)"
                        : "read as given (NCHW: declaring them would change nothing)");
  for (int fi = 0; fi < nfiles; fi++) {
    FILE *f = fopen(files[fi], "r");
    if (!f) {
      fprintf(stderr, "cannot read %s\n", files[fi]);
      return 1;
    }
    printf("\n%s\n%-58s %9s %9s %7s %6s %6s %9s\n", files[fi], "problem", "tlm_GF/s", "dnnl_GF/s",
           "ratio", "(min", "max)", "compile");
    cJSON *jset = NULL, *jprobs = NULL;
    if (jsets) {
      jset = cJSON_CreateObject();
      cJSON_AddStringToObject(jset, "file", files[fi]);
      jprobs = cJSON_AddArrayToObject(jset, "problems");
      cJSON_AddItemToArray(jsets, jset);
    }
    char line[1024], err[256], seen[128][200];
    int nseen = 0, np = 0;
    double log_ratio = 0, sum_tlm = 0, sum_dnnl = 0;
    while (fgets(line, sizeof line, f)) {
      tlm_conv_prb prb;
      if (tlm_conv_prb_parse(line, &prb, err, sizeof err) != 1 || prb.ndims != 4) continue;
      prb.mb = mb;
      char ds[200];
      tlm_conv_prb_str(&prb, ds, sizeof ds);
      int dup = 0;
      for (int s = 0; s < nseen; s++) dup |= !strcmp(seen[s], ds);
      if (dup || nseen >= 128) continue;
      snprintf(seen[nseen++], sizeof seen[0], "%s", ds);
      tlm_conv_problem p;
      if (tlm_conv_problem_make(&prb, nhwc ? TLM_LAYOUT_NHWC : TLM_LAYOUT_NCHW,
                                nhwc ? TLM_WEIGHTS_HWIO : TLM_WEIGHTS_OIHW, NULL, 1, &p))
        return 1;
      bench_tlm_call tc = {rt, &p.op, p.in, p.n_in, &p.out};
      if (prepack && tlm_constant_add(rt, p.in[1].data, tlm_tensor_span_bytes(&p.in[1])) != TLM_OK) {
        fprintf(stderr, "tlm_constant_add: %s\n", tlm_last_error(rt));
        return 1;
      }
      tlm_stats s0, s1;
      tlm_get_stats(rt, &s0);
      bench_tlm_run(&tc);
      tlm_wait_background(rt); /* TLM_ASYNC=1: time (and count) the shape's own kernel */
      tlm_get_stats(rt, &s1);
      double compile_ms = s1.compile_ms - s0.compile_ms;
      double e = tlm_conv_problem_check(&p, 500, 1);
      baseline_window win = {prb.mb, prb.ic, prb.ih, prb.iw, prb.oc, prb.oh, prb.ow,
                             prb.kh, prb.kw, prb.sh, prb.sw, prb.ph, prb.pw, prb.g,
                             prb.dh, prb.dw};
      dnnl_bound *dc = dnnl_bound_conv(base, &win, nhwc);
      if (!dc) {
        fprintf(stderr, "oneDNN: cannot create the convolution %s\n", prb.name);
        return 1;
      }
      bench_dnnl_run(dc);
      double flop = 2.0 * (double)prb.mb * (double)prb.oc * (double)(prb.ic / prb.g) *
                    (double)(prb.kh * prb.kw) * (double)(prb.oh * prb.ow);
      int calls = (int)(2e9 / flop);
      if (calls < 2) calls = 2;
      if (calls > 20000) calls = 20000;
      double warm_tlm = bench_time_batch(bench_tlm_run, &tc, calls);
      double warm_dnnl = bench_time_batch(bench_dnnl_run, dc, calls);
      calls = bench_batch_calls(warm_tlm, warm_dnnl, calls);
      double tt[64], td[64], ratio[64];
      for (int b = 0; b < batches && b < 64; b++) {
        usleep(30000);
        tt[b] = bench_time_batch(bench_tlm_run, &tc, calls);
        usleep(30000);
        td[b] = bench_time_batch(bench_dnnl_run, dc, calls);
        ratio[b] = td[b] / tt[b];
      }
      int nb = batches < 64 ? batches : 64;
      double tmed = bench_pct(tt, nb, 0.5), dmed = bench_pct(td, nb, 0.5);
      double rmed = bench_pct(ratio, nb, 0.5), rmin = ratio[0], rmax = ratio[nb - 1];
      int ok = e >= 0 && e <= tlm_problem_tolerance((prb.ic / prb.g) * prb.kh * prb.kw);
      printf("%-58s %9.1f %9.1f %7.2f %6.2f %6.2f %7.1fms%s  %s\n", ds, flop / tmed, flop / dmed,
             rmed, rmin, rmax, compile_ms, ok ? "" : " WRONG", prb.name);
      fflush(stdout);
      if (jprobs) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "problem", ds);
        cJSON_AddStringToObject(o, "name", prb.name);
        static const char *const names[] = {
            "tlm_ms_median",   "onednn_ms_median", "tlm_gflops",     "onednn_gflops",
            "speed_ratio_tlm_over_onednn_median", "speed_ratio_min", "speed_ratio_max",
            "tlm_compile_ms",  "max_rel_err"};
        double v[] = {tmed * 1e-6, dmed * 1e-6, flop / tmed, flop / dmed, rmed,
                      rmin,        rmax,        compile_ms,  e};
        tlm_json_numbers(o, names, v, 9);
        cJSON_AddItemToArray(jprobs, o);
      }
      log_ratio += log(rmed);
      sum_tlm += tmed, sum_dnnl += dmed;
      np++;
      dnnl_bound_destroy(dc);
      if (prepack) tlm_constant_remove(rt, p.in[1].data);
      tlm_conv_problem_free(&p);
    }
    fclose(f);
    double geo = np ? exp(log_ratio / np) : 0;
    printf("%d distinct problems: geomean speed ratio tlm/oneDNN %.2f; sum of medians tlm %.2f ms, "
           "oneDNN %.2f ms (%.2fx)\n", np, geo, sum_tlm * 1e-6, sum_dnnl * 1e-6,
           sum_tlm > 0 ? sum_dnnl / sum_tlm : 0);
    if (jset) {
      static const char *const names[] = {"count", "geomean_speed_ratio", "tlm_ms_sum",
                                          "onednn_ms_sum"};
      double v[] = {np, geo, sum_tlm * 1e-6, sum_dnnl * 1e-6};
      tlm_json_numbers(jset, names, v, 4);
    }
  }
  bench_json_finish(jroot, json, "bench_conv");
  tlm_destroy(rt);
  dnnl_baseline_destroy(base);
  return 0;
}
