/* bench_kernels.c - `tlm bench kernels`: the product's claim measured per
 * task (issue #18): TLM-1 (what tlm_run schedules: the model where one
 * serves the target and the task, else the rule), TLM-10 (the best of the
 * ten candidates TLM_TUNE=10 would measure), the rule, a search-based tuner
 * in the same space and code generator (train/search.c: the best of its
 * first 64 trials, and of all N), oneDNN (matmuls and 2-D NHWC
 * convolutions) and OpenBLAS's cblas_sgemm (matmuls without an epilogue,
 * when libopenblas.so.0 is installed), at the same ISA (ONEDNN_MAX_CPU_ISA
 * and OPENBLAS_CORETYPE follow TLM_ISA) and thread count.
 *
 * Every kernel is checked against the reference before it is timed (a
 * wrong kernel never counts as fast; the search's trials too). The
 * contenders' final times come from one interleaved run: R rounds, each
 * timing every tlm kernel for round_ms (tlm_time_side_by_side) and then
 * oneDNN for as long; a contender's time is the median of its round
 * medians. Time to kernel: schedule + compile for TLM-1 and the rule,
 * every trial's compile, check and timing for the search, primitive
 * creation for oneDNN (its first call, untimed otherwise).
 *
 * Fraction of peak: GFLOPS over the measured FMA peak of the threads used
 * (as `tlm bench peak`, at the same ISA).
 *
 * A full run is hours, so the report (--json) is its state: rewritten after
 * every task, continued by --resume when its parameters are this run's, and
 * the summary and plots are computed from its entries, the tasks of earlier
 * sessions with this one's. A task that several lines give runs once. */
#include "bench_kernels.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "lm/model.h"
#include "engine/engine.h"
#include "tools/bench_peak.h"
#include "train/measure.h"
#include "tools/openblas_peer.h"
#ifdef TLM_HAVE_LIBXSMM
#include "tools/libxsmm_peer.h"
#endif
#include "train/search.h"
#include "train/tasks.h"
#ifdef TLM_HAVE_DNNL
#include "samples/baseline_dnnl.h"
#endif

enum { C_TLM1, C_TLM10, C_RULE, C_S64, C_SN, C_DNNL, C_OBLAS, C_XSMM, C_COUNT };
static const char *const k_cname[C_COUNT] = {"tlm1",    "tlm10",  "rule",     "search64",
                                             "searchN", "onednn", "openblas", "libxsmm"};
/* the plots' titles (Search-N's carries the trial count) */
static const char *const k_title[C_COUNT] = {"TLM-1",  "TLM-10 (measured)", "rule",    "Search-64",
                                             "Search", "oneDNN",            "OpenBLAS", "LIBXSMM"};
enum { TLM10_K = 10 };

typedef struct contender {
  int ran;          /* 1 when checked and timed */
  double ns;        /* final median per call */
  double min_ns, max_ns;
  double make_ms;   /* time to a runnable kernel */
  tlm_schedule sched;
} contender;

/* ---- the search's measurements ------------------------------------------- */

typedef struct trial_ctx {
  tlm_runtime *rt;
  const tlm_task *task;
  const tlm_spec_problem *p;
  double best_ns;      /* fastest so far: a trial 3x slower is ranked, not timed */
  double ms;           /* wall time spent so far */
  int wrong, failed, trials;
  double ms_at_64;     /* wall time when trial 64 was measured */
  /* the SEARCH_TOP fastest by screening time, within the first 64 trials
   * and over all: each list goes to the final, where the fastest on
   * re-timing stands for Search-64 / Search-N (one screening time of a
   * trial is noisy; the best of 1,000 draws of noise is biased fast) */
  tlm_schedule top64[4], topn[4];
  double top64_ns[4], topn_ns[4];
  int n64, nn;
} trial_ctx;

enum { SEARCH_TOP = 4 };

static void top_add(tlm_schedule *top, double *tns, int *n, const tlm_schedule *s, double ns) {
  if (!isfinite(ns) || (*n == SEARCH_TOP && ns >= tns[SEARCH_TOP - 1])) return;
  int i = *n < SEARCH_TOP ? (*n)++ : SEARCH_TOP - 1;
  while (i > 0 && tns[i - 1] > ns) top[i] = top[i - 1], tns[i] = tns[i - 1], i--;
  top[i] = *s, tns[i] = ns;
}

typedef struct compile_job {
  tlm_runtime *rt;
  const tlm_task *task;
  const tlm_schedule *s;
  int n, from, step;
} compile_job;

static void *compile_main(void *arg) {
  compile_job *j = arg;
  char err[256];
  for (int i = j->from; i < j->n; i += j->step) {
    tlm_kernel *k;
    tlm_engine_kernel(j->rt, j->task, &j->s[i], &k, err, sizeof err);
  }
  return NULL;
}

/* compile, check, time one kernel (the first call decides whether it is
 * worth timing); INFINITY when it fails or is wrong */
static double trial_one(trial_ctx *c, const tlm_schedule *s) {
  tlm_kernel *k;
  char err[256];
  if (tlm_engine_kernel(c->rt, c->task, s, &k, err, sizeof err)) {
    c->failed++;
    return INFINITY;
  }
  double first = tlm_now_ns();
  if (tlm_engine_exec(c->rt, k, c->task, c->p->args, err, sizeof err)) {
    c->failed++;
    return INFINITY;
  }
  first = tlm_now_ns() - first;
  double e = tlm_spec_problem_check(c->p, 32, 5);
  if (!(e >= 0 && e <= tlm_spec_problem_tolerance(c->p))) {
    c->wrong++;
    return INFINITY;
  }
  if (first > 3 * c->best_ns && first > 2e5) return first;
  tlm_timing tm; /* a screening time, about 4 ms (the final times the winners again) */
  tlm_time_kernel(c->rt, k, c->task, c->p->args, 4, c->best_ns, &tm);
  return tm.median_ns;
}

/* a batch: compiled on two threads first (nothing is timed while a
 * compile runs), then checked and timed one by one */
static void trial_batch(void *ctx, const tlm_schedule *s, int n, double *ns) {
  trial_ctx *c = ctx;
  double t0 = tlm_now_ns();
  compile_job other = {c->rt, c->task, s, n, 1, 2}, mine = {c->rt, c->task, s, n, 0, 2};
  pthread_t th;
  int started = n > 1 && pthread_create(&th, NULL, compile_main, &other) == 0;
  if (!started) mine.step = 1;
  compile_main(&mine);
  if (started) pthread_join(th, NULL);
  for (int i = 0; i < n; i++) {
    ns[i] = trial_one(c, &s[i]);
    if (ns[i] < c->best_ns) c->best_ns = ns[i];
    c->trials++;
    if (c->trials <= 64) top_add(c->top64, c->top64_ns, &c->n64, &s[i], ns[i]);
    top_add(c->topn, c->topn_ns, &c->nn, &s[i], ns[i]);
    if (c->trials == 64) c->ms_at_64 = c->ms + (tlm_now_ns() - t0) * 1e-6;
  }
  c->ms += (tlm_now_ns() - t0) * 1e-6;
}

/* ---- oneDNN ------------------------------------------------------------------- */

#ifdef TLM_HAVE_DNNL
/* C = A B (+ bias, GELU) through the baseline, one oneDNN batch over the
 * last batch dim and a loop over the others; returns 0, -1 (an epilogue or
 * layout the baseline has no form for) */
static int dnnl_mm(dnnl_baseline *b, const tlm_task *task, const tlm_mm_args *a) {
  const tlm_matmul_task *m = &task->u.mm;
  if (m->has_residual || (m->act != TLM_ACT_NONE && m->act != TLM_ACT_GELU_TANH)) return -1;
  int nb = m->nbatch;
  int64_t outer = 1, inner = nb ? m->batch[nb - 1] : 1;
  for (int d = 0; d + 1 < nb; d++) outer *= m->batch[d];
  /* no batch dim: one of extent 1 with a dense stride (a zero stride
   * makes oneDNN take its reference kernel) */
  int64_t sa[3] = {nb ? a->sa[nb - 1] : a->M * a->K, a->sa[4], a->sa[5]};
  int64_t sb[3] = {nb ? a->sb[nb - 1] : a->K * a->N, a->sb[4], a->sb[5]};
  int64_t sc[3] = {nb ? a->sc[nb - 1] : a->M * a->N, a->sc[4], a->sc[5]};
  /* an axis of extent 1: any stride reads the same, oneDNN wants a dense one */
  if (a->M == 1) sa[1] = a->K, sc[1] = a->N;
  if (a->N == 1) sb[2] = 1, sc[2] = 1;
  if (a->K == 1) sa[2] = 1, sb[1] = a->N;
  for (int64_t o = 0; o < outer; o++) {
    int64_t oa = 0, ob = 0, oc = 0, r = o;
    for (int d = nb - 2; d >= 0; d--) {
      int64_t i = r % m->batch[d];
      r /= m->batch[d];
      oa += i * a->sa[d], ob += i * a->sb[d], oc += i * a->sc[d];
    }
    if (dnnl_baseline_matmul(b, inner, a->M, a->K, a->N, a->a + oa, sa, a->b + ob, sb, a->bias,
                             m->act == TLM_ACT_GELU_TANH, 0, a->c + oc, sc))
      return -1;
  }
  return 0;
}

/* a 2-D NHWC convolution with HWIO weights, bias and ReLU/ReLU6 through
 * the baseline (weights reordered once, at its first call); -1: a form it
 * has none for (3-D, dilation, batch norm, residual, another activation) */
static int dnnl_conv(dnnl_baseline *b, const tlm_task_spec *sp, const tlm_spec_problem *p) {
  const tlm_conv_prb *c = &sp->cp;
  const tlm_conv_epi *e = &sp->cepi;
  if (sp->layout != TLM_LAYOUT_NHWC || c->ndims > 4 || c->kd > 1 || c->dh || c->dw || e->bn ||
      e->residual)
    return -1;
  baseline_act act = e->act == TLM_ACT_NONE    ? BASELINE_ACT_NONE
                     : e->act == TLM_ACT_RELU  ? BASELINE_ACT_RELU
                     : e->act == TLM_ACT_RELU6 ? BASELINE_ACT_RELU6
                                               : (baseline_act)-1;
  if ((int)act < 0) return -1;
  baseline_window w = {c->mb, c->ic, c->ih, c->iw, c->oc, c->oh, c->ow, c->kh, c->kw,
                       c->sh, c->sw, c->ph, c->pw, c->g, 0, 0};
  return dnnl_baseline_conv(b, &w, p->cv.in[0].data, p->cv.in[1].data,
                            e->bias ? p->cv.in[2].data : NULL, act, 0, p->cv.out.data);
}

typedef struct dnnl_ctx {
  dnnl_baseline *b;
  const tlm_task *task;
  const tlm_mm_args *a;
  const tlm_task_spec *sp; /* convolutions */
  const tlm_spec_problem *p;
} dnnl_ctx;

static int dnnl_call(dnnl_ctx *d) {
  return d->sp->op == TLM_OP_CONV ? dnnl_conv(d->b, d->sp, d->p) : dnnl_mm(d->b, d->task, d->a);
}

static void dnnl_call_v(void *d) { dnnl_call(d); }

#endif



/* ---- OpenBLAS and LIBXSMM, timed through tlm_time_calls -------------------------- */

typedef struct lib_ctx {
  const tlm_task *task;
  const tlm_mm_args *a;
  tlm_openblas *oblas;
  void *xk; /* LIBXSMM kernel */
} lib_ctx;

static void oblas_call(void *c) {
  lib_ctx *l = c;
  tlm_openblas_matmul(l->oblas, l->task, l->a);
}

#ifdef TLM_HAVE_LIBXSMM
static void xsmm_call(void *c) {
  lib_ctx *l = c;
  tlm_libxsmm_matmul(l->xk, l->task, l->a);
}
#endif

/* ---- the report's tasks ------------------------------------------------------ */

/* What the summary and the plots take of a task. Always read back from its
 * report entry (row_read), for this session's tasks as for those a
 * resumed report kept, so the two cannot disagree. */
typedef struct task_row {
  const char *text;
  int skipped;                          /* not measured (--max-gflop, no problem) */
  double flop, bytes;                   /* bytes: operands read once, output written once */
  double ns[C_COUNT], make_ms[C_COUNT]; /* 0: did not run */
  int match;                            /* search trials to come within 2% of TLM-1, -1 never */
  int wrong;                            /* wrong kernels (not counted) */
  int budget_hit;                       /* the search stopped on --search-budget-s */
} task_row;

/* o[key] as a finite number in [lo, hi] (an integer when integral is set) */
static int num_in(const cJSON *o, const char *key, double lo, double hi, int integral, double *v) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || x->valuedouble < lo ||
      x->valuedouble > hi || (integral && x->valuedouble != floor(x->valuedouble)))
    return -1;
  *v = x->valuedouble;
  return 0;
}

/* a report entry into r (r->text points into e); -1 with a message in err
 * naming the field */
static int row_read(const cJSON *e, task_row *r, char *err, size_t cap) {
  memset(r, 0, sizeof *r);
  const cJSON *task = cJSON_GetObjectItemCaseSensitive(e, "task");
  if (!cJSON_IsObject(e) || !cJSON_IsString(task)) {
    snprintf(err, cap, "an entry without a task string");
    return -1;
  }
  r->text = task->valuestring;
  double v;
  if (num_in(e, "gflop", 0, 1e12, 0, &v)) {
    snprintf(err, cap, "task %.60s: no valid gflop", r->text);
    return -1;
  }
  r->flop = v * 1e9;
  const cJSON *sk = cJSON_GetObjectItemCaseSensitive(e, "skipped");
  if (sk) {
    if (!cJSON_IsString(sk)) {
      snprintf(err, cap, "task %.60s: skipped is not a reason string", r->text);
      return -1;
    }
    r->skipped = 1;
    return 0;
  }
  double match = 0, wrong = 0;
  const char *bad = NULL;
  if (num_in(e, "bytes", 0, 1e18, 0, &r->bytes)) bad = "bytes";
  else if (num_in(e, "search_trials_to_match_tlm1", -1, 1e9, 1, &match))
    bad = "search_trials_to_match_tlm1";
  else if (num_in(e, "wrong_kernels", 0, 1e9, 1, &wrong)) bad = "wrong_kernels";
  else if (!cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(e, "search_budget_hit")))
    bad = "search_budget_hit";
  if (bad) {
    snprintf(err, cap, "task %.60s: no valid %s", r->text, bad);
    return -1;
  }
  r->match = (int)match, r->wrong = (int)wrong;
  r->budget_hit = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "search_budget_hit"));
  for (int c = 0; c < C_COUNT; c++) {
    const cJSON *co = cJSON_GetObjectItemCaseSensitive(e, k_cname[c]);
    const cJSON *med = cJSON_GetObjectItemCaseSensitive(co, "median_ns");
    if (!cJSON_IsObject(co) || !(cJSON_IsNull(med) || cJSON_IsNumber(med))) {
      snprintf(err, cap, "task %.60s: no valid %s.median_ns (a time or null)", r->text, k_cname[c]);
      return -1;
    }
    if (cJSON_IsNull(med)) continue;
    if (num_in(co, "median_ns", 1e-3, 1e15, 0, &r->ns[c]) ||
        num_in(co, "time_to_kernel_ms", 0, 1e12, 0, &r->make_ms[c])) {
      snprintf(err, cap, "task %.60s: %s's median_ns or time_to_kernel_ms is not a valid time",
               r->text, k_cname[c]);
      return -1;
    }
  }
  return 0;
}

/* geometric mean of num / den over the tasks where both ran (times, or
 * times to kernel when make is set) */
static double geomean_ratio(const task_row *r, int n, int num, int den, int make, int *count) {
  double s = 0;
  int c = 0;
  for (int i = 0; i < n; i++) {
    double a = make ? r[i].make_ms[num] : r[i].ns[num], b = make ? r[i].make_ms[den] : r[i].ns[den];
    if (!r[i].skipped && a > 0 && b > 0) s += log(a / b), c++;
  }
  *count = c;
  return c ? exp(s / c) : NAN;
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* the summary over every measured task of the report; printed when print
 * is set. NULL out of memory. */
static cJSON *summarize(const task_row *r, int n, int trials, int print) {
  int c1, c2, c3, c4, c5, c6, c7, c8;
  double g_s = geomean_ratio(r, n, C_SN, C_TLM1, 0, &c1); /* time ratio = speed TLM-1/S */
  double g_r = geomean_ratio(r, n, C_RULE, C_TLM1, 0, &c2);
  double g_d = geomean_ratio(r, n, C_DNNL, C_TLM1, 0, &c3);
  double g_s64 = geomean_ratio(r, n, C_SN, C_S64, 0, &c4);
  double g_make = geomean_ratio(r, n, C_SN, C_TLM1, 1, &c5);
  double g_10 = geomean_ratio(r, n, C_SN, C_TLM10, 0, &c6);
  double g_o = geomean_ratio(r, n, C_OBLAS, C_TLM1, 0, &c7);
  double g_x = geomean_ratio(r, n, C_XSMM, C_TLM1, 0, &c8);
  int nmatch = 0, never = 0, wrong = 0, skipped = 0, hit = 0;
  int *mlist = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
  if (!mlist) return NULL;
  for (int t = 0; t < n; t++) {
    if (r[t].skipped) {
      skipped++;
      continue;
    }
    if (r[t].match > 0) mlist[nmatch++] = r[t].match;
    else never++;
    wrong += r[t].wrong;
    hit += r[t].budget_hit;
  }
  qsort(mlist, (size_t)nmatch, sizeof(int), cmp_int);
  int med_match = nmatch ? mlist[nmatch / 2] : -1;
  free(mlist);
  if (print) {
    printf("geomean speed: TLM-1 / Search-%d %.3f (%d tasks), TLM-10 / Search-%d %.3f, TLM-1 / rule "
           "%.3f, TLM-1 / oneDNN %.3f (%d tasks), TLM-1 / OpenBLAS %.3f (%d tasks), TLM-1 / LIBXSMM "
           "%.3f (%d tasks), Search-64 / Search-%d %.3f\n",
           trials, g_s, c1, trials, g_10, g_r, g_d, c3, g_o, c7, g_x, c8, trials, g_s64);
    printf("time to kernel: Search-%d / TLM-1 %.0fx; trials for the search to come within 2%% of "
           "TLM-1's screening time: median %d (%d tasks never)\n",
           trials, g_make, med_match, never);
    if (hit)
      printf("search budget hit on %d tasks (their Search-%d: the best of the trials measured)\n",
             hit, trials);
    if (skipped) printf("skipped (not in the summary): %d tasks\n", skipped);
    if (wrong) printf("wrong kernels (not counted): %d\n", wrong);
  }
  cJSON *sum = cJSON_CreateObject();
  if (!sum) return NULL;
  cJSON_AddNumberToObject(sum, "tasks", n - skipped);
  cJSON_AddNumberToObject(sum, "tasks_skipped", skipped);
  cJSON_AddNumberToObject(sum, "tlm1_over_searchN_speed", isfinite(g_s) ? g_s : -1);
  cJSON_AddNumberToObject(sum, "tlm10_over_searchN_speed", isfinite(g_10) ? g_10 : -1);
  cJSON_AddNumberToObject(sum, "tlm1_over_rule_speed", isfinite(g_r) ? g_r : -1);
  cJSON_AddNumberToObject(sum, "tlm1_over_openblas_speed", isfinite(g_o) ? g_o : -1);
  cJSON_AddNumberToObject(sum, "tlm1_over_libxsmm_speed", isfinite(g_x) ? g_x : -1);
  cJSON_AddNumberToObject(sum, "tlm1_over_onednn_speed", isfinite(g_d) ? g_d : -1);
  cJSON_AddNumberToObject(sum, "search64_over_searchN_speed", isfinite(g_s64) ? g_s64 : -1);
  cJSON_AddNumberToObject(sum, "searchN_over_tlm1_time_to_kernel", isfinite(g_make) ? g_make : -1);
  cJSON_AddNumberToObject(sum, "median_trials_to_match_tlm1", med_match);
  cJSON_AddNumberToObject(sum, "tasks_never_matched", never);
  cJSON_AddNumberToObject(sum, "search_budget_hit_tasks", hit);
  cJSON_AddNumberToObject(sum, "wrong_kernels", wrong);
  return sum;
}

/* ---- one task ------------------------------------------------------------------ */

/* what every task's measurement shares */
typedef struct bench_env {
  tlm_config cfg;
  int trials, rounds;
  uint64_t seed;
  double budget_s; /* the search's wall time per task (0: none) */
  double peak;     /* measured FMA GFLOPS of the threads used */
#ifdef TLM_HAVE_DNNL
  dnnl_baseline *dnnl;
#endif
  tlm_openblas *oblas;
  const char *xarch; /* LIBXSMM's code, NULL: not a contender */
} bench_env;

/* the contenders on one task, checked and timed: fills its report entry o
 * (which has the task's text, origin and GFLOP). Returns 0; 1 when its
 * problem cannot be built (o says skipped); -1 when no runtime can be
 * created (o untouched: the run stops) */
static int measure_task(const bench_env *env, const tlm_task_spec *spec, cJSON *o) {
  const int trials = env->trials, rounds = env->rounds;
  const uint64_t seed = env->seed;
  const double peak = env->peak;
  char err[512];
  int wrong = 0; /* wrong kernels: not counted */
  unsigned wrong_of = 0; /* the contenders whose kernel was wrong (1 << C_*) */
  tlm_openblas *oblas = env->oblas;
#ifdef TLM_HAVE_LIBXSMM
  const char *xarch = env->xarch;
#endif
  double start = tlm_now_ns();
  tlm_runtime *rt;
  if (tlm_create(&env->cfg, &rt)) return -1;
  tlm_spec_problem p;
  if (tlm_spec_problem_make(spec, 3, &p)) {
    tlm_destroy(rt);
    cJSON_AddStringToObject(o, "skipped", "its problem could not be built (too large, or out of memory)");
    printf("%-40.40s skipped: its problem could not be built\n", spec->text);
    return 1;
  }
#ifdef TLM_HAVE_DNNL
  /* a baseline of its own per task: the baseline knows a convolution's
   * weights by their address and reuses its reordered copy of them
   * (baseline_dnnl.h: w must not change while the baseline lives), and a
   * later task's weights may be allocated where an earlier task's were.
   * The likely cause of the 7 oneDNN outputs the Xeon full run found wrong
   * (sessions 34-36), each in a task that followed others of the same
   * weight shape; they passed when rerun, alone or in short sequences. */
  dnnl_baseline *dnnl = env->dnnl ? dnnl_baseline_create() : NULL;
#endif
  const tlm_task *task = &p.task;
  tlm_space s;
  tlm_space_init(&s, task, &rt->target);
  contender ct[C_COUNT];
  memset(ct, 0, sizeof ct);
  double flop = tlm_task_spec_flop(spec), bytes;
  { /* every operand read once, the output written once */
    const tlm_tensor *ins = p.op == TLM_OP_CONV ? p.cv.in : p.mm.in;
    int nin = p.op == TLM_OP_CONV ? p.cv.n_in : p.mm.n_in;
    const tlm_tensor *out = p.op == TLM_OP_CONV ? &p.cv.out : &p.mm.out;
    double e = 0;
    for (int i = 0; i <= nin; i++) {
      const tlm_tensor *x = i < nin ? &ins[i] : out;
      double c = 1;
      for (int d = 0; d < x->ndim; d++) c *= (double)x->shape[d];
      e += c;
    }
    bytes = p.op == TLM_OP_CONV || p.op == TLM_OP_MATMUL ? 4 * e : 0;
  }
  trial_ctx tc;
  memset(&tc, 0, sizeof tc);
  tc.rt = rt, tc.task = task, tc.p = &p, tc.best_ns = INFINITY;
  /* TLM-1 as tlm_run: the model where it covers the task, else the rule */
  double t0 = tlm_now_ns();
  int covered = rt->model && tlm_lm_covers_task(rt->model, task, &s.target);
  if (covered) tlm_lm_decode(rt->model, &s, &ct[C_TLM1].sched, NULL);
  else tlm_space_default(&s, &ct[C_TLM1].sched);
  tlm_kernel *k;
  int ok1 = tlm_engine_kernel(rt, task, &ct[C_TLM1].sched, &k, err, sizeof err) == TLM_OK;
  ct[C_TLM1].make_ms = (tlm_now_ns() - t0) * 1e-6;
  t0 = tlm_now_ns();
  tlm_space_default(&s, &ct[C_RULE].sched);
  int okr = tlm_engine_kernel(rt, task, &ct[C_RULE].sched, &k, err, sizeof err) == TLM_OK;
  /* the rule's compile is cached when TLM-1 is the rule: count TLM-1's */
  ct[C_RULE].make_ms = covered ? (tlm_now_ns() - t0) * 1e-6 : ct[C_TLM1].make_ms;
  double tlm1_screen = ok1 ? trial_one(&tc, &ct[C_TLM1].sched) : INFINITY;
  /* TLM-10 as TLM_TUNE=10 measures: TLM-1's schedule, the model's top
   * 10 where it covers the task, then neighbours of TLM-1's
   * (tlm_engine_tune_candidates); its two fastest by screening go to the
   * final beside TLM-1's */
  tlm_schedule cand10[TLM_TUNE_MAX_K], top10[2];
  double top10_ns[2] = {INFINITY, INFINITY};
  int n10 = 0, ntop10 = 0;
  t0 = tlm_now_ns();
  if (ok1) {
    n10 = tlm_engine_tune_candidates(rt, &s, &ct[C_TLM1].sched, TLM10_K,
                                     XXH3_64bits(spec->text, strlen(spec->text)), cand10, NULL);
    tc.best_ns = tlm1_screen;
    for (int i = 1; i < n10; i++) {
      double ns = trial_one(&tc, &cand10[i]);
      if (!(ns < top10_ns[1])) continue;
      int at = ns < top10_ns[0] ? 0 : 1;
      if (at == 0) top10[1] = top10[0], top10_ns[1] = top10_ns[0];
      top10[at] = cand10[i], top10_ns[at] = ns;
      if (ntop10 < 2) ntop10++;
    }
  }
  ct[C_TLM10].make_ms = ct[C_TLM1].make_ms + (tlm_now_ns() - t0) * 1e-6;
  wrong += tc.wrong;
  tc.wrong = tc.failed = 0;
  tc.best_ns = INFINITY; /* the search starts from nothing */
  tc.wrong = tc.failed = 0;
  /* the search */
  tlm_search_opts so;
  tlm_search_opts_init(&so, trials, seed ^ XXH3_64bits(spec->text, strlen(spec->text)));
  so.budget_s = env->budget_s;
  tlm_search_result sr;
  tlm_search_run(&s, &so, trial_batch, &tc, &sr);
  wrong += tc.wrong;
  ct[C_SN].make_ms = tc.ms;
  ct[C_S64].make_ms = tc.trials >= 64 ? tc.ms_at_64 : tc.ms;
  int match = -1;
  for (int i = 0; i < sr.measured && sr.curve; i++)
    if (sr.curve[i] <= 1.02 * tlm1_screen) { /* within 2%: one kernel timed twice differs by that */
      match = i + 1;
      break;
    }
  /* the final: the tlm contenders' schedules (the search's SEARCH_TOP of
   * each list), each distinct one compiled, checked again and timed side
   * by side; a contender's time is its fastest finalist's */
  enum { MAX_FIN = 5 + 2 * SEARCH_TOP };
  tlm_schedule fs[MAX_FIN];
  unsigned fmask[MAX_FIN];
  int nf = 0;
  const tlm_schedule *cand[MAX_FIN];
  int cown[MAX_FIN], nc = 0;
  if (ok1) cand[nc] = &ct[C_TLM1].sched, cown[nc++] = C_TLM1;
  if (ok1) cand[nc] = &ct[C_TLM1].sched, cown[nc++] = C_TLM10; /* its first candidate */
  for (int i = 0; i < ntop10; i++) cand[nc] = &top10[i], cown[nc++] = C_TLM10;
  if (okr) cand[nc] = &ct[C_RULE].sched, cown[nc++] = C_RULE;
  for (int i = 0; i < tc.n64; i++) cand[nc] = &tc.top64[i], cown[nc++] = C_S64;
  for (int i = 0; i < tc.nn; i++) cand[nc] = &tc.topn[i], cown[nc++] = C_SN;
  for (int i = 0; i < nc; i++) {
    int f = 0;
    while (f < nf && !(fs[f].n == cand[i]->n &&
                       !memcmp(fs[f].v, cand[i]->v, sizeof fs[f].v[0] * (size_t)fs[f].n)))
      f++;
    if (f == nf) fs[nf] = *cand[i], fmask[nf++] = 0;
    fmask[f] |= 1u << cown[i];
  }
  const tlm_kernel *fk[MAX_FIN];
  int fi[MAX_FIN], nfk = 0; /* finalist of each timed kernel */
  for (int f = 0; f < nf; f++) {
    if (tlm_engine_kernel(rt, task, &fs[f], &k, err, sizeof err)) continue;
    if (tlm_engine_exec(rt, k, task, p.args, err, sizeof err)) continue;
    double e = tlm_spec_problem_check(&p, 64, 11);
    if (!(e >= 0 && e <= tlm_spec_problem_tolerance(&p))) {
      wrong++;
      wrong_of |= fmask[f];
      continue;
    }
    fk[nfk] = k;
    fi[nfk++] = f;
  }
#ifdef TLM_HAVE_DNNL
  dnnl_ctx dc = {dnnl, task, &p.mm_args, spec, &p};
  if (dnnl && (spec->op == TLM_OP_MATMUL || spec->op == TLM_OP_CONV)) {
    double c0 = 0;
    dnnl_baseline_primitives(dnnl, &c0);
    /* its output from zero: the check then sees oneDNN's, not the last kernel's */
    const tlm_tensor *ot = spec->op == TLM_OP_CONV ? &p.cv.out : &p.mm.out;
    int64_t on = 1;
    for (int d = 0; d < ot->ndim; d++) on *= ot->shape[d];
    memset(ot->data, 0, sizeof(float) * (size_t)on);
    if (dnnl_call(&dc) == 0) {
      double c1 = 0;
      dnnl_baseline_primitives(dnnl, &c1);
      ct[C_DNNL].make_ms = c1 - c0;
      double e = tlm_spec_problem_check(&p, 64, 11);
      if (e >= 0 && e <= tlm_spec_problem_tolerance(&p)) ct[C_DNNL].ran = 1, ct[C_DNNL].min_ns = INFINITY;
      else wrong++, wrong_of |= 1u << C_DNNL;
    }
  }
#endif
  /* OpenBLAS: its first call (there is no primitive to create) from a
   * zeroed output, then the check */
  if (oblas && spec->op == TLM_OP_MATMUL) {
    const tlm_tensor *ot = &p.mm.out;
    int64_t on = 1;
    for (int d = 0; d < ot->ndim; d++) on *= ot->shape[d];
    memset(ot->data, 0, sizeof(float) * (size_t)on);
    double o0 = tlm_now_ns();
    if (tlm_openblas_matmul(oblas, task, &p.mm_args) == 0) {
      ct[C_OBLAS].make_ms = (tlm_now_ns() - o0) * 1e-6;
      double e = tlm_spec_problem_check(&p, 64, 11);
      if (e >= 0 && e <= tlm_spec_problem_tolerance(&p)) ct[C_OBLAS].ran = 1, ct[C_OBLAS].min_ns = INFINITY;
      else wrong++, wrong_of |= 1u << C_OBLAS;
    }
  }
#ifdef TLM_HAVE_LIBXSMM
  /* LIBXSMM: dispatch (its JIT) is its time to kernel, then the check */
  void *xk = NULL;
  if (xarch && spec->op == TLM_OP_MATMUL) {
    const tlm_tensor *ot = &p.mm.out;
    int64_t on = 1;
    for (int d = 0; d < ot->ndim; d++) on *= ot->shape[d];
    memset(ot->data, 0, sizeof(float) * (size_t)on);
    double x0 = tlm_now_ns();
    xk = tlm_libxsmm_kernel(task, &p.mm_args);
    if (xk) {
      ct[C_XSMM].make_ms = (tlm_now_ns() - x0) * 1e-6;
      tlm_libxsmm_matmul(xk, task, &p.mm_args);
      double e = tlm_spec_problem_check(&p, 64, 11);
      if (e >= 0 && e <= tlm_spec_problem_tolerance(&p)) ct[C_XSMM].ran = 1, ct[C_XSMM].min_ns = INFINITY;
      else wrong++, wrong_of |= 1u << C_XSMM;
    }
  }
#endif
  lib_ctx lc = {task, &p.mm_args, oblas, NULL};
#ifdef TLM_HAVE_LIBXSMM
  lc.xk = xk;
#endif
  double fmed[MAX_FIN][TLM_SIDE_ROUNDS], fmin[MAX_FIN], fmax[MAX_FIN];
  double med[C_COUNT][TLM_SIDE_ROUNDS];
  for (int i = 0; i < nfk; i++) fmin[i] = INFINITY, fmax[i] = 0;
  for (int r = 0; r < rounds; r++) {
    tlm_timing tm[MAX_FIN];
    if (nfk) tlm_time_side_by_side(rt, fk, nfk, task, p.args, 1, 4, tm);
    for (int i = 0; i < nfk; i++) {
      fmed[i][r] = tm[i].median_ns;
      if (tm[i].min_ns < fmin[i]) fmin[i] = tm[i].min_ns;
      if (tm[i].max_ns > fmax[i]) fmax[i] = tm[i].max_ns;
    }
#ifdef TLM_HAVE_DNNL
    if (ct[C_DNNL].ran) med[C_DNNL][r] = tlm_time_calls(dnnl_call_v, &dc, 4, &ct[C_DNNL].min_ns, &ct[C_DNNL].max_ns);
#endif
    if (ct[C_OBLAS].ran)
      med[C_OBLAS][r] = tlm_time_calls(oblas_call, &lc, 4, &ct[C_OBLAS].min_ns, &ct[C_OBLAS].max_ns);
#ifdef TLM_HAVE_LIBXSMM
    if (ct[C_XSMM].ran)
      med[C_XSMM][r] = tlm_time_calls(xsmm_call, &lc, 4, &ct[C_XSMM].min_ns, &ct[C_XSMM].max_ns);
#endif
  }
  for (int c = C_TLM1; c <= C_SN; c++) { /* each tlm contender: its fastest finalist */
    int best = -1;
    double best_ns = INFINITY;
    for (int i = 0; i < nfk; i++) {
      if (!(fmask[fi[i]] & (1u << c))) continue;
      double sorted[TLM_SIDE_ROUNDS];
      memcpy(sorted, fmed[i], sizeof(double) * (size_t)rounds);
      qsort(sorted, (size_t)rounds, sizeof(double), tlm_cmp_double);
      if (sorted[rounds / 2] < best_ns) best_ns = sorted[rounds / 2], best = i;
    }
    if (best < 0) continue;
    ct[c].ran = 1;
    ct[c].sched = fs[fi[best]];
    ct[c].min_ns = fmin[best], ct[c].max_ns = fmax[best];
    memcpy(med[c], fmed[best], sizeof(double) * (size_t)rounds);
  }
  cJSON_AddNumberToObject(o, "bytes", bytes);
  cJSON_AddNumberToObject(o, "search_trials", sr.measured);
  cJSON_AddBoolToObject(o, "search_budget_hit", sr.budget_hit);
  cJSON_AddNumberToObject(o, "search_wrong", tc.wrong);
  cJSON_AddNumberToObject(o, "search_failed", tc.failed); /* compile or run errors */
  cJSON_AddNumberToObject(o, "search_trials_to_match_tlm1", match);
  cJSON *curve = cJSON_CreateArray();
  for (int i = 0; i < sr.measured && sr.curve; i++)
    if (i + 1 == sr.measured || ((i + 1) & i) == 0) { /* trials 1, 2, 4, ..., and the last */
      cJSON *pt = cJSON_CreateArray();
      cJSON_AddItemToArray(pt, cJSON_CreateNumber(i + 1));
      cJSON_AddItemToArray(pt, cJSON_CreateNumber(isfinite(sr.curve[i]) ? sr.curve[i] : -1));
      cJSON_AddItemToArray(curve, pt);
    }
  cJSON_AddItemToObject(o, "search_curve_trial_ns", curve);
  printf("%-40.40s", spec->text);
  for (int c = 0; c < C_COUNT; c++) {
    cJSON *co = cJSON_CreateObject();
    if (ct[c].ran) {
      qsort(med[c], (size_t)rounds, sizeof(double), tlm_cmp_double);
      ct[c].ns = med[c][rounds / 2];
      double gf = flop / ct[c].ns;
      cJSON_AddNumberToObject(co, "median_ns", ct[c].ns);
      cJSON_AddNumberToObject(co, "min_ns", ct[c].min_ns);
      cJSON_AddNumberToObject(co, "max_ns", ct[c].max_ns);
      cJSON_AddNumberToObject(co, "gflops", gf);
      cJSON_AddNumberToObject(co, "peak_fraction", peak > 0 ? gf / peak : 0);
      cJSON_AddNumberToObject(co, "time_to_kernel_ms", ct[c].make_ms);
      if (c != C_DNNL && c != C_OBLAS && c != C_XSMM) {
        char text[512];
        tlm_schedule_str(&s, &ct[c].sched, text, sizeof text);
        cJSON_AddStringToObject(co, "schedule", text);
      }
      printf(" %8.1f", gf);
    } else {
      cJSON_AddNullToObject(co, "median_ns");
      printf(" %8s", "-");
    }
    cJSON_AddItemToObject(o, k_cname[c], co);
  }
  printf("  %.0f / %.0f ms%s", ct[C_TLM1].make_ms, ct[C_SN].make_ms,
         covered ? "" : " (TLM-1 = rule)");
  if (sr.budget_hit) printf(" (search budget hit: %d trials)", sr.measured);
  printf("\n");
  fflush(stdout);
  cJSON_AddBoolToObject(o, "tlm1_is_rule", !covered);
  cJSON_AddNumberToObject(o, "wrong_kernels", wrong);
  /* whose: a wrong kernel of tlm's is a bug to fix, a peer's is reported */
  cJSON *wj = cJSON_AddArrayToObject(o, "wrong_contenders");
  for (int c = 0; c < C_COUNT; c++)
    if (wrong_of >> c & 1u) {
      cJSON_AddItemToArray(wj, cJSON_CreateString(k_cname[c]));
      fprintf(stderr, "tlm bench kernels: %s: %s's output failed the reference check (not counted)\n",
              spec->text, k_cname[c]);
    }
  /* the whole task, contenders, checks and all: what a run of the rest costs */
  cJSON_AddNumberToObject(o, "wall_s", (tlm_now_ns() - start) * 1e-9);
  free(sr.curve);
#ifdef TLM_HAVE_DNNL
  if (dnnl) dnnl_baseline_destroy(dnnl);
#endif
  tlm_spec_problem_free(&p);
  tlm_destroy(rt);
  return 0;
}

/* ---- plots ----------------------------------------------------------------------- */

/* --plot: the data, a gnuplot script, and gnuplot run on it when present:
 * speed per task relative to Search-N, kernel speed against time to
 * kernel, and a roofline (GFLOPS against arithmetic intensity: FLOP per
 * byte of the operands read once and the output written once, under the
 * measured FMA peak and read bandwidth) */
static int write_plots(const char *dir, const task_row *r, int n, int trials, double peak,
                       double bw_gbs) {
  char path[1024];
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) return -1; /* the folder, not its parents */
  snprintf(path, sizeof path, "%s/kernels_speed.dat", dir);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f, "# task  speed relative to Search-%d:", trials);
  for (int c = 0; c < C_COUNT; c++)
    if (c != C_SN) fprintf(f, " %s", k_cname[c]);
  fprintf(f, " (0: did not run)\n");
  for (int t = 0, row = 0; t < n; t++) {
    if (r[t].skipped) continue;
    double ref = r[t].ns[C_SN];
    fprintf(f, "%d \"%.24s\"", ++row, r[t].text);
    for (int c = 0; c < C_COUNT; c++) {
      if (c == C_SN) continue;
      fprintf(f, " %.4f", ref > 0 && r[t].ns[c] > 0 ? ref / r[t].ns[c] : 0);
    }
    fprintf(f, "\n");
  }
  fclose(f);
  snprintf(path, sizeof path, "%s/kernels_tradeoff.dat", dir);
  if (!(f = fopen(path, "w"))) return -1;
  fprintf(f, "# one block per contender (in the order of the JSON's): time_to_kernel_ms gflops\n");
  for (int c = 0; c < C_COUNT; c++) {
    fprintf(f, "# %s\n", k_cname[c]);
    for (int t = 0; t < n; t++)
      if (r[t].ns[c] > 0 && r[t].make_ms[c] > 0)
        fprintf(f, "%.4f %.3f\n", r[t].make_ms[c], r[t].flop / r[t].ns[c]);
    fprintf(f, "\n\n");
  }
  fclose(f);
  snprintf(path, sizeof path, "%s/kernels_roofline.dat", dir);
  if (!(f = fopen(path, "w"))) return -1;
  fprintf(f, "# one block per contender: flop_per_byte gflops\n");
  for (int c = 0; c < C_COUNT; c++) {
    fprintf(f, "# %s\n", k_cname[c]);
    for (int t = 0; t < n; t++)
      if (r[t].ns[c] > 0 && r[t].bytes > 0)
        fprintf(f, "%.4f %.3f\n", r[t].flop / r[t].bytes, r[t].flop / r[t].ns[c]);
    fprintf(f, "\n\n");
  }
  fclose(f);
  snprintf(path, sizeof path, "%s/kernels.gp", dir);
  if (!(f = fopen(path, "w"))) return -1;
  char title[C_COUNT][48];
  for (int c = 0; c < C_COUNT; c++)
    if (c == C_SN) snprintf(title[c], sizeof title[c], "Search-%d", trials);
    else snprintf(title[c], sizeof title[c], "%s", k_title[c]);
  fprintf(f,
          "# gnuplot script written by tlm bench kernels: gnuplot kernels.gp (in this folder)\n"
          "peak = %.3f  # measured FMA GFLOPS of the threads used\n"
          "bw = %.3f    # measured read GB/s\n"
          "do for [fmt in \"png svg\"] {\n"
          "  if (fmt eq \"png\") { set terminal pngcairo size 1200,600 } else { set terminal svg size 1200,600 }\n"
          "  set output \"kernels_speed.\".fmt\n"
          "  set title \"Speed per task relative to Search-%d (1 = equal, higher is faster)\"\n"
          "  set style data histograms; set style histogram clustered gap 1; set style fill solid 0.8\n"
          "  set xtics rotate by -45 font \",8\"; set yrange [0:*]; set grid ytics; unset logscale\n"
          "  plot \"kernels_speed.dat\"",
          peak, bw_gbs, trials);
  for (int c = 0, col = 3, first = 1; c < C_COUNT; c++) {
    if (c == C_SN) continue;
    fprintf(f, "%s using %d%s title \"%s\"", first ? "" : ", ''", col, first ? ":xtic(2)" : "",
            title[c]);
    first = 0, col++;
  }
  fprintf(f,
          "\n"
          "  set output \"kernels_tradeoff.\".fmt\n"
          "  set title \"Kernel speed against time to a runnable kernel\"\n"
          "  set style data points; set logscale x; set xlabel \"time to kernel (ms)\"; "
          "set ylabel \"GFLOPS\"; set xtics auto norotate font \",10\"; set yrange [0:*]\n"
          "  plot \"kernels_tradeoff.dat\"");
  for (int c = 0; c < C_COUNT; c++)
    fprintf(f, "%s index %d title \"%s%s\" pt %d", c ? ", ''" : "", c, title[c],
            c == C_DNNL ? " (primitive creation)" : c == C_OBLAS ? " (first call)" : c == C_XSMM ? " (dispatch)" : "", 5 + 2 * c);
  fprintf(f,
          "\n"
          "  set output \"kernels_roofline.\".fmt\n"
          "  set title sprintf(\"Roofline: FMA peak %%.0f GFLOPS, read bandwidth %%.1f GB/s\", peak, bw)\n"
          "  set logscale xy; set xlabel \"arithmetic intensity (FLOP per byte moved once)\"; "
          "set yrange [*:*]; set xrange [0.05:5000]\n"
          "  plot (x * bw < peak ? x * bw : peak) title \"roof\" lw 2 lc rgb \"black\"");
  for (int c = 0; c < C_COUNT; c++)
    fprintf(f, ", \"kernels_roofline.dat\" index %d title \"%s\" pt %d", c, title[c], 5 + 2 * c);
  fprintf(f,
          "\n"
          "  unset logscale; unset xlabel; unset ylabel\n"
          "}\n");
  fclose(f);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "command -v gnuplot >/dev/null 2>&1 && cd '%s' && gnuplot kernels.gp",
           dir);
  if (strchr(dir, '\'') || system(cmd) != 0)
    fprintf(stderr, "tlm bench kernels: plots not drawn (gnuplot missing?); data in %s\n", dir);
  return 0;
}

/* ---- the run's tasks and its report ------------------------------------------- */

enum { MAX_FILES = 64 };

/* a task of the input files, run once however many lines give it */
typedef struct bench_task {
  tlm_task_spec spec;
  int count;      /* lines of the files that give it */
  uint64_t files; /* bit f: files[f] gives it */
} bench_task;

/* the tasks of the files in order of first appearance (quick: one per
 * file), each once; *out malloc'd. Returns the count, or -1 with a message. */
static int collect_tasks(const char *const *files, int nfiles, int quick, bench_task **out,
                         char *err, int errcap) {
  bench_task *bt = NULL;
  int n = 0;
  *out = NULL;
  for (int f = 0; f < nfiles; f++) {
    tlm_task_spec *fs;
    int *cnt;
    int nf = tlm_tasks_from_file_counted(files[f], &fs, &cnt, err, errcap);
    if (nf < 0) {
      free(bt);
      return -1;
    }
    int keep[1] = {0}, nk = 0;
    if (quick) { /* one task per file: the middle one of those of at most 0.25 GFLOP */
      int small[4096], ns = 0;
      for (int i = 0; i < nf && ns < 4096; i++)
        if (tlm_task_spec_flop(&fs[i]) <= 2.5e8) small[ns++] = i;
      if (ns > 0) keep[nk++] = small[ns / 2];
    }
    int add = quick ? nk : nf;
    bench_task *nb = add ? realloc(bt, sizeof *bt * (size_t)(n + add)) : bt;
    if (add && !nb) {
      free(fs);
      free(cnt);
      free(bt);
      snprintf(err, (size_t)errcap, "out of memory");
      return -1;
    }
    bt = nb;
    for (int i = 0; i < add; i++) {
      int j = quick ? keep[i] : i, k = 0;
      while (k < n && strcmp(bt[k].spec.text, fs[j].text)) k++;
      if (k == n) bt[n].spec = fs[j], bt[n].count = 0, bt[n].files = 0, n++;
      bt[k].count += cnt[j];
      bt[k].files |= 1ull << f;
    }
    free(fs);
    free(cnt);
  }
  *out = bt;
  return n;
}

static const char *base_name(const char *path) {
  const char *b = strrchr(path, '/');
  return b ? b + 1 : path;
}

/* an entry's origin: how many lines of the files give the task, and which
 * files (replacing what a resumed entry had: the files are the same, the
 * count is this run's) */
static void entry_origin(cJSON *o, const bench_task *b, const char *const *files, int nfiles) {
  cJSON_DeleteItemFromObjectCaseSensitive(o, "count");
  cJSON_DeleteItemFromObjectCaseSensitive(o, "files");
  cJSON_AddNumberToObject(o, "count", b->count);
  cJSON *fl = cJSON_AddArrayToObject(o, "files");
  for (int f = 0; f < nfiles; f++)
    if (b->files >> f & 1) cJSON_AddItemToArray(fl, cJSON_CreateString(base_name(files[f])));
}

/* a new entry: the task, its origin and size */
static cJSON *entry_new(const bench_task *b, const char *const *files, int nfiles) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON_AddStringToObject(o, "task", b->spec.text);
  cJSON_AddStringToObject(o, "family", b->spec.family);
  entry_origin(o, b, files, nfiles);
  cJSON_AddNumberToObject(o, "gflop", tlm_task_spec_flop(&b->spec) * 1e-9);
  return o;
}

/* the report of a run in the making: rewritten (whole, through a
 * temporary and a rename) after every task, so a run stopped at any point
 * leaves the tasks it finished and `--resume` goes on from there */
typedef struct report {
  cJSON *params;   /* what a resumed report must have been run with */
  cJSON *sessions; /* one object per session (a resumed report's first) */
  cJSON *session;  /* this one's, in sessions */
  cJSON **entry;   /* per task of the files; NULL: not run yet */
  int n, trials;
  double peak, bw;
} report;

/* The report of the tasks done so far, in the files' order, with the
 * summary over all of them (printed when print is set); *rows (when
 * non-NULL) malloc'd, *nrows of them, pointing into the entries. NULL out
 * of memory, or (a message in err) an entry that does not read back. */
static cJSON *report_build(const report *rp, int print, task_row **rows, int *nrows, char *err,
                           size_t cap) {
  task_row *r = calloc((size_t)(rp->n > 0 ? rp->n : 1), sizeof *r);
  if (!r) {
    snprintf(err, cap, "out of memory");
    return NULL;
  }
  int nr = 0;
  for (int t = 0; t < rp->n; t++)
    if (rp->entry[t] && row_read(rp->entry[t], &r[nr++], err, cap)) {
      free(r);
      return NULL;
    }
  cJSON *sum = summarize(r, nr, rp->trials, print);
  cJSON *root = cJSON_Duplicate(rp->params, 1), *jt = NULL;
  if (root) {
    cJSON_AddNumberToObject(root, "peak_gflops", rp->peak);
    if (rp->bw > 0) cJSON_AddNumberToObject(root, "read_gbs", rp->bw);
    cJSON_AddItemReferenceToObject(root, "sessions", rp->sessions);
    cJSON_AddNumberToObject(root, "tasks_in_files", rp->n);
    cJSON_AddNumberToObject(root, "tasks_done", nr);
    cJSON_AddBoolToObject(root, "complete", nr == rp->n);
    jt = cJSON_AddArrayToObject(root, "tasks");
  }
  if (!sum || !jt) {
    cJSON_Delete(sum);
    cJSON_Delete(root);
    free(r);
    snprintf(err, cap, "out of memory");
    return NULL;
  }
  cJSON_AddItemToObject(root, "summary", sum);
  cJSON_DetachItemViaPointer(root, jt); /* the tasks last: the summary reads first */
  cJSON_AddItemToObject(root, "tasks", jt);
  for (int t = 0; t < rp->n; t++)
    if (rp->entry[t]) cJSON_AddItemReferenceToArray(jt, rp->entry[t]);
  if (rows) *rows = r, *nrows = nr;
  else free(r);
  return root;
}

static int report_save(const report *rp, const char *path) {
  char err[256];
  cJSON *root = report_build(rp, 0, NULL, NULL, err, sizeof err);
  int rc = root ? tlm_json_save(root, path) : -1;
  cJSON_Delete(root);
  return rc;
}

/* path's JSON; NULL with err empty when there is no such file, NULL with a
 * message when it cannot be read or is not a JSON object */
static cJSON *report_load(const char *path, char *err, size_t cap) {
  err[0] = 0;
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (errno != ENOENT) snprintf(err, cap, "cannot open it (%s)", strerror(errno));
    return NULL;
  }
  char *text = NULL;
  size_t len = 0, got;
  for (;;) { /* to its end: a pipe or a file that grows reads the same */
    char *nt = realloc(text, len + 65536);
    if (!nt) {
      snprintf(err, cap, "out of memory");
      break;
    }
    text = nt;
    got = fread(text + len, 1, 65536, f);
    len += got;
    if (got < 65536 || len > ((size_t)1 << 30)) break;
  }
  if (!err[0] && ferror(f)) snprintf(err, cap, "cannot read it (%s)", strerror(errno));
  else if (!err[0] && len > ((size_t)1 << 30)) snprintf(err, cap, "over 1 GiB: not a report");
  fclose(f);
  if (err[0]) {
    free(text);
    return NULL;
  }
  cJSON *root = len ? cJSON_ParseWithLength(text, len) : NULL;
  if (!len) {
    snprintf(err, cap, "empty");
  } else if (!root) {
    const char *at = cJSON_GetErrorPtr();
    long off = at && at >= text && at <= text + len ? (long)(at - text) : -1;
    snprintf(err, cap, "not valid JSON (at byte %ld of %zu: truncated or edited?)", off, len);
  } else if (!cJSON_IsObject(root)) {
    snprintf(err, cap, "not a JSON object");
    cJSON_Delete(root);
    root = NULL;
  }
  free(text);
  return root;
}

/* a resumed report's parameters against this run's; -1 with a message
 * naming the first that differs */
static int params_match(const cJSON *old, const cJSON *params, char *err, size_t cap) {
  for (const cJSON *p = params->child; p; p = p->next) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(old, p->string);
    if (!o) {
      snprintf(err, cap, "it has no %s (not a report of this tool's, or of an older version)",
               p->string);
      return -1;
    }
    if (cJSON_Compare(o, p, 1)) continue;
    char *a = cJSON_PrintUnformatted(o), *b = cJSON_PrintUnformatted(p);
    snprintf(err, cap, "it was run with %s %.300s, this run has %.300s", p->string,
             a ? a : "?", b ? b : "?");
    free(a);
    free(b);
    return -1;
  }
  return 0;
}

/* a resumed report's tasks into rp->entry (by task text), its sessions
 * into rp->sessions; -1 with a message on anything that does not fit */
static int report_resume(report *rp, cJSON *old, const bench_task *bt, char *err, size_t cap) {
  cJSON *tasks = cJSON_GetObjectItemCaseSensitive(old, "tasks");
  cJSON *sessions = cJSON_GetObjectItemCaseSensitive(old, "sessions");
  if (!cJSON_IsArray(tasks)) {
    snprintf(err, cap, "it has no tasks array");
    return -1;
  }
  if (!cJSON_IsArray(sessions)) {
    snprintf(err, cap, "it has no sessions array");
    return -1;
  }
  for (const cJSON *s = sessions->child; s; s = s->next)
    if (!cJSON_IsObject(s)) {
      snprintf(err, cap, "sessions: not an array of objects");
      return -1;
    }
  int i = 0;
  for (cJSON *e = tasks->child; e; e = e->next, i++) {
    task_row r;
    char why[400];
    int k = 0;
    if (row_read(e, &r, why, sizeof why)) {
      snprintf(err, cap, "tasks[%d]: %s", i, why);
      goto bad;
    }
    while (k < rp->n && strcmp(bt[k].spec.text, r.text)) k++;
    if (k == rp->n) {
      snprintf(err, cap, "tasks[%d] (%.60s) is not a task of these files", i, r.text);
      goto bad;
    }
    if (rp->entry[k]) {
      snprintf(err, cap, "tasks[%d] (%.60s) is there twice", i, r.text);
      goto bad;
    }
    double flop = tlm_task_spec_flop(&bt[k].spec);
    if (fabs(r.flop - flop) > 1e-6 * flop) {
      snprintf(err, cap, "tasks[%d] (%.60s): gflop %g, the task has %g", i, r.text, r.flop * 1e-9,
               flop * 1e-9);
      goto bad;
    }
    rp->entry[k] = e; /* still old's: detached once all are known good */
  }
  for (int k = 0; k < rp->n; k++)
    if (rp->entry[k]) cJSON_DetachItemViaPointer(tasks, rp->entry[k]);
  cJSON_DetachItemViaPointer(old, sessions);
  cJSON_Delete(rp->sessions);
  rp->sessions = sessions;
  return 0;
bad: /* none taken: old (deleted by the caller) owns them all */
  memset(rp->entry, 0, sizeof *rp->entry * (size_t)rp->n);
  return -1;
}

static void usage(void) {
  fprintf(stderr,
          "usage: tlm bench kernels [--quick] [--threads T] [--trials N] [--rounds R]\n"
          "                         [--max-tasks N] [--max-gflop G] [--search-budget-s S]\n"
          "                         [--seed S] [--json F [--resume]] [--plot DIR] [--list] FILE...\n"
          "  Per task of benchdnn matmul or convolution files: TLM-1, TLM-10 (the\n"
          "  best of the 10 candidates TLM_TUNE=10 measures), the rule, the search\n"
          "  (best of its first 64 trials and of N, default 1000), oneDNN and OpenBLAS\n"
          "  and LIBXSMM (matmuls without an epilogue; when installed, e.g. by\n"
          "  scripts/deps.sh --bench), each checked against the reference, then timed side by side\n"
          "  in R rounds (default 7): median time, GFLOPS, fraction of the measured\n"
          "  FMA peak, time to a runnable kernel. --quick: 1 task per file (of at\n"
          "  most 0.25 GFLOP), the same search. Threads default 1 (the other core\n"
          "  compiles the search's trials). A task that several lines give (in one\n"
          "  file or several) runs once; its entry counts them.\n"
          "  --max-tasks N: measure at most N tasks in this run. --max-gflop G: skip\n"
          "  tasks above G GFLOP a call (in the report as skipped, not in the summary).\n"
          "  --search-budget-s S: the search starts no new trials after S seconds of\n"
          "  a task (Search-N is then the best of those measured). Defaults: none.\n"
          "  --json F: the report, rewritten after every task; --resume: F's tasks are\n"
          "  kept and the rest run, when F was run with the same parameters (else exit 2).\n"
          "  --list: the tasks, their GFLOP and origin; nothing measured.\n"
          "  --plot DIR (made if missing): data files and a gnuplot\n"
          "  script there (speed per task relative to the search; speed against time\n"
          "  to kernel; a roofline under the measured FMA peak and read bandwidth),\n"
          "  drawn as PNG and SVG when gnuplot is installed.\n");
}

/* a number option's value: all of it a finite number in [lo, hi] */
static int arg_num(const char *s, double lo, double hi, double *v) {
  char *end;
  errno = 0;
  double x = strtod(s, &end);
  if (end == s || *end || errno || !isfinite(x) || x < lo || x > hi) return -1;
  *v = x;
  return 0;
}

int tlm_cmd_bench_kernels(int argc, char **argv, char **exec_argv) {
  int quick = 0, threads = 1, trials = 1000, rounds = 7, max_tasks = 1 << 30, resume = 0, list = 0;
  double max_gflop = 0, budget_s = 0; /* 0: none */
  uint64_t seed = 1;
  const char *json = NULL, *plot = NULL;
  const char *files[MAX_FILES];
  int nfiles = 0;
  const char *bad = NULL; /* what is wrong with the command line */
  for (int i = 0; i < argc && !bad; i++) {
    const char *a = argv[i];
    int more = i + 1 < argc;
    if (!strcmp(a, "--quick")) quick = 1;
    else if (!strcmp(a, "--resume")) resume = 1;
    else if (!strcmp(a, "--list")) list = 1;
    else if (!strcmp(a, "--plot") && more) plot = argv[++i];
    else if (!strcmp(a, "--threads") && more) threads = atoi(argv[++i]);
    else if (!strcmp(a, "--trials") && more) trials = atoi(argv[++i]);
    else if (!strcmp(a, "--rounds") && more) rounds = atoi(argv[++i]);
    else if (!strcmp(a, "--max-tasks") && more) max_tasks = atoi(argv[++i]);
    else if (!strcmp(a, "--max-gflop") && more) {
      if (arg_num(argv[++i], 1e-9, 1e12, &max_gflop)) bad = "--max-gflop: not a positive number";
    } else if (!strcmp(a, "--search-budget-s") && more) {
      if (arg_num(argv[++i], 1e-3, 1e9, &budget_s))
        bad = "--search-budget-s: not a number of seconds (>= 0.001)";
    } else if (!strcmp(a, "--seed") && more) seed = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(a, "--json") && more) json = argv[++i];
    else if (a[0] == '-') {
      usage();
      return !strcmp(a, "--help") ? 0 : 2;
    } else if (nfiles < MAX_FILES) files[nfiles++] = a;
    else bad = "more than 64 files";
  }
  if (!bad && resume && !json) bad = "--resume needs --json F";
  if (bad || threads < 1 || threads > 256 || trials < 1 || trials > 100000 || rounds < 1 ||
      rounds > TLM_SIDE_ROUNDS || max_tasks < 1 || nfiles == 0) {
    if (bad) fprintf(stderr, "tlm bench kernels: %s\n", bad);
    usage();
    return 2;
  }
  /* the tasks: every one of each file, or (quick) one per file */
  char err[1024];
  bench_task *bt;
  int n = collect_tasks(files, nfiles, quick, &bt, err, sizeof err);
  if (n < 0) {
    fprintf(stderr, "tlm bench kernels: %s\n", err);
    return 1;
  }
  if (n == 0) {
    fprintf(stderr, "tlm bench kernels: no tasks\n");
    free(bt);
    return 1;
  }
  if (list) {
    double total = 0;
    int lines = 0, skip = 0;
    for (int t = 0; t < n; t++) {
      double gf = tlm_task_spec_flop(&bt[t].spec) * 1e-9;
      int sk = max_gflop > 0 && gf > max_gflop;
      printf("%-48s %10.4f GFLOP  x%-3d", bt[t].spec.text, gf, bt[t].count);
      for (int f = 0; f < nfiles; f++)
        if (bt[t].files >> f & 1) printf(" %s", base_name(files[f]));
      printf("%s\n", sk ? "  (skipped: --max-gflop)" : "");
      if (sk) skip++;
      else total += gf;
      lines += bt[t].count;
    }
    printf("%d tasks from %d lines; %d above --max-gflop; %.1f GFLOP a call over the rest\n", n,
           lines, skip, total);
    free(bt);
    return 0;
  }
  if (json && !resume && access(json, F_OK) == 0)
    fprintf(stderr, "tlm bench kernels: %s exists: overwritten (--resume continues it)\n", json);
#ifdef TLM_HAVE_DNNL
  /* oneDNN at tlm's ISA and thread count (may re-run this command) */
  dnnl_baseline_pin_threads(exec_argv, threads);
  dnnl_baseline *dnnl = dnnl_baseline_create();
#else
  (void)exec_argv;
#endif
  bench_env env;
  memset(&env, 0, sizeof env);
  tlm_config_init(&env.cfg);
  env.cfg.cache_dir = "none"; /* every compile measured, none reused */
  env.cfg.async_compile = 0; /* every kernel its own, built before the call returns */
  env.cfg.num_threads = threads;
  env.trials = trials, env.rounds = rounds, env.seed = seed, env.budget_s = budget_s;
#ifdef TLM_HAVE_DNNL
  env.dnnl = dnnl;
#endif
  tlm_runtime *rt0;
  if (tlm_create(&env.cfg, &rt0)) {
    fprintf(stderr, "tlm bench kernels: %s\n", tlm_last_error(NULL));
    free(bt);
    return 1;
  }
  char tdesc[400];
  tlm_describe_target(rt0, tdesc, sizeof tdesc);
  int isa = rt0->target.isa;
  tlm_destroy(rt0);
  printf("target: %s\n", tdesc);
  char oerr[256];
  tlm_openblas *oblas = tlm_openblas_open(threads, isa, oerr, sizeof oerr);
  if (oblas) printf("OpenBLAS: %s kernels (cblas_sgemm, matmuls without an epilogue)\n",
                    tlm_openblas_core(oblas));
  else printf("%s: no OpenBLAS contender\n", oerr);
  env.oblas = oblas;
#ifdef TLM_HAVE_LIBXSMM
  /* single-threaded small-matrix kernels: a contender at one thread only */
  const char *xarch = threads == 1 ? tlm_libxsmm_init(isa) : NULL;
  if (xarch) printf("LIBXSMM: %s code (matmuls within its limits, no epilogue)\n", xarch);
  else printf("LIBXSMM: not a contender at %d threads\n", threads);
#else
  const char *xarch = NULL;
  printf("LIBXSMM: not built in (libxsmm-dev missing at build time)\n");
#endif
  env.xarch = xarch;
  /* the parameters a resumed report must share: the machine and the
   * contenders, the measurement, the tasks (the input files, resolved) */
  report rp;
  memset(&rp, 0, sizeof rp);
  rp.n = n, rp.trials = trials;
  rp.params = cJSON_CreateObject();
  rp.sessions = cJSON_CreateArray();
  rp.entry = calloc((size_t)n, sizeof *rp.entry);
  int rc = 0;
  if (!rp.params || !rp.sessions || !rp.entry) {
    fprintf(stderr, "tlm bench kernels: out of memory\n");
    rc = 1;
    goto out;
  }
  cJSON_AddStringToObject(rp.params, "target", tdesc);
  cJSON_AddStringToObject(rp.params, "tlm_isa", tlm_isa_name(isa));
#ifdef TLM_HAVE_DNNL
  cJSON_AddStringToObject(rp.params, "onednn_isa", dnnl ? dnnl_baseline_isa() : "unavailable");
#else
  cJSON_AddStringToObject(rp.params, "onednn_isa", "not built in");
#endif
  cJSON_AddNumberToObject(rp.params, "threads", threads);
  cJSON_AddNumberToObject(rp.params, "search_trials", trials);
  cJSON_AddNumberToObject(rp.params, "rounds", rounds);
  cJSON_AddBoolToObject(rp.params, "quick", quick);
  char seedtext[24]; /* a string: a number would round above 2^53 */
  snprintf(seedtext, sizeof seedtext, "%llu", (unsigned long long)seed);
  cJSON_AddStringToObject(rp.params, "seed", seedtext);
  cJSON_AddNumberToObject(rp.params, "max_gflop", max_gflop);
  cJSON_AddNumberToObject(rp.params, "search_budget_s", budget_s);
  cJSON_AddStringToObject(rp.params, "openblas_core", oblas ? tlm_openblas_core(oblas) : "unavailable");
  cJSON_AddStringToObject(rp.params, "libxsmm_arch", xarch ? xarch : "unavailable");
  cJSON *pf = cJSON_AddArrayToObject(rp.params, "files");
  for (int f = 0; f < nfiles; f++) {
    char *abs = realpath(files[f], NULL);
    cJSON_AddItemToArray(pf, cJSON_CreateString(abs ? abs : files[f]));
    free(abs);
  }
  int kept = 0;
  if (resume) {
    cJSON *old = report_load(json, err, sizeof err);
    if (old && (params_match(old, rp.params, err, sizeof err) ||
                report_resume(&rp, old, bt, err, sizeof err)))
      cJSON_Delete(old), old = NULL;
    if (!old && err[0]) {
      fprintf(stderr, "tlm bench kernels: --resume: %s: %s; not resumed (remove it, or run with "
              "its parameters)\n", json, err);
      rc = 2;
      goto out;
    }
    if (old) {
      for (int t = 0; t < n; t++)
        if (rp.entry[t]) entry_origin(rp.entry[t], &bt[t], files, nfiles), kept++;
      printf("resumed %s: %d of %d tasks done\n", json, kept, n);
    } else {
      printf("%s: not there yet, a new report\n", json);
    }
    cJSON_Delete(old);
  }
  double peak = tlm_peak_fma_gflops(isa, threads, 1.0);
  double bw = plot ? tlm_peak_read_gbs(isa, threads) : 0;
  env.peak = rp.peak = peak, rp.bw = bw;
  rp.session = cJSON_CreateObject();
  if (!rp.session || !cJSON_AddItemToArray(rp.sessions, rp.session)) {
    cJSON_Delete(rp.session);
    fprintf(stderr, "tlm bench kernels: out of memory\n");
    rc = 1;
    goto out;
  }
  cJSON_AddNumberToObject(rp.session, "peak_gflops", peak);
  cJSON *measured = cJSON_AddNumberToObject(rp.session, "tasks_measured", 0);
#ifdef TLM_HAVE_DNNL
  printf("isa: tlm %s, oneDNN %s; threads %d; measured FMA peak %.1f GFLOPS; search: %d trials\n",
         tlm_isa_name(isa), dnnl ? dnnl_baseline_isa() : "unavailable", threads, peak, trials);
#else
  printf("isa: tlm %s, oneDNN not built in; threads %d; measured FMA peak %.1f GFLOPS; search: %d "
         "trials\n", tlm_isa_name(isa), threads, peak, trials);
#endif
  if (max_gflop > 0 || budget_s > 0)
    printf("tasks above %g GFLOP skipped; the search's budget %g s a task (0: none)\n",
           max_gflop > 0 ? max_gflop : INFINITY, budget_s);
  printf("%-40s %8s %8s %8s %8s %8s %8s %8s %8s  (GFLOPS; time to kernel ms: tlm1 / searchN)\n",
         "task", "tlm1", "tlm10", "rule", "srch64", "srchN", "onednn", "openblas", "libxsmm");
  int ran = 0;
  for (int t = 0; t < n && ran < max_tasks; t++) {
    if (rp.entry[t]) continue;
    cJSON *o = entry_new(&bt[t], files, nfiles);
    if (!o) {
      fprintf(stderr, "tlm bench kernels: out of memory\n");
      rc = 1;
      break;
    }
    double gf = tlm_task_spec_flop(&bt[t].spec) * 1e-9;
    if (max_gflop > 0 && gf > max_gflop) { /* not measured: costs nothing, counts for nothing */
      char why[96];
      snprintf(why, sizeof why, "above --max-gflop %g (%.3g GFLOP a call)", max_gflop, gf);
      cJSON_AddStringToObject(o, "skipped", why);
      printf("%-40.40s skipped: %s\n", bt[t].spec.text, why);
    } else {
      int r = measure_task(&env, &bt[t].spec, o);
      if (r < 0) {
        fprintf(stderr, "tlm bench kernels: %s: no runtime: %s\n", bt[t].spec.text,
                tlm_last_error(NULL));
        cJSON_Delete(o);
        rc = 1;
        break;
      }
      ran++;
      cJSON_SetNumberValue(measured, ran);
    }
    rp.entry[t] = o;
    if (json && report_save(&rp, json)) {
      fprintf(stderr, "tlm bench kernels: cannot write %s\n", json);
      rc = 1;
      break;
    }
  }
  /* the summary: over every task of the report, this run's and those kept */
  task_row *rows = NULL;
  int nrows = 0;
  cJSON *root = report_build(&rp, 1, &rows, &nrows, err, sizeof err);
  if (!root) {
    fprintf(stderr, "tlm bench kernels: %s\n", err);
    rc = 1;
    goto out;
  }
  if (nrows < n)
    printf("report: %d of %d tasks done%s\n", nrows, n, json ? "; --resume runs the rest" : "");
  if (plot && write_plots(plot, rows, nrows, trials, peak, bw)) {
    fprintf(stderr, "tlm bench kernels: cannot write the plot data into %s\n", plot);
    rc = 1;
  }
  if (json && tlm_json_save(root, json)) {
    fprintf(stderr, "tlm bench kernels: cannot write %s\n", json);
    rc = 1;
  }
  cJSON_Delete(root);
  free(rows);
out:
  for (int t = 0; t < n && rp.entry; t++) cJSON_Delete(rp.entry[t]);
  free(rp.entry);
  cJSON_Delete(rp.params);
  cJSON_Delete(rp.sessions);
  tlm_openblas_close(oblas);
  free(bt);
#ifdef TLM_HAVE_DNNL
  if (dnnl) dnnl_baseline_destroy(dnnl);
#endif
  return rc;
}
