/* task.h - a canonical, validated operator instance (internal).
 *
 * api/validate.c turns a tlm_op plus tensors into a tlm_task; everything
 * below the API may assume the task is valid. A task is plain data with no
 * pointers, zero-initialized before filling, so its bytes are a canonical
 * key (see cache/key.c).
 */
#ifndef TLM_RUNTIME_TASK_H
#define TLM_RUNTIME_TASK_H

#include <stdint.h>

#include "tlm.h"

#define TLM_MAX_BATCH 4

/* Unit-stride class bits of a matmul task: which innermost strides are 1.
 * The generated code uses vector loads only where the stride is 1. */
enum {
  TLM_UNIT_A_K = 1 << 0,   /* A[m, k+1] follows A[m, k] */
  TLM_UNIT_B_N = 1 << 1,   /* B[k, n+1] follows B[k, n] */
  TLM_UNIT_C_N = 1 << 2,   /* C[m, n+1] follows C[m, n] */
  TLM_UNIT_R_N = 1 << 3,   /* residual likewise */
  TLM_UNIT_BIAS = 1 << 4,  /* bias likewise */
  TLM_UNIT_B_K = 1 << 5    /* B[k+1, n] follows B[k, n] (B stored (N, K)) */
};

/* Matmul task: C[b, m, n] = epi(sum_k A[b, m, k] * B[b, k, n]).
 * Strides are in elements and already account for transposes and batch
 * broadcasting (a broadcast batch dim has stride 0), so the kernel never
 * needs the transpose flags. */
typedef struct tlm_matmul_task {
  int32_t nbatch;                 /* 0..TLM_MAX_BATCH batch dims of C */
  int32_t act;                    /* tlm_activation */
  int32_t has_bias;               /* 0/1 */
  int32_t has_residual;           /* 0; 1: added after the activation (the
                                     public matmul's order); 2: before it, as
                                     a convolution's (conv-as-matmul); 3: the
                                     residual is C itself (in place): C
                                     accumulates from its contents, before
                                     the activation */
  int32_t unit;                   /* TLM_UNIT_* bits */
  int32_t b_const;                /* 1: B lies in memory declared constant
                                     (tlm_constant_add), so packing it is
                                     free after the first call; in shape keys,
                                     not in kernel keys */
  int64_t batch[TLM_MAX_BATCH];   /* C's batch extents, unused = 1 */
  int64_t M, N, K;                /* M is dynamic in kernels, see below */
  /* strides: [0..3] batch dims, [4] row axis, [5] column axis */
  int64_t sa[6];                  /* A: batch, m, k */
  int64_t sb[6];                  /* B: batch, k, n */
  int64_t sc[6];                  /* C: batch, m, n */
  int64_t sr[6];                  /* residual: batch, m, n (0 if none) */
  int64_t sbias;                  /* bias stride along n (0 if none) */
} tlm_matmul_task;

/* Row-wise task (softmax, layernorm, rmsnorm): `rows` rows of `cols`
 * elements. rows and the strides are run-time arguments of kernels. */
typedef struct tlm_row_task {
  int32_t causal;
  int32_t unit;   /* TLM_UNIT_ROW_* bits */
  float eps, scale;
  int32_t act, binary; /* eltwise: y = act(x) (+|*) z */
  int64_t rows, cols;
  int64_t mrows;  /* R: rows per (R, C) matrix, for the causal mask */
  int64_t sx[2], sy[2]; /* row and column strides of x and y */
  int64_t sg, sb; /* gamma and beta strides (0 if absent) */
  int64_t sz[2];  /* eltwise: z's row and column strides (0: broadcast);
                     rope: the table's row (token) and column strides */
  /* rope: rows are (token, head) pairs, mrows heads per token; x's and y's
   * row strides sx[0], sy[0] step tokens, these step heads */
  int64_t sxh, syh;
  int32_t rope_style; /* tlm_rope_style */
} tlm_row_task;

enum { TLM_UNIT_ROW_X = 1, TLM_UNIT_ROW_Y = 2, TLM_UNIT_ROW_G = 4, TLM_UNIT_ROW_B = 8,
       TLM_UNIT_ROW_Z = 16 };

/* Pooling task (3-D form, like convolutions). Static: channels, window,
 * strides, padding, the unit class; a window extent of 0 is global (the
 * input extent, at run time). Run-time: N, spatial extents, strides. */
enum { TLM_UNIT_POOL_SRC_C = 1, TLM_UNIT_POOL_DST_C = 2 };
typedef struct tlm_pool_task {
  int32_t alg;                    /* tlm_pool_alg */
  int32_t KD, KH, KW, sd, sh, sw, pd, ph, pw;
  int32_t unit, ndim_sp;
  int64_t C;
  int64_t N, ID, IH, IW, OD, OH, OW;
  int64_t ss[5], sdst[5];         /* (n, c, d, h, w) */
} tlm_pool_task;

/* Unit-stride class bits of a convolution task. */
enum {
  TLM_UNIT_CONV_SRC_C = 1 << 0, /* src channels adjacent (NHWC) */
  TLM_UNIT_CONV_SRC_W = 1 << 1, /* src columns adjacent (NCHW) */
  TLM_UNIT_CONV_WEI_O = 1 << 2, /* weights' output channels adjacent (HWIO) */
  TLM_UNIT_CONV_DST_C = 1 << 3, /* dst (and residual) channels adjacent */
  TLM_UNIT_CONV_DST_W = 1 << 4, /* dst (and residual) columns adjacent */
  TLM_UNIT_CONV_VEC = 1 << 5,   /* bias, scale and shift contiguous */
  TLM_UNIT_CONV_PLANE = 1 << 6, /* 1x1, stride 1, no padding, 2-D, and the (h, w) planes of
                                   src, dst (and residual) dense with w unit-stride: pixel p
                                   of the plane is at p for every tensor */
  /* dense strides the code takes as constants (every offset of a tile's
   * window then a displacement, not a register; AVX2 depthwise ran out of
   * general registers and spilled its 9 window offsets) */
  TLM_UNIT_CONV_WEI_HWIO = 1 << 7, /* weights dense HWIO: (kd, kh, kw, icg, oc) */
  TLM_UNIT_CONV_SRC_PIX = 1 << 8,  /* NHWC src pixels IC apart (channels dense) */
  TLM_UNIT_CONV_DST_PIX = 1 << 9   /* NHWC dst (and residual) pixels OC apart */
};

/* Convolution task, always in 3-D form (a 2-D one has D = KD = 1).
 * Static in kernels: channels, groups, kernel window, strides, padding,
 * dilation, epilogue, unit class. Run-time: N, the spatial extents and
 * every tensor stride, so one kernel serves every image size. Strides are
 * in elements, per logical dim: [0] n, [1] c, [2] d, [3] h, [4] w for
 * src/dst/residual; [0] oc, [1] ic, [2] kd, [3] kh, [4] kw for weights. */
typedef struct tlm_conv_task {
  int32_t G, ICg, OCg;            /* groups, channels per group */
  int32_t KD, KH, KW;
  int32_t sd, sh, sw;             /* strides */
  int32_t pd, ph, pw;             /* front padding */
  int32_t dd, dh, dw;             /* dilation factors (1 = dense) */
  int32_t act, has_bias, has_ss, has_residual;
  int32_t unit;                   /* TLM_UNIT_CONV_* */
  int32_t ndim_sp;                /* spatial dims of the caller's tensors */
  /* 0: one convolution. n >= 2: the caller's convolution of OCg * n output
   * channels (G = 1, dense HWIO weights declared constant) run as n of OCg
   * channels each over weights packed per block (api/tlm.c,
   * conv_oc_blocked; engine.c runs the blocks). The kernel is the one
   * block's; sw_ here are the packed copy's strides. */
  int32_t oc_blocks;
  int64_t N, ID, IH, IW, OD, OH, OW;
  int64_t ss[5], sw_[5], sdst[5], sr[5];
  int64_t sbias, sscale, sshift;
} tlm_conv_task;

/* Fused attention task (tlm_attention_desc). Static: the head dims D and
 * Dv, causal, the unit-stride class. Run-time: B, Hq, Hkv, Tq, Tk, the
 * strides and the scale. Dims of each tensor: (b, h, t, d). */
typedef struct tlm_attn_task {
  int32_t causal;
  int32_t unit; /* TLM_UNIT_ATT_* bits */
  float scale;
  int32_t pad_;
  int64_t D, Dv;
  int64_t B, Hq, Hkv, Tq, Tk;
  int64_t sq[4], sk[4], sv[4], so[4];
} tlm_attn_task;

enum { TLM_UNIT_ATT_Q = 1, TLM_UNIT_ATT_K = 2, TLM_UNIT_ATT_V = 4, TLM_UNIT_ATT_O = 8 };

typedef struct tlm_task {
  int32_t kind;  /* tlm_op_kind */
  int32_t dtype; /* tlm_dtype of every tensor */
  union {
    tlm_matmul_task mm;
    tlm_row_task row;
    tlm_conv_task conv;
    tlm_pool_task pool;
    tlm_attn_task attn;
  } u;
} tlm_task;

static inline int tlm_task_is_row(const tlm_task *t) {
  return t->kind == TLM_OP_SOFTMAX || t->kind == TLM_OP_LAYERNORM || t->kind == TLM_OP_RMSNORM ||
         t->kind == TLM_OP_ELTWISE || t->kind == TLM_OP_ROPE;
}

/* Product of the batch extents (1 when there are none). */
int64_t tlm_task_batch_total(const tlm_task *t);

/* Floating-point operations of one run (2*B*M*N*K for matmul). */
double tlm_task_flops(const tlm_task *t);

/* Writes the task as a benchdnn-style descriptor, e.g. "12x128x64:12x64x128"
 * followed by "_tA"/"_tB"/"_bias"/"_relu"/... flags, into buf (NUL-terminated,
 * truncated to cap). Returns buf. */
char *tlm_task_str(const tlm_task *t, char *buf, int cap);

/* Zeroes the fields of t that a kernel takes at run time (extents,
 * strides, the attention scale), leaving what its code depends on: two
 * tasks that agree afterwards can share one kernel of a schedule. The
 * schedule key hashes this form (cache/key.c). */
void tlm_task_clear_runtime(tlm_task *t);

#endif
