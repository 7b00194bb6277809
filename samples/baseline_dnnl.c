/* baseline_dnnl.c - oneDNN matmul primitives for the samples' baseline. */
#include "baseline_dnnl.h"

#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_PRIMS 4096

typedef struct prim_key {
  int64_t batch, m, k, n, sa[3], sw[3], sc[3];
  int bias, gelu, accumulate;
} prim_key;

typedef struct prim {
  prim_key key;
  dnnl_primitive_t p;
  dnnl_memory_desc_t ad, wd, bd, cd;
} prim;

struct dnnl_baseline {
  dnnl_engine_t eng;
  dnnl_stream_t stream;
  prim *prims;
  int n;
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
  if (!b->prims || dnnl_engine_create(&b->eng, dnnl_cpu, 0) != dnnl_success ||
      dnnl_stream_create(&b->stream, b->eng, dnnl_stream_default_flags) != dnnl_success) {
    free(b->prims);
    free(b);
    return NULL;
  }
  return b;
}

void dnnl_baseline_destroy(dnnl_baseline *b) {
  if (!b) return;
  for (int i = 0; i < b->n; i++) dnnl_primitive_destroy(b->prims[i].p);
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

int dnnl_baseline_primitives(const dnnl_baseline *b, double *create_ms) {
  *create_ms = b->create_ms;
  return b->n;
}

int dnnl_baseline_pin_threads(char **argv, int threads) {
  char nt[16];
  snprintf(nt, sizeof nt, "%d", threads);
  const char *cur = getenv("OMP_NUM_THREADS");
  if (cur && !strcmp(cur, nt)) return 0;
  if (setenv("OMP_NUM_THREADS", nt, 1)) return -1;
  execv("/proc/self/exe", argv);
  return -1; /* still here: the re-run failed */
}
