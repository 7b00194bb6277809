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

/* The same, with conv_order 1 for the matmul a convolution runs as: its
 * residual comes before the activation (task has_residual 2), so it may be
 * C itself whatever the activation. Either order: a residual that is C
 * itself (same data, shape and strides) gives has_residual 3 (C
 * accumulates A x B; the public order only without an activation). */
tlm_status tlm_validate_matmul_order(const tlm_op *op, const tlm_tensor *in, int n_in,
                                     const tlm_tensor *out, int n_out, int conv_order,
                                     tlm_task *task, tlm_mm_args *args, char *err, int errcap);

/* The same for softmax, layernorm and rmsnorm. */
tlm_status tlm_validate_row(const tlm_op *op, const tlm_tensor *in, int n_in,
                            const tlm_tensor *out, int n_out, tlm_task *task,
                            tlm_row_args *args, char *err, int errcap);

/* The same for rotary position embeddings (TLM_OP_ROPE): a row task of
 * (token, head) rows, mrows = heads. */
tlm_status tlm_validate_rope(const tlm_op *op, const tlm_tensor *in, int n_in,
                             const tlm_tensor *out, int n_out, tlm_task *task,
                             tlm_row_args *args, char *err, int errcap);

/* The same for fused attention (TLM_OP_ATTENTION). */
tlm_status tlm_validate_attention(const tlm_op *op, const tlm_tensor *in, int n_in,
                                  const tlm_tensor *out, int n_out, tlm_task *task,
                                  tlm_attn_args *args, char *err, int errcap);

/* Copies a valid convolution task's run-time extents and strides (N, the
 * spatial extents, every stride) into a (pointers are left as they are). */
void tlm_conv_args_extents(tlm_conv_args *a, const tlm_conv_task *t);

/* The same for convolutions. */
tlm_status tlm_validate_conv(const tlm_op *op, const tlm_tensor *in, int n_in,
                             const tlm_tensor *out, int n_out, tlm_task *task,
                             tlm_conv_args *args, char *err, int errcap);

/* A convolution's activation tensor (src, dst or residual) as its (n, c,
 * d, h, w) extents and strides for `layout`: missing spatial dims get
 * extent 1, and a stride of extent 1 is 0. t is a checked tensor. */
void tlm_act_view(const tlm_tensor *t, int layout, int64_t ext[5], int64_t str[5]);

/* The same for pooling. */
tlm_status tlm_validate_pool(const tlm_op *op, const tlm_tensor *in, int n_in,
                             const tlm_tensor *out, int n_out, tlm_task *task,
                             tlm_pool_args *args, char *err, int errcap);

#endif
