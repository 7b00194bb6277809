/* llm_serving.c - replays an LLM-serving trace through tlm_run().
 *
 * Each request of the trace (CSV with ContextTokens and GeneratedTokens
 * columns, e.g. ../shared/workloads/traces/AzureLLMInferenceTrace_conv.csv)
 * runs the linear layers of one GPT-2-124M block (dimensions from
 * ../shared/workloads/models.json): a prefill over its ContextTokens tokens
 * (M = tokens, capped by --max-context), then --decode-steps decode steps
 * (M = 1). Every call has a shape tlm has to handle at run time; the first
 * call with each shape schedules and JIT-compiles, later ones hit the cache.
 * A sample of the calls is checked against a plain reference.
 *
 * This is the matmul slice of the serving job: attention, normalization and
 * activations other than the fused GELU are not run here yet.
 *
 * Baseline (when built with oneDNN): the same requests replayed through
 * oneDNN matmul primitives (bias + GELU post-op), one primitive per distinct
 * shape created on first use, on the same number of threads, timed in the
 * same run; sampled outputs of both are compared.
 *
 * Usage: llm_serving --trace FILE [--requests N] [--max-context N]
 *                    [--decode-steps N] [--threads N] [--json FILE]
 *                    [--no-baseline]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tlm.h"

#ifdef TLM_HAVE_DNNL
#include "baseline_dnnl.h"
#endif

/* GPT-2-124M: d_model 768, d_ff 3072, fused QKV (models.json) */
#define D_MODEL 768
#define D_FF 3072

typedef struct layer {
  const char *name;
  int64_t k, n;
  tlm_activation act;
  float *w, *bias;
} layer;

static layer g_layers[] = {
    {"qkv", D_MODEL, 3 * D_MODEL, TLM_ACT_NONE, NULL, NULL},
    {"attn_proj", D_MODEL, D_MODEL, TLM_ACT_NONE, NULL, NULL},
    {"mlp_fc", D_MODEL, D_FF, TLM_ACT_GELU_TANH, NULL, NULL},
    {"mlp_proj", D_FF, D_MODEL, TLM_ACT_NONE, NULL, NULL},
};
#define N_LAYERS (sizeof g_layers / sizeof g_layers[0])

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static uint64_t g_rng = 0x1234567ull;
static float frand(void) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((g_rng >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static float *alloc_random(int64_t n, float scale) {
  float *p = malloc((size_t)n * sizeof(float));
  if (p)
    for (int64_t i = 0; i < n; i++) p[i] = frand() * scale;
  return p;
}

static float gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

/* max relative error of one output against a double-precision reference */
static double check_layer(const layer *l, const float *x, const float *y, int64_t m) {
  double worst = 0;
  for (int64_t i = 0; i < m; i += (m > 8 ? m / 8 : 1))
    for (int64_t j = 0; j < l->n; j += 7) {
      double acc = 0, mag = 0;
      for (int64_t k = 0; k < l->k; k++) {
        acc += (double)x[i * l->k + k] * l->w[k * l->n + j];
        mag += fabs((double)x[i * l->k + k] * l->w[k * l->n + j]);
      }
      float r = (float)acc + l->bias[j];
      if (l->act == TLM_ACT_GELU_TANH) r = gelu(r);
      double e = fabs((double)y[i * l->n + j] - r) / (mag + fabs(l->bias[j]) + 1e-3);
      if (e > worst) worst = e;
    }
  return worst;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct replay_result {
  double wall_ms, worst, flops;
  double *lat; /* per request, ms */
  long tokens, calls;
  int failed;
} replay_result;

/* Replays the requests through tlm (db == NULL) or oneDNN. With both rt and
 * db, oneDNN's sampled outputs are compared against tlm's. */
static void replay(tlm_runtime *rt, void *db, const int *ctx, int nreq, int decode_steps,
                   float *x, float *y, float *y2, replay_result *r) {
  double t_start = now_ms();
  for (int q = 0; q < nreq && !r->failed; q++) {
    double t0 = now_ms();
    for (int step = 0; step <= decode_steps && !r->failed; step++) {
      int64_t m = step == 0 ? ctx[q] : 1; /* prefill, then decode */
      r->tokens += m;
      for (size_t l = 0; l < N_LAYERS; l++) {
        layer *L = &g_layers[l];
        tlm_op op = tlm_op_matmul();
        op.u.matmul.has_bias = 1;
        op.u.matmul.activation = L->act;
        tlm_tensor in[3], out;
        tlm_tensor_dense(&in[0], TLM_F32, 2, (int64_t[]){m, L->k}, x);
        tlm_tensor_dense(&in[1], TLM_F32, 2, (int64_t[]){L->k, L->n}, L->w);
        tlm_tensor_dense(&in[2], TLM_F32, 1, (int64_t[]){L->n}, L->bias);
        tlm_tensor_dense(&out, TLM_F32, 2, (int64_t[]){m, L->n}, y);
        int sample = q % 8 == 0 && step <= 1;
#ifdef TLM_HAVE_DNNL
        if (db) {
          if (dnnl_baseline_linear(db, m, L->k, L->n, x, L->w, L->bias,
                                   L->act == TLM_ACT_GELU_TANH, y)) {
            fprintf(stderr, "llm_serving: oneDNN failed\n");
            r->failed = 1;
            break;
          }
          if (sample && rt) { /* compare against tlm, untimed */
            double c0 = now_ms();
            tlm_tensor_dense(&out, TLM_F32, 2, (int64_t[]){m, L->n}, y2);
            if (tlm_run(rt, &op, in, 3, &out, 1) == TLM_OK)
              for (int64_t i = 0; i < m * L->n; i++) {
                double e = fabs((double)y[i] - y2[i]) / (fabs((double)y2[i]) + 1e-2);
                if (e > r->worst) r->worst = e;
              }
            double c = now_ms() - c0;
            t_start += c, t0 += c;
          }
        } else
#endif
        {
          (void)y2;
          if (tlm_run(rt, &op, in, 3, &out, 1) != TLM_OK) {
            fprintf(stderr, "llm_serving: tlm_run failed: %s\n", tlm_last_error(rt));
            r->failed = 1;
            break;
          }
          if (sample) {
            double c0 = now_ms();
            double e = check_layer(L, x, y, m);
            if (e > r->worst) r->worst = e;
            double c = now_ms() - c0;
            t_start += c, t0 += c;
          }
        }
        r->calls++;
        r->flops += 2.0 * (double)m * (double)L->k * (double)L->n;
      }
    }
    r->lat[q] = now_ms() - t0;
  }
  r->wall_ms = now_ms() - t_start;
  (void)db;
}

int main(int argc, char **argv) {
  const char *trace = NULL, *json = NULL;
  int requests = 48, max_context = 512, decode_steps = 4, threads = -1, baseline = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--trace") && i + 1 < argc) trace = argv[++i];
    else if (!strcmp(argv[i], "--requests") && i + 1 < argc) requests = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--max-context") && i + 1 < argc) max_context = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--decode-steps") && i + 1 < argc) decode_steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!strcmp(argv[i], "--no-baseline")) baseline = 0;
    else {
      fprintf(stderr,
              "usage: %s --trace FILE [--requests N] [--max-context N] [--decode-steps N]\n"
              "          [--threads N] [--json FILE] [--no-baseline]\n",
              argv[0]);
      return 2;
    }
  }
  if (!trace || requests < 1 || max_context < 1 || decode_steps < 0) {
    fprintf(stderr, "llm_serving: --trace FILE is required; counts must be positive\n");
    return 2;
  }
  FILE *f = fopen(trace, "r");
  if (!f) {
    fprintf(stderr, "llm_serving: cannot open %s\n", trace);
    return 1;
  }
  int *ctx = calloc((size_t)requests, sizeof *ctx);
  char line[512];
  int nreq = 0;
  if (!ctx || !fgets(line, sizeof line, f) || !strstr(line, "ContextTokens")) {
    fprintf(stderr, "llm_serving: %s has no ContextTokens header\n", trace);
    fclose(f);
    free(ctx);
    return 1;
  }
  while (nreq < requests && fgets(line, sizeof line, f)) {
    char *c1 = strchr(line, ',');
    int context = c1 ? atoi(c1 + 1) : 0;
    if (context < 1) continue;
    ctx[nreq++] = context < max_context ? context : max_context;
  }
  fclose(f);
  if (nreq == 0) {
    fprintf(stderr, "llm_serving: no requests in %s\n", trace);
    free(ctx);
    return 1;
  }

  tlm_config cfg;
  tlm_config_init(&cfg);
  if (threads >= 0) cfg.num_threads = threads;
  int nthreads = cfg.num_threads > 0 ? cfg.num_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
  char nt[16];
  snprintf(nt, sizeof nt, "%d", nthreads);
  setenv("OMP_NUM_THREADS", nt, 1); /* oneDNN's OpenMP runtime: same threads */
  tlm_runtime *rt;
  if (tlm_create(&cfg, &rt) != TLM_OK) {
    fprintf(stderr, "llm_serving: %s\n", tlm_last_error(NULL));
    free(ctx);
    return 1;
  }
  for (size_t l = 0; l < N_LAYERS; l++) {
    g_layers[l].w = alloc_random(g_layers[l].k * g_layers[l].n, 0.05f);
    g_layers[l].bias = alloc_random(g_layers[l].n, 0.1f);
  }
  float *x = alloc_random((int64_t)max_context * D_FF, 1.0f);
  float *y = malloc((size_t)max_context * D_FF * sizeof(float));
  float *y2 = malloc((size_t)max_context * D_FF * sizeof(float));
  replay_result t = {0}, d = {0};
  t.lat = calloc((size_t)nreq, sizeof(double));
  d.lat = calloc((size_t)nreq, sizeof(double));
  replay(rt, NULL, ctx, nreq, decode_steps, x, y, y2, &t);
  tlm_stats s;
  tlm_get_stats(rt, &s);
  int have_baseline = 0;
  double dnnl_create_ms = 0;
  int dnnl_prims = 0;
#ifdef TLM_HAVE_DNNL
  dnnl_baseline *db = baseline && !t.failed ? dnnl_baseline_create() : NULL;
  if (db) {
    replay(rt, db, ctx, nreq, decode_steps, x, y, y2, &d);
    dnnl_prims = dnnl_baseline_primitives(db, &dnnl_create_ms);
    have_baseline = !d.failed;
    dnnl_baseline_destroy(db);
  }
#else
  (void)baseline;
#endif
  qsort(t.lat, (size_t)nreq, sizeof(double), cmp_double);
  double p50 = t.lat[nreq / 2], p99 = t.lat[(nreq * 99) / 100 < nreq ? (nreq * 99) / 100 : nreq - 1];
  double sched_compile = s.schedule_ms + s.compile_ms;
  int ok = !t.failed && t.worst <= 1e-4 && (!have_baseline || d.worst <= 1e-3);
  printf("\nllm_serving report (GPT-2-124M linear layers, trace %s)\n", trace);
  printf("  requests            %d (prefill capped at %d tokens, %d decode steps each)\n", nreq,
         max_context, decode_steps);
  printf("  tokens              %ld\n", t.tokens);
  printf("  tlm_run calls       %ld on %d threads\n", t.calls, nthreads);
  printf("  wall time           %.1f ms\n", t.wall_ms);
  printf("  tokens/s            %.0f\n", t.tokens / (t.wall_ms * 1e-3));
  printf("  GFLOPS (all calls)  %.1f\n", t.flops / (t.wall_ms * 1e6));
  printf("  request latency     p50 %.2f ms, p99 %.2f ms\n", p50, p99);
  printf("  new shapes          %llu (cache misses)\n", (unsigned long long)s.cache_misses);
  printf("  schedules           %llu (%llu decoded by the model, %llu from disk), %.1f ms\n",
         (unsigned long long)(s.schedules + s.disk_plan_hits), (unsigned long long)s.decodes,
         (unsigned long long)s.disk_plan_hits, s.schedule_ms);
  printf("  kernels             %llu compiled (%.1f ms), %llu loaded from disk\n",
         (unsigned long long)s.compiles, s.compile_ms, (unsigned long long)s.disk_kernel_hits);
  printf("  cache hits          %llu\n", (unsigned long long)s.cache_hits);
  printf("  decode + compile    %.1f%% of wall time\n", 100.0 * sched_compile / t.wall_ms);
  printf("  reference check     max rel err %.2g on sampled calls: %s\n", t.worst,
         t.worst <= 1e-4 ? "PASS" : "FAIL");
  if (have_baseline) {
    printf("  oneDNN baseline     %.1f ms wall, %.0f tokens/s (%d primitives, %.1f ms creating "
           "them)\n",
           d.wall_ms, d.tokens / (d.wall_ms * 1e-3), dnnl_prims, dnnl_create_ms);
    printf("  speed vs oneDNN     %.2fx (oneDNN wall / tlm wall; > 1: tlm faster)\n",
           d.wall_ms / t.wall_ms);
    printf("  outputs vs oneDNN   max rel diff %.2g on sampled calls: %s\n", d.worst,
           d.worst <= 1e-3 ? "PASS" : "FAIL");
  }
  if (json) {
    FILE *jf = fopen(json, "w");
    if (jf) {
      fprintf(jf,
              "{\"requests\": %d, \"tokens\": %ld, \"calls\": %ld, \"threads\": %d, "
              "\"wall_ms\": %.3f, \"tokens_per_s\": %.1f, \"gflops\": %.2f, "
              "\"latency_p50_ms\": %.3f, \"latency_p99_ms\": %.3f, \"cache_misses\": %llu, "
              "\"decodes\": %llu, \"compiles\": %llu, \"disk_kernel_loads\": %llu, "
              "\"compile_ms\": %.3f, \"schedule_ms\": %.3f, \"cache_hits\": %llu, "
              "\"decode_compile_share\": %.4f, \"max_rel_err\": %.3g",
              nreq, t.tokens, t.calls, nthreads, t.wall_ms, t.tokens / (t.wall_ms * 1e-3),
              t.flops / (t.wall_ms * 1e6), p50, p99, (unsigned long long)s.cache_misses,
              (unsigned long long)s.decodes, (unsigned long long)s.compiles,
              (unsigned long long)s.disk_kernel_hits, s.compile_ms, s.schedule_ms,
              (unsigned long long)s.cache_hits, sched_compile / t.wall_ms, t.worst);
      if (have_baseline)
        fprintf(jf,
                ", \"onednn_wall_ms\": %.3f, \"onednn_tokens_per_s\": %.1f, "
                "\"onednn_primitive_create_ms\": %.3f, \"speed_ratio_vs_onednn\": %.4f, "
                "\"max_rel_diff_vs_onednn\": %.3g",
                d.wall_ms, d.tokens / (d.wall_ms * 1e-3), dnnl_create_ms, d.wall_ms / t.wall_ms,
                d.worst);
      fprintf(jf, "}\n");
      fclose(jf);
    }
  }
  for (size_t l = 0; l < N_LAYERS; l++) {
    free(g_layers[l].w);
    free(g_layers[l].bias);
  }
  free(x);
  free(y);
  free(y2);
  free(t.lat);
  free(d.lat);
  free(ctx);
  tlm_destroy(rt);
  return ok ? 0 : 1;
}
