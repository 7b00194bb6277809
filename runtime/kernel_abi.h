/* kernel_abi.h - how the runtime calls a generated kernel (internal).
 *
 * Generated code reads these structs through byte offsets taken with
 * offsetof at code-generation time, so the layouts are defined here once.
 * Matmul kernels: static in the code are the batch extents, the unit-stride
 * class, the epilogue and the schedule; M, N, K, every stride and every
 * pointer are run-time arguments, so one kernel serves every M (the number
 * of tokens), every N and K its schedule's blocks fit, and every batch
 * layout of its class (cache/key.c leaves them out of schedule keys). */
#ifndef TLM_RUNTIME_KERNEL_ABI_H
#define TLM_RUNTIME_KERNEL_ABI_H

#include <stdint.h>

typedef struct tlm_mm_args {
  float *c;          /* (batch..., M, N) output */
  const float *a;    /* (batch..., M, K) through sa */
  const float *b;    /* (batch..., K, N) through sb */
  const float *bias; /* (N) through sbias, or NULL */
  const float *res;  /* (batch..., M, N) through sr, or NULL */
  int64_t M, N, K;
  int64_t sa[6], sb[6], sc[6], sr[6]; /* elements: 4 batch dims, row, col */
  int64_t sbias;
  /* B packed whole ahead of the call in the layout of ln_prepack_b() for
   * this kernel's nest, or NULL: a kernel whose nest packs B then packs
   * each block into scratch. The engine sets it (tlm_engine_exec). */
  const float *bpk;
  /* rows of the parallel loop's blocks of M when the kernel's nest cuts
   * them at run time (ln_node.split_m, ln_parallel_m_block), else 0 for
   * the nest's own blocks. The engine sets it with the iteration count. */
  int64_t mblock;
} tlm_mm_args;

/* A kernel runs iterations [begin, end) of its fused parallel loops.
 * `scratch` is the calling thread's buffer of at least
 * tlm_scratch_bytes() bytes, 64-byte aligned (NULL when 0); the same
 * for every kernel kind that takes one (fused attention's tiles in L1). */
typedef void (*tlm_mm_kernel_fn)(const tlm_mm_args *args, int64_t begin,
                                 int64_t end, float *scratch);

/* Row-wise kernels: rows, cols, the causal mask's matrix rows and every
 * stride at run time, so one kernel serves every length (attention scores
 * grow by a column per decode step). */
typedef struct tlm_row_args {
  float *y;
  const float *x, *gamma, *beta;
  int64_t rows, cols, mrows;
  int64_t sx[2], sy[2], sg, sb;
  const float *z;  /* eltwise's second input, rope's table, or NULL */
  int64_t sz[2];
  int64_t sxh, syh; /* rope: head strides of x and y (rows: token * mrows + head) */
} tlm_row_args;

/* A row kernel runs row blocks [begin, end) (all rows in one block when
 * the schedule is serial). */
typedef void (*tlm_row_kernel_fn)(const tlm_row_args *args, int64_t begin, int64_t end,
                                  float *scratch);

/* Attention kernels (tlm_attn_task): a kernel runs tiles [begin, end) of
 * (b, K/V head, block of (query head of the group, query row) pairs), in
 * that order, the blocks fastest. */
typedef struct tlm_attn_args {
  float *o;
  const float *q, *k, *v;
  int64_t B, Hq, Hkv, Tq, Tk;
  int64_t sq[4], sk[4], sv[4], so[4]; /* (b, h, t, d) */
  float scale;
} tlm_attn_args;

typedef void (*tlm_attn_kernel_fn)(const tlm_attn_args *args, int64_t begin, int64_t end,
                                   float *scratch);

/* Convolution kernels: N, the spatial extents and every stride at run
 * time (see tlm_conv_task for the dim order of the strides). A kernel runs
 * iterations [begin, end) of its parallel loop (conv_parallel_count()). */
typedef struct tlm_conv_args {
  float *dst;
  const float *src, *wei, *bias, *scale, *shift, *res;
  int64_t N, ID, IH, IW, OD, OH, OW;
  int64_t ss[5], sw[5], sd[5], sr[5];
  int64_t sbias, sscale, sshift;
} tlm_conv_args;

typedef void (*tlm_conv_kernel_fn)(const tlm_conv_args *args, int64_t begin, int64_t end,
                                   float *scratch);

/* Pooling kernels: iterations [begin, end) of output rows (n, od, oh). */
typedef struct tlm_pool_args {
  float *dst;
  const float *src;
  int64_t N, ID, IH, IW, OD, OH, OW;
  int64_t ss[5], sd[5];
} tlm_pool_args;

typedef void (*tlm_pool_kernel_fn)(const tlm_pool_args *args, int64_t begin, int64_t end,
                                   float *scratch);

/* The arguments of any family's kernel, by the task's kind (tuning jobs,
 * operands synthesized from a task, fuzzing). */
typedef union tlm_any_args {
  tlm_mm_args mm;
  tlm_row_args row;
  tlm_conv_args conv;
  tlm_pool_args pool;
  tlm_attn_args attn;
} tlm_any_args;

#endif
