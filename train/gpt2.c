/* gpt2.c - fp32 GPT-2 forward, backward and AdamW for the tensor language
 * model. Layout and naming follow the shapes in gpt2.h. */
#include "gpt2.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/space.h"

#define GELU_C 0.7978845608028654f /* sqrt(2 / pi) */

static void point_params(tlm_gpt2_params *p, float *mem, const tlm_gpt2_config *c) {
  size_t s[TLM_GPT2_NTENSORS];
  tlm_gpt2_sizes(c, s);
  float **ptrs[TLM_GPT2_NTENSORS] = {&p->wte,  &p->wpe,   &p->ln1w,    &p->ln1b,
                                     &p->qkvw, &p->qkvb,  &p->projw,   &p->projb,
                                     &p->ln2w, &p->ln2b,  &p->fcw,     &p->fcb,
                                     &p->fcprojw, &p->fcprojb, &p->lnfw, &p->lnfb};
  for (int i = 0; i < TLM_GPT2_NTENSORS; i++) {
    *ptrs[i] = mem;
    mem += s[i];
  }
}

static float normal(uint64_t *rng) {
  /* Box-Muller on two uniforms in (0, 1] */
  double u1 = ((double)(tlm_rng_next(rng) >> 11) + 1.0) / 9007199254740993.0;
  double u2 = (double)(tlm_rng_next(rng) >> 11) / 9007199254740992.0;
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

int tlm_gpt2_init(tlm_gpt2 *m, const tlm_gpt2_config *c, uint64_t seed) {
  memset(m, 0, sizeof *m);
  if (c->vocab < 1 || c->max_seq < 1 || c->layers < 1 || c->heads < 1 || c->width < 1 ||
      c->width % c->heads)
    return -1;
  m->cfg = *c;
  m->sentence_margin = NAN; /* not gated */
  size_t s[TLM_GPT2_NTENSORS];
  tlm_gpt2_sizes(c, s);
  for (int i = 0; i < TLM_GPT2_NTENSORS; i++) m->nparams += s[i];
  m->mem = calloc(m->nparams, sizeof(float));
  if (!m->mem) return -1;
  point_params(&m->p, m->mem, c);
  uint64_t rng = seed;
  float resid_std = 0.02f / sqrtf(2.0f * (float)c->layers);
  float *tensors[TLM_GPT2_NTENSORS] = {m->p.wte,  m->p.wpe,  m->p.ln1w,  m->p.ln1b,
                                       m->p.qkvw, m->p.qkvb, m->p.projw, m->p.projb,
                                       m->p.ln2w, m->p.ln2b, m->p.fcw,   m->p.fcb,
                                       m->p.fcprojw, m->p.fcprojb, m->p.lnfw, m->p.lnfb};
  for (int i = 0; i < TLM_GPT2_NTENSORS; i++) {
    float *t = tensors[i];
    int is_ln_w = t == m->p.ln1w || t == m->p.ln2w || t == m->p.lnfw;
    int is_bias = t == m->p.ln1b || t == m->p.ln2b || t == m->p.lnfb || t == m->p.qkvb ||
                  t == m->p.projb || t == m->p.fcb || t == m->p.fcprojb;
    float std = (t == m->p.projw || t == m->p.fcprojw) ? resid_std : 0.02f;
    for (size_t j = 0; j < s[i]; j++)
      t[j] = is_ln_w ? 1.0f : is_bias ? 0.0f : std * normal(&rng);
  }
  return 0;
}

void tlm_gpt2_free(tlm_gpt2 *m) {
  free(m->mem);
  free(m->grad_mem);
  free(m->m_mem);
  free(m->v_mem);
  free(m->acts);
  free(m->grad_acts);
  memset(m, 0, sizeof *m);
}

/* ---- activations ---------------------------------------------------------------- */

typedef struct acts {
  float *encoded;                  /* (B, T, C) */
  float *ln1, *ln1_mean, *ln1_rstd; /* (L, B, T, C), (L, B, T) x2 */
  float *qkv;                      /* (L, B, T, 3C) */
  float *atty;                     /* (L, B, T, C) */
  float *att;                      /* (L, B, NH, T, T) softmax */
  float *attproj;                  /* (L, B, T, C) */
  float *resid2;                   /* (L, B, T, C) */
  float *ln2, *ln2_mean, *ln2_rstd;
  float *fch, *fch_gelu;           /* (L, B, T, 4C) */
  float *fcproj;                   /* (L, B, T, C) */
  float *resid3;                   /* (L, B, T, C) */
  float *lnf, *lnf_mean, *lnf_rstd; /* (B, T, C), (B, T) x2 */
  float *logits;                   /* (B, T, V) */
  float *probs;                    /* (B, T, V) masked softmax */
  float *scratch;                  /* (B, T, 4C) for matmul backward */
} acts;

static size_t point_acts(acts *a, float *mem, const tlm_gpt2_config *c, size_t B, size_t T) {
  size_t C = (size_t)c->width, L = (size_t)c->layers, NH = (size_t)c->heads, V = (size_t)c->vocab;
  size_t BT = B * T;
  size_t sizes[] = {BT * C,      L * BT * C, L * BT,     L * BT,     L * BT * 3 * C,
                    L * BT * C,  L * B * NH * T * T,     L * BT * C, L * BT * C,
                    L * BT * C,  L * BT,     L * BT,     L * BT * 4 * C,
                    L * BT * 4 * C,          L * BT * C, L * BT * C, BT * C,
                    BT,          BT,         BT * V,     BT * V,     BT * 4 * C};
  float **ptrs[] = {&a->encoded, &a->ln1,    &a->ln1_mean, &a->ln1_rstd, &a->qkv,
                    &a->atty,    &a->att,    &a->attproj,  &a->resid2,   &a->ln2,
                    &a->ln2_mean, &a->ln2_rstd, &a->fch,   &a->fch_gelu, &a->fcproj,
                    &a->resid3,  &a->lnf,    &a->lnf_mean, &a->lnf_rstd, &a->logits,
                    &a->probs,   &a->scratch};
  size_t total = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    if (mem) *ptrs[i] = mem + total;
    total += sizes[i];
  }
  return total;
}

int tlm_gpt2_train_init(tlm_gpt2 *m, int B, int T, tlm_runtime *rt) {
  if (B < 1 || T < 1 || T > m->cfg.max_seq) return -1;
  m->B = B;
  m->T = T;
  m->rt = rt;
  free(m->acts);
  free(m->grad_acts);
  acts a;
  m->nacts = point_acts(&a, NULL, &m->cfg, (size_t)B, (size_t)T);
  m->acts = calloc(m->nacts, sizeof(float));
  m->grad_acts = calloc(m->nacts, sizeof(float));
  if (!m->grad_mem) {
    m->grad_mem = calloc(m->nparams, sizeof(float));
    m->m_mem = calloc(m->nparams, sizeof(float));
    m->v_mem = calloc(m->nparams, sizeof(float));
    if (m->grad_mem) point_params(&m->g, m->grad_mem, &m->cfg);
  }
  return (m->acts && m->grad_acts && m->grad_mem && m->m_mem && m->v_mem) ? 0 : -1;
}

/* ---- building blocks -------------------------------------------------------------- */

/* out (M, N) = op(a) op(b) (+ bias) through tlm_run; a is (M, K) or stored
 * (K, M) when ta; b is (K, N) or stored (N, K) when tb. */
static void mm(tlm_runtime *rt, float *out, const float *a, const float *b, const float *bias,
               int64_t M, int64_t K, int64_t N, int ta, int tb) {
  tlm_op op = tlm_op_matmul();
  op.u.matmul.transpose_a = ta;
  op.u.matmul.transpose_b = tb;
  op.u.matmul.has_bias = bias != NULL;
  tlm_tensor in[3], o;
  tlm_tensor_dense(&in[0], TLM_F32, 2, ta ? (int64_t[]){K, M} : (int64_t[]){M, K}, (void *)a);
  tlm_tensor_dense(&in[1], TLM_F32, 2, tb ? (int64_t[]){N, K} : (int64_t[]){K, N}, (void *)b);
  if (bias) tlm_tensor_dense(&in[2], TLM_F32, 1, (int64_t[]){N}, (void *)bias);
  tlm_tensor_dense(&o, TLM_F32, 2, (int64_t[]){M, N}, out);
  tlm_status st = tlm_run(rt, &op, in, bias ? 3 : 2, &o, 1);
  if (st != TLM_OK) { /* shapes are ours: a failure here is a bug */
    for (int64_t i = 0; i < M * N; i++) out[i] = NAN;
  }
}

/* forward of a linear layer: out (N, OC) = inp (N, C) W^T + b, W (OC, C) */
static void linear_fwd(tlm_runtime *rt, float *out, const float *inp, const float *w,
                       const float *b, int64_t N, int64_t C, int64_t OC) {
  mm(rt, out, inp, w, b, N, C, OC, 0, 1);
}

/* backward: dinp += dout W; dW = dout^T inp; db = column sums of dout */
static void linear_bwd(tlm_runtime *rt, float *dinp, float *dw, float *db, const float *dout,
                       const float *inp, const float *w, float *scratch, int64_t N, int64_t C,
                       int64_t OC) {
  mm(rt, scratch, dout, w, NULL, N, OC, C, 0, 0);
  for (int64_t i = 0; i < N * C; i++) dinp[i] += scratch[i];
  mm(rt, dw, dout, inp, NULL, OC, N, C, 1, 0);
  if (db) {
    memset(db, 0, sizeof(float) * (size_t)OC);
    for (int64_t i = 0; i < N; i++)
      for (int64_t o = 0; o < OC; o++) db[o] += dout[i * OC + o];
  }
}

static void layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int64_t N, int64_t C) {
  for (int64_t i = 0; i < N; i++) {
    const float *x = inp + i * C;
    double mu = 0, var = 0;
    for (int64_t c = 0; c < C; c++) mu += x[c];
    mu /= (double)C;
    for (int64_t c = 0; c < C; c++) var += (x[c] - mu) * (x[c] - mu);
    var /= (double)C;
    float rs = (float)(1.0 / sqrt(var + 1e-5));
    for (int64_t c = 0; c < C; c++) out[i * C + c] = (float)(x[c] - mu) * rs * w[c] + b[c];
    mean[i] = (float)mu;
    rstd[i] = rs;
  }
}

static void layernorm_bwd(float *dinp, float *dw, float *db, const float *dout,
                          const float *inp, const float *w, const float *mean,
                          const float *rstd, int64_t N, int64_t C) {
  for (int64_t i = 0; i < N; i++) {
    const float *dy = dout + i * C, *x = inp + i * C;
    float mu = mean[i], rs = rstd[i];
    double dnorm_mean = 0, dnorm_norm_mean = 0;
    for (int64_t c = 0; c < C; c++) {
      float xhat = (x[c] - mu) * rs;
      float dn = w[c] * dy[c];
      dnorm_mean += dn;
      dnorm_norm_mean += dn * xhat;
    }
    dnorm_mean /= (double)C;
    dnorm_norm_mean /= (double)C;
    for (int64_t c = 0; c < C; c++) {
      float xhat = (x[c] - mu) * rs;
      float dn = w[c] * dy[c];
      db[c] += dy[c];
      dw[c] += xhat * dy[c];
      dinp[i * C + c] += ((float)(dn - dnorm_mean) - xhat * (float)dnorm_norm_mean) * rs;
    }
  }
}

static void attention_fwd(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
  int hs = C / NH;
  float scale = 1.0f / sqrtf((float)hs);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
        float *p = att + (((size_t)b * NH + h) * T + t) * T;
        float mx = -INFINITY;
        for (int t2 = 0; t2 <= t; t2++) {
          const float *k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
          float s = 0;
          for (int i = 0; i < hs; i++) s += q[i] * k[i];
          p[t2] = s * scale;
          if (p[t2] > mx) mx = p[t2];
        }
        float sum = 0;
        for (int t2 = 0; t2 <= t; t2++) sum += (p[t2] = expf(p[t2] - mx));
        for (int t2 = 0; t2 < T; t2++) p[t2] = t2 <= t ? p[t2] / sum : 0.0f;
        float *o = out + ((size_t)b * T + t) * C + h * hs;
        for (int i = 0; i < hs; i++) o[i] = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          const float *v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
          for (int i = 0; i < hs; i++) o[i] += p[t2] * v[i];
        }
      }
}

static void attention_bwd(float *dqkv, const float *dout, const float *qkv, const float *att,
                          int B, int T, int C, int NH) {
  int hs = C / NH;
  float scale = 1.0f / sqrtf((float)hs);
  float *dp = malloc(sizeof(float) * (size_t)T);
  if (!dp) return;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const float *p = att + (((size_t)b * NH + h) * T + t) * T;
        const float *dO = dout + ((size_t)b * T + t) * C + h * hs;
        /* dP = dO . V; dV += P dO */
        for (int t2 = 0; t2 <= t; t2++) {
          const float *v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
          float *dv = dqkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
          float s = 0;
          for (int i = 0; i < hs; i++) {
            s += dO[i] * v[i];
            dv[i] += p[t2] * dO[i];
          }
          dp[t2] = s;
        }
        /* softmax backward: dS = P (dP - sum P dP) */
        float dot = 0;
        for (int t2 = 0; t2 <= t; t2++) dot += p[t2] * dp[t2];
        const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
        float *dq = dqkv + ((size_t)b * T + t) * 3 * C + h * hs;
        for (int t2 = 0; t2 <= t; t2++) {
          float ds = p[t2] * (dp[t2] - dot) * scale;
          const float *k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
          float *dk = dqkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
          for (int i = 0; i < hs; i++) {
            dq[i] += ds * k[i];
            dk[i] += ds * q[i];
          }
        }
      }
  free(dp);
}

static void gelu_fwd(float *out, const float *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float u = x[i];
    out[i] = 0.5f * u * (1.0f + tanhf(GELU_C * (u + 0.044715f * u * u * u)));
  }
}

static void gelu_bwd(float *dx, const float *x, const float *dout, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float u = x[i];
    float inner = GELU_C * (u + 0.044715f * u * u * u);
    float th = tanhf(inner);
    float sech2 = 1.0f - th * th;
    float d = 0.5f * (1.0f + th) + 0.5f * u * sech2 * GELU_C * (1.0f + 3.0f * 0.044715f * u * u);
    dx[i] += d * dout[i];
  }
}

static int popcount_row(const uint64_t *row) {
  int n = 0;
  for (int i = 0; i < TLM_LM_MAX_VOCAB / 64; i++) n += __builtin_popcountll(row[i]);
  return n;
}

static int allowed_bit(const uint64_t *row, int t) { return (int)((row[t / 64] >> (t % 64)) & 1); }

/* ---- forward / backward ------------------------------------------------------------- */

float tlm_gpt2_forward(tlm_gpt2 *m, const int32_t *tokens, const int32_t *targets,
                       const uint64_t (*allowed)[TLM_LM_MAX_VOCAB / 64]) {
  const int B = m->B, T = m->T, C = m->cfg.width, NH = m->cfg.heads, V = m->cfg.vocab;
  const int64_t BT = (int64_t)B * T;
  acts a;
  point_acts(&a, m->acts, &m->cfg, (size_t)B, (size_t)T);
  const tlm_gpt2_params *p = &m->p;
  for (int64_t i = 0; i < BT; i++) {
    int t = (int)(i % T), tok = tokens[i];
    for (int c = 0; c < C; c++) a.encoded[i * C + c] = p->wte[(int64_t)tok * C + c] + p->wpe[t * C + c];
  }
  const float *x = a.encoded;
  for (int l = 0; l < m->cfg.layers; l++) {
    size_t o = (size_t)l * (size_t)BT;
    float *ln1 = a.ln1 + o * C, *qkv = a.qkv + o * 3 * C, *atty = a.atty + o * C;
    float *att = a.att + (size_t)l * B * NH * T * T, *attproj = a.attproj + o * C;
    float *r2 = a.resid2 + o * C, *ln2 = a.ln2 + o * C, *fch = a.fch + o * 4 * C;
    float *fchg = a.fch_gelu + o * 4 * C, *fcproj = a.fcproj + o * C, *r3 = a.resid3 + o * C;
    layernorm_fwd(ln1, a.ln1_mean + o, a.ln1_rstd + o, x, p->ln1w + l * C, p->ln1b + l * C, BT, C);
    linear_fwd(m->rt, qkv, ln1, p->qkvw + (size_t)l * 3 * C * C, p->qkvb + l * 3 * C, BT, C, 3 * C);
    attention_fwd(atty, att, qkv, B, T, C, NH);
    linear_fwd(m->rt, attproj, atty, p->projw + (size_t)l * C * C, p->projb + l * C, BT, C, C);
    for (int64_t i = 0; i < BT * C; i++) r2[i] = x[i] + attproj[i];
    layernorm_fwd(ln2, a.ln2_mean + o, a.ln2_rstd + o, r2, p->ln2w + l * C, p->ln2b + l * C, BT, C);
    linear_fwd(m->rt, fch, ln2, p->fcw + (size_t)l * 4 * C * C, p->fcb + l * 4 * C, BT, C, 4 * C);
    gelu_fwd(fchg, fch, (size_t)BT * 4 * C);
    linear_fwd(m->rt, fcproj, fchg, p->fcprojw + (size_t)l * 4 * C * C, p->fcprojb + l * C, BT,
               4 * C, C);
    for (int64_t i = 0; i < BT * C; i++) r3[i] = r2[i] + fcproj[i];
    x = r3;
  }
  layernorm_fwd(a.lnf, a.lnf_mean, a.lnf_rstd, x, p->lnfw, p->lnfb, BT, C);
  linear_fwd(m->rt, a.logits, a.lnf, p->wte, NULL, BT, C, V);
  m->tokens = tokens;
  m->targets = targets;
  m->allowed = allowed;
  if (!targets || !allowed) return 0;
  /* masked softmax cross-entropy at positions with a choice */
  double loss = 0;
  int count = 0;
  for (int64_t i = 0; i < BT; i++) {
    float *pr = a.probs + i * V;
    memset(pr, 0, sizeof(float) * (size_t)V);
    if (targets[i] < 0 || popcount_row(allowed[i]) < 2) continue;
    const float *lg = a.logits + i * V;
    float mx = -INFINITY;
    for (int v = 0; v < V; v++)
      if (allowed_bit(allowed[i], v) && lg[v] > mx) mx = lg[v];
    double sum = 0;
    for (int v = 0; v < V; v++)
      if (allowed_bit(allowed[i], v)) sum += (pr[v] = expf(lg[v] - mx));
    for (int v = 0; v < V; v++) pr[v] = (float)(pr[v] / sum);
    loss -= log(pr[targets[i]] > 1e-30f ? pr[targets[i]] : 1e-30f);
    count++;
  }
  return count ? (float)(loss / count) : 0.0f;
}

const float *tlm_gpt2_logits(const tlm_gpt2 *m) {
  acts a;
  point_acts(&a, m->acts, &m->cfg, (size_t)m->B, (size_t)m->T);
  return a.logits;
}

void tlm_gpt2_backward(tlm_gpt2 *m) {
  const int B = m->B, T = m->T, C = m->cfg.width, NH = m->cfg.heads, V = m->cfg.vocab;
  const int64_t BT = (int64_t)B * T;
  acts a, d;
  point_acts(&a, m->acts, &m->cfg, (size_t)B, (size_t)T);
  point_acts(&d, m->grad_acts, &m->cfg, (size_t)B, (size_t)T);
  memset(m->grad_mem, 0, sizeof(float) * m->nparams);
  memset(m->grad_acts, 0, sizeof(float) * m->nacts);
  const tlm_gpt2_params *p = &m->p;
  tlm_gpt2_params *g = &m->g;
  /* d loss / d logits = (probs - onehot) / count at counted positions */
  int count = 0;
  for (int64_t i = 0; i < BT; i++)
    if (m->targets[i] >= 0 && popcount_row(m->allowed[i]) >= 2) count++;
  for (int64_t i = 0; i < BT && count; i++) {
    if (m->targets[i] < 0 || popcount_row(m->allowed[i]) < 2) continue;
    for (int v = 0; v < V; v++) d.logits[i * V + v] = a.probs[i * V + v] / (float)count;
    d.logits[i * V + m->targets[i]] -= 1.0f / (float)count;
  }
  linear_bwd(m->rt, d.lnf, g->wte, NULL, d.logits, a.lnf, p->wte, d.scratch, BT, C, V);
  const float *x_last = a.resid3 + (size_t)(m->cfg.layers - 1) * BT * C;
  float *dx = d.resid3 + (size_t)(m->cfg.layers - 1) * BT * C;
  layernorm_bwd(dx, g->lnfw, g->lnfb, d.lnf, x_last, p->lnfw, a.lnf_mean, a.lnf_rstd, BT, C);
  for (int l = m->cfg.layers - 1; l >= 0; l--) {
    size_t o = (size_t)l * (size_t)BT;
    const float *x = l == 0 ? a.encoded : a.resid3 + (o - (size_t)BT) * C;
    float *dxin = l == 0 ? d.encoded : d.resid3 + (o - (size_t)BT) * C;
    float *dr3 = d.resid3 + o * C, *dr2 = d.resid2 + o * C;
    /* r3 = r2 + fcproj */
    for (int64_t i = 0; i < BT * C; i++) {
      dr2[i] += dr3[i];
      d.fcproj[o * C + i] = dr3[i];
    }
    linear_bwd(m->rt, d.fch_gelu + o * 4 * C, g->fcprojw + (size_t)l * 4 * C * C,
               g->fcprojb + l * C, d.fcproj + o * C, a.fch_gelu + o * 4 * C,
               p->fcprojw + (size_t)l * 4 * C * C, d.scratch, BT, 4 * C, C);
    gelu_bwd(d.fch + o * 4 * C, a.fch + o * 4 * C, d.fch_gelu + o * 4 * C, (size_t)BT * 4 * C);
    linear_bwd(m->rt, d.ln2 + o * C, g->fcw + (size_t)l * 4 * C * C, g->fcb + l * 4 * C,
               d.fch + o * 4 * C, a.ln2 + o * C, p->fcw + (size_t)l * 4 * C * C, d.scratch, BT, C,
               4 * C);
    layernorm_bwd(dr2, g->ln2w + l * C, g->ln2b + l * C, d.ln2 + o * C, a.resid2 + o * C,
                  p->ln2w + l * C, a.ln2_mean + o, a.ln2_rstd + o, BT, C);
    /* r2 = x + attproj */
    for (int64_t i = 0; i < BT * C; i++) {
      dxin[i] += dr2[i];
      d.attproj[o * C + i] = dr2[i];
    }
    linear_bwd(m->rt, d.atty + o * C, g->projw + (size_t)l * C * C, g->projb + l * C,
               d.attproj + o * C, a.atty + o * C, p->projw + (size_t)l * C * C, d.scratch, BT, C, C);
    attention_bwd(d.qkv + o * 3 * C, d.atty + o * C, a.qkv + o * 3 * C,
                  a.att + (size_t)l * B * NH * T * T, B, T, C, NH);
    linear_bwd(m->rt, d.ln1 + o * C, g->qkvw + (size_t)l * 3 * C * C, g->qkvb + l * 3 * C,
               d.qkv + o * 3 * C, a.ln1 + o * C, p->qkvw + (size_t)l * 3 * C * C, d.scratch, BT, C,
               3 * C);
    layernorm_bwd(dxin, g->ln1w + l * C, g->ln1b + l * C, d.ln1 + o * C, x, p->ln1w + l * C,
                  a.ln1_mean + o, a.ln1_rstd + o, BT, C);
  }
  /* encoded = wte[tok] + wpe[t]: g->wte already holds the output head's
   * gradient, the embedding's adds to it */
  for (int64_t i = 0; i < BT; i++) {
    int t = (int)(i % T), tok = m->tokens[i];
    for (int c = 0; c < C; c++) {
      m->g.wte[(int64_t)tok * C + c] += d.encoded[i * C + c];
      m->g.wpe[t * C + c] += d.encoded[i * C + c];
    }
  }
}

float tlm_gpt2_update(tlm_gpt2 *m, float lr, float beta1, float beta2, float eps, float wd,
                      float clip) {
  double norm2 = 0;
  for (size_t i = 0; i < m->nparams; i++) norm2 += (double)m->grad_mem[i] * m->grad_mem[i];
  float norm = (float)sqrt(norm2);
  float scale = (clip > 0 && norm > clip) ? clip / norm : 1.0f;
  m->step++;
  float bc1 = 1.0f - powf(beta1, (float)m->step), bc2 = 1.0f - powf(beta2, (float)m->step);
  size_t s[TLM_GPT2_NTENSORS];
  tlm_gpt2_sizes(&m->cfg, s);
  /* matrices (decayed): wte, wpe, qkvw, projw, fcw, fcprojw */
  static const int decay[TLM_GPT2_NTENSORS] = {1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};
  size_t off = 0;
  for (int t = 0; t < TLM_GPT2_NTENSORS; t++) {
    float w = decay[t] ? wd : 0.0f;
    for (size_t i = off; i < off + s[t]; i++) {
      float gr = m->grad_mem[i] * scale;
      m->m_mem[i] = beta1 * m->m_mem[i] + (1 - beta1) * gr;
      m->v_mem[i] = beta2 * m->v_mem[i] + (1 - beta2) * gr * gr;
      float mh = m->m_mem[i] / bc1, vh = m->v_mem[i] / bc2;
      m->mem[i] -= lr * (mh / (sqrtf(vh) + eps) + w * m->mem[i]);
    }
    off += s[t];
  }
  return norm;
}

float tlm_gpt2_lr(int64_t step, int64_t warmup, int64_t total, float max_lr, float min_lr) {
  if (step < warmup) return max_lr * (float)(step + 1) / (float)warmup;
  if (step >= total) return min_lr;
  double r = (double)(step - warmup) / (double)(total - warmup);
  return min_lr + 0.5f * (max_lr - min_lr) * (float)(1.0 + cos(3.141592653589793 * r));
}
