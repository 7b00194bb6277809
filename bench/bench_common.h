/* bench_common.h - what bench_matmul and bench_conv share: the
 * contenders' set-up (oneDNN through samples/baseline_dnnl.h, its bound
 * primitives timed here, with threads pinned; a tlm runtime without a disk
 * cache), their timing loops and the JSON header naming both contenders'
 * ISA. */
#ifndef TLM_BENCH_COMMON_H
#define TLM_BENCH_COMMON_H

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/engine.h"
#include "samples/baseline_dnnl.h"
#include "train/measure.h"


/* One tlm_run call of a contender, the same every time. */
typedef struct bench_tlm_call {
  tlm_runtime *rt;
  const tlm_op *op;
  const tlm_tensor *in;
  int n_in;
  const tlm_tensor *out;
} bench_tlm_call;

static inline void bench_tlm_run(void *c) {
  bench_tlm_call *t = c;
  if (tlm_run(t->rt, t->op, t->in, t->n_in, t->out, 1) != TLM_OK) {
    fprintf(stderr, "tlm_run: %s\n", tlm_last_error(t->rt));
    exit(1);
  }
}

/* one execution of a bound oneDNN primitive (samples/baseline_dnnl.h) */
static inline void bench_dnnl_run(void *p) {
  if (dnnl_bound_run(p)) {
    fprintf(stderr, "oneDNN execution failed\n");
    exit(1);
  }
}

/* ns per call of `calls` back-to-back calls of f(ctx) */
static inline double bench_time_batch(void (*f)(void *), void *ctx, int calls) {
  double t0 = tlm_now_ns();
  for (int i = 0; i < calls; i++) f(ctx);
  return (tlm_now_ns() - t0) / calls;
}

/* Calls per timed batch from the warm-up batch's times per call (ns) of
 * both contenders: at least `calls`, and enough that the faster one's batch
 * lasts BENCH_BATCH_MS (at most 20,000 calls). A short batch after the
 * pause between batches times mostly the threads' wake-up and the other
 * runtime's idle workers: ResNet-50's res4 3x3 layer on 2 threads (Xeon,
 * 4 calls of 0.86 ms a batch) measured tlm at 142-221 GFLOPS in
 * bench_conv against 269 alone (`tlm run --const-w`). */
#define BENCH_BATCH_MS 50.0
static inline int bench_batch_calls(double ns_a, double ns_b, int calls) {
  double fast = ns_a < ns_b ? ns_a : ns_b;
  if (fast > 0 && BENCH_BATCH_MS * 1e6 / fast > calls) calls = (int)(BENCH_BATCH_MS * 1e6 / fast) + 1;
  return calls < 20000 ? calls : 20000;
}

/* The median (p = 0.5) or another quantile of v[0..n) (sorts v). */
static inline double bench_pct(double *v, int n, double p) {
  qsort(v, (size_t)n, sizeof *v, tlm_cmp_double);
  return v[(int)(p * (n - 1) + 0.5)];
}

/* A tlm runtime on `threads` threads without a disk cache (every compile
 * measured, none reused), building each new shape before its call returns
 * (the library's default builds in the background). Exits on failure. */
static inline tlm_runtime *bench_runtime(int threads) {
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.cache_dir = "none";
  cfg.async_compile = 0;
  cfg.num_threads = threads;
  tlm_runtime *rt;
  if (tlm_create(&cfg, &rt)) {
    fprintf(stderr, "tlm_create: %s\n", tlm_last_error(NULL));
    exit(1);
  }
  return rt;
}

/* Both contenders on `threads` threads: oneDNN through OMP_NUM_THREADS (a
 * warning when it cannot be set) and its CPU engine, and bench_runtime. */
static inline tlm_runtime *bench_setup(char **argv, int threads, dnnl_baseline **base) {
  if (dnnl_baseline_pin_threads(argv, threads))
    fprintf(stderr, "warning: could not set OMP_NUM_THREADS=%d; oneDNN may use other thread "
                    "counts\n", threads);
  if (!(*base = dnnl_baseline_create())) {
    fprintf(stderr, "oneDNN: cannot create its CPU engine\n");
    exit(1);
  }
  return bench_runtime(threads);
}

/* A JSON report's root naming the machine and both contenders' ISA, or
 * NULL when no report was asked for (json NULL). */
static inline cJSON *bench_json_root(const char *json, const char *machine, const tlm_runtime *rt,
                                     int threads, int batches) {
  if (!json) return NULL;
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "machine", machine);
  cJSON_AddStringToObject(root, "tlm_isa", tlm_isa_name(rt->target.isa));
  cJSON_AddStringToObject(root, "onednn_isa", dnnl_baseline_isa());
  cJSON_AddNumberToObject(root, "threads", threads);
  cJSON_AddNumberToObject(root, "batches", batches);
  return root;
}

/* Writes root to path (atomically) and frees it; a warning when it cannot. */
static inline void bench_json_finish(cJSON *root, const char *path, const char *who) {
  if (!root) return;
  if (tlm_json_save(root, path)) fprintf(stderr, "%s: cannot write %s\n", who, path);
  cJSON_Delete(root);
}

#endif
