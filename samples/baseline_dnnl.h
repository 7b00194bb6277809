/* baseline_dnnl.h - matmuls, convolutions and pooling through oneDNN for the
 * samples' side-by-side baseline: one primitive per distinct problem (shape,
 * strides, post-ops), created on first use and cached, as an application
 * using oneDNN directly would. */
#ifndef TLM_SAMPLES_BASELINE_DNNL_H
#define TLM_SAMPLES_BASELINE_DNNL_H

#include <stdint.h>

typedef struct dnnl_baseline dnnl_baseline;

/* Returns NULL when oneDNN cannot be set up. */
dnnl_baseline *dnnl_baseline_create(void);
void dnnl_baseline_destroy(dnnl_baseline *b);

/* C (batch, M, N) = A (batch, M, K) x B (batch, K, N), strides in elements
 * (batch, row, col) for each; then + bias (N) if bias, GELU-tanh if gelu,
 * and + the previous contents of C if accumulate. Returns 0, -1. */
int dnnl_baseline_matmul(dnnl_baseline *b, int64_t batch, int64_t m, int64_t k, int64_t n,
                         const float *a, const int64_t sa[3], const float *w,
                         const int64_t sw[3], const float *bias, int gelu, int accumulate,
                         float *c, const int64_t sc[3]);

/* Activations fused into a convolution (an eltwise post-op). */
typedef enum baseline_act {
  BASELINE_ACT_NONE = 0,
  BASELINE_ACT_RELU = 1, /* max(x, 0) */
  BASELINE_ACT_RELU6 = 2 /* min(max(x, 0), 6) */
} baseline_act;

/* A 2-D window over NHWC activations: src (mb, ih, iw, ic), dst (mb, oh, ow,
 * oc). Position o reads inputs o * stride - pad + k (k < kernel); the right
 * and bottom padding is whatever the output extents imply (as in benchdnn).
 * Pooling reads ic as the channels and ignores oc and groups. */
typedef struct baseline_window {
  int64_t mb, ic, ih, iw, oc, oh, ow;
  int64_t kh, kw, sh, sw, ph, pw;
  int64_t groups; /* convolutions: divides ic and oc; ic = oc = groups is depthwise */
  int64_t dh, dw;  /* convolutions: dilation as benchdnn writes it (0: none) */
} baseline_window;

/* dst = act(conv(src, w) + bias [+ the previous contents of dst if
 * accumulate]): oneDNN's sum post-op, then an eltwise one. The weights are
 * HWIO (kh, kw, ic / groups, oc), oc group-major, bias (oc), every tensor
 * dense. The weights are identified by their address: the first call for a
 * given (w, window, act, accumulate) creates the primitive and reorders w
 * ONCE into the primitive's preferred layout (sharing the copy with another
 * window of the same w whose primitive prefers the same layout); later calls
 * reuse both, so w must not change while b lives. Returns 0, -1. */
int dnnl_baseline_conv(dnnl_baseline *b, const baseline_window *win, const float *src,
                       const float *w, const float *bias, baseline_act act, int accumulate,
                       float *dst);

/* Max pooling (padding positions ignored) or average pooling (padding
 * positions not counted: dnnl_pooling_avg_exclude_padding) over NHWC
 * tensors. Returns 0, -1. */
int dnnl_baseline_pool(dnnl_baseline *b, const baseline_window *win, int avg, const float *src,
                       float *dst);

/* ---- bound primitives: oneDNN alone, for benchmarks ------------------------------
 * One primitive created once with its source, weights and destination
 * memories bound to fixed buffers and its own stream, then executed as
 * often as a benchmark times it (bench_matmul, bench_conv): no lookup or
 * memory object per call. */
typedef struct dnnl_bound dnnl_bound;

/* C (M, N) = A (M, K) x B (K, N), every matrix dense row-major and owned by
 * the caller, who keeps them alive while the bound primitive lives. NULL
 * when oneDNN cannot create it. */
dnnl_bound *dnnl_bound_matmul(dnnl_baseline *b, int64_t M, int64_t K, int64_t N, float *a,
                              float *w, float *c);

/* A 2-D convolution without bias or post-ops on buffers it allocates: src
 * and dst dense NHWC (nhwc) or NCHW, filled with a fixed pattern; weights
 * given as OIHW (GOIHW with groups), reordered once into the primitive's
 * preferred layout ("any"), as an inference deployment would. win->dh and
 * win->dw are benchdnn's dilations (0: none). NULL on failure. */
dnnl_bound *dnnl_bound_conv(dnnl_baseline *b, const baseline_window *win, int nhwc);

/* Executes p once and waits for it. Returns 0, -1. */
int dnnl_bound_run(dnnl_bound *p);

/* Frees p, and the buffers it allocated (not the caller's). NULL is a no-op. */
void dnnl_bound_destroy(dnnl_bound *p);

/* Makes oneDNN's OpenMP runtime use `threads` threads. libgomp reads
 * OMP_NUM_THREADS once, when it is loaded (before main), so setting the
 * variable later has no effect: when it differs, this sets it and re-runs
 * the program (execv of /proc/self/exe with argv), and only returns when
 * the variable already holds the value or the re-run failed (then -1). */
int dnnl_baseline_pin_threads(char **argv, int threads);

/* Comparisons at one ISA: when TLM_ISA names an ISA (avx512, avx2, sse,
 * scalar) and ONEDNN_MAX_CPU_ISA is unset, sets ONEDNN_MAX_CPU_ISA to the
 * same (AVX2 for avx2; SSE41, oneDNN's narrowest, for sse and scalar).
 * Must run before the first oneDNN call; dnnl_baseline_pin_threads calls
 * it. Returns 0, -1 when the variable cannot be set. */
int dnnl_baseline_match_isa(void);

/* oneDNN's effective ISA ("avx2", "avx512_core", ...) for reports. */
const char *dnnl_baseline_isa(void);

/* primitives created so far, and the wall time spent creating them (ms; for
 * convolutions, the weight reorders included) */
int dnnl_baseline_primitives(const dnnl_baseline *b, double *create_ms);

#endif
