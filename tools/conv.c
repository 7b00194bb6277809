/* conv.c - `tlm run` for convolutions: one benchdnn descriptor or a file of
 * them, compiled, checked against the reference and timed. */
#include "tools/conv.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/conv_as_matmul.h"
#include "api/validate.h"
#include "engine/engine.h"
#include "runtime/reference.h"
#include "train/conv_problem.h"
#include "train/measure.h"
#include "train/problem.h"

/* ---- tlm run ------------------------------------------------------------------------ */

typedef struct run_opts {
  const char *sched_text, *json_path, *ir_path, *vs_text;
  int check, threads, mb, points, compile_repeats;
  int public_path, const_w; /* --public: time tlm_run itself; --const-w: weights declared constant */
  double min_time;
  tlm_layout layout;
  int wlayout; /* -1: the layout's natural one */
  tlm_conv_epi epi;
} run_opts;

typedef struct run_result {
  char problem[200], schedule[512], path[320];
  double first_ms; /* --public: the first tlm_run call, compile included */
  double compile_ms, schedule_ms, med_ns, lo_ns, hi_ns, gflops, max_err, tol;
  int reps, ok;
} run_result;

/* What tlm_run does with this convolution: channel blocks over weights
 * packed per block (when const_w, the weights declared constant), lowered
 * to a matmul (a 1x1 over dense or gathered pixels, or a KxK over its
 * im2col copy; api/conv_as_matmul.h) or the convolution kernels. Writes a
 * line for `path`. */
static void conv_path(const tlm_runtime *rt, const tlm_task *task, const tlm_conv_problem *p,
                      int const_w, char *buf, size_t cap) {
  /* as tlm_run decides: no rewrites with TLM_CONV_AS_MATMUL=0, no blocks
   * without room for copies (TLM_PREPACK_BYTES=0); past the room, the
   * blocks read the caller's weights */
  int blocks = rt->cfg.disable_conv_as_matmul || !rt->prepack_limit
                   ? 0 : tlm_conv_oc_blocks(task, &p->op, &rt->target);
  const tlm_conv_task *t = &task->u.conv;
  size_t wbytes = (size_t)t->KD * t->KH * t->KW * t->ICg * t->OCg * t->G * sizeof(float);
  if (blocks > 1 && const_w) {
    snprintf(buf, cap, "%d convolutions of %d output channels over the weights %s", blocks,
             TLM_CONV_OC_BLOCK, wbytes <= rt->prepack_limit ? "packed per block"
                                : "as they are (no room for a packed copy: TLM_PREPACK_BYTES)");
    return;
  }
  if (rt->cfg.disable_conv_as_matmul) {
    snprintf(buf, cap, "convolution kernel");
    return;
  }
  tlm_op mop;
  tlm_tensor min[4], mout;
  int mn = 0;
  size_t gb = tlm_conv_gather_bytes(task, &p->op, p->in, &p->out);
  float dummy = 0;
  if (tlm_conv_as_matmul(task, &p->op, p->in, &p->out, gb ? &dummy : NULL, &mop, min, &mn, &mout) &&
      min[0].ndim >= 2 && min[1].ndim >= 2) {
    const tlm_tensor *a = &min[0], *b = &min[1];
    long long batch = 1;
    for (int d = 0; d < a->ndim - 2; d++) batch *= a->shape[d];
    snprintf(buf, cap, "matmul %lld x (%lld x %lld) . (%lld x %lld)%s", batch,
             (long long)a->shape[a->ndim - 2], (long long)a->shape[a->ndim - 1],
             (long long)b->shape[b->ndim - 2], (long long)b->shape[b->ndim - 1],
             gb ? ", src gathered first (a copy of " : "");
    if (gb) {
      size_t l = strlen(buf);
      snprintf(buf + l, cap - l, "%.2f MiB per call)", (double)gb / (1 << 20));
    }
  } else {
    snprintf(buf, cap, "convolution kernel");
  }
  if (blocks > 1) { /* --const-w / tlm_constant_add would block it */
    size_t l = strlen(buf);
    snprintf(buf + l, cap - l, "; with the weights declared constant, %d convolutions of %d output "
             "channels over the weights packed per block", blocks, TLM_CONV_OC_BLOCK);
  }
}

/* --check: the tolerance, and the problem's output against the reference */
static void check_output(const tlm_task *task, tlm_conv_problem *p, const run_opts *o, run_result *res) {
  const tlm_conv_task *t = &task->u.conv;
  res->tol = tlm_problem_tolerance((int64_t)t->ICg * t->KD * t->KH * t->KW);
  res->max_err = -1;
  if (o->check) {
    int pts = o->points;
    if (pts == 0) pts = tlm_task_flops(task) <= 4e8 ? -1 : 20000;
    res->max_err = tlm_conv_problem_check(p, pts, 7);
  }
}

/* times call(ctx) for --min-time (at least 3 and at most 4096 calls):
 * median, min, max and GFLOPS into res */
static void time_calls(void (*call)(void *), void *ctx, double flops, const run_opts *o,
                       run_result *res) {
  double times[4096];
  int reps = 0;
  double start = tlm_now_ns();
  while (reps < 4096 && (reps < 3 || tlm_now_ns() - start < o->min_time * 1e9)) {
    double t0 = tlm_now_ns();
    call(ctx);
    times[reps++] = tlm_now_ns() - t0;
  }
  qsort(times, (size_t)reps, sizeof(double), tlm_cmp_double);
  res->med_ns = times[reps / 2], res->lo_ns = times[0], res->hi_ns = times[reps - 1];
  res->reps = reps;
  res->gflops = flops / res->med_ns;
}

typedef struct public_call {
  tlm_runtime *rt;
  tlm_conv_problem *p;
} public_call;
static void call_public(void *ctx) {
  public_call *c = ctx;
  tlm_run(c->rt, &c->p->op, c->p->in, c->p->n_in, &c->p->out, 1);
}

typedef struct kernel_call {
  tlm_runtime *rt;
  const tlm_kernel *k;
  const tlm_task *task;
  const tlm_conv_args *args;
} kernel_call;
static void call_kernel(void *ctx) {
  kernel_call *c = ctx;
  char err[256];
  tlm_engine_exec(c->rt, c->k, c->task, c->args, err, sizeof err);
}

/* --public: the problem through tlm_run, as an application calls it (the
 * weights declared constant with --const-w), checked and timed; the
 * compile is what the runtime's counters say the first call cost */
static int run_public(tlm_runtime *rt, tlm_conv_problem *p, const tlm_task *task, const run_opts *o,
                      run_result *res) {
  if (o->const_w && tlm_constant_add(rt, p->in[1].data, tlm_tensor_span_bytes(&p->in[1])) != TLM_OK) {
    fprintf(stderr, "tlm run: tlm_constant_add: %s\n", tlm_last_error(rt));
    return 2;
  }
  tlm_stats s0, s1;
  tlm_get_stats(rt, &s0);
  double t0 = tlm_now_ns();
  tlm_status st = tlm_run(rt, &p->op, p->in, p->n_in, &p->out, 1);
  res->first_ms = (tlm_now_ns() - t0) * 1e-6;
  /* TLM_ASYNC=1: the first call may have run a stand-in kernel; check
   * and time the shape's own one, once its background build is done */
  if (st == TLM_OK) st = tlm_wait_background(rt);
  if (st == TLM_OK) st = tlm_run(rt, &p->op, p->in, p->n_in, &p->out, 1);
  tlm_get_stats(rt, &s1);
  if (st != TLM_OK) {
    fprintf(stderr, "tlm run: tlm_run: %s\n", tlm_last_error(rt));
    if (o->const_w) tlm_constant_remove(rt, p->in[1].data); /* the problem's memory goes next */
    return 2;
  }
  res->compile_ms = s1.compile_ms - s0.compile_ms;
  conv_path(rt, task, p, o->const_w, res->path, sizeof res->path);
  check_output(task, p, o, res);
  public_call pc = {rt, p};
  time_calls(call_public, &pc, tlm_task_flops(task), o, res);
  tlm_task_str(task, res->problem, sizeof res->problem);
  snprintf(res->schedule, sizeof res->schedule, "(tlm_run's own: --public)");
  if (o->const_w) tlm_constant_remove(rt, p->in[1].data);
  res->ok = !o->check || (res->max_err >= 0 && res->max_err <= res->tol);
  return res->ok ? 0 : 1;
}

/* runs one problem; 0 ok, 1 check failed, 2 could not run */
static int run_one(tlm_runtime *rt, const tlm_conv_prb *prb, const run_opts *o, run_result *res) {
  memset(res, 0, sizeof *res);
  tlm_weight_layout wl = o->wlayout >= 0 ? (tlm_weight_layout)o->wlayout
                         : o->layout == TLM_LAYOUT_NHWC ? TLM_WEIGHTS_HWIO
                                                        : TLM_WEIGHTS_OIHW;
  tlm_conv_problem p;
  if (tlm_conv_problem_make(prb, o->layout, wl, &o->epi, 42, &p)) {
    fprintf(stderr, "tlm run: cannot allocate the problem (too large, or out of memory)\n");
    return 2;
  }
  char err[512];
  int rc = 2;
  tlm_task task;
  tlm_conv_args args;
  tlm_status st = tlm_validate_conv(&p.op, p.in, p.n_in, &p.out, 1, &task, &args, err, sizeof err);
  if (o->public_path) {
    if (st != TLM_OK) {
      fprintf(stderr, "tlm run: %s: %s\n", tlm_status_str(st), err);
    } else {
      rc = run_public(rt, &p, &task, o, res);
    }
    goto out;
  }
  tlm_space space;
  tlm_schedule sched;
  const tlm_kernel *k = NULL;
  if (tlm_run_validated_kernel(rt, st, err, &task, &space, o->sched_text, &sched, &k,
                               &res->schedule_ms))
    goto out;
  if (o->ir_path) {
    char *ir = NULL;
    FILE *f = fopen(o->ir_path, "w");
    if (!f || tlm_engine_ir(rt, &task, &sched, !getenv("TLM_RAW_IR"), &ir, err, sizeof err)) {
      fprintf(stderr, "tlm run: cannot write IR to %s\n", o->ir_path);
      if (f) fclose(f);
      goto out;
    }
    fputs(ir, f);
    fclose(f);
    free(ir);
  }
  if ((st = tlm_engine_exec(rt, k, &task, &args, err, sizeof err))) {
    fprintf(stderr, "tlm run: %s: %s\n", tlm_status_str(st), err);
    goto out;
  }
  if (o->vs_text) { /* two schedules side by side; nothing else is printed */
    rc = tlm_run_vs(rt, &task, &space, &args, &sched, k, o->vs_text, o->min_time) ? 2 : 3;
    goto out;
  }
  conv_path(rt, &task, &p, o->const_w, res->path, sizeof res->path);
  check_output(&task, &p, o, res);
  kernel_call kc = {rt, k, &task, &args};
  time_calls(call_kernel, &kc, tlm_task_flops(&task), o, res);
  res->compile_ms = k->compile_ms;
  if (o->compile_repeats > 0 &&
      tlm_run_compile_repeats(rt, &task, &sched, o->compile_repeats, NULL))
    goto out;
  tlm_task_str(&task, res->problem, sizeof res->problem);
  tlm_schedule_str(&space, &sched, res->schedule, sizeof res->schedule);
  res->ok = !o->check || (res->max_err >= 0 && res->max_err <= res->tol);
  rc = res->ok ? 0 : 1;
out:
  tlm_conv_problem_free(&p);
  return rc;
}

/* one result as a JSON object (cJSON escapes the strings); NULL when out
 * of memory */
static cJSON *json_result(const run_result *r, const char *name, int threads, int check) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON_AddStringToObject(o, "problem", r->problem);
  cJSON_AddStringToObject(o, "name", name);
  cJSON_AddNumberToObject(o, "threads", threads);
  cJSON_AddStringToObject(o, "schedule", r->schedule);
  cJSON_AddStringToObject(o, "path", r->path);
  if (r->first_ms > 0) cJSON_AddNumberToObject(o, "first_call_ms", r->first_ms);
  else cJSON_AddNumberToObject(o, "schedule_ms", r->schedule_ms);
  cJSON_AddNumberToObject(o, "compile_ms", r->compile_ms);
  cJSON_AddNumberToObject(o, "kernel_ms_median", r->med_ns * 1e-6);
  cJSON_AddNumberToObject(o, "kernel_ms_min", r->lo_ns * 1e-6);
  cJSON_AddNumberToObject(o, "kernel_ms_max", r->hi_ns * 1e-6);
  cJSON_AddNumberToObject(o, "repeats", r->reps);
  cJSON_AddNumberToObject(o, "gflops", r->gflops);
  if (check) {
    cJSON_AddNumberToObject(o, "max_rel_err", r->max_err);
    cJSON_AddNumberToObject(o, "tolerance", r->tol);
    cJSON_AddBoolToObject(o, "pass", r->ok);
  }
  return o;
}

/* writes doc to path (tlm_json_save: whole or not at all) and frees it;
 * 0, or 2 with a message */
static int save_json(cJSON *doc, const char *path) {
  int bad = !doc || tlm_json_save(doc, path);
  cJSON_Delete(doc);
  if (bad) fprintf(stderr, "tlm run: cannot write %s\n", path);
  return bad ? 2 : 0;
}

int tlm_cmd_run_conv(int argc, char **argv) {
  run_opts o;
  memset(&o, 0, sizeof o);
  o.sched_text = "auto";
  o.threads = -1;
  o.min_time = 0.3;
  o.wlayout = -1;
  const char *desc = NULL, *batch = NULL;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--check")) o.check = 1;
    else if (!strcmp(a, "--schedule") && i + 1 < argc) o.sched_text = argv[++i];
    else if (!strcmp(a, "--vs") && i + 1 < argc) o.vs_text = argv[++i];
    else if (!strcmp(a, "--public")) o.public_path = 1;
    else if (!strcmp(a, "--const-w")) o.public_path = o.const_w = 1;
    else if (!strcmp(a, "--json") && i + 1 < argc) o.json_path = argv[++i];
    else if (!strcmp(a, "--emit-ir") && i + 1 < argc) o.ir_path = argv[++i];
    else if (!strcmp(a, "--compile-repeats") && i + 1 < argc) o.compile_repeats = atoi(argv[++i]);
    else if (!strcmp(a, "--threads") && i + 1 < argc) o.threads = atoi(argv[++i]);
    else if (!strcmp(a, "--min-time") && i + 1 < argc) o.min_time = atof(argv[++i]);
    else if (!strcmp(a, "--mb") && i + 1 < argc) o.mb = atoi(argv[++i]);
    else if (!strcmp(a, "--points") && i + 1 < argc) o.points = atoi(argv[++i]);
    else if (!strcmp(a, "--batch") && i + 1 < argc) batch = argv[++i];
    else if (!strcmp(a, "--layout") && i + 1 < argc) {
      const char *l = argv[++i];
      if (!strcmp(l, "nchw")) o.layout = TLM_LAYOUT_NCHW;
      else if (!strcmp(l, "nhwc")) o.layout = TLM_LAYOUT_NHWC;
      else {
        fprintf(stderr, "tlm run: --layout takes nchw or nhwc\n");
        return 2;
      }
    } else if (!strcmp(a, "--weights") && i + 1 < argc) {
      const char *l = argv[++i];
      if (!strcmp(l, "oihw")) o.wlayout = TLM_WEIGHTS_OIHW;
      else if (!strcmp(l, "hwio")) o.wlayout = TLM_WEIGHTS_HWIO;
      else {
        fprintf(stderr, "tlm run: --weights takes oihw or hwio\n");
        return 2;
      }
    } else if (!strcmp(a, "--epilogue") && i + 1 < argc) {
      if (tlm_epilogue_parse(argv[++i], &o.epi, 1)) return 2;
    } else if (a[0] == '-' && a[1] == '-') {
      fprintf(stderr, "tlm run: unknown option '%s' for a convolution\n", a);
      return 2;
    } else if (!desc) desc = a;
    else {
      fprintf(stderr, "tlm run: unexpected argument '%s'\n", a);
      return 2;
    }
  }
  if (o.mb < 0 || o.threads < -1 || !(o.min_time >= 0)) {
    fprintf(stderr, "tlm run: --mb, --threads and --min-time must be >= 0\n");
    return 2;
  }
  if (o.public_path && (o.vs_text || o.ir_path || o.compile_repeats ||
                        strcmp(o.sched_text, "auto") != 0)) {
    fprintf(stderr, "tlm run: --public times tlm_run's own choice: no --schedule, --vs, --emit-ir or "
                    "--compile-repeats with it\n");
    return 2;
  }
  if (!desc && !batch) {
    fprintf(stderr, "tlm run: missing the convolution descriptor or --batch FILE\n");
    return 2;
  }
  tlm_runtime *rt = tlm_tool_runtime("tlm", o.threads, NULL, NULL);
  if (!rt) return 1;
  /* --json: one document, written whole at the end */
  cJSON *jdoc = NULL, *jlist = NULL;
  int rc = 0;
  char err[512], ds[300];
  if (!batch) {
    tlm_conv_prb prb;
    int pr = tlm_conv_prb_parse(desc, &prb, err, sizeof err);
    if (pr <= 0) {
      fprintf(stderr, "tlm run: bad convolution descriptor '%s': %s\n", desc,
              pr == 0 ? "no problem in it" : err);
      rc = 2;
      goto out;
    }
    if (o.mb > 0) prb.mb = o.mb;
    run_result r;
    rc = run_one(rt, &prb, &o, &r);
    if (rc == 3) { /* --vs printed its comparison */
      rc = 0;
      goto out;
    }
    if (rc == 2) goto out;
    printf("problem      %s\n", r.problem);
    printf("descriptor   %s\n", tlm_conv_prb_str(&prb, ds, sizeof ds));
    printf("threads      %d\n", rt->nthreads);
    char tgs[320];
    printf("target       %s\n", tlm_target_str(&rt->target, tgs, sizeof tgs));
    if (o.public_path) printf("path         tlm_run: %s\n", r.path);
    else if (strncmp(r.path, "matmul", 6) == 0)
      printf("path         the convolution kernel; tlm_run would run %s (--public times that)\n", r.path);
    else if (strncmp(r.path, "convolution kernel;", 19) == 0)
      printf("path         the convolution kernel, as tlm_run%s (--public --const-w times that)\n",
             r.path + 18);
    else printf("path         the convolution kernel, as tlm_run\n");
    printf("schedule     %s\n", r.schedule);
    if (o.public_path) printf("first_call_ms %.3f\n", r.first_ms);
    else printf("schedule_ms  %.3f\n", r.schedule_ms);
    printf("compile_ms   %.2f\n", r.compile_ms);
    printf("kernel_ms    %.4f (median of %d, min %.4f, max %.4f)\n", r.med_ns * 1e-6, r.reps,
           r.lo_ns * 1e-6, r.hi_ns * 1e-6);
    printf("gflops       %.1f\n", r.gflops);
    if (o.check)
      printf("max_rel_err  %.3g (tolerance %.3g) %s\n", r.max_err, r.tol, r.ok ? "PASS" : "FAIL");
    if (o.json_path) {
      int w = save_json(json_result(&r, prb.name, rt->nthreads, o.check), o.json_path);
      if (w) rc = w;
    }
    goto out;
  }
  FILE *f = fopen(batch, "r");
  if (!f) {
    fprintf(stderr, "tlm run: cannot read %s\n", batch);
    rc = 2;
    goto out;
  }
  char *line = NULL;
  size_t linecap = 0;
  int lineno = 0, total = 0, passed = 0, failed = 0;
  if (o.json_path) {
    jdoc = cJSON_CreateObject();
    if (jdoc) {
      cJSON_AddStringToObject(jdoc, "file", batch);
      cJSON_AddNumberToObject(jdoc, "threads", rt->nthreads);
      jlist = cJSON_AddArrayToObject(jdoc, "problems");
    }
  }
  while (getline(&line, &linecap, f) > 0) {
    lineno++;
    tlm_conv_prb prb;
    int pr = tlm_conv_prb_parse(line, &prb, err, sizeof err);
    if (pr == 0) continue;
    if (pr < 0) {
      fprintf(stderr, "%s:%d: %s\n", batch, lineno, err);
      rc = 2;
      continue;
    }
    if (o.mb > 0) prb.mb = o.mb;
    run_result r;
    int one = run_one(rt, &prb, &o, &r);
    total++;
    if (one == 2) {
      fprintf(stderr, "%s:%d: could not run\n", batch, lineno);
      rc = 2;
      continue;
    }
    if (one == 0) passed++;
    else failed++, rc = rc ? rc : 1;
    printf("%-4s %9.4f ms %7.1f GFLOPS  compile %6.1f ms%s  %s %s\n",
           o.check ? (r.ok ? "PASS" : "FAIL") : "ran", r.med_ns * 1e-6, r.gflops, r.compile_ms,
           o.check ? "" : "", tlm_conv_prb_str(&prb, ds, sizeof ds), prb.name);
    if (o.check && !r.ok) printf("     max_rel_err %.3g > tolerance %.3g\n", r.max_err, r.tol);
    fflush(stdout);
    if (jlist) {
      cJSON *one = json_result(&r, prb.name, rt->nthreads, o.check);
      if (one) cJSON_AddItemToArray(jlist, one);
    }
  }
  free(line);
  fclose(f);
  if (o.json_path) {
    if (jdoc) {
      cJSON_AddNumberToObject(jdoc, "count", total);
      cJSON_AddNumberToObject(jdoc, "passed", passed);
      cJSON_AddNumberToObject(jdoc, "failed", failed);
    }
    int w = save_json(jlist ? jdoc : (cJSON_Delete(jdoc), NULL), o.json_path);
    if (w) rc = w;
  }
  printf("%d problems: %d passed, %d failed%s\n", total, passed, failed,
         o.check ? "" : " (no --check)");
out:
  tlm_destroy(rt);
  return rc;
}
