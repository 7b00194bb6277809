/* baseline_dnnl.c - oneDNN matmul primitives for the samples' baseline. */
#include "baseline_dnnl.h"

#include <oneapi/dnnl/dnnl.h>
#include <stdlib.h>
#include <time.h>

#define MAX_PRIMS 512

typedef struct prim {
  int64_t m, k, n;
  int gelu;
  dnnl_primitive_t p;
} prim;

struct dnnl_baseline {
  dnnl_engine_t eng;
  dnnl_stream_t stream;
  prim prims[MAX_PRIMS];
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
  if (dnnl_engine_create(&b->eng, dnnl_cpu, 0) != dnnl_success ||
      dnnl_stream_create(&b->stream, b->eng, dnnl_stream_default_flags) != dnnl_success) {
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
  free(b);
}

static dnnl_primitive_t get(dnnl_baseline *b, int64_t m, int64_t k, int64_t n, int gelu) {
  for (int i = 0; i < b->n; i++)
    if (b->prims[i].m == m && b->prims[i].k == k && b->prims[i].n == n && b->prims[i].gelu == gelu)
      return b->prims[i].p;
  if (b->n == MAX_PRIMS) return NULL;
  double t0 = now_ms();
  dnnl_memory_desc_t xd, wd, bd, yd;
  dnnl_dims_t dx = {m, k}, dw = {k, n}, db = {1, n}, dy = {m, n};
  dnnl_memory_desc_init_by_tag(&xd, 2, dx, dnnl_f32, dnnl_ab);
  dnnl_memory_desc_init_by_tag(&wd, 2, dw, dnnl_f32, dnnl_ab);
  dnnl_memory_desc_init_by_tag(&bd, 2, db, dnnl_f32, dnnl_ab);
  dnnl_memory_desc_init_by_tag(&yd, 2, dy, dnnl_f32, dnnl_ab);
  dnnl_matmul_desc_t md;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_t p = NULL;
  if (dnnl_matmul_desc_init(&md, &xd, &wd, &bd, &yd) != dnnl_success) return NULL;
  dnnl_primitive_attr_create(&attr);
  if (gelu) {
    dnnl_post_ops_create(&po);
    dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_gelu_tanh, 0.0f, 0.0f);
    dnnl_primitive_attr_set_post_ops(attr, po);
  }
  if (dnnl_primitive_desc_create(&pd, &md, attr, b->eng, NULL) == dnnl_success)
    dnnl_primitive_create(&p, pd);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (po) dnnl_post_ops_destroy(po);
  dnnl_primitive_attr_destroy(attr);
  if (!p) return NULL;
  b->prims[b->n++] = (prim){m, k, n, gelu, p};
  b->create_ms += now_ms() - t0;
  return p;
}

int dnnl_baseline_linear(dnnl_baseline *b, int64_t m, int64_t k, int64_t n, const float *x,
                         const float *w, const float *bias, int gelu, float *y) {
  dnnl_primitive_t p = get(b, m, k, n, gelu);
  if (!p) return -1;
  dnnl_memory_desc_t xd, wd, bd, yd;
  dnnl_dims_t dx = {m, k}, dw = {k, n}, db = {1, n}, dy = {m, n};
  dnnl_memory_desc_init_by_tag(&xd, 2, dx, dnnl_f32, dnnl_ab);
  dnnl_memory_desc_init_by_tag(&wd, 2, dw, dnnl_f32, dnnl_ab);
  dnnl_memory_desc_init_by_tag(&bd, 2, db, dnnl_f32, dnnl_ab);
  dnnl_memory_desc_init_by_tag(&yd, 2, dy, dnnl_f32, dnnl_ab);
  dnnl_memory_t mx, mw, mb, my;
  dnnl_memory_create(&mx, &xd, b->eng, (void *)x);
  dnnl_memory_create(&mw, &wd, b->eng, (void *)w);
  dnnl_memory_create(&mb, &bd, b->eng, (void *)bias);
  dnnl_memory_create(&my, &yd, b->eng, y);
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, mx}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_BIAS, mb},
                             {DNNL_ARG_DST, my}};
  int rc = dnnl_primitive_execute(p, b->stream, 4, args) == dnnl_success &&
                   dnnl_stream_wait(b->stream) == dnnl_success
               ? 0
               : -1;
  dnnl_memory_destroy(mx);
  dnnl_memory_destroy(mw);
  dnnl_memory_destroy(mb);
  dnnl_memory_destroy(my);
  return rc;
}

int dnnl_baseline_primitives(const dnnl_baseline *b, double *create_ms) {
  *create_ms = b->create_ms;
  return b->n;
}
