/* validate.h - API-boundary checks (internal). */
#ifndef TLM_API_VALIDATE_H
#define TLM_API_VALIDATE_H

#include "tlm.h"
#include "../runtime/kernel_abi.h"
#include "../runtime/task.h"

/* Checks a matmul op and its tensors; on TLM_OK fills the canonical task
 * (zero-initialized first, so its bytes are a key) and the kernel
 * arguments. On failure writes a message naming the offending tensor and
 * field into err. */
tlm_status tlm_validate_matmul(const tlm_op *op, const tlm_tensor *in, int n_in,
                               const tlm_tensor *out, int n_out, tlm_task *task,
                               tlm_mm_args *args, char *err, int errcap);

/* The same for softmax, layernorm and rmsnorm. */
tlm_status tlm_validate_row(const tlm_op *op, const tlm_tensor *in, int n_in,
                            const tlm_tensor *out, int n_out, tlm_task *task,
                            tlm_row_args *args, char *err, int errcap);

/* The same for convolutions. */
tlm_status tlm_validate_conv(const tlm_op *op, const tlm_tensor *in, int n_in,
                             const tlm_tensor *out, int n_out, tlm_task *task,
                             tlm_conv_args *args, char *err, int errcap);

/* A validated convolution (task from tlm_validate_conv) that is a matrix
 * product: one group, a 1x1 kernel, no padding, no scale/shift, not both
 * a residual and an activation (the two epilogues differ in their order
 * there), OIHW weights, and one input and one output pixel: the
 * squeeze-and-excitation convolutions of EfficientNet and MobileNetV3.
 * Then dst (N, OC) = src (N, IC) x W^T + bias, activation, + residual, W
 * the (OC, IC) weights (transpose_b). Fills the matmul op, its inputs (A,
 * B, bias, residual as present; 2-D views of the caller's memory) and
 * output. Returns 1 when it applies, 0 otherwise. Why: the convolution
 * kernels gather OIHW weights for lanes along OC, or put the lanes along
 * the one pixel; the matmul space has dot products along IC. On
 * EfficientDet's 14 such layers (NCHW, OIHW, 1 thread) this took tlm from
 * 0.52x to 0.84x oneDNN's speed (geometric mean; 3.5x less time in all).
 * With HWIO weights the convolution kernels are faster (1.18x oneDNN
 * against 0.88x as a matmul): bench/results/se_conv_*. */
int tlm_conv_as_matmul(const tlm_task *task, const tlm_op *op, const tlm_tensor *in,
                       const tlm_tensor *out, tlm_op *mop, tlm_tensor min[4], int *n_min,
                       tlm_tensor *mout);

/* The same for pooling. */
tlm_status tlm_validate_pool(const tlm_op *op, const tlm_tensor *in, int n_in,
                             const tlm_tensor *out, int n_out, tlm_task *task,
                             tlm_pool_args *args, char *err, int errcap);

#endif
