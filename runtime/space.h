/* space.h - schedule spaces as ordered lists of decision points (internal).
 *
 * A schedule is one integer value per decision point. The candidates of a
 * point may depend on the values chosen at earlier points, so every walker
 * (the default rule, the random sampler, the language model's constrained
 * decoder, data collection) goes through the points in order and picks one
 * of tlm_space_candidates() at each. Only invalid choices are left out;
 * slow-looking ones stay in.
 *
 * Matmul sketch (after Ansor's CPU multi-level tiling "SSRSRS", Zheng et al.,
 * OSDI 2020): spatial axes b, m, n are split into 4 levels (0 outermost, 3 the
 * register tile) and the reduction axis k into 2:
 *
 *   parallel-fuse(first P level-0 loops)            <- P = "parallel"
 *   for b0, {m0, n0}            (order0)            level 0
 *     for b1, {m1, n1}          (order1)            level 1
 *       for k0                                      K blocks of k1
 *         [pack B block into panels]                <- "pack_b"
 *         for b2, {m2, n2}      (order2)            level 2
 *           for k1 (unrolled by "unroll")
 *             register tile b3 x m3 x n3, n vectorized by "vec"
 *           epilogue in registers at the last k0    <- "epilogue_at" = 3
 *     [epilogue pass over the level-1 block]        <- "epilogue_at" = 1
 *   [epilogue pass over the level-0 block]          <- "epilogue_at" = 0
 *
 * A level's value is the number of child blocks in one of its blocks; the
 * outermost count is derived from the extent. Any extent works: every level
 * handles a partial last block (tails), 1 and primes included.
 */
#ifndef TLM_RUNTIME_SPACE_H
#define TLM_RUNTIME_SPACE_H

#include <stdint.h>

#include "target.h"
#include "task.h"

/* Version of what schedules mean: bump it whenever a decision's meaning or
 * the code generated for a schedule changes, so cached plans and kernels
 * (cache/key.c puts it in every key) from older builds are never reused. */
#define TLM_CODEGEN_VERSION 36 /* 36: a parallel loop over M alone cut at run time into a block a worker where its own blocks are fewer (ln_split_m_block); 28: one matmul register tile version (codegen.c); 29: depthwise kernel rows as a loop; the fast conv version one-row only; 30: B packed row by row; 31: a half-height tile for M tails of a constant B; 32: safe one-row conv tiles skip kernel rows in the padding; 33: every safe tile over the flattened plane does; 34: safe-only tiles with padding along ow take the interior columns first, then the edge columns (codegen_conv.c pixel_of); 35: depthwise one-row tiles through kernel-row pointers, their safe version as runs within one output row (runs_version) */

/* Version of the default rule (tlm_space_default): bump it whenever the
 * rule's decisions change. The rule's schedule is part of the language
 * model's prompt, so a model trained against another rule version sees
 * prompts it never saw and is not used (tlm_lm_covers). Version 2: the
 * register tile and blocks derived from the target (issue #16). Version 3:
 * depthwise convolution rows (tlm_rule_family_version). Version 4: B
 * packed for narrow register tiles (AVX2's 16 lanes a row) when at most two
 * of its rows share a page, as when a page or more apart before; the
 * decisions of wider (AVX-512) tiles are unchanged, so the matmul family
 * stays at 2 for the models trained before. Version 5: the rule blocks
 * for the runtime's threads (tlm_target.threads; prompts keep one thread
 * per CPU), and when it packs B past the L2 bound its M block is the L3
 * block (A's block in half this core's L3 share: B packed once per block
 * of up to those rows, not once per L2 block); wide unpacked AVX-512
 * tiles and the default thread count are unchanged, so the matmul family
 * stays at 2. Version 6: a matrix-vector product whose N fits one register
 * tile streams B in K blocks of 256, not 16; B declared constant
 * (tlm_matmul_task.b_const, a task no model has seen) is always packed
 * where the space allows it. Other matmul decisions are unchanged, so the
 * family stays at 2. Version 7: on cores whose L1 stride prefetcher has a
 * reach (tlm_target.pf_stride_bytes: Intel's), B rows beyond it are
 * packed whatever the tile's width; AMD targets, the only ones a model
 * has been trained on, keep every decision, so the family stays at 2.
 * Version 8: with more than one worker and all of M in one block, N's
 * level-1 blocks are grouped into about one contiguous range per worker
 * (tile_n1); this changes the prompt's rule schedule of small-M matmuls
 * on the 2-thread machines models were trained on, so the matmul family
 * moves to 8: models trained before schedule its tasks no more.
 * Version 9: fused attention offers tiles of 16-64 rows kept in L1 where
 * a K/V head serves that many rows (a prefill), and the rule takes them;
 * the attention family moves to 9.
 * Version 10 (session 31): matmul register tiles of 3 vectors on 16
 * registers where they divide N, B packed for rows that are not whole
 * lines; convolutions of 3 channels per group with a window (RGB stems)
 * take the channels inner (red_order 0): the matmul family and those
 * convolutions move to 10.
 * Version 11 (session 32): matmul level-1 tiles whose largest level-0
 * block is more than 5/4 of a worker's mean work are not offered when a
 * balanced one is (a last block that is a sliver: 1536 + 768 columns of
 * 2304 on two workers); the rule's tile_n1 of 2304-wide AVX-512 matmuls
 * goes from 3 to 1 (1.19x at 32-405 rows on the Xeon): the matmul family
 * moves to 11.
 * Version 12 (session 34): the matmul rule shares M among the workers,
 * in balanced blocks, where it shared N under one block of all of M and
 * M >= N (mm_rule_split_m2): the matmul family moves to 12.
 * Version 13 (session 35): where all of M fits one block within the L2
 * bound, the rule's tile_m2 is the L3 block (M-independent) rather than
 * the smallest value that covers M: the same loops run, and every M up to
 * the bound shares one kernel; the matmul family moves to 13.
 * Version 14 (session 36): a B (not constant) larger than a worker's L2
 * under at most 16 rows is streamed as under one register tile (short K
 * blocks, wide N blocks, not packed: mm_streams_b); the matmul family
 * moves to 14.
 * Version 15 (session 37): register tiles of at most TLM_MM_PTR_ROWS (8)
 * rows for matmul and TLM_CONV_PTR_ROWS (10) for convolutions, the rows
 * their inner loops address without spilling general-purpose registers
 * (space.h, TLM_GP_REGS); before, 1-2 vectors on 32 registers took 12-16
 * rows. The matmuls of more than 8 rows and N <= 48 and the convolutions
 * with at most 48 lanes on the vector axis and more than 10 rows on the
 * other move to 15 (their rule_version functions).
 * Version 16 (session 38): depthwise tiles of the most vectors whose
 * lanes the groups fill best (op_conv.c, dw_tile_nv), where the widest
 * had taken a lane tail: 144 groups as 3 x 48 lanes on AVX-512, not
 * 64 + 64 + 16; the depthwise layers whose tile changes under AVX-512 or
 * AVX2 move to 16.
 * Version 17 (session 38): matmuls of a few register tiles of rows over a
 * B (not constant) from L3 or memory take the K block that keeps B's
 * micro-panel in half of L1 (op_matmul.c, mm_short_k1: 96 with 6 x 64
 * AVX-512 tiles and 48 KiB of L1, where 256 made it 64 KiB); those
 * matmuls of 5-256 rows with K beyond 256 and B beyond 1 MiB move to 17.
 * Version 18 (session 38): convolutions with lanes along fewer output
 * channels a group than the full width take the narrowest vector of at
 * least 4 lanes that holds them (op_conv.c, rule 18), and so do matmuls
 * with N under the full width (op_matmul.c, MM_VEC); those with under 16
 * channels a group on the lanes' axis and the matmuls with N < 16 move
 * to 18.
 * Version 19 (session 39): a matmul of one column (N = 1) whose A rows and
 * B column are unit-stride in k takes dot products along k at every M
 * (op_matmul.c, MM_VEC), where the outer product filled one lane of each
 * vector (1x4096:4096x1 13x faster, 64x768:768x1 3.4x); and dot products
 * take 8 lanes on 16-lane targets but for one row of one column; the
 * matmuls with dot products move to 19.
 * Version 20 (session 41): on cores whose strided loads stream across
 * pages (tlm_target.pf_stride_bytes == TLM_PF_CROSS_PAGE: Zen 5), B rows
 * under two cache lines are packed only over more than 16 register tiles
 * of rows, or 4 where the rows lie a whole number of pages apart
 * (op_matmul.c, mm_rule_packs_b); the matmuls of more than 8 rows and a
 * B (not constant) of unit-stride rows move to 20.
 * Version 21 (session 42): batches of dot products whose B outlasts the
 * L2 and L3 share of the process's cores take tiles of 1 column x 2
 * batches (op_matmul.c, mm_rule_batched_dots: two sequential streams
 * instead of 4 interleaved rows of one batch); the matmuls with dot
 * products over more than one batch move to 21; and so do the batched
 * streamed matmuls (mm_streams_b) of one or two register tiles across N, which keep
 * the K block of 256 (or the most the space offers under it) instead of
 * 16. The same session reads an AMD L3 larger than one core complex holds
 * as the CCX's (target.c).
 * Version 22 (session 46): on targets whose vectors are wider than the
 * FMA datapath (AVX-512 on Zen 4), the register tile's rows over M for a
 * B that is not constant are the fewest cycles by the target's FMA and
 * load issue (tlm_reg_rows_timed), not the fewest loads per FMA over the
 * rows used: 16 rows as 4 x 4 rows, not 6 + 6 + 4 (op_matmul.c,
 * mm_rule_rows_m3), and so are a convolution's tile rows over its pixels
 * (op_conv.c, conv_rule_rows). The matmuls and convolutions whose rows
 * change on a target move to 22 there (the families' rule_version take
 * the target); elsewhere, and on every other target, they keep theirs.
 * Version 23 (session 48): with more than one worker, an NHWC depthwise
 * convolution splits its groups into channel blocks of a few register
 * tiles and runs its parallel loop with the channel blocks minor
 * (parallel = 3, a value the space offers depthwise tiles from this
 * version: op_conv.c, dw_c_block_tiles), so the workers share a small
 * map's groups; those tasks move to 23 on such targets.
 * Version 24 (session 55): a matmul of a constant B whose rule keeps all
 * of M in one block shares M among its workers, cut at run time into one
 * block a worker (op_matmul.c, mm_rule_split_m_runtime; loopnest.h,
 * ln_split_m_block), where it used to share N; unbatched constant-B
 * matmuls move to 24. */
#define TLM_RULE_VERSION 24

/* The rule version in which the rule or the code generation of the task's
 * family last changed (version 3: depthwise convolutions, whose tile rows
 * now come from half the register file and whose window is unrolled;
 * version 8: matmul and batched matmul, tile_n1 with several workers;
 * version 9: fused attention, tiles in L1 at prefill; 2 for every other
 * family). A model trained against rule version v
 * schedules a task only when v >= this (tlm_lm_covers_task): its prompts
 * and its measured records hold the rule and kernels of that time. From
 * version 22 the version may depend on the target tg (not NULL): a task
 * moves only on the targets where its rule schedule changed. */
int tlm_rule_family_version(const tlm_task *task, const tlm_target *tg);

#define TLM_MAX_POINTS 24
#define TLM_MAX_CANDIDATES 64

/* What a decision point decides; the language model has one token group per
 * kind, so these numbers are part of the tensor language: append only. */
typedef enum tlm_point_kind {
  TLM_PK_VEC = 0,        /* vector width in f32 lanes along n */
  TLM_PK_TILE = 1,       /* split factor of one axis at one level */
  TLM_PK_UNROLL = 2,     /* unroll factor of the inner reduction loop */
  TLM_PK_ORDER = 3,      /* loop order of one tile level: 0 m outer, 1 n outer */
  TLM_PK_PACK = 4,       /* 0/1: pack the B block into contiguous panels */
  TLM_PK_PARALLEL = 5,   /* number of fused parallel outer loops */
  TLM_PK_COMPUTE_AT = 6, /* level where the epilogue is computed */
  TLM_PK_VEC_AXIS = 7    /* which output axis the vector lanes span */
} tlm_point_kind;

typedef struct tlm_point {
  const char *name; /* e.g. "tile_m3" */
  int32_t kind;     /* tlm_point_kind */
} tlm_point;

/* The "vec" decision: 1, 4, 8, 16 vectorize along n (outer products with
 * broadcast A); TLM_VEC_K + w (w = 4, 8, 16) vectorizes along k instead
 * (dot products reduced at the end), offered when A and B are both
 * unit-stride in k, as for Q K^T with the K cache stored (L, d). In k mode
 * tile_n3 counts columns, not lanes. */
#define TLM_VEC_K 100
static inline int tlm_vec_lanes(int32_t vec) { return vec > TLM_VEC_K ? vec - TLM_VEC_K : vec; }
static inline int tlm_vec_is_k(int32_t vec) { return vec > TLM_VEC_K; }
/* vector accumulators per register-tile row */
static inline int32_t tlm_vec_per_row(int32_t vec, int32_t n3) {
  return tlm_vec_is_k(vec) ? n3 : n3 / vec;
}

/* Matmul decision points, in walking order. */
enum {
  MM_VEC = 0,
  MM_N3, MM_M3, MM_B3, /* register tile */
  MM_K1,               /* inner reduction block */
  MM_UNROLL,
  MM_N2, MM_M2, MM_B2, /* level 2 */
  MM_N1, MM_M1, MM_B1, /* level 1 */
  MM_ORDER0, MM_ORDER1, MM_ORDER2,
  MM_PACK_B,
  MM_PARALLEL,
  MM_EPILOGUE_AT,
  MM_NPOINTS
};

/* Row-wise (softmax, layernorm, rmsnorm) decision points: vector width along
 * the row, independent vector accumulators per reduction (the unroll),
 * rows per block, and whether blocks of rows run in parallel. */
enum { ROW_VEC = 0, ROW_UNROLL, ROW_TILE, ROW_PARALLEL, ROW_NPOINTS };

/* Convolution decision points (see docs/design.md, "Convolution").
 * Register tiles cover a plane of (C axis x pixels); the vector axis
 * decides which of the two the SIMD lanes span:
 *   axis 0 (oc): lanes along the output channels of a group, tile rows
 *          along the output pixels of the (oh, ow) plane flattened (so a
 *          tile may straddle output rows and 7x7 images have no 1-pixel
 *          tails); outer products of a broadcast src value with a weight
 *          vector (NHWC with HWIO weights). C axis = OCg.
 *   axis 1 (ow): lanes along ow within one output row, tile rows along
 *          output channels; broadcast weight times a src vector (NCHW).
 *          C axis = OCg.
 *   axis 2 (g): lanes along groups, tile rows along the flattened pixels;
 *          src vector times weight vector, for depthwise convolutions in
 *          NHWC. C axis = G, and the row loop runs over OCg instead of G.
 * A "row" of the outer loop is (n, other, od) for axes 0 and 2 and
 * (n, other, od, oh) for axis 1; "w" is the pixel plane or ow.
 *
 *   parallel: nothing | (row, w block) | (C block, row, w block)
 *             (C-block major: neighbouring iterations share weights)
 *             | (row, w block, C block) (C-block minor; axis 2 only)
 *   for row
 *     for C blocks, for w blocks    (or swapped)          <- "order"
 *       for C tiles, for w tiles of the block             <- tile_c2, tile_w2
 *         register tile: for kd (skipping padding), kh
 *           for kw, for icg  (or icg, kw)                 <- "red_order"
 *             (innermost loop unrolled by "unroll")
 *         epilogue in registers, store
 * A tile whose every row reads only inside the input and that is full in
 * both axes runs without masks or bounds checks. */
enum {
  CV_AXIS = 0, CV_VEC, CV_TILE_V, CV_ROWS, CV_UNROLL, CV_RED_ORDER,
  CV_TILE_C2, CV_TILE_W2, CV_ORDER, CV_PARALLEL, CV_NPOINTS
};

/* Pooling decision points: vector width along the channels, vectors per
 * step (independent accumulators), and whether output rows (n, od, oh) run
 * in parallel. */
enum { PL_VEC = 0, PL_UNROLL, PL_PARALLEL, PL_NPOINTS };

/* Fused attention: vector lanes along the head dims (dot products of Q and
 * K rows, the output accumulators over Dv), query rows per tile (they share
 * each K and V row read), keys per block of the online softmax (scores of
 * a block in scratch), and a parallel loop over the (b, h, query block)
 * tiles. */
enum { ATT_VEC = 0, ATT_QBLOCK, ATT_KBLOCK, ATT_PARALLEL, ATT_NPOINTS };

/* C-axis and ow extents of a register tile, and of the C axis itself */
void tlm_conv_tile_dims(const tlm_task *t, const int32_t *v, int64_t *c_t, int64_t *w_t,
                        int64_t *c_ext);

/* Iterations of a conv kernel's parallel loop for a task and schedule. */
int64_t tlm_conv_parallel_count(const tlm_task *t, const int32_t *v);

typedef struct tlm_schedule {
  int32_t n;                    /* number of decisions (= points) */
  int32_t v[TLM_MAX_POINTS];    /* value per point; unused entries 0 */
} tlm_schedule;

typedef struct tlm_space {
  tlm_task task;
  tlm_target target;
  int32_t npoints;
  const tlm_point *points;
} tlm_space;

/* Any space as a list of points and a candidate function: the walk, the
 * acceptance check and the text form shared by the CPU spaces below and
 * the GPU spaces of gpu.h. `space` is passed through to the callbacks. */
typedef int (*tlm_point_cands)(const void *space, int p, const int32_t *decided, int32_t *cands);
typedef int (*tlm_point_choose)(void *ctx, const void *space, int p, const int32_t *decided,
                                const int32_t *cands, int n);
void tlm_points_walk(const void *space, int npoints, tlm_point_cands cands, tlm_point_choose choose,
                     void *ctx, tlm_schedule *out);
int tlm_points_accepts(const void *space, int npoints, tlm_point_cands cands,
                       const tlm_schedule *sched);
/* "name=value ..." of a schedule into buf; returns buf. */
char *tlm_points_str(const tlm_point *points, int npoints, const tlm_schedule *sched, char *buf,
                     int cap);
/* Parses "name=value" pairs (any order, every point once at least) into
 * *out without checking the values against a space. Returns 0, or -1 with
 * a message. */
int tlm_points_parse(const tlm_point *points, int npoints, const char *text, tlm_schedule *out,
                     char *err, int errcap);
/* A chooser drawing uniformly; ctx is a splitmix64 state. */
int tlm_choose_uniform(void *ctx, const void *space, int p, const int32_t *decided,
                       const int32_t *cands, int n);

/* Builds the space of a valid task for a target. Returns 0, or -1 when the
 * task's kind has no space. */
int tlm_space_init(tlm_space *s, const tlm_task *task, const tlm_target *target);

/* Candidates of point `p` given the values decided[0..p-1]. Writes them,
 * ascending and distinct, into cands (room for TLM_MAX_CANDIDATES) and
 * returns how many (always >= 1 for a valid prefix). */
int tlm_space_candidates(const tlm_space *s, int p, const int32_t *decided,
                         int32_t *cands);

/* 1 when every value of `sched` is among its point's candidates. */
int tlm_space_accepts(const tlm_space *s, const tlm_schedule *sched);

/* A matmul schedule whose level-2 M block holds all of M (and no level-1
 * grouping) in the form rule version 13 writes it: tile_m2 the L3 block
 * the space offers whatever M. The loops, the code and the speed are the
 * same either way (one block); records measured under earlier rules, which
 * wrote the smallest covering value, then match the current rule's
 * schedule (tlm train). Other schedules, and the schedules of other
 * families, are left as they are; so is one the space would not accept. */
void tlm_mm_canonical(const tlm_space *s, tlm_schedule *sched);

/* A walker picks an index into cands (0..n-1) for point p. */
typedef int (*tlm_chooser)(void *ctx, const tlm_space *s, int p,
                           const int32_t *decided, const int32_t *cands, int n);

/* Walks the points in order with `choose`; fills *out. */
void tlm_space_walk(const tlm_space *s, tlm_chooser choose, void *ctx,
                    tlm_schedule *out);

/* Uniform random schedule: each point's value uniform over its candidates.
 * *rng is a splitmix64 state, advanced. Deterministic for a seed. */
void tlm_space_sample(const tlm_space *s, uint64_t *rng, tlm_schedule *out);

/* The deterministic hand rule (no model): register tile from the vector
 * width and register count, K block for L1, level-2 blocks for L2, the
 * outer loop with more blocks parallel. */
void tlm_space_default(const tlm_space *s, tlm_schedule *out);

/* For a family's check of whether rule 22 changed a task's rows on target
 * tg (not NULL): 1 with the task's space *s and the rule's schedule *d on
 * tg where its vectors are double-pumped (the only targets where rule 22
 * differs from 21); 0, without walking the rule, elsewhere or when the
 * task has no space on tg. */
int tlm_rule22_default(const tlm_task *task, const tlm_target *tg, tlm_space *s, tlm_schedule *d);

/* The rule's register tile for a target: rows x nv vectors (nv a power of
 * two <= max_nv, or 3 when ncols > 0, or exactly -max_nv when max_nv < 0;
 * rows <= max_rows unless 1, and rows <= ptr_rows), from the register
 * file and the FMA chains. ncols: the extent of the vector axis (matmul
 * N), whose tail the choice weighs; 0 when unknown (powers of two only).
 * ptr_rows: the most rows the family's code generator addresses each
 * through a general-purpose register of its own without spilling in the
 * inner loop (TLM_MM_PTR_ROWS, TLM_CONV_PTR_ROWS). space.c documents the
 * derivation. */
void tlm_reg_tile(const tlm_target *tg, int64_t max_rows, int max_nv, int64_t ncols,
                  int ptr_rows, int *rows_out, int *nv_out);

/* The rows of an nv-vector register tile over an extent of `extent` rows,
 * at most `rows` (tlm_reg_tile's pick): the fewest loads per FMA divided by
 * the fraction of the tiles' rows that hold data (a tail tile costs about
 * what a full one does), among the row counts whose accumulators cover as
 * many FMA chains as `rows` does (or all of fma_chains); ties to more rows.
 * Over a long extent this is `rows`; over a short one, rows that divide
 * it (12 pixels: 6 + 6, not 10 + 2). */
int tlm_reg_rows_for_extent(const tlm_target *tg, int64_t extent, int nv, int rows);

/* The rows of an nv-vector register tile over `extent` rows, at most
 * `rows`, whose tiles take the fewest cycles by a count of FMA issue
 * slots and loads read off the target (fma_pipes, fma_bits; space.c,
 * reg_tile_cycles): a tail tile computes its clamped rows again, so it
 * costs a full tile. Same chains condition and ties as
 * tlm_reg_rows_for_extent. Over a long extent this is `rows` where the
 * tail is small; over a few tiles, rows that waste the fewest FMAs. The
 * matmul rule's rows for a B that is not constant, and the convolution
 * rule's tile rows, where the vectors are double-pumped (op_matmul.c
 * mm_rule_rows_m3, op_conv.c conv_rule_rows; rule 22). */
int tlm_reg_rows_timed(const tlm_target *tg, int64_t extent, int nv, int rows);

/* The fraction of the work of rows x nv-vector tiles that holds data over
 * ncols columns (a partial tile counted twice) and, when 0 < max_rows <
 * 2^20, over max_rows rows. ncols > 0. */
double tlm_reg_tile_used(const tlm_target *tg, int rows, int nv, int64_t max_rows, int64_t ncols);

/* General-purpose registers of x86-64 at every tlm_isa level (APX's 16
 * more are not used: LLVM 19's host features leave them off), and the rows
 * of a register tile each family's inner loop holds beside its own state
 * without spilling: the tile's rows are addressed through one register
 * each (the rows of A at a run-time stride; the src pixels of a
 * convolution, clamped or in the padding, each at its own address). Found
 * by compiling the kernels' IR as the JIT does (llc-19 -O3 -disable-lsr,
 * large code model) and counting spills in the inner loop, so they depend
 * on the code generator and the register count, not on one CPU: a matmul
 * loop spills from 10 rows (64x256:256x32, 2 vectors: 3 reloads a step
 * unrolled once, 18 at unroll 4; none at 8 rows), a convolution's from 12
 * rows of 2 vectors (2 reloads; 53 at unroll 4) and 14 of one. The rest of
 * the 16 is the loop's own state (stack pointer, the other operand's
 * pointer, induction variable and bound, C or dst). Rule version 15. */
#define TLM_GP_REGS 16
#define TLM_MM_PTR_ROWS (TLM_GP_REGS - 8)
#define TLM_CONV_PTR_ROWS (TLM_GP_REGS - 6)

/* "vec=16 n3=32 m3=8 ..." into buf. Returns buf. */
char *tlm_schedule_str(const tlm_space *s, const tlm_schedule *sched, char *buf,
                       int cap);

/* Parses the text written by tlm_schedule_str() ("name=value" pairs, any
 * order, all points present). Returns 0, or -1 with a message in err. */
int tlm_schedule_parse(const tlm_space *s, const char *text, tlm_schedule *out,
                       char *err, int errcap);

/* splitmix64 step (Steele, Lea & Flood, OOPSLA 2014). */
uint64_t tlm_rng_next(uint64_t *state);

/* Bytes of the per-thread scratch buffer the schedule needs (the matmul's
 * packed B block; a fused-attention tile in L1: its state), 0 when none. */
int64_t tlm_scratch_bytes(const tlm_task *t, const tlm_schedule *sched);

/* The scratch of a fused-attention schedule with a tile in L1 (tile_q > 8):
 * byte offsets (64-byte aligned) of the transposed scores (tile_q x tile_k
 * floats), transposed Q (D x tile_q), accumulators (tile_q x Dv padded to
 * whole vectors), running max, sum and correction (tile_q floats each) and
 * causal limits (tile_q int64) into off[7] (may be NULL); returns the
 * total, 0 for other schedules. The code generator and the engine's
 * buffer size both come from here. */
int64_t tlm_attn_scratch_layout(const tlm_task *t, const tlm_schedule *sched, int64_t off[7]);

#endif
