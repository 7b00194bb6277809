/* gpu.h - NVIDIA GPU targets and the GPU matmul schedule space (internal).
 *
 * A GPU matmul kernel computes C (b, M, N) = epi(A (b, M, K) x B (b, K, N))
 * for one tlm_matmul_task (strides in elements, any of them, batch dims
 * broadcast by stride 0), fp32 on the CUDA cores (SIMT):
 *
 *   grid (ceil(M / bm), ceil(N / bn), batches)          <- one block per C tile
 *   block of (bm / tm) x (bn / tn) threads
 *   stage the A (bm x bk) and B (bk x bn) tiles in shared memory,
 *     loaded by every thread of the block (coalesced along the unit-stride
 *     axis of each operand, zeros past M, N, K)           <- "bk"
 *   with stages = 2: the next tiles are loaded into registers while the
 *     current ones are multiplied, then stored to the other buffer
 *     (double buffering: one barrier per k step)         <- "stages"
 *   each thread accumulates a tm x tn thread tile in registers, rows
 *     ty + i * (bm / tm), columns tx + j * (bn / tn) (so a warp reads a
 *     B row of shared memory without bank conflicts and stores C
 *     coalesced); the k loop over the tile unrolled by "unroll"
 *   epilogue in registers (bias, activation, residual), stores masked
 *     past M and N.
 *
 * M, N, K, every stride and the batch extents are run-time arguments: one
 * kernel serves every shape of its schedule, unit-stride class and
 * epilogue. Decision points are named and have point kinds like the CPU
 * spaces (space.h), so schedules print and parse as text.
 */
#ifndef TLM_RUNTIME_GPU_H
#define TLM_RUNTIME_GPU_H

#include <stdint.h>

#include "space.h"
#include "task.h"

/* Versions of the GPU code generator and of the GPU rule, in every GPU
 * cache key: bump them when the code or the rule's decisions change. */
#define TLM_GPU_CODEGEN_VERSION 3 /* 2: NaN through ReLU; M tiles on grid x; 3: activations from jit/activation.c */
#define TLM_GPU_RULE_VERSION 1

/* What a GPU kernel's schedule and code depend on. Part of GPU cache keys
 * (no padding holes, no pointers). */
typedef struct tlm_gpu_target {
  int32_t sm;                 /* compute capability x 10 + y, e.g. 90 */
  int32_t sm_count;           /* streaming multiprocessors */
  int32_t max_threads_block;  /* most threads of one block (1024) */
  int32_t regs_per_sm;        /* 32-bit registers of one SM (65536) */
  int32_t regs_per_thread;    /* most registers one thread may use (255) */
  int32_t smem_per_block;     /* bytes of static shared memory a block may use (48 KiB) */
  int32_t smem_per_sm;        /* bytes of shared memory of one SM */
  int32_t warp;               /* threads of a warp (32) */
  int32_t driver_version;     /* cuDriverGetVersion (e.g. 13000); 0 offline */
  int32_t pad_;
  char name[64];              /* device name, NUL-padded ("" offline) */
} tlm_gpu_target;

/* The published figures of a compute capability, for offline work (PTX
 * checks, tests without a GPU): sm 80 is an A100 (108 SMs, 164 KiB of
 * shared memory per SM), sm 90 an H100/H200 SXM (132 SMs, 228 KiB), other
 * values get sm 80's limits with their own sm. From NVIDIA's CUDA C++
 * Programming Guide, "Technical Specifications per Compute Capability". */
void tlm_gpu_target_offline(tlm_gpu_target *t, int sm);

/* GPU matmul decision points, in walking order. */
enum {
  GM_TN = 0, /* thread tile columns (1, 2, 4, 8) */
  GM_TM,     /* thread tile rows (1, 2, 4, 8) */
  GM_BN,     /* block tile columns (16 .. 128) */
  GM_BM,     /* block tile rows (16 .. 128) */
  GM_BK,     /* k step staged in shared memory (4 .. 32) */
  GM_STAGES, /* 1: one shared buffer (two barriers a step); 2: double buffered */
  GM_UNROLL, /* unroll of the k loop over a staged tile (1 .. bk) */
  GM_NPOINTS
};

/* GPU row operators (softmax, layernorm, rmsnorm): one block per row, its
 * threads striding over the row's columns (column c of thread t when
 * c = t + i * threads), each reduction (max and sum of exp; mean and
 * variance; mean of squares) a tree over shared memory, the output written
 * in a last pass (y may be x). Rows, columns, the causal matrix height and
 * every stride are kernel arguments. */
enum {
  GR_THREADS = 0, /* threads of a row's block (32 .. 1024) */
  GR_UNROLL,      /* columns a thread handles per loop iteration (1, 2, 4) */
  GR_NPOINTS
};

/* Point kinds of the GPU decisions (the tensor language's token groups;
 * appended after space.h's tlm_point_kind). */
enum {
  TLM_PK_GPU_THREAD_TILE = 8,
  TLM_PK_GPU_BLOCK_TILE = 9,
  TLM_PK_GPU_K_STEP = 10,
  TLM_PK_GPU_STAGES = 11,
  TLM_PK_GPU_THREADS = 12
};

/* 1 when the task's kind has GPU kernels (matmul, softmax, layernorm,
 * rmsnorm). */
int tlm_gpu_supports(const tlm_task *task);

typedef struct tlm_gpu_space {
  tlm_task task;
  tlm_gpu_target target;
  int32_t npoints;
  const tlm_point *points;
} tlm_gpu_space;

/* Builds the GPU space of a valid task. Returns 0, or -1 when the task's
 * kind has no GPU space (tlm_gpu_supports). */
int tlm_gpu_space_init(tlm_gpu_space *s, const tlm_task *task, const tlm_gpu_target *target);

/* Candidates of point p given decided[0..p-1], ascending and distinct;
 * returns how many (>= 1 for a valid prefix). Every schedule a walk can
 * produce fits the target: threads a block in [warp, max_threads_block],
 * whole loads per thread, shared memory within smem_per_block, an
 * estimate of registers within regs_per_thread and regs_per_sm. */
int tlm_gpu_space_candidates(const tlm_gpu_space *s, int p, const int32_t *decided,
                             int32_t *cands);

/* Walks the points with `choose` (space.h's generic walker; the chooser
 * gets the tlm_gpu_space as its `space`). */
void tlm_gpu_space_walk(const tlm_gpu_space *s, tlm_point_choose choose, void *ctx,
                        tlm_schedule *out);

/* 1 when every value of sched is among its point's candidates. */
int tlm_gpu_space_accepts(const tlm_gpu_space *s, const tlm_schedule *sched);

/* Uniform random schedule (splitmix64 state, advanced). */
void tlm_gpu_space_sample(const tlm_gpu_space *s, uint64_t *rng, tlm_schedule *out);

/* The rule (no model), derived from the target (gpu.c documents it). */
void tlm_gpu_space_default(const tlm_gpu_space *s, tlm_schedule *out);

/* "tn=8 tm=8 bn=128 ..." into buf; returns buf. */
char *tlm_gpu_schedule_str(const tlm_gpu_space *s, const tlm_schedule *sched, char *buf, int cap);

/* Parses tlm_gpu_schedule_str's text (every point, any order). Returns 0,
 * or -1 with a message. */
int tlm_gpu_schedule_parse(const tlm_gpu_space *s, const char *text, tlm_schedule *out, char *err,
                           int errcap);

/* Launch geometry of a schedule for a task: threads a block, blocks along
 * x (M tiles; rows for row operators), y (N tiles) and z (batches),
 * static shared memory bytes. Returns 0, or -1 when the grid exceeds
 * CUDA's limits (y and z at most 65535: N up to 65535 x bn columns, 65535
 * batches; x at most 2^31 - 1). */
typedef struct tlm_gpu_launch {
  int32_t threads;
  int64_t grid_x, grid_y, grid_z;
  int32_t smem_bytes;
} tlm_gpu_launch;
int tlm_gpu_launch_dims(const tlm_task *task, const tlm_schedule *sched, tlm_gpu_launch *out);

/* Registers a thread of the schedule needs, as the space estimates them
 * (accumulators, operand fragments, staged loads, addressing). */
int tlm_gpu_regs_estimate(const tlm_schedule *sched);

/* The kernel's arguments, in order, each 8 bytes (pointers as their
 * addresses): A, B, C, bias, residual (0 when absent), M, N, K, the row
 * and column strides of A (m, k), B (k, n), C (m, n), residual (m, n), the
 * bias stride, then the 4 batch extents (C's, 1 when unused) and the 4
 * batch strides of A, B, C and residual. */
enum {
  GA_A = 0, GA_B, GA_C, GA_BIAS, GA_R,
  GA_M, GA_N, GA_K,
  GA_SAM, GA_SAK, GA_SBK, GA_SBN, GA_SCM, GA_SCN, GA_SRM, GA_SRN, GA_SBIAS,
  GA_BATCH,                 /* 4 extents */
  GA_SAB = GA_BATCH + 4,    /* 4 strides each */
  GA_SBB = GA_SAB + 4,
  GA_SCB = GA_SBB + 4,
  GA_SRB = GA_SCB + 4,
  GA_COUNT = GA_SRB + 4
};

/* Fills args[GA_COUNT] for a task and its operand addresses. The batch
 * dims are C's, outermost first, 1 when unused. */
void tlm_gpu_mm_args(const tlm_task *task, uint64_t a, uint64_t b, uint64_t c, uint64_t bias,
                     uint64_t r, int64_t args[GA_COUNT]);

/* A row kernel's arguments, each 8 bytes: x, y, gamma, beta (0 when
 * absent), rows, cols, the causal matrix height (mrows), the row and
 * column strides of x and y, gamma's and beta's strides. */
enum {
  GRA_X = 0, GRA_Y, GRA_G, GRA_B, GRA_ROWS, GRA_COLS, GRA_MROWS, GRA_SX0, GRA_SX1, GRA_SY0,
  GRA_SY1, GRA_SG, GRA_SB, GRA_COUNT
};
void tlm_gpu_row_args(const tlm_task *task, uint64_t x, uint64_t y, uint64_t gamma, uint64_t beta,
                      int64_t rows, int64_t cols, int64_t mrows, const int64_t sx[2],
                      const int64_t sy[2], int64_t sg, int64_t sb, int64_t args[GRA_COUNT]);

/* Number of 8-byte kernel arguments of the task's kind (GA_COUNT or
 * GRA_COUNT); the largest is TLM_GPU_MAX_ARGS. */
#define TLM_GPU_MAX_ARGS GA_COUNT
int tlm_gpu_arg_count(const tlm_task *task);

#endif
