/* conv_as_matmul.h - convolutions run as matrix products (internal; the
 * rewrite tlm_run applies after validation, conv_as_matmul.c). */
#ifndef TLM_API_CONV_AS_MATMUL_H
#define TLM_API_CONV_AS_MATMUL_H

#include <stddef.h>

#include "../runtime/target.h"
#include "../runtime/task.h"
#include "tlm.h"

/* A validated convolution (task from tlm_validate_conv) that is a matrix
 * product: one group, a 1x1 kernel, no padding, no scale/shift. With dst's
 * channels unit-stride (NHWC) it is
 *   dst (pixels, OC) = act(src (pixels, IC) x W (IC, OC) + bias + residual)
 * and with dst's pixels unit-stride and no bias (NCHW)
 *   dst (OC, pixels) = act(W (OC, IC) x src (IC, pixels) + residual);
 * the public matmul adds its residual after the activation, so with both
 * the caller runs the validated matmul task with has_residual = 2 (the
 * residual before the activation, runtime/task.h).
 * "pixels" is (n, d, h, w) as one row axis where the strides allow (a
 * dense plane: one matmul of N*OH*OW rows), the outer pixel dims as batch
 * dims otherwise (a strided 1x1: rows are one output row, src's row
 * stride the convolution stride times its pixel stride). Fills the matmul
 * op, its inputs (A, B, bias, residual as present; views of the caller's
 * memory) and output; with `gathered` non-NULL src comes from
 * tlm_conv_gather's copy instead. Returns 1 when it applies (without a
 * copy: only when src's pixels fold as dst's do), 0 otherwise. Why: the
 * matmul kernels pack B and block K (the conv kernels read the weights
 * through their stride for every register tile): on ResNet-50's and
 * MobileNet's 1x1 layers with 512-2048 channels at 7x7 and 14x14 the conv
 * kernels ran at 0.4-0.75x oneDNN (AVX2) where the same products as
 * matmuls run at 0.83-1.45x. */
int tlm_conv_as_matmul(const tlm_task *task, const tlm_op *op, const tlm_tensor *in,
                       const tlm_tensor *out, float *gathered, tlm_op *mop, tlm_tensor min[4],
                       int *n_min, tlm_tensor *mout);

/* Bytes of the dense copy of src that such a convolution needs to run as
 * one matmul when src's pixels are not evenly spaced (a stride above 1,
 * or a padded plane): 0 when none is needed or it is no matmul. Then
 * tlm_conv_gather writes the pixels the convolution reads into buf (that
 * many bytes, caller-owned), and tlm_conv_as_matmul with gathered = buf
 * reads src from it. A strided 1x1 convolution without the copy would be
 * one small matmul per output row, each streaming all the weights
 * (ResNet-50's res5a_branch1: 0.33x oneDNN on AVX2). A KxK convolution
 * with one group and few output pixels for its reduction (M <= K/4, K =
 * KD*KH*KW*IC; weights one dense (K, OC) matrix, channels-last dst) asks
 * for its im2col copy, M x K floats: tlm_conv_gather writes it, and
 * tlm_conv_as_matmul then returns (M, K) x W(K, OC) (ResNet-50's 3x3 at
 * 7x7 pixels: 0.37x -> 0.80x oneDNN on AVX2). */
size_t tlm_conv_gather_bytes(const tlm_task *task, const tlm_op *op, const tlm_tensor *in,
                             const tlm_tensor *out);
/* The largest copy tlm_conv_gather_bytes asks for (64 MiB: a 1x1 over a
 * 1024-channel 128x128 image at minibatch 1); larger strided 1x1
 * convolutions run in the convolution kernels. */
#define TLM_CONV_GATHER_MAX_BYTES ((int64_t)64 << 20)
void tlm_conv_gather(const tlm_task *task, const tlm_op *op, const tlm_tensor *in,
                     const tlm_tensor *out, float *buf);

/* The copy in parts, for threads: its rows (im2col: output pixels; a
 * strided 1x1: output rows (n, od, oh)), 0 when there is no copy; and rows
 * [begin, end) of it written into buf (the whole copy's buffer).
 * tlm_conv_gather writes all of them. */
int64_t tlm_conv_gather_rows(const tlm_task *task, const tlm_op *op, const tlm_tensor *in,
                             const tlm_tensor *out);
void tlm_conv_gather_range(const tlm_task *task, const tlm_op *op, const tlm_tensor *in,
                           const tlm_tensor *out, float *buf, int64_t begin, int64_t end);

/* Channel blocks: the number of blocks of TLM_CONV_OC_BLOCK output
 * channels tlm_run splits a validated convolution into, 0 when it does not.
 * An NHWC convolution with a window (a 1x1 runs as a matmul), one group,
 * dense HWIO weights, at least TLM_CONV_OC_BLOCK_MIN output channels in
 * whole blocks qualifies, unless its im2col copy and a matmul serve it
 * (above: K/4 output pixels or fewer, no scale/shift, a copy within
 * TLM_CONV_GATHER_MAX_BYTES) on target tg (NULL: any), which AVX-512
 * targets with room in L2 for a block's weights keep in blocks
 * (conv_as_matmul.c, few_pixels_direct); tlm_run then blocks it when its weights lie in
 * memory declared constant (tlm_constant_add), runs OC / 64 convolutions
 * of 64 channels over a copy of the weights packed per block,
 * [block][kd][kh][kw][icg][64] (engine/prepack.c; the engine runs the
 * blocks, tlm_conv_task.oc_blocks), and skips the matmul lowering. The
 * direct kernel reads a weight row of its tile's channels per reduction
 * step; in the caller's layout the rows lie OC floats apart, and from 256
 * channels (1 KiB) on that walk collapsed: on an Intel Xeon (family 6
 * model 167, tlm run g1mb1_ic256ih14iw14_ocOCoh14ow14_kh3kw3_sh1sw1_ph1pw1
 * --layout nhwc --threads 1) 164 / 158 / 146 GFLOPS at OC = 64 / 128 / 192,
 * then 63 at 256 and 37 at 512 natively, 103 / 88 / 92 -> 32 / 21 under
 * AVX2. 64 channels: a whole register tile's width on AVX-512 (4 vectors),
 * four tiles of AVX2's (2 vectors). */
#define TLM_CONV_OC_BLOCK 64
#define TLM_CONV_OC_BLOCK_MIN 256
int tlm_conv_oc_blocks(const tlm_task *task, const tlm_op *op, const tlm_target *tg);

#endif
