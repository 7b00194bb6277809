/* baseline_dnnl.h - the same linear layers through oneDNN, for the
 * samples' side-by-side baseline: one matmul primitive (bias, optional
 * GELU-tanh post-op) per distinct shape, created on first use and cached, as
 * an application using oneDNN directly would. */
#ifndef TLM_SAMPLES_BASELINE_DNNL_H
#define TLM_SAMPLES_BASELINE_DNNL_H

#include <stdint.h>

typedef struct dnnl_baseline dnnl_baseline;

/* Returns NULL when oneDNN cannot be set up. */
dnnl_baseline *dnnl_baseline_create(void);
void dnnl_baseline_destroy(dnnl_baseline *b);

/* y (m, n) = x (m, k) w (k, n) + bias (n), then GELU-tanh if gelu.
 * Returns 0, -1 on a oneDNN error. */
int dnnl_baseline_linear(dnnl_baseline *b, int64_t m, int64_t k, int64_t n, const float *x,
                         const float *w, const float *bias, int gelu, float *y);

/* primitives created so far, and the wall time spent creating them (ms) */
int dnnl_baseline_primitives(const dnnl_baseline *b, double *create_ms);

#endif
