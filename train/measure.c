/* measure.c - warm kernel timing shared by collect, eval and run. */
#include "measure.h"
#include "api/validate.h"
#include "runtime/clock.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>

double tlm_now_ns(void) { return tlm_clock_ns(); }

int tlm_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double tlm_time_calls(void (*call)(void *ctx), void *ctx, double ms, double *lo, double *hi) {
  double samples[200];
  int n = 0;
  double start = tlm_now_ns();
  while (n < 200 && (n < 3 || tlm_now_ns() - start < ms * 1e6)) {
    int reps = 0;
    double t0 = tlm_now_ns(), t;
    do {
      call(ctx);
      reps++;
      t = tlm_now_ns() - t0;
    } while (t < 2e4);
    samples[n++] = t / reps;
  }
  qsort(samples, (size_t)n, sizeof samples[0], tlm_cmp_double);
  if (samples[0] < *lo) *lo = samples[0];
  if (samples[n - 1] > *hi) *hi = samples[n - 1];
  return samples[n / 2];
}

void tlm_mm_batch_offsets(const tlm_task *task, const tlm_mm_args *a, int64_t o, int64_t *oa,
                          int64_t *ob, int64_t *oc) {
  const tlm_matmul_task *m = &task->u.mm;
  *oa = *ob = *oc = 0;
  for (int d = m->nbatch - 1; d >= 0; d--) {
    int64_t i = o % m->batch[d];
    o /= m->batch[d];
    *oa += i * a->sa[d], *ob += i * a->sb[d], *oc += i * a->sc[d];
  }
}

int tlm_json_save(const cJSON *root, const char *path) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) return -1;
  char *text = cJSON_Print(root);
  FILE *f = text ? fopen(tmp, "wb") : NULL;
  int ok = f && fputs(text, f) >= 0 && fputc('\n', f) >= 0;
  if (f) ok = fclose(f) == 0 && ok;
  if (ok) ok = rename(tmp, path) == 0;
  if (!ok && f) remove(tmp);
  free(text);
  return ok ? 0 : -1;
}

void tlm_json_numbers(cJSON *obj, const char *const *names, const double *v, int n) {
  for (int i = 0; i < n; i++) cJSON_AddNumberToObject(obj, names[i], v[i]);
}

void tlm_time_kernel(tlm_runtime *rt, const tlm_kernel *k, const tlm_task *task,
                     const void *args, double min_time_ms, double give_up_ns,
                     tlm_timing *out) {
  char err[256];
  double first = tlm_now_ns();
  tlm_engine_exec(rt, k, task, args, err, sizeof err);
  first = tlm_now_ns() - first;
  int batch = first >= 20000 ? 1 : (int)(20000 / (first + 1)) + 1;
  int hopeless = first > 3 * give_up_ns && first > 2e5;
  double times[200];
  int reps = 0;
  double t0 = tlm_now_ns();
  while (reps < 200) {
    double a = tlm_now_ns();
    for (int b = 0; b < batch; b++) tlm_engine_exec(rt, k, task, args, err, sizeof err);
    times[reps++] = (tlm_now_ns() - a) / batch;
    double spent_ms = (tlm_now_ns() - t0) * 1e-6;
    if ((reps >= 3 && spent_ms >= min_time_ms) || hopeless || spent_ms > 2000) break;
  }
  qsort(times, (size_t)reps, sizeof(double), tlm_cmp_double);
  out->median_ns = times[reps / 2];
  out->min_ns = times[0];
  out->max_ns = times[reps - 1];
  out->reps = reps;
}

void tlm_time_side_by_side(tlm_runtime *rt, const tlm_kernel *const *k, int n,
                           const tlm_task *task, const void *args, int rounds, double round_ms,
                           tlm_timing *out) {
  if (n > TLM_SIDE_MAX) n = TLM_SIDE_MAX;
  if (rounds > TLM_SIDE_ROUNDS) rounds = TLM_SIDE_ROUNDS;
  if (rounds < 1) rounds = 1;
  double med[TLM_SIDE_MAX][TLM_SIDE_ROUNDS];
  for (int i = 0; i < n; i++) out[i] = (tlm_timing){0, INFINITY, 0, 0};
  for (int r = 0; r < rounds; r++)
    for (int j = 0; j < n; j++) {
      int i = (j + r) % n;
      tlm_timing tm;
      tlm_time_kernel(rt, k[i], task, args, round_ms, INFINITY, &tm);
      med[i][r] = tm.median_ns;
      if (tm.min_ns < out[i].min_ns) out[i].min_ns = tm.min_ns;
      if (tm.max_ns > out[i].max_ns) out[i].max_ns = tm.max_ns;
      out[i].reps += tm.reps;
    }
  for (int i = 0; i < n; i++) {
    qsort(med[i], (size_t)rounds, sizeof(double), tlm_cmp_double);
    out[i].median_ns = rounds % 2 ? med[i][rounds / 2] : 0.5 * (med[i][rounds / 2 - 1] + med[i][rounds / 2]);
  }
}

/* The kernel `tlm run --schedule S` asks for: auto (what tlm_run does),
 * rule, random:SEED or explicit decisions. Prints its own error; returns
 * the status (TLM_ERR_INVALID_ARGUMENT for a bad S). */
tlm_status tlm_run_pick_kernel(tlm_runtime *rt, const tlm_task *task, const tlm_space *space,
                               const char *sched_text, tlm_schedule *sched, const tlm_kernel **k,
                               double *schedule_ms) {
  char err[512];
  tlm_status st;
  *schedule_ms = 0;
  if (!strcmp(sched_text, "auto") || !strcmp(sched_text, "default")) {
    const tlm_plan *plan;
    st = tlm_engine_plan(rt, task, &plan, err, sizeof err);
    if (!st) *k = plan->kernel, *sched = plan->sched, *schedule_ms = plan->schedule_ms;
  } else {
    if (!strcmp(sched_text, "rule")) {
      tlm_space_default(space, sched);
    } else if (!strncmp(sched_text, "random:", 7)) {
      uint64_t seed = strtoull(sched_text + 7, NULL, 10);
      tlm_space_sample(space, &seed, sched);
    } else if (tlm_schedule_parse(space, sched_text, sched, err, sizeof err)) {
      fprintf(stderr, "tlm run: bad --schedule: %s\n", err);
      return TLM_ERR_INVALID_ARGUMENT;
    }
    tlm_kernel *kk;
    st = tlm_engine_kernel(rt, task, sched, &kk, err, sizeof err);
    *k = kk;
  }
  if (st) fprintf(stderr, "tlm run: %s: %s\n", tlm_status_str(st), err);
  return st;
}

/* After a tlm_validate_* call that returned `validated` (message verr):
 * prints its error, or builds the task's space and picks the kernel
 * (tlm_run_pick_kernel). */
tlm_status tlm_run_validated_kernel(tlm_runtime *rt, tlm_status validated, const char *verr,
                                    const tlm_task *task, tlm_space *space, const char *sched_text,
                                    tlm_schedule *sched, const tlm_kernel **k, double *schedule_ms) {
  *schedule_ms = 0;
  if (validated) {
    fprintf(stderr, "tlm run: %s: %s\n", tlm_status_str(validated), verr);
    return validated;
  }
  tlm_space_init(space, task, &rt->target);
  return tlm_run_pick_kernel(rt, task, space, sched_text, sched, k, schedule_ms);
}

static double median_of(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, tlm_cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int tlm_run_compile_repeats(tlm_runtime *rt, const tlm_task *task, const tlm_schedule *sched,
                            int n, double *med_ms) {
  if (n < 1) return 0;
  double *all = calloc((size_t)n * 5, sizeof *all);
  if (!all) return 1;
  char err[256];
  for (int i = 0; i < n; i++) {
    tlm_kernel *k = NULL;
    double ph[4];
    tlm_status st = tlm_engine_kernel_variant(rt, task, sched, 0, &k, ph, err, sizeof err);
    if (st) {
      fprintf(stderr, "tlm run: compile %d: %s: %s\n", i + 1, tlm_status_str(st), err);
      free(all);
      return 1;
    }
    all[i] = k->compile_ms;
    for (int p = 0; p < 4; p++) all[(size_t)(p + 1) * n + i] = ph[p];
    tlm_engine_kernel_free(rt, k);
  }
  double med = median_of(all, n), lo = all[0], hi = all[n - 1], p[4]; /* all[0..n) sorted */
  for (int q = 0; q < 4; q++) p[q] = median_of(all + (size_t)(q + 1) * n, n);
  printf("compile_warm_ms %.2f (median of %d, min %.2f, max %.2f; IR %.2f, passes %.2f, "
         "object emission %.2f, link %.2f)\n", med, n, lo, hi, p[0], p[1], p[2], p[3]);
  if (med_ms) *med_ms = med;
  free(all);
  return 0;
}

/* --vs: the picked kernel (A) and a second schedule's (B) timed side by
 * side in one process, in alternating batches of about 20 ms each, so a
 * machine whose speed drifts (a shared host) slows both alike. Prints each
 * one's median per-call time and the speed ratio A/B per batch pair. */
int tlm_run_vs(tlm_runtime *rt, const tlm_task *task, const tlm_space *space,
               const void *args, const tlm_schedule *sa, const tlm_kernel *ka,
                  const char *vs_text, double min_time) {
  char err[512], ss[512];
  tlm_schedule sb;
  const tlm_kernel *kb = NULL;
  double sms = 0;
  if (tlm_run_pick_kernel(rt, task, space, vs_text, &sb, &kb, &sms)) return 1;
  const tlm_kernel *ks[2] = {ka, kb};
  double per[2] = {0, 0};
  for (int c = 0; c < 2; c++) { /* warm-up, and the calls per batch */
    double t0 = tlm_now_ns();
    if (tlm_engine_exec(rt, ks[c], task, args, err, sizeof err)) {
      fprintf(stderr, "tlm run: %s\n", err);
      return 1;
    }
    per[c] = tlm_now_ns() - t0;
  }
  double one = per[0] > per[1] ? per[0] : per[1];
  int calls = one > 0 ? (int)(2e7 / one) : 1000;
  if (calls < 1) calls = 1;
  if (calls > 10000) calls = 10000;
  int nb = 0, cap = 1000;
  double *t[2], *ratio = malloc(sizeof(double) * (size_t)cap);
  t[0] = malloc(sizeof(double) * (size_t)cap);
  t[1] = malloc(sizeof(double) * (size_t)cap);
  if (!t[0] || !t[1] || !ratio) {
    free(t[0]), free(t[1]), free(ratio);
    return 1;
  }
  double start = tlm_now_ns();
  while (nb < cap && (nb < 5 || tlm_now_ns() - start < 2 * min_time * 1e9)) {
    for (int c = 0; c < 2; c++) {
      double t0 = tlm_now_ns();
      for (int i = 0; i < calls; i++) tlm_engine_exec(rt, ks[c], task, args, err, sizeof err);
      t[c][nb] = (tlm_now_ns() - t0) / calls;
    }
    ratio[nb] = t[1][nb] / t[0][nb];
    nb++;
  }
  qsort(t[0], (size_t)nb, sizeof(double), tlm_cmp_double);
  qsort(t[1], (size_t)nb, sizeof(double), tlm_cmp_double);
  qsort(ratio, (size_t)nb, sizeof(double), tlm_cmp_double);
  double fl = tlm_task_flops(task);
  printf("A schedule   %s\n", tlm_schedule_str(space, sa, ss, sizeof ss));
  printf("B schedule   %s\n", tlm_schedule_str(space, &sb, ss, sizeof ss));
  printf("A kernel_ms  %.4f (%.1f GFLOPS)\n", t[0][nb / 2] * 1e-6, fl / t[0][nb / 2]);
  printf("B kernel_ms  %.4f (%.1f GFLOPS)\n", t[1][nb / 2] * 1e-6, fl / t[1][nb / 2]);
  printf("speed A/B    %.3f (min %.3f, max %.3f; %d batch pairs of %d calls)\n", ratio[nb / 2],
         ratio[0], ratio[nb - 1], nb, calls);
  free(t[0]), free(t[1]), free(ratio);
  return 0;
}

/* ---- operands from a task --------------------------------------------------------------- */

/* floats a tensor of `nd` dims reaches: 1 + sum (extent - 1) * stride;
 * 0 on overflow */
static size_t span_of(int nd, const int64_t *ext, const int64_t *stride) {
  uint64_t off = 0;
  for (int i = 0; i < nd; i++) {
    if (ext[i] < 1 || stride[i] < 0) return 0;
    uint64_t t;
    if (__builtin_mul_overflow((uint64_t)(ext[i] - 1), (uint64_t)stride[i], &t) ||
        __builtin_add_overflow(off, t, &off))
      return 0;
  }
  return (size_t)off + 1;
}

static float *operand(tlm_task_operands *o, size_t n, uint64_t *rng, size_t *total,
                      size_t max_bytes) {
  if (n == 0 || o->nbuf >= 7) return NULL;
  *total += n * sizeof(float);
  if (*total > max_bytes) return NULL;
  float *b = malloc(n * sizeof(float));
  if (!b) return NULL;
  for (size_t i = 0; i < n; i++) b[i] = (float)((tlm_rng_next(rng) >> 40) % 2001) / 1000.0f - 1.0f;
  o->buf[o->nbuf] = b;
  o->n[o->nbuf++] = n;
  return b;
}

int tlm_task_operands_make(const tlm_task *task, uint64_t seed, size_t max_bytes,
                           tlm_task_operands *o) {
  memset(o, 0, sizeof *o);
  uint64_t rng = seed;
  size_t total = 0;
  int ok = 1;
#define NEED(ptr, n) ((ptr) = operand(o, (n), &rng, &total, max_bytes), ok &= (ptr) != NULL)
  if (task->kind == TLM_OP_MATMUL) {
    const tlm_matmul_task *t = &task->u.mm;
    tlm_mm_args *a = &o->args.mm;
    int64_t ea[6] = {t->batch[0], t->batch[1], t->batch[2], t->batch[3], t->M, t->K};
    int64_t eb[6] = {t->batch[0], t->batch[1], t->batch[2], t->batch[3], t->K, t->N};
    int64_t ec[6] = {t->batch[0], t->batch[1], t->batch[2], t->batch[3], t->M, t->N};
    const float *cp;
    NEED(cp, span_of(6, ea, t->sa));
    a->a = cp;
    NEED(cp, span_of(6, eb, t->sb));
    a->b = cp;
    if (t->has_bias) {
      NEED(cp, span_of(1, &t->N, &t->sbias));
      a->bias = cp;
    }
    if (t->has_residual) {
      NEED(cp, span_of(6, ec, t->sr));
      a->res = cp;
    }
    o->out = o->nbuf;
    NEED(a->c, span_of(6, ec, t->sc));
    a->M = t->M, a->N = t->N, a->K = t->K;
    memcpy(a->sa, t->sa, sizeof a->sa);
    memcpy(a->sb, t->sb, sizeof a->sb);
    memcpy(a->sc, t->sc, sizeof a->sc);
    memcpy(a->sr, t->sr, sizeof a->sr);
    a->sbias = t->sbias;
  } else if (tlm_task_is_row(task)) {
    const tlm_row_task *t = &task->u.row;
    tlm_row_args *a = &o->args.row;
    int64_t e[2] = {t->rows, t->cols};
    /* rope: (token, head, column) for x and y, (token, column) for the table */
    int rope = task->kind == TLM_OP_ROPE;
    int64_t H = t->mrows > 0 ? t->mrows : 1;
    int64_t e3[3] = {t->rows / H, H, t->cols}, e2[2] = {t->rows / H, t->cols};
    int64_t sx3[3] = {t->sx[0], t->sxh, t->sx[1]}, sy3[3] = {t->sy[0], t->syh, t->sy[1]};
    const float *cp;
    NEED(cp, rope ? span_of(3, e3, sx3) : span_of(2, e, t->sx));
    a->x = cp;
    if (t->sg) {
      NEED(cp, span_of(1, &t->cols, &t->sg));
      a->gamma = cp;
    }
    if (t->sb) {
      NEED(cp, span_of(1, &t->cols, &t->sb));
      a->beta = cp;
    }
    if ((task->kind == TLM_OP_ELTWISE && t->binary) || rope) {
      NEED(cp, span_of(2, rope ? e2 : e, t->sz));
      a->z = cp;
    }
    o->out = o->nbuf;
    NEED(a->y, rope ? span_of(3, e3, sy3) : span_of(2, e, t->sy));
    a->sxh = t->sxh, a->syh = t->syh;
    a->rows = t->rows, a->cols = t->cols, a->mrows = t->mrows;
    memcpy(a->sx, t->sx, sizeof a->sx);
    memcpy(a->sy, t->sy, sizeof a->sy);
    memcpy(a->sz, t->sz, sizeof a->sz);
    a->sg = t->sg, a->sb = t->sb;
  } else if (task->kind == TLM_OP_ATTENTION) {
    const tlm_attn_task *t = &task->u.attn;
    tlm_attn_args *a = &o->args.attn;
    int64_t eq[4] = {t->B, t->Hq, t->Tq, t->D}, ek[4] = {t->B, t->Hkv, t->Tk, t->D};
    int64_t ev[4] = {t->B, t->Hkv, t->Tk, t->Dv}, eo[4] = {t->B, t->Hq, t->Tq, t->Dv};
    const float *cp;
    NEED(cp, span_of(4, eq, t->sq));
    a->q = cp;
    NEED(cp, span_of(4, ek, t->sk));
    a->k = cp;
    NEED(cp, span_of(4, ev, t->sv));
    a->v = cp;
    o->out = o->nbuf;
    NEED(a->o, span_of(4, eo, t->so));
    a->B = t->B, a->Hq = t->Hq, a->Hkv = t->Hkv, a->Tq = t->Tq, a->Tk = t->Tk;
    memcpy(a->sq, t->sq, sizeof a->sq);
    memcpy(a->sk, t->sk, sizeof a->sk);
    memcpy(a->sv, t->sv, sizeof a->sv);
    memcpy(a->so, t->so, sizeof a->so);
    a->scale = t->scale;
  } else if (task->kind == TLM_OP_POOL) {
    const tlm_pool_task *t = &task->u.pool;
    tlm_pool_args *a = &o->args.pool;
    int64_t es[5] = {t->N, t->C, t->ID, t->IH, t->IW}, ed[5] = {t->N, t->C, t->OD, t->OH, t->OW};
    const float *cp;
    NEED(cp, span_of(5, es, t->ss));
    a->src = cp;
    o->out = o->nbuf;
    NEED(a->dst, span_of(5, ed, t->sdst));
    a->N = t->N, a->ID = t->ID, a->IH = t->IH, a->IW = t->IW;
    a->OD = t->OD, a->OH = t->OH, a->OW = t->OW;
    memcpy(a->ss, t->ss, sizeof a->ss);
    memcpy(a->sd, t->sdst, sizeof a->sd);
  } else if (task->kind == TLM_OP_CONV) {
    const tlm_conv_task *t = &task->u.conv;
    tlm_conv_args *a = &o->args.conv;
    int64_t oc = (int64_t)t->G * t->OCg, ic = (int64_t)t->G * t->ICg;
    int64_t es[5] = {t->N, ic, t->ID, t->IH, t->IW}, ed[5] = {t->N, oc, t->OD, t->OH, t->OW};
    int64_t ew[5] = {oc, t->ICg, t->KD, t->KH, t->KW};
    const float *cp;
    NEED(cp, span_of(5, es, t->ss));
    a->src = cp;
    NEED(cp, span_of(5, ew, t->sw_));
    a->wei = cp;
    if (t->has_bias) {
      NEED(cp, span_of(1, &oc, &t->sbias));
      a->bias = cp;
    }
    if (t->has_ss) {
      NEED(cp, span_of(1, &oc, &t->sscale));
      a->scale = cp;
      NEED(cp, span_of(1, &oc, &t->sshift));
      a->shift = cp;
    }
    if (t->has_residual) {
      NEED(cp, span_of(5, ed, t->sr));
      a->res = cp;
    }
    o->out = o->nbuf;
    NEED(a->dst, span_of(5, ed, t->sdst));
    tlm_conv_args_extents(a, t);
  } else {
    ok = 0;
  }
#undef NEED
  if (!ok) tlm_task_operands_free(o);
  return ok ? 0 : -1;
}

void tlm_task_operands_free(tlm_task_operands *o) {
  for (int i = 0; i < o->nbuf; i++) free(o->buf[i]);
  memset(o, 0, sizeof *o);
}

tlm_runtime *tlm_tool_runtime(const char *who, int threads, const char *cache_dir,
                              const char *model_path) {
  tlm_config cfg;
  tlm_config_init(&cfg);
  /* tools time kernels: every one its own, built before the call returns,
   * unless TLM_ASYNC asks otherwise (tests/run_conv_public.sh) */
  if (!getenv("TLM_ASYNC")) cfg.async_compile = 0;
  if (threads >= 0) cfg.num_threads = threads;
  if (cache_dir) cfg.cache_dir = cache_dir;
  if (model_path) cfg.model_path = model_path;
  tlm_runtime *rt = NULL;
  if (tlm_create(&cfg, &rt)) {
    fprintf(stderr, "%s: %s\n", who, tlm_last_error(NULL));
    return NULL;
  }
  return rt;
}
