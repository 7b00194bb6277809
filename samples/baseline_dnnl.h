/* baseline_dnnl.h - matmuls through oneDNN for the samples' side-by-side
 * baseline: one primitive per distinct problem (shape, strides, post-ops),
 * created on first use and cached, as an application using oneDNN directly
 * would. */
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

/* Makes oneDNN's OpenMP runtime use `threads` threads. libgomp reads
 * OMP_NUM_THREADS once, when it is loaded (before main), so setting the
 * variable later has no effect: when it differs, this sets it and re-runs
 * the program (execv of /proc/self/exe with argv), and only returns when
 * the variable already holds the value or the re-run failed (then -1). */
int dnnl_baseline_pin_threads(char **argv, int threads);

/* primitives created so far, and the wall time spent creating them (ms) */
int dnnl_baseline_primitives(const dnnl_baseline *b, double *create_ms);

#endif
