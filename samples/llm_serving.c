/* llm_serving.c - a decoder-only transformer served through tlm_run(),
 * replaying an LLM-serving trace.
 *
 * Model: any decoder of ../shared/workloads/models.json by name (--model,
 * default gpt2-124m; --models-json FILE), built from the file's fields:
 *   norm       "layernorm" (x - mean) / std * g + b, or "rmsnorm" x / rms * g
 *   act        "gelu_tanh" (an MLP of fc, GELU, proj) or "silu_gated"
 *              (SwiGLU: silu(x Wg) * (x Wu), then Wd)
 *   bias       biases on every linear layer, or none
 *   qkv_fused  one (C, Q + K + V) weight matrix, or three
 *   n_kv_head  key/value heads; fewer than n_head is grouped-query
 *              attention (each K/V head serves n_head / n_kv_head query
 *              heads, through batch broadcasting in the attention matmuls)
 *   pos        "rope" (rotary embeddings on Q and K, NeoX pairs, base
 *              10000) or "learned"; when absent, rope for rmsnorm models
 *              (the LLaMA family) and learned for the others (GPT-2)
 * with fewer layers when they would not fit (--layers N; by default as many
 * as fit --max-weights-gib, 3 GiB, of weights) and weights from a fixed
 * seed. --kv-heads N overrides n_kv_head (e.g. llama-7b with 8 K/V heads,
 * LLaMA-2-70B's grouping). Learned position embeddings are not modelled:
 * the tokens' embeddings are a fixed pattern of request and position.
 *
 * Each request of the trace (CSV with a ContextTokens column, e.g.
 * ../shared/workloads/traces/AzureLLMInferenceTrace_conv.csv) runs a
 * prefill of its context (capped by --max-context), then --decode-steps
 * decode steps of one token with a KV cache. Every matmul (Q, K, V or QKV,
 * projections, MLP), the attention (one fused kernel; --attention split:
 * scores Q K^T, a causal scaled softmax and P V), every norm, rotary
 * embedding and SwiGLU is a tlm_run() call; bias, GELU and the residual
 * adds are fused epilogues.
 *
 * Baseline in the same run: the same computation with oneDNN matmul
 * primitives (bias, GELU and sum post-ops; one primitive per distinct
 * problem, created on first use) and plain C for the norms, softmax, RoPE
 * and SwiGLU, on the same number of threads. The final hidden states of
 * sampled requests are compared.
 *
 * Usage: llm_serving --trace FILE [--model NAME] [--models-json FILE]
 *                    [--requests N] [--max-context N] [--decode-steps N]
 *                    [--layers N] [--kv-heads N] [--max-weights-gib G]
 *                    [--threads N] [--json FILE] [--no-baseline] [--no-prepack]
 *
 * The weight matrices are declared constant to tlm (tlm_constant_add), as a
 * serving engine would: tlm packs each once, on first use, in its kernels'
 * panel layout. --no-prepack reads them as given on every call. The oneDNN
 * baseline's matmul primitives read the same plain (K, N) weights either
 * way.
 */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json_report.h"
#include "tlm.h"

#ifdef TLM_HAVE_DNNL
#include "baseline_dnnl.h"
#endif

/* the architecture, from models.json */
typedef struct arch {
  char name[64];
  int layers, nh, nkv, C, HD, FF;
  int rms;   /* rmsnorm (1) or layernorm (0) */
  int gated; /* SwiGLU MLP (1) or GELU-tanh (0) */
  int fused; /* one QKV matrix */
  int bias;
  int rope;
} arch;

/* widths: Q (nh heads), K and V (nkv heads each), the QKV row */
#define QW(a) ((int64_t)(a)->nh * (a)->HD)
#define KW(a) ((int64_t)(a)->nkv * (a)->HD)
#define QKVW(a) (QW(a) + 2 * KW(a))

typedef struct layer_w {
  float *n1g, *n1b, *n2g, *n2b;
  float *wq, *wk, *wv, *bq, *bk, *bv; /* fused: wq is (C, QKVW), bq (QKVW), wk = wv = NULL */
  float *wo, *bo;
  float *w1, *b1, *w3, *w2, *b2; /* MLP: w1 (C, FF) up or gate, w3 (C, FF) up (gated), w2 (FF, C) */
} layer_w;

typedef struct model {
  arch a;
  int tmax;
  layer_w *l;
  float *nfg, *nfb;
  float *rope_tab; /* (tmax, HD): cos for i < HD/2, then sin */
  /* activations (tmax rows) and the KV cache (layers, nkv, tmax, HD) x 2 */
  float *xa, *xb, *ln, *qkv, *kb, *vb, *att, *scores, *h1, *h3, *kc, *vc;
  float *gq, *go; /* baseline: a K/V group's queries and outputs, (G * tmax, HD) */
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

static int g_oom;
static float *buf(size_t n, float scale, float offset) {
  float *p = malloc(n * sizeof(float));
  if (p)
    for (size_t i = 0; i < n; i++) p[i] = offset + scale * frand();
  else
    g_oom = 1;
  return p;
}

/* ---- the architecture ---------------------------------------------------------- */

static int json_int(const cJSON *o, const char *k, int *v) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  if (!cJSON_IsNumber(x) || x->valuedouble < 1 || x->valuedouble > 1e6) return -1;
  *v = (int)x->valuedouble;
  return 0;
}

static const char *json_str(const cJSON *o, const char *k) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(x) ? x->valuestring : NULL;
}

/* Reads model `name` of a models.json; 0, or -1 with a message on stderr. */
static int arch_load(arch *a, const char *path, const char *name) {
  memset(a, 0, sizeof *a);
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "llm_serving: cannot open %s\n", path);
    return -1;
  }
  char *text = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n + 4096 + 1 > cap) {
      char *t = realloc(text, cap = cap * 2 + 8192);
      if (!t) break;
      text = t;
    }
    size_t r = fread(text + n, 1, 4096, f);
    n += r;
    if (r < 4096) break;
  }
  fclose(f);
  if (!text) return -1;
  text[n] = 0;
  cJSON *root = cJSON_Parse(text);
  free(text);
  const cJSON *m = root ? cJSON_GetObjectItemCaseSensitive(root, name) : NULL;
  int rc = -1;
  if (!root) {
    fprintf(stderr, "llm_serving: %s is not JSON\n", path);
  } else if (!cJSON_IsObject(m)) {
    fprintf(stderr, "llm_serving: no model \"%s\" in %s; it has:", name, path);
    for (const cJSON *c = root->child; c; c = c->next)
      if (c->string && c->string[0] != '_') fprintf(stderr, " %s", c->string);
    fprintf(stderr, "\n");
  } else if (json_int(m, "n_layer", &a->layers) || json_int(m, "n_head", &a->nh) ||
             json_int(m, "d_model", &a->C) || json_int(m, "d_ff", &a->FF)) {
    fprintf(stderr, "llm_serving: %s: n_layer, n_head, d_model and d_ff must be positive "
                    "integers\n", name);
  } else {
    if (json_int(m, "n_kv_head", &a->nkv)) a->nkv = a->nh;
    const char *norm = json_str(m, "norm"), *act = json_str(m, "act"), *pos = json_str(m, "pos");
    const cJSON *fu = cJSON_GetObjectItemCaseSensitive(m, "qkv_fused");
    const cJSON *bi = cJSON_GetObjectItemCaseSensitive(m, "bias");
    a->rms = norm && !strcmp(norm, "rmsnorm");
    a->gated = act && !strcmp(act, "silu_gated");
    a->fused = cJSON_IsTrue(fu);
    a->bias = !cJSON_IsFalse(bi);
    a->rope = pos ? !strcmp(pos, "rope") : a->rms;
    snprintf(a->name, sizeof a->name, "%s", name);
    if (norm && strcmp(norm, "rmsnorm") && strcmp(norm, "layernorm"))
      fprintf(stderr, "llm_serving: %s: unknown norm \"%s\"\n", name, norm);
    else if (act && strcmp(act, "silu_gated") && strcmp(act, "gelu_tanh") && strcmp(act, "gelu"))
      fprintf(stderr, "llm_serving: %s: unknown act \"%s\"\n", name, act);
    else if (a->C % a->nh || (a->C / a->nh) % 2)
      fprintf(stderr, "llm_serving: %s: d_model %d is not n_head %d x an even head size\n", name,
              a->C, a->nh);
    else
      rc = 0;
    a->HD = a->C / a->nh;
  }
  cJSON_Delete(root);
  return rc;
}

static double layer_weight_bytes(const arch *a) {
  double C = a->C, F = a->FF;
  return 4.0 * (C * (double)QKVW(a) + (double)QW(a) * C + (a->gated ? 3.0 : 2.0) * C * F);
}

/* ---- weights and buffers --------------------------------------------------------------- */

static int model_init(model *m, const arch *a, int tmax) {
  memset(m, 0, sizeof *m);
  m->a = *a;
  m->tmax = tmax;
  m->l = calloc((size_t)a->layers, sizeof *m->l);
  if (!m->l) return -1;
  size_t C = (size_t)a->C, F = (size_t)a->FF;
  /* weights ~ U(-1, 1) / sqrt(fan in), so activations keep their scale */
  float sc = 1.7f / sqrtf((float)C), sf = 1.7f / sqrtf((float)F), bs = a->bias ? 0.02f : 0;
  for (int i = 0; i < a->layers; i++) {
    layer_w *w = &m->l[i];
    w->n1g = buf(C, 0.1f, 1.0f), w->n2g = buf(C, 0.1f, 1.0f);
    if (!a->rms) w->n1b = buf(C, 0.1f, 0), w->n2b = buf(C, 0.1f, 0);
    if (a->fused) {
      w->wq = buf(C * (size_t)QKVW(a), sc, 0);
      if (a->bias) w->bq = buf((size_t)QKVW(a), bs, 0);
    } else {
      w->wq = buf(C * (size_t)QW(a), sc, 0), w->wk = buf(C * (size_t)KW(a), sc, 0);
      w->wv = buf(C * (size_t)KW(a), sc, 0);
      if (a->bias)
        w->bq = buf((size_t)QW(a), bs, 0), w->bk = buf((size_t)KW(a), bs, 0),
        w->bv = buf((size_t)KW(a), bs, 0);
    }
    w->wo = buf((size_t)QW(a) * C, 0.5f * sc, 0);
    w->w1 = buf(C * F, sc, 0);
    if (a->gated) w->w3 = buf(C * F, sc, 0);
    w->w2 = buf(F * C, 0.5f * sf, 0);
    if (a->bias) w->bo = buf(C, bs, 0), w->b1 = buf(F, bs, 0), w->b2 = buf(C, bs, 0);
  }
  m->nfg = buf(C, 0.1f, 1.0f);
  if (!a->rms) m->nfb = buf(C, 0.1f, 0);
  size_t t = (size_t)tmax, HD = (size_t)a->HD;
  if (a->rope) {
    m->rope_tab = buf(t * HD, 0, 0);
    for (size_t p = 0; p < t && m->rope_tab; p++)
      for (size_t i = 0; i < HD / 2; i++) {
        double th = (double)p * pow(10000.0, -2.0 * (double)i / (double)HD);
        m->rope_tab[p * HD + i] = (float)cos(th);
        m->rope_tab[p * HD + HD / 2 + i] = (float)sin(th);
      }
  }
  m->xa = buf(t * C, 1, 0), m->xb = buf(t * C, 1, 0), m->ln = buf(t * C, 1, 0);
  m->qkv = buf(t * (size_t)(a->fused ? QKVW(a) : QW(a)), 1, 0);
  if (!a->fused) m->kb = buf(t * (size_t)KW(a), 1, 0), m->vb = buf(t * (size_t)KW(a), 1, 0);
  m->att = buf(t * (size_t)QW(a), 1, 0), m->h1 = buf(t * F, 1, 0);
  if (a->gated) m->h3 = buf(t * F, 1, 0);
  m->scores = buf((size_t)a->nh * t * t, 1, 0);
  size_t cache = (size_t)a->layers * (size_t)a->nkv * t * HD;
  m->kc = buf(cache, 0, 0), m->vc = buf(cache, 0, 0);
  int G = a->nh / a->nkv;
  if (G > 1) m->gq = buf((size_t)G * t * HD, 0, 0), m->go = buf((size_t)G * t * HD, 0, 0);
  return g_oom ? -1 : 0;
}

static void model_free(model *m) {
  for (int i = 0; m->l && i < m->a.layers; i++) {
    layer_w *w = &m->l[i];
    float *p[] = {w->n1g, w->n1b, w->n2g, w->n2b, w->wq, w->wk, w->wv, w->bq, w->bk,
                  w->bv,  w->wo,  w->bo,  w->w1,  w->b1, w->w3, w->w2, w->b2};
    for (size_t j = 0; j < sizeof p / sizeof p[0]; j++) free(p[j]);
  }
  free(m->l);
  float *p[] = {m->nfg, m->nfb, m->rope_tab, m->xa, m->xb, m->ln, m->qkv, m->kb, m->vb,
                m->att, m->scores, m->h1, m->h3, m->kc, m->vc, m->gq, m->go};
  for (size_t j = 0; j < sizeof p / sizeof p[0]; j++) free(p[j]);
}

/* Q, K and V of T tokens: row stride and first element of each */
typedef struct qkv_views {
  float *q, *k, *v;
  int64_t sq, skv;
} qkv_views;

static qkv_views qkv_of(const model *m) {
  const arch *a = &m->a;
  qkv_views r;
  if (a->fused) {
    r.q = m->qkv, r.k = m->qkv + QW(a), r.v = m->qkv + QW(a) + KW(a);
    r.sq = r.skv = QKVW(a);
  } else {
    r.q = m->qkv, r.k = m->kb, r.v = m->vb;
    r.sq = QW(a), r.skv = KW(a);
  }
  return r;
}

/* appends the T new tokens' K and V (nkv heads) to layer l's cache at pos */
static void cache_append(model *m, const qkv_views *v, float *kc, float *vc, int64_t T,
                         int64_t pos) {
  const arch *a = &m->a;
  size_t tm = (size_t)m->tmax, HD = (size_t)a->HD;
  for (int64_t t = 0; t < T; t++)
    for (int h = 0; h < a->nkv; h++) {
      memcpy(kc + ((size_t)h * tm + (size_t)(pos + t)) * HD, v->k + t * v->skv + h * (int64_t)HD,
             HD * 4);
      memcpy(vc + ((size_t)h * tm + (size_t)(pos + t)) * HD, v->v + t * v->skv + h * (int64_t)HD,
             HD * 4);
    }
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

/* Time by operator class of the replay running now: g_op_ms[phase][class],
 * phase 0 prefill, 1 decode; class 0 linear layers, 1 attention (the rest
 * of a step is norms, rotary embeddings, gating and cache appends). */
static double (*g_op_ms)[2];
static int g_phase;
#define TIMED(cls, stmt)                                                          \
  do {                                                                            \
    double t_op_ = now_ms();                                                      \
    stmt;                                                                         \
    g_op_ms[g_phase][cls] += now_ms() - t_op_;                                    \
  } while (0)

/* y (T, n), row stride ldy = x (T, k) W (k, n) [+ b], optional GELU, optional
 * + residual (T, n) */
static int linear(tlm_runtime *rt, float *y, int64_t ldy, const float *x, const float *w,
                  const float *b, int64_t T, int64_t k, int64_t n, int gelu, const float *res) {
  tlm_op op = tlm_op_matmul();
  op.u.matmul.has_bias = b != NULL;
  op.u.matmul.activation = gelu ? TLM_ACT_GELU_TANH : TLM_ACT_NONE;
  op.u.matmul.has_residual = res != NULL;
  tlm_tensor in[4];
  int n_in = 0;
  in[n_in++] = dense((float *)x, 2, (int64_t[]){T, k});
  in[n_in++] = dense((float *)w, 2, (int64_t[]){k, n});
  if (b) in[n_in++] = dense((float *)b, 1, (int64_t[]){n});
  if (res) in[n_in++] = dense((float *)res, 2, (int64_t[]){T, n});
  tlm_tensor out = view(y, 2, (int64_t[]){T, n}, (int64_t[]){ldy, 1});
  TIMED(0, RUN(rt, &op, in, n_in, &out, 1));
  return 0;
}

static int norm(tlm_runtime *rt, const arch *a, float *y, const float *x, const float *g,
                const float *b, int64_t T) {
  tlm_op op = tlm_op_rownorm(a->rms ? TLM_OP_RMSNORM : TLM_OP_LAYERNORM);
  int64_t C = a->C;
  tlm_tensor in[3] = {dense((float *)x, 2, (int64_t[]){T, C}), dense((float *)g, 1, &C),
                      {0}};
  if (!a->rms) in[2] = dense((float *)b, 1, &C);
  tlm_tensor out = dense(y, 2, (int64_t[]){T, C});
  RUN(rt, &op, in, a->rms ? 2 : 3, &out, 1);
  return 0;
}

/* rotary embedding in place on H heads of T tokens (row stride ld) at pos */
static int rope(tlm_runtime *rt, const model *m, float *x, int64_t ld, int H, int64_t T,
                int64_t pos) {
  int64_t HD = m->a.HD;
  tlm_op op = tlm_op_rope(TLM_ROPE_NEOX);
  tlm_tensor xv = view(x, 3, (int64_t[]){T, H, HD}, (int64_t[]){ld, HD, 1});
  tlm_tensor in[2] = {xv, dense(m->rope_tab + pos * HD, 2, (int64_t[]){T, HD})};
  RUN(rt, &op, in, 2, &xv, 1);
  return 0;
}

/* attention as one fused kernel (--attention fused: 1, the default), three
 * (Q K^T, causal softmax, P V: split, 0), or fused for decode steps and
 * three for prefill (decode: 2). Measured on the Xeon of session 16 (warm
 * cache, 2 threads, GPT-2-124M): fused 508-513 tokens/s against 496-497
 * split at contexts up to 1024 with 64 decode steps, 1305-1311 against
 * 1308-1317 for the 24 requests of `make run`; fused builds 22 kernels
 * where split builds 33. */
static int g_fused_attention = 1;

/* one step of T new tokens at position pos; the residual stream is m->xa */
static int forward_tlm(tlm_runtime *rt, model *m, int64_t T, int64_t pos) {
  const arch *a = &m->a;
  int64_t L = pos + T, tm = m->tmax, HD = a->HD, C = a->C, FF = a->FF;
  int64_t nkv = a->nkv, G = a->nh / a->nkv;
  for (int l = 0; l < a->layers; l++) {
    layer_w *w = &m->l[l];
    float *kc = m->kc + (size_t)l * (size_t)(nkv * tm * HD), *vc = m->vc + (size_t)l * (size_t)(nkv * tm * HD);
    qkv_views v = qkv_of(m);
    if (norm(rt, a, m->ln, m->xa, w->n1g, w->n1b, T)) return -1;
    if (a->fused) {
      if (linear(rt, m->qkv, QKVW(a), m->ln, w->wq, w->bq, T, C, QKVW(a), 0, NULL)) return -1;
    } else if (linear(rt, v.q, v.sq, m->ln, w->wq, w->bq, T, C, QW(a), 0, NULL) ||
               linear(rt, v.k, v.skv, m->ln, w->wk, w->bk, T, C, KW(a), 0, NULL) ||
               linear(rt, v.v, v.skv, m->ln, w->wv, w->bv, T, C, KW(a), 0, NULL)) {
      return -1;
    }
    if (a->rope && (rope(rt, m, v.q, v.sq, a->nh, T, pos) || rope(rt, m, v.k, v.skv, a->nkv, T, pos)))
      return -1;
    cache_append(m, &v, kc, vc, T, pos);
    if (g_fused_attention == 1 || (g_fused_attention == 2 && T == 1)) {
      /* one kernel: O (1, nh, T, HD) over the cache's first L rows */
      tlm_op at = tlm_op_attention(1);
      tlm_tensor ain[3] = {
          view(v.q, 4, (int64_t[]){1, a->nh, T, HD}, (int64_t[]){0, HD, v.sq, 1}),
          view(kc, 4, (int64_t[]){1, nkv, L, HD}, (int64_t[]){0, tm * HD, HD, 1}),
          view(vc, 4, (int64_t[]){1, nkv, L, HD}, (int64_t[]){0, tm * HD, HD, 1})};
      tlm_tensor ao = view(m->att, 4, (int64_t[]){1, a->nh, T, HD}, (int64_t[]){0, HD, QW(a), 1});
      TIMED(1, RUN(rt, &at, ain, 3, &ao, 1));
      goto projection;
    }
    /* scores (nkv, G, T, L) = Q (nkv, G, T, HD) K^T, K stored (nkv, 1, L, HD): each
     * K/V head serves its G query heads (batch broadcast) */
    tlm_op op = tlm_op_matmul();
    op.u.matmul.transpose_b = 1;
    tlm_tensor in[2] = {view(v.q, 4, (int64_t[]){nkv, G, T, HD}, (int64_t[]){G * HD, HD, v.sq, 1}),
                        view(kc, 4, (int64_t[]){nkv, 1, L, HD}, (int64_t[]){tm * HD, 0, HD, 1})};
    tlm_tensor out = dense(m->scores, 4, (int64_t[]){nkv, G, T, L});
    TIMED(1, RUN(rt, &op, in, 2, &out, 1));
    tlm_op sm = tlm_op_rownorm(TLM_OP_SOFTMAX);
    sm.u.rownorm.causal = 1;
    sm.u.rownorm.scale = 1.0f / sqrtf((float)HD);
    TIMED(1, RUN(rt, &sm, &out, 1, &out, 1)); /* in place */
    /* att (T, nh HD) viewed as (nkv, G, T, HD) = P (nkv, G, T, L) V (nkv, 1, L, HD) */
    op = tlm_op_matmul();
    tlm_tensor in2[2] = {out, view(vc, 4, (int64_t[]){nkv, 1, L, HD}, (int64_t[]){tm * HD, 0, HD, 1})};
    tlm_tensor o2 = view(m->att, 4, (int64_t[]){nkv, G, T, HD}, (int64_t[]){G * HD, HD, QW(a), 1});
    TIMED(1, RUN(rt, &op, in2, 2, &o2, 1));
  projection:
    if (linear(rt, m->xb, C, m->att, w->wo, w->bo, T, QW(a), C, 0, m->xa) ||
        norm(rt, a, m->ln, m->xb, w->n2g, w->n2b, T))
      return -1;
    if (a->gated) { /* xa = (silu(ln Wg) * (ln Wu)) Wd + xb */
      tlm_op sw = tlm_op_eltwise(TLM_ACT_SILU, TLM_BINARY_MUL);
      tlm_tensor h1 = dense(m->h1, 2, (int64_t[]){T, FF});
      tlm_tensor sin_[2] = {h1, dense(m->h3, 2, (int64_t[]){T, FF})};
      if (linear(rt, m->h1, FF, m->ln, w->w1, NULL, T, C, FF, 0, NULL) ||
          linear(rt, m->h3, FF, m->ln, w->w3, NULL, T, C, FF, 0, NULL))
        return -1;
      RUN(rt, &sw, sin_, 2, &h1, 1);
      if (linear(rt, m->xa, C, m->h1, w->w2, w->b2, T, FF, C, 0, m->xb)) return -1;
    } else if (linear(rt, m->h1, FF, m->ln, w->w1, w->b1, T, C, FF, 1, NULL) ||
               linear(rt, m->xa, C, m->h1, w->w2, w->b2, T, FF, C, 0, m->xb)) {
      return -1;
    }
  }
  return norm(rt, a, m->ln, m->xa, m->nfg, m->nfb, T);
}

/* ---- the baseline: oneDNN matmuls, plain C for the rest ------------------------------ */

#ifdef TLM_HAVE_DNNL
static void norm_c(const arch *a, float *y, const float *x, const float *g, const float *b,
                   int64_t T) {
  int C = a->C;
  for (int64_t t = 0; t < T; t++) {
    const float *r = x + t * C;
    float mean = 0, var = 0;
    if (!a->rms) {
      for (int c = 0; c < C; c++) mean += r[c];
      mean /= C;
    }
    for (int c = 0; c < C; c++) var += (r[c] - mean) * (r[c] - mean);
    float rs = 1.0f / sqrtf(var / C + 1e-5f);
    for (int c = 0; c < C; c++) y[t * C + c] = (r[c] - mean) * rs * g[c] + (a->rms ? 0 : b[c]);
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

static void rope_c(const model *m, float *x, int64_t ld, int H, int64_t T, int64_t pos) {
  int64_t HD = m->a.HD, h2 = HD / 2;
  for (int64_t t = 0; t < T; t++) {
    const float *tb = m->rope_tab + (pos + t) * HD;
    for (int h = 0; h < H; h++) {
      float *r = x + t * ld + h * HD;
      for (int64_t i = 0; i < h2; i++) {
        float xa = r[i], xb = r[i + h2], c = tb[i], s = tb[h2 + i];
        r[i] = xa * c - xb * s;
        r[i + h2] = xb * c + xa * s;
      }
    }
  }
}

static int lin_dnnl(dnnl_baseline *db, float *y, int64_t ldy, const float *x, const float *w,
                    const float *b, int64_t T, int64_t k, int64_t n, int gelu, const float *res) {
  double t0 = now_ms();
  if (res) /* the sum post-op adds into y */
    for (int64_t t = 0; t < T; t++) memcpy(y + t * ldy, res + t * n, sizeof(float) * (size_t)n);
  int rc = dnnl_baseline_matmul(db, 1, T, k, n, x, (int64_t[]){T * k, k, 1}, w,
                                (int64_t[]){k * n, n, 1}, b, gelu, res != NULL, y,
                                (int64_t[]){T * ldy, ldy, 1});
  g_op_ms[g_phase][0] += now_ms() - t0;
  return rc;
}

static int forward_dnnl(dnnl_baseline *db, model *m, int64_t T, int64_t pos) {
  const arch *a = &m->a;
  int64_t L = pos + T, tm = m->tmax, HD = a->HD, C = a->C, FF = a->FF;
  int64_t nkv = a->nkv, G = a->nh / a->nkv;
  float scale = 1.0f / sqrtf((float)HD);
  for (int l = 0; l < a->layers; l++) {
    layer_w *w = &m->l[l];
    float *kc = m->kc + (size_t)l * (size_t)(nkv * tm * HD), *vc = m->vc + (size_t)l * (size_t)(nkv * tm * HD);
    qkv_views v = qkv_of(m);
    norm_c(a, m->ln, m->xa, w->n1g, w->n1b, T);
    if (a->fused) {
      if (lin_dnnl(db, m->qkv, QKVW(a), m->ln, w->wq, w->bq, T, C, QKVW(a), 0, NULL)) return -1;
    } else if (lin_dnnl(db, v.q, v.sq, m->ln, w->wq, w->bq, T, C, QW(a), 0, NULL) ||
               lin_dnnl(db, v.k, v.skv, m->ln, w->wk, w->bk, T, C, KW(a), 0, NULL) ||
               lin_dnnl(db, v.v, v.skv, m->ln, w->wv, w->bv, T, C, KW(a), 0, NULL)) {
      return -1;
    }
    if (a->rope) {
      rope_c(m, v.q, v.sq, a->nh, T, pos);
      rope_c(m, v.k, v.skv, a->nkv, T, pos);
    }
    cache_append(m, &v, kc, vc, T, pos);
    double t_att = now_ms();
    if (G == 1) { /* K^T as a strided (nh, HD, L) view of the cache */
      if (dnnl_baseline_matmul(db, a->nh, T, HD, L, v.q, (int64_t[]){HD, v.sq, 1}, kc,
                               (int64_t[]){tm * HD, 1, HD}, NULL, 0, 0, m->scores,
                               (int64_t[]){T * L, L, 1}))
        return -1;
      softmax_causal_c(m->scores, a->nh * T, T, L, scale);
      if (dnnl_baseline_matmul(db, a->nh, T, L, HD, m->scores, (int64_t[]){T * L, L, 1}, vc,
                               (int64_t[]){tm * HD, HD, 1}, NULL, 0, 0, m->att,
                               (int64_t[]){HD, QW(a), 1}))
        return -1;
    } else { /* per K/V head: its G query heads as one (G T, HD) matrix */
      for (int64_t j = 0; j < nkv; j++) {
        for (int64_t i = 0; i < G; i++)
          for (int64_t t = 0; t < T; t++)
            memcpy(m->gq + (i * T + t) * HD, v.q + t * v.sq + (j * G + i) * HD, HD * 4);
        if (dnnl_baseline_matmul(db, 1, G * T, HD, L, m->gq, (int64_t[]){G * T * HD, HD, 1},
                                 kc + j * tm * HD, (int64_t[]){L * HD, 1, HD}, NULL, 0, 0,
                                 m->scores, (int64_t[]){G * T * L, L, 1}))
          return -1;
        softmax_causal_c(m->scores, G * T, T, L, scale);
        if (dnnl_baseline_matmul(db, 1, G * T, L, HD, m->scores, (int64_t[]){G * T * L, L, 1},
                                 vc + j * tm * HD, (int64_t[]){L * HD, HD, 1}, NULL, 0, 0, m->go,
                                 (int64_t[]){G * T * HD, HD, 1}))
          return -1;
        for (int64_t i = 0; i < G; i++)
          for (int64_t t = 0; t < T; t++)
            memcpy(m->att + t * QW(a) + (j * G + i) * HD, m->go + (i * T + t) * HD, HD * 4);
      }
    }
    g_op_ms[g_phase][1] += now_ms() - t_att;
    if (lin_dnnl(db, m->xb, C, m->att, w->wo, w->bo, T, QW(a), C, 0, m->xa)) return -1;
    norm_c(a, m->ln, m->xb, w->n2g, w->n2b, T);
    if (a->gated) {
      if (lin_dnnl(db, m->h1, FF, m->ln, w->w1, NULL, T, C, FF, 0, NULL) ||
          lin_dnnl(db, m->h3, FF, m->ln, w->w3, NULL, T, C, FF, 0, NULL))
        return -1;
      for (int64_t i = 0; i < T * FF; i++) {
        float g = m->h1[i];
        m->h1[i] = g / (1.0f + expf(-g)) * m->h3[i];
      }
      if (lin_dnnl(db, m->xa, C, m->h1, w->w2, w->b2, T, FF, C, 0, m->xb)) return -1;
    } else if (lin_dnnl(db, m->h1, FF, m->ln, w->w1, w->b1, T, C, FF, 1, NULL) ||
               lin_dnnl(db, m->xa, C, m->h1, w->w2, w->b2, T, FF, C, 0, m->xb)) {
      return -1;
    }
  }
  norm_c(a, m->ln, m->xa, m->nfg, m->nfb, T);
  return 0;
}
#endif

/* ---- replay ------------------------------------------------------------------------- */

typedef struct replay_result {
  double wall_ms, flops;
  double prefill_ms, decode_ms; /* all prefill steps, all decode steps */
  double op_ms[2][2]; /* [prefill, decode][linear layers, attention] */
  double *lat;     /* per request, ms */
  float *sampled;  /* final hidden state (last token) of every 8th request */
  long tokens, steps;
  int failed;
} replay_result;

/* a replay's time by phase and operator class into o, keys after prefix */
static void json_phases(cJSON *o, const char *prefix, const replay_result *r) {
  static const char *const names[6] = {"prefill_ms", "decode_ms", "prefill_linear_ms",
                                       "prefill_attention_ms", "decode_linear_ms",
                                       "decode_attention_ms"};
  const double v[6] = {r->prefill_ms, r->decode_ms, r->op_ms[0][0], r->op_ms[0][1], r->op_ms[1][0], r->op_ms[1][1]};
  for (int i = 0; i < 6; i++) {
    char key[64];
    snprintf(key, sizeof key, "%s%s", prefix, names[i]);
    cJSON_AddNumberToObject(o, key, v[i]);
  }
}

static double step_flops(const arch *a, int64_t T, int64_t L) {
  double C = a->C, F = a->FF;
  double lin = 2.0 * (double)T * (C * (double)QKVW(a) + (double)QW(a) * C + (a->gated ? 3 : 2) * C * F);
  double att = 2.0 * 2.0 * a->nh * (double)T * (double)L * a->HD;
  return a->layers * (lin + att);
}

static void replay(tlm_runtime *rt, void *db, model *m, const int *ctx, int nreq, int steps,
                   replay_result *r) {
  g_op_ms = r->op_ms;
  double t_start = now_ms();
  for (int q = 0; q < nreq && !r->failed; q++) {
    double t0 = now_ms();
    int64_t pos = 0;
    for (int s = 0; s <= steps && !r->failed; s++) {
      int64_t T = s == 0 ? ctx[q] : 1; /* prefill, then decode */
      /* the tokens' embeddings: a fixed pattern per request and position */
      for (int64_t t = 0; t < T; t++)
        for (int c = 0; c < m->a.C; c++)
          m->xa[t * m->a.C + c] = sinf(0.01f * (float)((pos + t) * 31 + c) + (float)q);
      int bad;
      double ts = now_ms();
      g_phase = s > 0;
#ifdef TLM_HAVE_DNNL
      bad = db ? forward_dnnl(db, m, T, pos) : forward_tlm(rt, m, T, pos);
#else
      (void)db;
      bad = forward_tlm(rt, m, T, pos);
#endif
      if (bad) r->failed = 1;
      *(s == 0 ? &r->prefill_ms : &r->decode_ms) += now_ms() - ts;
      r->flops += step_flops(&m->a, T, pos + T);
      r->tokens += T;
      r->steps++;
      pos += T;
      if (s == steps && q % 8 == 0)
        memcpy(r->sampled + (size_t)(q / 8) * (size_t)m->a.C, m->ln + (T - 1) * m->a.C,
               (size_t)m->a.C * sizeof(float));
    }
    r->lat[q] = now_ms() - t0;
  }
  r->wall_ms = now_ms() - t_start;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* declares the weight matrices constant to rt */
static int declare_weights(tlm_runtime *rt, const model *m) {
  const arch *a = &m->a;
  for (int i = 0; i < a->layers; i++) {
    const layer_w *w = &m->l[i];
    size_t C = (size_t)a->C, FF = (size_t)a->FF;
    const float *mats[7] = {w->wq, w->wk, w->wv, w->wo, w->w1, w->w3, w->w2};
    const size_t n[7] = {C * (size_t)(a->fused ? QKVW(a) : QW(a)), C * (size_t)KW(a),
                         C * (size_t)KW(a), (size_t)QW(a) * C, C * FF, C * FF, FF * C};
    for (int j = 0; j < 7; j++)
      if (mats[j] && tlm_constant_add(rt, mats[j], n[j] * sizeof(float)) != TLM_OK) {
        fprintf(stderr, "llm_serving: %s\n", tlm_last_error(rt));
        return -1;
      }
  }
  return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

#ifdef TLM_SERVING_NO_MAIN
/* `tlm bench serving`: exec_argv is the command line to re-run for
 * oneDNN's thread count (see dnnl_baseline_pin_threads) */
int tlm_serving_main(int argc, char **argv, char **exec_argv);
int tlm_serving_main(int argc, char **argv, char **exec_argv) {
#else
int main(int argc, char **argv) {
  char **exec_argv = argv;
#endif
  const char *trace = NULL, *json = NULL, *model_name = "gpt2-124m", *models_json = NULL;
  int requests = 24, max_context = 256, decode_steps = 4, threads = -1, layers = 0, baseline = 1;
  int prepack = 1, kv_heads = 0, warm = 0, fresh = 0;
  double max_gib = 3.0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int more = i + 1 < argc;
    if (!strcmp(a, "--trace") && more) trace = argv[++i];
    else if (!strcmp(a, "--model") && more) model_name = argv[++i];
    else if (!strcmp(a, "--models-json") && more) models_json = argv[++i];
    else if (!strcmp(a, "--requests") && more) requests = atoi(argv[++i]);
    else if (!strcmp(a, "--max-context") && more) max_context = atoi(argv[++i]);
    else if (!strcmp(a, "--decode-steps") && more) decode_steps = atoi(argv[++i]);
    else if (!strcmp(a, "--layers") && more) layers = atoi(argv[++i]);
    else if (!strcmp(a, "--kv-heads") && more) kv_heads = atoi(argv[++i]);
    else if (!strcmp(a, "--max-weights-gib") && more) max_gib = atof(argv[++i]);
    else if (!strcmp(a, "--threads") && more) threads = atoi(argv[++i]);
    else if (!strcmp(a, "--json") && more) json = argv[++i];
    else if (!strcmp(a, "--no-baseline")) baseline = 0;
    else if (!strcmp(a, "--no-prepack")) prepack = 0;
    else if (!strcmp(a, "--warm")) warm = 1;
    else if (!strcmp(a, "--fresh-cache")) fresh = 1;
    else if (!strcmp(a, "--attention") && more) {
      const char *v = argv[++i];
      if (strcmp(v, "fused") && strcmp(v, "split") && strcmp(v, "decode")) {
        fprintf(stderr, "llm_serving: --attention fused|split|decode\n");
        return 2;
      }
      g_fused_attention = !strcmp(v, "fused") ? 1 : !strcmp(v, "split") ? 0 : 2;
    }
    else {
      fprintf(stderr,
              "usage: %s --trace FILE [--model NAME] [--models-json FILE] [--requests N]\n"
              "          [--max-context N] [--decode-steps N] [--layers N] [--kv-heads N]\n"
              "          [--max-weights-gib G] [--threads N] [--json FILE] [--no-baseline]\n"
              "          [--no-prepack] [--fresh-cache] [--warm] [--attention fused|split|decode]\n",
              argv[0]);
      return 2;
    }
  }
  if (!trace || requests < 1 || max_context < 1 || decode_steps < 0 || layers < 0 ||
      kv_heads < 0 || !(max_gib > 0)) {
    fprintf(stderr, "llm_serving: --trace FILE is required; counts must be positive\n");
    return 2;
  }
  /* models.json: --models-json, else beside the trace's folder
   * (workloads/traces/X.csv -> workloads/models.json), else ../shared */
  char mj[4096];
  if (!models_json) {
    const char *slash = strrchr(trace, '/');
    int dir = slash ? (int)(slash - trace) : 0;
    snprintf(mj, sizeof mj, "%.*s%smodels.json", dir, trace, dir ? "/../" : "../");
    FILE *probe = fopen(mj, "rb");
    if (probe) fclose(probe);
    else snprintf(mj, sizeof mj, "../shared/workloads/models.json");
    models_json = mj;
  }
  arch ar;
  if (arch_load(&ar, models_json, model_name)) return 1;
  if (kv_heads) {
    if (ar.nh % kv_heads) {
      fprintf(stderr, "llm_serving: --kv-heads %d does not divide %d heads\n", kv_heads, ar.nh);
      return 2;
    }
    ar.nkv = kv_heads;
  }
  if (ar.nh % ar.nkv) {
    fprintf(stderr, "llm_serving: %s: n_kv_head %d does not divide n_head %d\n", ar.name, ar.nkv,
            ar.nh);
    return 1;
  }
  int file_layers = ar.layers;
  if (layers) {
    ar.layers = layers;
  } else { /* as many as fit the weight budget */
    int fit = (int)(max_gib * 1073741824.0 / layer_weight_bytes(&ar));
    if (fit < 1) fit = 1;
    if (fit < ar.layers) ar.layers = fit;
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
  if (dnnl_baseline_pin_threads(exec_argv, nthreads))
    fprintf(stderr, "llm_serving: could not set OMP_NUM_THREADS=%s for oneDNN\n", nt);
#endif
  /* --fresh-cache: a new private directory (a cold start), removed at exit */
  char freshdir[] = "/tmp/tlm_serving_XXXXXX";
  if (fresh) {
    if (!mkdtemp(freshdir)) {
      fprintf(stderr, "llm_serving: cannot create a cache directory under /tmp\n");
      free(ctx);
      return 1;
    }
    cfg.cache_dir = freshdir;
  }
  tlm_runtime *rt;
  if (tlm_create(&cfg, &rt) != TLM_OK) {
    fprintf(stderr, "llm_serving: %s\n", tlm_last_error(NULL));
    free(ctx);
    return 1;
  }
  model m;
  if (model_init(&m, &ar, max_context + decode_steps)) {
    fprintf(stderr, "llm_serving: out of memory for the model\n");
    return 1;
  }
  if (prepack && declare_weights(rt, &m)) return 1;
  int nsamp = (nreq + 7) / 8;
  replay_result t = {0}, d = {0}, wt = {0};
  t.lat = calloc((size_t)nreq, sizeof(double)), d.lat = calloc((size_t)nreq, sizeof(double));
  t.sampled = calloc((size_t)nsamp * (size_t)ar.C, sizeof(float));
  d.sampled = calloc((size_t)nsamp * (size_t)ar.C, sizeof(float));
  replay(rt, NULL, &m, ctx, nreq, decode_steps, &t);
  tlm_stats s, ws;
  tlm_get_stats(rt, &s);
  memset(&ws, 0, sizeof ws);
  /* --warm: a new runtime (a new process would do the same) on the cache
   * the cold pass filled */
  const char *cdir = cfg.cache_dir ? cfg.cache_dir : "";
  int have_warm = 0;
  if (warm && !t.failed && strcmp(cdir, "none")) {
    tlm_destroy(rt);
    if (tlm_create(&cfg, &rt) != TLM_OK || (prepack && declare_weights(rt, &m))) {
      fprintf(stderr, "llm_serving: warm runtime: %s\n", tlm_last_error(NULL));
      return 1;
    }
    wt.lat = calloc((size_t)nreq, sizeof(double));
    wt.sampled = calloc((size_t)nsamp * (size_t)ar.C, sizeof(float));
    replay(rt, NULL, &m, ctx, nreq, decode_steps, &wt);
    tlm_get_stats(rt, &ws);
    have_warm = !wt.failed;
  } else if (warm) {
    fprintf(stderr, "llm_serving: --warm needs a disk cache (TLM_CACHE_DIR is none)\n");
  }
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
    for (size_t i = 0; i < (size_t)nsamp * (size_t)ar.C; i++) {
      double e = fabs((double)t.sampled[i] - d.sampled[i]) / (1.0 + fabs((double)d.sampled[i]));
      if (!(e <= diff)) diff = isnan(e) ? INFINITY : e;
      if (have_warm) { /* the warm pass's outputs too */
        e = fabs((double)wt.sampled[i] - d.sampled[i]) / (1.0 + fabs((double)d.sampled[i]));
        if (!(e <= diff)) diff = isnan(e) ? INFINITY : e;
      }
    }
  }
#else
  (void)baseline;
#endif
  qsort(t.lat, (size_t)nreq, sizeof(double), cmp_double);
  double p50 = t.lat[nreq / 2], p99 = t.lat[(nreq * 99) / 100 < nreq ? (nreq * 99) / 100 : nreq - 1];
  double dc = s.schedule_ms + s.compile_ms + s.disk_load_ms;
  int ok = !t.failed && (!have_baseline || diff <= 1e-3);
  printf("\nllm_serving report (%s: %d of %d layers, %d heads, %d K/V heads, d_model %d, d_ff %d, "
         "%s, %s, %s%s%s; trace %s)\n",
         ar.name, ar.layers, file_layers, ar.nh, ar.nkv, ar.C, ar.FF, ar.rms ? "RMSNorm" : "LayerNorm",
         ar.gated ? "SwiGLU" : "GELU", ar.fused ? "fused QKV" : "separate Q, K, V",
         ar.bias ? ", biases" : ", no biases", ar.rope ? ", RoPE" : "", trace);
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
  printf("  prefill / decode    %.1f ms / %.1f ms (all requests' prompts / generated tokens)\n",
         t.prefill_ms, t.decode_ms);
  printf("  by operator         prefill: linear %.1f ms, attention %.1f ms, other %.1f ms; decode: "
         "linear %.1f ms, attention %.1f ms, other %.1f ms\n",
         t.op_ms[0][0], t.op_ms[0][1], t.prefill_ms - t.op_ms[0][0] - t.op_ms[0][1], t.op_ms[1][0],
         t.op_ms[1][1], t.decode_ms - t.op_ms[1][0] - t.op_ms[1][1]);
  printf("  new shapes          %llu (cache misses)\n", (unsigned long long)s.cache_misses);
  printf("  schedules           %llu decoded by the model, %llu by the rule, %llu from disk "
         "(%.1f ms)\n",
         (unsigned long long)s.decodes, (unsigned long long)(s.schedules - s.decodes),
         (unsigned long long)s.disk_plan_hits, s.schedule_ms);
  printf("  kernels             %llu compiled (%.1f ms), %llu loaded from disk (%.1f ms)\n",
         (unsigned long long)s.compiles, s.compile_ms, (unsigned long long)s.disk_kernel_hits,
         s.disk_load_ms);
  printf("  cache hits          %llu\n", (unsigned long long)s.cache_hits);
  /* with background builds (the default) most compiles ran beside the
   * requests, on shapes first served by another kernel of their operator */
  printf("  decode + compile    %.1f%% of wall time (disk loads included%s)\n", 100.0 * dc / t.wall_ms,
         s.provisional ? "; background builds, beside the requests" : "");
  if (have_warm) {
    qsort(wt.lat, (size_t)nreq, sizeof(double), cmp_double);
    printf("  warm cache          a new runtime on the same cache: %.1f ms wall, %.0f tokens/s, "
           "p50 %.1f ms, p99 %.1f ms; %llu kernels compiled, %llu loaded from disk (%.1f ms)\n",
           wt.wall_ms, wt.tokens / (wt.wall_ms * 1e-3), wt.lat[nreq / 2],
           wt.lat[(nreq * 99) / 100 < nreq ? (nreq * 99) / 100 : nreq - 1],
           (unsigned long long)ws.compiles, (unsigned long long)ws.disk_kernel_hits, ws.disk_load_ms);
  }
  if (have_baseline) {
    printf("  oneDNN + C baseline %.1f ms wall, %.0f tokens/s (%d primitives, %.1f ms creating "
           "them)\n",
           d.wall_ms, d.tokens / (d.wall_ms * 1e-3), dnnl_prims, dnnl_create_ms);
    printf("  speed vs baseline   %.2fx (baseline wall / tlm wall; > 1: tlm faster)\n",
           d.wall_ms / t.wall_ms);
    printf("  prefill, decode     %.2fx, %.2fx vs baseline (%.1f ms, %.1f ms there)\n",
           d.prefill_ms / t.prefill_ms, d.decode_ms / t.decode_ms, d.prefill_ms, d.decode_ms);
    printf("  baseline by op      prefill: linear %.1f ms, attention %.1f ms; decode: linear %.1f "
           "ms, attention %.1f ms\n",
           d.op_ms[0][0], d.op_ms[0][1], d.op_ms[1][0], d.op_ms[1][1]);
    if (have_warm)
      printf("  warm vs baseline    %.2fx\n", d.wall_ms / wt.wall_ms);
    printf("  outputs vs baseline max rel diff %.2g on %d sampled requests: %s\n", diff, nsamp,
           diff <= 1e-3 ? "PASS" : "FAIL");
  }
  if (json) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", ar.name);
    cJSON_AddNumberToObject(o, "kv_heads", ar.nkv);
    cJSON_AddStringToObject(o, "target", tdesc);
    cJSON_AddStringToObject(o, "onednn_isa", base_isa);
    cJSON_AddNumberToObject(o, "layers", ar.layers);
    cJSON_AddNumberToObject(o, "requests", nreq);
    cJSON_AddNumberToObject(o, "tokens", (double)t.tokens);
    cJSON_AddNumberToObject(o, "steps", (double)t.steps);
    cJSON_AddNumberToObject(o, "tlm_run_calls", (double)s.runs);
    cJSON_AddNumberToObject(o, "threads", nthreads);
    cJSON_AddNumberToObject(o, "wall_ms", t.wall_ms);
    cJSON_AddNumberToObject(o, "tokens_per_s", t.tokens / (t.wall_ms * 1e-3));
    cJSON_AddNumberToObject(o, "gflops", t.flops / (t.wall_ms * 1e6));
    cJSON_AddNumberToObject(o, "latency_p50_ms", p50);
    cJSON_AddNumberToObject(o, "latency_p99_ms", p99);
    cJSON_AddNumberToObject(o, "cache_misses", (double)s.cache_misses);
    cJSON_AddNumberToObject(o, "decodes", (double)s.decodes);
    cJSON_AddNumberToObject(o, "compiles", (double)s.compiles);
    cJSON_AddNumberToObject(o, "disk_kernel_loads", (double)s.disk_kernel_hits);
    cJSON_AddNumberToObject(o, "compile_ms", s.compile_ms);
    cJSON_AddNumberToObject(o, "schedule_ms", s.schedule_ms);
    cJSON_AddNumberToObject(o, "disk_load_ms", s.disk_load_ms);
    cJSON_AddNumberToObject(o, "cache_hits", (double)s.cache_hits);
    cJSON_AddNumberToObject(o, "decode_compile_share", dc / t.wall_ms);
    cJSON_AddBoolToObject(o, "tlm_weights_constant", prepack);
    cJSON_AddNumberToObject(o, "prepacked_copies", (double)s.prepacks);
    cJSON_AddNumberToObject(o, "prepacked_bytes", (double)s.prepacked_bytes);
    json_phases(o, "", &t);
    if (have_baseline) {
      cJSON_AddNumberToObject(o, "baseline_wall_ms", d.wall_ms);
      cJSON_AddNumberToObject(o, "baseline_tokens_per_s", d.tokens / (d.wall_ms * 1e-3));
      cJSON_AddNumberToObject(o, "baseline_primitive_create_ms", dnnl_create_ms);
      cJSON_AddNumberToObject(o, "speed_ratio_vs_baseline", d.wall_ms / t.wall_ms);
      cJSON_AddNumberToObject(o, "max_rel_diff_vs_baseline", diff);
      json_phases(o, "baseline_", &d);
    }
    if (have_warm) {
      cJSON_AddNumberToObject(o, "warm_wall_ms", wt.wall_ms);
      cJSON_AddNumberToObject(o, "warm_tokens_per_s", wt.tokens / (wt.wall_ms * 1e-3));
      cJSON_AddNumberToObject(o, "warm_latency_p50_ms", wt.lat[nreq / 2]);
      cJSON_AddNumberToObject(o, "warm_latency_p99_ms",
                              wt.lat[(nreq * 99) / 100 < nreq ? (nreq * 99) / 100 : nreq - 1]);
      cJSON_AddNumberToObject(o, "warm_compiles", (double)ws.compiles);
      cJSON_AddNumberToObject(o, "warm_disk_kernel_loads", (double)ws.disk_kernel_hits);
      cJSON_AddNumberToObject(o, "warm_disk_load_ms", ws.disk_load_ms);
      if (have_baseline)
        cJSON_AddNumberToObject(o, "warm_speed_ratio_vs_baseline", d.wall_ms / wt.wall_ms);
    }
    if (sample_json_write(o, json)) {
      fprintf(stderr, "llm_serving: cannot write %s\n", json);
      ok = 0;
    }
    cJSON_Delete(o);
  }
  tlm_destroy(rt); /* first: the weights are still declared constant */
  model_free(&m);
  free(t.lat), free(d.lat), free(t.sampled), free(d.sampled), free(ctx);
  free(wt.lat), free(wt.sampled);
  if (fresh) nftw(freshdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  return ok ? 0 : 1;
}
