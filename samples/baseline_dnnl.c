/* baseline_dnnl.c - oneDNN matmul, convolution and pooling primitives for the
 * samples' baseline. */
#include "baseline_dnnl.h"

#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_PRIMS 4096
#define WIN_SLOTS 4096 /* convolution and pooling primitives: a power of two */

typedef struct prim_key {
  int64_t batch, m, k, n, sa[3], sw[3], sc[3];
  int bias, gelu, accumulate;
} prim_key;

typedef struct prim {
  prim_key key;
  dnnl_primitive_t p;
  dnnl_memory_desc_t ad, wd, bd, cd;
} prim;

/* A convolution or pooling primitive, in an open-addressing hash table. */
enum { WIN_CONV, WIN_MAX_POOL, WIN_AVG_POOL };

typedef struct win_key {
  const float *w; /* convolutions: the weights (they identify the layer); else NULL */
  baseline_window win;
  int kind, act, accumulate, bias;
} win_key;

typedef struct win_prim {
  win_key key;
  dnnl_primitive_t p; /* NULL: a free slot */
  dnnl_memory_desc_t sd, dd, bd, wd;
  dnnl_memory_t wm; /* convolutions: the reordered weights (wd) in wbuf */
  void *wbuf;
  int owns_wbuf;    /* 0: wbuf is another entry's copy of the same weights */
} win_prim;

struct dnnl_baseline {
  dnnl_engine_t eng;
  dnnl_stream_t stream;
  prim *prims;
  int n;
  win_prim *wins;
  int nwins;
  double create_ms;
};

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

dnnl_baseline *dnnl_baseline_create(void) {
  dnnl_baseline *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  b->prims = calloc(MAX_PRIMS, sizeof *b->prims);
  b->wins = calloc(WIN_SLOTS, sizeof *b->wins);
  if (!b->prims || !b->wins || dnnl_engine_create(&b->eng, dnnl_cpu, 0) != dnnl_success ||
      dnnl_stream_create(&b->stream, b->eng, dnnl_stream_default_flags) != dnnl_success) {
    free(b->prims);
    free(b->wins);
    free(b);
    return NULL;
  }
  return b;
}

void dnnl_baseline_destroy(dnnl_baseline *b) {
  if (!b) return;
  for (int i = 0; i < b->n; i++) dnnl_primitive_destroy(b->prims[i].p);
  for (int i = 0; i < WIN_SLOTS; i++) {
    win_prim *e = &b->wins[i];
    if (!e->p) continue;
    dnnl_primitive_destroy(e->p);
    if (e->wm) dnnl_memory_destroy(e->wm);
    if (e->owns_wbuf) free(e->wbuf);
  }
  free(b->wins);
  dnnl_stream_destroy(b->stream);
  dnnl_engine_destroy(b->eng);
  free(b->prims);
  free(b);
}

static prim *get(dnnl_baseline *b, const prim_key *key) {
  for (int i = 0; i < b->n; i++)
    if (!memcmp(&b->prims[i].key, key, sizeof *key)) return &b->prims[i];
  if (b->n == MAX_PRIMS) return NULL;
  double t0 = now_ms();
  prim *p = &b->prims[b->n];
  memset(p, 0, sizeof *p);
  p->key = *key;
  dnnl_dims_t da = {key->batch, key->m, key->k}, dw = {key->batch, key->k, key->n},
              dc = {key->batch, key->m, key->n}, db = {1, 1, key->n};
  dnnl_dims_t sa = {key->sa[0], key->sa[1], key->sa[2]}, sw = {key->sw[0], key->sw[1], key->sw[2]},
              sc = {key->sc[0], key->sc[1], key->sc[2]};
  dnnl_memory_desc_init_by_strides(&p->ad, 3, da, dnnl_f32, sa);
  dnnl_memory_desc_init_by_strides(&p->wd, 3, dw, dnnl_f32, sw);
  dnnl_memory_desc_init_by_strides(&p->cd, 3, dc, dnnl_f32, sc);
  dnnl_memory_desc_init_by_tag(&p->bd, 3, db, dnnl_f32, dnnl_abc);
  dnnl_matmul_desc_t md;
  if (dnnl_matmul_desc_init(&md, &p->ad, &p->wd, key->bias ? &p->bd : NULL, &p->cd) != dnnl_success)
    return NULL;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_attr_create(&attr);
  if (key->gelu || key->accumulate) {
    dnnl_post_ops_create(&po);
    if (key->gelu) dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_gelu_tanh, 0.0f, 0.0f);
    if (key->accumulate) dnnl_post_ops_append_sum(po, 1.0f);
    dnnl_primitive_attr_set_post_ops(attr, po);
  }
  if (dnnl_primitive_desc_create(&pd, &md, attr, b->eng, NULL) == dnnl_success)
    dnnl_primitive_create(&p->p, pd);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (po) dnnl_post_ops_destroy(po);
  dnnl_primitive_attr_destroy(attr);
  if (!p->p) return NULL;
  b->n++;
  b->create_ms += now_ms() - t0;
  return p;
}

int dnnl_baseline_matmul(dnnl_baseline *b, int64_t batch, int64_t m, int64_t k, int64_t n,
                         const float *a, const int64_t sa[3], const float *w,
                         const int64_t sw[3], const float *bias, int gelu, int accumulate,
                         float *c, const int64_t sc[3]) {
  prim_key key;
  memset(&key, 0, sizeof key);
  key.batch = batch, key.m = m, key.k = k, key.n = n;
  memcpy(key.sa, sa, sizeof key.sa);
  memcpy(key.sw, sw, sizeof key.sw);
  memcpy(key.sc, sc, sizeof key.sc);
  key.bias = bias != NULL, key.gelu = gelu, key.accumulate = accumulate;
  prim *p = get(b, &key);
  if (!p) return -1;
  dnnl_memory_t ma, mw, mb = NULL, mc;
  dnnl_memory_create(&ma, &p->ad, b->eng, (void *)a);
  dnnl_memory_create(&mw, &p->wd, b->eng, (void *)w);
  dnnl_memory_create(&mc, &p->cd, b->eng, c);
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, mc}};
  int nargs = 3;
  if (bias) {
    dnnl_memory_create(&mb, &p->bd, b->eng, (void *)bias);
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, mb};
  }
  int rc = dnnl_primitive_execute(p->p, b->stream, nargs, args) == dnnl_success &&
                   dnnl_stream_wait(b->stream) == dnnl_success
               ? 0
               : -1;
  dnnl_memory_destroy(ma);
  dnnl_memory_destroy(mw);
  if (mb) dnnl_memory_destroy(mb);
  dnnl_memory_destroy(mc);
  return rc;
}

/* ---- convolutions and pooling ------------------------------------------------- */

static win_prim *win_slot(dnnl_baseline *b, const win_key *key) {
  uint64_t h = 14695981039346656037ull; /* FNV-1a */
  const unsigned char *k = (const unsigned char *)key;
  for (size_t i = 0; i < sizeof *key; i++) h = (h ^ k[i]) * 1099511628211ull;
  for (size_t i = h & (WIN_SLOTS - 1);; i = (i + 1) & (WIN_SLOTS - 1)) {
    win_prim *e = &b->wins[i];
    if (!e->p || !memcmp(&e->key, key, sizeof *key)) return e;
  }
}

/* src and dst NHWC, spatial parameters, right padding implied by the output */
static void win_geometry(win_prim *e, dnnl_dims_t st, dnnl_dims_t pl, dnnl_dims_t pr) {
  const baseline_window *s = &e->key.win;
  dnnl_dims_t sd = {s->mb, s->ic, s->ih, s->iw};
  dnnl_dims_t dd = {s->mb, e->key.kind == WIN_CONV ? s->oc : s->ic, s->oh, s->ow};
  dnnl_memory_desc_init_by_tag(&e->sd, 4, sd, dnnl_f32, dnnl_nhwc);
  dnnl_memory_desc_init_by_tag(&e->dd, 4, dd, dnnl_f32, dnnl_nhwc);
  st[0] = s->sh, st[1] = s->sw, pl[0] = s->ph, pl[1] = s->pw;
  /* the window's extent with benchdnn's dilation (0: none) */
  pr[0] = (s->oh - 1) * s->sh - s->ih + (s->kh - 1) * (s->dh + 1) + 1 - s->ph;
  pr[1] = (s->ow - 1) * s->sw - s->iw + (s->kw - 1) * (s->dw + 1) + 1 - s->pw;
}

/* The weights in the primitive's layout: another window's copy of the same
 * weights in the same layout, else a new one (one reorder from HWIO). */
static int conv_weights(dnnl_baseline *b, win_prim *e, const dnnl_memory_desc_t *user) {
  for (int i = 0; i < WIN_SLOTS; i++) {
    win_prim *o = &b->wins[i];
    if (o != e && o->p && o->key.kind == WIN_CONV && o->key.w == e->key.w &&
        dnnl_memory_desc_equal(&o->wd, &e->wd)) {
      e->wbuf = o->wbuf;
      return dnnl_memory_create(&e->wm, &e->wd, b->eng, e->wbuf) == dnnl_success ? 0 : -1;
    }
  }
  size_t bytes = (dnnl_memory_desc_get_size(&e->wd) + 63) / 64 * 64;
  e->wbuf = aligned_alloc(64, bytes);
  if (!e->wbuf) return -1;
  e->owns_wbuf = 1;
  dnnl_memory_t um = NULL;
  dnnl_primitive_desc_t rpd = NULL;
  dnnl_primitive_t reo = NULL;
  int ok = dnnl_memory_create(&e->wm, &e->wd, b->eng, e->wbuf) == dnnl_success &&
           dnnl_memory_create(&um, user, b->eng, (void *)e->key.w) == dnnl_success &&
           dnnl_reorder_primitive_desc_create(&rpd, user, b->eng, &e->wd, b->eng, NULL) ==
               dnnl_success &&
           dnnl_primitive_create(&reo, rpd) == dnnl_success;
  if (ok) {
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, um}, {DNNL_ARG_TO, e->wm}};
    ok = dnnl_primitive_execute(reo, b->stream, 2, args) == dnnl_success &&
         dnnl_stream_wait(b->stream) == dnnl_success;
  }
  if (reo) dnnl_primitive_destroy(reo);
  if (rpd) dnnl_primitive_desc_destroy(rpd);
  if (um) dnnl_memory_destroy(um);
  return ok ? 0 : -1;
}

static int conv_create(dnnl_baseline *b, win_prim *e) {
  const baseline_window *s = &e->key.win;
  dnnl_dims_t st, pl, pr, dil = {s->dh, s->dw}, bd = {s->oc};
  win_geometry(e, st, pl, pr);
  dnnl_memory_desc_init_by_tag(&e->bd, 1, bd, dnnl_f32, dnnl_a);
  /* HWIO as oneDNN's (oc, ic, kh, kw), or (g, oc/g, ic/g, kh, kw) with groups */
  int64_t g = s->groups, icg = s->ic / g, oc = s->oc;
  dnnl_memory_desc_t user, any;
  if (g == 1) {
    dnnl_dims_t d = {oc, icg, s->kh, s->kw}, str = {1, oc, s->kw * icg * oc, icg * oc};
    dnnl_memory_desc_init_by_strides(&user, 4, d, dnnl_f32, str);
    dnnl_memory_desc_init_by_tag(&any, 4, d, dnnl_f32, dnnl_format_tag_any);
  } else {
    dnnl_dims_t d = {g, oc / g, icg, s->kh, s->kw},
                str = {oc / g, 1, oc, s->kw * icg * oc, icg * oc};
    dnnl_memory_desc_init_by_strides(&user, 5, d, dnnl_f32, str);
    dnnl_memory_desc_init_by_tag(&any, 5, d, dnnl_f32, dnnl_format_tag_any);
  }
  dnnl_convolution_desc_t cd;
  if (dnnl_dilated_convolution_forward_desc_init(
          &cd, dnnl_forward_inference, dnnl_convolution_direct, &e->sd, &any,
          e->key.bias ? &e->bd : NULL, &e->dd, st, dil, pl, pr) != dnnl_success)
    return -1;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  dnnl_primitive_desc_t pd = NULL;
  int ok = 0;
  dnnl_primitive_attr_create(&attr);
  if (e->key.accumulate || e->key.act != BASELINE_ACT_NONE) {
    dnnl_post_ops_create(&po);
    if (e->key.accumulate) dnnl_post_ops_append_sum(po, 1.0f);
    if (e->key.act == BASELINE_ACT_RELU)
      dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f);
    else if (e->key.act == BASELINE_ACT_RELU6)
      dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_clip, 0.0f, 6.0f);
    dnnl_primitive_attr_set_post_ops(attr, po);
  }
  if (dnnl_primitive_desc_create(&pd, &cd, attr, b->eng, NULL) == dnnl_success &&
      dnnl_primitive_create(&e->p, pd) == dnnl_success) {
    e->wd = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    ok = conv_weights(b, e, &user) == 0;
  }
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (po) dnnl_post_ops_destroy(po);
  dnnl_primitive_attr_destroy(attr);
  return ok ? 0 : -1;
}

static int pool_create(dnnl_baseline *b, win_prim *e) {
  const baseline_window *s = &e->key.win;
  dnnl_dims_t st, pl, pr, dil = {0, 0}, k = {s->kh, s->kw};
  win_geometry(e, st, pl, pr);
  dnnl_pooling_v2_desc_t pdesc;
  dnnl_alg_kind_t alg =
      e->key.kind == WIN_AVG_POOL ? dnnl_pooling_avg_exclude_padding : dnnl_pooling_max;
  if (dnnl_pooling_v2_forward_desc_init(&pdesc, dnnl_forward_inference, alg, &e->sd, &e->dd, st,
                                        k, dil, pl, pr) != dnnl_success)
    return -1;
  dnnl_primitive_desc_t pd = NULL;
  if (dnnl_primitive_desc_create(&pd, &pdesc, NULL, b->eng, NULL) == dnnl_success)
    dnnl_primitive_create(&e->p, pd);
  if (pd) dnnl_primitive_desc_destroy(pd);
  return e->p ? 0 : -1;
}

/* the cached primitive of `key`, created on first use; NULL on failure */
static win_prim *win_get(dnnl_baseline *b, const win_key *key) {
  win_prim *e = win_slot(b, key);
  if (e->p) return e;
  if (b->nwins >= WIN_SLOTS / 4 * 3) return NULL; /* keep the probes short */
  double t0 = now_ms();
  memset(e, 0, sizeof *e);
  e->key = *key;
  if ((key->kind == WIN_CONV ? conv_create(b, e) : pool_create(b, e)) != 0) {
    if (e->p) dnnl_primitive_destroy(e->p);
    if (e->wm) dnnl_memory_destroy(e->wm);
    if (e->owns_wbuf) free(e->wbuf);
    memset(e, 0, sizeof *e); /* the slot is free again */
    return NULL;
  }
  b->nwins++;
  b->create_ms += now_ms() - t0;
  return e;
}

static int win_execute(dnnl_baseline *b, const win_prim *e, const float *src, const float *bias,
                       float *dst) {
  dnnl_memory_t ms = NULL, md = NULL, mb = NULL;
  dnnl_exec_arg_t args[4];
  int nargs = 0, ok = dnnl_memory_create(&ms, &e->sd, b->eng, (void *)src) == dnnl_success &&
                      dnnl_memory_create(&md, &e->dd, b->eng, dst) == dnnl_success &&
                      (!bias || dnnl_memory_create(&mb, &e->bd, b->eng, (void *)bias) ==
                                    dnnl_success);
  if (ok) {
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, ms};
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_DST, md};
    if (e->wm) args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, e->wm};
    if (mb) args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, mb};
    ok = dnnl_primitive_execute(e->p, b->stream, nargs, args) == dnnl_success &&
         dnnl_stream_wait(b->stream) == dnnl_success;
  }
  if (ms) dnnl_memory_destroy(ms);
  if (md) dnnl_memory_destroy(md);
  if (mb) dnnl_memory_destroy(mb);
  return ok ? 0 : -1;
}

int dnnl_baseline_conv(dnnl_baseline *b, const baseline_window *win, const float *src,
                       const float *w, const float *bias, baseline_act act, int accumulate,
                       float *dst) {
  win_key key;
  memset(&key, 0, sizeof key); /* the padding bytes too: keys are hashed and compared */
  key.w = w;
  key.win = *win;
  key.kind = WIN_CONV;
  key.act = (int)act, key.accumulate = accumulate, key.bias = bias != NULL;
  const win_prim *e = win_get(b, &key);
  return e ? win_execute(b, e, src, bias, dst) : -1;
}

int dnnl_baseline_pool(dnnl_baseline *b, const baseline_window *win, int avg, const float *src,
                       float *dst) {
  win_key key;
  memset(&key, 0, sizeof key);
  key.win = *win;
  key.win.oc = key.win.groups = 0; /* not used by pooling */
  key.kind = avg ? WIN_AVG_POOL : WIN_MAX_POOL;
  const win_prim *e = win_get(b, &key);
  return e ? win_execute(b, e, src, NULL, dst) : -1;
}

int dnnl_baseline_primitives(const dnnl_baseline *b, double *create_ms) {
  *create_ms = b->create_ms;
  return b->n + b->nwins;
}

int dnnl_baseline_match_isa(void) {
  const char *isa = getenv("TLM_ISA");
  if (!isa || !*isa || !strcmp(isa, "native") || !strcmp(isa, "host")) return 0;
  const char *cap = !strcmp(isa, "avx512") ? "AVX512_CORE_AMX" /* every AVX-512 kernel */
                    : !strcmp(isa, "avx2") ? "AVX2"
                                           : "SSE41"; /* sse, scalar: oneDNN's narrowest */
  const char *cur = getenv("ONEDNN_MAX_CPU_ISA");
  if (cur && *cur) return 0; /* the caller chose */
  return setenv("ONEDNN_MAX_CPU_ISA", cap, 1) ? -1 : 0;
}

const char *dnnl_baseline_isa(void) {
  switch ((int)dnnl_get_effective_cpu_isa()) {
  case dnnl_cpu_isa_sse41: return "sse41";
  case dnnl_cpu_isa_avx: return "avx";
  case dnnl_cpu_isa_avx2: return "avx2";
  case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
  case dnnl_cpu_isa_avx512_core: return "avx512_core";
  case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
  case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
  case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
  default: return "other";
  }
}

int dnnl_baseline_pin_threads(char **argv, int threads) {
  dnnl_baseline_match_isa(); /* inherited by the re-run too */
  char nt[16];
  snprintf(nt, sizeof nt, "%d", threads);
  const char *cur = getenv("OMP_NUM_THREADS");
  if (cur && !strcmp(cur, nt)) return 0;
  if (setenv("OMP_NUM_THREADS", nt, 1)) return -1;
  execv("/proc/self/exe", argv);
  return -1; /* still here: the re-run failed */
}

/* ---- bound primitives ----------------------------------------------------------- */

struct dnnl_bound {
  dnnl_primitive_t prim;
  dnnl_memory_t mem[3]; /* SRC, WEIGHTS, DST */
  dnnl_stream_t stream;
  float *owned[3];      /* buffers allocated here (convolutions) */
};

int dnnl_bound_run(dnnl_bound *p) {
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, p->mem[0]},
                             {DNNL_ARG_WEIGHTS, p->mem[1]},
                             {DNNL_ARG_DST, p->mem[2]}};
  return dnnl_primitive_execute(p->prim, p->stream, 3, args) == dnnl_success &&
                 dnnl_stream_wait(p->stream) == dnnl_success
             ? 0
             : -1;
}

void dnnl_bound_destroy(dnnl_bound *p) {
  if (!p) return;
  if (p->prim) dnnl_primitive_destroy(p->prim);
  for (int i = 0; i < 3; i++)
    if (p->mem[i]) dnnl_memory_destroy(p->mem[i]);
  if (p->stream) dnnl_stream_destroy(p->stream);
  for (int i = 0; i < 3; i++) free(p->owned[i]);
  free(p);
}

dnnl_bound *dnnl_bound_matmul(dnnl_baseline *b, int64_t M, int64_t K, int64_t N, float *a,
                              float *w, float *c) {
  dnnl_bound *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  dnnl_memory_desc_t ad, bd, cd;
  dnnl_dims_t da = {M, K}, db = {K, N}, dc = {M, N};
  dnnl_matmul_desc_t md;
  dnnl_primitive_desc_t pd = NULL;
  int ok = dnnl_memory_desc_init_by_tag(&ad, 2, da, dnnl_f32, dnnl_ab) == dnnl_success &&
           dnnl_memory_desc_init_by_tag(&bd, 2, db, dnnl_f32, dnnl_ab) == dnnl_success &&
           dnnl_memory_desc_init_by_tag(&cd, 2, dc, dnnl_f32, dnnl_ab) == dnnl_success &&
           dnnl_matmul_desc_init(&md, &ad, &bd, NULL, &cd) == dnnl_success &&
           dnnl_primitive_desc_create(&pd, &md, NULL, b->eng, NULL) == dnnl_success &&
           dnnl_primitive_create(&p->prim, pd) == dnnl_success &&
           dnnl_memory_create(&p->mem[0], &ad, b->eng, a) == dnnl_success &&
           dnnl_memory_create(&p->mem[1], &bd, b->eng, w) == dnnl_success &&
           dnnl_memory_create(&p->mem[2], &cd, b->eng, c) == dnnl_success &&
           dnnl_stream_create(&p->stream, b->eng, dnnl_stream_default_flags) == dnnl_success;
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (!ok) {
    dnnl_bound_destroy(p);
    return NULL;
  }
  return p;
}

/* weights from the user's layout into the primitive's, once */
static int bound_reorder(dnnl_baseline *b, dnnl_bound *p, const dnnl_memory_desc_t *user,
                         float *wuser) {
  dnnl_memory_t wu = NULL;
  dnnl_primitive_desc_t rpd = NULL;
  dnnl_primitive_t reo = NULL;
  const dnnl_memory_desc_t *wq = NULL;
  dnnl_memory_get_memory_desc(p->mem[1], &wq);
  int ok = wq && dnnl_memory_create(&wu, user, b->eng, wuser) == dnnl_success &&
           dnnl_reorder_primitive_desc_create(&rpd, user, b->eng, wq, b->eng, NULL) ==
               dnnl_success &&
           dnnl_primitive_create(&reo, rpd) == dnnl_success;
  if (ok) {
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, wu}, {DNNL_ARG_TO, p->mem[1]}};
    ok = dnnl_primitive_execute(reo, p->stream, 2, args) == dnnl_success &&
         dnnl_stream_wait(p->stream) == dnnl_success;
  }
  if (reo) dnnl_primitive_destroy(reo);
  if (rpd) dnnl_primitive_desc_destroy(rpd);
  if (wu) dnnl_memory_destroy(wu);
  return ok ? 0 : -1;
}

dnnl_bound *dnnl_bound_conv(dnnl_baseline *b, const baseline_window *s, int nhwc) {
  dnnl_bound *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  int64_t g = s->groups > 0 ? s->groups : 1;
  dnnl_dims_t sd = {s->mb, s->ic, s->ih, s->iw}, dd = {s->mb, s->oc, s->oh, s->ow};
  dnnl_dims_t wd = {s->oc, s->ic, s->kh, s->kw};
  dnnl_dims_t wdg = {g, s->oc / g, s->ic / g, s->kh, s->kw};
  dnnl_memory_desc_t smd, dmd, wany, wmd_user;
  dnnl_format_tag_t act = nhwc ? dnnl_nhwc : dnnl_nchw;
  dnnl_dims_t st = {s->sh, s->sw}, dil = {s->dh, s->dw}, pl = {s->ph, s->pw};
  dnnl_dims_t pr = {(s->oh - 1) * s->sh - s->ih + (s->kh - 1) * (s->dh + 1) + 1 - s->ph,
                    (s->ow - 1) * s->sw - s->iw + (s->kw - 1) * (s->dw + 1) + 1 - s->pw};
  dnnl_convolution_desc_t cd;
  dnnl_primitive_desc_t pd = NULL;
  float *wuser = NULL;
  int ok = dnnl_memory_desc_init_by_tag(&smd, 4, sd, dnnl_f32, act) == dnnl_success &&
           dnnl_memory_desc_init_by_tag(&dmd, 4, dd, dnnl_f32, act) == dnnl_success &&
           (g > 1 ? dnnl_memory_desc_init_by_tag(&wany, 5, wdg, dnnl_f32, dnnl_format_tag_any) ==
                            dnnl_success &&
                        dnnl_memory_desc_init_by_tag(&wmd_user, 5, wdg, dnnl_f32, dnnl_goihw) ==
                            dnnl_success
                  : dnnl_memory_desc_init_by_tag(&wany, 4, wd, dnnl_f32, dnnl_format_tag_any) ==
                            dnnl_success &&
                        dnnl_memory_desc_init_by_tag(&wmd_user, 4, wd, dnnl_f32, dnnl_oihw) ==
                            dnnl_success) &&
           dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference,
                                                      dnnl_convolution_direct, &smd, &wany, NULL,
                                                      &dmd, st, dil, pl, pr) == dnnl_success &&
           dnnl_primitive_desc_create(&pd, &cd, NULL, b->eng, NULL) == dnnl_success &&
           dnnl_primitive_create(&p->prim, pd) == dnnl_success &&
           dnnl_stream_create(&p->stream, b->eng, dnnl_stream_default_flags) == dnnl_success;
  size_t nx = (size_t)(s->mb * s->ic * s->ih * s->iw), ny = (size_t)(s->mb * s->oc * s->oh * s->ow);
  size_t nw = (size_t)(s->oc * (s->ic / g) * s->kh * s->kw);
  if (ok) {
    const dnnl_memory_desc_t *wq = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    p->owned[0] = malloc(nx * sizeof(float));
    p->owned[1] = malloc(dnnl_memory_desc_get_size(wq) + 64);
    p->owned[2] = malloc(ny * sizeof(float));
    wuser = malloc(nw * sizeof(float));
    ok = p->owned[0] && p->owned[1] && p->owned[2] && wuser;
    if (ok) {
      for (size_t i = 0; i < nx; i++) p->owned[0][i] = (float)(i % 17) / 17.0f - 0.5f;
      for (size_t i = 0; i < nw; i++) wuser[i] = (float)(i % 13) / 13.0f - 0.5f;
      ok = dnnl_memory_create(&p->mem[1], wq, b->eng, p->owned[1]) == dnnl_success &&
           bound_reorder(b, p, &wmd_user, wuser) == 0 &&
           dnnl_memory_create(&p->mem[0], &smd, b->eng, p->owned[0]) == dnnl_success &&
           dnnl_memory_create(&p->mem[2], &dmd, b->eng, p->owned[2]) == dnnl_success;
    }
  }
  free(wuser);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (!ok) {
    dnnl_bound_destroy(p);
    return NULL;
  }
  return p;
}
