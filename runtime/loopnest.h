/* loopnest.h - the target-neutral loop-nest IR a schedule lowers to
 * (internal). jit/codegen.c turns it into LLVM IR.
 *
 * A nest is a tree of nodes. Code generation walks it with a current block
 * [start, start + size) per axis; the root block is the whole iteration
 * space (b: all batches, m: [0, M), n: [0, N), k: [0, K)).
 *   LN_PARALLEL  iterations [begin, end) of the fused loops, each loop
 *                stepping its axis in blocks of `block`; the runtime splits
 *                the fused count over threads. Zero fused loops = one
 *                iteration. With `split_m` (M the one fused loop), M's
 *                block is tlm_mm_args.mblock where that is > 0: the
 *                run-time split of ln_parallel_m_block.
 *   LN_FOR       serial loop stepping `axis` in blocks of `block`; the last
 *                block is partial when block does not divide the size.
 *   LN_PACK_B    copies the current (b, k, n) block of B into per-thread
 *                scratch as panels [b][n/n3][k][n3] (zero padded), then runs
 *                its body reading B from there.
 *   LN_TILE      the register tile: tile_b x tile_m x (vec * nvec)
 *                accumulators over the current k block, k unrolled by
 *                `unroll`; applies the epilogue in registers when
 *                `epilogue` is set and the k block is the last one; with
 *                `tail_m`, a block of at most tail_m rows runs a copy of
 *                the tile of tail_m rows.
 *   LN_EPILOGUE  elementwise epilogue pass over the current (b, m, n) block.
 */
#ifndef TLM_RUNTIME_LOOPNEST_H
#define TLM_RUNTIME_LOOPNEST_H

#include <stdint.h>

#include "space.h"
#include "task.h"

typedef enum ln_axis { LN_B = 0, LN_M = 1, LN_N = 2, LN_K = 3, LN_NAXES = 4 } ln_axis;

typedef enum ln_kind {
  LN_PARALLEL = 0,
  LN_FOR = 1,
  LN_PACK_B = 2,
  LN_TILE = 3,
  LN_EPILOGUE = 4
} ln_kind;

#define LN_MAX_NODES 32
#define LN_MAX_BODY 4

typedef struct ln_node {
  int32_t kind;
  /* LN_FOR: the axis and its child block size */
  int32_t axis;
  int64_t block;
  /* LN_PARALLEL: fused loops, outermost first */
  int32_t nfused;
  int32_t fused_axis[3];
  int64_t fused_block[3];
  /* 1 when the one fused loop is M's: where its blocks at the run-time M
   * are fewer than the workers, they become one block a worker, of about
   * equal rows (ln_parallel_m_block; split_rows: the tile's rows), so a
   * kernel shared by every M keeps every worker busy at each M */
  int32_t split_m, split_rows;
  /* LN_TILE */
  int32_t tile_b, tile_m, vec, nvec, unroll, epilogue;
  int32_t kvec; /* 1: vectors run along k (dot products), nvec = columns */
  /* rows of a second version of the tile (vectors along n) for a block of
   * at most that many rows of M (0: none): the tail of an M the kernel
   * did not choose its rows for (a constant B: one kernel for every M) */
  int32_t tail_m;
  /* independent FMA chains the target needs in flight (tlm_target
   * fma_chains; 0 = no split): a tile of fewer accumulators keeps up to
   * `unroll` sets of them, one per unrolled k step, summed after the k
   * loop (ln_set_fma_chains) */
  int32_t chains;
  /* LN_PACK_B: panels per block and k block (the packed strides) */
  int64_t pack_panels, pack_kblock, pack_width;
  /* children, run in order */
  int32_t nbody;
  int32_t body[LN_MAX_BODY];
} ln_node;

typedef struct ln_nest {
  int32_t nnodes;
  int32_t root; /* always an LN_PARALLEL node */
  ln_node nodes[LN_MAX_NODES];
} ln_nest;

/* Lowers a valid matmul schedule. Returns 0, -1 if the nest would not fit. */
int ln_lower_matmul(const tlm_task *task, const tlm_schedule *sched, ln_nest *out);

/* How a nest with an LN_PACK_B node lays out B packed whole: panels of
 * `width` columns (N padded to whole panels with zeros), each `kblock` rows
 * of one K block (K padded likewise), as LN_PACK_B copies them into
 * scratch; slab (jk, b) holds K block jk of batch b, its panels in order:
 * panel pn, row kk, lane l of slab (jk, b) at
 *   ((jk * batches + b) * npanels + pn) * kblock * width + kk * width + l
 * holds B[b][jk * kblock + kk][pn * width + l]. A block of the node's pack_panels panels
 * from panel n0 / width is then the contiguous run the kernel reads after
 * its copy; a kernel given the whole (tlm_mm_args.bpk) skips the copy.
 * Only the width and kblock matter, not the N block. */
typedef struct ln_pack_layout {
  int64_t kblock, width;                  /* from the LN_PACK_B node */
  int64_t npanels, kblocks, batches;      /* ceil(N / width), ceil(K / kblock) */
  int64_t panel_floats;                   /* kblock * width */
  int64_t floats;                         /* the whole */
} ln_pack_layout;

/* Fills *out for a nest lowered for `task` (the N, K and batch extents are
 * the task's). Returns 1 when the nest packs B, 0 when it does not (*out
 * zeroed), -1 when the whole would overflow int64. */
int ln_pack_layout_of(const ln_nest *nest, const tlm_task *task, ln_pack_layout *out);

/* Packs B of a matmul task, read through strides sb (elements: 4 batch
 * dims, row k, column n, as tlm_mm_args.sb), into dst (lay->floats
 * floats): panels [begin, end) of the kblocks * batches * npanels in
 * memory order, each written in full (padding with zeros), so disjoint
 * ranges can be packed by different threads. No allocation. */
void ln_prepack_b(const ln_pack_layout *lay, const tlm_task *task, const float *b,
                  const int64_t *sb, float *dst, int64_t begin, int64_t end);

/* Sets every register tile's `chains` (see ln_node). */
void ln_set_fma_chains(ln_nest *nest, int chains);

/* Rows of M's parallel blocks at this task's M on `workers` threads, or 0
 * for the nest's own blocks (no split_m, or its static blocks already
 * number at least `workers`, or M has a single tile of split_rows rows):
 * M in parts = min(workers, tiles) blocks of ceil(M / parts) rows, the
 * last the smallest. The engine passes it as tlm_mm_args.mblock. */
int64_t ln_parallel_m_block(const ln_nest *nest, const tlm_task *task, int64_t workers);

/* The same from the numbers: M rows, the static block of M, the tile's
 * rows, the workers (the space counts a schedule's blocks with it). */
int64_t ln_split_m_block(int64_t M, int64_t block, int64_t rows, int64_t workers);

/* Iterations of the root's fused parallel loops for this task (M is the
 * run-time M) on `workers` threads (ln_parallel_m_block). >= 1. */
int64_t ln_parallel_count(const ln_nest *nest, const tlm_task *task, int64_t workers);

/* Human-readable nest, one loop per line, indented, into buf. Returns buf. */
char *ln_print(const ln_nest *nest, char *buf, int cap);

#endif
