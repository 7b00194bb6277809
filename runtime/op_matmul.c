/* op_matmul.c - the matmul family (batch dimensions broadcast, epilogues
 * fused): its schedule space (the MM_* points of space.h), its rule, and
 * what the runtime layer needs of its tasks (FLOPs, text, run-time
 * fields). Its row of the family table is tlm_family_matmul (family.h). */
#include "family.h"

#include <stdio.h>
#include <string.h>

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

static int64_t mm_l3_m2(const tlm_target *tg, int64_t k1, int64_t m3);

static int has_epilogue(const tlm_matmul_task *t) {
  return t->has_bias || t->has_residual || t->act != TLM_ACT_NONE;
}

/* Level-0 block extents (b, m, n: batches, rows, columns, not clipped to
 * the task) of a matmul schedule whose points before `upto` are decided;
 * the level-2 and level-1 factors not decided yet count as 1 (the most
 * blocks they can leave). */
static void mm_level0_tiles(const int32_t *d, int upto, int64_t ext[3]) {
  int64_t b1 = upto > MM_B1 ? d[MM_B1] : 1, m1 = upto > MM_M1 ? d[MM_M1] : 1;
  int64_t n1 = upto > MM_N1 ? d[MM_N1] : 1;
  int64_t b2 = upto > MM_B2 ? d[MM_B2] : 1, m2 = upto > MM_M2 ? d[MM_M2] : 1;
  int64_t n2 = upto > MM_N2 ? d[MM_N2] : 1;
  ext[0] = (int64_t)d[MM_B3] * b2 * b1;
  ext[1] = (int64_t)d[MM_M3] * m2 * m1;
  ext[2] = (int64_t)d[MM_N3] * n2 * n1;
}

/* Level-0 block counts (b, m, n) of the same */
static void mm_level0_blocks(const tlm_space *s, const int32_t *d, int upto, int64_t cnt[3]) {
  const tlm_matmul_task *t = &s->task.u.mm;
  int64_t ext[3];
  mm_level0_tiles(d, upto, ext);
  cnt[0] = ceil_div(tlm_task_batch_total(&s->task), ext[0]);
  cnt[1] = ceil_div(t->M, ext[1]);
  cnt[2] = ceil_div(t->N, ext[2]);
}

/* Keeps the candidates c[0..m) of level-2 or level-1 point p that leave at
 * least min(threads, the most level-0 blocks) blocks, the points after p
 * counted as 1; the most blocks are those of the smallest candidate, so the
 * result is never empty when c[0] is 1 or the smallest. */
static int64_t mm_workers(const tlm_space *s) {
  return s->target.threads > 0 ? s->target.threads : 1;
}

/* The level-0 blocks of d (points from `upto` on counted as 1) the
 * workers can share: all of them, or, B constant, M's cut at run time
 * into one a worker when M alone is the parallel loop (no batch;
 * ln_split_m_block). Only for a constant B, whose kernel serves every M
 * (rule 24); measured records have none, so the spaces they were
 * measured in stay as they were. */
static int64_t mm_split_blocks(const tlm_space *s, const int32_t *d, int upto);

static int64_t mm_shareable_blocks(const tlm_space *s, const int32_t *d, int upto) {
  int64_t cnt[3];
  mm_level0_blocks(s, d, upto, cnt);
  int64_t all = cnt[0] * cnt[1] * cnt[2];
  if (!s->task.u.mm.b_const || tlm_task_batch_total(&s->task) > 1 || upto <= MM_M3) return all;
  int64_t split = mm_split_blocks(s, d, upto);
  return split > all ? split : all;
}

/* M's blocks when the kernel cuts them at run time (ln_split_m_block, M
 * alone in the parallel loop), 0 when it would not: d's points from
 * `upto` on counted as 1 */
static int64_t mm_split_blocks(const tlm_space *s, const int32_t *d, int upto) {
  int64_t ext[3];
  mm_level0_tiles(d, upto, ext);
  int64_t M = s->task.u.mm.M, rows = ln_split_m_block(M, ext[1], d[MM_M3], mm_workers(s));
  return rows > 0 ? ceil_div(M, rows) : 0;
}

static int mm_keep_parallel(const tlm_space *s, int p, const int32_t *d, const int32_t *c, int m,
                            int32_t *out) {
  int64_t workers = mm_workers(s);
  int32_t dd[MM_NPOINTS];
  memcpy(dd, d, sizeof(int32_t) * (size_t)p);
  int64_t most = 0;
  for (int i = 0; i < m; i++) {
    dd[p] = c[i];
    int64_t b = mm_shareable_blocks(s, dd, p + 1);
    if (b > most) most = b;
  }
  int64_t want = most < workers ? most : workers;
  int n = 0;
  for (int i = 0; i < m; i++) {
    dd[p] = c[i];
    if (mm_shareable_blocks(s, dd, p + 1) >= want) out[n++] = c[i];
  }
  return n;
}

/* 1 when the level-0 blocks of d (points from `upto` on counted as 1),
 * b of them claimed by `workers` threads (the pool's dynamic chunks), keep
 * the busiest thread within 5/4 of the mean work: ceil(b / workers)
 * blocks of the mean block's work, and never one block larger than that
 * (a few blocks whose last is a sliver: 3072 + 1024 columns of 4096 on two
 * threads is 1.5x the mean) */
static int mm_balanced(const tlm_space *s, const int32_t *d, int upto, int64_t b, int64_t workers) {
  const tlm_matmul_task *t = &s->task.u.mm;
  int64_t ext[3], bt = tlm_task_batch_total(&s->task);
  mm_level0_tiles(d, upto, ext);
  double block = (double)(ext[0] < bt ? ext[0] : bt) * (double)(ext[1] < t->M ? ext[1] : t->M) *
                 (double)(ext[2] < t->N ? ext[2] : t->N);
  double all = (double)bt * (double)t->M * (double)t->N;
  return 5 * b >= 4 * ceil_div(b, workers) * workers && 5.0 * all >= 4.0 * (double)workers * block;
}

/* The parallel work a matmul schedule may leave: at least min(threads, the
 * level-0 blocks its level-2 tiles allow) blocks, so no schedule puts a
 * core-sized problem on one core by an outer tile as large as the problem.
 * Such schedules (e.g. 35x4096:4096x1024 with tile_n1 = 2: one block,
 * 4x slower than the rule on 2 cores) never won a verification round
 * and were the largest losses of the session-4 models (models/README.md). */
static int64_t mm_parallel_floor(const tlm_space *s, const int32_t *d) {
  int64_t most = mm_shareable_blocks(s, d, MM_N1);
  int64_t workers = mm_workers(s);
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
  /* M alone in the parallel loop: fewer blocks than workers are cut at
   * run time into one a worker (ln_split_m_block) */
  if (fused == 1 && nl == 2 && !d[MM_ORDER0]) {
    int64_t split = mm_split_blocks(s, d, MM_NPOINTS);
    if (split > 0) r = split;
  }
  return r;
}

static int mm_candidates(const tlm_space *s, int p, const int32_t *d, int32_t *c) {
  const tlm_matmul_task *t = &s->task.u.mm;
  int64_t btot = tlm_task_batch_total(&s->task);
  int n = 0;
  switch (p) {
  case MM_VEC: {
    n = vec_width_candidates(s, c, n);
    /* dot products along k (both operands unit-stride in k): the same
     * widths above 1, marked TLM_VEC_K */
    if ((t->unit & TLM_UNIT_A_K) && (t->unit & TLM_UNIT_B_K))
      for (int i = 1, w = n; i < w; i++) c[n++] = TLM_VEC_K + c[i];
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
    for (int i = 0; i < TLM_N_REG_ROWS; i++) {
      int32_t r = tlm_reg_rows[i];
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
    int m = tile_candidates(t->N > cap ? t->N : cap, d[MM_N3], c);
    /* a level-2 tile that leaves fewer level-0 blocks than threads when a
     * smaller one would not idles a core whatever the level-1 tiles are
     * (4x1024:1024x1024 at tile_n2 = 64: one N block, half the speed on
     * two cores; candidate 34, models/README.md session 26) */
    n = mm_keep_parallel(s, p, d, c, m, c);
    break;
  }
  case MM_M2: {
    n = tile_candidates(t->M > 64 ? t->M : 64, d[MM_M3], c);
    /* and the smallest value that makes one block of all of M, so B can be
     * packed or streamed once (M = 128 at 6 rows: 24, where the values up
     * to ceil(128 / 6) = 22 stop at 20) */
    int64_t one = ceil_div(t->M, d[MM_M3]);
    if (n > 0 && n < TLM_N_TILE_VALUES && c[n - 1] < one) c[n] = tlm_tile_values[n], n++;
    /* and the L3 block (mm_l3_m2), whatever M: one block for every M up
     * to its rows, so those M share one kernel (M is a run-time argument;
     * a block larger than M costs nothing) */
    int64_t l3b = mm_l3_m2(&s->target, d[MM_K1], d[MM_M3]);
    if (n > 0 && n < TLM_MAX_CANDIDATES && c[n - 1] < l3b) c[n++] = (int32_t)l3b;
    n = mm_keep_parallel(s, p, d, c, n, c);
    break;
  }
  case MM_B2: {
    int m = tile_candidates(btot, d[MM_B3], c);
    n = mm_keep_parallel(s, p, d, c, m, c);
    break;
  }
  case MM_N1:
  case MM_M1:
  case MM_B1: {
    int m = p == MM_N1   ? tile_candidates(t->N, (int64_t)d[MM_N3] * d[MM_N2], c)
            : p == MM_M1 ? tile_candidates(t->M, (int64_t)d[MM_M3] * d[MM_M2], c)
                         : tile_candidates(btot, (int64_t)d[MM_B3] * d[MM_B2], c);
    int64_t floor_blocks = mm_parallel_floor(s, d);
    int64_t workers = mm_workers(s);
    int32_t dd[MM_NPOINTS];
    memcpy(dd, d, sizeof(int32_t) * (size_t)p);
    int kept = 0;
    int32_t bal[TLM_MAX_CANDIDATES];
    for (int i = 0; i < m; i++) {
      dd[p] = c[i];
      int64_t cnt[3];
      mm_level0_blocks(s, dd, p + 1, cnt);
      int64_t own = cnt[0] * cnt[1] * cnt[2], b = mm_shareable_blocks(s, dd, p + 1);
      if (c[i] != 1 && b < floor_blocks) continue;
      c[kept++] = c[i];
      /* balanced: the busiest thread's blocks (ceil(b / workers) of them,
       * each of the whole block's work) at most 5/4 of the mean work (3
       * blocks on 2 threads idle one a third of the time: 0.75-0.8x of the
       * rule's 2 or 4 on 35-60x1024:1024x4096, candidate 35; and a last
       * block that is a sliver, 3072 + 1024 columns of 4096 from 24-wide
       * tiles: 0.6x, candidate 36) */
      if (own >= floor_blocks && mm_balanced(s, dd, p + 1, own, workers)) bal[n++] = c[i];
    }
    /* none balanced (e.g. 3 blocks at most): what passes the floor */
    if (n > 0) memcpy(c, bal, sizeof(int32_t) * (size_t)n);
    else n = kept;
    break;
  }
  case MM_ORDER0: {
    /* n outer only where its loops can share as many blocks as M's cut
     * at run time would (mm_shareable_blocks: m outer) */
    int32_t dd[MM_NPOINTS];
    memcpy(dd, d, sizeof(int32_t) * MM_ORDER0);
    dd[MM_ORDER0] = 1;
    int64_t n_first = mm_fused_blocks(s, dd, 3), share = mm_shareable_blocks(s, d, MM_ORDER0);
    int64_t workers = mm_workers(s);
    c[n++] = 0;
    if (n_first >= (share < workers ? share : workers)) c[n++] = 1;
    break;
  }
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
    int64_t workers = mm_workers(s);
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


static int mm_rule_packs_b(const tlm_target *tg, const tlm_matmul_task *t, const int32_t *d);
static int mm_pack_b_tiles(const tlm_target *tg, const tlm_matmul_task *t, const int32_t *d);
static double mm_flops(const tlm_task *t);

#define MM_STREAM_K1 16 /* the K block of a streamed B (MM_K1) */
#define MM_PAGE_BYTES 4096 /* x86-64 pages, the in-page prefetchers' reach */

/* 1 when the rule streams B: read row-wise in place (decisions up to
 * MM_M3 known), and either the register tile covers all of M (nothing
 * reuses B) or, from rule version 14, B is not constant, M is at most 16
 * rows, a worker's share of one batch's B is larger than its core's L2
 * (B comes from L3 or memory on every call) and its share of each B row
 * spans at least two pages (8 KiB). Streaming, the kernel takes K blocks
 * of 16 B rows across wide N blocks (MM_K1, MM_N2: each row read far
 * along, runs that the in-page streamers follow) and every register tile
 * of rows reuses the block from L2, but it loads and stores C's block once
 * a K block: 2 M values for each 2 x 16 values of B that packing would
 * load and store, so up to M = 16 it costs no more than packing B
 * (MM_PACK_B is then 0); unpacked with a K block of 256 the tiles would
 * read 256 B rows at once, each in its own page, more streams than the
 * prefetchers follow. Measured on an Intel Xeon (family 6 model 167, tlm
 * run --schedule RULE13 --vs RULE14, time ratios, one thread / two):
 * natively 9x4096:4096x50400 (the GPT-J head, unpacked) 0.44 / 0.48,
 * 8x4096:4096x11008 0.45 / 0.55, 12x768:768x3072 0.57, 16x1024:1024x4096
 * (packed) 0.68 / 0.79, 16x4096:4096x4096 0.75 at two; under AVX2 (B
 * packed) 0.73-0.83 at one thread, 0.73-0.91 at two. Rows of 20 were
 * 0.79-0.94 still, 32 0.93-1.09, 48 1.04-1.19 (one thread). Workers with
 * narrower shares of the rows lost: 16x768:768x3072 at two threads
 * (1.5 pages a row each) 1.02 / 1.20 (AVX2), 11x3072:3072x768 1.18,
 * 9x768:768x768 1.16; hence the two pages a worker. */
static int mm_streams_b(const tlm_target *tg, const tlm_matmul_task *t, const int32_t *d) {
  if (tlm_vec_is_k(d[MM_VEC]) || !(t->unit & TLM_UNIT_B_N)) return 0;
  if (t->M <= d[MM_M3]) return 1;
  if (t->b_const) return 0; /* packed once, ahead of the calls */
  int64_t l2 = tg->l2_bytes > 0 ? tg->l2_bytes : 256 * 1024;
  int64_t workers = tg->threads > 0 ? tg->threads : 1; /* they share N */
  return t->M <= MM_STREAM_K1 && (int64_t)t->K * t->N * 4 > l2 * workers &&
         (int64_t)t->N * 4 >= 2 * MM_PAGE_BYTES * workers;
}

/* Rule 17: the K block under which B's micro-panel (k1 x n3) stays in half
 * of L1 while the tiles of a few rows reuse it, where B comes from L3 or
 * memory at every call; 0 where the K block of 256 stays. With 6 x 64
 * AVX-512 tiles a K block of 256 makes the micro-panel 64 KiB: each of
 * the M tiles reads it from L2 again while the next one streams in.
 * Conditions: more than one tile of rows (one tile streams B:
 * mm_streams_b), B larger than twice the workers' L2, K beyond one block
 * of 256, and the C block of all M rows (M x n2*n3, with the B block
 * k1 x n2*n3 in half of L2 as MM_N2 sizes it) within the other half of
 * L2 (more rows reuse each B block often enough from L2). Not for a
 * constant B: its packed copy's layout is the K block, and decode (one
 * tile), prompts of a few tiles and long prompts must share one copy (a
 * second layout would hold every weight twice within prepack_bytes);
 * the same K blocks ran 1.02-1.11x faster there too. 48 KiB of L1
 * and n3 = 64 give 96; AVX2's 6 x 16 tiles (micro-panel 16 KiB at 256)
 * and 32 KiB L1 with n3 = 16 keep 256. Measured on an Intel Xeon (family 6
 * model 167), one thread, tlm run --schedule RULE --vs K1=96: 24x4096:4096x4096
 * 1.13x (B constant 1.18x), 64x4096 1.11x (1.16x), 32x768:768x3072 1.25x
 * (1.06x); K1=64 at 128x4096 1.08x (1.06x), where 256 rows lost 4.6% and
 * 512x768:768x3072 7%. */
/* The rule's B block in panels of n3 columns: k1 x n2*n3 floats in half of
 * L2 (MM_N2, and mm_short_k1's C-block bound) */
static int64_t mm_b_block_panels(int64_t l2, int64_t k1, int64_t n3) {
  return l2 / 2 / (k1 * n3 * 4);
}

static int64_t mm_short_k1(const tlm_target *tg, const tlm_matmul_task *t, const int32_t *d) {
  if (tlm_vec_is_k(d[MM_VEC]) || t->M <= d[MM_M3] || t->K <= 256 || t->b_const) return 0;
  int64_t l1 = tg->l1d_bytes > 0 ? tg->l1d_bytes : 32 * 1024;
  int64_t l2 = tg->l2_bytes > 0 ? tg->l2_bytes : 256 * 1024;
  int64_t workers = tg->threads > 0 ? tg->threads : 1;
  int64_t k1 = l1 / 2 / ((int64_t)d[MM_N3] * 4);
  if (k1 >= 256 || k1 < 16) return 0;
  if ((int64_t)t->K * t->N * 4 <= 2 * l2 * workers) return 0;
  int64_t nb = pow2_floor(mm_b_block_panels(l2, k1, d[MM_N3]));
  if (nb < 1) nb = 1;
  if ((int64_t)t->M * nb * d[MM_N3] * 4 > l2 / 2) return 0;
  return k1;
}

/* The rule's register tile rows for nv vectors (MM_M3) under rule
 * version `version`. A constant B (serving, vision) keeps one tile for
 * every M, so that prompt lengths share a kernel. A B that is not
 * constant takes rows that leave no costly tail of M: from rule 15 the
 * fewest loads per FMA over the fraction of rows used
 * (tlm_reg_rows_for_extent; 10 rows as 8 + 2 ran 1.2-1.5x slower than as
 * one tile), and from rule 22, where the vectors are wider than the FMA
 * datapath (double-pumped: AVX-512 on Zen 4's 256-bit pipes, each FMA two
 * issue slots), the fewest cycles by the target's FMA and load issue
 * (tlm_reg_rows_timed): a clamped tail row costs its FMAs, which the
 * loads-per-FMA count left out, and on such a core those are the scarce
 * slots. Measured on the Zen 4 VM (family 25 model 17, 2 threads, every
 * one of the 1,178 matmul tasks of data/records.jsonl.gz whose rule
 * schedule changed, tlm run --vs rule 22 against rule 21 side by side):
 * natively 162 tasks, geometric mean 1.119x, 99 faster by more than 3%, 7
 * slower by more than 3% (1 row -> 3-4 rows at 7-9 rows 1.84x, 6 -> 4 rows
 * 1.16x over 55 tasks, 6 -> 5 1.02x over 88, 5 -> 3 at 9 rows 1.03x over 6,
 * 0.85-0.93 on three of them). Under TLM_ISA=avx2 on the same core (vectors
 * as wide as the pipes) the same count changed 81 tasks at 0.991x (4 -> 3
 * rows 0.98x, 6 -> 4 0.99x, 6 -> 5 1.00x): there rule 21's rows stay, as
 * they do on every target whose pipes are as wide as its vectors (the Zen
 * 5's AVX-512, the rule its models were trained against). */
static int mm_rule_rows_m3(const tlm_target *tg, const tlm_matmul_task *t, int nv, int version) {
  int rows, same_nv;
  tlm_reg_tile(tg, t->M, -nv, 0, TLM_MM_PTR_ROWS, &rows, &same_nv);
  if (t->b_const) return rows;
  return version >= 22 && tlm_target_double_pumped(tg) ? tlm_reg_rows_timed(tg, t->M, nv, rows)
                                                     : tlm_reg_rows_for_extent(tg, t->M, nv, rows);
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
static int mm_pack_b_tiles(const tlm_target *tg, const tlm_matmul_task *t, const int32_t *d) {
  const int64_t line = 64, page = MM_PAGE_BYTES; /* x86-64 */
  int64_t row_bytes = (int64_t)d[MM_N3] * 4, stride_bytes = t->sb[4] * 4;
  if (!(t->unit & TLM_UNIT_B_N)) return 2;
  /* A micro-panel row of more than one cache line that is not whole lines
   * (3 vectors of 8 floats: 96 bytes) puts every other k step's row across two lines, and
   * no k step reads only its own lines: packed panels are read as one
   * stream. Measured on an Intel Xeon under AVX2 at 4 x 24 (tlm run
   * --schedule, packed over unpacked): 1.11-1.46x at M = 24-128, N = 768
   * and 1024. */
  if (row_bytes > line && row_bytes % line) return 2;
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
   * faster unpacked at M = 24-64 with the copy then made panel by panel;
   * the row-by-row copy (codegen 30) reverses that (below). The lone-line
   * test further down was measured on a Zen 3 (whose prefetcher names no
   * reach). */
  /* Lone-line rows (16 floats: AVX2's 6 x 16) past the reach: packed over
   * more than one register tile, since B is packed row by row (codegen 30;
   * Intel Xeon, AVX2, packed over unpacked: 7x1024:1024x4096 1.26x,
   * 24x1024:1024x1024 1.28x, 48x1024:1024x1024 1.34x). */
  if (tg->pf_stride_bytes > 0 && stride_bytes > tg->pf_stride_bytes)
    return row_bytes < 2 * line ? 1 : stride_bytes >= 2 * page ? 2 : 8;
  int lone_lines = row_bytes < 2 * line && 2 * stride_bytes >= page;
  return lone_lines ? 2 : 0;
}

/* Rule 20: on a core whose strided loads stream across pages
 * (TLM_PF_CROSS_PAGE: Zen 5), rows of B under two cache lines (AVX2's
 * 4 x 24 and 6 x 16 tiles) are streamed unpacked over more register tiles
 * of rows than mm_pack_b_tiles says (it only ever delays packing), unless
 * the row stride is a whole number of pages: such rows fall in one set of
 * the L1 (a way of an x86 L1 data cache is a 4 KiB page: 32 KiB / 8 ways,
 * 48 KiB / 12) and in a sixteenth or less of a 64 KiB-a-way L2's sets,
 * and evict each other between the register tiles that reuse them.
 * Measured on an EPYC Zen 5 VM (family 1Ah model 2) under AVX2, one
 * thread, tlm run --vs, unpacked over packed time
 * (bench/results/ab_packb_96byte_rows_zen5oxide_avx2_s40.txt and
 * ab_packb_rule20_zen5oxide_s41.txt): rows 1.5-9 KiB apart, 4 x 24: 0.63
 * at M = 16, 0.72-0.91 at 24-32, 0.85-0.95 at 48-96, 0.96-1.02 at 128,
 * 1.02 at 256; 6 x 16: 0.78-0.91 at 32, 1.01 at 64. Rows 4, 12 and 16 KiB
 * apart: 0.86-0.93 at M = 16 (3-4 tiles), 1.28-1.41 at 32, 1.60-1.80 at
 * 64-512. Rows of two lines or more keep mm_pack_b_tiles (AVX-512's
 * 6 x 64 at 32 rows, unpacked there: 0.84-0.86 of the packed time at
 * 3-16 KiB strides). */
static int mm_rule_packs_b(const tlm_target *tg, const tlm_matmul_task *t, const int32_t *d) {
  int64_t m3 = d[MM_M3]; /* t->M > r * m3: more than r register tiles of rows reuse the pack */
  int r = mm_pack_b_tiles(tg, t, d);
  int64_t row_bytes = (int64_t)d[MM_N3] * 4, stride_bytes = t->sb[4] * 4;
  if (r && (t->unit & TLM_UNIT_B_N) && tg->pf_stride_bytes == TLM_PF_CROSS_PAGE && row_bytes < 128)
    r = stride_bytes % MM_PAGE_BYTES ? 16 : 4;
  return r && t->M > (int64_t)r * m3;
}


/* The rule's level-2 block of M when the workers share M instead of N:
 * the number of m3-row tiles per block, or 0 to leave the split to N.
 *
 * The rule's one block of all of M (up to mm_rule_rows) leaves its
 * workers only N to share; each then reads all of A beside its columns of
 * B, and with few columns a worker (N / workers under two or three panels
 * of n3) the A micro-panel feeds one or two panels per load. Which operand
 * the workers should duplicate follows from the traffic of a worker's
 * block (m rows x n columns over K): K (m + n) values, so splitting N
 * reads K (M + N / w), splitting M reads K (M / w + N); M's split reads
 * less when M >= N (a square-ish block per worker, as BLIS and oneDNN
 * partition threads). Then M is cut into blocks of whole tiles that the
 * pool's contiguous shares (runtime/threadpool.c: up to 4 chunks a
 * worker, worker t owning the t-th run of them) spread within 1/16 of the
 * even share of rows, the largest such block (each block reads the B
 * block again); when no block size balances that well, N keeps the split
 * unless it is one panel wide (then the best balanced block).
 * At least two tiles a worker, no batch (batches share out first), not
 * for dot products (vec along k). Measured on an Intel Xeon (family 6
 * model 167, 2 threads, tlm run --schedule RULE11 --vs RULE12, constant
 * B): natively 1.05-1.25x at M >= N from 192x576:576x256 to 784x256:256x256,
 * 300x4096:4096x256 and 500x1000:1000x500, 1.7x on 100x512:512x64 (one
 * panel of N: rule 11 cut M into 96 + 4 rows); under AVX2 0.97-1.10x
 * (models/README.md, session 34). */
static int64_t mm_rule_split_m2(const tlm_space *s, const int32_t *d) {
  const tlm_matmul_task *t = &s->task.u.mm;
  int64_t workers = mm_workers(s);
  if (workers <= 1 || tlm_task_batch_total(&s->task) > 1 || tlm_vec_is_k(d[MM_VEC]) ||
      t->M < t->N)
    return 0;
  int64_t m3 = d[MM_M3], tiles = ceil_div(t->M, m3);
  if (tiles < 2 * workers) return 0;
  int64_t mrows = mm_rule_m2(&s->target, d[MM_K1], m3) * m3;
  if (ceil_div(t->M, mrows) >= 2 * workers) return 0; /* M's blocks share out already */
  int64_t best = 0, fewest = 0, fewest_rows = 0;
  for (int i = 0; i < TLM_N_TILE_VALUES; i++) {
    int64_t rows = (int64_t)tlm_tile_values[i] * m3, b = ceil_div(t->M, rows);
    if (b < workers) break;
    int64_t chunks = b < 4 * workers ? b : 4 * workers, most = 0;
    for (int64_t w = 0; w < workers; w++) {
      int64_t r0 = b * (w * chunks / workers) / chunks * rows;
      int64_t r1 = b * ((w + 1) * chunks / workers) / chunks * rows;
      r0 = r0 < t->M ? r0 : t->M;
      r1 = r1 < t->M ? r1 : t->M;
      if (r1 - r0 > most) most = r1 - r0;
    }
    if (16 * most * workers < 17 * t->M) best = tlm_tile_values[i];
    if (!fewest || most <= fewest_rows) fewest = tlm_tile_values[i], fewest_rows = most;
  }
  /* N one panel wide cannot be shared: then the best balanced block */
  return best ? best : t->N <= d[MM_N3] ? fewest : 0;
}

/* The rule picks powers of two for the block counts and the K block, so
 * nearby extents (a growing attention length, similar prompt lengths) get
 * the same decisions and share one kernel: M, N and K are run-time
 * arguments, a kernel serves any extent. */
/* Whether the rule takes dot products along k (MM_VEC's TLM_VEC_K widths):
 * both operands unit-stride in k and at least 16 steps of it, and either
 * under 8 rows with B stored (N, K) (the outer product would gather B), or
 * one column at any M (rule 19: N = 1, a matrix-vector product, where the
 * outer-product form fills one lane of each vector) */
static int mm_rule_dot_products(const tlm_matmul_task *t) {
  return (t->unit & TLM_UNIT_A_K) && (t->unit & TLM_UNIT_B_K) && t->K >= 16 &&
         ((!(t->unit & TLM_UNIT_B_N) && t->M < 8) || t->N == 1);
}

/* Rule 21: dot products over batches whose B is read from memory (the
 * decode step's QK^T over a long context: a head's keys are B, (N, K)).
 * Columns of one head read n3 rows of B interleaved, 1 KiB apart at K =
 * 256, which streams well from the caches and badly from DRAM; a tile of
 * one column of two heads reads two sequential streams. Where all of B
 * outlasts the caches this process's cores hold (L2 and their share of L3
 * each, tlm_target.cores of them) the tile is 1 column x 2 batches.
 * Measured on the Zen 5 VM (tlm run --vs, one thread, 4 columns of one
 * head over 1 column of 2 heads, time ratio; the process holds 2 x (1 + 4)
 * MiB): B 11.5-45 MB 0.68-0.86 at K = 256 (GPT-J's 16 heads at 700-2030
 * columns, 53 x 16 heads at 52 columns), 0.44-0.45 at K = 64 (16.8-33 MB),
 * 0.69 at 4 rows; B 4.6-9.2 MB at K = 64 1.07-1.10 and 0.3 MB 1.22 (the
 * interleaved rows win from cache), 6.5-8 MB at K = 128-256 0.97-0.99. */
static int mm_rule_batched_dots(const tlm_target *tg, const tlm_task *task) {
  const tlm_matmul_task *t = &task->u.mm;
  int64_t btot = tlm_task_batch_total(task);
  if (!mm_rule_dot_products(t) || btot < 2) return 0;
  int64_t l2 = tg->l2_bytes > 0 ? tg->l2_bytes : 256 * 1024;
  int64_t l3 = tg->l3_bytes / (tg->l3_sharing > 0 ? tg->l3_sharing : 1);
  int64_t held = (int64_t)(tg->cores > 0 ? tg->cores : 1) * (l2 + l3);
  return (double)btot * (double)t->K * (double)t->N * 4.0 > (double)held;
}

/* Rule 24: the workers share M cut at run time (ln_split_m_block: one
 * block a worker, of equal rows) where the rule keeps all of M in one
 * level-0 block and would otherwise share N: B constant (packed ahead
 * once, so no worker packs all of it), no batch, not dot products, a task
 * worth sharing, and the busiest worker's tiles, a last partial tile of
 * up to tail_m rows counted at tail_m (loopnest.c), within 1/16 of the
 * even share (M = 196: 98 rows, 16 tiles and a half-height one each; M =
 * 100, 64 and 81 too; not M = 49, whose 25 rows are 4.5 tiles against a
 * mean of 4.1). A worker then writes C's rows for its own pixels or
 * tokens, which the next operator's workers, sharing rows too, read from
 * their own core's cache; with N shared, every row came half from the
 * other core. The kernel is the same for every M (M stays a run-time
 * argument). Measured on Zen 3 (AVX2, 2 threads), with blocks of whole
 * tiles (102 + 94 rows at 196): MobileNet's 14x14 depthwise-separable
 * block (bench_chain --b-override, B/A time) the depthwise layer after
 * the 1x1 0.82-0.89, the 1x1s 0.95-1.01; samples/vision MobileNet warm
 * 0.86-0.94x oneDNN (median 0.92) against 0.86-0.91x (median 0.875), six
 * alternating runs each; ResNet-50 and the serving sample unchanged
 * within noise; the kernels alone (tlm run --vs, --const-b) 0.92-1.02 of
 * the time (144x512:512x512 0.92, 324x512:512x1024 0.95, 128x768:768x2304
 * 1.02). Equal rows against whole tiles (the same binary, four
 * alternations): MobileNet warm 0.92-0.98x against 0.92-0.96x, cold
 * 0.71-0.78x against 0.56-0.77x. */
static int mm_rule_split_m_runtime(const tlm_space *s, const int32_t *d) {
  const tlm_matmul_task *t = &s->task.u.mm;
  int64_t workers = mm_workers(s);
  if (workers <= 1 || !t->b_const || tlm_task_batch_total(&s->task) > 1 ||
      tlm_vec_is_k(d[MM_VEC]) || mm_flops(&s->task) < TLM_PARALLEL_MIN_FLOPS)
    return 0;
  int64_t m3 = d[MM_M3];
  if ((int64_t)d[MM_M2] * m3 < t->M) return 0; /* M's own blocks */
  int64_t rows = ln_split_m_block(t->M, (int64_t)d[MM_M2] * m3, m3, workers);
  if (rows <= 0 || ceil_div(t->M, rows) < workers) return 0;
  /* the busiest worker's rows as its tiles cost them: a last tile of at
   * most tail rows runs the tile of tail rows (ln_node.tail_m, B constant) */
  int64_t tail = m3 >= 4 ? (m3 + 1) / 2 : 0, rem = rows % m3;
  int64_t cost = rows - rem + (rem == 0 ? 0 : rem <= tail ? tail : m3);
  return 16 * cost * workers <= 17 * t->M;
}

static int mm_rule(const tlm_space *s, int p, const int32_t *d, const int32_t *c, int n) {
  const tlm_matmul_task *t = &s->task.u.mm;
  const tlm_target *tg = &s->target;
  int64_t l2 = tg->l2_bytes > 0 ? tg->l2_bytes : 512 * 1024;
  int workers = tg->threads > 0 ? tg->threads : 1;
  int64_t btot = tlm_task_batch_total(&s->task);
  int kmode = mm_rule_dot_products(t);
  switch (p) {
  case MM_VEC: {
    /* dot products along k for small M when B is stored (N, K): the outer
     * product form would gather B (measured 1x768:768x768 transposed B) */
    int32_t want = kmode ? TLM_VEC_K + tg->vec_lanes : tg->vec_lanes;
    /* rule 19: dot products of 8 lanes (256 bits) on 16-lane targets, the
     * full width only for one row of one column (one chain of FMAs, which
     * the wider vector halves: 1x4096:4096x1 1.34x, 1x300:300x1 1.10x).
     * The search contender took 8-lane dot products on 54 of 64 such tasks
     * on an Intel Xeon and 49 of 63 on a Zen 5 (tlm bench kernels, GPT-J's
     * QK^T products); on the Zen 5 VM, tlm run --vs, one thread: 8 lanes
     * 0.89-0.94 of the 16-lane time at 1x768:768x768 and 4x4096:4096x4096
     * (B transposed) and the QK^T products, 0.74-0.87 on one column of
     * several rows (64x768:768x1, 1000x64:64x1, 7x4096:4096x1), and 4
     * lanes 1.15-1.40x slower than 8 */
    if (kmode && tg->vec_lanes > 8 && !(t->M == 1 && t->N == 1 && btot == 1))
      want = TLM_VEC_K + 8;
    /* rule 18: N under the full width, the narrowest vector of at least 4
     * lanes that holds it (as for convolutions, op_conv.c): 8 columns as
     * 8-lane vectors on AVX-512, not 16-lane ones half masked. Measured on
     * an Intel Xeon (tlm run --vs, one thread): 2000x512:512x8 0.73 of the
     * time, 1000x64:64x8 0.70, 512x256:256x4 (4 lanes) 0.68, 97x33:33x7
     * 0.80, 300x100:100x5 0.77 */
    if (!kmode && t->N < tg->vec_lanes)
      for (int i = 0; i < n; i++)
        if (!tlm_vec_is_k(c[i]) && c[i] >= 4 && c[i] >= t->N) return i;
    for (int i = 0; i < n; i++)
      if (c[i] == want) return i;
    return 0;
  }
  case MM_N3: {
    if (tlm_vec_is_k(d[MM_VEC])) /* columns of one batch, or one (rule 21) */
      return pick_at_most(c, n, mm_rule_batched_dots(tg, &s->task) ? 1 : 4);
    int rows, nv;
    /* constant B: the width of the many-row tile for every M, so decode and
     * prefill read one packed copy (its layout is the panel width and the K
     * block); a narrow matrix-vector tile keeps its FMA chains with
     * accumulator sets (codegen), measured as fast (tlm run --vs, Zen 3) */
    tlm_reg_tile(tg, t->b_const ? (int64_t)1 << 30 : t->M, 8, t->N, TLM_MM_PTR_ROWS, &rows, &nv);
    return pick_at_most(c, n, (int64_t)nv * d[MM_VEC]);
  }
  case MM_M3: {
    int64_t nv = tlm_vec_per_row(d[MM_VEC], d[MM_N3]);
    if (tlm_vec_is_k(d[MM_VEC])) { /* dot products: 16 accumulators (unchanged) */
      int64_t rows = 16 / nv, fit = (tg->vec_regs - nv - 1) / nv;
      if (rows > fit) rows = fit;
      return pick_at_most(c, n, rows < 1 ? 1 : rows);
    }
    return pick_at_most(c, n, mm_rule_rows_m3(tg, t, (int)nv, 22));
  }
  case MM_B3: /* 2 batches a tile of dot products (rule 21); outer products: 1 */
    return tlm_vec_is_k(d[MM_VEC]) && mm_rule_batched_dots(tg, &s->task) ? pick_at_most(c, n, 2) : 0;
  case MM_K1:
    /* One register tile holds every row (decode, GEMV): B is read once and
     * reused by nothing, so the kernel is a stream of B (so is a B beyond
     * L2 under at most 16 rows: mm_streams_b). Short K blocks
     * with the level-2 block across N (below) read B's rows whole, k1 rows
     * at a time, as the prefetchers like; the accumulators' reload every
     * 16 steps costs 2 L1 accesses per 16 B loads. Not when one tile spans
     * all of N (N <= n3, e.g. MobileNet's 1024 -> 5 classifier): there is
     * no row to read whole, and each K block would only reload the tile
     * (1.46x slower at 1x1024:1024x5 by tlm run --vs, Zen 3). A few tiles
     * of rows over a B from L3 or memory: B's micro-panel in half of L1
     * (mm_short_k1, rule 17). Otherwise a K block of 256 keeps the A
     * micro-panel (m3 x k1) in L1. */
    /* Rule 21: not over batches of B one or two tiles wide (attention's
     * P V products at decode): each tile then reads its half of a batch's
     * rows as one stream, and the short block only reloads the
     * accumulators (8 vectors every 16 steps). Measured on the Zen 5 VM
     * (tlm run --vs, one thread, K block 256 over 16): GPT-J's decode P V
     * products over 16 heads (1x16x1x2030:1x16x2030x256,
     * 53x16x1x52:53x16x52x256, 107x16x1x35:107x16x35x256) and
     * 16x1x1000:16x1000x256 1.17-1.29x. Without batches it did not pay:
     * 1x2030:2030x256 0.97x (128 over 16: 1.06x), and at 8 and 32 tiles
     * (1x4096:4096x1024, x4096) 128 over 16 ran 0.79x and 0.85x */
    if (mm_streams_b(tg, t, d) && !t->b_const &&
        (t->N > 2 * (int64_t)d[MM_N3] || btot == 1))
      return pick_at_most(c, n, MM_STREAM_K1);
    {
      int64_t ks = mm_short_k1(tg, t, d);
      return pick_at_most(c, n, ks ? ks : 256);
    }
  case MM_UNROLL: return pick_at_most(c, n, 4);
  case MM_N2: {
    /* B block (k1 x n2*n3) in half of L2; enough n blocks for all cores
     * when m offers little parallelism */
    int64_t nb = mm_b_block_panels(l2, d[MM_K1], d[MM_N3]);
    if (mm_streams_b(tg, t, d) && !t->b_const) { /* the C block (n2 x n3) in half of L1 */
      int64_t l1 = tg->l1d_bytes > 0 ? tg->l1d_bytes : 32 * 1024;
      nb = l1 / 2 / ((int64_t)d[MM_N3] * 4);
    }
    int64_t mrows = mm_rule_m2(tg, d[MM_K1], d[MM_M3]) * d[MM_M3];
    int64_t mtiles = (t->M + mrows - 1) / mrows;
    if (workers > 1 && mtiles * btot < 2 * workers && !mm_rule_split_m2(s, d)) {
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
    int64_t split = mm_rule_split_m2(s, d);
    if (split) return pick_at_most(c, n, split);
    int has_l3b = n > 1 && c[n - 1] == l3b;
    int last = has_l3b ? n - 2 : n - 1;
    int64_t rows = (int64_t)c[last] * d[MM_M3];
    /* all of M in one block: the L3 block says so for every M up to its
     * rows, the smallest covering value only for this M. The loops run
     * once either way (a block larger than M is one block, M being a
     * run-time argument), so the kernel is the same code and speed
     * (128x768:768x768 and 196x256:256x512, tlm run --vs, 1.000 and
     * 1.002), but one kernel now serves every such M: version 13. Under
     * rule 12 the vision sample's 1x1 layers at 5 image sizes (M = 100 to
     * 324 of the same N and K) compiled a kernel each, and serving a
     * kernel per prompt length. */
    if (rows >= t->M && rows <= mm_rule_rows(tg, d[MM_K1])) return has_l3b ? n - 1 : last;
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
    if (mm_rule_split_m_runtime(s, d)) return 0; /* N's blocks serial in a worker's rows */
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
    if (mm_rule_split_m_runtime(s, d)) return 0; /* m outer: the parallel loop is M's */
    int64_t mb = (t->M + (int64_t)d[MM_M3] * d[MM_M2] - 1) / ((int64_t)d[MM_M3] * d[MM_M2]);
    int64_t nb = (t->N + (int64_t)d[MM_N3] * d[MM_N2] - 1) / ((int64_t)d[MM_N3] * d[MM_N2]);
    return nb > mb ? 1 : 0;
  }
  case MM_ORDER1: return 0;
  case MM_ORDER2: return 0; /* m outer: the A micro-panel stays in L1 */
  case MM_PACK_B: return mm_rule_packs_b(tg, t, d) && !mm_streams_b(tg, t, d) && n > 1 ? 1 : 0;
  case MM_PARALLEL: {
    if (workers == 1) return 0;
    /* a task too small to share (version 15) */
    if (mm_flops(&s->task) < TLM_PARALLEL_MIN_FLOPS) return 0;
    if (mm_rule_split_m_runtime(s, d)) /* M alone, cut at run time */
      for (int i = 0; i < n; i++)
        if (c[i] == 1) return i;
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


static int64_t mm_scratch_bytes(const tlm_task *task, const tlm_schedule *s) {
  (void)task;
  if (!s->v[MM_PACK_B]) return 0;
  int64_t bblock = (int64_t)s->v[MM_B2] * s->v[MM_B3];
  return bblock * s->v[MM_N2] * (int64_t)s->v[MM_N3] * s->v[MM_K1] * 4;
}

/* Whether rule 22 changed this task's register tile rows on target tg
 * (mm_rule_rows_m3): the rule's own vector and width, then the rows under
 * rule 21 and rule 22. A NULL target: any non-constant B of more than one
 * row may have. */
static int mm_rows_changed_22(const tlm_task *task, const tlm_target *tg) {
  const tlm_matmul_task *t = &task->u.mm;
  if (t->b_const || t->M <= 1) return 0;
  if (!tg) return 1;
  tlm_space s;
  tlm_schedule d;
  if (!tlm_rule22_default(task, tg, &s, &d)) return 0;
  if (tlm_vec_is_k(d.v[MM_VEC])) return 0;
  int nv = (int)tlm_vec_per_row(d.v[MM_VEC], d.v[MM_N3]);
  return mm_rule_rows_m3(&s.target, t, nv, 21) != mm_rule_rows_m3(&s.target, t, nv, 22);
}

/* version 8: tile_n1 (level-0 blocks of N, about one per worker);
 * 10: 3-vector register tiles on 16 registers, packed B for rows that are
 * not whole cache lines; 11: level-1 tiles balanced by work; 12: workers
 * share M at M >= N; 13: one block of all of M is the L3 block (space.h);
 * 14: a B beyond a worker's L2 streams under up to 16 rows too; 15: at
 * most TLM_MM_PTR_ROWS rows a tile, which changes the rule's tile only
 * where more rows were possible: more than 8 rows of M and at most 2
 * vectors (N <= 48: 3 AVX-512 vectors; a third is never taken with more
 * rows than 8); and, B not constant, rows chosen for M's tail; and a task
 * under TLM_PARALLEL_MIN_FLOPS on one worker; 19: dot products; 20: B packing
 * where strided loads cross pages (mm_rule_packs_b); 21: batched dot
 * products from memory (mm_rule_batched_dots), and a streamed B of one
 * or two tiles' width keeps its K block (MM_K1); 22: rows over M by
 * cycles on double-pumped targets, only where they changed on tg; 24:
 * M cut among the workers at run time (mm_rule_split_m_runtime), for any
 * unbatched constant B of more than one row */
static int mm_rule_version(const tlm_task *task, const tlm_target *tg) {
  const tlm_matmul_task *t = &task->u.mm;
  if (t->b_const && tlm_task_batch_total(task) == 1 && t->M > 1) return 24;
  if (mm_rows_changed_22(task, tg)) return 22; /* rows over M by cycles (MM_M3) */
  /* 21: batches of dot products, 1 column x 2 batches where B outlasts
   * the caches (mm_rule_batched_dots) */
  if (mm_rule_dot_products(t)) /* 19: one column at every M; 8 lanes (MM_VEC) */
    return tlm_task_batch_total(task) > 1 ? 21 : 19;
  /* 21: batches of a streamed B (mm_streams_b) one or two register tiles
   * wide keep the long K block (MM_K1); 256 columns: two tiles of 128 at
   * most, B beyond the smallest L2 (256 KiB) */
  if (!t->b_const && tlm_task_batch_total(task) > 1 && t->M <= MM_STREAM_K1 && t->N <= 256 &&
      (int64_t)t->K * t->N * 4 > 256 * 1024)
    return 21;
  /* 20: B packed over more tiles of rows where strided loads cross pages
   * (mm_rule_packs_b); never under 2 tiles of 4 rows */
  if (!t->b_const && (t->unit & TLM_UNIT_B_N) && t->M > 8) return 20;
  if (t->N < 16) return 18; /* narrow vectors (MM_VEC, rule 18) under AVX-512's 16 lanes */
  /* 17 where mm_short_k1 may shorten the K block on some target: B not
   * constant, a few tiles of rows, K beyond 256, B beyond 1 MiB (the
   * smallest L2 of an x86 core tlm targets is 256 KiB; twice that for two
   * workers) */
  if (!t->b_const && t->M > 4 && t->M <= 256 && t->K > 256 && (int64_t)t->K * t->N * 4 > 1024 * 1024)
    return 17;
  if (!t->b_const) return 15; /* and rows for M's tail (tlm_reg_rows_for_extent) */
  return (t->N <= 48 && t->M > TLM_MM_PTR_ROWS) || mm_flops(task) < TLM_PARALLEL_MIN_FLOPS ? 15 : 14;
}

static double mm_flops(const tlm_task *t) {
  const tlm_matmul_task *m = &t->u.mm;
  return 2.0 * (double)tlm_task_batch_total(t) * (double)m->M * (double)m->N * (double)m->K;
}

static void mm_str(const tlm_task *t, char *buf, int cap) {
  static const char *acts[] = {"", "_relu", "_gelu", "_silu", "_relu6"};
  const tlm_matmul_task *m = &t->u.mm;
  char bp[80] = "";
  int l = 0;
  for (int i = 0; i < m->nbatch; i++)
    l += snprintf(bp + l, sizeof bp - (size_t)l, "%lldx", (long long)m->batch[i]);
  snprintf(buf, (size_t)cap, "%s%lldx%lld:%s%lldx%lld%s%s%s", bp, (long long)m->M,
           (long long)m->K, bp, (long long)m->K, (long long)m->N,
           m->has_bias ? "_bias" : "", (m->act > 0 && m->act < 5) ? acts[m->act] : "",
           m->has_residual == 3   ? "_residual_in_place"
           : m->has_residual == 2 ? "_residual_before_act"
           : m->has_residual      ? "_residual"
                                  : "");
}

static void mm_clear_runtime(tlm_task *t) {
  /* matmul: M, N, K and every stride (the unit class stays) */
  tlm_matmul_task *m = &t->u.mm;
  m->M = m->N = m->K = 0;
  memset(m->sa, 0, sizeof m->sa);
  memset(m->sb, 0, sizeof m->sb);
  memset(m->sc, 0, sizeof m->sc);
  memset(m->sr, 0, sizeof m->sr);
  m->sbias = 0;
  m->b_const = 0; /* the code is the same; B packed ahead is an argument */
}

static int64_t mm_parallel_count(const tlm_task *task, const tlm_schedule *s,
                                 const ln_nest *nest, int64_t workers) {
  (void)s;
  return ln_parallel_count(nest, task, workers);
}

static double mm_extent_distance(const tlm_task *a, const tlm_task *b) {
  return log_gap(a->u.mm.M, b->u.mm.M) + log_gap(a->u.mm.N, b->u.mm.N) +
         log_gap(a->u.mm.K, b->u.mm.K);
}

void tlm_mm_canonical(const tlm_space *s, tlm_schedule *sched) {
  if (s->task.kind != TLM_OP_MATMUL || sched->n != MM_NPOINTS) return;
  const tlm_matmul_task *t = &s->task.u.mm;
  int32_t *v = sched->v;
  int64_t m3 = v[MM_M3] > 0 ? v[MM_M3] : 1;
  if (v[MM_M1] != 1 || (int64_t)v[MM_M2] * m3 < t->M) return; /* more than one block of M */
  int64_t l3b = mm_l3_m2(&s->target, v[MM_K1], m3);
  if (l3b == v[MM_M2] || l3b * m3 < t->M) return;
  tlm_schedule c = *sched;
  c.v[MM_M2] = (int32_t)l3b;
  if (tlm_space_accepts(s, &c)) *sched = c;
}

const tlm_family tlm_family_matmul = {
    .name = "matmul",
    .points = k_mm_points,
    .npoints = MM_NPOINTS,
    .candidates = mm_candidates,
    .rule = mm_rule,
    .rule_version = mm_rule_version,
    .scratch_bytes = mm_scratch_bytes,
    .flops = mm_flops,
    .str = mm_str,
    .clear_runtime = mm_clear_runtime,
    .parallel_count = mm_parallel_count,
    .extent_distance = mm_extent_distance,
};
