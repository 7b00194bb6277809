/* space.c - the matmul schedule space, its walkers and the default rule. */
#include "space.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Split factors offered at tile levels 1, 2 and for the K block. */
static const int32_t k_tile_values[] = {
    1,   2,   3,   4,   5,   6,   7,   8,   10,  12,  14,   16,   20,   24,
    28,  32,  40,  48,  56,  64,  80,  96,  112, 128, 160,  192,  224,  256,
    320, 384, 448, 512, 640, 768, 896, 1024, 1536, 2048, 3072, 4096};
#define N_TILE_VALUES ((int)(sizeof k_tile_values / sizeof k_tile_values[0]))

static const int32_t k_reg_rows[] = {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16};
#define N_REG_ROWS ((int)(sizeof k_reg_rows / sizeof k_reg_rows[0]))

/* Register tile bound: vector accumulators b3 * m3 * (n3 / vec). Beyond it the
 * unrolled tile's code grows without bound; this is a code-size limit. */
#define MAX_ACCUMULATORS 64
/* Largest packed B block per thread (bytes). */
#define MAX_PACK_BYTES (8 << 20)

static const tlm_point k_mm_points[MM_NPOINTS] = {
    [MM_VEC] = {"vec", TLM_PK_VEC},
    [MM_N3] = {"tile_n3", TLM_PK_TILE},
    [MM_M3] = {"tile_m3", TLM_PK_TILE},
    [MM_B3] = {"tile_b3", TLM_PK_TILE},
    [MM_K1] = {"tile_k1", TLM_PK_TILE},
    [MM_UNROLL] = {"unroll_k1", TLM_PK_UNROLL},
    [MM_N2] = {"tile_n2", TLM_PK_TILE},
    [MM_M2] = {"tile_m2", TLM_PK_TILE},
    [MM_B2] = {"tile_b2", TLM_PK_TILE},
    [MM_N1] = {"tile_n1", TLM_PK_TILE},
    [MM_M1] = {"tile_m1", TLM_PK_TILE},
    [MM_B1] = {"tile_b1", TLM_PK_TILE},
    [MM_ORDER0] = {"order0", TLM_PK_ORDER},
    [MM_ORDER1] = {"order1", TLM_PK_ORDER},
    [MM_ORDER2] = {"order2", TLM_PK_ORDER},
    [MM_PACK_B] = {"pack_b", TLM_PK_PACK},
    [MM_PARALLEL] = {"parallel", TLM_PK_PARALLEL},
    [MM_EPILOGUE_AT] = {"epilogue_at", TLM_PK_COMPUTE_AT},
};

uint64_t tlm_rng_next(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static const tlm_point k_row_points[ROW_NPOINTS] = {
    [ROW_VEC] = {"vec", TLM_PK_VEC},
    [ROW_UNROLL] = {"unroll", TLM_PK_UNROLL},
    [ROW_TILE] = {"tile_rows", TLM_PK_TILE},
    [ROW_PARALLEL] = {"parallel", TLM_PK_PARALLEL},
};

static const tlm_point k_pool_points[PL_NPOINTS] = {
    [PL_VEC] = {"vec", TLM_PK_VEC},
    [PL_UNROLL] = {"unroll", TLM_PK_UNROLL},
    [PL_PARALLEL] = {"parallel", TLM_PK_PARALLEL},
};

static const tlm_point k_attn_points[ATT_NPOINTS] = {
    [ATT_VEC] = {"vec", TLM_PK_VEC},
    [ATT_QBLOCK] = {"tile_q", TLM_PK_TILE},
    [ATT_KBLOCK] = {"tile_k", TLM_PK_TILE},
    [ATT_PARALLEL] = {"parallel", TLM_PK_PARALLEL},
};

static const tlm_point k_conv_points[CV_NPOINTS] = {
    [CV_AXIS] = {"vec_axis", TLM_PK_VEC_AXIS},
    [CV_VEC] = {"vec", TLM_PK_VEC},
    [CV_TILE_V] = {"tile_v", TLM_PK_TILE},
    [CV_ROWS] = {"tile_rows", TLM_PK_TILE},
    [CV_UNROLL] = {"unroll", TLM_PK_UNROLL},
    [CV_RED_ORDER] = {"red_order", TLM_PK_ORDER},
    [CV_TILE_C2] = {"tile_c2", TLM_PK_TILE},
    [CV_TILE_W2] = {"tile_w2", TLM_PK_TILE},
    [CV_ORDER] = {"order", TLM_PK_ORDER},
    [CV_PARALLEL] = {"parallel", TLM_PK_PARALLEL},
};

int tlm_space_init(tlm_space *s, const tlm_task *task, const tlm_target *target) {
  memset(s, 0, sizeof *s);
  s->task = *task;
  s->target = *target;
  if (task->kind == TLM_OP_MATMUL) {
    s->npoints = MM_NPOINTS;
    s->points = k_mm_points;
    return 0;
  }
  if (tlm_task_is_row(task)) {
    s->npoints = ROW_NPOINTS;
    s->points = k_row_points;
    return 0;
  }
  if (task->kind == TLM_OP_CONV) {
    s->npoints = CV_NPOINTS;
    s->points = k_conv_points;
    return 0;
  }
  if (task->kind == TLM_OP_POOL) {
    s->npoints = PL_NPOINTS;
    s->points = k_pool_points;
    return 0;
  }
  if (task->kind == TLM_OP_ATTENTION) {
    s->npoints = ATT_NPOINTS;
    s->points = k_attn_points;
    return 0;
  }
  return -1;
}

static int row_candidates(const tlm_space *s, int p, const int32_t *d, int32_t *c);
static int row_default(const tlm_space *s, int p, const int32_t *d, const int32_t *c, int n);
static int conv_candidates(const tlm_space *s, int p, const int32_t *d, int32_t *c);
static int conv_default(const tlm_space *s, int p, const int32_t *d, const int32_t *c, int n);
static int pool_candidates(const tlm_space *s, int p, const int32_t *d, int32_t *c);
static int pool_default(const tlm_space *s, int p, const int32_t *d, const int32_t *c, int n);
static int attn_candidates(const tlm_space *s, int p, const int32_t *d, int32_t *c);
static int attn_default(const tlm_space *s, int p, const int32_t *d, const int32_t *c, int n);

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Tile values f with f <= ceil(extent / inner): a larger factor would only
 * repeat the one-block tiling. */
static int tile_candidates(int64_t extent, int64_t inner, int32_t *out) {
  int64_t limit = ceil_div(extent, inner);
  int n = 0;
  for (int i = 0; i < N_TILE_VALUES && k_tile_values[i] <= limit; i++)
    out[n++] = k_tile_values[i];
  return n;
}

static int64_t mm_l3_m2(const tlm_target *tg, int64_t k1, int64_t m3);

static int has_epilogue(const tlm_matmul_task *t) {
  return t->has_bias || t->has_residual || t->act != TLM_ACT_NONE;
}

int64_t tlm_attn_scratch_layout(const tlm_task *task, const tlm_schedule *s, int64_t off[7]) {
  const tlm_attn_task *t = &task->u.attn;
  int64_t qb = s->v[ATT_QBLOCK], kb = s->v[ATT_KBLOCK], w = s->v[ATT_VEC] > 0 ? s->v[ATT_VEC] : 1;
  int64_t dp = (t->Dv + w - 1) / w * w;
  /* scores, transposed Q, accumulators (floats); max, sum, correction
   * (floats); limits (int64) */
  int64_t bytes[7] = {qb * kb * 4, qb * t->D * 4, qb * dp * 4, qb * 4, qb * 4, qb * 4, qb * 8};
  int64_t at = 0;
  for (int i = 0; i < 7; i++) {
    if (off) off[i] = at;
    at += (bytes[i] + 63) / 64 * 64;
  }
  return task->kind == TLM_OP_ATTENTION && qb > 8 ? at : 0;
}

int64_t tlm_scratch_bytes(const tlm_task *task, const tlm_schedule *s) {
  if (task->kind == TLM_OP_ATTENTION) return tlm_attn_scratch_layout(task, s, NULL);
  if (task->kind != TLM_OP_MATMUL || !s->v[MM_PACK_B]) return 0;
  int64_t bblock = (int64_t)s->v[MM_B2] * s->v[MM_B3];
  return bblock * s->v[MM_N2] * (int64_t)s->v[MM_N3] * s->v[MM_K1] * 4;
}

/* Level-0 block counts (b, m, n) of a matmul schedule whose points before
 * `upto` are decided; the level-1 factors not decided yet count as 1 (the
 * most blocks they can leave). */
static void mm_level0_blocks(const tlm_space *s, const int32_t *d, int upto, int64_t cnt[3]) {
  const tlm_matmul_task *t = &s->task.u.mm;
  int64_t b1 = upto > MM_B1 ? d[MM_B1] : 1, m1 = upto > MM_M1 ? d[MM_M1] : 1;
  int64_t n1 = upto > MM_N1 ? d[MM_N1] : 1;
  cnt[0] = ceil_div(tlm_task_batch_total(&s->task), (int64_t)d[MM_B3] * d[MM_B2] * b1);
  cnt[1] = ceil_div(t->M, (int64_t)d[MM_M3] * d[MM_M2] * m1);
  cnt[2] = ceil_div(t->N, (int64_t)d[MM_N3] * d[MM_N2] * n1);
}

/* The parallel work a matmul schedule may leave: at least min(threads, the
 * level-0 blocks its level-2 tiles allow) blocks, so no schedule puts a
 * core-sized problem on one core by an outer tile as large as the problem.
 * Such schedules (e.g. 35x4096:4096x1024 with tile_n1 = 2: one block,
 * 4x slower than the rule on 2 cores) never won a verification round
 * and were the largest losses of the session-4 models (models/README.md). */
static int64_t mm_parallel_floor(const tlm_space *s, const int32_t *d) {
  int64_t cnt[3];
  mm_level0_blocks(s, d, MM_N1, cnt);
  int64_t most = cnt[0] * cnt[1] * cnt[2];
  int64_t workers = s->target.threads > 0 ? s->target.threads : 1;
  return most < workers ? most : workers;
}

/* blocks of the first `fused` level-0 loops in their order (b when batched,
 * then m and n as order0 says): the iterations a parallel loop shares out */
static int64_t mm_fused_blocks(const tlm_space *s, const int32_t *d, int fused) {
  int64_t cnt[3];
  mm_level0_blocks(s, d, MM_NPOINTS, cnt);
  int64_t order[3], nl = 0;
  if (tlm_task_batch_total(&s->task) > 1) order[nl++] = cnt[0];
  order[nl++] = d[MM_ORDER0] ? cnt[2] : cnt[1];
  order[nl++] = d[MM_ORDER0] ? cnt[1] : cnt[2];
  int64_t r = 1;
  for (int i = 0; i < fused && i < nl; i++) r *= order[i];
  return r;
}

int tlm_space_candidates(const tlm_space *s, int p, const int32_t *d,
                         int32_t *c) {
  if (tlm_task_is_row(&s->task)) return row_candidates(s, p, d, c);
  if (s->task.kind == TLM_OP_CONV) return conv_candidates(s, p, d, c);
  if (s->task.kind == TLM_OP_POOL) return pool_candidates(s, p, d, c);
  if (s->task.kind == TLM_OP_ATTENTION) return attn_candidates(s, p, d, c);
  const tlm_matmul_task *t = &s->task.u.mm;
  int64_t btot = tlm_task_batch_total(&s->task);
  int n = 0;
  switch (p) {
  case MM_VEC: {
    static const int32_t widths[] = {1, 4, 8, 16};
    for (int i = 0; i < 4; i++)
      if (widths[i] <= s->target.vec_lanes) c[n++] = widths[i];
    if ((t->unit & TLM_UNIT_A_K) && (t->unit & TLM_UNIT_B_K))
      for (int i = 1; i < 4; i++)
        if (widths[i] <= s->target.vec_lanes) c[n++] = TLM_VEC_K + widths[i];
    break;
  }
  case MM_N3: {
    if (tlm_vec_is_k(d[MM_VEC])) { /* columns of dot products */
      for (int32_t j = 1; j <= 8 && j - 1 < t->N; j++) c[n++] = j;
      break;
    }
    int32_t w = d[MM_VEC]; /* multiples of the vector width, whole vectors */
    for (int32_t j = 1; j <= 8 && (int64_t)w * (j - 1) < t->N; j++) c[n++] = w * j;
    break;
  }
  case MM_M3: {
    int32_t nv = tlm_vec_per_row(d[MM_VEC], d[MM_N3]);
    for (int i = 0; i < N_REG_ROWS; i++) {
      int32_t r = k_reg_rows[i];
      if (r > t->M && r > 1) break;
      if ((int64_t)r * nv <= MAX_ACCUMULATORS) c[n++] = r;
    }
    break;
  }
  case MM_B3: {
    int64_t acc = (int64_t)d[MM_M3] * tlm_vec_per_row(d[MM_VEC], d[MM_N3]);
    int m = tile_candidates(btot, 1, c);
    for (int i = 0; i < m; i++)
      if (c[i] * acc <= MAX_ACCUMULATORS || c[i] == 1) c[n++] = c[i];
    break;
  }
  /* K block, and the level-2 blocks below: values up to a fixed size are
   * offered whatever the extent (a block larger than the extent is one
   * block), so a schedule need not change with M, N or K, which are
   * run-time arguments: one kernel serves a growing attention length */
  case MM_K1: {
    /* a K block under 4 (when K has 4 or more) stores and reloads the
     * accumulator tile every 1-3 steps of k: in the measured records such
     * schedules ran at a median of 3x their task's best and never won a
     * verification round (data/README.md), so they are not offered */
    int m = tile_candidates(t->K > 256 ? t->K : 256, 1, c);
    int64_t floor_k = t->K < 4 ? t->K : 4;
    for (int i = 0; i < m; i++)
      if (c[i] >= floor_k) c[n++] = c[i];
    break;
  }
  case MM_UNROLL: {
    static const int32_t u[] = {1, 2, 4, 8};
    for (int i = 0; i < 4; i++)
      if (u[i] <= d[MM_K1]) c[n++] = u[i];
    break;
  }
  case MM_N2: {
    int64_t cap = 512 * (int64_t)d[MM_N3];
    n = tile_candidates(t->N > cap ? t->N : cap, d[MM_N3], c);
    break;
  }
  case MM_M2: {
    n = tile_candidates(t->M > 64 ? t->M : 64, d[MM_M3], c);
    /* and the smallest value that makes one block of all of M, so B can be
     * packed or streamed once (M = 128 at 6 rows: 24, where the values up
     * to ceil(128 / 6) = 22 stop at 20) */
    int64_t one = ceil_div(t->M, d[MM_M3]);
    if (n > 0 && n < N_TILE_VALUES && c[n - 1] < one) c[n] = k_tile_values[n], n++;
    /* and the L3 block (mm_l3_m2), whatever M: one block for every M up
     * to its rows, so those M share one kernel (M is a run-time argument;
     * a block larger than M costs nothing) */
    int64_t l3b = mm_l3_m2(&s->target, d[MM_K1], d[MM_M3]);
    if (n > 0 && n < TLM_MAX_CANDIDATES && c[n - 1] < l3b) c[n++] = (int32_t)l3b;
    break;
  }
  case MM_B2: n = tile_candidates(btot, d[MM_B3], c); break;
  case MM_N1:
  case MM_M1:
  case MM_B1: {
    int m = p == MM_N1   ? tile_candidates(t->N, (int64_t)d[MM_N3] * d[MM_N2], c)
            : p == MM_M1 ? tile_candidates(t->M, (int64_t)d[MM_M3] * d[MM_M2], c)
                         : tile_candidates(btot, (int64_t)d[MM_B3] * d[MM_B2], c);
    int64_t floor_blocks = mm_parallel_floor(s, d);
    int32_t dd[MM_NPOINTS];
    memcpy(dd, d, sizeof(int32_t) * (size_t)p);
    for (int i = 0; i < m; i++) {
      dd[p] = c[i];
      int64_t cnt[3];
      mm_level0_blocks(s, dd, p + 1, cnt);
      if (c[i] == 1 || cnt[0] * cnt[1] * cnt[2] >= floor_blocks) c[n++] = c[i];
    }
    break;
  }
  case MM_ORDER0:
  case MM_ORDER1:
  case MM_ORDER2:
    c[n++] = 0;
    c[n++] = 1;
    break;
  case MM_PACK_B: {
    tlm_schedule tmp;
    memset(&tmp, 0, sizeof tmp);
    memcpy(tmp.v, d, sizeof(int32_t) * MM_PACK_B);
    tmp.v[MM_PACK_B] = 1;
    c[n++] = 0; /* packing makes n panels: not for dot products */
    if (!tlm_vec_is_k(d[MM_VEC]) && tlm_scratch_bytes(&s->task, &tmp) <= MAX_PACK_BYTES)
      c[n++] = 1;
    /* constant B is packed once, ahead (engine/prepack.c): then panels
     * cost nothing per call, and they were never slower (tlm run --vs
     * --const-b on Zen 3 AVX2: 1.05-1.7x from M = 1 to 3136) */
    if (n == 2 && s->task.u.mm.b_const) c[0] = 1, n = 1;
    break;
  }
  case MM_PARALLEL: { /* level-0 loops: b0 (when batched), m0, n0 */
    /* serial, or fused loops sharing at least min(threads, all the level-0
     * blocks) among the threads: a parallel loop of fewer would idle a
     * core for nothing */
    int loops = (btot > 1 ? 1 : 0) + 2;
    int64_t all = mm_fused_blocks(s, d, loops);
    int64_t workers = s->target.threads > 0 ? s->target.threads : 1;
    int64_t want = all < workers ? all : workers;
    c[n++] = 0;
    for (int i = 1; i <= loops; i++)
      if (mm_fused_blocks(s, d, i) >= want) c[n++] = i;
    break;
  }
  case MM_EPILOGUE_AT:
    if (has_epilogue(t)) {
      c[n++] = 0;
      c[n++] = 1;
    }
    c[n++] = 3;
    break;
  default: break;
  }
  return n;
}

void tlm_points_walk(const void *space, int npoints, tlm_point_cands cands, tlm_point_choose choose,
                     void *ctx, tlm_schedule *out) {
  int32_t c[TLM_MAX_CANDIDATES];
  memset(out, 0, sizeof *out);
  out->n = npoints;
  for (int p = 0; p < npoints; p++) {
    int n = cands(space, p, out->v, c);
    int i = n > 1 ? choose(ctx, space, p, out->v, c, n) : 0;
    if (i < 0 || i >= n) i = 0;
    out->v[p] = c[i];
  }
}

int tlm_points_accepts(const void *space, int npoints, tlm_point_cands cands,
                       const tlm_schedule *sched) {
  int32_t c[TLM_MAX_CANDIDATES];
  if (sched->n != npoints) return 0;
  for (int p = 0; p < npoints; p++) {
    int n = cands(space, p, sched->v, c), ok = 0;
    for (int i = 0; i < n; i++) ok |= c[i] == sched->v[p];
    if (!ok) return 0;
  }
  return 1;
}

int tlm_choose_uniform(void *ctx, const void *space, int p, const int32_t *d, const int32_t *c,
                       int n) {
  (void)space, (void)p, (void)d, (void)c;
  return (int)(tlm_rng_next((uint64_t *)ctx) % (uint64_t)n);
}

static int cpu_cands(const void *s, int p, const int32_t *d, int32_t *c) {
  return tlm_space_candidates(s, p, d, c);
}

/* a tlm_chooser (typed by tlm_space) behind the generic walker */
typedef struct cpu_chooser {
  tlm_chooser choose;
  void *ctx;
} cpu_chooser;

static int cpu_choose(void *ctx, const void *s, int p, const int32_t *d, const int32_t *c, int n) {
  const cpu_chooser *x = ctx;
  return x->choose(x->ctx, s, p, d, c, n);
}

void tlm_space_walk(const tlm_space *s, tlm_chooser choose, void *ctx,
                    tlm_schedule *out) {
  cpu_chooser x = {choose, ctx};
  tlm_points_walk(s, s->npoints, cpu_cands, cpu_choose, &x, out);
}

int tlm_space_accepts(const tlm_space *s, const tlm_schedule *sched) {
  return tlm_points_accepts(s, s->npoints, cpu_cands, sched);
}

void tlm_space_sample(const tlm_space *s, uint64_t *rng, tlm_schedule *out) {
  tlm_points_walk(s, s->npoints, cpu_cands, tlm_choose_uniform, rng, out);
}

/* Index of the largest candidate <= want (the smallest if none is). */
static int pick_at_most(const int32_t *c, int n, int64_t want) {
  int best = 0;
  for (int i = 0; i < n; i++)
    if (c[i] <= want) best = i;
  return best;
}

/* largest power of two <= x (x >= 1) */
static int64_t pow2_floor(int64_t x) {
  int64_t p = 1;
  while (p * 2 <= x) p *= 2;
  return p;
}

/* The register tile of an outer-product micro-kernel (BLIS's analysis:
 * Low, Igual, Smith and Quintana-Orti, "Analytical modeling is enough for
 * high-performance BLIS", ACM TOMS 2016): `rows` broadcast operands times
 * `nv` vectors of the other operand make rows * nv vector accumulators.
 * Everything here is read from the target:
 *   registers: rows * nv accumulators + nv reused vectors (1 with a single
 *     row: nothing is reused) + 1 broadcast <= vec_regs;
 *   latency: at least fma_chains accumulators (FMA latency x vector FMAs
 *     issued per cycle) when the rows allow it;
 *   among those, the fewest loads per FMA, (rows + nv) / (rows * nv), then
 *   the most accumulators.
 * nv is a power of two, so a full tile's columns (nv * lanes) divide the
 * power-of-two extents of most models and leave no tail. With 32 registers
 * this gives 6 rows x 4 vectors, with 16 registers 6 x 2 (BLIS's Haswell
 * sgemm kernel is 6 x 16 floats); fewer rows when M is smaller. A negative
 * max_nv fixes nv at -max_nv (any count) and picks the rows only. */
typedef struct reg_tile_pick {
  int rows, nv, ok; /* ok: at least fma_chains accumulators */
  double cost;      /* loads per FMA */
} reg_tile_pick;

/* the rows for nv vectors, into *best when better than it */
static void reg_tile_rows(const tlm_target *tg, int64_t max_rows, int v, reg_tile_pick *best) {
  int regs = tg->vec_regs > 0 ? tg->vec_regs : 16, chains = tg->fma_chains > 0 ? tg->fma_chains : 1;
  for (int i = 0; i < N_REG_ROWS; i++) {
    int r = k_reg_rows[i];
    if (r > 1 && r > max_rows) break;
    if (r * v + (r > 1 ? v : 1) + 1 > regs) break;
    reg_tile_pick p = {r, v, r * v >= chains, (double)(r + v) / (double)(r * v)};
    int better = p.ok != best->ok       ? p.ok > best->ok
                 : p.cost != best->cost ? p.cost < best->cost
                                        : r * v > best->rows * best->nv;
    if (better) *best = p;
  }
}

void tlm_reg_tile(const tlm_target *tg, int64_t max_rows, int max_nv, int *rows_out,
                  int *nv_out) {
  reg_tile_pick best = {1, 1, 0, 1e30};
  if (max_nv < 0)
    reg_tile_rows(tg, max_rows, -max_nv, &best);
  else
    for (int v = 1; v <= max_nv && v <= 8; v *= 2) reg_tile_rows(tg, max_rows, v, &best);
  *rows_out = best.rows;
  *nv_out = best.nv;
}

/* 1 when the rule's register tile (decided up to MM_M3) covers all of M
 * and B is read row-wise: nothing reuses B, the kernel streams it. */
static int mm_streams_b(const tlm_matmul_task *t, const int32_t *d) {
  return !tlm_vec_is_k(d[MM_VEC]) && (t->unit & TLM_UNIT_B_N) && t->M <= d[MM_M3];
}

/* The rule's level-2 rows: every row of the block reuses the B block (k1 x
 * n2*n3, packed or streamed from L2), so the more rows the cheaper B is per
 * FMA; the A block (rows x k1) takes at most a quarter of L2 beside B's
 * half. mm_rule_m2 counts them in tiles of m3 rows, a power of two so that
 * nearby M share it. */
static int64_t mm_rule_rows(const tlm_target *tg, int64_t k1) {
  int64_t l2 = tg->l2_bytes > 0 ? tg->l2_bytes : 256 * 1024;
  return l2 / 4 / (k1 * 4);
}
static int64_t mm_rule_m2(const tlm_target *tg, int64_t k1, int64_t m3) {
  int64_t m2 = mm_rule_rows(tg, k1) / (m3 > 0 ? m3 : 1);
  return pow2_floor(m2 < 1 ? 1 : m2);
}
/* The L3 block of M for packed B: each block of M packs every B block again
 * (the pack sits under the level-1 loops), so fewer, taller blocks pack B
 * fewer times, as BLIS packs B once per (n, k) block outside its loop over
 * M. The A block (rows x k1) then streams from L3, in half of this core's
 * share of it (A's micro-panel, m3 x k1, stays in L1 across B's panels
 * either way). In tiles of m3 rows, a power of two, at most 4096; it does
 * not depend on M, so every M up to its rows shares one kernel. */
static int64_t mm_l3_m2(const tlm_target *tg, int64_t k1, int64_t m3) {
  int64_t share = tg->l3_bytes / (tg->l3_sharing > 0 ? tg->l3_sharing : 1);
  int64_t m2 = share / 2 / (k1 * 4) / (m3 > 0 ? m3 : 1);
  m2 = pow2_floor(m2 < 1 ? 1 : m2);
  return m2 > 4096 ? 4096 : m2;
}

/* The rule's B packing (MM_PACK_B, decided from the register tile alone).
 * Pack B into contiguous panels when its rows are not unit-stride
 * (gathers become vector loads: 128x768:768x768 with B transposed, 9 ->
 * 69 GFLOPS), or when an unpacked micro-panel row is under two cache
 * lines while at most two consecutive k rows share a page: then every
 * k step fetches one lone line, which the paired-line (128-byte)
 * prefetcher cannot cover and the in-page stride prefetchers of x86
 * cores do not learn (they train on three or more accesses within one
 * 4 KiB page). Measured at 6 x 16 on AVX2 (Zen 3, tlm run --vs, packed
 * over unpacked): 512x768:768x3072 63 -> 86-108 GFLOPS; N = 768 (3 KiB
 * rows) 1.22-1.35x at M = 32 and 128; N = 512 1.16x; N = 384 (2.7 rows
 * a page) and N = 256 even. Wider rows (6 x 64 with AVX-512) stream
 * well unpacked, and packing then only costs (213 -> 187). Only when
 * the packed block is reused by more than two register tiles of rows. */
static int mm_rule_packs_b(const tlm_target *tg, const tlm_matmul_task *t, const int32_t *d) {
  const int64_t line = 64, page = 4096; /* x86-64 */
  int64_t row_bytes = (int64_t)d[MM_N3] * 4, stride_bytes = t->sb[4] * 4;
  int64_t m3 = d[MM_M3]; /* t->M > r * m3: more than r register tiles of rows reuse the pack */
  if (!(t->unit & TLM_UNIT_B_N)) return t->M > 2 * m3;
  /* Rows further apart than the L1 stride prefetcher follows
   * (tlm_target.pf_stride_bytes: 2 KiB on Intel cores) are demand
   * misses whatever the row's width, so wide AVX-512 rows are packed too.
   * A stride of two pages or more puts every k step in a page no
   * prefetcher has touched: packing pays from the lone-line reuse on;
   * between the reach and two pages the streamers still see two rows a
   * page, and packing pays only over more register tiles. Measured on an
   * Intel Xeon (family 6, AVX-512 6 x 64 tiles, tlm run --vs, packed over
   * unpacked): N = 3072 (12 KiB rows) 1.5x at M = 24, 1.8x at 32-48, 3.1x
   * at 512; N = 2048 and 4096 at M = 128 1.47x and 1.65x; N = 768 and
   * 1024 (3-4 KiB) 0.81-0.97x at M = 24-48, 1.0 at 64, 1.12-1.18x at 128.
   * Under AVX2 (6 x 16) on the same core, N = 768 and 1024 ran 1.01-1.25x
   * faster unpacked at M = 24-64, against the lone-line test below, which
   * was measured on a Zen 3 (whose prefetcher names no reach). */
  if (tg->pf_stride_bytes > 0 && stride_bytes > tg->pf_stride_bytes)
    return t->M > (stride_bytes >= 2 * page ? 2 : 8) * m3;
  int lone_lines = row_bytes < 2 * line && 2 * stride_bytes >= page;
  return lone_lines && t->M > 2 * m3;
}

/* The rule picks powers of two for the block counts and the K block, so
 * nearby extents (a growing attention length, similar prompt lengths) get
 * the same decisions and share one kernel: M, N and K are run-time
 * arguments, a kernel serves any extent. */
static int choose_default(void *ctx, const tlm_space *s, int p,
                          const int32_t *d, const int32_t *c, int n) {
  (void)ctx;
  if (tlm_task_is_row(&s->task)) return row_default(s, p, d, c, n);
  if (s->task.kind == TLM_OP_CONV) return conv_default(s, p, d, c, n);
  if (s->task.kind == TLM_OP_POOL) return pool_default(s, p, d, c, n);
  if (s->task.kind == TLM_OP_ATTENTION) return attn_default(s, p, d, c, n);
  const tlm_matmul_task *t = &s->task.u.mm;
  const tlm_target *tg = &s->target;
  int64_t l2 = tg->l2_bytes > 0 ? tg->l2_bytes : 512 * 1024;
  int workers = tg->threads > 0 ? tg->threads : 1;
  int64_t btot = tlm_task_batch_total(&s->task);
  int kmode = (t->unit & TLM_UNIT_A_K) && (t->unit & TLM_UNIT_B_K) &&
              !(t->unit & TLM_UNIT_B_N) && t->M < 8 && t->K >= 16;
  switch (p) {
  case MM_VEC: {
    /* dot products along k for small M when B is stored (N, K): the outer
     * product form would gather B (measured 1x768:768x768 transposed B) */
    int32_t want = kmode ? TLM_VEC_K + tg->vec_lanes : tg->vec_lanes;
    for (int i = 0; i < n; i++)
      if (c[i] == want) return i;
    return 0;
  }
  case MM_N3: {
    if (tlm_vec_is_k(d[MM_VEC])) return pick_at_most(c, n, 4);
    int rows, nv;
    /* constant B: the width of the many-row tile for every M, so decode and
     * prefill read one packed copy (its layout is the panel width and the K
     * block); a narrow matrix-vector tile keeps its FMA chains with
     * accumulator sets (codegen), measured as fast (tlm run --vs, Zen 3) */
    tlm_reg_tile(tg, t->b_const ? (int64_t)1 << 30 : t->M, 8, &rows, &nv);
    return pick_at_most(c, n, (int64_t)nv * d[MM_VEC]);
  }
  case MM_M3: {
    int64_t nv = tlm_vec_per_row(d[MM_VEC], d[MM_N3]);
    if (tlm_vec_is_k(d[MM_VEC])) { /* dot products: 16 accumulators (unchanged) */
      int64_t rows = 16 / nv, fit = (tg->vec_regs - nv - 1) / nv;
      if (rows > fit) rows = fit;
      return pick_at_most(c, n, rows < 1 ? 1 : rows);
    }
    int rows, same_nv;
    tlm_reg_tile(tg, t->M, -(int)nv, &rows, &same_nv);
    return pick_at_most(c, n, rows);
  }
  case MM_B3: return 0;
  case MM_K1:
    /* One register tile holds every row (decode, GEMV): B is read once and
     * reused by nothing, so the kernel is a stream of B. Short K blocks
     * with the level-2 block across N (below) read B's rows whole, k1 rows
     * at a time, as the prefetchers like; the accumulators' reload every
     * 16 steps costs 2 L1 accesses per 16 B loads. Not when one tile spans
     * all of N (N <= n3, e.g. MobileNet's 1024 -> 5 classifier): there is
     * no row to read whole, and each K block would only reload the tile
     * (1.46x slower at 1x1024:1024x5 by tlm run --vs, Zen 3). Otherwise a
     * K block of 256 keeps the A micro-panel (m3 x k1) in L1. */
    return pick_at_most(c, n, mm_streams_b(t, d) && t->N > d[MM_N3] && !t->b_const ? 16 : 256);
  case MM_UNROLL: return pick_at_most(c, n, 4);
  case MM_N2: {
    /* B block (k1 x n2*n3) in half of L2; enough n blocks for all cores
     * when m offers little parallelism */
    int64_t nb = l2 / 2 / ((int64_t)d[MM_K1] * d[MM_N3] * 4);
    if (mm_streams_b(t, d) && !t->b_const) { /* the C block (n2 x n3) in half of L1 */
      int64_t l1 = tg->l1d_bytes > 0 ? tg->l1d_bytes : 32 * 1024;
      nb = l1 / 2 / ((int64_t)d[MM_N3] * 4);
    }
    int64_t mrows = mm_rule_m2(tg, d[MM_K1], d[MM_M3]) * d[MM_M3];
    int64_t mtiles = (t->M + mrows - 1) / mrows;
    if (workers > 1 && mtiles * btot < 2 * workers) {
      int64_t per = (t->N + (int64_t)d[MM_N3] * 2 * workers - 1) /
                    ((int64_t)d[MM_N3] * 2 * workers);
      if (per < nb) nb = per;
    }
    return pick_at_most(c, n, pow2_floor(nb < 1 ? 1 : nb));
  }
  case MM_M2: {
    /* one block of all of M when it fits the bound: B is then packed (or
     * streamed from memory) once instead of once per block */
    /* the largest value of the list before the space appended the L3
     * block: it spans max(M, 64) rows, so every small M shares it (a
     * value sized to each M made a kernel per M) */
    int64_t l3b = mm_l3_m2(tg, d[MM_K1], d[MM_M3]);
    int last = n > 1 && c[n - 1] == l3b ? n - 2 : n - 1;
    int64_t rows = (int64_t)c[last] * d[MM_M3];
    if (rows >= t->M && rows <= mm_rule_rows(tg, d[MM_K1])) return last;
    /* When B will be packed: the L3 block (mm_l3_m2), B packed once per
     * block of up to its rows. Measured on Zen 3 AVX2 (6 x 16 tiles, tlm
     * run --vs, one block of M over blocks of 96 rows): 128x4096:4096x4096
     * 1.09-1.16x, 512x768:768x3072 1.16x. */
    if (mm_rule_packs_b(tg, t, d) && l3b > mm_rule_m2(tg, d[MM_K1], d[MM_M3])) {
      /* the threads share N's blocks (and batches): at least 7/8 of them
       * busy in every round (blocks / (threads * rounds)); M's blocks are
       * left out, so the choice, and the kernel, is the same for every M */
      int64_t blocks = ceil_div(t->N, (int64_t)d[MM_N3] * d[MM_N2]) * btot;
      int64_t rounds = ceil_div(blocks, workers);
      if (8 * blocks >= 7 * workers * rounds) return pick_at_most(c, n, l3b);
    }
    return pick_at_most(c, n, mm_rule_m2(tg, d[MM_K1], d[MM_M3]));
  }
  case MM_N1: {
    /* More than one worker and all of M in one block (no batch): the
     * parallel loop is N's, and the pool hands out its iterations in
     * dynamic chunks of one block each when there are few of them
     * (runtime/threadpool.c: up to 4 chunks a thread), so one worker's
     * blocks lie apart in B and every block is a claim. Level-0 blocks of
     * several level-1 blocks instead, about one per worker: each worker
     * reads one contiguous range of B's columns. Of the candidates, the one
     * whose busiest worker has the fewest level-1 blocks (then the larger).
     * Measured in tlm adapt's side-by-side rounds (Zen 5 VM, 2 threads,
     * AVX-512, rule 7 against its one-block chunks): 1.05-1.23x on 7-60-row
     * GPT-2, BERT and Llama layers (N = 768, 3072 and 4096). */
    if (workers <= 1 || btot > 1 || t->M > (int64_t)d[MM_M3] * d[MM_M2]) return 0;
    int64_t nb = ceil_div(t->N, (int64_t)d[MM_N3] * d[MM_N2]);
    if (nb <= workers) return 0;
    int best = 0;
    int64_t best_load = nb; /* c[0] = 1: blocks of one */
    for (int i = 0; i < n; i++) {
      int64_t blocks = ceil_div(nb, c[i]), load = ceil_div(blocks, workers) * c[i];
      if (load > nb) load = nb;
      if (load < best_load || (load == best_load && c[i] > c[best])) best = i, best_load = load;
    }
    return best;
  }
  case MM_B2:
  case MM_M1:
  case MM_B1: return 0;
  case MM_ORDER0: {
    int64_t mb = (t->M + (int64_t)d[MM_M3] * d[MM_M2] - 1) / ((int64_t)d[MM_M3] * d[MM_M2]);
    int64_t nb = (t->N + (int64_t)d[MM_N3] * d[MM_N2] - 1) / ((int64_t)d[MM_N3] * d[MM_N2]);
    return nb > mb ? 1 : 0;
  }
  case MM_ORDER1: return 0;
  case MM_ORDER2: return 0; /* m outer: the A micro-panel stays in L1 */
  case MM_PACK_B: return mm_rule_packs_b(tg, t, d) && n > 1 ? 1 : 0;
  case MM_PARALLEL: {
    if (workers == 1) return 0;
    int64_t mb = (t->M + (int64_t)d[MM_M3] * d[MM_M2] - 1) / ((int64_t)d[MM_M3] * d[MM_M2]);
    int64_t nb = (t->N + (int64_t)d[MM_N3] * d[MM_N2] - 1) / ((int64_t)d[MM_N3] * d[MM_N2]);
    int64_t first = d[MM_ORDER0] ? nb : mb;
    int want = (btot > 1 ? 1 : 0);
    if (btot < 2 * workers) want += (btot * first >= 2 * workers) ? 1 : 2;
    /* the fewest fused loops the space offers from `want` on */
    for (int i = 0; i < n; i++)
      if (c[i] >= want) return i;
    return n - 1;
  }
  case MM_EPILOGUE_AT: return n - 1; /* in registers */
  default: return 0;
  }
}

void tlm_space_default(const tlm_space *s, tlm_schedule *out) {
  tlm_space_walk(s, choose_default, NULL, out);
}

char *tlm_points_str(const tlm_point *points, int npoints, const tlm_schedule *sched, char *buf,
                     int cap) {
  int len = 0;
  buf[0] = 0;
  for (int p = 0; p < npoints && len < cap; p++)
    len += snprintf(buf + len, (size_t)(cap - len), "%s%s=%d", p ? " " : "", points[p].name,
                    sched->v[p]);
  return buf;
}

char *tlm_schedule_str(const tlm_space *s, const tlm_schedule *sched, char *buf,
                       int cap) {
  return tlm_points_str(s->points, s->npoints, sched, buf, cap);
}

int tlm_points_parse(const tlm_point *points, int npoints, const char *text, tlm_schedule *out,
                     char *err, int errcap) {
  int seen[TLM_MAX_POINTS] = {0};
  memset(out, 0, sizeof *out);
  out->n = npoints;
  const char *q = text;
  while (*q) {
    while (*q == ' ' || *q == ',') q++;
    if (!*q) break;
    const char *eq = strchr(q, '=');
    if (!eq) {
      snprintf(err, (size_t)errcap, "expected name=value at '%s'", q);
      return -1;
    }
    int p = -1;
    for (int i = 0; i < npoints; i++)
      if ((size_t)(eq - q) == strlen(points[i].name) &&
          strncmp(q, points[i].name, (size_t)(eq - q)) == 0)
        p = i;
    if (p < 0) {
      snprintf(err, (size_t)errcap, "unknown decision '%.*s'", (int)(eq - q), q);
      return -1;
    }
    char *end;
    long v = strtol(eq + 1, &end, 10);
    if (end == eq + 1 || v < 0 || v > 1 << 20) {
      snprintf(err, (size_t)errcap, "bad value for %s", points[p].name);
      return -1;
    }
    out->v[p] = (int32_t)v;
    seen[p] = 1;
    q = end;
  }
  for (int i = 0; i < npoints; i++)
    if (!seen[i]) {
      snprintf(err, (size_t)errcap, "decision '%s' missing", points[i].name);
      return -1;
    }
  return 0;
}

int tlm_schedule_parse(const tlm_space *s, const char *text, tlm_schedule *out,
                       char *err, int errcap) {
  if (tlm_points_parse(s->points, s->npoints, text, out, err, errcap)) return -1;
  if (!tlm_space_accepts(s, out)) {
    snprintf(err, (size_t)errcap, "schedule is not in this task's space");
    return -1;
  }
  return 0;
}

/* ---- row-wise operators ------------------------------------------------------------ */

static int row_candidates(const tlm_space *s, int p, const int32_t *d, int32_t *c) {
  const tlm_row_task *t = &s->task.u.row;
  int n = 0;
  (void)d;
  switch (p) {
  case ROW_VEC: {
    static const int32_t widths[] = {1, 4, 8, 16};
    for (int i = 0; i < 4; i++)
      if (widths[i] <= s->target.vec_lanes) c[n++] = widths[i];
    break;
  }
  case ROW_UNROLL: {
    static const int32_t u[] = {1, 2, 4};
    for (int i = 0; i < 3; i++) c[n++] = u[i];
    break;
  }
  /* up to 16 rows per block whatever the row count, so the rule's choice
   * (and the kernel) need not depend on it */
  case ROW_TILE: n = tile_candidates(t->rows > 16 ? t->rows : 16, 1, c); break;
  case ROW_PARALLEL:
    c[n++] = 0;
    c[n++] = 1;
    break;
  default: break;
  }
  return n;
}

static int row_default(const tlm_space *s, int p, const int32_t *d, const int32_t *c, int n) {
  const tlm_row_task *t = &s->task.u.row;
  int workers = s->target.threads > 0 ? s->target.threads : 1;
  (void)d;
  switch (p) {
  case ROW_VEC: return n - 1;
  case ROW_UNROLL: return 1; /* two accumulators: any length, one kernel */
  case ROW_TILE: return pick_at_most(c, n, 4); /* blocks of 4 rows, claimed dynamically */
  case ROW_PARALLEL: return workers > 1 && t->rows > 1 ? 1 : 0;
  default: return 0;
  }
}

/* ---- convolution ---------------------------------------------------------------- */

int tlm_rule_family_version(const tlm_task *task) {
  const tlm_conv_task *t = &task->u.conv;
  if (task->kind == TLM_OP_CONV && t->G > 1 && t->ICg == 1 && t->OCg == 1) return 3;
  if (task->kind == TLM_OP_MATMUL) return 8;
  if (task->kind == TLM_OP_ATTENTION) return 9;
  return 2;
}

#define CONV_MAX_ACC 32 /* vector accumulators of a conv register tile */

void tlm_conv_tile_dims(const tlm_task *task, const int32_t *v, int64_t *c_t, int64_t *w_t,
                        int64_t *c_ext) {
  const tlm_conv_task *t = &task->u.conv;
  int axis = v[CV_AXIS];
  *c_ext = axis == 2 ? t->G : t->OCg;
  *c_t = axis == 1 ? v[CV_ROWS] : v[CV_TILE_V];
  *w_t = axis == 1 ? v[CV_TILE_V] : v[CV_ROWS];
}

/* rows of the kernel's outer loop: (n, other, od) when the tile rows run
 * over the flattened (oh, ow) plane (lane axes oc and g), (n, other, od,
 * oh) when the lanes run along ow; and the extent of the w axis */
static int conv_flat(const tlm_conv_task *t, int axis) {
  return axis != 1 || (t->unit & TLM_UNIT_CONV_PLANE); /* lanes over the dense pixel plane */
}
static int64_t conv_rows_total(const tlm_conv_task *t, int axis) {
  int64_t r = t->N * (axis == 2 ? t->OCg : t->G) * t->OD;
  return conv_flat(t, axis) ? r : r * t->OH;
}
static int64_t conv_wext(const tlm_conv_task *t, int axis) {
  return conv_flat(t, axis) ? t->OH * t->OW : t->OW;
}

int64_t tlm_conv_parallel_count(const tlm_task *task, const int32_t *v) {
  const tlm_conv_task *t = &task->u.conv;
  int64_t c_t, w_t, c_ext;
  tlm_conv_tile_dims(task, v, &c_t, &w_t, &c_ext);
  int64_t ncb = ceil_div(c_ext, c_t * v[CV_TILE_C2]);
  int64_t nwb = ceil_div(conv_wext(t, v[CV_AXIS]), w_t * v[CV_TILE_W2]);
  int64_t rows = conv_rows_total(t, v[CV_AXIS]);
  switch (v[CV_PARALLEL]) {
  case 1: return rows * nwb;
  case 2: return ncb * rows * nwb;
  default: return 1;
  }
}

/* extent the vector lanes span, and the tile rows' extent */
static void conv_axis_extents(const tlm_conv_task *t, int axis, int64_t *vext, int64_t *rext) {
  *vext = axis == 0 ? t->OCg : axis == 1 ? conv_wext(t, 1) : t->G;
  *rext = axis == 1 ? t->OCg : conv_wext(t, axis);
}

static int conv_candidates(const tlm_space *s, int p, const int32_t *d, int32_t *c) {
  const tlm_conv_task *t = &s->task.u.conv;
  int n = 0;
  int64_t vext = 1, rext = 1;
  if (p > CV_AXIS) conv_axis_extents(t, d[CV_AXIS], &vext, &rext);
  switch (p) {
  case CV_AXIS:
    c[n++] = 0;
    c[n++] = 1;
    if (t->G > 1) c[n++] = 2;
    break;
  case CV_VEC: {
    static const int32_t widths[] = {1, 4, 8, 16};
    for (int i = 0; i < 4; i++)
      if (widths[i] <= s->target.vec_lanes) c[n++] = widths[i];
    break;
  }
  case CV_TILE_V: /* whole vectors, 1..4 of them */
    for (int32_t j = 1; j <= 4 && (int64_t)d[CV_VEC] * (j - 1) < vext; j++) c[n++] = d[CV_VEC] * j;
    break;
  case CV_ROWS: {
    int32_t nv = d[CV_TILE_V] / d[CV_VEC];
    for (int i = 0; i < N_REG_ROWS; i++) {
      int32_t r = k_reg_rows[i];
      if ((int64_t)r * nv > CONV_MAX_ACC || (r > 1 && k_reg_rows[i - 1] >= rext)) break;
      c[n++] = r;
    }
    break;
  }
  case CV_UNROLL: {
    static const int32_t u[] = {1, 2, 4, 8};
    for (int i = 0; i < 4; i++) c[n++] = u[i];
    break;
  }
  case CV_RED_ORDER:
  case CV_ORDER:
    c[n++] = 0;
    c[n++] = 1;
    break;
  case CV_TILE_C2:
  case CV_TILE_W2: {
    int64_t c_t, w_t, c_ext;
    tlm_conv_tile_dims(&s->task, d, &c_t, &w_t, &c_ext);
    int64_t ext = p == CV_TILE_C2 ? c_ext : conv_wext(t, d[CV_AXIS]);
    int64_t inner = p == CV_TILE_C2 ? c_t : w_t;
    /* ow blocks: at least the values up to 64 whatever the image width,
     * so one schedule (and kernel) can serve every image size */
    if (p == CV_TILE_W2 && ext < 64 * inner) ext = 64 * inner;
    n = tile_candidates(ext, inner, c);
    /* and the smallest value that makes one block of the whole extent */
    if (n < N_TILE_VALUES && (n == 0 || c[n - 1] < ceil_div(ext, inner))) {
      c[n] = k_tile_values[n];
      n++;
    }
    break;
  }
  case CV_PARALLEL:
    c[n++] = 0;
    c[n++] = 1;
    c[n++] = 2;
    break;
  default: break;
  }
  return n;
}

static int pick_value(const int32_t *c, int n, int32_t want) {
  for (int i = 0; i < n; i++)
    if (c[i] == want) return i;
  return 0;
}

/* The rule: lanes along the axis that is unit-stride in dst (channels for
 * NHWC, ow for NCHW, groups for NHWC depthwise), the full vector width,
 * the register tile of tlm_reg_tile (6 x 4 vectors on 32 registers, 6 x 2
 * on 16), the C block sized so its weights stay in half of
 * L2, whole rows of ow per block, and rows (or rows x C blocks) in
 * parallel. */
static int conv_default(const tlm_space *s, int p, const int32_t *d, const int32_t *c, int n) {
  const tlm_conv_task *t = &s->task.u.conv;
  const tlm_target *tg = &s->target;
  int workers = tg->threads > 0 ? tg->threads : 1;
  int64_t l2 = tg->l2_bytes > 0 ? tg->l2_bytes : 512 * 1024;
  int64_t vext = 1, rext = 1;
  if (p > CV_AXIS) conv_axis_extents(t, d[CV_AXIS], &vext, &rext);
  switch (p) {
  case CV_AXIS: {
    int dw = t->G > 1 && t->OCg == 1 && t->ICg == 1;
    int want = 0;
    if (dw) want = (t->unit & TLM_UNIT_CONV_DST_C) ? 2 : 1;
    else if (!(t->unit & TLM_UNIT_CONV_DST_C) && (t->unit & TLM_UNIT_CONV_DST_W)) want = 1;
    return pick_value(c, n, want);
  }
  case CV_VEC: return n - 1;
  case CV_TILE_V: {
    /* the register tile as for matmul (tlm_reg_tile): a broadcast (src
     * value, weight, or for depthwise a src vector) times nv vectors reused
     * across the tile's rows, from the register file and FMA chains */
    int64_t most = ceil_div(vext, d[CV_VEC]);
    if (most > 4) most = 4;
    /* depthwise: every FMA loads its own src vector, whatever the tile, so
     * nothing is saved by a square tile; the widest channel block (4
     * vectors, the most contiguous src reads per pixel) */
    if (d[CV_AXIS] == 2) return pick_at_most(c, n, most * d[CV_VEC]);
    int rows, nv;
    tlm_reg_tile(tg, rext, (int)most, &rows, &nv);
    return pick_at_most(c, n, (int64_t)nv * d[CV_VEC]);
  }
  case CV_ROWS: {
    int rows, nv = d[CV_TILE_V] / d[CV_VEC];
    int64_t wvecs = (int64_t)nv * t->KD * t->KH * t->KW;
    int chains = tg->fma_chains > 0 ? tg->fma_chains : 1;
    if (d[CV_AXIS] == 2 && wvecs + (int64_t)nv * ((chains + nv - 1) / nv) + 1 <= tg->vec_regs) {
      /* depthwise whose window of weight vectors fits beside the
       * accumulators: the weights stay in registers across the tile's
       * pixels, the rest of the register file holds rows (MobileNet's
       * 32-channel 3x3 on AVX-512: 6 rows of 2 vectors + 18 weights) */
      int64_t fit = (tg->vec_regs - wvecs - 1) / nv;
      return pick_at_most(c, n, fit < rext ? fit : rext);
    }
    if (d[CV_AXIS] == 2) {
      /* depthwise, weights reloaded per tile: half the register file for
       * accumulators, the other half for the NV weight vectors of a kernel
       * column and the src vectors that neighbouring rows share across
       * kernel columns (R + KW - 1 of them per kernel row, not R x KW) */
      int64_t r = tg->vec_regs / 2 / nv;
      return pick_at_most(c, n, r < 1 ? 1 : r);
    }
    tlm_reg_tile(tg, rext, -nv, &rows, &nv);
    return pick_at_most(c, n, rows);
  }
  case CV_UNROLL: {
    /* the inner loop's trip count under the red_order the rule picks next;
     * an unroll that does not divide it leaves a remainder loop, measured
     * 2.5x slower on MobileNet's IC=3 stem (3 = 2 + 1): the largest of 4, 2,
     * 1 that divides the trip count */
    int64_t trip = t->ICg >= 4 || t->KW == 1 ? t->ICg : t->KW;
    int64_t u = trip % 4 == 0 ? 4 : trip % 2 == 0 ? 2 : 1;
    return pick_at_most(c, n, u);
  }
  case CV_RED_ORDER: return t->ICg >= 4 || t->KW == 1 ? 0 : 1;
  case CV_TILE_C2: {
    int64_t c_t, w_t, c_ext;
    tlm_conv_tile_dims(&s->task, d, &c_t, &w_t, &c_ext);
    int64_t per_c = (int64_t)t->ICg * t->KD * t->KH * t->KW * 4; /* weight bytes per channel */
    if (d[CV_AXIS] == 2) per_c *= t->OCg;
    int64_t fit = (l2 / 2) / (per_c * c_t);
    return pick_at_most(c, n, fit < 1 ? 1 : pow2_floor(fit));
  }
  case CV_TILE_W2:
    /* lanes along ow: whole output rows; tile rows over the pixel plane:
     * blocks of 8 tiles, enough blocks to share among the cores at any
     * image size, and a choice that does not depend on it */
    return conv_flat(t, d[CV_AXIS]) ? pick_at_most(c, n, 8) : n - 1;
  case CV_ORDER: return 0;
  case CV_PARALLEL: {
    if (workers == 1) return 0;
    double flops = 2.0 * (double)t->N * t->G * t->OCg * t->ICg * t->KD * t->KH * t->KW *
                   (double)(t->OD * t->OH * t->OW);
    if (flops < 2e5) return 0;
    /* rows x C blocks, C-block major; with one C block the same as rows
     * alone, and a choice that does not depend on the image size */
    return 2;
  }
  default: return 0;
  }
}

/* ---- pooling -------------------------------------------------------------------- */

static int pool_candidates(const tlm_space *s, int p, const int32_t *d, int32_t *c) {
  int n = 0;
  (void)d;
  switch (p) {
  case PL_VEC: {
    static const int32_t widths[] = {1, 4, 8, 16};
    for (int i = 0; i < 4; i++)
      if (widths[i] <= s->target.vec_lanes) c[n++] = widths[i];
    break;
  }
  case PL_UNROLL: {
    static const int32_t u[] = {1, 2, 4};
    for (int i = 0; i < 3; i++) c[n++] = u[i];
    break;
  }
  case PL_PARALLEL:
    c[n++] = 0;
    c[n++] = 1;
    break;
  default: break;
  }
  return n;
}

static int pool_default(const tlm_space *s, int p, const int32_t *d, const int32_t *c, int n) {
  const tlm_pool_task *t = &s->task.u.pool;
  int workers = s->target.threads > 0 ? s->target.threads : 1;
  (void)c;
  switch (p) {
  case PL_VEC: return n - 1;
  case PL_UNROLL: return t->C >= 4 * (int64_t)d[PL_VEC] ? 2 : t->C >= 2 * (int64_t)d[PL_VEC] ? 1 : 0;
  case PL_PARALLEL: return workers > 1 && t->N * t->OD * t->OH > 1 ? 1 : 0;
  default: return 0;
  }
}

/* ---- fused attention ------------------------------------------------------------ */

/* vectors of w lanes covering n (the last one masked) */
static int64_t att_vecs(int64_t n, int64_t w) { return (n + w - 1) / w; }

static int attn_candidates(const tlm_space *s, int p, const int32_t *d, int32_t *c) {
  const tlm_attn_task *t = &s->task.u.attn;
  int n = 0;
  switch (p) {
  case ATT_VEC: {
    static const int32_t widths[] = {1, 4, 8, 16};
    for (int i = 0; i < 4; i++)
      if (widths[i] <= s->target.vec_lanes) c[n++] = widths[i];
    break;
  }
  case ATT_QBLOCK: {
    /* register tiles: accumulators (q rows x Dv vectors) of at most 64
     * vectors; tiles in L1 (16, 32 or 64 rows, at most 16 vectors; their
     * accumulators and transposed Q at most 64 KiB each, in the thread's
     * scratch buffer) where a K/V head serves that many rows (a prefill) */
    static const int32_t q[] = {1, 2, 4, 8}, ql1[] = {16, 32, 64};
    for (int i = 0; i < 4; i++)
      if (q[i] * att_vecs(t->Dv, d[ATT_VEC]) <= 64) c[n++] = q[i];
    if (n == 0) c[n++] = 1;
    int64_t rows = t->Hq / t->Hkv * t->Tq;
    for (int i = 0; i < 3; i++)
      if (ql1[i] <= rows && ql1[i] * att_vecs(t->Dv, d[ATT_VEC]) * d[ATT_VEC] <= 16384 &&
          ql1[i] * t->D <= 16384 && ql1[i] <= 16 * d[ATT_VEC])
        c[n++] = ql1[i];
    break;
  }
  case ATT_KBLOCK: {
    static const int32_t k[] = {8, 16, 32, 64, 128, 256};
    for (int i = 0; i < 6; i++) c[n++] = k[i];
    break;
  }
  case ATT_PARALLEL:
    c[n++] = 0;
    c[n++] = 1;
    break;
  default: break;
  }
  return n;
}

/* The rule: the widest vectors. Where a K/V head serves 16 rows or more
 * (G query heads x Tq query rows: a prefill), a tile in L1, the tallest
 * whose accumulators take at most a quarter of L1, with as many keys a
 * block as keep the block's V rows and scores in L1 beside them (48 KiB L1,
 * head dims 128: 16 rows, 64 keys; 32 KiB: 16 rows, 32 keys). Otherwise
 * (a decode step) as many rows per tile as keep their accumulators (q x
 * ceil(Dv / lanes) vectors) and one K/V row (ceil(D / lanes) + ceil(Dv /
 * lanes)) within the vector registers, at most the rows a K/V head serves;
 * 64 keys a block (a 4 x 64 block of scores is 1 KiB: L1 for any CPU).
 * Parallel over tiles with more than one worker. */
static int attn_default(const tlm_space *s, int p, const int32_t *d, const int32_t *c, int n) {
  const tlm_attn_task *t = &s->task.u.attn;
  int workers = s->target.threads > 0 ? s->target.threads : 1;
  int regs = s->target.vec_regs > 0 ? s->target.vec_regs : 16;
  switch (p) {
  case ATT_VEC: return n - 1;
  case ATT_QBLOCK: {
    /* each K and V row read serves the tile's rows: as many as the K/V head
     * has (G x Tq), while their accumulators fit the vector registers with
     * one K/V row, or, where the heads are too wide for that (128 floats on
     * 16 registers), half of L1 (spilled accumulators stay in L1, the K/V
     * stream they save comes from L2, L3 or memory) */
    int64_t w = d[ATT_VEC], rows = t->Hq / t->Hkv * t->Tq, best = 0;
    int64_t l1 = s->target.l1d_bytes > 0 ? s->target.l1d_bytes : 32 * 1024;
    /* a prefill: the tallest tile in L1 whose accumulators take at most a
     * quarter of L1 (the rest holds the block's K or V rows and scores) */
    for (int i = n - 1; i >= 0; i--)
      if (c[i] > 8 && c[i] * att_vecs(t->Dv, w) * w * 4 <= l1 / 4) return i;
    int fits_regs = att_vecs(t->Dv, w) + att_vecs(t->D, w) + att_vecs(t->Dv, w) <= regs;
    for (int i = 0; i < n; i++) {
      int ok = fits_regs ? c[i] * att_vecs(t->Dv, w) + att_vecs(t->D, w) + att_vecs(t->Dv, w) <= regs
                         : c[i] * t->Dv * 4 <= l1 / 2;
      if (ok && (c[i] <= rows || i == 0)) best = i;
    }
    return (int)best;
  }
  case ATT_KBLOCK: {
    /* with a tile in L1, the block's V rows are read once per ATT_RQ (4)
     * rows of the tile: as many keys as keep them, the accumulators and
     * the block's scores within L1 */
    int64_t l1 = s->target.l1d_bytes > 0 ? s->target.l1d_bytes : 32 * 1024;
    int64_t qb = d[ATT_QBLOCK], w = d[ATT_VEC];
    if (qb > 8) {
      int64_t acc = qb * att_vecs(t->Dv, w) * w * 4, per_key = (t->Dv + qb) * 4;
      return pick_at_most(c, n, l1 > acc + 8 * per_key ? (l1 - acc) / per_key : 8);
    }
    return pick_at_most(c, n, 64);
  }
  case ATT_PARALLEL: return workers > 1 ? 1 : 0;
  default: return 0;
  }
}
