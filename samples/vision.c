/* vision.c - image classification networks served through tlm_run(), on a
 * stream of images whose resolution changes from one image to the next.
 *
 * Networks, NHWC activations and HWIO weights from a fixed seed (He-uniform
 * weights, small biases), batch normalization folded into each
 * convolution's weights and bias as for inference:
 *   resnet50   ResNet-50 v1 in its Caffe form, whose layers at 224x224 are
 *              the descriptors of ../shared/workloads/benchdnn/conv/
 *              shapes_resnet_50: conv1 7x7/2 pad 3 and ReLU, max pool 3x3/2
 *              pad 1 (res2a reads 56x56), bottleneck blocks [3, 4, 6, 3]
 *              with stride 2 in the first 1x1 of stages 3-5 (res3a_branch2a,
 *              ...) and in the 1x1 projection (res3a_branch1, ...), the
 *              residual add and ReLU fused into each block's last 1x1
 *              (branch2c), global average pool, fully connected 2048 -> 1000.
 *   mobilenet  MobileNet v1 (shapes_mobilenet and shapes_mobilenet_dw in the
 *              same folder): conv 3x3/2 3 -> 32, 13 pairs of a depthwise 3x3
 *              (groups = channels) and a pointwise 1x1, ReLU6 after each
 *              convolution, global average pool, fully connected 1024 -> 1000.
 * Every convolution (bias and activation, and the residual add, in its
 * epilogue), every pooling and the fully connected layer (a matmul) is a
 * tlm_run() call.
 *
 * The stream: --images minibatches per network of --mb images each (so
 * --images images with the default minibatch of 1), of side 160, 192, 224,
 * 256 and 288 in turn (--sizes). Each new size brings new shapes, which tlm
 * schedules and compiles on first sight: that is the cold pass. A second
 * pass over the same images runs on warm caches (after
 * tlm_wait_background(): with background builds, the default, the cold
 * pass may leave builds running; TLM_ASYNC=0 builds each new shape before
 * its call returns). Latencies are per minibatch.
 *
 * Baseline in the same run: the same networks with oneDNN primitives
 * (convolutions with sum and eltwise post-ops, pooling, matmul), one per
 * layer and input size, created on first use, weights reordered once, on the
 * same number of threads, in a cold pass after tlm's, then --rounds warm
 * rounds (default 3) of one tlm pass and one oneDNN pass each, in turns
 * (the warm speed ratio: the median round's, with the min and max). The
 * logits of the first minibatch of every size are compared (largest
 * difference relative to the largest logit; the run fails above 1e-3).
 * The 1x1 "conv11" (1024 -> 5) of shapes_mobilenet is left out: the
 * classifier here is the usual 1024 -> 1000 fully connected layer.
 *
 * Usage: vision [--model resnet50|mobilenet|both] [--sizes 160,192,...]
 *               [--images N] [--mb N] [--threads N] [--json FILE]
 *               [--no-baseline] [--no-prepack] [--profile] [--rounds N]
 *
 * --profile: the warm passes time every layer (summed over the pass, the
 * mean over the rounds) and the report lists the layers where tlm loses
 * most time to oneDNN.
 * The weights are declared constant to tlm (tlm_constant_add), as
 * oneDNN's are reordered once: tlm packs those its matmul kernels read in
 * panels once, on first use. --no-prepack reads them as given every call.
 * tlm also keeps kernels in its disk cache (tlm_config.cache_dir); run with
 * TLM_CACHE_DIR=none for a cold pass that compiles everything.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "json_report.h"
#include "tlm.h"

#ifdef TLM_HAVE_DNNL
#include "baseline_dnnl.h"
#endif

#define NCLASS 1000
#define MAX_LAYERS 64
#define NBUF 6       /* activation buffers of a network; 0 holds the input */
#define MAX_SIZES 32
#define MAX_ROUNDS 15 /* warm rounds (--rounds) */

typedef enum layer_kind { CONV, MAX_POOL, AVG_POOL, FC } layer_kind;

typedef struct layer {
  layer_kind kind;
  char name[32];       /* as in the benchdnn sets, e.g. res3a_branch2a */
  int src, dst, res;   /* activation buffers; res: the residual's, or -1 */
  int ic, oc, k, stride, pad, groups; /* pooling: ic = oc; k 0 = global */
  tlm_activation act;
  float *w, *b;        /* HWIO (k, k, ic / groups, oc), FC (ic, oc); bias (oc) */
  int ih, iw, oh, ow;  /* extents at the current image size (net_plan) */
} layer;

typedef struct net {
  const char *name, *shapes; /* shapes: the benchdnn set it follows */
  layer l[MAX_LAYERS];
  int n, out;                /* out: the buffer of the logits */
  float *buf[NBUF];          /* each large enough for the largest size */
} net;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* uniform in [-1, 1) */
static float frand(uint64_t *state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((*state >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

/* ---- the networks ------------------------------------------------------------ */

static layer *add(net *n, layer_kind kind, const char *name, int src, int dst, int ic, int oc,
                  int k, int stride, int pad) {
  layer *L = &n->l[n->n++];
  memset(L, 0, sizeof *L);
  L->kind = kind;
  snprintf(L->name, sizeof L->name, "%s", name);
  L->src = src, L->dst = dst, L->res = -1;
  L->ic = ic, L->oc = oc, L->k = k, L->stride = stride, L->pad = pad, L->groups = 1;
  return L;
}

static layer *conv(net *n, const char *name, int src, int dst, int ic, int oc, int k, int stride,
                   tlm_activation act) {
  layer *L = add(n, CONV, name, src, dst, ic, oc, k, stride, k / 2);
  L->act = act;
  return L;
}

/* ResNet-50 v1, benchdnn's shapes_resnet_50. Buffers: 1 and 2 hold the
 * blocks' inputs and outputs in turn, 3 and 4 the block's inner activations,
 * 5 the projection shortcut. */
static void build_resnet50(net *n) {
  static const int blocks[4] = {3, 4, 6, 3};
  n->name = "resnet50", n->shapes = "shapes_resnet_50";
  conv(n, "conv1", 0, 3, 3, 64, 7, 2, TLM_ACT_RELU);
  add(n, MAX_POOL, "pool1", 3, 1, 64, 64, 3, 2, 1);
  int x = 1, c = 64;
  char nm[32];
  for (int s = 0; s < 4; s++) {
    int mid = 64 << s, out = 256 << s;
    for (int b = 0; b < blocks[s]; b++) {
      int stride = s > 0 && b == 0 ? 2 : 1, y = 3 - x, res = x;
      char id[16];
      snprintf(id, sizeof id, "res%d%c", s + 2, 'a' + b);
      if (b == 0) {
        snprintf(nm, sizeof nm, "%s_branch1", id);
        conv(n, nm, x, 5, c, out, 1, stride, TLM_ACT_NONE);
        res = 5;
      }
      snprintf(nm, sizeof nm, "%s_branch2a", id);
      conv(n, nm, x, 3, c, mid, 1, stride, TLM_ACT_RELU);
      snprintf(nm, sizeof nm, "%s_branch2b", id);
      conv(n, nm, 3, 4, mid, mid, 3, 1, TLM_ACT_RELU);
      snprintf(nm, sizeof nm, "%s_branch2c", id);
      conv(n, nm, 4, y, mid, out, 1, 1, TLM_ACT_RELU)->res = res;
      x = y, c = out;
    }
  }
  add(n, AVG_POOL, "pool5", x, 3, c, c, 0, 1, 0);
  add(n, FC, "fc1000", 3, 4, c, NCLASS, 1, 1, 0);
  n->out = 4;
}

/* MobileNet v1, benchdnn's shapes_mobilenet (pointwise) and shapes_mobilenet_dw
 * (depthwise, named convX_Y/dw there). Buffers 1 and 2 in turn. */
static void build_mobilenet(net *n) {
  static const struct { const char *id; int oc, stride; } pairs[13] = {
      {"2_1", 64, 1},  {"2_2", 128, 2}, {"3_1", 128, 1}, {"3_2", 256, 2}, {"4_1", 256, 1},
      {"4_2", 512, 2}, {"5_1", 512, 1}, {"5_2", 512, 1}, {"5_3", 512, 1}, {"5_4", 512, 1},
      {"5_5", 512, 1}, {"5_6", 1024, 2}, {"6", 1024, 1}};
  n->name = "mobilenet", n->shapes = "shapes_mobilenet and shapes_mobilenet_dw";
  conv(n, "conv1", 0, 1, 3, 32, 3, 2, TLM_ACT_RELU6);
  int x = 1, c = 32;
  char nm[32];
  for (int i = 0; i < 13; i++) {
    snprintf(nm, sizeof nm, "conv%s/dw", pairs[i].id);
    conv(n, nm, x, 3 - x, c, c, 3, pairs[i].stride, TLM_ACT_RELU6)->groups = c;
    snprintf(nm, sizeof nm, "conv%s/sep", pairs[i].id);
    conv(n, nm, 3 - x, x, c, pairs[i].oc, 1, 1, TLM_ACT_RELU6);
    c = pairs[i].oc;
  }
  add(n, AVG_POOL, "pool6", x, 3, c, c, 0, 1, 0);
  add(n, FC, "fc7", 3, 4, c, NCLASS, 1, 1, 0);
  n->out = 4;
}

/* Sets every layer's extents for input images of side `size`. */
static void net_plan(net *n, int size) {
  int h[NBUF] = {size}, w[NBUF] = {size};
  for (int i = 0; i < n->n; i++) {
    layer *L = &n->l[i];
    L->ih = h[L->src], L->iw = w[L->src];
    if (L->kind == FC || L->k == 0) {
      L->oh = L->ow = 1;
    } else {
      L->oh = (L->ih + 2 * L->pad - L->k) / L->stride + 1;
      L->ow = (L->iw + 2 * L->pad - L->k) / L->stride + 1;
    }
    h[L->dst] = L->oh, w[L->dst] = L->ow;
  }
}

static double net_flops(const net *n, int mb) {
  double f = 0;
  for (int i = 0; i < n->n; i++) {
    const layer *L = &n->l[i];
    if (L->kind == CONV || L->kind == FC)
      f += 2.0 * mb * L->oh * L->ow * L->oc * L->k * L->k * (L->ic / L->groups);
  }
  return f;
}

/* Weights from the network's seed, and the activation buffers for images of
 * side up to max_size. Returns 0, -1. */
static int net_alloc(net *n, uint64_t seed, int mb, int max_size) {
  for (int i = 0; i < n->n; i++) {
    layer *L = &n->l[i];
    if (L->kind != CONV && L->kind != FC) continue;
    size_t fan_in = (size_t)L->k * L->k * (size_t)(L->ic / L->groups), nw = fan_in * L->oc;
    /* He-uniform keeps the activations' scale through the ReLUs; the layers
     * that feed a sum or the logits get half its bound */
    float bound = sqrtf((L->act == TLM_ACT_NONE || L->res >= 0 ? 1.5f : 6.0f) / (float)fan_in);
    L->w = malloc(nw * sizeof(float));
    L->b = malloc((size_t)L->oc * sizeof(float));
    if (!L->w || !L->b) return -1;
    for (size_t j = 0; j < nw; j++) L->w[j] = bound * frand(&seed);
    for (int j = 0; j < L->oc; j++) L->b[j] = 0.05f * frand(&seed);
  }
  net_plan(n, max_size);
  size_t elems = (size_t)max_size * max_size * 3;
  for (int i = 0; i < n->n; i++) {
    size_t e = (size_t)n->l[i].oh * n->l[i].ow * n->l[i].oc;
    if (e > elems) elems = e;
  }
  size_t bytes = ((size_t)mb * elems * sizeof(float) + 63) / 64 * 64;
  for (int i = 0; i < NBUF; i++)
    if (!(n->buf[i] = aligned_alloc(64, bytes))) return -1;
  return 0;
}

static void net_free(net *n) {
  for (int i = 0; i < n->n; i++) free(n->l[i].w), free(n->l[i].b);
  for (int i = 0; i < NBUF; i++) free(n->buf[i]);
}

/* ---- the tlm path ------------------------------------------------------------ */

static tlm_tensor dense(float *data, int nd, const int64_t *shape) {
  tlm_tensor t;
  tlm_tensor_dense(&t, TLM_F32, nd, shape, data);
  return t;
}

/* --profile: each layer's time summed over a pass (NULL: not timed) */
static double *g_layer_ms;

static int forward_tlm(tlm_runtime *rt, net *n, int mb) {
  for (int i = 0; i < n->n; i++) {
    const layer *L = &n->l[i];
    double t0 = g_layer_ms ? now_ms() : 0;
    float *x = n->buf[L->src], *y = n->buf[L->dst];
    /* a block's last convolution writes over its shortcut, which is dead
     * after it (the residual in place, as the oneDNN baseline's sum
     * post-op), and the two buffers trade places: one buffer less to keep
     * warm (ResNet-50's res2 branch2c layers ran 0.60-0.69x oneDNN under
     * AVX2 writing a third buffer, 0.88-0.93x in place; session 43) */
    if (L->kind == CONV && L->res >= 0) y = n->buf[L->res];
    int64_t xs[4] = {mb, L->ih, L->iw, L->ic}, ys[4] = {mb, L->oh, L->ow, L->oc};
    tlm_op op;
    tlm_tensor in[4] = {dense(x, 4, xs)}, out = dense(y, 4, ys);
    int nin = 1;
    if (L->kind == CONV) {
      op = tlm_op_conv(TLM_LAYOUT_NHWC);
      tlm_conv_desc *c = &op.u.conv;
      c->weight_layout = TLM_WEIGHTS_HWIO;
      c->groups = L->groups;
      c->stride[1] = c->stride[2] = L->stride;
      c->pad[1] = c->pad[2] = L->pad;
      c->has_bias = 1;
      c->has_residual = L->res >= 0;
      c->activation = L->act;
      in[nin++] = dense(L->w, 4, (int64_t[]){L->k, L->k, L->ic / L->groups, L->oc});
      in[nin++] = dense(L->b, 1, (int64_t[]){L->oc});
      if (L->res >= 0) in[nin++] = dense(y, 4, ys);
    } else if (L->kind == FC) {
      op = tlm_op_matmul();
      op.u.matmul.has_bias = 1;
      in[0] = dense(x, 2, (int64_t[]){mb, L->ic});
      in[nin++] = dense(L->w, 2, (int64_t[]){L->ic, L->oc});
      in[nin++] = dense(L->b, 1, (int64_t[]){L->oc});
      out = dense(y, 2, (int64_t[]){mb, L->oc});
    } else {
      op = tlm_op_pool(TLM_LAYOUT_NHWC, L->kind == MAX_POOL ? TLM_POOL_MAX : TLM_POOL_AVG);
      tlm_pool_desc *p = &op.u.pool;
      p->kernel[1] = p->kernel[2] = L->k; /* 0: global */
      p->stride[1] = p->stride[2] = L->stride;
      p->pad[1] = p->pad[2] = L->pad;
    }
    if (tlm_run(rt, &op, in, nin, &out, 1) != TLM_OK) {
      fprintf(stderr, "vision: tlm_run failed on %s %s (%dx%d input): %s\n", n->name, L->name,
              L->ih, L->iw, tlm_last_error(rt));
      return -1;
    }
    if (L->kind == CONV && L->res >= 0) n->buf[L->res] = n->buf[L->dst], n->buf[L->dst] = y;
    if (g_layer_ms) g_layer_ms[i] += now_ms() - t0;
  }
  return 0;
}

/* ---- the baseline: oneDNN ------------------------------------------------------ */

#ifdef TLM_HAVE_DNNL
static int forward_dnnl(dnnl_baseline *db, net *n, int mb) {
  for (int i = 0; i < n->n; i++) {
    const layer *L = &n->l[i];
    double t0 = g_layer_ms ? now_ms() : 0;
    float *x = n->buf[L->src], *y = n->buf[L->dst];
    baseline_window win = {mb, L->ic, L->ih, L->iw, L->oc, L->oh, L->ow, L->k, L->k,
                           L->stride, L->stride, L->pad, L->pad, L->groups, 0, 0};
    int bad;
    if (L->kind == CONV) {
      baseline_act act = L->act == TLM_ACT_RELU    ? BASELINE_ACT_RELU
                         : L->act == TLM_ACT_RELU6 ? BASELINE_ACT_RELU6
                                                   : BASELINE_ACT_NONE;
      /* the sum post-op adds into dst: write over the shortcut, which is dead
       * after this layer, in place, and let the two buffers trade places */
      if (L->res >= 0) y = n->buf[L->res];
      bad = dnnl_baseline_conv(db, &win, x, L->w, L->b, act, L->res >= 0, y);
      if (L->res >= 0) n->buf[L->res] = n->buf[L->dst], n->buf[L->dst] = y;
    } else if (L->kind == FC) {
      bad = dnnl_baseline_matmul(db, 1, mb, L->ic, L->oc, x, (int64_t[]){mb * L->ic, L->ic, 1},
                                 L->w, (int64_t[]){L->ic * L->oc, L->oc, 1}, L->b, 0, 0, y,
                                 (int64_t[]){mb * L->oc, L->oc, 1});
    } else {
      if (L->k == 0) win.kh = L->ih, win.kw = L->iw; /* global */
      bad = dnnl_baseline_pool(db, &win, L->kind == AVG_POOL, x, y);
    }
    if (bad) {
      fprintf(stderr, "vision: oneDNN failed on %s %s (%dx%d input)\n", n->name, L->name, L->ih,
              L->iw);
      return -1;
    }
    if (g_layer_ms) g_layer_ms[i] += now_ms() - t0;
  }
  return 0;
}

/* Largest |a - b| / max |b| over the rows of NCLASS logits. */
static double max_rel_diff(const float *a, const float *b, int rows) {
  double worst = 0;
  for (int r = 0; r < rows; r++) {
    double dmax = 0, scale = 0;
    for (int i = 0; i < NCLASS; i++) {
      double d = fabs((double)a[r * NCLASS + i] - b[r * NCLASS + i]);
      dmax = d > dmax || isnan(d) ? d : dmax;
      scale = fmax(scale, fabs((double)b[r * NCLASS + i]));
    }
    double e = dmax / (scale > 0 ? scale : 1);
    if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
  }
  return worst;
}
#endif

/* ---- replay ------------------------------------------------------------------ */

typedef struct pass {
  int batches, images;   /* minibatches run, and the images in them */
  double wall_ms, flops; /* wall_ms: the minibatches' forward times summed */
  double *lat;           /* per minibatch, ms */
  tlm_stats st;          /* tlm's counters over the pass */
  int prims;             /* baseline: primitives created in the pass */
  double prim_ms;        /* and the time creating them */
  double layer_ms[MAX_LAYERS]; /* --profile: each layer's time summed */
  int failed;
} pass;

static tlm_stats stats_since(const tlm_runtime *rt, const tlm_stats *s0) {
  tlm_stats s;
  tlm_get_stats(rt, &s);
  s.runs -= s0->runs, s.cache_hits -= s0->cache_hits, s.cache_misses -= s0->cache_misses;
  s.schedules -= s0->schedules, s.decodes -= s0->decodes, s.compiles -= s0->compiles;
  s.compile_fail -= s0->compile_fail, s.evictions -= s0->evictions;
  s.disk_plan_hits -= s0->disk_plan_hits, s.disk_kernel_hits -= s0->disk_kernel_hits;
  s.schedule_ms -= s0->schedule_ms, s.compile_ms -= s0->compile_ms;
  s.disk_load_ms -= s0->disk_load_ms;
  return s;
}

/* Runs `batches` minibatches of mb images through tlm (db NULL) or the
 * baseline; with `sampled`, keeps the logits of the first minibatch of
 * every size there. */
static void replay(tlm_runtime *rt, void *db, net *n, const int *sizes, int nsizes, int batches,
                   int mb, pass *p, float *sampled) {
  tlm_stats s0;
  tlm_get_stats(rt, &s0);
#ifdef TLM_HAVE_DNNL
  double ms0 = 0;
  int prims0 = db ? dnnl_baseline_primitives(db, &ms0) : 0;
#endif
  for (int q = 0; q < batches && !p->failed; q++) {
    int size = sizes[q % nsizes];
    net_plan(n, size);
    uint64_t seed = 0x5eed0000ull + (uint64_t)q; /* the images' pixels */
    for (size_t i = 0; i < (size_t)mb * size * size * 3; i++) n->buf[0][i] = frand(&seed);
    double t0 = now_ms();
#ifdef TLM_HAVE_DNNL
    p->failed = db ? forward_dnnl(db, n, mb) : forward_tlm(rt, n, mb);
#else
    (void)db;
    p->failed = forward_tlm(rt, n, mb);
#endif
    p->lat[q] = now_ms() - t0;
    p->batches++, p->images += mb;
    p->wall_ms += p->lat[q];
    p->flops += net_flops(n, mb);
    if (sampled && q < nsizes)
      memcpy(sampled + (size_t)q * mb * NCLASS, n->buf[n->out], sizeof(float) * mb * NCLASS);
  }
  p->st = stats_since(rt, &s0);
#ifdef TLM_HAVE_DNNL
  if (db) p->prims = dnnl_baseline_primitives(db, &p->prim_ms) - prims0, p->prim_ms -= ms0;
#endif
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* percentile q (0..100) of n latencies, ms */
static double percentile(const double *lat, int n, int q) {
  double *s = n > 0 ? malloc(sizeof(double) * (size_t)n) : NULL;
  if (!s) return NAN;
  memcpy(s, lat, sizeof(double) * (size_t)n);
  qsort(s, (size_t)n, sizeof(double), cmp_double);
  int i = n * q / 100 < n ? n * q / 100 : n - 1;
  double v = s[i];
  free(s);
  return v;
}

/* ---- report -------------------------------------------------------------------- */

typedef struct result {
  net *n;
  /* tlm and baseline: cold, warm; warm is the round of the median speed
   * ratio (its layer times: the mean over every round) */
  pass t[2], d[2];
  int have_baseline, compared, rounds;
  double diff;
  double ratio[MAX_ROUNDS]; /* each warm round's speed ratio, tlm / oneDNN */
} result;

static double min_of(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
  return m;
}

static double max_of(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; i++) m = v[i] > m ? v[i] : m;
  return m;
}

static void print_pass(const char *what, const pass *p) {
  printf("  %-22s %9.1f ms   %7.2f img/s  p50 %7.2f ms  p99 %7.2f ms   %6.1f GFLOPS\n", what,
         p->wall_ms, p->images / (p->wall_ms * 1e-3), percentile(p->lat, p->batches, 50),
         percentile(p->lat, p->batches, 99), p->flops / (p->wall_ms * 1e6));
}

static void report(const result *r, int batches, int mb, int profile) {
  const net *n = r->n;
  const pass *t = r->t, *d = r->d;
  printf("\n%s (benchdnn %s): %d images in %d minibatches per pass\n", n->name, n->shapes,
         batches * mb, batches);
  if (t[0].failed) {
    printf("  tlm                    FAILED (see the error above)\n");
    return;
  }
  for (int k = 0; k < (r->rounds > 0 ? 2 : 1); k++) {
    char what[32];
    snprintf(what, sizeof what, "tlm, %s", k ? "warm" : "cold");
    print_pass(what, &t[k]);
    if (r->have_baseline) {
      snprintf(what, sizeof what, "oneDNN, %s", k ? "warm" : "cold");
      print_pass(what, &d[k]);
    }
  }
  for (int k = 0; k < 2; k++) {
    const tlm_stats *s = &t[k].st;
    printf("  tlm, %s pass         %llu tlm_run calls: %llu new shapes, %llu cache hits\n",
           k ? "warm" : "cold", (unsigned long long)s->runs, (unsigned long long)s->cache_misses,
           (unsigned long long)s->cache_hits);
    printf("    schedules            %llu decoded by the model, %llu by the rule, %llu from disk "
           "(%.1f ms)\n",
           (unsigned long long)s->decodes, (unsigned long long)(s->schedules - s->decodes),
           (unsigned long long)s->disk_plan_hits, s->schedule_ms);
    printf("    kernels              %llu JIT-compiled (%.1f ms), %llu loaded from disk (%.1f ms)\n",
           (unsigned long long)s->compiles, s->compile_ms, (unsigned long long)s->disk_kernel_hits,
           s->disk_load_ms);
    printf("    schedule + compile   %.1f%% of the pass's wall time (disk loads included)\n",
           100.0 * (s->schedule_ms + s->compile_ms + s->disk_load_ms) / t[k].wall_ms);
  }
  if (!r->have_baseline) return;
  printf("  oneDNN primitives      %d created in the cold pass (%.1f ms with the weight "
         "reorders), %d in the warm one\n",
         d[0].prims, d[0].prim_ms, d[1].prims);
  if (r->rounds > 0)
    printf("  speed vs oneDNN        cold %.2fx, warm %.2fx (tlm images/s / oneDNN images/s; warm: "
           "median of %d alternating rounds, min %.2fx, max %.2fx)\n",
           d[0].wall_ms / t[0].wall_ms, percentile(r->ratio, r->rounds, 50), r->rounds,
           min_of(r->ratio, r->rounds), max_of(r->ratio, r->rounds));
  else
    printf("  speed vs oneDNN        cold %.2fx, warm: no complete round\n",
           d[0].wall_ms / t[0].wall_ms);
  printf("  logits vs oneDNN       max rel diff %.2g on %d images (the first minibatch of every "
         "size): %s\n",
         r->diff, r->compared, r->diff <= 1e-3 ? "PASS" : "FAIL");
  if (!profile) return;
  /* --profile: the warm pass's layers by time lost to oneDNN (time tlm
   * takes over oneDNN's), most first */
  int order[MAX_LAYERS];
  for (int i = 0; i < n->n; i++) order[i] = i;
  for (int i = 1; i < n->n; i++) /* insertion sort: at most MAX_LAYERS layers */
    for (int j = i; j > 0; j--) {
      int a = order[j - 1], b = order[j];
      if (t[1].layer_ms[a] - d[1].layer_ms[a] >= t[1].layer_ms[b] - d[1].layer_ms[b]) break;
      order[j - 1] = b, order[j] = a;
    }
  printf("  warm pass by layer     (ms summed over the pass; tlm, oneDNN, oneDNN / tlm)\n");
  for (int k = 0; k < n->n; k++) {
    const layer *L = &n->l[order[k]];
    double a = t[1].layer_ms[order[k]], b = d[1].layer_ms[order[k]];
    printf("    %-22s %-9s %4d -> %-4d k%d s%d g%-4d %8.2f %8.2f  %5.2fx\n", L->name,
           L->kind == CONV ? "conv" : L->kind == FC ? "fc" : "pool", L->ic, L->oc, L->k, L->stride,
           L->groups, a, b, a > 0 ? b / a : 0.0);
  }
}

static void json_pass(cJSON *parent, const char *key, const pass *p, int tlm) {
  cJSON *o = cJSON_AddObjectToObject(parent, key);
  if (!o) return;
  cJSON_AddNumberToObject(o, "images", p->images);
  cJSON_AddNumberToObject(o, "wall_ms", p->wall_ms);
  cJSON_AddNumberToObject(o, "images_per_s", p->images / (p->wall_ms * 1e-3));
  cJSON_AddNumberToObject(o, "minibatch_latency_p50_ms", percentile(p->lat, p->batches, 50));
  cJSON_AddNumberToObject(o, "minibatch_latency_p99_ms", percentile(p->lat, p->batches, 99));
  cJSON_AddNumberToObject(o, "gflop_per_s", p->flops / (p->wall_ms * 1e6));
  const tlm_stats *s = &p->st;
  if (tlm) {
    cJSON_AddNumberToObject(o, "tlm_run_calls", (double)s->runs);
    cJSON_AddNumberToObject(o, "new_shapes_cache_misses", (double)s->cache_misses);
    cJSON_AddNumberToObject(o, "cache_hits", (double)s->cache_hits);
    cJSON_AddNumberToObject(o, "decodes", (double)s->decodes);
    cJSON_AddNumberToObject(o, "rule_schedules", (double)(s->schedules - s->decodes));
    cJSON_AddNumberToObject(o, "disk_plan_loads", (double)s->disk_plan_hits);
    cJSON_AddNumberToObject(o, "jit_compiles", (double)s->compiles);
    cJSON_AddNumberToObject(o, "disk_kernel_loads", (double)s->disk_kernel_hits);
    cJSON_AddNumberToObject(o, "schedule_ms", s->schedule_ms);
    cJSON_AddNumberToObject(o, "compile_ms", s->compile_ms);
    cJSON_AddNumberToObject(o, "disk_load_ms", s->disk_load_ms);
    cJSON_AddNumberToObject(o, "schedule_compile_share_of_wall",
                            (s->schedule_ms + s->compile_ms + s->disk_load_ms) / p->wall_ms);
  } else {
    cJSON_AddNumberToObject(o, "primitives_created", p->prims);
    cJSON_AddNumberToObject(o, "primitive_create_ms", p->prim_ms);
  }
}

/* 0, or -1 when the file cannot be written whole (said on stderr) */
static int write_json(const char *path, const result *r, int nres, const int *sizes, int nsizes,
                      int batches, int mb, int threads) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "threads", threads);
  cJSON_AddNumberToObject(o, "minibatch", mb);
  cJSON_AddNumberToObject(o, "minibatches_per_pass", batches);
  cJSON_AddNumberToObject(o, "images_per_pass", batches * mb);
  cJSON_AddItemToObject(o, "sizes_px", cJSON_CreateIntArray(sizes, nsizes));
  cJSON *nets = cJSON_AddArrayToObject(o, "networks");
  for (int i = 0; i < nres; i++) {
    const result *x = &r[i];
    cJSON *n = cJSON_CreateObject();
    cJSON_AddItemToArray(nets, n);
    cJSON_AddStringToObject(n, "name", x->n->name);
    cJSON_AddBoolToObject(n, "tlm_ok", !(x->t[0].failed || x->t[1].failed));
    if (!x->t[0].failed) {
      json_pass(n, "tlm_cold", &x->t[0], 1);
      json_pass(n, "tlm_warm", &x->t[1], 1);
    }
    if (x->have_baseline) {
      json_pass(n, "baseline_cold", &x->d[0], 0);
      json_pass(n, "baseline_warm", &x->d[1], 0);
      cJSON_AddNumberToObject(n, "speed_ratio_tlm_over_baseline_cold", x->d[0].wall_ms / x->t[0].wall_ms);
      if (x->rounds > 0) {
        const char *key = "speed_ratio_tlm_over_baseline_warm";
        char k2[64];
        cJSON_AddNumberToObject(n, key, percentile(x->ratio, x->rounds, 50));
        snprintf(k2, sizeof k2, "%s_min", key);
        cJSON_AddNumberToObject(n, k2, min_of(x->ratio, x->rounds));
        snprintf(k2, sizeof k2, "%s_max", key);
        cJSON_AddNumberToObject(n, k2, max_of(x->ratio, x->rounds));
      }
      cJSON_AddNumberToObject(n, "warm_rounds", x->rounds);
      cJSON_AddNumberToObject(n, "max_rel_diff_vs_baseline", x->diff);
      cJSON_AddNumberToObject(n, "images_compared", x->compared);
    }
  }
  int bad = sample_json_write(o, path);
  cJSON_Delete(o);
  if (bad) fprintf(stderr, "vision: cannot write %s\n", path);
  return bad ? -1 : 0;
}

static void pause_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* The warm passes: `rounds` rounds of one tlm pass and one baseline pass
 * (db NULL: tlm only), the order alternating from round to round, a 30 ms
 * pause between contenders (idle OpenMP and tlm workers spin a while), as
 * MEASURING.md times contenders side by side: a drift of the machine moves
 * both alike. r->t[1] and r->d[1] become the round of the median speed
 * ratio; their layer times (--profile) the mean over every round. 0, or -1
 * when a pass failed or memory ran out. */
static int warm_rounds(tlm_runtime *rt, void *db, result *r, const int *sizes, int nsizes,
                       int batches, int mb, int rounds, int profile) {
  pass *tw = calloc((size_t)rounds, sizeof *tw), *dw = calloc((size_t)rounds, sizeof *dw);
  int bad = !tw || !dw, contenders = db && r->have_baseline ? 2 : 1;
  for (int k = 0; !bad && k < rounds; k++) {
    tw[k].lat = calloc((size_t)batches, sizeof(double));
    dw[k].lat = calloc((size_t)batches, sizeof(double));
    if (!tw[k].lat || !dw[k].lat) bad = 1;
  }
  double tsum[MAX_LAYERS] = {0}, dsum[MAX_LAYERS] = {0};
  r->rounds = 0;
  for (int k = 0; !bad && k < rounds; k++) {
    for (int j = 0; j < contenders && !bad; j++) {
      int base = contenders == 2 && (j + k) % 2 == 1; /* tlm first in even rounds */
      if (j) pause_ms(30);
      pass *p = base ? &dw[k] : &tw[k];
      g_layer_ms = profile ? (base ? dsum : tsum) : NULL;
      replay(rt, base ? db : NULL, r->n, sizes, nsizes, batches, mb, p, NULL);
      g_layer_ms = NULL;
      if (p->failed) bad = 1;
    }
    if (bad) break;
    r->ratio[k] = contenders == 2 ? dw[k].wall_ms / tw[k].wall_ms : 1.0;
    r->rounds = k + 1;
    pause_ms(30);
  }
  if (!bad) {
    int m = 0; /* the round of the median ratio */
    double med = percentile(r->ratio, rounds, 50);
    for (int k = 0; k < rounds; k++)
      if (r->ratio[k] == med) m = k;
    pass *dst[2] = {&r->t[1], &r->d[1]}, *src[2] = {&tw[m], &dw[m]};
    const double *sum[2] = {tsum, dsum};
    for (int c = 0; c < 2; c++) {
      double *lat = dst[c]->lat;
      *dst[c] = *src[c];
      dst[c]->lat = lat;
      memcpy(lat, src[c]->lat, sizeof(double) * (size_t)batches);
      for (int l = 0; l < MAX_LAYERS; l++) dst[c]->layer_ms[l] = sum[c][l] / rounds;
    }
    if (contenders == 1) r->have_baseline = 0;
  } else {
    r->t[1].failed = 1;
  }
  for (int k = 0; tw && dw && k < rounds; k++) free(tw[k].lat), free(dw[k].lat);
  free(tw);
  free(dw);
  return bad ? -1 : 0;
}

/* ---- main ------------------------------------------------------------------------ */

static int parse_sizes(const char *s, int *sizes) {
  int n = 0;
  for (char *end; *s && n < MAX_SIZES; s = *end ? end + 1 : end) {
    long v = strtol(s, &end, 10);
    if (end == s || (*end && *end != ',') || v < 32 || v > 1024) return -1;
    sizes[n++] = (int)v;
  }
  return *s ? -1 : n;
}

int main(int argc, char **argv) {
  const char *model = "both", *json = NULL;
  int sizes[MAX_SIZES] = {160, 192, 224, 256, 288}, nsizes = 5;
  int batches = 20, mb = 1, threads = -1, baseline = 1, prepack = 1, profile = 0, rounds = 3;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int more = i + 1 < argc;
    if (!strcmp(a, "--model") && more) model = argv[++i];
    else if (!strcmp(a, "--sizes") && more) nsizes = parse_sizes(argv[++i], sizes);
    else if (!strcmp(a, "--images") && more) batches = atoi(argv[++i]);
    else if (!strcmp(a, "--mb") && more) mb = atoi(argv[++i]);
    else if (!strcmp(a, "--threads") && more) threads = atoi(argv[++i]);
    else if (!strcmp(a, "--json") && more) json = argv[++i];
    else if (!strcmp(a, "--no-baseline")) baseline = 0;
    else if (!strcmp(a, "--no-prepack")) prepack = 0;
    else if (!strcmp(a, "--profile")) profile = 1;
    else if (!strcmp(a, "--rounds") && more) rounds = atoi(argv[++i]);
    else {
      fprintf(stderr,
              "usage: %s [--model resnet50|mobilenet|both] [--sizes 160,192,...] [--images N]\n"
              "          [--mb N] [--threads N] [--json FILE] [--no-baseline] [--no-prepack]\n"
              "          [--profile] [--rounds N]\n",
              argv[0]);
      return 2;
    }
  }
  int use_resnet = !strcmp(model, "resnet50") || !strcmp(model, "both");
  int use_mobilenet = !strcmp(model, "mobilenet") || !strcmp(model, "both");
  if (!use_resnet && !use_mobilenet) {
    fprintf(stderr, "vision: --model must be resnet50, mobilenet or both\n");
    return 2;
  }
  if (rounds < 1 || rounds > MAX_ROUNDS) {
    fprintf(stderr, "vision: --rounds takes 1 to %d\n", MAX_ROUNDS);
    return 2;
  }
  if (nsizes < 1 || batches < 1 || mb < 1 || mb > 1024) {
    fprintf(stderr, "vision: --sizes takes 1 to %d sides in 32..1024 separated by commas; "
                    "--images and --mb must be positive\n", MAX_SIZES);
    return 2;
  }
  tlm_config cfg;
  tlm_config_init(&cfg);
  if (threads >= 0) cfg.num_threads = threads;
  int nthreads = cfg.num_threads > 0 ? cfg.num_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
#ifdef TLM_HAVE_DNNL
  /* oneDNN's OpenMP runtime: the same threads (re-runs the program once) */
  if (dnnl_baseline_pin_threads(argv, nthreads))
    fprintf(stderr, "vision: could not set OMP_NUM_THREADS=%d for oneDNN\n", nthreads);
#endif
  tlm_runtime *rt;
  if (tlm_create(&cfg, &rt) != TLM_OK) {
    fprintf(stderr, "vision: %s\n", tlm_last_error(NULL));
    return 1;
  }
  int max_size = 0;
  for (int i = 0; i < nsizes; i++) max_size = sizes[i] > max_size ? sizes[i] : max_size;
  net nets[2];
  result res[2];
  int nres = 0, nsamp = batches < nsizes ? batches : nsizes, ok = 1;
  memset(nets, 0, sizeof nets);
  memset(res, 0, sizeof res);
  if (use_resnet) build_resnet50(&nets[nres++]);
  if (use_mobilenet) build_mobilenet(&nets[nres++]);
  float *sampled[2][2] = {{NULL}}; /* [network][tlm, baseline] */
  for (int i = 0; i < nres; i++) {
    res[i].n = &nets[i];
    for (int k = 0; k < 2; k++) {
      res[i].t[k].lat = calloc((size_t)batches, sizeof(double));
      res[i].d[k].lat = calloc((size_t)batches, sizeof(double));
      sampled[i][k] = calloc((size_t)nsamp * mb * NCLASS, sizeof(float));
      if (!res[i].t[k].lat || !res[i].d[k].lat || !sampled[i][k]) ok = 0;
    }
    if (net_alloc(&nets[i], nets[i].name[0] == 'r' ? 1 : 2, mb, max_size)) ok = 0;
  }
  if (!ok) {
    fprintf(stderr, "vision: out of memory\n");
    return 1;
  }
  for (int i = 0; prepack && i < nres; i++)
    for (int j = 0; j < nets[i].n; j++) {
      const layer *L = &nets[i].l[j];
      if (L->kind != CONV && L->kind != FC) continue;
      size_t nw = (size_t)L->k * L->k * (size_t)(L->ic / L->groups) * (size_t)L->oc;
      if (tlm_constant_add(rt, L->w, nw * sizeof(float)) != TLM_OK) {
        fprintf(stderr, "vision: %s\n", tlm_last_error(rt));
        return 1;
      }
    }
  for (int i = 0; i < nres; i++) {
    replay(rt, NULL, &nets[i], sizes, nsizes, batches, mb, &res[i].t[0], sampled[i][0]);
    /* warm = steady state: with TLM_ASYNC=1 the shapes' own kernels, once
     * the background builds the cold pass queued are done */
    tlm_wait_background(rt);
    if (res[i].t[0].failed) ok = 0;
  }
  void *db = NULL;
#ifdef TLM_HAVE_DNNL
  db = baseline ? dnnl_baseline_create() : NULL;
  if (baseline && !db) fprintf(stderr, "vision: oneDNN could not be set up: no baseline\n");
  for (int i = 0; db && i < nres; i++) {
    result *r = &res[i];
    if (r->t[0].failed) continue;
    replay(rt, db, &nets[i], sizes, nsizes, batches, mb, &r->d[0], sampled[i][1]);
    r->have_baseline = !r->d[0].failed;
    if (!r->have_baseline) {
      ok = 0;
      continue;
    }
    r->compared = nsamp * mb;
    r->diff = max_rel_diff(sampled[i][0], sampled[i][1], r->compared);
    if (!(r->diff <= 1e-3)) ok = 0;
  }
#else
  (void)baseline;
#endif
  for (int i = 0; i < nres; i++)
    if (!res[i].t[0].failed &&
        warm_rounds(rt, db, &res[i], sizes, nsizes, batches, mb, rounds, profile))
      ok = 0;
#ifdef TLM_HAVE_DNNL
  dnnl_baseline_destroy(db);
#endif
  printf("\nvision report: NHWC f32, minibatch %d, %d threads, sizes", mb, nthreads);
  for (int i = 0; i < nsizes; i++) printf("%s%d", i ? "," : " ", sizes[i]);
  printf(" in turn; times are the forward passes summed\n");
  {
    char tdesc[400];
    tlm_describe_target(rt, tdesc, sizeof tdesc);
    printf("  target: %s\n", tdesc);
    tlm_stats ps;
    tlm_get_stats(rt, &ps);
    printf("  weights: %s; %llu packed once by tlm (%.1f MiB)\n",
           prepack ? "declared constant" : "read as given (--no-prepack)",
           (unsigned long long)ps.prepacks, (double)ps.prepacked_bytes / (1 << 20));
#ifdef TLM_HAVE_DNNL
    printf("  baseline: oneDNN %s\n", dnnl_baseline_isa());
#endif
  }
  for (int i = 0; i < nres; i++) report(&res[i], batches, mb, profile);
  if (json && write_json(json, res, nres, sizes, nsizes, batches, mb, nthreads)) ok = 0;
  tlm_destroy(rt); /* first: the weights are declared constant */
  for (int i = 0; i < nres; i++) {
    net_free(&nets[i]);
    for (int k = 0; k < 2; k++) free(res[i].t[k].lat), free(res[i].d[k].lat), free(sampled[i][k]);
  }
  return ok ? 0 : 1;
}
