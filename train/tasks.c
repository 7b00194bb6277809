/* tasks.c - task list from the shared workloads. */
#include "tasks.h"

#include <math.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/validate.h"
#include "runtime/reference.h"
#include "runtime/space.h"
#include "train/records.h"

void tlm_task_spec_text(tlm_task_spec *s) {
  if (s->op == TLM_OP_POOL) {
    const tlm_pool_spec *p = &s->pool;
    snprintf(s->text, sizeof s->text,
             "pool:%s n%lld c%lld ih%lld iw%lld oh%lld ow%lld kh%d kw%d sh%d sw%d ph%d pw%d %s",
             p->alg == TLM_POOL_MAX ? "max" : "avg", (long long)p->n, (long long)p->c,
             (long long)p->ih, (long long)p->iw, (long long)p->oh, (long long)p->ow, p->kh, p->kw,
             p->sh, p->sw, p->ph, p->pw, s->layout == TLM_LAYOUT_NHWC ? "nhwc" : "nchw");
    return;
  }
  if (s->op == TLM_OP_ELTWISE) {
    snprintf(s->text, sizeof s->text, "eltwise:act%d bin%d %lldx%lld", s->act, s->bin,
             (long long)s->rows, (long long)s->cols);
    return;
  }
  if (s->op == TLM_OP_CONV) {
    char d[160];
    tlm_conv_prb_str(&s->cp, d, sizeof d);
    snprintf(s->text, sizeof s->text, "conv:%s %s bias%d bn%d act%d res%d", d,
             s->layout == TLM_LAYOUT_NHWC ? "nhwc" : "nchw", s->cepi.bias, s->cepi.bn,
             (int)s->cepi.act, s->cepi.residual);
    return;
  }
  char d[96];
  tlm_mm_desc_str(&s->d, d, sizeof d);
  snprintf(s->text, sizeof s->text, "%s tA%d tB%d bias%d act%d res%d", d, s->d.transpose_a,
           s->d.transpose_b, s->epi.has_bias, (int)s->epi.activation, s->epi.has_residual);
}

/* 1 when a * b * c * d (each >= 1) is at most `limit`, without overflow */
static int elems_at_most(long long a, long long b, long long c, long long d, long long limit) {
  long long x;
  return !__builtin_mul_overflow(a, b, &x) && !__builtin_mul_overflow(x, c, &x) &&
         !__builtin_mul_overflow(x, d, &x) && x <= limit;
}

int tlm_task_spec_parse(const char *text, tlm_task_spec *s) {
  memset(s, 0, sizeof *s);
  char d[160], err[256];
  if (!strncmp(text, "pool:", 5)) {
    tlm_pool_spec *p = &s->pool;
    char alg[4], lay[5];
    long long n, c, ih, iw, oh, ow;
    if (sscanf(text + 5, "%3s n%lld c%lld ih%lld iw%lld oh%lld ow%lld kh%d kw%d sh%d sw%d ph%d pw%d %4s",
               alg, &n, &c, &ih, &iw, &oh, &ow, &p->kh, &p->kw, &p->sh, &p->sw, &p->ph, &p->pw,
               lay) != 14)
      return -1;
    if (strcmp(alg, "max") && strcmp(alg, "avg")) return -1;
    if (strcmp(lay, "nhwc") && strcmp(lay, "nchw")) return -1;
    if (n < 1 || c < 1 || ih < 1 || iw < 1 || oh < 1 || ow < 1 || !elems_at_most(n, c, ih, iw, 1ll << 31))
      return -1;
    p->alg = strcmp(alg, "max") ? TLM_POOL_AVG : TLM_POOL_MAX;
    p->n = n, p->c = c, p->ih = ih, p->iw = iw, p->oh = oh, p->ow = ow;
    s->op = TLM_OP_POOL;
    s->layout = strcmp(lay, "nhwc") ? TLM_LAYOUT_NCHW : TLM_LAYOUT_NHWC;
    tlm_task_spec_text(s);
    return 0;
  }
  if (!strncmp(text, "eltwise:", 8)) {
    long long r, c;
    if (sscanf(text + 8, "act%d bin%d %lldx%lld", &s->act, &s->bin, &r, &c) != 4) return -1;
    if (s->act < 0 || s->act >= TLM_ACT_COUNT_ || s->bin < 0 || s->bin > TLM_BINARY_MUL || r < 1 ||
        c < 1 || !elems_at_most(r, c, 1, 1, 1ll << 31))
      return -1;
    s->op = TLM_OP_ELTWISE;
    s->rows = r, s->cols = c;
    tlm_task_spec_text(s);
    return 0;
  }
  if (!strncmp(text, "conv:", 5)) {
    char lay[8];
    int bias, bn, act, res;
    if (sscanf(text + 5, "%159s %7s bias%d bn%d act%d res%d", d, lay, &bias, &bn, &act, &res) != 6)
      return -1;
    if (tlm_conv_prb_parse(d, &s->cp, err, sizeof err) != 1) return -1;
    if ((bias | bn | res) & ~1 || act < 0 || act >= TLM_ACT_COUNT_) return -1;
    if (strcmp(lay, "nhwc") && strcmp(lay, "nchw")) return -1;
    s->op = TLM_OP_CONV;
    s->layout = !strcmp(lay, "nhwc") ? TLM_LAYOUT_NHWC : TLM_LAYOUT_NCHW;
    s->cepi = (tlm_conv_epi){bias, bn, res, (tlm_activation)act};
    tlm_task_spec_text(s);
    return 0;
  }
  s->op = TLM_OP_MATMUL;
  int ta, tb, bias, act, res;
  if (sscanf(text, "%127s tA%d tB%d bias%d act%d res%d", d, &ta, &tb, &bias, &act, &res) != 6)
    return -1;
  if (tlm_mm_desc_parse(d, &s->d, err, sizeof err) != 1) return -1;
  if ((ta | tb | bias | res) & ~1 || act < 0 || act >= TLM_ACT_COUNT_) return -1;
  s->d.transpose_a = ta;
  s->d.transpose_b = tb;
  s->epi.has_bias = bias;
  s->epi.activation = (tlm_activation)act;
  s->epi.has_residual = res;
  tlm_task_spec_text(s);
  return 0;
}

typedef struct list {
  tlm_task_spec *v;
  int *count; /* inputs that gave each task, when counting */
  int counting; /* tlm_tasks_from_file_counted */
  int n, cap;
} list;

static double flop_of(const tlm_mm_desc *d) {
  double f = 2.0 * (double)d->a[d->nda - 2] * (double)d->a[d->nda - 1] * (double)d->b[d->ndb - 1];
  for (int i = 0; i < d->nda - 2; i++) f *= (double)d->a[i];
  return f;
}

static double bytes_of(const tlm_mm_desc *d) {
  double a = 4, b = 4, c = 4;
  for (int i = 0; i < d->nda; i++) a *= (double)d->a[i];
  for (int i = 0; i < d->ndb; i++) b *= (double)d->b[i];
  c *= (double)d->a[d->nda - 2] * (double)d->b[d->ndb - 1];
  for (int i = 0; i < d->nda - 2; i++) c *= (double)d->a[i];
  return a + b + c;
}

static int add_unique(list *l, tlm_task_spec *s);

static double conv_flop(const tlm_conv_prb *p) {
  return 2.0 * (double)p->mb * (double)p->oc * (double)(p->ic / p->g) *
         (double)(p->kd * p->kh * p->kw) * (double)(p->od * p->oh * p->ow);
}

double tlm_task_spec_flop(const tlm_task_spec *s) {
  if (s->op == TLM_OP_CONV) return conv_flop(&s->cp);
  if (s->op == TLM_OP_ELTWISE) return (double)s->rows * (double)s->cols;
  if (s->op == TLM_OP_POOL) {
    const tlm_pool_spec *p = &s->pool;
    return (double)p->n * (double)p->c * (double)p->oh * (double)p->ow *
           (double)(p->kh ? p->kh : p->ih) * (double)(p->kw ? p->kw : p->iw);
  }
  return flop_of(&s->d);
}

static int g_exact; /* tlm_tasks_set_exact */

void tlm_tasks_set_exact(int on) { g_exact = on != 0; }

static int add(list *l, tlm_task_spec *s) {
  if (g_exact) {
    if (s->op != TLM_OP_CONV) s->op = TLM_OP_MATMUL;
    tlm_task_spec_text(s);
    return add_unique(l, s);
  }
  if (s->op == TLM_OP_POOL || s->op == TLM_OP_ELTWISE) {
    tlm_task_spec_text(s);
    return add_unique(l, s);
  }
  if (s->op == TLM_OP_CONV) {
    if (conv_flop(&s->cp) > TLM_TASK_MAX_FLOP) return 0;
    tlm_task_spec_text(s);
    return add_unique(l, s);
  }
  s->op = TLM_OP_MATMUL;
  /* reduce the outer batch dim of tasks whose operands exceed the byte cap:
   * they measure memory bandwidth, slowly, whatever the schedule */
  while (bytes_of(&s->d) > TLM_TASK_MAX_BYTES && s->d.nda > 2 && s->d.a[0] > 1) {
    int64_t nb = s->d.a[0] / 2;
    if (s->d.ndb == s->d.nda && s->d.b[0] == s->d.a[0]) s->d.b[0] = nb;
    s->d.a[0] = nb;
  }
  /* reduce M of tasks too large to measure many times */
  double f = flop_of(&s->d);
  if (f > TLM_TASK_MAX_FLOP) {
    int64_t *m = &s->d.a[s->d.nda - 2];
    int64_t nm = (int64_t)((double)*m * TLM_TASK_MAX_FLOP / f);
    if (nm < 1) return 0; /* even M = 1 is too large: leave it out */
    *m = nm;
  }
  tlm_task_spec_text(s);
  return add_unique(l, s);
}

static int add_unique(list *l, tlm_task_spec *s) {
  for (int i = 0; i < l->n; i++)
    if (!strcmp(l->v[i].text, s->text)) {
      if (l->counting) l->count[i]++;
      return 0;
    }
  if (l->n == l->cap) {
    int cap = l->cap ? l->cap * 2 : 256;
    tlm_task_spec *v = realloc(l->v, (size_t)cap * sizeof *v);
    if (!v) return -1;
    l->v = v;
    if (l->counting) {
      int *c = realloc(l->count, (size_t)cap * sizeof *c);
      if (!c) return -1;
      l->count = c;
    }
    l->cap = cap;
  }
  if (l->counting) l->count[l->n] = 1;
  l->v[l->n++] = *s;
  return 0;
}

static void set_mm(tlm_task_spec *s, int64_t batch, int64_t m, int64_t k, int64_t n, int tb) {
  memset(&s->d, 0, sizeof s->d);
  int nb = batch > 1 ? 1 : 0;
  s->d.nda = s->d.ndb = 2 + nb;
  if (nb) s->d.a[0] = s->d.b[0] = batch;
  s->d.a[nb] = m, s->d.a[nb + 1] = k;
  s->d.b[nb] = k, s->d.b[nb + 1] = n;
  s->d.transpose_b = tb;
}

static int benchdnn(list *l, const char *dir) {
  static const struct {
    const char *file, *family;
  } files[] = {{"shapes_2d", "benchdnn:2d"},
               {"shapes_bert", "benchdnn:bert"},
               {"shapes_transformer", "benchdnn:transformer"},
               {"harness_matmul_gpt-j_32-32_inf_lb_f32", "benchdnn:gptj-32"},
               {"harness_matmul_gpt-j_2016-32_inf_lb_f32", "benchdnn:gptj-2016"}};
  for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
    char path[1024], line[1024], err[256];
    snprintf(path, sizeof path, "%s/workloads/benchdnn/matmul/%s", dir, files[f].file);
    FILE *fp = fopen(path, "r");
    if (!fp) continue;
    while (fgets(line, sizeof line, fp)) {
      tlm_task_spec s;
      memset(&s, 0, sizeof s);
      if (tlm_mm_desc_parse(line, &s.d, err, sizeof err) != 1) continue;
      snprintf(s.family, sizeof s.family, "%s", files[f].family);
      if (add(l, &s)) {
        fclose(fp);
        return -1;
      }
    }
    fclose(fp);
  }
  return 0;
}

/* convolutions of the benchdnn conv sets at minibatch 1, in NHWC (HWIO
 * weights) with bias and ReLU and in NCHW (OIHW) with bias */
static int benchdnn_conv(list *l, const char *dir) {
  static const char *const files[] = {"shapes_resnet_50", "shapes_mobilenet", "shapes_mobilenet_dw",
                                      "shapes_efficientdet", "shapes_tails",
                                      "shapes_regression_padding"};
  for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
    char path[1024], line[1024], err[256];
    snprintf(path, sizeof path, "%s/workloads/benchdnn/conv/%s", dir, files[f]);
    FILE *fp = fopen(path, "r");
    if (!fp) continue;
    while (fgets(line, sizeof line, fp)) {
      tlm_task_spec s;
      memset(&s, 0, sizeof s);
      if (tlm_conv_prb_parse(line, &s.cp, err, sizeof err) != 1) continue;
      s.op = TLM_OP_CONV;
      s.cp.mb = 1;
      snprintf(s.family, sizeof s.family, "benchdnn-conv:%s", files[f] + 7);
      for (int lay = 0; lay < 2; lay++) {
        s.layout = lay ? TLM_LAYOUT_NCHW : TLM_LAYOUT_NHWC;
        s.cepi = (tlm_conv_epi){1, 0, 0, lay ? TLM_ACT_NONE : TLM_ACT_RELU};
        if (add(l, &s)) {
          fclose(fp);
          return -1;
        }
      }
    }
    fclose(fp);
  }
  return 0;
}

/* context lengths of the trace, in file order */
static int read_trace(const char *dir, int **out) {
  char path[1024], line[256];
  snprintf(path, sizeof path, "%s/workloads/traces/AzureLLMInferenceTrace_conv.csv", dir);
  FILE *fp = fopen(path, "r");
  if (!fp) return 0;
  int n = 0, cap = 0;
  int *v = NULL;
  while (fgets(line, sizeof line, fp)) {
    char *c = strchr(line, ',');
    int x = c ? atoi(c + 1) : 0;
    if (x < 1) continue;
    if (n == cap) {
      int ncap = cap ? cap * 2 : 4096;
      int *nv = realloc(v, (size_t)ncap * sizeof *nv);
      if (!nv) break;
      v = nv;
      cap = ncap;
    }
    v[n++] = x;
  }
  fclose(fp);
  *out = v;
  return n;
}

static int model_tasks(list *l, const char *name, const cJSON *m, const int *ctx, int nctx,
                       uint64_t *rng, int nprefill_want, int ndecode) {
  int d = cJSON_GetObjectItem(m, "d_model")->valueint;
  int ff = cJSON_GetObjectItem(m, "d_ff")->valueint;
  int heads = cJSON_GetObjectItem(m, "n_head")->valueint;
  const cJSON *qf = cJSON_GetObjectItem(m, "qkv_fused"), *bi = cJSON_GetObjectItem(m, "bias");
  const cJSON *ac = cJSON_GetObjectItem(m, "act");
  int fused = cJSON_IsTrue(qf), bias = cJSON_IsTrue(bi);
  int gated = cJSON_IsString(ac) && strstr(ac->valuestring, "gated") != NULL;
  int silu = cJSON_IsString(ac) && strstr(ac->valuestring, "silu") != NULL;
  int hd = d / heads;
  int64_t ms[40];
  int nm = 0;
  for (int i = 0; i < nprefill_want && nctx > 0; i++) /* prefill lengths from the trace */
    ms[nm++] = ctx[tlm_rng_next(rng) % (uint64_t)nctx];
  int nprefill = nm;
  for (int i = 0; i < ndecode; i++) ms[nm++] = 1 + (int64_t)(tlm_rng_next(rng) % 64); /* decode */
  for (int i = 0; i < nm; i++) {
    const char *phase = i < nprefill ? "prefill" : "decode";
    tlm_task_spec s;
    memset(&s, 0, sizeof s);
    snprintf(s.family, sizeof s.family, "%s:%s", name, phase);
    struct {
      int k, n, act, res;
    } layers[5];
    int nl = 0;
    layers[nl++] = (typeof(layers[0])){d, fused ? 3 * d : d, 0, 0};
    layers[nl++] = (typeof(layers[0])){d, d, 0, 1};
    if (gated) {
      layers[nl++] = (typeof(layers[0])){d, ff, TLM_ACT_SILU, 0};
      layers[nl++] = (typeof(layers[0])){d, ff, 0, 0};
    } else {
      layers[nl++] = (typeof(layers[0])){d, ff, silu ? TLM_ACT_SILU : TLM_ACT_GELU_TANH, 0};
    }
    layers[nl++] = (typeof(layers[0])){ff, d, 0, 1};
    for (int j = 0; j < nl; j++) {
      set_mm(&s, 1, ms[i], layers[j].k, layers[j].n, 0);
      s.epi.has_bias = bias;
      s.epi.activation = (tlm_activation)layers[j].act;
      s.epi.has_residual = layers[j].res;
      if (add(l, &s)) return -1;
    }
    /* attention: scores = Q K^T (K stored (L, hd): transposed B), out = P V */
    memset(&s.epi, 0, sizeof s.epi);
    snprintf(s.family, sizeof s.family, "%s:attn-%s", name, phase);
    int64_t L = i < nprefill ? ms[i] : ctx[tlm_rng_next(rng) % (uint64_t)(nctx ? nctx : 1)];
    int64_t M = i < nprefill ? ms[i] : 1;
    set_mm(&s, heads, M, hd, L, 1);
    if (add(l, &s)) return -1;
    set_mm(&s, heads, M, L, hd, 0);
    if (add(l, &s)) return -1;
  }
  /* elementwise layers (the MLP activation when not fused, gated SiLU, the
   * residual add) at the first 4 prefill and 2 decode lengths; no random
   * draws, so the matmul tasks above stay the same */
  for (int i = 0; i < nm; i++) {
    if (!(i < 4 || (i >= nprefill && i < nprefill + 2))) continue;
    tlm_task_spec e;
    memset(&e, 0, sizeof e);
    e.op = TLM_OP_ELTWISE;
    snprintf(e.family, sizeof e.family, "%s:eltwise", name);
    e.rows = ms[i];
    e.cols = ff;
    e.act = silu || gated ? TLM_ACT_SILU : TLM_ACT_GELU_TANH;
    e.bin = gated ? TLM_BINARY_MUL : TLM_BINARY_NONE;
    if (add(l, &e)) return -1;
    e.cols = d;
    e.act = TLM_ACT_NONE;
    e.bin = TLM_BINARY_ADD;
    if (add(l, &e)) return -1;
  }
  return 0;
}

/* the vision networks' pooling layers (ResNet-50's 3x3/2 stem pool and
 * global average, MobileNet's global average) at image sizes 160..288,
 * in both layouts */
static int pool_tasks(list *l) {
  static const int sizes[] = {160, 192, 224, 256, 288};
  for (int si = 0; si < 5; si++)
    for (int lay = 0; lay < 2; lay++) {
      int64_t r = sizes[si];
      tlm_task_spec s;
      memset(&s, 0, sizeof s);
      s.op = TLM_OP_POOL;
      s.layout = lay ? TLM_LAYOUT_NCHW : TLM_LAYOUT_NHWC;
      snprintf(s.family, sizeof s.family, "pool:resnet50");
      int64_t stem = (r + 1) / 2; /* after conv1 (7x7/2, pad 3) */
      s.pool = (tlm_pool_spec){TLM_POOL_MAX, 1, 64, stem, stem, (stem + 1) / 2, (stem + 1) / 2,
                               3, 3, 2, 2, 1, 1};
      if (add(l, &s)) return -1;
      int64_t last = (r + 31) / 32;
      s.pool = (tlm_pool_spec){TLM_POOL_AVG, 1, 2048, last, last, 1, 1, 0, 0, 1, 1, 0, 0};
      if (add(l, &s)) return -1;
      snprintf(s.family, sizeof s.family, "pool:mobilenet");
      s.pool.c = 1024;
      if (add(l, &s)) return -1;
    }
  return 0;
}

int tlm_tasks_from_file(const char *path, tlm_task_spec **out, char *err, int errcap) {
  return tlm_tasks_from_file_counted(path, out, NULL, err, errcap);
}

int tlm_tasks_from_file_counted(const char *path, tlm_task_spec **out, int **count, char *err,
                                int errcap) {
  list l = {0};
  *out = NULL;
  l.counting = count != NULL;
  if (count) *count = NULL;
  FILE *fp = fopen(path, "r");
  if (!fp) {
    snprintf(err, (size_t)errcap, "cannot open %s", path);
    free(l.count);
    return -1;
  }
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  char line[1024], perr[256];
  int lineno = 0;
  while (fgets(line, sizeof line, fp)) {
    lineno++;
    tlm_task_spec s;
    memset(&s, 0, sizeof s);
    int r = tlm_conv_prb_parse(line, &s.cp, perr, sizeof perr);
    if (r == 1) {
      s.op = TLM_OP_CONV;
      s.cp.mb = 1;
      s.layout = TLM_LAYOUT_NHWC;
      s.cepi = (tlm_conv_epi){1, 0, 0, TLM_ACT_RELU};
      snprintf(s.family, sizeof s.family, "file:%.40s", base);
      if (add(&l, &s)) break;
      continue;
    }
    if (r == 0) r = tlm_mm_desc_parse(line, &s.d, perr, sizeof perr);
    if (r < 0) {
      snprintf(err, (size_t)errcap, "%s:%d: %s", path, lineno, perr);
      fclose(fp);
      free(l.v);
      free(l.count);
      return -1;
    }
    if (r == 0) continue;
    snprintf(s.family, sizeof s.family, "file:%.40s", base);
    if (add(&l, &s)) break;
  }
  fclose(fp);
  *out = l.v;
  if (count) *count = l.count;
  return l.n;
}

static int g_synthetic; /* tlm_tasks_set_synthetic */

void tlm_tasks_set_synthetic(int n) { g_synthetic = n < 0 ? 0 : n > 64 ? 64 : n; }

/* n synthetic transformer models: head size 64, 80, 96 or 128, 4-40
 * heads (d_model 256-6144), MLP 4 d (GELU) or gated SiLU at 8/3 d rounded
 * to 64, bias or not, QKV fused or not; 6 prefill lengths from the trace and 4 decode
 * lengths each. A model whose d_model, MLP width or head size equals a
 * held-out one's (1024, 4096 and 16384, head size 256: GPT-2-355M and
 * GPT-J) is drawn again, so no held-out layer is trained on in disguise.
 * Own generator: the other tasks do not move. */
static int synthetic_models(list *l, int n, const int *ctx, int nctx) {
  uint64_t rng = 0x73796e7468ull; /* "synth" */
  static const int hds[] = {64, 80, 96, 128};
  for (int i = 0; i < n; i++) {
    int hd, heads, d, ff, gated, bias, fused;
    do {
      hd = hds[tlm_rng_next(&rng) % 4];
      heads = 4 + (int)(tlm_rng_next(&rng) % 37);
      d = hd * heads;
      gated = (int)(tlm_rng_next(&rng) % 2);
      bias = (int)(tlm_rng_next(&rng) % 2);
      fused = (int)(tlm_rng_next(&rng) % 2);
      ff = gated ? (8 * d / 3 + 63) / 64 * 64 : 4 * d;
    } while (d < 256 || d > 6144 || d == 1024 || d == 4096 || ff == 4096 || ff == 16384);
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddNumberToObject(m, "d_model", d) || !cJSON_AddNumberToObject(m, "d_ff", ff) ||
        !cJSON_AddNumberToObject(m, "n_head", heads) || !cJSON_AddBoolToObject(m, "bias", bias) ||
        !cJSON_AddBoolToObject(m, "qkv_fused", fused) ||
        !cJSON_AddStringToObject(m, "act", gated ? "gated-silu" : "gelu")) {
      cJSON_Delete(m);
      return -1;
    }
    char name[32];
    snprintf(name, sizeof name, "synth%d-d%d", i, d);
    int rc = model_tasks(l, name, m, ctx, nctx, &rng, 6, 4);
    cJSON_Delete(m);
    if (rc) return -1;
  }
  return 0;
}

static int g_synthetic_conv; /* tlm_tasks_set_synthetic_conv */

void tlm_tasks_set_synthetic_conv(int n) { g_synthetic_conv = n < 0 ? 0 : n > 64 ? 64 : n; }

/* one convolution of a synthetic network, in both layouts as the benchdnn
 * files' (NHWC with bias and ReLU, NCHW with bias) */
static int add_conv(list *l, const char *family, int g, int ic, int ih, int oc, int oh, int k, int st,
                    int pad) {
  char d[160], err[128];
  tlm_task_spec s;
  memset(&s, 0, sizeof s);
  snprintf(d, sizeof d, "g%dmb1ic%dih%diw%doc%doh%dow%dkh%dkw%dsh%dsw%dph%dpw%d", g, ic, ih, ih, oc, oh, oh, k, k,
           st, st, pad, pad);
  if (tlm_conv_prb_parse(d, &s.cp, err, sizeof err) != 1) return 0; /* not a valid problem: skipped */
  s.op = TLM_OP_CONV;
  snprintf(s.family, sizeof s.family, "%s", family);
  for (int lay = 0; lay < 2; lay++) {
    s.layout = lay ? TLM_LAYOUT_NCHW : TLM_LAYOUT_NHWC;
    s.cepi = (tlm_conv_epi){1, 0, 0, lay ? TLM_ACT_NONE : TLM_ACT_RELU};
    if (add(l, &s)) return -1;
  }
  return 0;
}

/* n synthetic mobile convolution networks of inverted-residual blocks
 * (MobileNetV2, Sandler et al. 2018; with squeeze-and-excitation as in
 * EfficientNet, Tan & Le 2019): input 96-320 pixels, a 3x3/2 stem of
 * 16-32 channels, then 6 blocks, each a 1x1 expansion by 3, 4 or 6 (none
 * in the first), a 3x3 or 5x5 depthwise convolution (stride 2 in blocks 2,
 * 3, 5 and 6), squeeze-and-excitation (1x1 convolutions on one pixel to
 * a quarter of the input channels and back) and a 1x1 projection to 1.2-2x
 * the block's input channels (multiples of 8). Families
 * "synthconv<i>-r<input>:<stem|expand|dw|se|project>". A convolution equal
 * to a held-out one is left to the held-out family (tasks are
 * deduplicated, the benchdnn files first). Own generator: the other tasks
 * do not move. */
static int synthetic_convnets(list *l, int n) {
  uint64_t rng = 0x73636f6e76ull; /* "sconv" */
  static const int res[] = {96, 128, 160, 192, 224, 256, 320};
  static const int expand[] = {3, 4, 6};
  for (int i = 0; i < n; i++) {
    int r = res[tlm_rng_next(&rng) % 7];
    int cin = 8 * (2 + (int)(tlm_rng_next(&rng) % 3));
    char fam[48], name[32];
    snprintf(name, sizeof name, "synthconv%d-r%d", i, r);
    int h = (r + 2 - 3) / 2 + 1;
    snprintf(fam, sizeof fam, "%s:stem", name);
    if (add_conv(l, fam, 1, 3, r, cin, h, 3, 2, 1)) return -1;
    for (int b = 0; b < 6; b++) {
      int e = b == 0 ? 1 : expand[tlm_rng_next(&rng) % 3];
      int k = tlm_rng_next(&rng) % 2 ? 5 : 3;
      int st = (b == 1 || b == 2 || b == 4 || b == 5) ? 2 : 1;
      int grow = 12 + (int)(tlm_rng_next(&rng) % 9); /* tenths: 1.2-2.0x */
      int cout = (cin * grow / 10 + 7) / 8 * 8;
      int ce = cin * e, cse = cin / 4 < 8 ? 8 : cin / 4;
      int oh = (h + 2 * (k / 2) - k) / st + 1;
      if (e > 1) {
        snprintf(fam, sizeof fam, "%s:expand", name);
        if (add_conv(l, fam, 1, cin, h, ce, h, 1, 1, 0)) return -1;
      }
      snprintf(fam, sizeof fam, "%s:dw", name);
      if (add_conv(l, fam, ce, ce, h, ce, oh, k, st, k / 2)) return -1;
      snprintf(fam, sizeof fam, "%s:se", name);
      if (add_conv(l, fam, 1, ce, 1, cse, 1, 1, 1, 0) || add_conv(l, fam, 1, cse, 1, ce, 1, 1, 1, 0)) return -1;
      snprintf(fam, sizeof fam, "%s:project", name);
      if (add_conv(l, fam, 1, ce, oh, cout, oh, 1, 1, 0)) return -1;
      h = oh, cin = cout;
    }
  }
  return 0;
}

int tlm_tasks_build(const char *dir, uint64_t seed, tlm_task_spec **out, char *err, int errcap) {
  list l = {0};
  *out = NULL;
  if (benchdnn(&l, dir) || benchdnn_conv(&l, dir) || pool_tasks(&l)) goto oom;
  int *ctx = NULL;
  int nctx = read_trace(dir, &ctx);
  char path[1024];
  snprintf(path, sizeof path, "%s/workloads/models.json", dir);
  FILE *fp = fopen(path, "rb");
  if (fp) {
    fseek(fp, 0, SEEK_END);
    long sz = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *buf = malloc((size_t)sz + 1);
    if (buf && fread(buf, 1, (size_t)sz, fp) == (size_t)sz) {
      buf[sz] = 0;
      cJSON *root = cJSON_Parse(buf);
      uint64_t rng = seed;
      for (cJSON *m = root ? root->child : NULL; m; m = m->next) {
        if (!cJSON_IsObject(m) || !cJSON_GetObjectItem(m, "d_model")) continue;
        if (model_tasks(&l, m->string, m, ctx, nctx, &rng, 20, 12)) {
          cJSON_Delete(root);
          free(buf);
          fclose(fp);
          free(ctx);
          goto oom;
        }
      }
      cJSON_Delete(root);
    }
    free(buf);
    fclose(fp);
  }
  if (g_synthetic > 0 && synthetic_models(&l, g_synthetic, ctx, nctx)) {
    free(ctx);
    goto oom;
  }
  if (g_synthetic_conv > 0 && synthetic_convnets(&l, g_synthetic_conv)) {
    free(ctx);
    goto oom;
  }
  free(ctx);
  if (l.n == 0) {
    snprintf(err, (size_t)errcap, "no tasks found under %s/workloads", dir);
    free(l.v);
    return -1;
  }
  *out = l.v;
  return l.n;
oom:
  free(l.v);
  snprintf(err, (size_t)errcap, "out of memory");
  return -1;
}

/* op and tensors of a pooling or eltwise spec, data pointers from ptr[]
 * (x, z, y) */
static int small_op(const tlm_task_spec *s, void *const ptr[3], tlm_op *op, tlm_tensor in[2],
                    int *n_in, tlm_tensor *out) {
  if (s->op == TLM_OP_POOL) {
    const tlm_pool_spec *p = &s->pool;
    *op = tlm_op_pool(s->layout, (tlm_pool_alg)p->alg);
    op->u.pool.kernel[1] = p->kh, op->u.pool.kernel[2] = p->kw;
    op->u.pool.stride[1] = p->sh, op->u.pool.stride[2] = p->sw;
    op->u.pool.pad[1] = p->ph, op->u.pool.pad[2] = p->pw;
    int nhwc = s->layout == TLM_LAYOUT_NHWC;
    int64_t xs[4] = {p->n, nhwc ? p->ih : p->c, nhwc ? p->iw : p->ih, nhwc ? p->c : p->iw};
    int64_t ys[4] = {p->n, nhwc ? p->oh : p->c, nhwc ? p->ow : p->oh, nhwc ? p->c : p->ow};
    tlm_tensor_dense(&in[0], TLM_F32, 4, xs, ptr[0]);
    tlm_tensor_dense(out, TLM_F32, 4, ys, ptr[2]);
    *n_in = 1;
    return 0;
  }
  *op = tlm_op_eltwise((tlm_activation)s->act, (tlm_binary)s->bin);
  int64_t sh[2] = {s->rows, s->cols};
  tlm_tensor_dense(&in[0], TLM_F32, 2, sh, ptr[0]);
  tlm_tensor_dense(&in[1], TLM_F32, 2, sh, ptr[1]);
  tlm_tensor_dense(out, TLM_F32, 2, sh, ptr[2]);
  *n_in = s->bin ? 2 : 1;
  return 0;
}

int tlm_task_spec_task(const tlm_task_spec *s, tlm_task *task) {
  if (s->op == TLM_OP_POOL || s->op == TLM_OP_ELTWISE) {
    void *const ptr[3] = {(void *)((uintptr_t)1 << 40), (void *)((uintptr_t)2 << 40),
                          (void *)((uintptr_t)3 << 40)};
    tlm_op op;
    tlm_tensor in[2], out;
    int n_in;
    char err[256];
    small_op(s, ptr, &op, in, &n_in, &out);
    if (s->op == TLM_OP_POOL) {
      tlm_pool_args a;
      return tlm_validate_pool(&op, in, n_in, &out, 1, task, &a, err, sizeof err) ? -1 : 0;
    }
    tlm_row_args a;
    return tlm_validate_row(&op, in, n_in, &out, 1, task, &a, err, sizeof err) ? -1 : 0;
  }
  if (s->op == TLM_OP_CONV) {
    tlm_conv_problem p;
    tlm_conv_args args;
    char err[256];
    if (tlm_conv_problem_shapes(&s->cp, s->layout,
                                s->layout == TLM_LAYOUT_NHWC ? TLM_WEIGHTS_HWIO : TLM_WEIGHTS_OIHW,
                                &s->cepi, &p))
      return -1;
    /* placeholders 1 TiB apart: validation compares ranges, nothing reads */
    for (int i = 0; i < p.n_in; i++) p.in[i].data = (void *)((uintptr_t)(i + 1) << 40);
    p.out.data = (void *)((uintptr_t)7 << 40);
    return tlm_validate_conv(&p.op, p.in, p.n_in, &p.out, 1, task, &args, err, sizeof err) ? -1 : 0;
  }
  const tlm_mm_desc *d = &s->d;
  tlm_op op = tlm_op_matmul();
  op.u.matmul = s->epi;
  op.u.matmul.transpose_a = d->transpose_a;
  op.u.matmul.transpose_b = d->transpose_b;
  int64_t sa[TLM_MAX_DIMS], sb[TLM_MAX_DIMS], sc[TLM_MAX_DIMS];
  int nc;
  if (tlm_mm_desc_shapes(d, sa, sb, sc, &nc)) return -1;
  int64_t N = sc[nc - 1];
  /* placeholders 1 TiB apart: validation compares ranges, nothing reads */
  tlm_tensor in[4], out;
  int n = 0;
  tlm_tensor_dense(&in[n++], TLM_F32, d->nda, sa, (void *)((uintptr_t)1 << 40));
  tlm_tensor_dense(&in[n++], TLM_F32, d->ndb, sb, (void *)((uintptr_t)2 << 40));
  if (s->epi.has_bias) tlm_tensor_dense(&in[n++], TLM_F32, 1, &N, (void *)((uintptr_t)3 << 40));
  if (s->epi.has_residual) tlm_tensor_dense(&in[n++], TLM_F32, nc, sc, (void *)((uintptr_t)4 << 40));
  tlm_tensor_dense(&out, TLM_F32, nc, sc, (void *)((uintptr_t)5 << 40));
  tlm_mm_args args;
  char err[256];
  return tlm_validate_matmul(&op, in, n, &out, 1, task, &args, err, sizeof err) ? -1 : 0;
}

int tlm_tasks_interleave(tlm_task_spec *tasks, int n) {
  tlm_task_spec *out = malloc(sizeof *out * (size_t)(n > 0 ? n : 1));
  int *rank = calloc((size_t)(n > 0 ? n : 1), sizeof *rank);
  if (!out || !rank) {
    free(out);
    free(rank);
    return -1;
  }
  /* rank = position of the task within its family */
  for (int i = 0; i < n; i++)
    for (int j = 0; j < i; j++) rank[i] += !strcmp(tasks[j].family, tasks[i].family);
  int k = 0;
  for (int r = 0; k < n; r++)
    for (int i = 0; i < n; i++)
      if (rank[i] == r) out[k++] = tasks[i];
  memcpy(tasks, out, sizeof *out * (size_t)n);
  free(out);
  free(rank);
  return 0;
}

int tlm_spec_problem_make(const tlm_task_spec *s, uint64_t seed, tlm_spec_problem *p) {
  memset(p, 0, sizeof *p);
  p->op = s->op;
  char err[256];
  if (s->op == TLM_OP_POOL || s->op == TLM_OP_ELTWISE) {
    int64_t nx, ny;
    if (s->op == TLM_OP_POOL) {
      nx = s->pool.n * s->pool.c * s->pool.ih * s->pool.iw;
      ny = s->pool.n * s->pool.c * s->pool.oh * s->pool.ow;
    } else {
      nx = ny = s->rows * s->cols;
    }
    uint64_t rng = seed;
    int64_t sizes[4] = {nx, s->op == TLM_OP_ELTWISE ? nx : 1, ny, ny};
    for (int i = 0; i < 4; i++) {
      p->buf[i] = malloc(sizeof(float) * (size_t)sizes[i]);
      if (!p->buf[i]) {
        tlm_spec_problem_free(p);
        return -1;
      }
      for (int64_t j = 0; j < sizes[i]; j++)
        p->buf[i][j] = (float)((tlm_rng_next(&rng) >> 40) & 0xffff) / 8192.0f - 4.0f;
    }
    p->nout = ny;
    tlm_op op;
    tlm_tensor in[2], out;
    int n_in;
    void *const ptr[3] = {p->buf[0], p->buf[1], p->buf[2]};
    small_op(s, ptr, &op, in, &n_in, &out);
    int bad;
    if (s->op == TLM_OP_POOL) {
      bad = tlm_validate_pool(&op, in, n_in, &out, 1, &p->task, &p->pool_args, err, sizeof err);
      p->args = &p->pool_args;
      tlm_pool_args ra = p->pool_args;
      ra.dst = p->buf[3];
      if (!bad) tlm_ref_pool(&p->task, &ra);
    } else {
      bad = tlm_validate_row(&op, in, n_in, &out, 1, &p->task, &p->row_args, err, sizeof err);
      p->args = &p->row_args;
      tlm_row_args ra = p->row_args;
      ra.y = p->buf[3];
      if (!bad) tlm_ref_row(&p->task, &ra);
    }
    if (bad) {
      tlm_spec_problem_free(p);
      return -1;
    }
    return 0;
  }
  if (s->op == TLM_OP_CONV) {
    if (tlm_conv_problem_make(&s->cp, s->layout,
                              s->layout == TLM_LAYOUT_NHWC ? TLM_WEIGHTS_HWIO : TLM_WEIGHTS_OIHW,
                              &s->cepi, seed, &p->cv))
      return -1;
    if (tlm_validate_conv(&p->cv.op, p->cv.in, p->cv.n_in, &p->cv.out, 1, &p->task, &p->cv_args,
                          err, sizeof err)) {
      tlm_conv_problem_free(&p->cv);
      return -1;
    }
    p->args = &p->cv_args;
    return 0;
  }
  if (tlm_problem_make(&s->d, &s->epi, seed, &p->mm)) return -1;
  if (tlm_validate_matmul(&p->mm.op, p->mm.in, p->mm.n_in, &p->mm.out, 1, &p->task, &p->mm_args,
                          err, sizeof err)) {
    tlm_problem_free(&p->mm);
    return -1;
  }
  p->args = &p->mm_args;
  return 0;
}

void tlm_spec_problem_free(tlm_spec_problem *p) {
  if (p->op == TLM_OP_CONV) tlm_conv_problem_free(&p->cv);
  else if (p->op == TLM_OP_MATMUL) tlm_problem_free(&p->mm);
  for (int i = 0; i < 4; i++) free(p->buf[i]);
  memset(p, 0, sizeof *p);
}

double tlm_spec_problem_check(const tlm_spec_problem *p, int points, uint64_t seed) {
  if (p->op == TLM_OP_POOL || p->op == TLM_OP_ELTWISE) { /* every output, vs the reference */
    (void)points, (void)seed;
    double worst = 0;
    for (int64_t i = 0; i < p->nout; i++) {
      double e = fabs((double)p->buf[2][i] - p->buf[3][i]) / (1.0 + fabs((double)p->buf[3][i]));
      if (!(e <= worst)) worst = e != e ? INFINITY : e;
    }
    return worst;
  }
  if (p->op == TLM_OP_CONV) return tlm_conv_problem_check(&p->cv, points, seed);
  return tlm_problem_check_sampled(&p->mm, points, seed);
}

double tlm_spec_problem_tolerance(const tlm_spec_problem *p) {
  if (p->op == TLM_OP_POOL || p->op == TLM_OP_ELTWISE) return 1e-5;
  if (p->op == TLM_OP_CONV) {
    const tlm_conv_task *t = &p->task.u.conv;
    return tlm_problem_tolerance((int64_t)t->ICg * t->KD * t->KH * t->KW);
  }
  return tlm_problem_tolerance(p->task.u.mm.K);
}

int tlm_tasks_heldout(const char *shared_dir, tlm_task_spec **out, char *err, int errcap) {
  tlm_task_spec *all;
  int na = tlm_tasks_build(shared_dir, 1, &all, err, errcap);
  if (na < 0) return -1;
  int n = 0;
  *out = malloc(sizeof **out * (size_t)(na > 0 ? na : 1));
  for (int i = 0; i < na && *out; i++)
    if (tlm_family_heldout(all[i].family)) (*out)[n++] = all[i];
  free(all);
  if (!*out || tlm_tasks_interleave(*out, n)) {
    snprintf(err, (size_t)errcap, "out of memory");
    free(*out);
    *out = NULL;
    return -1;
  }
  return n;
}
