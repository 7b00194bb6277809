/* reference.h - plain reference implementations that generated kernels are
 * checked against (internal, also used by tests and tools). */
#ifndef TLM_RUNTIME_REFERENCE_H
#define TLM_RUNTIME_REFERENCE_H

#include "kernel_abi.h"
#include "task.h"

/* The activation in plain C (float in, float out), as tlm.h defines it. */
float tlm_ref_activation(int act, float x);

/* C = epilogue(A x B) for a matmul task with the pointers and strides of
 * `args` (args->M must equal task->u.mm.M). Accumulates in double. */
void tlm_ref_matmul(const tlm_task *task, const tlm_mm_args *args);

/* Row-wise reference (softmax, layernorm, rmsnorm in double precision;
 * eltwise in float, as the activation is defined). */
void tlm_ref_row(const tlm_task *task, const tlm_row_args *args);

/* Direct convolution with the epilogue, accumulating in double (the
 * pointers, extents and strides of `args`). */
void tlm_ref_conv(const tlm_task *task, const tlm_conv_args *args);

/* One output element (n, oc, od, oh, ow) of a convolution before its
 * activation, summed in double: products, bias, scale and shift, residual.
 * *mag (when not NULL) gets the sum of their magnitudes, the scale of a
 * relative error. */
double tlm_ref_conv_point(const tlm_conv_task *t, const tlm_conv_args *a, int64_t n, int64_t oc,
                          int64_t od, int64_t oh, int64_t ow, double *mag);

/* Pooling reference (max, or average over in-bounds positions). */
void tlm_ref_pool(const tlm_task *task, const tlm_pool_args *args);

/* Fused attention (tlm_attn_task): softmax in double precision. */
void tlm_ref_attention(const tlm_task *task, const tlm_attn_args *a);

#endif
