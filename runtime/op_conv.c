/* op_conv.c - the convolution family (direct convolution, groups and
 * depthwise, 1-3 spatial dimensions, NCHW or NHWC, fused epilogues): its
 * schedule space (CV_* in space.h), rule, FLOPs, text and run-time fields.
 * Row of the family table: tlm_family_conv (family.h). */
#include "family.h"

#include <stdio.h>
#include <string.h>

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
/* one input and one output channel a group, more than one group */
static int conv_depthwise(const tlm_conv_task *t) { return t->G > 1 && t->ICg == 1 && t->OCg == 1; }

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
  case 2:
  case 3: return ncb * rows * nwb;
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
  case CV_AXIS: {
    /* lanes along ow read and write every lane at a stride of the channels
     * when the destination is unit-stride in C (NHWC): offered there only
     * when the channels do not fill one vector of the target (fewer output
     * channels per group than lanes; the channel axis is then mostly
     * masked). In the records of five machines, lanes along ow were the
     * fastest on 4 of 1,216 NHWC tasks, each with fewer channels than
     * lanes; a model once put them on MobileNet's first depthwise layer
     * (32 groups): 0.045x of the channel lanes. */
    int dw = conv_depthwise(t);
    int64_t chans = dw ? t->G : t->OCg;
    int lanes = s->target.vec_lanes > 0 ? s->target.vec_lanes : 1;
    c[n++] = 0;
    if (!(t->unit & TLM_UNIT_CONV_DST_C) || chans < lanes) c[n++] = 1;
    if (t->G > 1) c[n++] = 2;
    break;
  }
  case CV_VEC: {
    n = vec_width_candidates(s, c, n);
    break;
  }
  case CV_TILE_V: /* whole vectors, 1..4 of them */
    for (int32_t j = 1; j <= 4 && (int64_t)d[CV_VEC] * (j - 1) < vext; j++) c[n++] = d[CV_VEC] * j;
    break;
  case CV_ROWS: {
    int32_t nv = d[CV_TILE_V] / d[CV_VEC];
    for (int i = 0; i < TLM_N_REG_ROWS; i++) {
      int32_t r = tlm_reg_rows[i];
      if ((int64_t)r * nv > CONV_MAX_ACC || (r > 1 && tlm_reg_rows[i - 1] >= rext)) break;
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
    if (n < TLM_N_TILE_VALUES && (n == 0 || c[n - 1] < ceil_div(ext, inner))) {
      c[n] = tlm_tile_values[n];
      n++;
    }
    break;
  }
  case CV_PARALLEL:
    c[n++] = 0;
    c[n++] = 1;
    c[n++] = 2;
    /* (row, w block, C block), C-block minor: lanes along the groups only
     * (rule 23) */
    if (d[CV_AXIS] == 2) c[n++] = 3;
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

/* The rule's vectors per register tile along the vector axis: the power
 * of two of tlm_reg_tile (the fewest loads per FMA), or from rule 15 three
 * vectors where the lanes' tail makes them clearly better: each scored by
 * loads per FMA over the fraction of the tiles' lanes that hold data (a
 * partial tile counted twice, as its masked safe version costs about two:
 * reg_tile_used in space.c), three taken when the score is lower by more
 * than 15%, the cost of a 24-lane tile's tail that the score leaves out
 * (6-15% on ResNet-50's 256-2048 channels under AVX2, space.c). Before
 * rule 15, 33-48 channels took 32 + a 1-16 channel tail tile, 65-80 took
 * 64 + a tail, and 96, 144 and 240 channels 64-wide tiles and tails.
 * Measured on an Intel Xeon, AVX-512 (tlm run --vs, one thread): 3-vector
 * tiles of 8 rows 0.73 of the time at 65 output channels, 0.76 at 80,
 * 0.78 at 144, 0.79 at 96. Weighing the powers of two by their tails as
 * well was tried: under AVX2 25-31 channels took one 4-vector tile of 2
 * rows, 1.27-1.48x slower than 6 rows of 2 and a tail. */
static int conv_tile_nv(const tlm_target *tg, int64_t vext, int64_t rext, int most) {
  int rows, nv;
  tlm_reg_tile(tg, rext, most, 0, TLM_CONV_PTR_ROWS, &rows, &nv);
  if (most >= 3 && nv != 3) {
    int r3, same;
    tlm_reg_tile(tg, rext, -3, 0, TLM_CONV_PTR_ROWS, &r3, &same);
    int chains = tg->fma_chains > 0 ? tg->fma_chains : 1;
    /* loads per FMA over the lanes that hold data (tlm_reg_tile_used) */
    double s3 = (double)(r3 + 3) / (r3 * 3.0) / tlm_reg_tile_used(tg, r3, 3, 0, vext);
    double s = (double)(rows + nv) / ((double)rows * nv) / tlm_reg_tile_used(tg, rows, nv, 0, vext);
    if ((r3 * 3 >= chains || r3 * 3 >= rows * nv) && s3 * 1.15 < s) return 3;
  }
  return nv;
}

/* The rule's vectors per depthwise tile (lanes along the groups): of 1 to
 * `most` vectors of W lanes, the most whose tiles leave the smallest
 * fraction of lanes without data. A depthwise step loads a src vector per
 * FMA whatever the tile, so its time goes with the tiles' lanes, data or
 * not; a tile with a lane tail also runs the masked safe version, a tile
 * version more to compile. Before rule 16 the widest tile was taken
 * always: 144 groups on AVX-512 as 64 + 64 + 16 lanes (12 vectors of FMAs
 * for 9 of data), 3 x 48 now; 240 as 4 x 64 with 16 lanes empty, 5 x 48 now;
 * under AVX2 144 and 240 groups take 24-lane tiles. Channel counts that
 * 4 vectors divide (32-lane AVX2 or 64-lane AVX-512 multiples: 32, 64,
 * 128, 256, 384, 512, 576, 960 ...) keep 4. */
static int dw_tile_nv(int64_t vext, int W, int most) {
  int best = most;
  int64_t best_lanes = ceil_div(vext, (int64_t)most * W) * most * W;
  for (int nv = most - 1; nv >= 1; nv--) {
    int64_t lanes = ceil_div(vext, (int64_t)nv * W) * nv * W;
    if (lanes < best_lanes) best = nv, best_lanes = lanes;
  }
  return best;
}

/* Rule 23: a depthwise convolution (lanes along the groups, axis 2) run by
 * more than one worker splits its groups into channel blocks of the fewest
 * register tiles (a power of two) whose block of 8 pixel tiles holds
 * DW_BLOCK_CHANNEL_PIXELS groups x pixels, and runs its parallel loop as
 * (row, pixel block, channel block), channel blocks minor (parallel = 3).
 * Before, every group was one block (a depthwise layer's weights are KH x
 * KW floats a channel, far under the L2 bound that sizes other channel
 * blocks), so the workers shared pixel blocks alone, and a network's last
 * stages had too few: a 5x5 map was one 32-pixel block for two workers, a
 * 7x7 map blocks of 32 and 17 pixels. The map size is a run-time argument
 * of the kernel, so the rule cannot count the pixel blocks; with the
 * channel blocks minor, a worker's share of a large map is still a range
 * of pixels with all their groups (channel blocks major, so that each
 * worker read a part of every pixel, ran 0.75-0.95x at 14-128 px), and the
 * pool's chunks of a small map split its groups, the late worker taking
 * the rest (threadpool.c). The floor keeps an iteration's work above its
 * own cost (an index division and a block's set-up): smaller blocks of
 * pixels, 2 tiles for every depthwise layer, lost 3-15% where a block held
 * 128-1000 channel-pixels (32-64 groups, 28-256 px maps) and won where it
 * held 4096 or more (scripts/rule_ab.py on the Zen 4 VM, session 48:
 * docs/design.md). Measured with this rule on that VM (family 25 model
 * 17, 2 threads): rule_ab over the 60 changed depthwise record tasks, native
 * geometric mean 1.021 (5-7 px maps with 480-2304 groups 1.34-1.49x, worst
 * 0.91 at 10-20 px; one task's spread here is about 10%), AVX2 1.011; the
 * vision sample's MobileNet (60 images, 7 rounds, three alternations
 * against the rule before), depthwise layers against oneDNN's in the same
 * run 0.99-1.05 -> 1.10-1.18 natively and the whole warm pass 0.99-1.02 ->
 * 1.03-1.06, under AVX2 unchanged (0.81-0.91 either way). */
#define DW_BLOCK_CHANNEL_PIXELS 4096
/* the task's FLOPs as the rule weighs them against TLM_PARALLEL_MIN_FLOPS */
static double conv_rule_flops(const tlm_conv_task *t) {
  return 2.0 * (double)t->N * t->G * t->OCg * t->ICg * t->KD * t->KH * t->KW *
         (double)(t->OD * t->OH * t->OW);
}

static int64_t dw_c_block_tiles(int64_t c_t, int rows) {
  int64_t per_tile = c_t * (rows > 0 ? rows : 1) * 8, k = 1;
  while (k * per_tile < DW_BLOCK_CHANNEL_PIXELS) k *= 2;
  return k;
}

/* Rule 18: a convolution whose lanes run along its output channels
 * (axis 0: NHWC, or NCHW when channels per group are few) with fewer of
 * them per group than the full vector (grouped layers of 4-8 channels a
 * group, heads of 1-12 output channels) takes the narrowest vector of at
 * least 4 lanes that holds them: 8 channels as 8-lane (ymm) vectors, not
 * 16-lane ones half masked. An FMA of 8 lanes issues at the rate of one
 * of 16, so nothing is lost, and the masked loads, stores and tile version
 * of a lane tail go away. Before rule 18 every convolution took the full
 * width. Measured on an Intel Xeon (AVX-512, tlm run --vs, one thread):
 * 64 groups of 8 channels 3x3 s2 at 240 px 0.75 of the time, 128 groups of
 * 4 0.76, 4 groups of 4 at 13 px 0.74, of 5 at 5 px (8 lanes) 0.86. */

/* The rule's register tile rows over rext rows (pixels, or rows of the
 * other axis) for nv vectors, under rule version `version`: rows that leave
 * no costly tail over a short extent (a tail tile runs the safe version
 * with every row: 12 pixels as 10 + 2 ran 1.5-1.65x slower than as 12):
 * the fewest loads per FMA over the rows used (tlm_reg_rows_for_extent),
 * and from rule 22 on targets whose vectors are wider than the FMA
 * datapath (AVX-512 on Zen 4) the fewest cycles by the target's FMA and
 * load issue (tlm_reg_rows_timed), as matmul takes them (op_matmul.c,
 * mm_rule_rows_m3). Measured on the Zen 4 VM (family 25 model 17, 2
 * threads, scripts/rule_ab.py, RULE_AB_ONLY=conv: rule 22 against rule 21
 * side by side on every convolution of data/records.jsonl.gz whose rule
 * schedule changed): 52 tasks, geometric mean 1.051x, 30 faster by more
 * than 3%, 5 slower (1 -> 5 rows at 13 pixels 1.44x over 3, 6 -> 4 1.06x
 * over 15, 6 -> 5 1.01x over 21, 10 -> 8 1.05x over 6). */
static int conv_rule_rows(const tlm_target *tg, int64_t rext, int nv, int version) {
  int rows, same_nv;
  tlm_reg_tile(tg, rext, -nv, 0, TLM_CONV_PTR_ROWS, &rows, &same_nv);
  if (version >= 22 && tlm_target_double_pumped(tg)) return tlm_reg_rows_timed(tg, rext, nv, rows);
  return tlm_reg_rows_for_extent(tg, rext, nv, rows);
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
    int dw = conv_depthwise(t);
    int want = 0;
    if (dw) want = (t->unit & TLM_UNIT_CONV_DST_C) ? 2 : 1;
    else if (!(t->unit & TLM_UNIT_CONV_DST_C) && (t->unit & TLM_UNIT_CONV_DST_W)) want = 1;
    return pick_value(c, n, want);
  }
  case CV_VEC:
    /* rule 18: lanes along output channels (axis 0) that do not fill the
     * full width take the narrowest offered vector that holds them all
     * (the comment above conv_default); otherwise the full width */
    if (d[CV_AXIS] == 0 && vext < c[n - 1]) {
      for (int i = 0; i < n; i++)
        if (c[i] >= 4 && c[i] >= vext) return i;
    }
    return n - 1;
  case CV_TILE_V: {
    /* the register tile as for matmul (tlm_reg_tile): a broadcast (src
     * value, weight, or for depthwise a src vector) times nv vectors reused
     * across the tile's rows, from the register file and FMA chains */
    int64_t most = ceil_div(vext, d[CV_VEC]);
    if (most > 4) most = 4;
    /* depthwise: every FMA loads its own src vector, whatever the tile, so
     * nothing is saved by a square tile; the widest channel block (4
     * vectors, the most contiguous src reads per pixel) whose tiles waste
     * the fewest lanes (rule 16, dw_tile_nv) */
    if (d[CV_AXIS] == 2) return pick_at_most(c, n, (int64_t)dw_tile_nv(vext, d[CV_VEC], (int)most) * d[CV_VEC]);
    return pick_at_most(c, n, (int64_t)conv_tile_nv(tg, vext, rext, (int)most) * d[CV_VEC]);
  }
  case CV_ROWS: {
    int nv = d[CV_TILE_V] / d[CV_VEC];
    int64_t wvecs = (int64_t)nv * t->KD * t->KH * t->KW;
    int chains = tg->fma_chains > 0 ? tg->fma_chains : 1;
    if (d[CV_AXIS] == 2 && wvecs + (int64_t)nv * ((chains + nv - 1) / nv) + 1 <= tg->vec_regs) {
      /* depthwise whose window of weight vectors fits beside the
       * accumulators: the weights stay in registers across the tile's
       * pixels, the rest of the register file holds rows (MobileNet's
       * 32-channel 3x3 on AVX-512: 6 rows of 2 vectors + 18 weights) */
      int64_t fit = (tg->vec_regs - wvecs - 1) / nv;
      if (fit > TLM_CONV_PTR_ROWS) fit = TLM_CONV_PTR_ROWS; /* rule 15 */
      return pick_at_most(c, n, fit < rext ? fit : rext);
    }
    if (d[CV_AXIS] == 2) {
      /* depthwise, weights reloaded per tile: half the register file for
       * accumulators, the other half for the NV weight vectors of a kernel
       * column and the src vectors that neighbouring rows share across
       * kernel columns (R + KW - 1 of them per kernel row, not R x KW) */
      int64_t r = tg->vec_regs / 2 / nv;
      /* rule 15: within the rows the safe version addresses without
       * spilling (space.h); one vector of 16 channels on AVX-512 had taken
       * 16 rows here and 22 above: 10 rows ran 0.69-0.80 of their time at
       * 16 groups (3x3 s1 and s2, 5x5; tlm run --vs, Intel Xeon) */
      if (r > TLM_CONV_PTR_ROWS) r = TLM_CONV_PTR_ROWS;
      return pick_at_most(c, n, r < 1 ? 1 : r);
    }
    return pick_at_most(c, n, conv_rule_rows(tg, rext, nv, 22));
  }
  case CV_UNROLL: {
    /* the inner loop's trip count under the red_order the rule picks next;
     * an unroll that does not divide it leaves a remainder loop, measured
     * 2.5x slower on MobileNet's IC=3 stem (3 = 2 + 1): the largest of 4, 2,
     * 1 that divides the trip count */
    int64_t trip = t->ICg >= 3 || t->KW == 1 ? t->ICg : t->KW;
    int64_t u = trip % 4 == 0 ? 4 : trip % 2 == 0 ? 2 : 1;
    return pick_at_most(c, n, u);
  }
  /* the channels inner (kw outer) from 3 channels on: the RGB stems ran
   * 1.05-1.34x faster so than with the kernel columns inner (tlm run
   * --schedule, Intel Xeon, NHWC and NCHW, AVX-512 and AVX2: MobileNet's
   * 3x3 s2 104 -> 125 GFLOPS, ResNet-50's 7x7 s2 under AVX2 79 -> 93) */
  case CV_RED_ORDER: return t->ICg >= 3 || t->KW == 1 ? 0 : 1;
  case CV_TILE_C2: {
    int64_t c_t, w_t, c_ext;
    tlm_conv_tile_dims(&s->task, d, &c_t, &w_t, &c_ext);
    int64_t per_c = (int64_t)t->ICg * t->KD * t->KH * t->KW * 4; /* weight bytes per channel */
    if (d[CV_AXIS] == 2) per_c *= t->OCg;
    int64_t fit = (l2 / 2) / (per_c * c_t);
    if (d[CV_AXIS] == 2 && workers > 1 && conv_rule_flops(t) >= TLM_PARALLEL_MIN_FLOPS) {
      /* (only when the rule runs a parallel loop: CV_PARALLEL) */
      int64_t k = dw_c_block_tiles(c_t, d[CV_ROWS]);
      if (k < fit) fit = k;
    }
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
    if (conv_rule_flops(t) < TLM_PARALLEL_MIN_FLOPS) return 0;
    /* depthwise: pixel blocks major, channel blocks minor (rule 23,
     * dw_c_block_tiles) */
    if (d[CV_AXIS] == 2) return pick_value(c, n, 3);
    /* rows x C blocks, C-block major; with one C block the same as rows
     * alone, and a choice that does not depend on the image size */
    return 2;
  }
  default: return 0;
  }
}


/* version 3: depthwise convolutions' rows and kernels; 10: the 3-channel
 * windows (RGB stems) whose red_order changed (space.h); 2 for the rest */
/* Whether rule 22 changed the task's tile rows on target tg
 * (conv_rule_rows): the rule's own axis and tile, then the rows under
 * rules 21 and 22; a NULL target: any convolution may have, but a
 * depthwise one (its rows come from the register file alone). */
static int conv_rows_changed_22(const tlm_task *task, const tlm_target *tg) {
  const tlm_conv_task *t = &task->u.conv;
  if (conv_depthwise(t)) return 0;
  if (!tg) return 1;
  tlm_space s;
  tlm_schedule d;
  if (!tlm_rule22_default(task, tg, &s, &d)) return 0;
  if (d.v[CV_AXIS] == 2 || d.v[CV_VEC] <= 0) return 0;
  int64_t vext, rext;
  conv_axis_extents(t, d.v[CV_AXIS], &vext, &rext);
  int nv = d.v[CV_TILE_V] / d.v[CV_VEC];
  return conv_rule_rows(&s.target, rext, nv, 21) != conv_rule_rows(&s.target, rext, nv, 22);
}

/* Whether rule 23 changed the task's schedule on target tg: an NHWC
 * depthwise convolution (the rule's lanes along the groups) with a
 * parallel loop, i.e. more than one worker (any, with a NULL target) and
 * at least TLM_PARALLEL_MIN_FLOPS */
static int conv_dw_blocks_23(const tlm_conv_task *t, const tlm_target *tg) {
  if (!conv_depthwise(t) || !(t->unit & TLM_UNIT_CONV_DST_C)) return 0;
  return (!tg || tg->threads > 1) && conv_rule_flops(t) >= TLM_PARALLEL_MIN_FLOPS;
}

static int conv_rule_version(const tlm_task *task, const tlm_target *tg) {
  const tlm_conv_task *t = &task->u.conv;
  if (conv_dw_blocks_23(t, tg)) return 23; /* channel blocks minor for the workers */
  if (conv_rows_changed_22(task, tg)) return 22; /* rows by cycles (conv_rule_rows) */
  /* depthwise: 3, and 15 where one AVX-512 vector holds the groups (<= 16)
   * and more than TLM_CONV_PTR_ROWS rows were possible */
  if (conv_depthwise(t)) {
    /* 16 where the lanes' tail picks a narrower tile (dw_tile_nv) under
     * either x86 width (AVX-512 16 lanes, AVX2 8): the model's prompt does
     * not name the lanes' waste, and its records had 4-vector tiles;
     * NHWC only (NCHW puts the lanes along ow) */
    for (int W = 8; W <= 16 && (t->unit & TLM_UNIT_CONV_DST_C); W *= 2) {
      int64_t most = ceil_div(t->G, W);
      if (most > 4) most = 4;
      if (dw_tile_nv(t->G, W, (int)most) != most) return 16;
    }
    return t->G <= 16 && conv_wext(t, 2) > TLM_CONV_PTR_ROWS ? 15 : 3;
  }
  /* 15: at most TLM_CONV_PTR_ROWS tile rows; the rule's tile changes
   * where more rows were possible: at most 48 lanes on the vector axis (2
   * AVX-512 vectors, or 1 of AVX2) and more rows than the bound. The axis
   * as the rule picks it (conv_default, CV_AXIS) */
  int axis = !(t->unit & TLM_UNIT_CONV_DST_C) && (t->unit & TLM_UNIT_CONV_DST_W) ? 1 : 0;
  int64_t vext, rext;
  conv_axis_extents(t, axis, &vext, &rext);
  /* 18: channels along the lanes fewer than an AVX-512 vector's 16 (rule
   * 18's narrow vectors; AVX2's 8 are within) */
  if (axis == 0 && vext < 16) return 18;
  if (vext <= 48 && rext > TLM_CONV_PTR_ROWS) return 15;
  /* and three vectors for the lanes' tail (conv_tile_nv): never where 4
   * AVX-512 vectors (and so 2 AVX2 ones) divide the axis; the rows for a
   * short extent's tail: under 128 rows */
  if (vext % 64 != 0 || rext < 128) return 15;
  return t->ICg == 3 && t->KW > 1 ? 10 : 2;
}

static double conv_flops(const tlm_task *t) {
  /* every window position, padding included (benchdnn counts only the
   * in-bounds ones) */
  const tlm_conv_task *c = &t->u.conv;
  return 2.0 * (double)c->N * c->G * c->OCg * c->ICg * c->KD * c->KH * c->KW *
         (double)c->OD * (double)c->OH * (double)c->OW;
}

static void conv_str(const tlm_task *t, char *buf, int cap) {
  static const char *acts[] = {"", "_relu", "_gelu", "_silu", "_relu6"};
  /* benchdnn descriptor (dilation as dh = factor - 1) */
  const tlm_conv_task *c = &t->u.conv;
  char sp[200];
  if (c->ndim_sp == 3 || c->ID > 1 || c->KD > 1)
    snprintf(sp, sizeof sp, "id%lldih%lldiw%lld_oc%dod%lldoh%lldow%lld_kd%dkh%dkw%d_sd%dsh%dsw%d"
             "_pd%dph%dpw%d_dd%ddh%ddw%d", (long long)c->ID, (long long)c->IH, (long long)c->IW,
             c->G * c->OCg, (long long)c->OD, (long long)c->OH, (long long)c->OW, c->KD, c->KH,
             c->KW, c->sd, c->sh, c->sw, c->pd, c->ph, c->pw, c->dd - 1, c->dh - 1, c->dw - 1);
  else
    snprintf(sp, sizeof sp, "ih%lldiw%lld_oc%doh%lldow%lld_kh%dkw%d_sh%dsw%d_ph%dpw%d_dh%ddw%d",
             (long long)c->IH, (long long)c->IW, c->G * c->OCg, (long long)c->OH,
             (long long)c->OW, c->KH, c->KW, c->sh, c->sw, c->ph, c->pw, c->dh - 1, c->dw - 1);
  char blocks[32] = "";
  if (c->oc_blocks > 1) /* channel blocks: the caller's OC, in blocks of OCg */
    snprintf(blocks, sizeof blocks, "_ocblocks%dx%d", c->oc_blocks, c->OCg);
  snprintf(buf, (size_t)cap, "g%dmb%lldic%d%s%s%s%s%s%s%s%s", c->G, (long long)c->N,
           c->G * c->ICg, sp, c->has_bias ? "_bias" : "", c->has_ss ? "_bn" : "",
           c->has_residual ? "_residual" : "", (c->act > 0 && c->act < 5) ? acts[c->act] : "",
           (c->unit & TLM_UNIT_CONV_DST_C) && !(c->unit & TLM_UNIT_CONV_DST_W) ? "_nhwc" : "",
           (c->unit & TLM_UNIT_CONV_WEI_O) && c->G * c->OCg > 1 ? "_hwio" : "", blocks);
}

static void conv_clear_runtime(tlm_task *t) {
  /* N, spatial extents, strides */
  tlm_conv_task *c = &t->u.conv;
  c->N = c->ID = c->IH = c->IW = c->OD = c->OH = c->OW = 0;
  memset(c->ss, 0, sizeof c->ss);
  memset(c->sw_, 0, sizeof c->sw_);
  memset(c->sdst, 0, sizeof c->sdst);
  memset(c->sr, 0, sizeof c->sr);
  c->sbias = c->sscale = c->sshift = 0;
  c->ndim_sp = 0;
}

static int64_t conv_parallel_iterations(const tlm_task *task, const tlm_schedule *s,
                                        const ln_nest *nest, int64_t workers) {
  (void)workers;
  (void)nest;
  return tlm_conv_parallel_count(task, s->v);
}

static double conv_extent_distance(const tlm_task *a, const tlm_task *b) {
  return log_gap(TLM_OUT_PIXELS(&a->u.conv), TLM_OUT_PIXELS(&b->u.conv));
}

const tlm_family tlm_family_conv = {
    .name = "conv",
    .points = k_conv_points,
    .npoints = CV_NPOINTS,
    .candidates = conv_candidates,
    .rule = conv_default,
    .rule_version = conv_rule_version,
    .flops = conv_flops,
    .str = conv_str,
    .clear_runtime = conv_clear_runtime,
    .parallel_count = conv_parallel_iterations,
    .extent_distance = conv_extent_distance,
};
