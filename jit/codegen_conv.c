/* codegen_conv.c - convolution (CV_* decisions) and pooling (PL_*)
 * schedules -> LLVM IR.
 *
 * Direct convolution with register tiles over the (C axis x ow) plane of
 * one output row; see the CV_* comment in runtime/space.h for the loop
 * structure and the three vector axes. No data is repacked: src, weights
 * and dst are read through their run-time strides, and the unit-stride
 * class of the task decides where vector loads and stores are contiguous.
 *
 * Tails and padding: a register tile exists in two versions. The fast
 * one runs when the tile is full in both axes and every input column it
 * reads lies inside the input row; it has no masks and no bounds checks
 * (tiles with a long reduction have no fast version: emit_tile).
 * The safe one clamps row indices to valid rows, masks lanes outside the
 * block, reads 0 for input positions in the padding (never touching their
 * addresses) and stores only valid rows and lanes; with the lanes along C
 * it comes twice, without lane masks when the tile's C lanes are all valid
 * (image edges and pixel tails of full channel blocks), and with them.
 */
#include "codegen.h"

#include "cg_common.h"
#include "../runtime/space.h"

#define CONV_ACC_MAX 32 /* == CONV_MAX_ACC in space.c */
#define CONV_COLS_MAX 256
#define CONV_UNROLL_FMAS 512 /* vector FMAs of a tile's window emitted inline at most */

typedef struct conv_cg {
  cg g;
  const tlm_conv_task *t;
  int axis, W, NV, R, U, red_order, order, par;
  int64_t c_t, w_t, c_ext, cblk, wblk;
  LLVMValueRef src, wei, dst, bias, scale, shift, res;
  LLVMValueRef N, ID, IH, IW, OD, OH, OW;
  LLVMValueRef ss[5], sw[5], sd[5], sr[5], sbias, sscale, sshift;
  /* flat: the tile rows run over the (oh, ow) plane flattened (lane axes
   * oc and g); otherwise over ow within one output row (lanes along ow) */
  int flat, plane;
  LLVMValueRef wext; /* extent of the w axis: OH * OW (flat) or OW */
  /* the current row */
  LLVMValueRef n, other, od, oh;
  /* the current tile; flat: the output row and column of each tile row */
  LLVMValueRef c0, w0, c_end, w_end;
  /* runs_version: the end of the current run (rows at or past it are not
   * stored); NULL elsewhere */
  LLVMValueRef row_end;
  LLVMValueRef ohr[CONV_ACC_MAX], owr[CONV_ACC_MAX];
  LLVMValueRef ohu[CONV_ACC_MAX], owu[CONV_ACC_MAX]; /* unclamped (emit_tile) */
  LLVMValueRef oh_last, ow_last; /* the block's last pixel (emit_block; flat) */
  int safe;
  /* a window of at most CONV_UNROLL_FMAS FMAs per tile (KH x KW x ICg
   * steps of R x NV): each kernel row's kw and icg steps emitted unrolled
   * (kh stays a loop) */
  int window_unrolled;
  /* a safe version of a tile whose rows are all valid: ohu/owu as they
   * are (no clamping) */
  int rows_given;
  /* safe version whose C-axis lanes (axes 0 and 2) are all valid: rows are
   * clamped and padding read as 0, but vectors load and store whole */
  int lanes_full;
  /* tiles with only the safe version (only_safe, emit_tile) and padding
   * along ow: the flattened plane in another pixel order (edges apart,
   * pixel_of), so that no tile of the interior columns reads the left or
   * right padding and a tile down an edge column skips its padded kernel
   * columns whole (kernel_row). pL: the left edge columns (those whose
   * window starts in the padding), pR0: the first right edge column, pWd:
   * the interior width (at least 1, a divisor), pInt: the interior's
   * pixels (OH x interior width), pOH: OH (at least 1) */
  int only_safe, perm;
  LLVMValueRef pL, pR0, pWd, pInt, pOH;
  LLVMValueRef p_oh, p_ow; /* perm: the tile's rows' pixels, R + 1 each (allocas; emit_tile) */
  /* the current safe tile's bounds on its rows' output rows, and the
   * kernel columns [kw_lo, kw_hi) that some row reads inside the input
   * (perm: rows are not in raster order; tile_version) */
  LLVMValueRef oh_lo, oh_hi, kw_lo, kw_hi;
  /* a zeroed global of IC floats: in the safe version, tile rows whose
   * input pixel lies in the padding read from it instead of src, so the
   * inner loop needs no select (NULL: selects instead) */
  LLVMValueRef zeros;
  /* safe one-row versions with a row pointer: the pointer to each input
   * column j = r * sw + kw * dw of the current kernel row (the zero page's
   * where the column lies in the padding), made once per kernel row and
   * shared by every (r, kw) that reads it (NULL: not made yet); kw_c: the
   * unrolled kw */
  int kw_c;
  LLVMValueRef colp[CONV_COLS_MAX];
  /* one-row versions with the window unrolled (row_pointer): the input
   * pixel (ih0 + kh * dh, iw0) of the current kernel row, a pointer
   * stepped by dh input rows per kernel row (rowp_slot: its alloca), and
   * the tile's first input column iw0 */
  int row_pointer, row_pointers; /* row_pointers: for every one-row version */
  LLVMValueRef rowp, rowp_slot, iw0;
  /* and the weights of the current kernel row (kd, kh) of the row's
   * channel block, stepped by one kernel row (wrowp_slot: its alloca) */
  LLVMValueRef wrowp, wrowp_slot;
  LLVMValueRef acc[CONV_ACC_MAX];
  /* reduction position inside the tile */
  LLVMValueRef xoff, woff, kh, kw, icg;
} conv_cg;

/* 0 <= i < n as one unsigned compare */
static LLVMValueRef in_range(cg *g, LLVMValueRef i, LLVMValueRef n) {
  return LLVMBuildICmp(g->b, LLVMIntULT, i, n, "");
}

static LLVMValueRef fma_v(cg *g, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c, int w) {
  LLVMTypeRef vt = vtype(g, w);
  LLVMValueRef args[3] = {a, b, c};
  return call_intrinsic(g, "llvm.fmuladd", &vt, 1, args, 3);
}

/* global channel of the current row's group / C-axis index c */
static LLVMValueRef group_of_row(conv_cg *cc) { return cc->other; }

/* ---- one reduction step (kw, icg) of the register tile ---------------------------- */

/* input column of tile row / lane position ow */
static LLVMValueRef iw_of(conv_cg *cc, LLVMValueRef ow) {
  cg *g = &cc->g;
  const tlm_conv_task *t = cc->t;
  return add(g, sub(g, mul(g, ow, c64(g, t->sw)), c64(g, t->pw)), mul(g, cc->kw, c64(g, t->dw)));
}

/* Offset (elements, from cc->xoff) of tile row r's input pixel for the
 * current (kh, kw); in the safe version *ok says whether it lies inside
 * the input (the offset is then 0, a valid address, when it does not). */
static LLVMValueRef row_src(conv_cg *cc, int r, LLVMValueRef *ok) {
  cg *g = &cc->g;
  const tlm_conv_task *t = cc->t;
  *ok = NULL;
  LLVMValueRef off, valid = NULL;
  if (cc->flat) {
    LLVMValueRef ih = add(g, sub(g, mul(g, cc->ohr[r], c64(g, t->sh)), c64(g, t->ph)),
                          mul(g, cc->kh, c64(g, t->dh)));
    LLVMValueRef iw = iw_of(cc, cc->owr[r]);
    off = add(g, mul(g, ih, cc->ss[3]), mul(g, iw, cc->ss[4]));
    if (cc->safe)
      valid = LLVMBuildAnd(g->b, in_range(g, ih, cc->IH), in_range(g, iw, cc->IW), "");
  } else {
    LLVMValueRef ow = add(g, cc->w0, c64(g, r));
    if (cc->safe) ow = smin(g, ow, sub(g, cc->w_end, c64(g, 1)));
    LLVMValueRef iw = iw_of(cc, ow);
    off = mul(g, iw, cc->ss[4]);
    if (cc->safe) valid = in_range(g, iw, cc->IW);
  }
  if (valid) {
    off = LLVMBuildSelect(g->b, valid, off, c64(g, 0), "");
    *ok = valid;
  }
  return off;
}

/* Pointer to tile row r's input pixel at channel `chan` (elements past
 * xoff + off); with the zero page, padding rows point into it instead, and
 * *ok comes back NULL (nothing left to select). */
static LLVMValueRef row_ptr(conv_cg *cc, int r, LLVMValueRef chan, LLVMValueRef *ok) {
  cg *g = &cc->g;
  if (cc->row_pointer) {
    /* input column j = r * sw + kw * dw of the tile's first one, at a
     * constant offset from the kernel row's pointer where the pixel
     * stride is one (channels-last): no address arithmetic per window
     * step, and no loop strength reduction needed to get there */
    const tlm_conv_task *t = cc->t;
    int j = r * t->sw + cc->kw_c * t->dw;
    LLVMValueRef p = gep(g, cc->rowp, mul(g, c64(g, j), cc->ss[4]));
    *ok = NULL;
    if (cc->safe) {
      /* the kernel row lies inside the input for all rows (kernel_row
       * skips it otherwise): only the column is checked, once per column
       * and kernel row, shared by every (r, kw) that reads it */
      if (!cc->colp[j])
        cc->colp[j] = LLVMBuildSelect(g->b, in_range(g, add(g, cc->iw0, c64(g, j)), cc->IW), p,
                                      cc->zeros, "");
      p = cc->colp[j];
    }
    return gep(g, p, chan);
  }
  LLVMValueRef off = row_src(cc, r, ok);
  LLVMValueRef p = gep(g, cc->src, add(g, add(g, cc->xoff, off), chan));
  if (*ok && cc->zeros) {
    p = LLVMBuildSelect(g->b, *ok, p, cc->zeros, "");
    *ok = NULL;
  }
  return p;
}

/* src scalar (axis 0) at tile row r, channel offset `chan`: 0 in the padding */
static LLVMValueRef src_scalar(conv_cg *cc, LLVMValueRef chan, LLVMValueRef icg_off, int r) {
  cg *g = &cc->g;
  LLVMValueRef ok;
  LLVMValueRef p = row_ptr(cc, r, chan, &ok);
  LLVMValueRef v = load(g, g->f32, gep(g, p, icg_off), 4);
  return ok ? LLVMBuildSelect(g->b, ok, v, LLVMConstReal(g->f32, 0.0), "") : v;
}

/* lane mask of C-axis lanes [start, start + W) below c_end */
static LLVMValueRef c_mask(conv_cg *cc, LLVMValueRef start) {
  if (!cc->safe || cc->lanes_full) return NULL;
  return lane_mask(&cc->g, 0, cc->W, sub(&cc->g, cc->c_end, start));
}

static void step(conv_cg *cc) {
  cg *g = &cc->g;
  const tlm_conv_task *t = cc->t;
  int W = cc->W;
  LLVMTypeRef vt = vtype(g, W);
  LLVMValueRef kwoff = mul(g, cc->kw, cc->sw[4]);
  if (cc->axis == 0) {
    /* broadcast src value per ow row x weight vector along oc */
    LLVMValueRef grp = group_of_row(cc);
    LLVMValueRef chan = mul(g, mul(g, grp, c64(g, t->ICg)), cc->ss[1]);
    LLVMValueRef icg_off = mul(g, cc->icg, cc->ss[1]);
    LLVMValueRef wb = gep(g, cc->wei, add(g, add(g, cc->woff, kwoff),
                                          add(g, mul(g, mul(g, grp, c64(g, t->OCg)), cc->sw[0]),
                                              mul(g, cc->icg, cc->sw[1]))));
    LLVMValueRef wv[4];
    for (int v = 0; v < cc->NV; v++) {
      LLVMValueRef start = add(g, cc->c0, c64(g, (int64_t)v * W));
      wv[v] = load_lanes(g, wb, start, (t->unit & TLM_UNIT_CONV_WEI_O) != 0, cc->sw[0], W,
                         c_mask(cc, start), sub(g, cc->c_end, c64(g, 1)));
    }
    for (int r = 0; r < cc->R; r++) {
      LLVMValueRef a = splat(g, src_scalar(cc, chan, icg_off, r), W);
      for (int v = 0; v < cc->NV; v++) {
        LLVMValueRef slot = cc->acc[r * cc->NV + v];
        LLVMBuildStore(g->b, fma_v(g, a, wv[v], LLVMBuildLoad2(g->b, vt, slot, ""), W), slot);
      }
    }
    return;
  }
  if (cc->axis == 1) {
    /* broadcast weight per oc row x src vector along ow */
    LLVMValueRef grp = group_of_row(cc);
    LLVMValueRef ic = add(g, mul(g, grp, c64(g, t->ICg)), cc->icg);
    LLVMValueRef xb = gep(g, cc->src, add(g, cc->xoff, mul(g, ic, cc->ss[1])));
    LLVMValueRef xv[4];
    int contiguous = t->sw == 1 && (t->unit & TLM_UNIT_CONV_SRC_W);
    for (int v = 0; v < cc->NV; v++) {
      LLVMValueRef ow0 = add(g, cc->w0, c64(g, (int64_t)v * W));
      LLVMValueRef iw0 = iw_of(cc, ow0);
      if (contiguous && !cc->safe) {
        xv[v] = load(g, vt, gep(g, xb, iw0), 4);
        continue;
      }
      /* lanes: iw = iw0 + l * sw, valid inside the row and below w_end */
      LLVMTypeRef vi = LLVMVectorType(g->i64, (unsigned)W);
      LLVMValueRef swv[16];
      for (int l = 0; l < W; l++) swv[l] = c64(g, (int64_t)l * t->sw);
      LLVMValueRef iwv = LLVMBuildAdd(g->b, LLVMConstVector(swv, (unsigned)W),
                                      LLVMBuildShuffleVector(
                                          g->b,
                                          LLVMBuildInsertElement(g->b, LLVMGetUndef(vi), iw0,
                                                                 c32(g, 0), ""),
                                          LLVMGetUndef(vi),
                                          LLVMConstNull(LLVMVectorType(g->i32, (unsigned)W)), ""),
                                      "");
      LLVMValueRef mask = NULL;
      if (cc->safe && cc->plane) { /* no padding: only the block's tail */
        mask = lane_mask(g, 0, W, sub(g, cc->w_end, ow0));
      } else if (cc->safe) {
        LLVMValueRef iwlim = LLVMBuildShuffleVector(
            g->b, LLVMBuildInsertElement(g->b, LLVMGetUndef(vi), cc->IW, c32(g, 0), ""),
            LLVMGetUndef(vi), LLVMConstNull(LLVMVectorType(g->i32, (unsigned)W)), "");
        mask = LLVMBuildICmp(g->b, LLVMIntULT, iwv, iwlim, "");
        mask = LLVMBuildAnd(g->b, mask, lane_mask(g, 0, W, sub(g, cc->w_end, ow0)), "");
      }
      if (contiguous) { /* safe: a masked contiguous load */
        LLVMTypeRef ovl[2] = {vt, g->ptr};
        LLVMValueRef args[4] = {gep(g, xb, iw0), c32(g, 4), mask, LLVMConstNull(vt)};
        xv[v] = call_intrinsic(g, "llvm.masked.load", ovl, 2, args, 4);
        continue;
      }
      if (t->sw <= 4 && (t->unit & TLM_UNIT_CONV_SRC_W)) {
        /* stride 2..4 with unit-stride input columns: one wide masked load
         * of S*W elements with only every S-th enabled (nothing past the
         * last lane is touched), then a shuffle picks them: no gather */
        int S = t->sw, SW = S * W;
        LLVMTypeRef wt = vtype(g, SW);
        LLVMValueRef em[64], idxs[64], pick[16];
        for (int j = 0; j < SW; j++) {
          em[j] = LLVMConstInt(g->i1, j % S == 0, 0);
          idxs[j] = c32(g, j / S);
        }
        LLVMValueRef wmask = LLVMConstVector(em, (unsigned)SW);
        if (mask) /* lane l's validity onto element l * S */
          wmask = LLVMBuildAnd(g->b, wmask,
                               LLVMBuildShuffleVector(g->b, mask, LLVMGetUndef(LLVMTypeOf(mask)),
                                                      LLVMConstVector(idxs, (unsigned)SW), ""),
                               "");
        LLVMTypeRef ovl[2] = {wt, g->ptr};
        LLVMValueRef args[4] = {gep(g, xb, iw0), c32(g, 4), wmask, LLVMConstNull(wt)};
        LLVMValueRef wide = call_intrinsic(g, "llvm.masked.load", ovl, 2, args, 4);
        for (int l = 0; l < W; l++) pick[l] = c32(g, l * S);
        xv[v] = LLVMBuildShuffleVector(g->b, wide, LLVMGetUndef(wt),
                                       LLVMConstVector(pick, (unsigned)W), "");
        continue;
      }
      LLVMValueRef sv = LLVMBuildShuffleVector(
          g->b, LLVMBuildInsertElement(g->b, LLVMGetUndef(vi), cc->ss[4], c32(g, 0), ""),
          LLVMGetUndef(vi), LLVMConstNull(LLVMVectorType(g->i32, (unsigned)W)), "");
      LLVMValueRef idx = LLVMBuildMul(g->b, iwv, sv, "");
      LLVMValueRef ptrs = LLVMBuildGEP2(g->b, g->f32, xb, &idx, 1, "");
      if (!mask) {
        LLVMValueRef ones[16];
        for (int l = 0; l < W; l++) ones[l] = LLVMConstInt(g->i1, 1, 0);
        mask = LLVMConstVector(ones, (unsigned)W);
      }
      LLVMTypeRef ovl[2] = {vt, LLVMVectorType(g->ptr, (unsigned)W)};
      LLVMValueRef args[4] = {ptrs, c32(g, 4), mask, LLVMConstNull(vt)};
      xv[v] = call_intrinsic(g, "llvm.masked.gather", ovl, 2, args, 4);
    }
    LLVMValueRef wb = gep(g, cc->wei, add(g, add(g, cc->woff, kwoff), mul(g, cc->icg, cc->sw[1])));
    LLVMValueRef oc_base = mul(g, grp, c64(g, t->OCg));
    for (int r = 0; r < cc->R; r++) {
      LLVMValueRef oc = add(g, cc->c0, c64(g, r));
      if (cc->safe) oc = smin(g, oc, sub(g, cc->c_end, c64(g, 1)));
      LLVMValueRef w = load(g, g->f32, gep(g, wb, mul(g, add(g, oc_base, oc), cc->sw[0])), 4);
      LLVMValueRef a = splat(g, w, W);
      for (int v = 0; v < cc->NV; v++) {
        LLVMValueRef slot = cc->acc[r * cc->NV + v];
        LLVMBuildStore(g->b, fma_v(g, a, xv[v], LLVMBuildLoad2(g->b, vt, slot, ""), W), slot);
      }
    }
    return;
  }
  /* axis 2: src vector along groups x weight vector along groups */
  LLVMValueRef ocg = cc->other;
  LLVMValueRef wb =
      cc->row_pointer
          ? gep(g, cc->wrowp, add(g, kwoff, mul(g, cc->icg, cc->sw[1])))
          : gep(g, cc->wei, add(g, add(g, cc->woff, kwoff),
                                add(g, mul(g, ocg, cc->sw[0]), mul(g, cc->icg, cc->sw[1]))));
  LLVMValueRef wstride = mul(g, c64(g, t->OCg), cc->sw[0]);
  int wunit = t->OCg == 1 && (t->unit & TLM_UNIT_CONV_WEI_O);
  LLVMValueRef xstride = mul(g, c64(g, t->ICg), cc->ss[1]);
  int xunit = t->ICg == 1 && (t->unit & TLM_UNIT_CONV_SRC_C);
  LLVMValueRef wv[4];
  for (int v = 0; v < cc->NV; v++) {
    LLVMValueRef start = add(g, cc->c0, c64(g, (int64_t)v * W));
    wv[v] = load_lanes(g, wb, start, wunit, wstride, W, c_mask(cc, start),
                       sub(g, cc->c_end, c64(g, 1)));
  }
  for (int r = 0; r < cc->R; r++) {
    LLVMValueRef ok;
    LLVMValueRef xb = gep(g, row_ptr(cc, r, c64(g, 0), &ok), mul(g, cc->icg, cc->ss[1]));
    for (int v = 0; v < cc->NV; v++) {
      LLVMValueRef start = add(g, cc->c0, c64(g, (int64_t)v * W));
      LLVMValueRef xv = load_lanes(g, xb, start, xunit, xstride, W, c_mask(cc, start),
                                   sub(g, cc->c_end, c64(g, 1)));
      if (ok) xv = LLVMBuildSelect(g->b, ok, xv, LLVMConstNull(vt), "");
      LLVMValueRef slot = cc->acc[r * cc->NV + v];
      LLVMBuildStore(g->b, fma_v(g, xv, wv[v], LLVMBuildLoad2(g->b, vt, slot, ""), W), slot);
    }
  }
}

/* for (i = 0; i < trip; i++) with the body unrolled U times; the body sees
 * the index through *iv */
static void unrolled(conv_cg *cc, int64_t trip, int U, LLVMValueRef *iv) {
  cg *g = &cc->g;
  int64_t full = trip / U * U;
  if (full > 0) {
    loop L;
    LLVMValueRef i = loop_begin(g, &L, c64(g, 0), c64(g, full), c64(g, U));
    for (int u = 0; u < U; u++) {
      *iv = add(g, i, c64(g, u));
      step(cc);
    }
    loop_end(g, &L);
  }
  if (trip > full) {
    loop L;
    *iv = loop_begin(g, &L, c64(g, full), c64(g, trip), c64(g, 1));
    step(cc);
    loop_end(g, &L);
  }
}

/* ---- the register tile -------------------------------------------------------------- */

static void epilogue_store(conv_cg *cc) {
  cg *g = &cc->g;
  const tlm_conv_task *t = cc->t;
  int W = cc->W;
  LLVMTypeRef vt = vtype(g, W);
  int vunit = (t->unit & TLM_UNIT_CONV_VEC) != 0;
  LLVMValueRef base_d = add(g, mul(g, cc->n, cc->sd[0]), mul(g, cc->od, cc->sd[2]));
  LLVMValueRef base_r = add(g, mul(g, cc->n, cc->sr[0]), mul(g, cc->od, cc->sr[2]));
  for (int r = 0; r < cc->R; r++) {
    /* dst/residual offset of the row's pixel (flat) or output row */
    LLVMValueRef rowoff_d, rowoff_r;
    if (cc->plane) { /* lanes carry the pixel: p * stride_w = its offset in the plane */
      rowoff_d = base_d;
      rowoff_r = base_r;
    } else if (cc->flat) {
      rowoff_d = add(g, base_d, add(g, mul(g, cc->ohr[r], cc->sd[3]), mul(g, cc->owr[r], cc->sd[4])));
      rowoff_r = add(g, base_r, add(g, mul(g, cc->ohr[r], cc->sr[3]), mul(g, cc->owr[r], cc->sr[4])));
    } else {
      rowoff_d = add(g, base_d, mul(g, cc->oh, cc->sd[3]));
      rowoff_r = add(g, base_r, mul(g, cc->oh, cc->sr[3]));
    }
    LLVMBasicBlockRef join = NULL;
    LLVMValueRef rowpos = add(g, (cc->axis == 1 ? cc->c0 : cc->w0), c64(g, r));
    if (cc->safe)
      join = if_begin(g, LLVMBuildICmp(g->b, LLVMIntSLT, rowpos,
                                       cc->axis == 1  ? cc->c_end
                                       : cc->row_end ? cc->row_end
                                                     : cc->w_end,
                                       ""));
    for (int v = 0; v < cc->NV; v++) {
      LLVMValueRef x = LLVMBuildLoad2(g->b, vt, cc->acc[r * cc->NV + v], "");
      LLVMValueRef start = add(g, (cc->axis == 1 ? cc->w0 : cc->c0), c64(g, (int64_t)v * W));
      LLVMValueRef mask = NULL, nlast = NULL;
      if (cc->safe && !cc->lanes_full) {
        LLVMValueRef lim = cc->axis == 1 ? cc->w_end : cc->c_end;
        mask = lane_mask(g, 0, W, sub(g, lim, start));
        nlast = sub(g, lim, c64(g, 1));
      }
      /* per-lane (vector) or per-row (scalar) channel parameters */
      LLVMValueRef pv[3] = {cc->bias, cc->scale, cc->shift};
      LLVMValueRef ps[3] = {cc->sbias, cc->sscale, cc->sshift};
      int present[3] = {t->has_bias, t->has_ss, t->has_ss};
      LLVMValueRef val[3] = {NULL, NULL, NULL};
      for (int i = 0; i < 3; i++) {
        if (!present[i]) continue;
        if (cc->axis == 0) {
          LLVMValueRef base = gep(g, pv[i], mul(g, mul(g, cc->other, c64(g, t->OCg)), ps[i]));
          val[i] = load_lanes(g, base, start, vunit, ps[i], W, mask, nlast);
        } else if (cc->axis == 1) {
          LLVMValueRef oc = add(g, mul(g, cc->other, c64(g, t->OCg)), rowpos);
          val[i] = splat(g, load(g, g->f32, gep(g, pv[i], mul(g, oc, ps[i])), 4), W);
        } else {
          LLVMValueRef base = gep(g, pv[i], mul(g, cc->other, ps[i]));
          val[i] = load_lanes(g, base, start, vunit && t->OCg == 1,
                              mul(g, c64(g, t->OCg), ps[i]), W, mask, nlast);
        }
      }
      if (val[0]) x = LLVMBuildFAdd(g->b, x, val[0], "");
      if (val[1]) x = fma_v(g, x, val[1], val[2], W);
      /* dst / residual addressing: row part + lane part */
      LLVMValueRef offd, offr, lstride_d, lstride_r;
      int ud, ur;
      if (cc->axis == 0) {
        LLVMValueRef cb = mul(g, cc->other, c64(g, t->OCg));
        offd = add(g, rowoff_d, mul(g, cb, cc->sd[1]));
        offr = add(g, rowoff_r, mul(g, cb, cc->sr[1]));
        lstride_d = cc->sd[1], lstride_r = cc->sr[1];
        ud = ur = (t->unit & TLM_UNIT_CONV_DST_C) != 0;
      } else if (cc->axis == 1) {
        LLVMValueRef oc = add(g, mul(g, cc->other, c64(g, t->OCg)), rowpos);
        offd = add(g, rowoff_d, mul(g, oc, cc->sd[1]));
        offr = add(g, rowoff_r, mul(g, oc, cc->sr[1]));
        lstride_d = cc->sd[4], lstride_r = cc->sr[4];
        ud = ur = (t->unit & TLM_UNIT_CONV_DST_W) != 0;
      } else {
        offd = add(g, rowoff_d, mul(g, cc->other, cc->sd[1]));
        offr = add(g, rowoff_r, mul(g, cc->other, cc->sr[1]));
        lstride_d = mul(g, c64(g, t->OCg), cc->sd[1]);
        lstride_r = mul(g, c64(g, t->OCg), cc->sr[1]);
        ud = ur = t->OCg == 1 && (t->unit & TLM_UNIT_CONV_DST_C) != 0;
      }
      if (t->has_residual) {
        LLVMValueRef rv = load_lanes(g, gep(g, cc->res, offr), start, ur, lstride_r, W, mask, nlast);
        x = LLVMBuildFAdd(g->b, x, rv, "");
      }
      x = apply_activation(g, x, t->act, W);
      store_lanes(g, x, gep(g, cc->dst, offd), start, ud, lstride_d, W, mask);
    }
    if (join) if_end(g, join);
  }
}

/* the reduction over one kernel row kh (input plane id): kw x icg steps,
 * as loops, or every step inline when the window is small (see
 * window_unrolled) */
static void kernel_row(conv_cg *cc, LLVMValueRef kd, LLVMValueRef id, LLVMValueRef kh) {
  cg *g = &cc->g;
  const tlm_conv_task *t = cc->t;
  cc->kh = kh;
  LLVMBasicBlockRef jh = NULL;
  if (cc->row_pointer) {
    cc->rowp = LLVMBuildLoad2(g->b, g->ptr, cc->rowp_slot, "");
    cc->wrowp = LLVMBuildLoad2(g->b, g->ptr, cc->wrowp_slot, "");
  }
  cc->xoff = add(g, mul(g, cc->n, cc->ss[0]), mul(g, id, cc->ss[2]));
  if (!cc->flat) { /* one output row: skip kernel rows in the padding */
    LLVMValueRef ih = add(g, sub(g, mul(g, cc->oh, c64(g, t->sh)), c64(g, t->ph)),
                          mul(g, kh, c64(g, t->dh)));
    jh = if_begin(g, in_range(g, ih, cc->IH));
    cc->xoff = add(g, cc->xoff, mul(g, ih, cc->ss[3]));
  } else if (cc->safe && !cc->plane) {
    /* a safe tile over the flattened plane: a kernel row in the top or
     * bottom padding for every tile row is skipped for all of them at
     * once, as above, instead of each row reading the zero page KW x ICg
     * times (the rows' own checks still cover the left and right padding
     * and a tile whose rows straddle the edge). The rows' output rows
     * never decrease with r (clamped rows repeat the block's last pixel),
     * and neither does ih, so the first and last rows bound them all
     * (oh_lo, oh_hi: tile_version, which widens them for perm). */
    LLVMValueRef base = sub(g, mul(g, kh, c64(g, t->dh)), c64(g, t->ph));
    LLVMValueRef ih0 = add(g, mul(g, cc->oh_lo, c64(g, t->sh)), base);
    LLVMValueRef ih1 = add(g, mul(g, cc->oh_hi, c64(g, t->sh)), base);
    jh = if_begin(g, LLVMBuildAnd(g->b, LLVMBuildICmp(g->b, LLVMIntSGE, ih1, c64(g, 0), ""),
                                  LLVMBuildICmp(g->b, LLVMIntSLT, ih0, cc->IH, ""), ""));
  }
  cc->woff = add(g, mul(g, kd, cc->sw[2]), mul(g, kh, cc->sw[3]));
  if (cc->window_unrolled) {
    memset(cc->colp, 0, sizeof cc->colp);
    for (int64_t kw = 0; kw < t->KW; kw++)
      for (int64_t ic = 0; ic < t->ICg; ic++) {
        cc->kw_c = (int)kw;
        cc->kw = c64(g, kw);
        cc->icg = c64(g, ic);
        step(cc);
      }
  } else if (cc->red_order == 0) {
    loop Lw;
    /* perm: a kernel column in the left or right padding for every row
     * (a tile down an edge column) is not run for any of them */
    int skip = cc->perm && cc->safe;
    cc->kw = loop_begin(g, &Lw, skip ? cc->kw_lo : c64(g, 0), skip ? cc->kw_hi : c64(g, t->KW),
                        c64(g, 1));
    unrolled(cc, t->ICg, cc->U, &cc->icg);
    loop_end(g, &Lw);
  } else {
    loop Li;
    cc->icg = loop_begin(g, &Li, c64(g, 0), c64(g, t->ICg), c64(g, 1));
    unrolled(cc, t->KW, cc->U, &cc->kw);
    loop_end(g, &Li);
  }
  if (jh) if_end(g, jh);
}

static void tile_version(conv_cg *cc, int safe) {
  cg *g = &cc->g;
  const tlm_conv_task *t = cc->t;
  cc->safe = safe;
  LLVMTypeRef vt = vtype(g, cc->W);
  for (int i = 0; i < cc->R * cc->NV; i++) LLVMBuildStore(g->b, LLVMConstNull(vt), cc->acc[i]);
  if (cc->flat && !cc->plane) { /* output row and column of each tile row */
    /* rows past the block's end repeat its last pixel (emit_block's
     * oh_last, ow_last), the others are emit_tile's unclamped row and
     * column (a division per row cost 6% of a 1x1 convolution with 32
     * input channels) */
    LLVMValueRef oh_last = NULL, ow_last = NULL;
    if (safe && !cc->rows_given) oh_last = cc->oh_last, ow_last = cc->ow_last;
    for (int r = 0; r < cc->R; r++) {
      if (!oh_last) { /* full tile: emit_tile's unclamped ones */
        cc->ohr[r] = cc->ohu[r];
        cc->owr[r] = cc->owu[r];
        continue;
      }
      LLVMValueRef in = LLVMBuildICmp(g->b, LLVMIntSLT, add(g, cc->w0, c64(g, r)), cc->w_end, "");
      cc->ohr[r] = LLVMBuildSelect(g->b, in, cc->ohu[r], oh_last, "");
      cc->owr[r] = LLVMBuildSelect(g->b, in, cc->owu[r], ow_last, "");
    }
    cc->oh_lo = cc->ohr[0], cc->oh_hi = cc->ohr[cc->R - 1];
    if (cc->perm) {
      /* bounds of the rows' output rows and columns for kernel_row, from
       * the first and last rows where they bound them all: a tile inside
       * the interior has its rows in raster order over the interior (its
       * columns then need no bound: none reads the left or right padding,
       * and first and last are interior columns either way); one inside
       * the edge columns goes down a column and on to the next (columns
       * never decrease; rows may, from a column's bottom to the next
       * one's top: the whole height then). A tile with a row in both takes
       * the whole range of each (no kernel row or column skipped for all
       * its rows). Clamped rows repeat the block's last pixel, which comes
       * after all of them. */
      LLVMValueRef last = add(g, cc->w0, c64(g, cc->R - 1));
      LLVMValueRef edge = LLVMBuildICmp(g->b, LLVMIntSGE, last, cc->pInt, "");
      LLVMValueRef both =
          LLVMBuildAnd(g->b, edge, LLVMBuildICmp(g->b, LLVMIntSLT, cc->w0, cc->pInt, ""), "");
      cc->oh_lo = LLVMBuildSelect(g->b, edge, c64(g, 0), cc->ohr[0], "");
      cc->oh_hi = LLVMBuildSelect(g->b, edge, sub(g, cc->OH, c64(g, 1)), cc->ohr[cc->R - 1], "");
      /* (a straddling tile's first row is an interior column: no bound on
       * kw_hi from it) */
      LLVMValueRef ow_lo = cc->owr[0];
      LLVMValueRef ow_hi =
          LLVMBuildSelect(g->b, both, sub(g, cc->OW, c64(g, 1)), cc->owr[cc->R - 1], "");
      /* kernel columns some row reads inside the input: [kw_lo, kw_hi)
       * with ow_hi * sw - pw + kw * dw >= 0 and ow_lo * sw - pw + kw * dw
       * < IW (the rows' own checks cover the rest) */
      LLVMValueRef lo = LLVMBuildSDiv(
          g->b, add(g, sub(g, c64(g, t->pw), mul(g, ow_hi, c64(g, t->sw))), c64(g, t->dw - 1)),
          c64(g, t->dw), "");
      cc->kw_lo = smax(g, lo, c64(g, 0));
      LLVMValueRef hi = LLVMBuildSDiv(
          g->b, add(g, sub(g, cc->IW, mul(g, ow_lo, c64(g, t->sw))), c64(g, t->pw - 1)),
          c64(g, t->dw), "");
      cc->kw_hi = smin(g, add(g, hi, c64(g, 1)), c64(g, t->KW));
    }
  }
  /* a kernel depth of 1 (every 2-D convolution) without a loop: its
   * accumulator phis were a tenth of a depthwise kernel's IR */
  loop Ld;
  memset(&Ld, 0, sizeof Ld);
  LLVMValueRef kd = t->KD == 1 ? c64(g, 0) : loop_begin(g, &Ld, c64(g, 0), c64(g, t->KD), c64(g, 1));
  LLVMValueRef id = add(g, sub(g, mul(g, cc->od, c64(g, t->sd)), c64(g, t->pd)),
                        mul(g, kd, c64(g, t->dd)));
  LLVMBasicBlockRef jd = if_begin(g, in_range(g, id, cc->ID));
  /* a loop over kernel rows even when the window is unrolled: a row's KW
   * taps are what share loads (one_row_version), and the kernel rows
   * unrolled made each tile version three times as long (3x3 depthwise:
   * about 85 -> 45 ms of compile for its three versions) */
  if (cc->row_pointer) {
    LLVMValueRef ih0 = sub(g, mul(g, cc->ohr[0], c64(g, t->sh)), c64(g, t->ph));
    cc->iw0 = sub(g, mul(g, cc->owr[0], c64(g, t->sw)), c64(g, t->pw));
    LLVMValueRef off = add(g, add(g, mul(g, cc->n, cc->ss[0]), mul(g, id, cc->ss[2])),
                           add(g, mul(g, ih0, cc->ss[3]), mul(g, cc->iw0, cc->ss[4])));
    LLVMBuildStore(g->b, gep(g, cc->src, off), cc->rowp_slot);
    LLVMBuildStore(g->b, gep(g, cc->wei, add(g, mul(g, kd, cc->sw[2]), mul(g, cc->other, cc->sw[0]))),
                   cc->wrowp_slot);
  }
  loop Lh;
  kernel_row(cc, kd, id, loop_begin(g, &Lh, c64(g, 0), c64(g, t->KH), c64(g, 1)));
  if (cc->row_pointer) {
    LLVMBuildStore(g->b, gep(g, cc->rowp, mul(g, c64(g, t->dh), cc->ss[3])), cc->rowp_slot);
    LLVMBuildStore(g->b, gep(g, cc->wrowp, cc->sw[3]), cc->wrowp_slot);
  }
  loop_end(g, &Lh);
  if_end(g, jd);
  if (t->KD != 1) loop_end(g, &Ld);
  epilogue_store(cc);
}

/* version(s) of a tile inside one output row (its pixels ow0 + r): with
 * the window unrolled, the src a row reads at kw + 1 is then, to the
 * optimizer, the same load as the next row's at kw (R + KW - 1 loads per
 * kernel row, not R x KW: AVX2 depthwise 3x3 41 -> 54 GFLOPS) */
static void one_row_version(conv_cg *cc, int safe) {
  cg *g = &cc->g;
  LLVMValueRef ohu[CONV_ACC_MAX], owu[CONV_ACC_MAX];
  memcpy(ohu, cc->ohu, sizeof ohu);
  memcpy(owu, cc->owu, sizeof owu);
  for (int r = 0; r < cc->R; r++) {
    cc->ohu[r] = ohu[0];
    cc->owu[r] = add(g, owu[0], c64(g, r));
  }
  cc->rows_given = 1;
  cc->row_pointer = cc->row_pointers;
  tile_version(cc, safe);
  cc->row_pointer = 0;
  cc->rows_given = 0;
  memcpy(cc->ohu, ohu, sizeof ohu);
  memcpy(cc->owu, owu, sizeof owu);
}

/* Output row and column of pixel w of the flattened plane. In raster
 * order w = oh * OW + ow. With cc->perm the interior columns [pL, pR0)
 * come first, in raster order over OH rows of their own width, then the
 * edge columns one after another, each from its top row down: a tile of
 * the interior then never reads the left or right padding, and one down
 * an edge column reads it at the same kernel columns in every row. Two
 * divisions, for a block's first and last pixels (pixel_next steps from
 * one tile row to the next, and on to the next tile's first). */
static void pixel_of(conv_cg *cc, LLVMValueRef w, LLVMValueRef *oh, LLVMValueRef *ow) {
  cg *g = &cc->g;
  if (!cc->perm) {
    *oh = LLVMBuildSDiv(g->b, w, cc->OW, "");
    *ow = LLVMBuildSRem(g->b, w, cc->OW, "");
    return;
  }
  LLVMValueRef in_int = LLVMBuildICmp(g->b, LLVMIntSLT, w, cc->pInt, "");
  LLVMValueRef wi = LLVMBuildSelect(g->b, in_int, w, c64(g, 0), "");
  LLVMValueRef oh_i = LLVMBuildSDiv(g->b, wi, cc->pWd, "");
  LLVMValueRef ow_i = add(g, cc->pL, LLVMBuildSRem(g->b, wi, cc->pWd, ""));
  LLVMValueRef e = LLVMBuildSelect(g->b, in_int, c64(g, 0), sub(g, w, cc->pInt), "");
  LLVMValueRef col = LLVMBuildSDiv(g->b, e, cc->pOH, "");
  LLVMValueRef oh_e = LLVMBuildSRem(g->b, e, cc->pOH, "");
  /* edge column `col`: left ones are columns 0..pL-1, right ones pR0.. */
  LLVMValueRef right = LLVMBuildICmp(g->b, LLVMIntSGE, col, cc->pL, "");
  LLVMValueRef ow_e =
      add(g, col, LLVMBuildSelect(g->b, right, sub(g, cc->pR0, cc->pL), c64(g, 0), ""));
  *oh = LLVMBuildSelect(g->b, in_int, oh_i, oh_e, "");
  *ow = LLVMBuildSelect(g->b, in_int, ow_i, ow_e, "");
}

/* The pixel after (oh, ow) in cc->perm's order, without a division: the
 * next column of an interior row, or the next row's first interior
 * column, or after the interior's last pixel the first edge column's top
 * (column 0: pL >= 1 wherever there is a pixel); down an edge column, or
 * at its bottom the next edge column's top. Past the last pixel it goes
 * on to columns >= OW, which only rows beyond the block take (clamped). */
static void pixel_next(conv_cg *cc, LLVMValueRef oh, LLVMValueRef ow, LLVMValueRef *noh,
                       LLVMValueRef *now) {
  cg *g = &cc->g;
  LLVMValueRef interior = LLVMBuildAnd(g->b, LLVMBuildICmp(g->b, LLVMIntSGE, ow, cc->pL, ""),
                                       LLVMBuildICmp(g->b, LLVMIntSLT, ow, cc->pR0, ""), "");
  LLVMValueRef ow1 = add(g, ow, c64(g, 1)), oh1 = add(g, oh, c64(g, 1));
  LLVMValueRef wrap_i = LLVMBuildICmp(g->b, LLVMIntEQ, ow1, cc->pR0, "");
  LLVMValueRef oh_i = LLVMBuildSelect(g->b, wrap_i, oh1, oh, "");
  LLVMValueRef ow_i = LLVMBuildSelect(g->b, wrap_i, cc->pL, ow1, "");
  LLVMValueRef done_i = LLVMBuildICmp(g->b, LLVMIntEQ, oh_i, cc->OH, "");
  oh_i = LLVMBuildSelect(g->b, done_i, c64(g, 0), oh_i, "");
  ow_i = LLVMBuildSelect(g->b, done_i, c64(g, 0), ow_i, "");
  LLVMValueRef wrap_e = LLVMBuildICmp(g->b, LLVMIntEQ, oh1, cc->OH, "");
  LLVMValueRef col =
      LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntEQ, ow1, cc->pL, ""), cc->pR0, ow1, "");
  LLVMValueRef oh_e = LLVMBuildSelect(g->b, wrap_e, c64(g, 0), oh1, "");
  LLVMValueRef ow_e = LLVMBuildSelect(g->b, wrap_e, col, ow, "");
  *noh = LLVMBuildSelect(g->b, interior, oh_i, oh_e, "");
  *now = LLVMBuildSelect(g->b, interior, ow_i, ow_e, "");
}

/* volatile i64 load and store: counters kept in memory */
static LLVMValueRef vload(cg *g, LLVMValueRef p) {
  LLVMValueRef v = LLVMBuildLoad2(g->b, g->i64, p, "");
  LLVMSetVolatile(v, 1);
  return v;
}
static void vstore(cg *g, LLVMValueRef v, LLVMValueRef p) { LLVMSetVolatile(LLVMBuildStore(g->b, v, p), 1); }

/* The safe version of a one-row tile version (window unrolled): every
 * tile the fast version does not take, as runs of pixels within one output
 * row. A tile at the image's left or right edge or in its top or bottom
 * rows is one run; one whose rows wrap to the next output row, two or
 * more (the next starts at that row's column 0); one past the block's
 * end stops there. Each run is the one-row version's R rows from its
 * first pixel, with only the run's own rows stored (row_end): rows past
 * the output row's end read input columns beyond the row, which its
 * column checks read as zeros. With a separate R-row version for the
 * wrapping tiles (rare: an output width that R does not divide) a 3x3
 * depthwise kernel compiled about 9 ms longer (27 -> 21 ms AVX2, Zen 3). */
static void runs_version(conv_cg *cc) {
  cg *g = &cc->g;
  LLVMValueRef w0 = cc->w0, ohu0 = cc->ohu[0], owu0 = cc->owu[0];
  LLVMValueRef lim = smin(g, add(g, w0, c64(g, cc->R)), cc->w_end);
  LLVMValueRef pw = alloca_of(g, g->i64), poh = alloca_of(g, g->i64), pow_ = alloca_of(g, g->i64);
  /* the run's pixel in memory (volatile), as loop_begin_outer's counters:
   * nothing for loop strength reduction */
  vstore(g, w0, pw);
  vstore(g, ohu0, poh);
  vstore(g, owu0, pow_);
  LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(g->C, g->fn, "run");
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(g->C, g->fn, "run_body");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(g->C, g->fn, "runs_done");
  LLVMBuildBr(g->b, head);
  LLVMPositionBuilderAtEnd(g->b, head);
  LLVMValueRef w = vload(g, pw);
  LLVMBuildCondBr(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, w, lim, ""), body, done);
  LLVMPositionBuilderAtEnd(g->b, body);
  LLVMValueRef oh = vload(g, poh), ow = vload(g, pow_);
  LLVMValueRef end = add(g, w, smin(g, sub(g, cc->OW, ow), sub(g, lim, w)));
  cc->w0 = w, cc->ohu[0] = oh, cc->owu[0] = ow, cc->row_end = end;
  one_row_version(cc, 1);
  cc->row_end = NULL;
  vstore(g, end, pw);
  vstore(g, add(g, oh, c64(g, 1)), poh);
  vstore(g, c64(g, 0), pow_);
  LLVMBuildBr(g->b, head);
  LLVMPositionBuilderAtEnd(g->b, done);
  cc->w0 = w0, cc->ohu[0] = ohu0, cc->owu[0] = owu0;
}

static void emit_tile(conv_cg *cc) {
  cg *g = &cc->g;
  const tlm_conv_task *t = cc->t;
  /* fast when full in both axes and every input column inside the row */
  LLVMValueRef full_c = LLVMBuildICmp(g->b, LLVMIntSLE, add(g, cc->c0, c64(g, cc->c_t)), cc->c_end, "");
  LLVMValueRef full_w = LLVMBuildICmp(g->b, LLVMIntSLE, add(g, cc->w0, c64(g, cc->w_t)), cc->w_end, "");
  LLVMValueRef inside;
  if (cc->plane) { /* 1x1, no padding: always inside */
    inside = LLVMConstInt(g->i1, 1, 0);
  } else if (cc->perm) { /* only the safe version: each row's pixel */
    /* rows 1..R (R: the next tile's first pixel) stepped in a loop over
     * the arrays p_oh / p_ow (element 0: this tile's first pixel): a
     * tenth of the IR of R copies of pixel_next, whose selects cost a
     * 3x3 kernel 6-8 ms of compile unrolled */
    LLVMTypeRef at = LLVMArrayType2(g->i64, (uint64_t)cc->R + 1);
    loop L;
    LLVMValueRef r = loop_begin(g, &L, c64(g, 1), c64(g, cc->R + 1), c64(g, 1));
    LLVMValueRef prev[2] = {c64(g, 0), sub(g, r, c64(g, 1))}, cur[2] = {c64(g, 0), r};
    LLVMValueRef oh = LLVMBuildLoad2(g->b, g->i64, LLVMBuildGEP2(g->b, at, cc->p_oh, prev, 2, ""), "");
    LLVMValueRef ow = LLVMBuildLoad2(g->b, g->i64, LLVMBuildGEP2(g->b, at, cc->p_ow, prev, 2, ""), "");
    pixel_next(cc, oh, ow, &oh, &ow);
    LLVMBuildStore(g->b, oh, LLVMBuildGEP2(g->b, at, cc->p_oh, cur, 2, ""));
    LLVMBuildStore(g->b, ow, LLVMBuildGEP2(g->b, at, cc->p_ow, cur, 2, ""));
    loop_end(g, &L);
    for (int i = 0; i <= cc->R; i++) {
      LLVMValueRef idx[2] = {c64(g, 0), c64(g, i)};
      LLVMValueRef po = LLVMBuildGEP2(g->b, at, cc->p_oh, idx, 2, "");
      LLVMValueRef pw = LLVMBuildGEP2(g->b, at, cc->p_ow, idx, 2, "");
      if (i < cc->R) {
        cc->ohu[i] = LLVMBuildLoad2(g->b, g->i64, po, "");
        cc->owu[i] = LLVMBuildLoad2(g->b, g->i64, pw, "");
      } else { /* the next tile's first pixel into element 0 */
        LLVMBuildStore(g->b, LLVMBuildLoad2(g->b, g->i64, po, ""), cc->p_oh);
        LLVMBuildStore(g->b, LLVMBuildLoad2(g->b, g->i64, pw, ""), cc->p_ow);
      }
    }
    inside = LLVMConstInt(g->i1, 0, 0);
  } else if (cc->flat) {
    /* output row and column of each tile row, unclamped: one division for
     * the tile's first pixel, then a step with wrap-around per row (a
     * division per row cost as much as a depthwise tile's FMAs) */
    cc->ohu[0] = LLVMBuildSDiv(g->b, cc->w0, cc->OW, "");
    cc->owu[0] = LLVMBuildSRem(g->b, cc->w0, cc->OW, "");
    for (int r = 1; r < cc->R; r++) {
      LLVMValueRef ow = add(g, cc->owu[r - 1], c64(g, 1));
      LLVMValueRef wrap = LLVMBuildICmp(g->b, LLVMIntEQ, ow, cc->OW, "");
      cc->owu[r] = LLVMBuildSelect(g->b, wrap, c64(g, 0), ow, "");
      cc->ohu[r] = add(g, cc->ohu[r - 1], LLVMBuildZExt(g->b, wrap, g->i64, ""));
    }
    /* every tile row's whole window inside the input: rows oh[0]..oh[R-1];
     * columns ow[0]..ow[R-1], or all of 0..OW-1 when the tile wraps */
    LLVMValueRef wraps = LLVMBuildICmp(g->b, LLVMIntNE, cc->ohu[cc->R - 1], cc->ohu[0], "");
    LLVMValueRef ow_lo = LLVMBuildSelect(g->b, wraps, c64(g, 0), cc->owu[0], "");
    LLVMValueRef ow_hi = LLVMBuildSelect(g->b, wraps, sub(g, cc->OW, c64(g, 1)), cc->owu[cc->R - 1], "");
    LLVMValueRef ih = sub(g, mul(g, cc->ohu[0], c64(g, t->sh)), c64(g, t->ph));
    LLVMValueRef ih_hi = add(g, sub(g, mul(g, cc->ohu[cc->R - 1], c64(g, t->sh)), c64(g, t->ph)),
                             c64(g, (int64_t)(t->KH - 1) * t->dh));
    LLVMValueRef iw = sub(g, mul(g, ow_lo, c64(g, t->sw)), c64(g, t->pw));
    LLVMValueRef iw_hi = add(g, sub(g, mul(g, ow_hi, c64(g, t->sw)), c64(g, t->pw)),
                             c64(g, (int64_t)(t->KW - 1) * t->dw));
    inside = LLVMBuildAnd(g->b, in_range(g, ih, cc->IH), in_range(g, ih_hi, cc->IH), "");
    inside = LLVMBuildAnd(g->b, inside, in_range(g, iw, cc->IW), "");
    inside = LLVMBuildAnd(g->b, inside, in_range(g, iw_hi, cc->IW), "");
  } else {
    LLVMValueRef lo = sub(g, mul(g, cc->w0, c64(g, t->sw)), c64(g, t->pw));
    LLVMValueRef hi = add(g, add(g, lo, c64(g, (cc->w_t - 1) * t->sw)), c64(g, (int64_t)(t->KW - 1) * t->dw));
    inside = LLVMBuildAnd(g->b, LLVMBuildICmp(g->b, LLVMIntSGE, lo, c64(g, 0), ""),
                          LLVMBuildICmp(g->b, LLVMIntSLT, hi, cc->IW, ""), "");
  }
  LLVMValueRef fast = LLVMBuildAnd(g->b, LLVMBuildAnd(g->b, full_c, full_w, ""), inside, "");
  LLVMBasicBlockRef bf = LLVMAppendBasicBlockInContext(g->C, g->fn, "fast");
  LLVMBasicBlockRef bs = LLVMAppendBasicBlockInContext(g->C, g->fn, "safe");
  LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(g->C, g->fn, "tile_done");
  /* the fast version is the one-row one only: a tile that wraps to the
   * next output row takes the safe path. Its rows' pixels are then the
   * first one's plus constants, so each window step's R src addresses
   * share one register: with 14 rows each in its own register the 3 -> 32
   * 3x3 stride-2 stem ran at 123-139 GFLOPS, one-row 134-172 (AVX-512, Zen 5
   * VM), and the simpler version compiles in a third less time (16 -> 24
   * 3x3: 130 -> 82 ms); with the window unrolled, neighbouring rows also
   * share loads */
  /* (with row pointers one row too: every version is a one-row one) */
  int one_row = cc->flat && !cc->plane && (cc->R > 1 || cc->row_pointers);
  LLVMValueRef in_one_row =
      one_row ? LLVMBuildICmp(g->b, LLVMIntEQ, cc->ohu[cc->R - 1], cc->ohu[0], "") : NULL;
  if (one_row) fast = LLVMBuildAnd(g->b, fast, in_one_row, "");
  /* A tile with a long reduction has no fast version: the safe one's
   * per-tile work (clamped rows, guarded row stores; about 20 cycles for 6
   * rows) is under 2% of 2048 vector FMAs at two a cycle, and its
   * per-window-position work (each row's bounds check and zero-page
   * select, a few operations a row) under 3% of ICg x NV >= 128 FMAs a
   * row; a second copy of the unrolled reduction cost a third of the
   * kernel's compile time (3x3 64 -> 64: 33 -> 22 ms AVX-512, 27 -> 18 ms
   * AVX2, the same GFLOPS within noise; tlm run --compile-repeats, four
   * alternations, Zen 5 VM). Below either bound the fast version stays:
   * 1x1 32 -> 64 (768 FMAs a tile) lost 6% without it, the 7x7 RGB stem
   * (ICg 3) 38%. Only with the lanes along C (axis 0): the safe version of
   * lanes along the pixels masks or gathers its loads at every step (NCHW
   * 1x1 144 -> 24 at 128x128: 0.70x without the fast version). */
  if (cc->only_safe) {
    LLVMBuildBr(g->b, bs);
    LLVMDeleteBasicBlock(bf);
  } else {
    LLVMBuildCondBr(g->b, fast, bf, bs);
    LLVMPositionBuilderAtEnd(g->b, bf);
    if (one_row) one_row_version(cc, 0);
    else tile_version(cc, 0);
    LLVMBuildBr(g->b, join);
  }
  LLVMPositionBuilderAtEnd(g->b, bs);
  /* the C extent and its blocks are whole tiles (channels are static; a
   * block is tile_c2 tiles): no tile has a lane tail, so the masked
   * version would never run and is not emitted (a tile version less to
   * compile for most layers: 64-2048 channels in tiles of 16-64) */
  int c_whole = cc->c_ext % cc->c_t == 0;
  if (cc->axis != 1) { /* an edge or row tail with every C lane valid: no lane masks
                        * (vmaskmov on AVX2 would slow each step of every edge tile) */
    LLVMBasicBlockRef bl = LLVMAppendBasicBlockInContext(g->C, g->fn, "safe_lanes_full");
    LLVMBasicBlockRef bm = c_whole ? NULL : LLVMAppendBasicBlockInContext(g->C, g->fn, "safe_masked");
    if (c_whole)
      LLVMBuildBr(g->b, bl);
    else
      LLVMBuildCondBr(g->b, full_c, bl, bm);
    LLVMPositionBuilderAtEnd(g->b, bl);
    cc->lanes_full = 1;
    /* at the image's edges, all rows valid and in one output row: without
     * a one-row safe version a 3x3 depthwise layer at 56 px ran 4-8% slower */
    if (one_row && cc->window_unrolled) runs_version(cc);
    else tile_version(cc, 1);
    cc->lanes_full = 0;
    LLVMBuildBr(g->b, join);
    if (c_whole) {
      LLVMPositionBuilderAtEnd(g->b, join);
      return;
    }
    LLVMPositionBuilderAtEnd(g->b, bm);
  }
  if (one_row && cc->window_unrolled) runs_version(cc);
  else tile_version(cc, 1);
  LLVMBuildBr(g->b, join);
  LLVMPositionBuilderAtEnd(g->b, join);
}

/* one block: C tiles x ow tiles */
static void emit_block(conv_cg *cc, LLVMValueRef cb, LLVMValueRef wb) {
  cg *g = &cc->g;
  LLVMValueRef cs = mul(g, cb, c64(g, cc->cblk));
  LLVMValueRef ws = mul(g, wb, c64(g, cc->wblk));
  cc->c_end = smin(g, add(g, cs, c64(g, cc->cblk)), c64(g, cc->c_ext));
  cc->w_end = smin(g, add(g, ws, c64(g, cc->wblk)), cc->wext);
  LLVMValueRef c_end = cc->c_end, w_end = cc->w_end;
  if (cc->flat && !cc->plane) { /* the block's last pixel, for the safe tiles' clamped rows */
    pixel_of(cc, sub(g, w_end, c64(g, 1)), &cc->oh_last, &cc->ow_last);
  }
  /* perm: the block's first pixel, stored again for each C tile's walk
   * (emit_tile steps on from it) */
  LLVMValueRef oh_first = NULL, ow_first = NULL;
  if (cc->perm) pixel_of(cc, ws, &oh_first, &ow_first);
  loop Lc, Lw;
  LLVMValueRef c0 = loop_begin_outer(g, &Lc, cs, c_end, c64(g, cc->c_t));
  if (cc->perm) {
    LLVMBuildStore(g->b, oh_first, cc->p_oh);
    LLVMBuildStore(g->b, ow_first, cc->p_ow);
  }
  LLVMValueRef w0 = loop_begin_outer(g, &Lw, ws, w_end, c64(g, cc->w_t));
  cc->c0 = c0, cc->w0 = w0, cc->c_end = c_end, cc->w_end = w_end;
  emit_tile(cc);
  loop_end(g, &Lw);
  loop_end(g, &Lc);
}

/* depthwise-like tiles (lanes along groups) whose whole window is emitted
 * inline: see conv_cg.window_unrolled */
static int window_unrolled_of(const tlm_conv_task *t, const int32_t *v) {
  if (v[CV_AXIS] != 2 || v[CV_VEC] < 1) return 0;
  return (int64_t)t->KH * t->KW * t->ICg * v[CV_ROWS] * (v[CV_TILE_V] / v[CV_VEC]) <=
         CONV_UNROLL_FMAS;
}

/* every tile version is a one-row one addressing the input through a
 * kernel-row pointer (conv_cg.row_pointer): the window unrolled, a zero
 * page (unit channel stride, at most 262144 channels) and the columns a
 * tile reads within CONV_COLS_MAX */
static int row_pointer_of(const tlm_conv_task *t, const int32_t *v) {
  return window_unrolled_of(t, v) && (t->unit & TLM_UNIT_CONV_SRC_C) &&
         (int64_t)t->G * t->ICg <= 262144 &&
         (int64_t)(v[CV_ROWS] - 1) * t->sw + (int64_t)(t->KW - 1) * t->dw < CONV_COLS_MAX;
}

int tlm_codegen_conv_strength_reduced(const tlm_task *task, const tlm_schedule *sched) {
  return task->kind == TLM_OP_CONV && row_pointer_of(&task->u.conv, sched->v);
}

int tlm_codegen_conv(LLVMContextRef ctx, const tlm_task *task, const tlm_schedule *sched,
                     const char *name, const char *cpu, const char *features, LLVMModuleRef *out,
                     char *err, int errcap) {
  conv_cg cc;
  memset(&cc, 0, sizeof cc);
  cg *g = &cc.g;
  const tlm_conv_task *t = &task->u.conv;
  cc.t = t;
  g->task = task;
  const int32_t *v = sched->v;
  cc.axis = v[CV_AXIS];
  cc.W = v[CV_VEC];
  cc.NV = v[CV_TILE_V] / v[CV_VEC];
  cc.R = v[CV_ROWS];
  cc.U = v[CV_UNROLL];
  cc.red_order = v[CV_RED_ORDER];
  cc.order = v[CV_ORDER];
  cc.par = v[CV_PARALLEL];
  if (cc.NV < 1 || cc.NV > 4 || cc.R * cc.NV > CONV_ACC_MAX || cc.W < 1 || cc.W > 16 ||
      cc.U < 1 || cc.axis < 0 || cc.axis > 2 || cc.par < 0 || cc.par > 3) {
    snprintf(err, (size_t)errcap, "conv schedule out of the code generator's range");
    return -1;
  }
  tlm_conv_tile_dims(task, v, &cc.c_t, &cc.w_t, &cc.c_ext);
  /* depthwise only: unrolled, MobileNet's IC=3 stem (axis 0) ran 0.75 ->
   * 0.48x oneDNN on AVX-512 */
  cc.window_unrolled = window_unrolled_of(t, v);
  cc.row_pointers = row_pointer_of(t, v);
  {
    int64_t tile_fmas = (int64_t)t->ICg * t->KD * t->KH * t->KW * cc.R * cc.NV;
    cc.only_safe = cc.axis == 0 && !cc.window_unrolled && tile_fmas >= 2048 &&
                   (int64_t)t->ICg * cc.NV >= 128;
  }
  cc.cblk = cc.c_t * v[CV_TILE_C2];
  cc.wblk = cc.w_t * v[CV_TILE_W2];
  LLVMBasicBlockRef start = begin_kernel(g, ctx, "tlm_conv", name, cpu, features);
  LLVMValueRef args = LLVMGetParam(g->fn, 0);
  LLVMValueRef begin = LLVMGetParam(g->fn, 1), end = LLVMGetParam(g->fn, 2);
  cc.dst = arg_field(g, args, offsetof(tlm_conv_args, dst), g->ptr);
  cc.src = arg_field(g, args, offsetof(tlm_conv_args, src), g->ptr);
  cc.wei = arg_field(g, args, offsetof(tlm_conv_args, wei), g->ptr);
  cc.bias = arg_field(g, args, offsetof(tlm_conv_args, bias), g->ptr);
  cc.scale = arg_field(g, args, offsetof(tlm_conv_args, scale), g->ptr);
  cc.shift = arg_field(g, args, offsetof(tlm_conv_args, shift), g->ptr);
  cc.res = arg_field(g, args, offsetof(tlm_conv_args, res), g->ptr);
  cc.N = arg_field(g, args, offsetof(tlm_conv_args, N), g->i64);
  cc.ID = arg_field(g, args, offsetof(tlm_conv_args, ID), g->i64);
  cc.IH = arg_field(g, args, offsetof(tlm_conv_args, IH), g->i64);
  cc.IW = arg_field(g, args, offsetof(tlm_conv_args, IW), g->i64);
  cc.OD = arg_field(g, args, offsetof(tlm_conv_args, OD), g->i64);
  cc.OH = arg_field(g, args, offsetof(tlm_conv_args, OH), g->i64);
  cc.OW = arg_field(g, args, offsetof(tlm_conv_args, OW), g->i64);
  for (int i = 0; i < 5; i++) {
    cc.ss[i] = arg_field(g, args, offsetof(tlm_conv_args, ss) + 8 * (size_t)i, g->i64);
    cc.sw[i] = arg_field(g, args, offsetof(tlm_conv_args, sw) + 8 * (size_t)i, g->i64);
    cc.sd[i] = arg_field(g, args, offsetof(tlm_conv_args, sd) + 8 * (size_t)i, g->i64);
    cc.sr[i] = arg_field(g, args, offsetof(tlm_conv_args, sr) + 8 * (size_t)i, g->i64);
  }
  /* unit strides as constants, so vector accesses become plain loads */
  if (t->unit & TLM_UNIT_CONV_SRC_C) cc.ss[1] = c64(g, 1);
  if (t->unit & TLM_UNIT_CONV_SRC_W) cc.ss[4] = c64(g, 1);
  if (t->unit & TLM_UNIT_CONV_WEI_O) cc.sw[0] = c64(g, 1);
  {
    int64_t IC_ = (int64_t)t->G * t->ICg, OC_ = (int64_t)t->G * t->OCg;
    if (t->unit & TLM_UNIT_CONV_WEI_HWIO) { /* every window offset a constant */
      cc.sw[0] = c64(g, 1);
      cc.sw[1] = c64(g, OC_);
      cc.sw[2] = c64(g, (int64_t)t->KH * t->KW * t->ICg * OC_);
      cc.sw[3] = c64(g, (int64_t)t->KW * t->ICg * OC_);
      cc.sw[4] = c64(g, (int64_t)t->ICg * OC_);
    }
    if (t->unit & TLM_UNIT_CONV_SRC_PIX) cc.ss[4] = c64(g, IC_);
    if (t->unit & TLM_UNIT_CONV_DST_PIX) cc.sd[4] = cc.sr[4] = c64(g, OC_);
  }
  cc.sbias = arg_field(g, args, offsetof(tlm_conv_args, sbias), g->i64);
  cc.sscale = arg_field(g, args, offsetof(tlm_conv_args, sscale), g->i64);
  cc.sshift = arg_field(g, args, offsetof(tlm_conv_args, sshift), g->i64);
  if (t->unit & TLM_UNIT_CONV_VEC) cc.sbias = cc.sscale = cc.sshift = c64(g, 1);
  LLVMTypeRef vt = vtype(g, cc.W);
  for (int i = 0; i < cc.R * cc.NV; i++) cc.acc[i] = alloca_of(g, vt);
  if (cc.row_pointers) {
    cc.rowp_slot = alloca_of(g, g->ptr);
    cc.wrowp_slot = alloca_of(g, g->ptr);
  }
  int64_t IC = (int64_t)t->G * t->ICg;
  if (cc.axis != 1 && (t->unit & TLM_UNIT_CONV_SRC_C) && IC <= 262144) {
    LLVMTypeRef at = LLVMArrayType2(g->f32, (uint64_t)IC);
    LLVMValueRef z = LLVMAddGlobal(g->mod, at, "tlm_conv_zeros");
    LLVMSetInitializer(z, LLVMConstNull(at));
    LLVMSetLinkage(z, LLVMInternalLinkage);
    LLVMSetAlignment(z, 64);
    cc.zeros = z;
  }

  int64_t other_ext = cc.axis == 2 ? t->OCg : t->G;
  /* lanes along ow over a dense 1x1 plane: the plane flattened too */
  cc.plane = cc.axis == 1 && (t->unit & TLM_UNIT_CONV_PLANE);
  cc.flat = cc.axis != 1 || cc.plane;
  cc.wext = cc.flat ? mul(g, cc.OH, cc.OW) : cc.OW;
  /* edges apart (pixel_of) where the only version is the safe one and the
   * window overhangs the input's left edge (symmetric padding: its right
   * edge too) */
  cc.perm = cc.only_safe && cc.flat && !cc.plane && t->pw > 0;
  if (cc.perm) {
    int64_t lc = ((int64_t)t->pw + t->sw - 1) / t->sw; /* ow * sw - pw < 0 */
    cc.pL = smin(g, c64(g, lc), cc.OW);
    /* first ow with ow * sw - pw + (KW - 1) * dw >= IW: ceil(num / sw), num
     * = IW + pw - (KW - 1) * dw (num <= 0: 0), then within [pL, OW] */
    LLVMValueRef num = add(g, cc.IW, c64(g, (int64_t)t->pw - (int64_t)(t->KW - 1) * t->dw));
    LLVMValueRef r0 = LLVMBuildSDiv(g->b, smax(g, add(g, num, c64(g, t->sw - 1)), c64(g, 0)),
                                    c64(g, t->sw), "");
    cc.pR0 = smin(g, smax(g, r0, cc.pL), cc.OW);
    LLVMValueRef wi = sub(g, cc.pR0, cc.pL);
    cc.pWd = smax(g, wi, c64(g, 1));
    cc.pInt = mul(g, cc.OH, wi);
    cc.pOH = smax(g, cc.OH, c64(g, 1));
    cc.p_oh = alloca_of(g, LLVMArrayType2(g->i64, (uint64_t)cc.R + 1));
    cc.p_ow = alloca_of(g, LLVMArrayType2(g->i64, (uint64_t)cc.R + 1));
  }
  /* rows: (n, other, od) when flat, (n, other, od, oh) otherwise */
  LLVMValueRef rows_total = mul(g, mul(g, cc.N, c64(g, other_ext)), cc.OD);
  if (!cc.flat) rows_total = mul(g, rows_total, cc.OH);
  int64_t ncb = (cc.c_ext + cc.cblk - 1) / cc.cblk;
  LLVMValueRef nwb = LLVMBuildSDiv(g->b, add(g, cc.wext, c64(g, cc.wblk - 1)), c64(g, cc.wblk), "");
  loop Li;
  LLVMValueRef i = loop_begin_outer(g, &Li, begin, end, c64(g, 1));
  /* iteration i: nothing split (0), a (row, w block) (1), a (C block,
   * row, w block), C-block major so neighbouring iterations share weights
   * (2), or a (row, w block, C block), C-block minor (3: depthwise); see
   * tlm_conv_parallel_count */
  LLVMValueRef rlo, rhi, cblo, cbhi, wblo, wbhi;
  if (cc.par == 0) {
    rlo = c64(g, 0), rhi = rows_total, cblo = c64(g, 0), cbhi = c64(g, ncb);
    wblo = c64(g, 0), wbhi = nwb;
  } else {
    LLVMValueRef rw = i;
    cblo = c64(g, 0), cbhi = c64(g, ncb);
    if (cc.par == 2) {
      LLVMValueRef per = mul(g, rows_total, nwb);
      cblo = LLVMBuildSDiv(g->b, i, per, "");
      cbhi = add(g, cblo, c64(g, 1));
      rw = LLVMBuildSRem(g->b, i, per, "");
    } else if (cc.par == 3) { /* C blocks minor */
      cblo = LLVMBuildSRem(g->b, i, c64(g, ncb), "");
      cbhi = add(g, cblo, c64(g, 1));
      rw = LLVMBuildSDiv(g->b, i, c64(g, ncb), "");
    }
    rlo = LLVMBuildSDiv(g->b, rw, nwb, "");
    rhi = add(g, rlo, c64(g, 1));
    wblo = LLVMBuildSRem(g->b, rw, nwb, "");
    wbhi = add(g, wblo, c64(g, 1));
  }
  loop Lr;
  LLVMValueRef r = loop_begin_outer(g, &Lr, rlo, rhi, c64(g, 1));
  LLVMValueRef q = r;
  if (!cc.flat) {
    cc.oh = LLVMBuildSRem(g->b, q, cc.OH, "");
    q = LLVMBuildSDiv(g->b, q, cc.OH, "");
  }
  cc.od = LLVMBuildSRem(g->b, q, cc.OD, "");
  q = LLVMBuildSDiv(g->b, q, cc.OD, "");
  cc.other = LLVMBuildSRem(g->b, q, c64(g, other_ext), "");
  cc.n = LLVMBuildSDiv(g->b, q, c64(g, other_ext), "");
  loop La, Lb;
  if (cc.order == 0) {
    LLVMValueRef cb = loop_begin_outer(g, &La, cblo, cbhi, c64(g, 1));
    LLVMValueRef wb = loop_begin_outer(g, &Lb, wblo, wbhi, c64(g, 1));
    emit_block(&cc, cb, wb);
  } else {
    LLVMValueRef wb = loop_begin_outer(g, &La, wblo, wbhi, c64(g, 1));
    LLVMValueRef cb = loop_begin_outer(g, &Lb, cblo, cbhi, c64(g, 1));
    emit_block(&cc, cb, wb);
  }
  loop_end(g, &Lb);
  loop_end(g, &La);
  loop_end(g, &Lr);
  loop_end(g, &Li);
  return end_kernel(g, start, 0, out, err, errcap);
}

/* ---- pooling ------------------------------------------------------------------------ */

/* [lo, hi) of window offsets k in [0, K) with 0 <= base + k < I */
static void clip_window(cg *g, LLVMValueRef base, LLVMValueRef K, LLVMValueRef I, LLVMValueRef *lo,
                        LLVMValueRef *hi) {
  LLVMValueRef neg = LLVMBuildNeg(g->b, base, "");
  *lo = LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSGT, neg, c64(g, 0), ""), neg, c64(g, 0), "");
  *hi = smin(g, K, sub(g, I, base));
}

int tlm_codegen_pool(LLVMContextRef ctx, const tlm_task *task, const tlm_schedule *sched,
                     const char *name, const char *cpu, const char *features, LLVMModuleRef *out,
                     char *err, int errcap) {
  const tlm_pool_task *t = &task->u.pool;
  cg gg = {.task = task}, *g = &gg;
  int W = sched->v[PL_VEC], U = sched->v[PL_UNROLL], par = sched->v[PL_PARALLEL];
  if (W < 1 || W > 16 || U < 1 || U > 4) {
    snprintf(err, (size_t)errcap, "pool schedule out of the code generator's range");
    return -1;
  }
  int is_max = t->alg == TLM_POOL_MAX;
  LLVMBasicBlockRef start = begin_kernel(g, ctx, "tlm_pool", name, cpu, features);
  LLVMValueRef args = LLVMGetParam(g->fn, 0);
  LLVMValueRef begin = LLVMGetParam(g->fn, 1), end = LLVMGetParam(g->fn, 2);
  LLVMValueRef dst = arg_field(g, args, offsetof(tlm_pool_args, dst), g->ptr);
  LLVMValueRef src = arg_field(g, args, offsetof(tlm_pool_args, src), g->ptr);
  LLVMValueRef N = arg_field(g, args, offsetof(tlm_pool_args, N), g->i64);
  LLVMValueRef I[3], O[3], ss[5], sd[5];
  I[0] = arg_field(g, args, offsetof(tlm_pool_args, ID), g->i64);
  I[1] = arg_field(g, args, offsetof(tlm_pool_args, IH), g->i64);
  I[2] = arg_field(g, args, offsetof(tlm_pool_args, IW), g->i64);
  O[0] = arg_field(g, args, offsetof(tlm_pool_args, OD), g->i64);
  O[1] = arg_field(g, args, offsetof(tlm_pool_args, OH), g->i64);
  O[2] = arg_field(g, args, offsetof(tlm_pool_args, OW), g->i64);
  for (int i = 0; i < 5; i++) {
    ss[i] = arg_field(g, args, offsetof(tlm_pool_args, ss) + 8 * (size_t)i, g->i64);
    sd[i] = arg_field(g, args, offsetof(tlm_pool_args, sd) + 8 * (size_t)i, g->i64);
  }
  int usrc = (t->unit & TLM_UNIT_POOL_SRC_C) != 0, udst = (t->unit & TLM_UNIT_POOL_DST_C) != 0;
  if (usrc) ss[1] = c64(g, 1);
  if (udst) sd[1] = c64(g, 1);
  int32_t Kst[3] = {t->KD, t->KH, t->KW}, St[3] = {t->sd, t->sh, t->sw}, Pt[3] = {t->pd, t->ph, t->pw};
  LLVMValueRef K[3];
  for (int j = 0; j < 3; j++) K[j] = Kst[j] ? c64(g, Kst[j]) : I[j]; /* 0: global */
  LLVMTypeRef vt = vtype(g, W);
  /* average: sums in double, so windows of millions of positions (global
   * pooling of big 3-D inputs) stay exact to float precision */
  LLVMTypeRef f64 = LLVMDoubleTypeInContext(g->C);
  LLVMTypeRef at = is_max ? vt : LLVMVectorType(f64, (unsigned)W);
  LLVMValueRef acc[4];
  for (int u = 0; u < U; u++) acc[u] = alloca_of(g, at);
  LLVMValueRef rows = mul(g, mul(g, N, O[0]), O[1]);
  loop Li, Lr;
  LLVMValueRef i = loop_begin(g, &Li, begin, end, c64(g, 1));
  LLVMValueRef r = par ? loop_begin(g, &Lr, i, add(g, i, c64(g, 1)), c64(g, 1))
                       : loop_begin(g, &Lr, c64(g, 0), rows, c64(g, 1));
  LLVMValueRef oh = LLVMBuildSRem(g->b, r, O[1], "");
  LLVMValueRef q = LLVMBuildSDiv(g->b, r, O[1], "");
  LLVMValueRef od = LLVMBuildSRem(g->b, q, O[0], "");
  LLVMValueRef n = LLVMBuildSDiv(g->b, q, O[0], "");
  LLVMValueRef base[3], lo[3], hi[3];
  LLVMValueRef opos[2] = {od, oh};
  for (int j = 0; j < 2; j++) {
    base[j] = sub(g, mul(g, opos[j], c64(g, St[j])), c64(g, Pt[j]));
    clip_window(g, base[j], K[j], I[j], &lo[j], &hi[j]);
  }
  loop Lw;
  LLVMValueRef ow = loop_begin(g, &Lw, c64(g, 0), O[2], c64(g, 1));
  base[2] = sub(g, mul(g, ow, c64(g, St[2])), c64(g, Pt[2]));
  clip_window(g, base[2], K[2], I[2], &lo[2], &hi[2]);
  LLVMValueRef count = c64(g, 1);
  for (int j = 0; j < 3; j++) count = mul(g, count, sub(g, hi[j], lo[j]));
  LLVMValueRef inv = LLVMBuildFDiv(g->b, LLVMConstReal(f64, 1.0),
                                   LLVMBuildSIToFP(g->b, count, f64, ""), "");
  LLVMValueRef dbase = gep(g, dst, add(g, add(g, mul(g, n, sd[0]), mul(g, od, sd[2])),
                                       add(g, mul(g, oh, sd[3]), mul(g, ow, sd[4]))));
  LLVMValueRef C = c64(g, t->C), step = c64(g, (int64_t)W * U);
  LLVMValueRef full = c64(g, t->C / ((int64_t)W * U) * ((int64_t)W * U));
  for (int part = 0; part < 2; part++) {
    if (part == 1 && t->C % ((int64_t)W * U) == 0) break;
    loop Lc;
    LLVMValueRef c0 = part == 0 ? loop_begin(g, &Lc, c64(g, 0), full, step)
                                : loop_begin(g, &Lc, full, C, c64(g, W));
    int nu = part == 0 ? U : 1;
    LLVMValueRef mask = part == 1 ? lane_mask(g, 0, W, sub(g, C, c0)) : NULL;
    LLVMValueRef nlast = c64(g, t->C - 1);
    for (int u = 0; u < nu; u++)
      LLVMBuildStore(g->b, is_max ? splat_f(g, -INFINITY, W) : LLVMConstNull(at), acc[u]);
    loop Ld, Lh, Lk;
    LLVMValueRef kd = loop_begin(g, &Ld, lo[0], hi[0], c64(g, 1));
    LLVMValueRef kh = loop_begin(g, &Lh, lo[1], hi[1], c64(g, 1));
    LLVMValueRef kw = loop_begin(g, &Lk, lo[2], hi[2], c64(g, 1));
    LLVMValueRef xoff = add(g, add(g, mul(g, n, ss[0]), mul(g, add(g, base[0], kd), ss[2])),
                            add(g, mul(g, add(g, base[1], kh), ss[3]),
                                mul(g, add(g, base[2], kw), ss[4])));
    LLVMValueRef xb = gep(g, src, xoff);
    for (int u = 0; u < nu; u++) {
      LLVMValueRef cs = add(g, c0, c64(g, (int64_t)u * W));
      LLVMValueRef v = load_lanes(g, xb, cs, usrc, ss[1], W, mask, nlast);
      LLVMValueRef a = LLVMBuildLoad2(g->b, at, acc[u], "");
      LLVMValueRef margs[2] = {a, v};
      /* llvm.maximum propagates NaN (maxnum would drop it) */
      LLVMValueRef res = is_max ? call_intrinsic(g, "llvm.maximum", &vt, 1, margs, 2)
                                : LLVMBuildFAdd(g->b, a, LLVMBuildFPExt(g->b, v, at, ""), "");
      LLVMBuildStore(g->b, res, acc[u]);
    }
    loop_end(g, &Lk);
    loop_end(g, &Lh);
    loop_end(g, &Ld);
    for (int u = 0; u < nu; u++) {
      LLVMValueRef cs = add(g, c0, c64(g, (int64_t)u * W));
      LLVMValueRef v = LLVMBuildLoad2(g->b, at, acc[u], "");
      if (!is_max) {
        LLVMValueRef iv = LLVMBuildInsertElement(g->b, LLVMGetUndef(at), inv, c32(g, 0), "");
        if (W > 1)
          iv = LLVMBuildShuffleVector(g->b, iv, LLVMGetUndef(at),
                                      LLVMConstNull(LLVMVectorType(g->i32, (unsigned)W)), "");
        v = LLVMBuildFPTrunc(g->b, LLVMBuildFMul(g->b, v, iv, ""), vt, "");
      }
      store_lanes(g, v, dbase, cs, udst, sd[1], W, mask);
    }
    loop_end(g, &Lc);
  }
  loop_end(g, &Lw);
  loop_end(g, &Lr);
  loop_end(g, &Li);
  return end_kernel(g, start, 0, out, err, errcap);
}
