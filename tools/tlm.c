/* tlm.c - the `tlm` command: one command, several subcommands.
 *   tlm run MATMUL_DESC [--check] [--schedule default|random:SEED|"name=v ..."]
 *           [--epilogue bias,relu|gelu|silu,residual] [--threads N] [--json FILE]
 *   tlm version
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/validate.h"
#include "runtime/reference.h"
#include "engine/engine.h"
#include "tools/adapt.h"
#include "tools/bench_attn.h"
#include "tools/bench_kernels.h"
#include "tools/bench_peak.h"
#include "tools/cachecmd.h"
#include "tools/conv.h"
#include "train/conv_problem.h"
#include "train/collect.h"
#include "train/eval.h"
#include "tools/lmtools.h"
#include "tools/overhead.h"
#include "tools/pipeline.h"
#include "tools/tune.h"
#include "tools/gpu.h"
#include "train/measure.h"
#include "train/problem.h"
#include "train/train.h"


static void usage(FILE *f) {
  fprintf(f,
          "usage: tlm <command> [options]\n"
          "commands:\n"
          "  run MATMUL_DESC   schedule, JIT-compile and time one matmul\n"
          "  run softmax:RxC | layernorm:RxC | rmsnorm:RxC   the same for a row-wise op\n"
          "  run relu:RxC | relu6: | gelu: | silu: | swiglu: | add: | mul:   elementwise\n"
          "                    (swiglu: silu(x) * z; add/mul: x + z, x * z)\n"
          "  run CONV_DESC     the same for a benchdnn convolution, e.g.\n"
          "                    mb1ic64ih56oc64oh56kh3ph1 (g, mb, ic/id/ih/iw, oc/od/oh/ow,\n"
          "                    kd/kh/kw, sd/sh/sw, pd/ph/pw, dd/dh/dw, n\"name\" as benchdnn)\n"
          "      --batch FILE  every problem of a benchdnn shapes file (matmul or conv)\n"
          "      --match S     with --batch: only lines containing S (matmul files)\n"
          "      --layout nchw|nhwc  --weights oihw|hwio  (default: nchw, and hwio for nhwc)\n"
          "      --mb N        override the minibatch of each descriptor\n"
          "      --epilogue E  for convolutions: bias, bn, residual, relu, relu6, gelu, silu\n"
          "      --public      for convolutions: time tlm_run itself (what an application\n"
          "                    gets: 1x1 and KxK-over-im2col convolutions run as matmuls\n"
          "                    there; `path` says which); --const-w: and the weights\n"
          "                    declared constant (tlm_constant_add), as the samples do\n"
          "                    (--causal and --scale S for softmax)\n"
          "      MATMUL_DESC   benchdnn matmul problem, e.g. 1000x768:768x3072 or\n"
          "                    12x128x64:12x64x128 (batch dims broadcast)\n"
          "      --check       compare against the reference; exit 1 above tolerance\n"
          "      --schedule S  auto (what tlm_run does: the model if one is loaded, else\n"
          "                    the rule; the default), rule (the hand rule), random:SEED\n"
          "                    (uniform over the space), or the decisions as printed,\n"
          "                    e.g. \"vec=16 tile_n3=32 ...\"\n"
          "      --epilogue E  comma list of bias, relu, relu6, gelu, silu, residual\n"
          "      --transpose-a, --transpose-b   transposed storage of A or B\n"
          "      --const-b     declare B constant (tlm_constant_add): packed once, not per call\n"
          "      --vs S        time a second schedule (same forms as --schedule) side\n"
          "                    by side with the first, in alternating batches (matmul)\n"
          "      --threads N   worker threads (default: TLM_NUM_THREADS or all CPUs)\n"
          "      --min-time S  seconds of timed repeats (default 0.3)\n"
          "      --json FILE   also write the results as JSON\n"
          "      --emit-ir F   write the kernel's optimized LLVM IR to F\n"
          "      --compile-repeats N  also compile the schedule N more times in this\n"
          "                    warm process: median compile time and its phases\n"
          "  collect ...       measure schedules for training (tlm collect --help)\n"
          "  train ...         train the tensor language model (tlm train --help)\n"
          "  quantize C M      fp32 checkpoint C -> int8 model M\n"
          "  bound --records F how often measured search beats the rule again (--help)\n"
          "  explain DESC      the language model's decisions for a matmul\n"
          "  eval ...          model vs default rule vs random search (tlm eval --help)\n"
          "  tune FILE...      measure K candidates per shape, keep the fastest in the\n"
          "                    disk cache (tlm tune --help)\n"
          "  adapt [--minutes N]  measure on this machine and fine-tune the model into\n"
          "                    one loaded by default here (tlm adapt --help)\n"
          "  bench decode ...  decode time and int8-vs-fp32 agreement (--help)\n"
          "  bench overhead    cache hit, disk warm start, new-shape costs (--json F)\n"
          "  bench attention   fused attention vs Q K^T + softmax + P V per key length\n"
          "  bench peak        measured FMA peak and read bandwidth, one core and all\n"
          "  bench kernels F.. TLM-1, the rule, a search tuner and oneDNN per task,\n"
          "                    checked and timed side by side (--quick, --json F; --help)\n"
          "  bench serving     the LLM-serving replay, cold and warm cache, against\n"
          "                    oneDNN (--model NAME --requests N --json F; --help)\n"
          "  gpu ptx|export|info  GPU matmul schedules and their PTX, kernels for the\n"
          "                    device check (tests/device), the CUDA device seen\n"
          "  cache list|stats|verify|clear [--dir DIR]   the disk kernel cache\n"
          "  version           print the library version\n");
}

static int parse_epilogue(const char *s, tlm_matmul_desc *e) {
  tlm_conv_epi items = {0};
  if (tlm_epilogue_parse(s, &items, 0)) return -1;
  e->has_bias |= items.bias;
  e->has_residual |= items.residual;
  if (items.act != TLM_ACT_NONE) e->activation = items.act;
  return 0;
}

/* a runtime from the environment, with `threads` workers when >= 0; NULL
 * after saying why */
static tlm_runtime *make_runtime(int threads) { return tlm_tool_runtime("tlm", threads, NULL, NULL); }

static int run_row(tlm_op op, int64_t R, int64_t C, int causal, float scale,
                   const char *sched_text, int threads, int check, double min_time) {
  tlm_op_kind kind = op.kind;
  tlm_runtime *rt = make_runtime(threads);
  if (!rt) return 1;
  int64_t n;
  float *x = NULL, *y = NULL, *ref = NULL, *g = NULL, *b = NULL;
  int rc = 1;
  if (__builtin_mul_overflow(R, C, &n) || n > ((int64_t)1 << 31)) {
    fprintf(stderr, "tlm run: %lld x %lld elements is too large to run here\n", (long long)R,
            (long long)C);
    goto out;
  }
  x = malloc(sizeof(float) * (size_t)n), y = malloc(sizeof(float) * (size_t)n);
  ref = malloc(sizeof(float) * (size_t)n), g = malloc(sizeof(float) * (size_t)C);
  b = malloc(sizeof(float) * (size_t)C);
  if (!x || !y || !ref || !g || !b) {
    fprintf(stderr, "tlm run: out of memory\n");
    goto out;
  }
  uint64_t rng = 42;
  for (int64_t i = 0; i < n; i++) x[i] = (float)((tlm_rng_next(&rng) >> 40) % 2000) / 250.0f - 4.0f;
  for (int64_t i = 0; i < C; i++) g[i] = 1.0f, b[i] = 0.1f;
  if (kind == TLM_OP_SOFTMAX) {
    op.u.rownorm.causal = causal;
    if (scale > 0) op.u.rownorm.scale = scale;
  }
  tlm_tensor in[3], o;
  int nin = 1;
  tlm_tensor_dense(&in[0], TLM_F32, 2, (int64_t[]){R, C}, x);
  if (kind == TLM_OP_ELTWISE) {
    /* z: the same shape as x (the residual, or the up projection) */
    if (op.u.eltwise.binary != TLM_BINARY_NONE) {
      float *z = malloc(sizeof(float) * (size_t)n);
      if (!z) {
        fprintf(stderr, "tlm run: out of memory\n");
        goto out;
      }
      for (int64_t i = 0; i < n; i++) z[i] = x[(i * 7) % n] * 0.5f;
      free(g);
      g = z; /* freed as g */
      tlm_tensor_dense(&in[nin++], TLM_F32, 2, (int64_t[]){R, C}, z);
    }
  } else {
    if (kind != TLM_OP_SOFTMAX) tlm_tensor_dense(&in[nin++], TLM_F32, 1, &C, g);
    if (kind == TLM_OP_LAYERNORM) tlm_tensor_dense(&in[nin++], TLM_F32, 1, &C, b);
  }
  tlm_tensor_dense(&o, TLM_F32, 2, (int64_t[]){R, C}, y);
  tlm_task task;
  tlm_row_args args;
  char err[512];
  tlm_status st = tlm_validate_row(&op, in, nin, &o, 1, &task, &args, err, sizeof err);
  tlm_space space;
  tlm_schedule sched;
  const tlm_kernel *k = NULL;
  double schedule_ms;
  if (tlm_run_validated_kernel(rt, st, err, &task, &space, sched_text, &sched, &k, &schedule_ms))
    goto out;
  if ((st = tlm_engine_exec(rt, k, &task, &args, err, sizeof err))) {
    fprintf(stderr, "tlm run: %s: %s\n", tlm_status_str(st), err);
    goto out;
  }
  double worst = 0;
  if (check) {
    tlm_row_args ra = args;
    ra.y = ref;
    tlm_ref_row(&task, &ra);
    for (int64_t i = 0; i < n; i++) {
      double e = fabs((double)y[i] - ref[i]) / (1.0 + fabs((double)ref[i]));
      if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
    }
  }
  double times[4096];
  int reps = 0;
  double start = tlm_now_ns();
  while (reps < 4096 && (reps < 5 || tlm_now_ns() - start < min_time * 1e9)) {
    double t0 = tlm_now_ns();
    tlm_engine_exec(rt, k, &task, &args, err, sizeof err);
    times[reps++] = tlm_now_ns() - t0;
  }
  qsort(times, (size_t)reps, sizeof(double), tlm_cmp_double);
  char ts[160], ss[256];
  printf("problem      %s\n", tlm_task_str(&task, ts, sizeof ts));
  printf("threads      %d\n", rt->nthreads);
  {
    char tgs[320];
    printf("target       %s\n", tlm_target_str(&rt->target, tgs, sizeof tgs));
  }
  printf("schedule     %s\n", tlm_schedule_str(&space, &sched, ss, sizeof ss));
  printf("compile_ms   %.2f%s\n", k->compile_ms, k->from_disk ? " (loaded from the disk cache)" : "");
  printf("kernel_ms    %.4f (median of %d)\n", times[reps / 2] * 1e-6, reps);
  printf("gbytes_per_s %.1f\n", 8.0 * (double)n / times[reps / 2]);
  if (check) printf("max_rel_err  %.3g (tolerance 1e-4) %s\n", worst, worst <= 1e-4 ? "PASS" : "FAIL");
  rc = check && !(worst <= 1e-4) ? 1 : 0;
out:
  free(x);
  free(y);
  free(ref);
  free(g);
  free(b);
  tlm_destroy(rt);
  return rc;
}

/* a convolution descriptor starts with a benchdnn conv field; a --batch
 * file is read as convolutions */
static int is_conv_run(int argc, char **argv) {
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--batch")) {
      /* a file of convolutions when its first problem line is one */
      FILE *f = i + 1 < argc ? fopen(argv[i + 1], "r") : NULL;
      char line[1024], err[256];
      int conv = 1;
      while (f && fgets(line, sizeof line, f)) {
        tlm_conv_prb p;
        tlm_mm_desc d;
        if (tlm_conv_prb_parse(line, &p, err, sizeof err) != 0) break;
        if (tlm_mm_desc_parse(line, &d, err, sizeof err) == 1) {
          conv = 0;
          break;
        }
      }
      if (f) fclose(f);
      return conv;
    }
    if (argv[i][0] == '-') {
      if (i + 1 < argc && strcmp(argv[i], "--check") && strcmp(argv[i], "--transpose-a") &&
          strcmp(argv[i], "--transpose-b") && strcmp(argv[i], "--causal"))
        i++; /* skip the option's value */
      continue;
    }
    static const char *const starts[] = {"g",  "mb", "ic", "id", "ih", "iw", "oc", "od",
                                         "oh", "ow", "kd", "kh", "kw", "sd", "sh", "sw",
                                         "pd", "ph", "pw", "dd", "dh", "dw"};
    for (size_t k = 0; k < sizeof starts / sizeof starts[0]; k++)
      if (!strncmp(argv[i], starts[k], strlen(starts[k])) && isdigit((unsigned char)argv[i][strlen(starts[k])]))
        return 1;
    return 0;
  }
  return 0;
}

static int cmd_run(int argc, char **argv);

/* `tlm run --batch FILE` over a file of matmul descriptors: each problem
 * line runs as `tlm run LINE OPTIONS...`; returns 0 when all pass */
static int run_matmul_batch(int argc, char **argv) {
  const char *file = NULL, *match = NULL;
  char **rest = calloc((size_t)argc + 2, sizeof *rest);
  if (!rest) return 1;
  int nr = 1;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--batch") && i + 1 < argc) file = argv[++i];
    else if (!strcmp(argv[i], "--match") && i + 1 < argc) match = argv[++i];
    else rest[nr++] = argv[i];
  }
  FILE *f = file ? fopen(file, "r") : NULL;
  if (!f) {
    fprintf(stderr, "tlm run: cannot read %s\n", file ? file : "(no file)");
    free(rest);
    return 2;
  }
  char *line = NULL, err[256];
  size_t linecap = 0;
  int total = 0, passed = 0, rc = 0;
  while (getline(&line, &linecap, f) > 0) {
    line[strcspn(line, "\r\n")] = 0;
    tlm_mm_desc d;
    if (tlm_mm_desc_parse(line, &d, err, sizeof err) != 1) continue;
    if (match && !strstr(line, match)) continue;
    char desc[256];
    tlm_mm_desc_str(&d, desc, sizeof desc);
    rest[0] = desc;
    if (d.transpose_a) rest[nr] = "--transpose-a", nr++;
    if (d.transpose_b) rest[nr] = "--transpose-b", nr++;
    printf("== %s\n", line);
    fflush(stdout);
    int one = cmd_run(nr, rest);
    if (d.transpose_a) nr--;
    if (d.transpose_b) nr--;
    total++;
    if (one == 0) passed++;
    else rc = one;
  }
  free(line);
  fclose(f);
  free(rest);
  printf("%d problems: %d passed, %d failed\n", total, passed, total - passed);
  return rc;
}

static int cmd_run(int argc, char **argv) {
  if (is_conv_run(argc, argv)) return tlm_cmd_run_conv(argc, argv);
  for (int i = 0; i < argc; i++)
    if (!strcmp(argv[i], "--batch")) return run_matmul_batch(argc, argv);
  const char *desc_text = NULL, *sched_text = "auto", *json_path = NULL, *ir_path = NULL;
  const char *vs_text = NULL;
  int check = 0, threads = -1;
  double min_time = 0.3;
  int causal = 0;
  float scale = 0;
  tlm_matmul_desc epi;
  memset(&epi, 0, sizeof epi);
  int ta = 0, tb = 0, const_b = 0, compile_repeats = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--check")) check = 1;
    else if (!strcmp(a, "--compile-repeats") && i + 1 < argc) compile_repeats = atoi(argv[++i]);
    else if (!strcmp(a, "--const-b")) const_b = 1;
    else if (!strcmp(a, "--transpose-a")) ta = 1;
    else if (!strcmp(a, "--causal")) causal = 1;
    else if (!strcmp(a, "--scale") && i + 1 < argc) scale = (float)atof(argv[++i]);
    else if (!strcmp(a, "--transpose-b")) tb = 1;
    else if (!strcmp(a, "--schedule") && i + 1 < argc) sched_text = argv[++i];
    else if (!strcmp(a, "--vs") && i + 1 < argc) vs_text = argv[++i];
    else if (!strcmp(a, "--json") && i + 1 < argc) json_path = argv[++i];
    else if (!strcmp(a, "--emit-ir") && i + 1 < argc) ir_path = argv[++i];
    else if (!strcmp(a, "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(a, "--min-time") && i + 1 < argc) min_time = atof(argv[++i]);
    else if (!strcmp(a, "--epilogue") && i + 1 < argc) {
      if (parse_epilogue(argv[++i], &epi)) return 2;
    } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (a[0] == '-' && a[1] == '-' && !strchr(a, '=')) {
      fprintf(stderr, "tlm run: unknown option '%s'\n", a);
      return 2;
    } else if (!desc_text) desc_text = a;
    else {
      fprintf(stderr, "tlm run: unexpected argument '%s'\n", a);
      return 2;
    }
  }
  if (!desc_text) {
    fprintf(stderr, "tlm run: missing MATMUL_DESC (e.g. 1000x768:768x768)\n");
    return 2;
  }
  tlm_mm_desc d;
  char err[512];
  tlm_op rk;
  int64_t rrows, rcols;
  int rr = tlm_row_desc_parse(desc_text, &rk, &rrows, &rcols, err, sizeof err);
  if (rr < 0) {
    fprintf(stderr, "tlm run: bad descriptor '%s': %s\n", desc_text, err);
    return 2;
  }
  if (rr > 0) return run_row(rk, rrows, rcols, causal, scale, sched_text, threads, check, min_time);
  int pr = tlm_mm_desc_parse(desc_text, &d, err, sizeof err);
  if (pr <= 0) {
    fprintf(stderr, "tlm run: bad descriptor '%s': %s\n", desc_text,
            pr == 0 ? "no problem in it" : err);
    return 2;
  }
  d.transpose_a |= ta;
  d.transpose_b |= tb;
  tlm_runtime *rt = make_runtime(threads);
  if (!rt) return 1;
  int rc = 1;
  tlm_problem p;
  if (tlm_problem_make(&d, &epi, 42, &p)) {
    fprintf(stderr, "tlm run: cannot allocate the problem (too large, or out of memory)\n");
    tlm_destroy(rt);
    return 1;
  }
  if (const_b) { /* B declared constant: kernels that pack it read a copy packed once */
    if (tlm_constant_add(rt, p.in[1].data, tlm_tensor_span_bytes(&p.in[1])) != TLM_OK) {
      fprintf(stderr, "tlm run: %s\n", tlm_last_error(rt));
      goto out;
    }
  }
  tlm_task task;
  tlm_mm_args args;
  tlm_status st = tlm_validate_matmul(&p.op, p.in, p.n_in, &p.out, 1, &task, &args, err, sizeof err);
  if (!st) task.u.mm.b_const = tlm_prepack_b_constant(rt, &task, &args); /* as tlm_run sets it */
  tlm_space space;
  tlm_schedule sched;
  const tlm_kernel *k = NULL;
  double schedule_ms = 0;
  if (tlm_run_validated_kernel(rt, st, err, &task, &space, sched_text, &sched, &k, &schedule_ms))
    goto out;
  if (vs_text) {
    rc = tlm_run_vs(rt, &task, &space, &args, &sched, k, vs_text, min_time);
    goto out;
  }
  if (ir_path) {
    char *ir = NULL;
    FILE *f = fopen(ir_path, "w");
    if (!f || tlm_engine_ir(rt, &task, &sched, !getenv("TLM_RAW_IR"), &ir, err, sizeof err)) {
      fprintf(stderr, "tlm run: cannot write IR to %s\n", ir_path);
      if (f) fclose(f);
      goto out;
    }
    fputs(ir, f);
    fclose(f);
    free(ir);
  }
  /* first run, then the check, then timed repeats */
  st = tlm_engine_exec(rt, k, &task, &args, err, sizeof err);
  if (st) {
    fprintf(stderr, "tlm run: %s: %s\n", tlm_status_str(st), err);
    goto out;
  }
  double max_err = -1, tol = tlm_problem_tolerance(task.u.mm.K);
  /* every output element up to 0.4 GFLOP; beyond, 20000 sampled ones */
  if (check)
    max_err = tlm_task_flops(&task) <= 4e8 ? tlm_problem_check(&p)
                                           : tlm_problem_check_sampled(&p, 20000, 7);
  int reps = 0, cap = 100000;
  double *times = malloc(sizeof(double) * (size_t)cap);
  double start = tlm_now_ns();
  while (times && reps < cap && (reps < 5 || tlm_now_ns() - start < min_time * 1e9)) {
    double t0 = tlm_now_ns();
    tlm_engine_exec(rt, k, &task, &args, err, sizeof err);
    times[reps++] = tlm_now_ns() - t0;
  }
  qsort(times, (size_t)reps, sizeof(double), tlm_cmp_double);
  double med = reps ? times[reps / 2] : 0, lo = reps ? times[0] : 0, hi = reps ? times[reps - 1] : 0;
  double gflops = tlm_task_flops(&task) / med;
  free(times);
  char ts[160], ss[512], nest[2048];
  printf("problem      %s\n", tlm_task_str(&task, ts, sizeof ts));
  printf("threads      %d\n", rt->nthreads);
  {
    char tgs[320];
    printf("target       %s\n", tlm_target_str(&rt->target, tgs, sizeof tgs));
  }
  printf("schedule     %s\n", tlm_schedule_str(&space, &sched, ss, sizeof ss));
  printf("loop nest\n%s", ln_print(&k->nest, nest, sizeof nest));
  printf("schedule_ms  %.3f\n", schedule_ms);
  printf("compile_ms   %.2f%s\n", k->compile_ms, k->from_disk ? " (loaded from the disk cache)" : "");
  double warm_ms = -1;
  if (compile_repeats > 0 && tlm_run_compile_repeats(rt, &task, &sched, compile_repeats, &warm_ms))
    goto out;
  printf("kernel_ms    %.4f (median of %d, min %.4f, max %.4f)\n", med * 1e-6, reps, lo * 1e-6,
         hi * 1e-6);
  printf("gflops       %.1f\n", gflops);
  if (check) printf("max_rel_err  %.3g (tolerance %.3g) %s\n", max_err, tol,
                    (max_err >= 0 && max_err <= tol) ? "PASS" : "FAIL");
  if (json_path) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "problem", ts);
    cJSON_AddNumberToObject(o, "threads", rt->nthreads);
    cJSON_AddStringToObject(o, "schedule", ss);
    cJSON_AddNumberToObject(o, "schedule_ms", schedule_ms);
    cJSON_AddNumberToObject(o, "compile_ms", k->compile_ms);
    if (warm_ms >= 0) cJSON_AddNumberToObject(o, "compile_warm_ms_median", warm_ms);
    cJSON_AddNumberToObject(o, "kernel_ms_median", med * 1e-6);
    cJSON_AddNumberToObject(o, "kernel_ms_min", lo * 1e-6);
    cJSON_AddNumberToObject(o, "kernel_ms_max", hi * 1e-6);
    cJSON_AddNumberToObject(o, "repeats", reps);
    cJSON_AddNumberToObject(o, "gflops", gflops);
    if (check) {
      cJSON_AddNumberToObject(o, "max_rel_err", max_err);
      cJSON_AddNumberToObject(o, "tolerance", tol);
    }
    int bad = tlm_json_save(o, json_path);
    cJSON_Delete(o);
    if (bad) {
      fprintf(stderr, "tlm run: cannot write %s\n", json_path);
      rc = 2;
      goto out;
    }
  }
  rc = (check && !(max_err >= 0 && max_err <= tol)) ? 1 : 0;
out:
  tlm_problem_free(&p);
  tlm_destroy(rt);
  return rc;
}

/* samples/llm_serving.c, built into this tool */
int tlm_serving_main(int argc, char **argv, char **exec_argv);

/* `tlm bench serving [--shared DIR] [sample options]`: the serving sample's
 * replay on a fresh cache directory (cold), then a new runtime on the same
 * directory (warm), the oneDNN baseline beside them. */
static int cmd_bench_serving(int argc, char **argv, char **all_argv) {
  const char *shared = "../shared";
  int has_trace = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: tlm bench serving [--shared DIR] [--model NAME] [--requests N] [--json F]\n"
             "                         [--trace FILE] [--models-json FILE] [--layers N]\n"
             "                         [--kv-heads N] [--max-context N] [--decode-steps N]\n"
             "                         [--threads N] [--no-baseline] [--no-prepack]\n"
             "  Replays the LLM-serving trace (default DIR/workloads/traces/\n"
             "  AzureLLMInferenceTrace_conv.csv, 24 requests) through a decoder of\n"
             "  DIR/workloads/models.json (default gpt2-124m) with every operator a\n"
             "  tlm_run() call: once on a new, empty cache directory (cold: every kernel\n"
             "  scheduled and compiled), once more with a new runtime on that directory\n"
             "  (warm: kernels loaded from disk), and once through oneDNN + C. Reports\n"
             "  tokens/s, request latency p50/p99, kernels compiled and loaded, speed\n"
             "  against the baseline and the largest output difference (JSON with --json).\n");
      return 0;
    }
    if (!strcmp(argv[i], "--shared") && i + 1 < argc) shared = argv[i + 1];
    if (!strcmp(argv[i], "--trace")) has_trace = 1;
  }
  char trace[4096];
  snprintf(trace, sizeof trace, "%s/workloads/traces/AzureLLMInferenceTrace_conv.csv", shared);
  char **av = calloc((size_t)argc + 6, sizeof *av);
  if (!av) return 1;
  int n = 0;
  av[n++] = "tlm bench serving";
  if (!has_trace) av[n++] = "--trace", av[n++] = trace;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--shared") && i + 1 < argc) {
      i++;
      continue;
    }
    av[n++] = argv[i];
  }
  av[n++] = "--fresh-cache";
  av[n++] = "--warm";
  int rc = tlm_serving_main(n, av, all_argv);
  free(av);
  return rc;
}

int main(int argc, char **argv) {
  if (argc > 2 && !strcmp(argv[1], "bench") && !strcmp(argv[2], "serving"))
    return cmd_bench_serving(argc - 3, argv + 3, argv);
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "run")) return cmd_run(argc - 2, argv + 2);
  if (!strcmp(argv[1], "collect")) return tlm_cmd_collect(argc - 2, argv + 2);
  if (!strcmp(argv[1], "cache")) return tlm_cmd_cache(argc - 2, argv + 2);
  if (!strcmp(argv[1], "train")) return tlm_cmd_train(argc - 2, argv + 2);
  if (!strcmp(argv[1], "explain")) return tlm_cmd_explain(argc - 2, argv + 2);
  if (!strcmp(argv[1], "eval")) return tlm_cmd_eval(argc - 2, argv + 2);
  if (!strcmp(argv[1], "tune")) return tlm_cmd_tune(argc - 2, argv + 2);
  if (!strcmp(argv[1], "adapt")) return tlm_cmd_adapt(argc - 2, argv + 2);
  if (!strcmp(argv[1], "gpu")) return tlm_cmd_gpu(argc - 2, argv + 2);
  if (argc > 2 && !strcmp(argv[1], "bench") && !strcmp(argv[2], "decode"))
    return tlm_cmd_bench_decode(argc - 3, argv + 3);
  if (argc > 2 && !strcmp(argv[1], "bench") && !strcmp(argv[2], "overhead"))
    return tlm_cmd_bench_overhead(argc - 3, argv + 3);
  if (argc > 2 && !strcmp(argv[1], "bench") && !strcmp(argv[2], "attention"))
    return tlm_cmd_bench_attention(argc - 3, argv + 3);
  if (argc > 2 && !strcmp(argv[1], "bench") && !strcmp(argv[2], "peak"))
    return tlm_cmd_bench_peak(argc - 3, argv + 3);
  if (argc > 2 && !strcmp(argv[1], "bench") && !strcmp(argv[2], "kernels"))
    return tlm_cmd_bench_kernels(argc - 3, argv + 3, argv);
  if (!strcmp(argv[1], "quantize")) return tlm_cmd_quantize(argc - 2, argv + 2);
  if (!strcmp(argv[1], "bound")) return tlm_cmd_bound(argc - 2, argv + 2);
  if (!strcmp(argv[1], "version")) {
    printf("tlm %s\n", tlm_version());
    return 0;
  }
  if (!strcmp(argv[1], "help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
    usage(stdout);
    return 0;
  }
  fprintf(stderr, "tlm: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
