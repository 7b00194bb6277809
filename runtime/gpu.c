/* gpu.c - NVIDIA GPU targets and the GPU matmul schedule space. */
#include "gpu.h"

#include <stdio.h>
#include <string.h>

void tlm_gpu_target_offline(tlm_gpu_target *t, int sm) {
  memset(t, 0, sizeof *t);
  t->sm = sm;
  t->max_threads_block = 1024;
  t->regs_per_sm = 65536;
  t->regs_per_thread = 255;
  t->smem_per_block = 48 * 1024; /* static shared memory, no opt-in */
  t->warp = 32;
  if (sm >= 90) {
    t->sm_count = 132;
    t->smem_per_sm = 228 * 1024;
  } else {
    t->sm_count = 108;
    t->smem_per_sm = 164 * 1024;
  }
}

static const tlm_point k_gm_points[GM_NPOINTS] = {
    {"tn", TLM_PK_GPU_THREAD_TILE}, {"tm", TLM_PK_GPU_THREAD_TILE},
    {"bn", TLM_PK_GPU_BLOCK_TILE},  {"bm", TLM_PK_GPU_BLOCK_TILE},
    {"bk", TLM_PK_GPU_K_STEP},      {"stages", TLM_PK_GPU_STAGES},
    {"unroll", TLM_PK_UNROLL},
};

static const tlm_point k_gr_points[GR_NPOINTS] = {
    {"threads", TLM_PK_GPU_THREADS}, {"unroll", TLM_PK_UNROLL}};

static int is_row(const tlm_task *t) {
  return t->kind == TLM_OP_SOFTMAX || t->kind == TLM_OP_LAYERNORM || t->kind == TLM_OP_RMSNORM;
}

int tlm_gpu_supports(const tlm_task *task) { return task->kind == TLM_OP_MATMUL || is_row(task); }

int tlm_gpu_arg_count(const tlm_task *task) { return is_row(task) ? GRA_COUNT : GA_COUNT; }

int tlm_gpu_space_init(tlm_gpu_space *s, const tlm_task *task, const tlm_gpu_target *target) {
  memset(s, 0, sizeof *s);
  if (!tlm_gpu_supports(task)) return -1;
  s->task = *task;
  s->target = *target;
  s->npoints = is_row(task) ? GR_NPOINTS : GM_NPOINTS;
  s->points = is_row(task) ? k_gr_points : k_gm_points;
  return 0;
}

/* row operators: powers of two from a warp to the block limit; unroll 1,
 * 2, 4 */
static int gr_candidates(const tlm_gpu_space *s, int p, int32_t *c) {
  int n = 0;
  if (p == GR_THREADS)
    for (int32_t t = s->target.warp; t <= s->target.max_threads_block && t <= 1024; t *= 2) c[n++] = t;
  else
    for (int32_t u = 1; u <= 4; u *= 2) c[n++] = u;
  return n;
}

/* the values each point may take before the constraints */
static int gm_values(int p, const int32_t *d, int32_t *out) {
  static const int32_t thread_tile[] = {1, 2, 4, 8}, block_tile[] = {16, 32, 64, 128},
                       ksteps[] = {4, 8, 16, 32}, stages[] = {1, 2};
  const int32_t *src;
  int n;
  switch (p) {
  case GM_TN: case GM_TM: src = thread_tile, n = 4; break;
  case GM_BN: case GM_BM: src = block_tile, n = 4; break;
  case GM_BK: src = ksteps, n = 4; break;
  case GM_STAGES: src = stages, n = 2; break;
  case GM_UNROLL:
    n = 0;
    for (int32_t u = 1; u <= d[GM_BK]; u *= 2) out[n++] = u;
    return n;
  default: return 0;
  }
  memcpy(out, src, (size_t)n * sizeof *out);
  return n;
}

int tlm_gpu_regs_estimate(const tlm_schedule *sched) {
  const int32_t *v = sched->v;
  int64_t threads = (int64_t)(v[GM_BM] / v[GM_TM]) * (v[GM_BN] / v[GM_TN]);
  /* accumulators, the A column and B row fragments of one k, the next
   * tiles' elements held in registers while double buffering, and about
   * 20 for indices, addresses and bounds */
  int64_t staged = v[GM_STAGES] == 2 ? (int64_t)(v[GM_BM] + v[GM_BN]) * v[GM_BK] / threads : 0;
  return (int)(v[GM_TM] * v[GM_TN] + v[GM_TM] + v[GM_TN] + staged + 20);
}

/* Whether the decisions d[0..upto-1] satisfy every constraint that they
 * alone decide. */
static int gm_ok(const tlm_gpu_target *tg, const int32_t *d, int upto) {
  if (upto > GM_BM) {
    int64_t threads = (int64_t)(d[GM_BM] / d[GM_TM]) * (d[GM_BN] / d[GM_TN]);
    if (threads < tg->warp || threads > tg->max_threads_block) return 0;
    if (upto > GM_BK) {
      int64_t bk = d[GM_BK];
      /* every thread loads a whole number of each staged tile's elements,
       * at most 32 of each (held in registers between load and store) */
      if ((d[GM_BM] * bk) % threads || (d[GM_BN] * bk) % threads) return 0;
      if (d[GM_BM] * bk > 32 * threads || d[GM_BN] * bk > 32 * threads) return 0;
    }
    if (upto > GM_STAGES) {
      int64_t smem = (int64_t)d[GM_STAGES] * d[GM_BK] * (d[GM_BM] + d[GM_BN]) * 4;
      if (smem > tg->smem_per_block) return 0;
    }
    if (upto == GM_NPOINTS) {
      tlm_schedule s = {.n = GM_NPOINTS};
      memcpy(s.v, d, GM_NPOINTS * sizeof *d);
      int64_t regs = tlm_gpu_regs_estimate(&s);
      if (regs > tg->regs_per_thread || regs * threads > tg->regs_per_sm) return 0;
    }
  }
  return 1;
}

/* Whether the prefix d[0..p-1] (already checked) extends to a whole
 * schedule that passes every constraint: a depth-first walk over the few
 * hundred completions, so no candidate leads to a dead end. */
static int gm_completable(const tlm_gpu_target *tg, int32_t *d, int p) {
  if (p == GM_NPOINTS) return 1;
  int32_t vals[TLM_MAX_CANDIDATES];
  int n = gm_values(p, d, vals);
  for (int i = 0; i < n; i++) {
    d[p] = vals[i];
    if (gm_ok(tg, d, p + 1) && gm_completable(tg, d, p + 1)) return 1;
  }
  return 0;
}

int tlm_gpu_space_candidates(const tlm_gpu_space *s, int p, const int32_t *decided,
                             int32_t *cands) {
  if (is_row(&s->task)) return gr_candidates(s, p, cands);
  int32_t d[TLM_MAX_POINTS] = {0}, vals[TLM_MAX_CANDIDATES];
  memcpy(d, decided, (size_t)p * sizeof *d);
  int n = gm_values(p, d, vals), k = 0;
  for (int i = 0; i < n; i++) {
    d[p] = vals[i];
    if (gm_ok(&s->target, d, p + 1) && gm_completable(&s->target, d, p + 1)) cands[k++] = vals[i];
  }
  return k;
}

static int gpu_cands(const void *s, int p, const int32_t *d, int32_t *c) {
  return tlm_gpu_space_candidates(s, p, d, c);
}

void tlm_gpu_space_walk(const tlm_gpu_space *s, tlm_point_choose choose, void *ctx,
                        tlm_schedule *out) {
  tlm_points_walk(s, s->npoints, gpu_cands, choose, ctx, out);
}

int tlm_gpu_space_accepts(const tlm_gpu_space *s, const tlm_schedule *sched) {
  return tlm_points_accepts(s, s->npoints, gpu_cands, sched);
}

void tlm_gpu_space_sample(const tlm_gpu_space *s, uint64_t *rng, tlm_schedule *out) {
  tlm_points_walk(s, s->npoints, gpu_cands, tlm_choose_uniform, rng, out);
}

/* ---- the rule ------------------------------------------------------------------------
 *
 * The classic SIMT SGEMM construction (Volkov & Demmel, SC 2008; the CUTLASS
 * "thread tile / block tile" hierarchy), every number from the target:
 *  - thread tile: the largest tm x tn (square first) whose register estimate
 *    leaves two blocks of the block's threads resident per SM (latency is
 *    hidden by a second block while one waits at a barrier): regs_per_sm /
 *    (2 x threads) registers a thread. More accumulators per thread mean
 *    more FMAs per shared-memory load (tm x tn FMAs for tm + tn loads),
 *    as long as the block keeps at least 4 warps (one for each of the SM's
 *    4 warp schedulers, sm_70 and later).
 *  - block tile: the largest of 128x128, 128x64, 64x128, 64x64, 64x32,
 *    32x64, 32x32, 32x16, 16x32, 16x16 (trimmed towards M and N when they
 *    are small) whose grid fills every SM at least once (sm_count blocks:
 *    fewer would leave SMs idle); when none does, the smallest.
 *  - bk: the smallest of 8, 16, 32 for which every thread loads at least
 *    one element of each staged tile.
 *  - stages 2 when the doubled buffers fit the shared memory of a block,
 *    and the k loop over a staged tile fully unrolled. */

typedef struct gm_rule {
  int32_t v[GM_NPOINTS];
} gm_rule;

static void gm_rule_pick(const tlm_gpu_space *s, gm_rule *out) {
  static const int32_t blocks[][2] = {{128, 128}, {128, 64}, {64, 128}, {64, 64}, {64, 32},
                                      {32, 64},   {32, 32},  {32, 16},  {16, 32}, {16, 16}};
  static const int32_t ttiles[][2] = {{8, 8}, {8, 4}, {4, 8}, {4, 4}, {4, 2},
                                      {2, 4}, {2, 2}, {2, 1}, {1, 2}, {1, 1}};
  const tlm_gpu_target *tg = &s->target;
  const tlm_matmul_task *t = &s->task.u.mm;
  int64_t batches = tlm_task_batch_total(&s->task);
  int found = 0;
  for (size_t b = 0; b < sizeof blocks / sizeof *blocks && !found; b++) {
    int32_t bm = blocks[b][0], bn = blocks[b][1];
    /* a tile more than twice the extent only adds masked lanes: skip it
     * while a smaller one is left */
    int last = b + 1 == sizeof blocks / sizeof *blocks;
    if (!last && ((bm > 16 && bm >= 2 * t->M) || (bn > 16 && bn >= 2 * t->N))) continue;
    int64_t grid = ((t->N + bn - 1) / bn) * ((t->M + bm - 1) / bm) * batches;
    if (grid < tg->sm_count && !last) continue;
    for (size_t q = 0; q < sizeof ttiles / sizeof *ttiles; q++) {
      int32_t d[TLM_MAX_POINTS] = {0};
      d[GM_TM] = ttiles[q][0], d[GM_TN] = ttiles[q][1], d[GM_BM] = bm, d[GM_BN] = bn;
      int64_t threads = (int64_t)(bm / d[GM_TM]) * (bn / d[GM_TN]);
      if (threads < 4 * tg->warp) continue; /* a warp for each of an SM's 4 schedulers */
      d[GM_BK] = 0;
      for (int32_t bk = 8; bk <= 32 && !d[GM_BK]; bk *= 2)
        if (bm * bk >= threads && bn * bk >= threads) d[GM_BK] = bk;
      if (!d[GM_BK]) continue;
      d[GM_STAGES] = 2;
      d[GM_UNROLL] = d[GM_BK];
      if (!gm_ok(tg, d, GM_STAGES + 1)) d[GM_STAGES] = 1;
      if (!gm_ok(tg, d, GM_NPOINTS)) continue;
      tlm_schedule sc = {.n = GM_NPOINTS};
      memcpy(sc.v, d, sizeof sc.v);
      if ((int64_t)tlm_gpu_regs_estimate(&sc) * threads * 2 > tg->regs_per_sm) continue;
      memcpy(out->v, d, sizeof out->v);
      found = 1;
      break;
    }
  }
  if (!found) { /* unreachable for real targets: the smallest schedule */
    memset(out, 0, sizeof *out);
    out->v[GM_TM] = out->v[GM_TN] = 1;
    out->v[GM_BM] = out->v[GM_BN] = 16;
    out->v[GM_BK] = 8;
    out->v[GM_STAGES] = 1;
    out->v[GM_UNROLL] = 8;
  }
}

static int choose_rule(void *ctx, const void *s, int p, const int32_t *d, const int32_t *c,
                       int n) {
  (void)s, (void)d;
  const gm_rule *r = ctx;
  int best = 0;
  for (int i = 0; i < n; i++)
    if (c[i] <= r->v[p]) best = i; /* the wanted value, else the largest below it */
  return best;
}

/* Row operators: enough threads that each holds about 4 columns of the
 * row (a warp at least, the block limit at most), so one block streams a
 * row with every thread busy and the reductions stay log2(threads)
 * barriers deep; unroll 4 when every thread has 4 columns or more, else 1. */
static void gr_rule_pick(const tlm_gpu_space *s, gm_rule *out) {
  memset(out, 0, sizeof *out);
  int64_t cols = s->task.u.row.cols, want = (cols + 3) / 4;
  int32_t t = s->target.warp;
  while (t < want && t * 2 <= s->target.max_threads_block && t * 2 <= 1024) t *= 2;
  out->v[GR_THREADS] = t;
  out->v[GR_UNROLL] = cols >= 4 * (int64_t)t ? 4 : 1;
}

void tlm_gpu_space_default(const tlm_gpu_space *s, tlm_schedule *out) {
  gm_rule r;
  if (is_row(&s->task))
    gr_rule_pick(s, &r);
  else
    gm_rule_pick(s, &r);
  tlm_gpu_space_walk(s, choose_rule, &r, out);
}

char *tlm_gpu_schedule_str(const tlm_gpu_space *s, const tlm_schedule *sched, char *buf, int cap) {
  return tlm_points_str(s->points, s->npoints, sched, buf, cap);
}

int tlm_gpu_schedule_parse(const tlm_gpu_space *s, const char *text, tlm_schedule *out, char *err,
                           int errcap) {
  if (tlm_points_parse(s->points, s->npoints, text, out, err, errcap)) return -1;
  if (!tlm_gpu_space_accepts(s, out)) {
    snprintf(err, (size_t)errcap, "schedule is not in this task's GPU space");
    return -1;
  }
  return 0;
}

int tlm_gpu_launch_dims(const tlm_task *task, const tlm_schedule *sched, tlm_gpu_launch *out) {
  const tlm_matmul_task *t = &task->u.mm;
  const int32_t *v = sched->v;
  memset(out, 0, sizeof *out);
  if (is_row(task)) {
    out->threads = v[GR_THREADS];
    out->grid_x = task->u.row.rows, out->grid_y = out->grid_z = 1;
    out->smem_bytes = v[GR_THREADS] * 4;
    return out->grid_x > 2147483647 ? -1 : 0;
  }
  out->threads = (v[GM_BM] / v[GM_TM]) * (v[GM_BN] / v[GM_TN]);
  out->grid_x = (t->M + v[GM_BM] - 1) / v[GM_BM];
  out->grid_y = (t->N + v[GM_BN] - 1) / v[GM_BN];
  out->grid_z = tlm_task_batch_total(task);
  out->smem_bytes = v[GM_STAGES] * v[GM_BK] * (v[GM_BM] + v[GM_BN]) * 4;
  if (out->grid_x > 2147483647 || out->grid_y > 65535 || out->grid_z > 65535) return -1;
  return 0;
}

void tlm_gpu_mm_args(const tlm_task *task, uint64_t a, uint64_t b, uint64_t c, uint64_t bias,
                     uint64_t r, int64_t args[GA_COUNT]) {
  const tlm_matmul_task *t = &task->u.mm;
  memset(args, 0, GA_COUNT * sizeof *args);
  args[GA_A] = (int64_t)a, args[GA_B] = (int64_t)b, args[GA_C] = (int64_t)c;
  args[GA_BIAS] = t->has_bias ? (int64_t)bias : 0;
  args[GA_R] = t->has_residual ? (int64_t)r : 0;
  args[GA_M] = t->M, args[GA_N] = t->N, args[GA_K] = t->K;
  args[GA_SAM] = t->sa[4], args[GA_SAK] = t->sa[5];
  args[GA_SBK] = t->sb[4], args[GA_SBN] = t->sb[5];
  args[GA_SCM] = t->sc[4], args[GA_SCN] = t->sc[5];
  args[GA_SRM] = t->sr[4], args[GA_SRN] = t->sr[5];
  args[GA_SBIAS] = t->sbias;
  for (int i = 0; i < 4; i++) {
    args[GA_BATCH + i] = t->batch[i] > 0 ? t->batch[i] : 1;
    args[GA_SAB + i] = t->sa[i], args[GA_SBB + i] = t->sb[i];
    args[GA_SCB + i] = t->sc[i], args[GA_SRB + i] = t->sr[i];
  }
}

void tlm_gpu_row_args(const tlm_task *task, uint64_t x, uint64_t y, uint64_t gamma, uint64_t beta,
                      int64_t rows, int64_t cols, int64_t mrows, const int64_t sx[2],
                      const int64_t sy[2], int64_t sg, int64_t sb, int64_t args[GRA_COUNT]) {
  (void)task;
  memset(args, 0, GRA_COUNT * sizeof *args);
  args[GRA_X] = (int64_t)x, args[GRA_Y] = (int64_t)y;
  args[GRA_G] = (int64_t)gamma, args[GRA_B] = (int64_t)beta;
  args[GRA_ROWS] = rows, args[GRA_COLS] = cols, args[GRA_MROWS] = mrows > 0 ? mrows : 1;
  args[GRA_SX0] = sx[0], args[GRA_SX1] = sx[1], args[GRA_SY0] = sy[0], args[GRA_SY1] = sy[1];
  args[GRA_SG] = sg, args[GRA_SB] = sb;
}
