/* codegen_attn.c - fused attention (ATT_* decisions): O = softmax(scale Q
 * K^T [causal]) V per (batch, query head), the scores of a block of keys in
 * a stack buffer, never in memory the caller sees.
 *
 * A tile is `QB` rows of the (query head, query row) pairs of one (b, K/V
 * head): the G = Hq / Hkv query heads of a group, each with its Tq rows
 * (a decode step: the group's heads share each K and V row read).
 * For each block of `KB` keys up to the tile's causal limit:
 *   scores  S[i][j] = scale * q_i . k_j (vectors of W lanes along D, one
 *           horizontal sum per score; each K row is loaded once for the QB
 *           rows); keys past row i's limit get -inf;
 *   online softmax per row (Milakov & Gimelshein 2018): m' = max(m, max_j
 *           S[i][j]); the running sum l and the accumulators scaled by
 *           exp(m - m'); S[i][j] = exp(S[i][j] - m'), added to l
 *           (vectorized over the block's keys);
 *   P V     acc_i += S[i][j] v_j (each V row loaded once for the QB rows).
 * Then O row i = acc_i / l. Rows past Tq in the last tile repeat row Tq - 1
 * and are not stored. That is the register-tile form (QB <= 8,
 * att_body_regs: decode steps); tiles of 16-64 rows (prefills) keep their
 * state in L1 and compute the scores transposed (att_body_l1). exp is the
 * kernels' inline exp (cg_common.h): -inf gives exactly 0. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "../runtime/kernel_abi.h"
#include "../runtime/space.h"
#include "cg_common.h"
#include "codegen.h"

/* vectors of a K or V row, and accumulators of a tile (QB x ceil(Dv / W)):
 * the space offers at most 64 accumulators unless one row alone has more
 * (head dims up to 1024, validation's bound, on a scalar target) */
#define ATT_MAX_VECS 1024

/* an i64 scalar in every lane of a W-lane vector */
static LLVMValueRef splat_i64(cg *g, LLVMValueRef s, int w) {
  LLVMTypeRef vt = LLVMVectorType(g->i64, (unsigned)w);
  LLVMValueRef v = LLVMBuildInsertElement(g->b, LLVMGetUndef(vt), s, c32(g, 0), "");
  return LLVMBuildShuffleVector(g->b, v, LLVMGetUndef(vt),
                                LLVMConstNull(LLVMVectorType(g->i32, (unsigned)w)), "");
}

/* Software prefetch (into L1, for reading) of every 64-byte line of a row
 * of `bytes` contiguous bytes at p. The K and V streams of a decode step
 * are read once each from memory; prefetching the V rows of a key block
 * while its scores are computed, and the next block's K rows during P V,
 * keeps both streams in flight (prefetch never faults past the end). */
static void prefetch_row(cg *g, LLVMValueRef p, int64_t bytes) {
  LLVMTypeRef ovl[1] = {g->ptr};
  for (int64_t off = 0; off < bytes; off += 64) {
    LLVMValueRef a = LLVMBuildGEP2(g->b, LLVMInt8TypeInContext(g->C), p,
                                   (LLVMValueRef[]){c64(g, off)}, 1, "");
    LLVMValueRef args[4] = {a, c32(g, 0), c32(g, 3), c32(g, 1)};
    call_intrinsic(g, "llvm.prefetch", ovl, 1, args, 4);
  }
}

/* W vectors of W lanes -> one vector whose lane u is the sum of p[u]'s
 * lanes: log2(W) levels of pairwise merges, each folding every target's
 * block of lanes in half (two shuffles and an add per merge, W - 1 merges;
 * W horizontal sums would take W log2(W) steps). W is a power of two. */
static LLVMValueRef reduce_transpose(cg *g, LLVMValueRef *p, int W) {
  LLVMValueRef cur[16];
  for (int u = 0; u < W; u++) cur[u] = p[u];
  int n = W, m = 1; /* n vectors of m targets each, blocks of W / m lanes */
  while (n > 1) {
    int ob = W / m, hb = ob / 2;
    LLVMValueRef ma[16], mb[16];
    for (int k = 0; k < W; k++) {
      int side = k >= W / 2, kk = k - side * (W / 2), t = kk / hb, o = kk % hb;
      ma[k] = c32(g, side * W + t * ob + o);
      mb[k] = c32(g, side * W + t * ob + hb + o);
    }
    LLVMValueRef A = LLVMConstVector(ma, (unsigned)W), Bm = LLVMConstVector(mb, (unsigned)W);
    for (int q = 0; q < n / 2; q++) {
      LLVMValueRef x = cur[2 * q], y = cur[2 * q + 1];
      cur[q] = LLVMBuildFAdd(g->b, LLVMBuildShuffleVector(g->b, x, y, A, ""),
                             LLVMBuildShuffleVector(g->b, x, y, Bm, ""), "");
    }
    n /= 2;
    m *= 2;
  }
  return cur[0];
}

/* *slot += x * y (a W-lane accumulator kept in an alloca: registers after
 * mem2reg) */
static void acc_fma(cg *g, LLVMValueRef slot, LLVMValueRef x, LLVMValueRef y) {
  LLVMTypeRef vt = LLVMGetAllocatedType(slot);
  LLVMValueRef a3[3] = {x, y, LLVMBuildLoad2(g->b, vt, slot, "")};
  LLVMBuildStore(g->b, call_intrinsic(g, "llvm.fmuladd", &vt, 1, a3, 3), slot);
}

/* the kernel's arguments, loaded once at entry */
typedef struct att {
  LLVMValueRef po, pq, pk, pv, B, Hq, Hkv, Tq, Tk, scale;
  LLVMValueRef sq[4], sk[4], sv[4], so[4];
  int uq, uk, uv, uo; /* unit stride along D (Dv) */
  int W, nD, nV;
  LLVMValueRef dmask, vmask, dlast, vlast; /* the last vector along D and Dv */
} att;

static void att_load(cg *g, const tlm_attn_task *t, int W, att *a) {
  LLVMValueRef args = LLVMGetParam(g->fn, 0);
  a->po = arg_field(g, args, offsetof(tlm_attn_args, o), g->ptr);
  a->pq = arg_field(g, args, offsetof(tlm_attn_args, q), g->ptr);
  a->pk = arg_field(g, args, offsetof(tlm_attn_args, k), g->ptr);
  a->pv = arg_field(g, args, offsetof(tlm_attn_args, v), g->ptr);
  a->B = arg_field(g, args, offsetof(tlm_attn_args, B), g->i64);
  a->Hq = arg_field(g, args, offsetof(tlm_attn_args, Hq), g->i64);
  a->Hkv = arg_field(g, args, offsetof(tlm_attn_args, Hkv), g->i64);
  a->Tq = arg_field(g, args, offsetof(tlm_attn_args, Tq), g->i64);
  a->Tk = arg_field(g, args, offsetof(tlm_attn_args, Tk), g->i64);
  a->scale = arg_field(g, args, offsetof(tlm_attn_args, scale), g->f32);
  for (int i = 0; i < 4; i++) {
    a->sq[i] = arg_field(g, args, offsetof(tlm_attn_args, sq) + 8 * (size_t)i, g->i64);
    a->sk[i] = arg_field(g, args, offsetof(tlm_attn_args, sk) + 8 * (size_t)i, g->i64);
    a->sv[i] = arg_field(g, args, offsetof(tlm_attn_args, sv) + 8 * (size_t)i, g->i64);
    a->so[i] = arg_field(g, args, offsetof(tlm_attn_args, so) + 8 * (size_t)i, g->i64);
  }
  a->uq = (t->unit & TLM_UNIT_ATT_Q) != 0, a->uk = (t->unit & TLM_UNIT_ATT_K) != 0;
  a->uv = (t->unit & TLM_UNIT_ATT_V) != 0, a->uo = (t->unit & TLM_UNIT_ATT_O) != 0;
  if (a->uq) a->sq[3] = c64(g, 1);
  if (a->uk) a->sk[3] = c64(g, 1);
  if (a->uv) a->sv[3] = c64(g, 1);
  if (a->uo) a->so[3] = c64(g, 1);
  a->W = W;
  a->nD = (int)((t->D + W - 1) / W), a->nV = (int)((t->Dv + W - 1) / W);
  a->dlast = c64(g, t->D - 1), a->vlast = c64(g, t->Dv - 1);
  a->dmask = t->D % W ? lane_mask(g, 0, W, c64(g, t->D % W)) : NULL;
  a->vmask = t->Dv % W ? lane_mask(g, 0, W, c64(g, t->Dv % W)) : NULL;
}

/* vector c of a row along D (K, Q) or Dv (V) */
static LLVMValueRef att_dvec(cg *g, const att *a, LLVMValueRef row, int c, int unit,
                             LLVMValueRef stride) {
  return load_lanes(g, row, c64(g, (int64_t)c * a->W), unit, stride, a->W,
                    c == a->nD - 1 ? a->dmask : NULL, a->dlast);
}
static LLVMValueRef att_vvec(cg *g, const att *a, LLVMValueRef row, int c) {
  return load_lanes(g, row, c64(g, (int64_t)c * a->W), a->uv, a->sv[3], a->W,
                    c == a->nV - 1 ? a->vmask : NULL, a->vlast);
}

/* Scores of `nr` rows against keys [j0, j0 + jn): srow[i][jj] = scale *
 * q_i . k_{j0+jj}, -inf past row i's causal limit rlim[i]. W keys at a time
 * (each K row loaded once for the nr rows, one transposing reduction per W
 * scores), then one at a time. With `pf_v`, the V rows of the block are
 * prefetched while the scores are computed. */
static void att_scores(cg *g, const tlm_attn_task *t, const att *a, int nr, LLVMValueRef *qrow,
                       LLVMValueRef *rlim, LLVMValueRef *srow, LLVMValueRef kbase,
                       LLVMValueRef vbase, LLVMValueRef j0, LLVMValueRef jn, int pf_v) {
  int W = a->W, nD = a->nD;
  LLVMTypeRef vt = vtype(g, W), ft = g->f32;
  LLVMValueRef ninf = LLVMConstReal(ft, -INFINITY), zero = LLVMConstNull(vt);
  LLVMValueRef jfull = mul(g, LLVMBuildSDiv(g->b, jn, c64(g, W), ""), c64(g, W));
  if (W > 1) {
    loop Lj;
    LLVMValueRef jj = loop_begin(g, &Lj, c64(g, 0), jfull, c64(g, W));
    LLVMValueRef j = add(g, j0, jj);
    for (int i = 0; i < nr; i++) {
      LLVMValueRef qv[ATT_MAX_VECS];
      for (int c = 0; c < nD; c++) qv[c] = att_dvec(g, a, qrow[i], c, a->uq, a->sq[3]);
      LLVMValueRef part[16];
      for (int u = 0; u < W; u++) { /* q_i . k_{j+u}, W lanes of partial sums */
        LLVMValueRef krow = gep(g, kbase, mul(g, add(g, j, c64(g, u)), a->sk[2]));
        if (i == 0 && pf_v)
          prefetch_row(g, gep(g, vbase, mul(g, add(g, j, c64(g, u)), a->sv[2])), t->Dv * 4);
        LLVMValueRef dot = zero;
        for (int c = 0; c < nD; c++) {
          LLVMValueRef a3[3] = {qv[c], att_dvec(g, a, krow, c, a->uk, a->sk[3]), dot};
          dot = call_intrinsic(g, "llvm.fmuladd", &vt, 1, a3, 3);
        }
        part[u] = dot;
      }
      LLVMValueRef s = reduce_transpose(g, part, W);
      s = LLVMBuildFMul(g->b, s, splat(g, a->scale, W), "");
      if (t->causal) {
        LLVMValueRef keys = LLVMBuildAdd(g->b, splat_i64(g, j, W), lane_ids(g, 0, W), "");
        LLVMValueRef late = LLVMBuildICmp(g->b, LLVMIntSGT, keys, splat_i64(g, rlim[i], W), "");
        s = LLVMBuildSelect(g->b, late, splat(g, ninf, W), s, "");
      }
      store(g, s, gep(g, srow[i], jj), 4);
    }
    loop_end(g, &Lj);
  }
  loop Lj;
  LLVMValueRef jj = loop_begin(g, &Lj, W > 1 ? jfull : c64(g, 0), jn, c64(g, 1));
  LLVMValueRef j = add(g, j0, jj);
  LLVMValueRef krow = gep(g, kbase, mul(g, j, a->sk[2]));
  if (pf_v) prefetch_row(g, gep(g, vbase, mul(g, j, a->sv[2])), t->Dv * 4);
  LLVMValueRef kv[ATT_MAX_VECS];
  for (int c = 0; c < nD; c++) kv[c] = att_dvec(g, a, krow, c, a->uk, a->sk[3]);
  for (int i = 0; i < nr; i++) {
    LLVMValueRef dot = zero;
    for (int c = 0; c < nD; c++) {
      LLVMValueRef a3[3] = {att_dvec(g, a, qrow[i], c, a->uq, a->sq[3]), kv[c], dot};
      dot = call_intrinsic(g, "llvm.fmuladd", &vt, 1, a3, 3);
    }
    LLVMValueRef a2[2] = {LLVMConstReal(ft, 0.0), dot};
    LLVMValueRef s = call_intrinsic(g, "llvm.vector.reduce.fadd", &vt, 1, a2, 2);
    s = LLVMBuildFMul(g->b, s, a->scale, "");
    if (t->causal)
      s = LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSGT, j, rlim[i], ""), ninf, s, "");
    store(g, s, gep(g, srow[i], jj), 4);
  }
  loop_end(g, &Lj);
}

/* Online softmax of one row's scores srow[0, jn) (W at a time): the running
 * max *mp and sum *lp are updated, the scores become exp(s - m'); returns
 * the factor exp(m - m') the row's accumulators are to be scaled by. */
static LLVMValueRef att_softmax_row(cg *g, int W, LLVMValueRef srow, LLVMValueRef jn,
                                    LLVMValueRef mp, LLVMValueRef lp) {
  LLVMTypeRef vt = vtype(g, W), ft = g->f32;
  LLVMValueRef ninf = LLVMConstReal(ft, -INFINITY), zero = LLVMConstNull(vt);
  LLVMValueRef vmx = alloca_of(g, vt), vsum = alloca_of(g, vt);
  LLVMBuildStore(g->b, splat(g, ninf, W), vmx);
  loop L1;
  LLVMValueRef c1 = loop_begin(g, &L1, c64(g, 0), jn, c64(g, W));
  LLVMValueRef mk1 = lane_mask(g, 0, W, sub(g, jn, c1));
  LLVMValueRef x1 = load_lanes(g, srow, c1, 1, c64(g, 1), W, mk1, NULL);
  x1 = LLVMBuildSelect(g->b, mk1, x1, splat(g, ninf, W), "");
  LLVMValueRef mm[2] = {LLVMBuildLoad2(g->b, vt, vmx, ""), x1};
  LLVMBuildStore(g->b, call_intrinsic(g, "llvm.maxnum", &vt, 1, mm, 2), vmx);
  loop_end(g, &L1);
  LLVMValueRef vm = LLVMBuildLoad2(g->b, vt, vmx, "");
  LLVMValueRef bmax = call_intrinsic(g, "llvm.vector.reduce.fmax", &vt, 1, &vm, 1);
  LLVMValueRef mold = LLVMBuildLoad2(g->b, ft, mp, "");
  LLVMValueRef mo[2] = {mold, bmax};
  LLVMValueRef mnew = call_intrinsic(g, "llvm.maxnum", &ft, 1, mo, 2);
  LLVMValueRef d1 = LLVMBuildInsertElement(g->b, LLVMGetUndef(vtype(g, 1)),
                                           LLVMBuildFSub(g->b, mold, mnew, ""), c32(g, 0), "");
  LLVMValueRef corr = LLVMBuildExtractElement(g->b, vexp(g, d1, 1), c32(g, 0), "");
  LLVMBuildStore(g->b, mnew, mp);
  LLVMBuildStore(g->b, zero, vsum);
  loop L2;
  LLVMValueRef c2 = loop_begin(g, &L2, c64(g, 0), jn, c64(g, W));
  LLVMValueRef mk2 = lane_mask(g, 0, W, sub(g, jn, c2));
  LLVMValueRef x2 = load_lanes(g, srow, c2, 1, c64(g, 1), W, mk2, NULL);
  LLVMValueRef p = vexp(g, LLVMBuildFSub(g->b, x2, splat(g, mnew, W), ""), W);
  p = LLVMBuildSelect(g->b, mk2, p, zero, "");
  store_lanes(g, p, srow, c2, 1, c64(g, 1), W, mk2);
  LLVMBuildStore(g->b, LLVMBuildFAdd(g->b, LLVMBuildLoad2(g->b, vt, vsum, ""), p, ""), vsum);
  loop_end(g, &L2);
  LLVMValueRef sa[2] = {LLVMConstReal(ft, 0.0), LLVMBuildLoad2(g->b, vt, vsum, "")};
  LLVMValueRef bsum = call_intrinsic(g, "llvm.vector.reduce.fadd", &vt, 1, sa, 2);
  LLVMValueRef lold = LLVMBuildFMul(g->b, LLVMBuildLoad2(g->b, ft, lp, ""), corr, "");
  LLVMBuildStore(g->b, LLVMBuildFAdd(g->b, lold, bsum, ""), lp);
  return corr;
}

/* (query head, query row) pair r of the tile's (b, K/V head): its Q and O
 * rows and the last key it sees */
static void att_row(cg *g, const att *a, LLVMValueRef G, LLVMValueRef kvh, LLVMValueRef qbase,
                    LLVMValueRef obase, LLVMValueRef r, LLVMValueRef *qrow, LLVMValueRef *orow,
                    LLVMValueRef *rlim) {
  LLVMValueRef tq = LLVMBuildSRem(g->b, r, a->Tq, "");
  LLVMValueRef h = add(g, mul(g, kvh, G), LLVMBuildSDiv(g->b, r, a->Tq, ""));
  *qrow = gep(g, qbase, add(g, mul(g, h, a->sq[1]), mul(g, tq, a->sq[2])));
  if (orow) *orow = gep(g, obase, add(g, mul(g, h, a->so[1]), mul(g, tq, a->so[2])));
  *rlim = add(g, tq, sub(g, a->Tk, a->Tq)); /* causal: row tq sees keys j <= tq + Tk - Tq */
}

/* Register tiles (QB <= 8): the tile's accumulators (QB x nV vectors) stay
 * in registers across the key blocks, each K and V row read once for the
 * QB rows from wherever it is (a decode step streams K and V from memory
 * once). */
static void att_body_regs(cg *g, const tlm_attn_task *t, const att *a, int QB, int KB,
                          LLVMValueRef G, LLVMValueRef kvh, LLVMValueRef r0, LLVMValueRef R,
                          LLVMValueRef nrows, LLVMValueRef qbase, LLVMValueRef obase,
                          LLVMValueRef kbase, LLVMValueRef vbase) {
  int W = a->W, nV = a->nV;
  LLVMTypeRef vt = vtype(g, W), ft = g->f32;
  LLVMValueRef ninf = LLVMConstReal(ft, -INFINITY), zero = LLVMConstNull(vt);
  LLVMValueRef m[8], l[8], acc[ATT_MAX_VECS], qrow[8], orow[8], rlim[8], srow[8];
  LLVMValueRef S = LLVMBuildAlloca(g->ab, LLVMArrayType(ft, (unsigned)(QB * KB)), "scores");
  LLVMSetAlignment(S, 64);
  for (int i = 0; i < QB; i++) m[i] = alloca_of(g, ft), l[i] = alloca_of(g, ft);
  for (int i = 0; i < QB * nV; i++) acc[i] = alloca_of(g, vt);
  LLVMValueRef kmax = NULL;
  for (int i = 0; i < QB; i++) {
    LLVMValueRef r = smin(g, add(g, r0, c64(g, i)), sub(g, R, c64(g, 1)));
    att_row(g, a, G, kvh, qbase, obase, r, &qrow[i], &orow[i], &rlim[i]);
    srow[i] = gep(g, S, c64(g, (int64_t)i * KB));
    kmax = i ? LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSGT, rlim[i], kmax, ""), rlim[i],
                               kmax, "")
             : rlim[i];
    LLVMBuildStore(g->b, ninf, m[i]);
    LLVMBuildStore(g->b, LLVMConstReal(ft, 0.0), l[i]);
    for (int c = 0; c < nV; c++) LLVMBuildStore(g->b, zero, acc[i * nV + c]);
  }
  /* keys [0, kend): all, or up to the furthest limit of the tile's rows */
  LLVMValueRef kend = t->causal ? smin(g, a->Tk, add(g, kmax, c64(g, 1))) : a->Tk;
  loop Lb;
  LLVMValueRef j0 = loop_begin_outer(g, &Lb, c64(g, 0), kend, c64(g, KB));
  LLVMValueRef jn = smin(g, c64(g, KB), sub(g, kend, j0));
  att_scores(g, t, a, QB, qrow, rlim, srow, kbase, vbase, j0, jn, a->uv);
  for (int i = 0; i < QB; i++) {
    LLVMValueRef cv = splat(g, att_softmax_row(g, W, srow[i], jn, m[i], l[i]), W);
    for (int c = 0; c < nV; c++)
      LLVMBuildStore(g->b, LLVMBuildFMul(g->b, LLVMBuildLoad2(g->b, vt, acc[i * nV + c], ""), cv, ""),
                     acc[i * nV + c]);
  }
  /* P V */
  loop Lj;
  LLVMValueRef jj = loop_begin(g, &Lj, c64(g, 0), jn, c64(g, 1));
  LLVMValueRef vrow = gep(g, vbase, mul(g, add(g, j0, jj), a->sv[2]));
  if (a->uk) /* the next block's K row, KB keys ahead */
    prefetch_row(g, gep(g, kbase, mul(g, add(g, add(g, j0, c64(g, KB)), jj), a->sk[2])), t->D * 4);
  LLVMValueRef vv[ATT_MAX_VECS];
  for (int c = 0; c < nV; c++) vv[c] = att_vvec(g, a, vrow, c);
  for (int i = 0; i < QB; i++) {
    LLVMValueRef ps = splat(g, load(g, ft, gep(g, srow[i], jj), 4), W);
    for (int c = 0; c < nV; c++) acc_fma(g, acc[i * nV + c], ps, vv[c]);
  }
  loop_end(g, &Lj);
  loop_end(g, &Lb);
  /* O = acc / l for the tile's valid rows */
  for (int i = 0; i < QB; i++) {
    LLVMBasicBlockRef join = i ? if_begin(g, LLVMBuildICmp(g->b, LLVMIntSLT, c64(g, i), nrows, ""))
                               : NULL;
    LLVMValueRef inv = LLVMBuildFDiv(g->b, LLVMConstReal(ft, 1.0), LLVMBuildLoad2(g->b, ft, l[i], ""), "");
    LLVMValueRef iv = splat(g, inv, W);
    for (int c = 0; c < nV; c++) {
      LLVMValueRef x = LLVMBuildFMul(g->b, LLVMBuildLoad2(g->b, vt, acc[i * nV + c], ""), iv, "");
      store_lanes(g, x, orow[i], c64(g, (int64_t)c * W), a->uo, a->so[3], W,
                  c == nV - 1 ? a->vmask : NULL);
    }
    if (join) if_end(g, join);
  }
}

static LLVMValueRef gep_i64(cg *g, LLVMValueRef base, LLVMValueRef idx) {
  return LLVMBuildGEP2(g->b, g->i64, base, &idx, 1, "");
}

/* Scores of keys [j0 + jj, j0 + jj + nk) for every row of an L1 tile,
 * transposed: ST[key][row] (QB rows, nrv vectors of W rows each) = scale *
 * sum_d K[key][d] QT[d][row], each K element broadcast once for the tile's
 * rows (an outer product per d: nk x nrv accumulators, no horizontal sums);
 * -inf past each row's causal limit (RL, QB i64 limits). */
static void att_scores_t(cg *g, const tlm_attn_task *t, const att *a, int QB, int nk,
                         LLVMValueRef QT, LLVMValueRef RL, LLVMValueRef ST, LLVMValueRef kbase,
                         LLVMValueRef j0, LLVMValueRef jj) {
  int W = a->W, nrv = QB / W;
  LLVMTypeRef vt = vtype(g, W), ft = g->f32, it = LLVMVectorType(g->i64, (unsigned)W);
  LLVMValueRef acc[64], krow[16];
  for (int k = 0; k < nk; k++) {
    krow[k] = gep(g, kbase, mul(g, add(g, j0, add(g, jj, c64(g, k))), a->sk[2]));
    for (int r = 0; r < nrv; r++) {
      acc[k * nrv + r] = alloca_of(g, vt);
      LLVMBuildStore(g->b, LLVMConstNull(vt), acc[k * nrv + r]);
    }
  }
  loop Ld;
  LLVMValueRef d = loop_begin(g, &Ld, c64(g, 0), c64(g, t->D), c64(g, 1));
  LLVMValueRef qv[16];
  for (int r = 0; r < nrv; r++)
    qv[r] = load(g, vt, gep(g, QT, add(g, mul(g, d, c64(g, QB)), c64(g, (int64_t)r * W))), 4);
  LLVMValueRef dk = a->uk ? d : mul(g, d, a->sk[3]);
  for (int k = 0; k < nk; k++) {
    LLVMValueRef kb = splat(g, load(g, ft, gep(g, krow[k], dk), 4), W);
    for (int r = 0; r < nrv; r++) acc_fma(g, acc[k * nrv + r], kb, qv[r]);
  }
  loop_end(g, &Ld);
  LLVMValueRef sc = splat(g, a->scale, W), ninf = splat(g, LLVMConstReal(ft, -INFINITY), W);
  for (int r = 0; r < nrv; r++) {
    LLVMValueRef lim = t->causal ? load(g, it, gep_i64(g, RL, c64(g, (int64_t)r * W)), 8) : NULL;
    for (int k = 0; k < nk; k++) {
      LLVMValueRef x = LLVMBuildFMul(g->b, LLVMBuildLoad2(g->b, vt, acc[k * nrv + r], ""), sc, "");
      if (t->causal) {
        LLVMValueRef key = splat_i64(g, add(g, j0, add(g, jj, c64(g, k))), W);
        x = LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSGT, key, lim, ""), ninf, x, "");
      }
      LLVMValueRef at = add(g, mul(g, add(g, jj, c64(g, k)), c64(g, QB)), c64(g, (int64_t)r * W));
      store(g, x, gep(g, ST, at), 4);
    }
  }
}

/* Tiles in L1 (QB = 16, 32 or 64 rows, a multiple of W and of ATT_RQ: a
 * prefill). Per tile, Q transposed (QT[d][row]) and the rows' causal
 * limits; the accumulators (QB x Dv, padded to whole vectors), the
 * transposed scores of a key block, the running max, sum and correction
 * live in the thread's scratch buffer. Per key block: the scores as outer
 * products (each K element read once per tile), the online softmax with the rows in the
 * vector lanes (no horizontal reductions), then P V as a small matmul
 * O[QB x Dv] += P[QB x jn] V[jn x Dv] in register tiles of ATT_RQ rows x cv
 * vectors, the accumulators scaled by the rows' corrections as they are
 * loaded. */
#define ATT_RQ 4
static void att_body_l1(cg *g, const tlm_attn_task *t, const tlm_schedule *sched, const att *a,
                        int QB, int KB, int regs,
                        LLVMValueRef G, LLVMValueRef kvh, LLVMValueRef r0, LLVMValueRef R,
                        LLVMValueRef nrows, LLVMValueRef qbase, LLVMValueRef obase,
                        LLVMValueRef kbase, LLVMValueRef vbase) {
  int W = a->W, nV = a->nV, Dp = nV * W, nrv = QB / W;
  LLVMTypeRef vt = vtype(g, W), ft = g->f32;
  LLVMValueRef ninf = LLVMConstReal(ft, -INFINITY), zero = LLVMConstNull(vt);
  /* cv: vectors along Dv per P V register tile, a divisor of nV with the
   * ATT_RQ x cv accumulators, cv V vectors and a broadcast in registers;
   * rk: keys per scores register tile (rk x nrv accumulators, nrv Q
   * vectors and a broadcast) */
  int cv = 1, rk = 1;
  for (int c = 1; c <= nV && c <= 8; c++)
    if (nV % c == 0 && ATT_RQ * c + c + 1 <= regs) cv = c;
  for (int k = 1; k <= 16 && k * nrv <= 64; k++)
    if (k * nrv + nrv + 1 <= regs) rk = k;
  /* the tile's state in the thread's scratch (up to 192 KiB: not the
   * caller's stack), laid out by tlm_attn_scratch_layout */
  int64_t off[7];
  tlm_attn_scratch_layout(g->task, sched, off);
  LLVMValueRef arr[7], scratch = LLVMGetParam(g->fn, 3);
  for (int i = 0; i < 7; i++) arr[i] = gep(g, scratch, c64(g, off[i] / 4));
  LLVMValueRef ST = arr[0], QT = arr[1], Acc = arr[2], M = arr[3], L = arr[4], C = arr[5];
  LLVMValueRef RL = arr[6];
  /* the furthest causal limit of the tile's rows: the last row's, or, where
   * the tile crosses into another query head, the last query row's */
  LLVMValueRef rl = sub(g, add(g, r0, nrows), c64(g, 1));
  LLVMValueRef same = LLVMBuildICmp(g->b, LLVMIntEQ, LLVMBuildSDiv(g->b, r0, a->Tq, ""),
                                    LLVMBuildSDiv(g->b, rl, a->Tq, ""), "");
  LLVMValueRef tqmax = LLVMBuildSelect(g->b, same, LLVMBuildSRem(g->b, rl, a->Tq, ""),
                                       sub(g, a->Tq, c64(g, 1)), "");
  LLVMValueRef kmax = add(g, tqmax, sub(g, a->Tk, a->Tq));
  LLVMValueRef kend = t->causal ? smin(g, a->Tk, add(g, kmax, c64(g, 1))) : a->Tk;
  {
    /* rows past the task's last repeat it (computed, never stored) */
    loop Li;
    LLVMValueRef i = loop_begin_outer(g, &Li, c64(g, 0), c64(g, QB), c64(g, 1));
    LLVMValueRef r = smin(g, add(g, r0, i), sub(g, R, c64(g, 1))), qrow, rlim;
    att_row(g, a, G, kvh, qbase, NULL, r, &qrow, NULL, &rlim);
    LLVMBuildStore(g->b, rlim, gep_i64(g, RL, i));
    LLVMBuildStore(g->b, ninf, gep(g, M, i));
    LLVMBuildStore(g->b, LLVMConstReal(ft, 0.0), gep(g, L, i));
    for (int c = 0; c < nV; c++)
      store(g, zero, gep(g, Acc, add(g, mul(g, i, c64(g, Dp)), c64(g, (int64_t)c * W))), 4);
    loop Ld;
    LLVMValueRef d = loop_begin(g, &Ld, c64(g, 0), c64(g, t->D), c64(g, 1));
    LLVMValueRef x = load(g, ft, gep(g, qrow, a->uq ? d : mul(g, d, a->sq[3])), 4);
    store(g, x, gep(g, QT, add(g, mul(g, d, c64(g, QB)), i)), 4);
    loop_end(g, &Ld);
    loop_end(g, &Li);
  }
  loop Lb;
  LLVMValueRef j0 = loop_begin_outer(g, &Lb, c64(g, 0), kend, c64(g, KB));
  LLVMValueRef jn = smin(g, c64(g, KB), sub(g, kend, j0));
  {
    LLVMValueRef jfull = mul(g, LLVMBuildSDiv(g->b, jn, c64(g, rk), ""), c64(g, rk));
    loop Lk;
    LLVMValueRef jj = loop_begin_outer(g, &Lk, c64(g, 0), jfull, c64(g, rk));
    att_scores_t(g, t, a, QB, rk, QT, RL, ST, kbase, j0, jj);
    loop_end(g, &Lk);
    loop Lk1;
    jj = loop_begin_outer(g, &Lk1, jfull, jn, c64(g, 1));
    att_scores_t(g, t, a, QB, 1, QT, RL, ST, kbase, j0, jj);
    loop_end(g, &Lk1);
  }
  /* online softmax, W rows at a time */
  for (int r = 0; r < nrv; r++) {
    LLVMValueRef col = c64(g, (int64_t)r * W), vmx = alloca_of(g, vt), vsum = alloca_of(g, vt);
    LLVMBuildStore(g->b, splat(g, ninf, W), vmx);
    loop L1;
    LLVMValueRef j1 = loop_begin(g, &L1, c64(g, 0), jn, c64(g, 1));
    LLVMValueRef mm[2] = {LLVMBuildLoad2(g->b, vt, vmx, ""),
                          load(g, vt, gep(g, ST, add(g, mul(g, j1, c64(g, QB)), col)), 4)};
    LLVMBuildStore(g->b, call_intrinsic(g, "llvm.maxnum", &vt, 1, mm, 2), vmx);
    loop_end(g, &L1);
    LLVMValueRef mold = load(g, vt, gep(g, M, col), 4);
    LLVMValueRef mo[2] = {mold, LLVMBuildLoad2(g->b, vt, vmx, "")};
    LLVMValueRef mnew = call_intrinsic(g, "llvm.maxnum", &vt, 1, mo, 2);
    LLVMValueRef corr = vexp(g, LLVMBuildFSub(g->b, mold, mnew, ""), W);
    store(g, mnew, gep(g, M, col), 4);
    store(g, corr, gep(g, C, col), 4);
    LLVMBuildStore(g->b, zero, vsum);
    loop L2;
    LLVMValueRef j2 = loop_begin(g, &L2, c64(g, 0), jn, c64(g, 1));
    LLVMValueRef sp = gep(g, ST, add(g, mul(g, j2, c64(g, QB)), col));
    LLVMValueRef p = vexp(g, LLVMBuildFSub(g->b, load(g, vt, sp, 4), mnew, ""), W);
    store(g, p, sp, 4);
    LLVMBuildStore(g->b, LLVMBuildFAdd(g->b, LLVMBuildLoad2(g->b, vt, vsum, ""), p, ""), vsum);
    loop_end(g, &L2);
    LLVMValueRef lold = LLVMBuildFMul(g->b, load(g, vt, gep(g, L, col), 4), corr, "");
    store(g, LLVMBuildFAdd(g->b, lold, LLVMBuildLoad2(g->b, vt, vsum, ""), ""), gep(g, L, col), 4);
  }
  /* P V: rows in groups of ATT_RQ, Dv in runs of cv vectors */
  loop Lr;
  LLVMValueRef i0 = loop_begin_outer(g, &Lr, c64(g, 0), c64(g, QB), c64(g, ATT_RQ));
  for (int c0 = 0; c0 < nV; c0 += cv) {
    LLVMValueRef acc[ATT_RQ * 8], arow[ATT_RQ];
    for (int ii = 0; ii < ATT_RQ; ii++) {
      LLVMValueRef row = add(g, i0, c64(g, ii));
      LLVMValueRef cs = splat(g, load(g, ft, gep(g, C, row), 4), W);
      arow[ii] = gep(g, Acc, mul(g, row, c64(g, Dp)));
      for (int cc = 0; cc < cv; cc++) {
        acc[ii * cv + cc] = alloca_of(g, vt);
        LLVMValueRef x = load(g, vt, gep(g, arow[ii], c64(g, (int64_t)(c0 + cc) * W)), 4);
        LLVMBuildStore(g->b, LLVMBuildFMul(g->b, x, cs, ""), acc[ii * cv + cc]);
      }
    }
    loop Lj;
    LLVMValueRef jj = loop_begin(g, &Lj, c64(g, 0), jn, c64(g, 1));
    LLVMValueRef vrow = gep(g, vbase, mul(g, add(g, j0, jj), a->sv[2]));
    LLVMValueRef vv[8];
    for (int cc = 0; cc < cv; cc++) vv[cc] = att_vvec(g, a, vrow, c0 + cc);
    LLVMValueRef prow = gep(g, ST, add(g, mul(g, jj, c64(g, QB)), i0));
    for (int ii = 0; ii < ATT_RQ; ii++) {
      LLVMValueRef ps = splat(g, load(g, ft, gep(g, prow, c64(g, ii)), 4), W);
      for (int cc = 0; cc < cv; cc++) acc_fma(g, acc[ii * cv + cc], ps, vv[cc]);
    }
    loop_end(g, &Lj);
    for (int ii = 0; ii < ATT_RQ; ii++)
      for (int cc = 0; cc < cv; cc++)
        store(g, LLVMBuildLoad2(g->b, vt, acc[ii * cv + cc], ""),
              gep(g, arow[ii], c64(g, (int64_t)(c0 + cc) * W)), 4);
  }
  loop_end(g, &Lr);
  loop_end(g, &Lb);
  /* O = acc / l for the tile's valid rows */
  loop Li;
  LLVMValueRef i = loop_begin_outer(g, &Li, c64(g, 0), nrows, c64(g, 1));
  LLVMValueRef qrow, orow, rlim;
  att_row(g, a, G, kvh, qbase, obase, add(g, r0, i), &qrow, &orow, &rlim);
  LLVMValueRef iv = splat(g, LLVMBuildFDiv(g->b, LLVMConstReal(ft, 1.0),
                                           load(g, ft, gep(g, L, i), 4), ""), W);
  LLVMValueRef arow = gep(g, Acc, mul(g, i, c64(g, Dp)));
  for (int c = 0; c < nV; c++) {
    LLVMValueRef x = LLVMBuildFMul(g->b, load(g, vt, gep(g, arow, c64(g, (int64_t)c * W)), 4), iv, "");
    store_lanes(g, x, orow, c64(g, (int64_t)c * W), a->uo, a->so[3], W,
                c == nV - 1 ? a->vmask : NULL);
  }
  loop_end(g, &Li);
}

int tlm_codegen_attention(LLVMContextRef ctx, const tlm_task *task, const tlm_schedule *sched,
                          const char *name, const char *cpu, const char *features,
                          LLVMModuleRef *out, char *err, int errcap) {
  const tlm_attn_task *t = &task->u.attn;
  int W = sched->v[ATT_VEC], QB = sched->v[ATT_QBLOCK], KB = sched->v[ATT_KBLOCK];
  int par = sched->v[ATT_PARALLEL];
  int64_t nD = (t->D + W - 1) / (W > 0 ? W : 1), nV = (t->Dv + W - 1) / (W > 0 ? W : 1);
  int l1_tile = QB > 8;
  if (W < 1 || W > 16 || QB < 1 || QB > 64 || KB < 1 || KB > 256 || nD > ATT_MAX_VECS ||
      nV > ATT_MAX_VECS || (!l1_tile && QB > 1 && QB * nV > 64) ||
      (l1_tile && (QB % ATT_RQ || QB % W || QB / W > 16 || (int64_t)QB * nV * W > 16384 ||
                   (int64_t)QB * t->D > 16384))) {
    snprintf(err, (size_t)errcap, "attention schedule out of the code generator's range");
    return -1;
  }
  cg gg = {.task = task}, *g = &gg;
  LLVMBasicBlockRef start = begin_kernel(g, ctx, "tlm_attention", name, cpu, features);
  LLVMValueRef begin = LLVMGetParam(g->fn, 1), end = LLVMGetParam(g->fn, 2);
  att a;
  att_load(g, t, W, &a);
  /* vector registers: 32 with 16-lane vectors (AVX-512), else the 16 of
   * AVX2 (a lower bound for AVX-512 code at 8 lanes) */
  int regs = W == 16 ? 32 : 16;

  /* a tile: QB consecutive rows of the (query head of the group, query
   * row) pairs of one (b, K/V head), query rows fastest: in a decode step
   * the G query heads of a group share every K and V row read */
  LLVMValueRef G = LLVMBuildSDiv(g->b, a.Hq, a.Hkv, "");
  LLVMValueRef R = mul(g, G, a.Tq);
  LLVMValueRef nrt = LLVMBuildSDiv(g->b, add(g, R, c64(g, QB - 1)), c64(g, QB), "");
  LLVMValueRef ntiles = mul(g, mul(g, a.B, a.Hkv), nrt);
  loop Lt;
  LLVMValueRef tile = par ? loop_begin_outer(g, &Lt, begin, end, c64(g, 1))
                          : loop_begin_outer(g, &Lt, c64(g, 0), ntiles, c64(g, 1));
  LLVMValueRef rt = LLVMBuildSRem(g->b, tile, nrt, "");
  LLVMValueRef bk = LLVMBuildSDiv(g->b, tile, nrt, "");
  LLVMValueRef kvh = LLVMBuildSRem(g->b, bk, a.Hkv, ""), b = LLVMBuildSDiv(g->b, bk, a.Hkv, "");
  LLVMValueRef r0 = mul(g, rt, c64(g, QB));
  LLVMValueRef nrows = smin(g, c64(g, QB), sub(g, R, r0));
  LLVMValueRef qbase = gep(g, a.pq, mul(g, b, a.sq[0]));
  LLVMValueRef obase = gep(g, a.po, mul(g, b, a.so[0]));
  LLVMValueRef kbase = gep(g, a.pk, add(g, mul(g, b, a.sk[0]), mul(g, kvh, a.sk[1])));
  LLVMValueRef vbase = gep(g, a.pv, add(g, mul(g, b, a.sv[0]), mul(g, kvh, a.sv[1])));
  if (l1_tile)
    att_body_l1(g, t, sched, &a, QB, KB, regs, G, kvh, r0, R, nrows, qbase, obase, kbase, vbase);
  else
    att_body_regs(g, t, &a, QB, KB, G, kvh, r0, R, nrows, qbase, obase, kbase, vbase);
  loop_end(g, &Lt);
  return end_kernel(g, start, 0, out, err, errcap);
}
