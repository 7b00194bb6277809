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
 * Usage: llm_serving --trace FILE [--requests N] [--max-context N]
 *                    [--decode-steps N] [--threads N] [--json FILE]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tlm.h"

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

int main(int argc, char **argv) {
  const char *trace = NULL, *json = NULL;
  int requests = 48, max_context = 512, decode_steps = 4, threads = -1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--trace") && i + 1 < argc) trace = argv[++i];
    else if (!strcmp(argv[i], "--requests") && i + 1 < argc) requests = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--max-context") && i + 1 < argc) max_context = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--decode-steps") && i + 1 < argc) decode_steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else {
      fprintf(stderr,
              "usage: %s --trace FILE [--requests N] [--max-context N] [--decode-steps N]\n"
              "          [--threads N] [--json FILE]\n",
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
  if (!fgets(line, sizeof line, f) || !strstr(line, "ContextTokens")) {
    fprintf(stderr, "llm_serving: %s has no ContextTokens header\n", trace);
    return 1;
  }
  while (nreq < requests && fgets(line, sizeof line, f)) {
    char *c1 = strchr(line, ',');
    int context = c1 ? atoi(c1 + 1) : 0;
    if (context < 1) continue;
    ctx[nreq++] = context < max_context ? context : max_context;
  }
  fclose(f);

  tlm_config cfg;
  tlm_config_init(&cfg);
  if (threads >= 0) cfg.num_threads = threads;
  tlm_runtime *rt;
  if (tlm_create(&cfg, &rt) != TLM_OK) {
    fprintf(stderr, "llm_serving: %s\n", tlm_last_error(NULL));
    return 1;
  }
  for (size_t l = 0; l < N_LAYERS; l++) {
    g_layers[l].w = alloc_random(g_layers[l].k * g_layers[l].n, 0.05f);
    g_layers[l].bias = alloc_random(g_layers[l].n, 0.1f);
  }
  float *x = alloc_random((int64_t)max_context * D_FF, 1.0f);
  float *y = malloc((size_t)max_context * D_FF * sizeof(float));
  double *lat = calloc((size_t)nreq, sizeof *lat);
  double flops = 0, worst = 0, t_start = now_ms();
  long tokens = 0, calls = 0;
  int rc = 0;
  for (int r = 0; r < nreq && rc == 0; r++) {
    double t0 = now_ms();
    for (int step = 0; step <= decode_steps && rc == 0; step++) {
      int64_t m = step == 0 ? ctx[r] : 1; /* prefill, then decode */
      tokens += m;
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
        tlm_status st = tlm_run(rt, &op, in, 3, &out, 1);
        if (st != TLM_OK) {
          fprintf(stderr, "llm_serving: tlm_run failed: %s\n", tlm_last_error(rt));
          rc = 1;
          break;
        }
        calls++;
        flops += 2.0 * (double)m * (double)L->k * (double)L->n;
        if (r % 8 == 0 && step <= 1) {
          double e = check_layer(L, x, y, m);
          if (e > worst) worst = e;
        }
      }
    }
    lat[r] = now_ms() - t0;
  }
  double wall = now_ms() - t_start;
  tlm_stats s;
  tlm_get_stats(rt, &s);
  qsort(lat, (size_t)nreq, sizeof *lat, cmp_double);
  double p50 = lat[nreq / 2], p99 = lat[(nreq * 99) / 100 < nreq ? (nreq * 99) / 100 : nreq - 1];
  int ok = rc == 0 && worst <= 1e-4;
  printf("\nllm_serving report (GPT-2-124M linear layers, trace %s)\n", trace);
  printf("  requests            %d (prefill capped at %d tokens, %d decode steps each)\n", nreq,
         max_context, decode_steps);
  printf("  tokens              %ld\n", tokens);
  printf("  tlm_run calls       %ld\n", calls);
  printf("  wall time           %.1f ms\n", wall);
  printf("  tokens/s            %.0f\n", tokens / (wall * 1e-3));
  printf("  GFLOPS (all calls)  %.1f\n", flops / (wall * 1e6));
  printf("  request latency     p50 %.2f ms, p99 %.2f ms\n", p50, p99);
  printf("  new shapes          %llu (cache misses)\n", (unsigned long long)s.cache_misses);
  printf("  kernels compiled    %llu (%.1f ms, %.1f%% of wall time)\n",
         (unsigned long long)s.compiles, s.compile_ms, 100.0 * s.compile_ms / wall);
  printf("  scheduling          %llu (%.2f ms)\n", (unsigned long long)s.schedules, s.schedule_ms);
  printf("  cache hits          %llu\n", (unsigned long long)s.cache_hits);
  printf("  reference check     max rel err %.2g on sampled calls: %s\n", worst,
         ok ? "PASS" : "FAIL");
  if (json) {
    FILE *jf = fopen(json, "w");
    if (jf) {
      fprintf(jf,
              "{\"requests\": %d, \"tokens\": %ld, \"calls\": %ld, \"wall_ms\": %.3f, "
              "\"tokens_per_s\": %.1f, \"gflops\": %.2f, \"latency_p50_ms\": %.3f, "
              "\"latency_p99_ms\": %.3f, \"cache_misses\": %llu, \"compiles\": %llu, "
              "\"compile_ms\": %.3f, \"schedule_ms\": %.3f, \"cache_hits\": %llu, "
              "\"max_rel_err\": %.3g}\n",
              nreq, tokens, calls, wall, tokens / (wall * 1e-3), flops / (wall * 1e6), p50, p99,
              (unsigned long long)s.cache_misses, (unsigned long long)s.compiles, s.compile_ms,
              s.schedule_ms, (unsigned long long)s.cache_hits, worst);
      fclose(jf);
    }
  }
  for (size_t l = 0; l < N_LAYERS; l++) {
    free(g_layers[l].w);
    free(g_layers[l].bias);
  }
  free(x);
  free(y);
  free(lat);
  free(ctx);
  tlm_destroy(rt);
  return ok ? 0 : 1;
}
