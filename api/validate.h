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

/* The same for pooling. */
tlm_status tlm_validate_pool(const tlm_op *op, const tlm_tensor *in, int n_in,
                             const tlm_tensor *out, int n_out, tlm_task *task,
                             tlm_pool_args *args, char *err, int errcap);

#endif
