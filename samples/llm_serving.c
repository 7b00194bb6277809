/* llm_serving.c - a decoder-only transformer served through tlm_run(),
 * replaying an LLM-serving trace.
 *
 * Model: GPT-2-124M's dimensions (../shared/workloads/models.json: 12 layers,
 * 12 heads, d_model 768, d_ff 3072, pre-LayerNorm, GELU-tanh, biases), weights
 * from a fixed seed. Each request of the trace (CSV with a ContextTokens
 * column, e.g. ../shared/workloads/traces/AzureLLMInferenceTrace_conv.csv)
 * runs a prefill of its context (capped by --max-context), then
 * --decode-steps decode steps of one token with a KV cache. Every matmul
 * (QKV, attention scores Q K^T, attention output P V, projections, MLP),
 * every LayerNorm and every softmax (causal, scaled) is a tlm_run() call;
 * bias, GELU and the residual adds are fused epilogues.
 *
 * Baseline in the same run: the same computation with oneDNN matmul
 * primitives (bias, GELU and sum post-ops; one primitive per distinct
 * problem, created on first use) and plain C for LayerNorm and softmax, on
 * the same number of threads. The final hidden states of sampled requests
 * are compared.
 *
 * Usage: llm_serving --trace FILE [--requests N] [--max-context N]
 *                    [--decode-steps N] [--layers N] [--threads N]
 *                    [--json FILE] [--no-baseline] [--no-prepack]
 *
 * The weight matrices are declared constant to tlm (tlm_constant_add), as a
 * serving engine would: tlm packs each once, on first use, in its kernels'
 * panel layout. --no-prepack reads them as given on every call. The oneDNN
 * baseline's matmul primitives read the same plain (K, N) weights either
 * way.
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

#define C 768   /* d_model */
#define NH 12   /* heads */
#define HD 64   /* head dim */
#define FF 3072 /* d_ff */

typedef struct layer_w {
  float *ln1g, *ln1b, *wqkv, *bqkv, *wproj, *bproj, *ln2g, *ln2b, *wfc, *bfc, *wfp, *bfp;
} layer_w;

typedef struct model {
  int layers, tmax;
  layer_w *l;
  float *lnfg, *lnfb;
  /* activations (tmax rows) and the KV cache (layers, NH, tmax, HD) x 2 */
  float *xa, *xb, *ln, *qkv, *att, *scores, *fch, *kc, *vc;
} model;

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

static float *buf(size_t n, float scale, float offset) {
  float *p = malloc(n * sizeof(float));
  if (p)
    for (size_t i = 0; i < n; i++) p[i] = offset + scale * frand();
  return p;
}

static int model_init(model *m, int layers, int tmax) {
  memset(m, 0, sizeof *m);
  m->layers = layers;
  m->tmax = tmax;
  m->l = calloc((size_t)layers, sizeof *m->l);
  if (!m->l) return -1;
  for (int i = 0; i < layers; i++) {
    layer_w *w = &m->l[i];
    w->ln1g = buf(C, 0.1f, 1.0f), w->ln1b = buf(C, 0.1f, 0);
    w->wqkv = buf((size_t)C * 3 * C, 0.04f, 0), w->bqkv = buf(3 * C, 0.02f, 0);
    w->wproj = buf((size_t)C * C, 0.02f, 0), w->bproj = buf(C, 0.02f, 0);
    w->ln2g = buf(C, 0.1f, 1.0f), w->ln2b = buf(C, 0.1f, 0);
    w->wfc = buf((size_t)C * FF, 0.04f, 0), w->bfc = buf(FF, 0.02f, 0);
    w->wfp = buf((size_t)FF * C, 0.02f, 0), w->bfp = buf(C, 0.02f, 0);
    if (!w->ln1g || !w->ln1b || !w->wqkv || !w->bqkv || !w->wproj || !w->bproj || !w->ln2g ||
        !w->ln2b || !w->wfc || !w->bfc || !w->wfp || !w->bfp)
      return -1;
  }
  m->lnfg = buf(C, 0.1f, 1.0f), m->lnfb = buf(C, 0.1f, 0);
  size_t t = (size_t)tmax;
  m->xa = buf(t * C, 1, 0), m->xb = buf(t * C, 1, 0), m->ln = buf(t * C, 1, 0);
  m->qkv = buf(t * 3 * C, 1, 0), m->att = buf(t * C, 1, 0), m->fch = buf(t * FF, 1, 0);
  m->scores = buf((size_t)NH * t * t, 1, 0);
  m->kc = buf((size_t)layers * NH * t * HD, 0, 0), m->vc = buf((size_t)layers * NH * t * HD, 0, 0);
  return m->xa && m->xb && m->ln && m->qkv && m->att && m->fch && m->scores && m->kc && m->vc &&
                 m->lnfg && m->lnfb
             ? 0
             : -1;
}

static void model_free(model *m) {
  for (int i = 0; m->l && i < m->layers; i++) {
    layer_w *w = &m->l[i];
    float *p[] = {w->ln1g, w->ln1b, w->wqkv, w->bqkv, w->wproj, w->bproj,
                  w->ln2g, w->ln2b, w->wfc,  w->bfc,  w->wfp,   w->bfp};
    for (size_t j = 0; j < sizeof p / sizeof p[0]; j++) free(p[j]);
  }
  free(m->l);
  float *p[] = {m->lnfg, m->lnfb, m->xa, m->xb, m->ln, m->qkv, m->att, m->fch, m->scores, m->kc, m->vc};
  for (size_t j = 0; j < sizeof p / sizeof p[0]; j++) free(p[j]);
}

/* ---- the tlm path ------------------------------------------------------------ */

static tlm_tensor view(float *data, int nd, const int64_t *shape, const int64_t *strides) {
  tlm_tensor t;
  memset(&t, 0, sizeof t);
  t.dtype = TLM_F32;
  t.ndim = nd;
  t.data = data;
  memcpy(t.shape, shape, sizeof(int64_t) * (size_t)nd);
  memcpy(t.strides, strides, sizeof(int64_t) * (size_t)nd);
  return t;
}

static tlm_tensor dense(float *data, int nd, const int64_t *shape) {
  tlm_tensor t;
  tlm_tensor_dense(&t, TLM_F32, nd, shape, data);
  return t;
}

#define RUN(...)                                                                  \
  do {                                                                            \
    if (tlm_run(__VA_ARGS__) != TLM_OK) {                                         \
      fprintf(stderr, "llm_serving: tlm_run failed: %s\n", tlm_last_error(rt));   \
      return -1;                                                                  \
    }                                                                             \
  } while (0)

/* y (T, n) = x (T, k) W (k, n) + b, optional GELU, optional + residual */
static int linear(tlm_runtime *rt, float *y, const float *x, const float *w, const float *b,
                  int64_t T, int64_t k, int64_t n, int gelu, const float *res) {
  tlm_op op = tlm_op_matmul();
  op.u.matmul.has_bias = 1;
  op.u.matmul.activation = gelu ? TLM_ACT_GELU_TANH : TLM_ACT_NONE;
  op.u.matmul.has_residual = res != NULL;
  tlm_tensor in[4] = {dense((float *)x, 2, (int64_t[]){T, k}), dense((float *)w, 2, (int64_t[]){k, n}),
                      dense((float *)b, 1, (int64_t[]){n})};
  if (res) in[3] = dense((float *)res, 2, (int64_t[]){T, n});
  tlm_tensor out = dense(y, 2, (int64_t[]){T, n});
  RUN(rt, &op, in, res ? 4 : 3, &out, 1);
  return 0;
}

static int layernorm(tlm_runtime *rt, float *y, const float *x, const float *g, const float *b,
                     int64_t T) {
  tlm_op op = tlm_op_rownorm(TLM_OP_LAYERNORM);
  tlm_tensor in[3] = {dense((float *)x, 2, (int64_t[]){T, C}), dense((float *)g, 1, (int64_t[]){C}),
                      dense((float *)b, 1, (int64_t[]){C})};
  tlm_tensor out = dense(y, 2, (int64_t[]){T, C});
  RUN(rt, &op, in, 3, &out, 1);
  return 0;
}

/* one step of T new tokens at position pos; the residual stream is m->xa */
static int forward_tlm(tlm_runtime *rt, model *m, int64_t T, int64_t pos) {
  int64_t L = pos + T, tm = m->tmax;
  for (int l = 0; l < m->layers; l++) {
    layer_w *w = &m->l[l];
    float *kc = m->kc + (size_t)l * NH * tm * HD, *vc = m->vc + (size_t)l * NH * tm * HD;
    if (layernorm(rt, m->ln, m->xa, w->ln1g, w->ln1b, T) ||
        linear(rt, m->qkv, m->ln, w->wqkv, w->bqkv, T, C, 3 * C, 0, NULL))
      return -1;
    for (int64_t t = 0; t < T; t++) /* append K and V to the cache */
      for (int h = 0; h < NH; h++) {
        memcpy(kc + ((size_t)h * tm + pos + t) * HD, m->qkv + t * 3 * C + C + h * HD, HD * 4);
        memcpy(vc + ((size_t)h * tm + pos + t) * HD, m->qkv + t * 3 * C + 2 * C + h * HD, HD * 4);
      }
    /* scores (NH, T, L) = Q (NH, T, HD) K^T, K stored (NH, L, HD) */
    tlm_op op = tlm_op_matmul();
    op.u.matmul.transpose_b = 1;
    tlm_tensor in[2] = {view(m->qkv, 3, (int64_t[]){NH, T, HD}, (int64_t[]){HD, 3 * C, 1}),
                        view(kc, 3, (int64_t[]){NH, L, HD}, (int64_t[]){tm * HD, HD, 1})};
    tlm_tensor out = dense(m->scores, 3, (int64_t[]){NH, T, L});
    RUN(rt, &op, in, 2, &out, 1);
    tlm_op sm = tlm_op_rownorm(TLM_OP_SOFTMAX);
    sm.u.rownorm.causal = 1;
    sm.u.rownorm.scale = 1.0f / sqrtf((float)HD);
    RUN(rt, &sm, &out, 1, &out, 1); /* in place */
    /* att (T, C) viewed as (NH, T, HD) = P (NH, T, L) V (NH, L, HD) */
    op = tlm_op_matmul();
    tlm_tensor in2[2] = {out, view(vc, 3, (int64_t[]){NH, L, HD}, (int64_t[]){tm * HD, HD, 1})};
    tlm_tensor o2 = view(m->att, 3, (int64_t[]){NH, T, HD}, (int64_t[]){HD, C, 1});
    RUN(rt, &op, in2, 2, &o2, 1);
    if (linear(rt, m->xb, m->att, w->wproj, w->bproj, T, C, C, 0, m->xa) ||
        layernorm(rt, m->ln, m->xb, w->ln2g, w->ln2b, T) ||
        linear(rt, m->fch, m->ln, w->wfc, w->bfc, T, C, FF, 1, NULL) ||
        linear(rt, m->xa, m->fch, w->wfp, w->bfp, T, FF, C, 0, m->xb))
      return -1;
  }
  return layernorm(rt, m->ln, m->xa, m->lnfg, m->lnfb, T);
}

/* ---- the baseline: oneDNN matmuls, plain C LayerNorm and softmax --------------- */

#ifdef TLM_HAVE_DNNL
static void layernorm_c(float *y, const float *x, const float *g, const float *b, int64_t T) {
  for (int64_t t = 0; t < T; t++) {
    const float *r = x + t * C;
    float mean = 0, var = 0;
    for (int c = 0; c < C; c++) mean += r[c];
    mean /= C;
    for (int c = 0; c < C; c++) var += (r[c] - mean) * (r[c] - mean);
    float rs = 1.0f / sqrtf(var / C + 1e-5f);
    for (int c = 0; c < C; c++) y[t * C + c] = (r[c] - mean) * rs * g[c] + b[c];
  }
}

static void softmax_causal_c(float *s, int64_t rows, int64_t T, int64_t L, float scale) {
  for (int64_t r = 0; r < rows; r++) {
    float *p = s + r * L;
    int64_t lim = r % T + L - T + 1;
    float mx = -INFINITY, sum = 0;
    for (int64_t c = 0; c < lim; c++) mx = fmaxf(mx, p[c] * scale);
    for (int64_t c = 0; c < lim; c++) sum += (p[c] = expf(p[c] * scale - mx));
    for (int64_t c = 0; c < L; c++) p[c] = c < lim ? p[c] / sum : 0.0f;
  }
}

static int lin_dnnl(dnnl_baseline *db, float *y, const float *x, const float *w, const float *b,
                    int64_t T, int64_t k, int64_t n, int gelu, const float *res) {
  if (res) memcpy(y, res, sizeof(float) * (size_t)(T * n)); /* sum post-op adds into y */
  return dnnl_baseline_matmul(db, 1, T, k, n, x, (int64_t[]){T * k, k, 1}, w,
                              (int64_t[]){k * n, n, 1}, b, gelu, res != NULL, y,
                              (int64_t[]){T * n, n, 1});
}

static int forward_dnnl(dnnl_baseline *db, model *m, int64_t T, int64_t pos) {
  int64_t L = pos + T, tm = m->tmax;
  for (int l = 0; l < m->layers; l++) {
    layer_w *w = &m->l[l];
    float *kc = m->kc + (size_t)l * NH * tm * HD, *vc = m->vc + (size_t)l * NH * tm * HD;
    layernorm_c(m->ln, m->xa, w->ln1g, w->ln1b, T);
    if (lin_dnnl(db, m->qkv, m->ln, w->wqkv, w->bqkv, T, C, 3 * C, 0, NULL)) return -1;
    for (int64_t t = 0; t < T; t++)
      for (int h = 0; h < NH; h++) {
        memcpy(kc + ((size_t)h * tm + pos + t) * HD, m->qkv + t * 3 * C + C + h * HD, HD * 4);
        memcpy(vc + ((size_t)h * tm + pos + t) * HD, m->qkv + t * 3 * C + 2 * C + h * HD, HD * 4);
      }
    /* K^T as a strided (NH, HD, L) view of the cache */
    if (dnnl_baseline_matmul(db, NH, T, HD, L, m->qkv, (int64_t[]){HD, 3 * C, 1}, kc,
                             (int64_t[]){tm * HD, 1, HD}, NULL, 0, 0, m->scores,
                             (int64_t[]){T * L, L, 1}))
      return -1;
    softmax_causal_c(m->scores, NH * T, T, L, 1.0f / sqrtf((float)HD));
    if (dnnl_baseline_matmul(db, NH, T, L, HD, m->scores, (int64_t[]){T * L, L, 1}, vc,
                             (int64_t[]){tm * HD, HD, 1}, NULL, 0, 0, m->att,
                             (int64_t[]){HD, C, 1}))
      return -1;
    if (lin_dnnl(db, m->xb, m->att, w->wproj, w->bproj, T, C, C, 0, m->xa)) return -1;
    layernorm_c(m->ln, m->xb, w->ln2g, w->ln2b, T);
    if (lin_dnnl(db, m->fch, m->ln, w->wfc, w->bfc, T, C, FF, 1, NULL) ||
        lin_dnnl(db, m->xa, m->fch, w->wfp, w->bfp, T, FF, C, 0, m->xb))
      return -1;
  }
  layernorm_c(m->ln, m->xa, m->lnfg, m->lnfb, T);
  return 0;
}
#endif

/* ---- replay ------------------------------------------------------------------------- */

typedef struct replay_result {
  double wall_ms, flops;
  double *lat;     /* per request, ms */
  float *sampled;  /* final hidden state (last token) of every 8th request */
  long tokens, steps;
  int failed;
} replay_result;

static double step_flops(int layers, int64_t T, int64_t L) {
  double lin = 2.0 * (double)T * (C * 3.0 * C + C * (double)C + 2.0 * C * FF);
  double att = 2.0 * 2.0 * NH * (double)T * (double)L * HD;
  return layers * (lin + att);
}

static void replay(tlm_runtime *rt, void *db, model *m, const int *ctx, int nreq, int steps,
                   replay_result *r) {
  double t_start = now_ms();
  for (int q = 0; q < nreq && !r->failed; q++) {
    double t0 = now_ms();
    int64_t pos = 0;
    for (int s = 0; s <= steps && !r->failed; s++) {
      int64_t T = s == 0 ? ctx[q] : 1; /* prefill, then decode */
      /* the tokens' embeddings: a fixed pattern per request and position */
      for (int64_t t = 0; t < T; t++)
        for (int c = 0; c < C; c++)
          m->xa[t * C + c] = sinf(0.01f * (float)((pos + t) * 31 + c) + (float)q);
      int bad;
#ifdef TLM_HAVE_DNNL
      bad = db ? forward_dnnl(db, m, T, pos) : forward_tlm(rt, m, T, pos);
#else
      (void)db;
      bad = forward_tlm(rt, m, T, pos);
#endif
      if (bad) r->failed = 1;
      r->flops += step_flops(m->layers, T, pos + T);
      r->tokens += T;
      r->steps++;
      pos += T;
      if (s == steps && q % 8 == 0)
        memcpy(r->sampled + (size_t)(q / 8) * C, m->ln + (T - 1) * C, C * sizeof(float));
    }
    r->lat[q] = now_ms() - t0;
  }
  r->wall_ms = now_ms() - t_start;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  const char *trace = NULL, *json = NULL;
  int requests = 24, max_context = 256, decode_steps = 4, threads = -1, layers = 12, baseline = 1;
  int prepack = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int more = i + 1 < argc;
    if (!strcmp(a, "--trace") && more) trace = argv[++i];
    else if (!strcmp(a, "--requests") && more) requests = atoi(argv[++i]);
    else if (!strcmp(a, "--max-context") && more) max_context = atoi(argv[++i]);
    else if (!strcmp(a, "--decode-steps") && more) decode_steps = atoi(argv[++i]);
    else if (!strcmp(a, "--layers") && more) layers = atoi(argv[++i]);
    else if (!strcmp(a, "--threads") && more) threads = atoi(argv[++i]);
    else if (!strcmp(a, "--json") && more) json = argv[++i];
    else if (!strcmp(a, "--no-baseline")) baseline = 0;
    else if (!strcmp(a, "--no-prepack")) prepack = 0;
    else {
      fprintf(stderr,
              "usage: %s --trace FILE [--requests N] [--max-context N] [--decode-steps N]\n"
              "          [--layers N] [--threads N] [--json FILE] [--no-baseline] [--no-prepack]\n",
              argv[0]);
      return 2;
    }
  }
  if (!trace || requests < 1 || max_context < 1 || decode_steps < 0 || layers < 1) {
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
#ifdef TLM_HAVE_DNNL
  /* oneDNN's OpenMP runtime: the same threads (re-runs the program once) */
  if (dnnl_baseline_pin_threads(argv, nthreads))
    fprintf(stderr, "llm_serving: could not set OMP_NUM_THREADS=%s for oneDNN\n", nt);
#endif
  tlm_runtime *rt;
  if (tlm_create(&cfg, &rt) != TLM_OK) {
    fprintf(stderr, "llm_serving: %s\n", tlm_last_error(NULL));
    free(ctx);
    return 1;
  }
  model m;
  if (model_init(&m, layers, max_context + decode_steps)) {
    fprintf(stderr, "llm_serving: out of memory for the model\n");
    return 1;
  }
  for (int i = 0; prepack && i < layers; i++) {
    const layer_w *w = &m.l[i];
    const float *mats[4] = {w->wqkv, w->wproj, w->wfc, w->wfp};
    const size_t n[4] = {(size_t)C * 3 * C, (size_t)C * C, (size_t)C * FF, (size_t)FF * C};
    for (int j = 0; j < 4; j++)
      if (tlm_constant_add(rt, mats[j], n[j] * sizeof(float)) != TLM_OK) {
        fprintf(stderr, "llm_serving: %s\n", tlm_last_error(rt));
        return 1;
      }
  }
  int nsamp = (nreq + 7) / 8;
  replay_result t = {0}, d = {0};
  t.lat = calloc((size_t)nreq, sizeof(double)), d.lat = calloc((size_t)nreq, sizeof(double));
  t.sampled = calloc((size_t)nsamp * C, sizeof(float));
  d.sampled = calloc((size_t)nsamp * C, sizeof(float));
  replay(rt, NULL, &m, ctx, nreq, decode_steps, &t);
  tlm_stats s;
  tlm_get_stats(rt, &s);
  char tdesc[400];
  tlm_describe_target(rt, tdesc, sizeof tdesc);
  for (char *q = tdesc; *q; q++)
    if (*q == '"' || *q == '\\' || (unsigned char)*q < 0x20) *q = '?'; /* JSON-safe */
  const char *base_isa = "none";
#ifdef TLM_HAVE_DNNL
  base_isa = dnnl_baseline_isa();
#endif
  int have_baseline = 0, dnnl_prims = 0;
  double dnnl_create_ms = 0, diff = 0;
#ifdef TLM_HAVE_DNNL
  dnnl_baseline *db = baseline && !t.failed ? dnnl_baseline_create() : NULL;
  if (db) {
    replay(rt, db, &m, ctx, nreq, decode_steps, &d);
    dnnl_prims = dnnl_baseline_primitives(db, &dnnl_create_ms);
    have_baseline = !d.failed;
    dnnl_baseline_destroy(db);
    for (size_t i = 0; i < (size_t)nsamp * C; i++) {
      double e = fabs((double)t.sampled[i] - d.sampled[i]) / (1.0 + fabs((double)d.sampled[i]));
      if (!(e <= diff)) diff = isnan(e) ? INFINITY : e;
    }
  }
#else
  (void)baseline;
#endif
  qsort(t.lat, (size_t)nreq, sizeof(double), cmp_double);
  double p50 = t.lat[nreq / 2], p99 = t.lat[(nreq * 99) / 100 < nreq ? (nreq * 99) / 100 : nreq - 1];
  double dc = s.schedule_ms + s.compile_ms + s.disk_load_ms;
  int ok = !t.failed && (!have_baseline || diff <= 1e-3);
  printf("\nllm_serving report (GPT-2-124M dimensions, %d layers, trace %s)\n", layers, trace);
  printf("  requests            %d (prefill capped at %d tokens, %d decode steps each)\n", nreq,
         max_context, decode_steps);
  printf("  tokens              %ld in %ld steps\n", t.tokens, t.steps);
  printf("  tlm_run calls       %llu on %d threads\n", (unsigned long long)s.runs, nthreads);
  printf("  target              %s\n", tdesc);
  printf("  baseline ISA        oneDNN %s\n", base_isa);
  printf("  weights             %s\n",
         prepack ? "declared constant: packed once by tlm (oneDNN reads them as given)"
                 : "read as given by both (--no-prepack)");
  printf("  packed weights      %llu copies, %.1f MiB\n", (unsigned long long)s.prepacks,
         (double)s.prepacked_bytes / (1 << 20));
  printf("  wall time           %.1f ms\n", t.wall_ms);
  printf("  tokens/s            %.0f\n", t.tokens / (t.wall_ms * 1e-3));
  printf("  GFLOPS              %.1f\n", t.flops / (t.wall_ms * 1e6));
  printf("  request latency     p50 %.1f ms, p99 %.1f ms\n", p50, p99);
  printf("  new shapes          %llu (cache misses)\n", (unsigned long long)s.cache_misses);
  printf("  schedules           %llu decoded by the model, %llu by the rule, %llu from disk "
         "(%.1f ms)\n",
         (unsigned long long)s.decodes, (unsigned long long)(s.schedules - s.decodes),
         (unsigned long long)s.disk_plan_hits, s.schedule_ms);
  printf("  kernels             %llu compiled (%.1f ms), %llu loaded from disk (%.1f ms)\n",
         (unsigned long long)s.compiles, s.compile_ms, (unsigned long long)s.disk_kernel_hits,
         s.disk_load_ms);
  printf("  cache hits          %llu\n", (unsigned long long)s.cache_hits);
  printf("  decode + compile    %.1f%% of wall time (disk loads included)\n", 100.0 * dc / t.wall_ms);
  if (have_baseline) {
    printf("  oneDNN + C baseline %.1f ms wall, %.0f tokens/s (%d primitives, %.1f ms creating "
           "them)\n",
           d.wall_ms, d.tokens / (d.wall_ms * 1e-3), dnnl_prims, dnnl_create_ms);
    printf("  speed vs baseline   %.2fx (baseline wall / tlm wall; > 1: tlm faster)\n",
           d.wall_ms / t.wall_ms);
    printf("  outputs vs baseline max rel diff %.2g on %d sampled requests: %s\n", diff, nsamp,
           diff <= 1e-3 ? "PASS" : "FAIL");
  }
  if (json) {
    FILE *jf = fopen(json, "w");
    if (jf) {
      fprintf(jf,
              "{\"model\": \"gpt2-124m\", \"target\": \"%s\", \"onednn_isa\": \"%s\", "
              "\"layers\": %d, \"requests\": %d, \"tokens\": %ld, "
              "\"steps\": %ld, \"tlm_run_calls\": %llu, \"threads\": %d, \"wall_ms\": %.3f, "
              "\"tokens_per_s\": %.1f, \"gflops\": %.2f, \"latency_p50_ms\": %.3f, "
              "\"latency_p99_ms\": %.3f, \"cache_misses\": %llu, \"decodes\": %llu, "
              "\"compiles\": %llu, \"disk_kernel_loads\": %llu, \"compile_ms\": %.3f, "
              "\"schedule_ms\": %.3f, \"disk_load_ms\": %.3f, \"cache_hits\": %llu, "
              "\"decode_compile_share\": %.4f, \"tlm_weights_constant\": %s, "
              "\"prepacked_copies\": %llu, \"prepacked_bytes\": %llu",
              tdesc, base_isa, layers, nreq, t.tokens, t.steps, (unsigned long long)s.runs, nthreads, t.wall_ms,
              t.tokens / (t.wall_ms * 1e-3), t.flops / (t.wall_ms * 1e6), p50, p99,
              (unsigned long long)s.cache_misses, (unsigned long long)s.decodes,
              (unsigned long long)s.compiles, (unsigned long long)s.disk_kernel_hits, s.compile_ms,
              s.schedule_ms, s.disk_load_ms, (unsigned long long)s.cache_hits, dc / t.wall_ms,
              prepack ? "true" : "false", (unsigned long long)s.prepacks,
              (unsigned long long)s.prepacked_bytes);
      if (have_baseline)
        fprintf(jf,
                ", \"baseline_wall_ms\": %.3f, \"baseline_tokens_per_s\": %.1f, "
                "\"baseline_primitive_create_ms\": %.3f, \"speed_ratio_vs_baseline\": %.4f, "
                "\"max_rel_diff_vs_baseline\": %.3g",
                d.wall_ms, d.tokens / (d.wall_ms * 1e-3), dnnl_create_ms, d.wall_ms / t.wall_ms,
                diff);
      fprintf(jf, "}\n");
      fclose(jf);
    }
  }
  tlm_destroy(rt); /* first: the weights are still declared constant */
  model_free(&m);
  free(t.lat), free(d.lat), free(t.sampled), free(d.sampled), free(ctx);
  return ok ? 0 : 1;
}
