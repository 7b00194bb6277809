/* family.h - operator families, one table row each (internal to runtime/).
 *
 * What the runtime layer knows of an operator family sits in its own file,
 * runtime/op_<family>.c, and reaches the rest of the layer through one
 * tlm_family row: its schedule space (decision points and candidates), its
 * rule, its rule version, its scratch, and its tasks' FLOPs, text and
 * run-time fields. space.c and task.c dispatch through tlm_family_of() and
 * hold no per-family branch. Layers above keep their own per-family tables
 * (the code generator and executor in engine/, the prompt words in lm/),
 * each a row per family, as ggml keeps one traits row per type.
 *
 * Adding a family to this layer: its task struct and TLM_OP_ value (api/,
 * task.h), an op_<family>.c defining a `const tlm_family`, and its row in
 * family.c. All functions here are pure: no state, safe from any thread. */
#ifndef TLM_RUNTIME_FAMILY_H
#define TLM_RUNTIME_FAMILY_H

#include <math.h>
#include <stdint.h>

#include "loopnest.h"
#include "space.h"
#include "task.h"

typedef struct tlm_family {
  const char *name; /* "matmul", "row", "conv", "pool", "attention" */
  /* the space: its decision points, in walk order */
  const tlm_point *points;
  int npoints;
  /* the candidates of point p after the points before it took d[0..p-1]:
   * written to c (at most TLM_MAX_CANDIDATES), their count returned */
  int (*candidates)(const tlm_space *s, int p, const int32_t *d, int32_t *c);
  /* the rule: the index in c[0..n-1] it picks for point p */
  int (*rule)(const tlm_space *s, int p, const int32_t *d, const int32_t *c, int n);
  /* version of the rule for this task on target tg
   * (tlm_rule_family_version) */
  int (*rule_version)(const tlm_task *task, const tlm_target *tg);
  /* per-thread scratch bytes a kernel of this schedule needs; NULL (left
   * out of the row) = none */
  int64_t (*scratch_bytes)(const tlm_task *task, const tlm_schedule *s);
  /* floating-point operations of one call (tlm_task_flops) */
  double (*flops)(const tlm_task *t);
  /* the task as text (tlm_task_str): buf of cap bytes, NUL-terminated */
  void (*str)(const tlm_task *t, char *buf, int cap);
  /* zero the fields a kernel takes at run time (tlm_task_clear_runtime) */
  void (*clear_runtime)(tlm_task *t);
  /* iterations of the parallel loop of a kernel of schedule s running
   * task (1 when it runs serially) on `workers` threads; nest: the
   * schedule's loop nest, for families that lower to one (matmul, whose
   * run-time M split depends on the workers), else unused */
  int64_t (*parallel_count)(const tlm_task *task, const tlm_schedule *s, const ln_nest *nest,
                            int64_t workers);
  /* how far apart two tasks of one kernel are in their run-time extents
   * (sum of |log ratio|; 0 = the same): which sibling kernel is nearest */
  double (*extent_distance)(const tlm_task *a, const tlm_task *b);
} tlm_family;

/* output pixels (N OD OH OW) of a convolution or pooling task: what their
 * kernels take at run time, so what sibling kernels differ in */
#define TLM_OUT_PIXELS(t) ((t)->N * (t)->OD * (t)->OH * (t)->OW)

extern const tlm_family tlm_family_matmul, tlm_family_row, tlm_family_conv, tlm_family_pool,
    tlm_family_attention;

/* The family of task->kind; NULL for a kind this build has no space for
 * (TLM_OP_... values outside the table). */
const tlm_family *tlm_family_of(const tlm_task *task);

/* ---- shared by the op_*.c files ----------------------------------------------------- */

/* Split factors offered at tile levels 1, 2 and for the K block (space.c). */
#define TLM_N_TILE_VALUES 40
extern const int32_t tlm_tile_values[TLM_N_TILE_VALUES];

/* Rows offered for a register tile (space.c). */
#define TLM_N_REG_ROWS 12
extern const int32_t tlm_reg_rows[TLM_N_REG_ROWS];

static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Work below which a rule runs a kernel on one worker: 2e5 FLOPs take
 * about 2 us at a core's 100 GFLOPS, the order of one parallel dispatch of
 * the pool (waking the workers and joining them, runtime/threadpool.c).
 * Measured on an Intel Xeon at 2 threads (tlm run --vs): 10x30:30x1 split
 * into two M blocks ran 8.5x slower than one block on one worker. */
#define TLM_PARALLEL_MIN_FLOPS 2e5

/* Tile values f with f <= ceil(extent / inner): a larger factor would only
 * repeat the one-block tiling. */
static inline int tile_candidates(int64_t extent, int64_t inner, int32_t *out) {
  int64_t limit = ceil_div(extent, inner);
  int n = 0;
  for (int i = 0; i < TLM_N_TILE_VALUES && tlm_tile_values[i] <= limit; i++)
    out[n++] = tlm_tile_values[i];
  return n;
}

/* Index of the largest candidate <= want (the smallest if none is). */
static inline int pick_at_most(const int32_t *c, int n, int64_t want) {
  int best = 0;
  for (int i = 0; i < n; i++)
    if (c[i] <= want) best = i;
  return best;
}

/* The vector widths a target offers (1, 4, 8 and 16 lanes, up to its
 * own), appended to c at n; the new count. Every family's vec point. */
static inline int vec_width_candidates(const tlm_space *s, int32_t *c, int n) {
  static const int32_t widths[] = {1, 4, 8, 16};
  for (int i = 0; i < 4; i++)
    if (widths[i] <= s->target.vec_lanes) c[n++] = widths[i];
  return n;
}

/* The unroll factors of the row, pooling and convolution loops (1, 2, 4),
 * appended to c at n; the new count. */
static inline int unroll_candidates(int32_t *c, int n) {
  static const int32_t u[] = {1, 2, 4};
  for (int i = 0; i < 3; i++) c[n++] = u[i];
  return n;
}

/* |log a - log b| (extents below 1 read as 1) */
static inline double log_gap(int64_t a, int64_t b) {
  return fabs(log((double)(a > 0 ? a : 1)) - log((double)(b > 0 ? b : 1)));
}

/* largest power of two <= x (x >= 1) */
static inline int64_t pow2_floor(int64_t x) {
  int64_t p = 1;
  while (p * 2 <= x) p *= 2;
  return p;
}

#endif
