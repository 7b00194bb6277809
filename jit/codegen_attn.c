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
 * and are not stored. exp is the kernels' inline exp (cg_common.h): -inf
 * gives exactly 0. */
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

int tlm_codegen_attention(LLVMContextRef ctx, const tlm_task *task, const tlm_schedule *sched,
                          const char *name, const char *cpu, const char *features,
                          LLVMModuleRef *out, char *err, int errcap) {
  const tlm_attn_task *t = &task->u.attn;
  int W = sched->v[ATT_VEC], QB = sched->v[ATT_QBLOCK], KB = sched->v[ATT_KBLOCK];
  int par = sched->v[ATT_PARALLEL];
  int64_t D = t->D, Dv = t->Dv;
  int nD = (int)((D + W - 1) / W), nV = (int)((Dv + W - 1) / W);
  if (W < 1 || W > 16 || QB < 1 || QB > 8 || KB < 1 || KB > 256 || QB * nV > ATT_MAX_VECS ||
      nD > ATT_MAX_VECS || (QB > 1 && QB * nV > 64)) {
    snprintf(err, (size_t)errcap, "attention schedule out of the code generator's range");
    return -1;
  }
  cg gg;
  memset(&gg, 0, sizeof gg);
  cg *g = &gg;
  g->task = task;
  LLVMBasicBlockRef start = begin_kernel(g, ctx, "tlm_attention", name, cpu, features);
  LLVMValueRef args = LLVMGetParam(g->fn, 0);
  LLVMValueRef begin = LLVMGetParam(g->fn, 1), end = LLVMGetParam(g->fn, 2);
  LLVMValueRef po = arg_field(g, args, offsetof(tlm_attn_args, o), g->ptr);
  LLVMValueRef pq = arg_field(g, args, offsetof(tlm_attn_args, q), g->ptr);
  LLVMValueRef pk = arg_field(g, args, offsetof(tlm_attn_args, k), g->ptr);
  LLVMValueRef pv = arg_field(g, args, offsetof(tlm_attn_args, v), g->ptr);
  LLVMValueRef B = arg_field(g, args, offsetof(tlm_attn_args, B), g->i64);
  LLVMValueRef Hq = arg_field(g, args, offsetof(tlm_attn_args, Hq), g->i64);
  LLVMValueRef Hkv = arg_field(g, args, offsetof(tlm_attn_args, Hkv), g->i64);
  LLVMValueRef Tq = arg_field(g, args, offsetof(tlm_attn_args, Tq), g->i64);
  LLVMValueRef Tk = arg_field(g, args, offsetof(tlm_attn_args, Tk), g->i64);
  LLVMValueRef scale = arg_field(g, args, offsetof(tlm_attn_args, scale), g->f32);
  LLVMValueRef sq[4], sk[4], sv[4], so[4];
  for (int i = 0; i < 4; i++) {
    sq[i] = arg_field(g, args, offsetof(tlm_attn_args, sq) + 8 * (size_t)i, g->i64);
    sk[i] = arg_field(g, args, offsetof(tlm_attn_args, sk) + 8 * (size_t)i, g->i64);
    sv[i] = arg_field(g, args, offsetof(tlm_attn_args, sv) + 8 * (size_t)i, g->i64);
    so[i] = arg_field(g, args, offsetof(tlm_attn_args, so) + 8 * (size_t)i, g->i64);
  }
  int uq = (t->unit & TLM_UNIT_ATT_Q) != 0, uk = (t->unit & TLM_UNIT_ATT_K) != 0;
  int uv = (t->unit & TLM_UNIT_ATT_V) != 0, uo = (t->unit & TLM_UNIT_ATT_O) != 0;
  if (uq) sq[3] = c64(g, 1);
  if (uk) sk[3] = c64(g, 1);
  if (uv) sv[3] = c64(g, 1);
  if (uo) so[3] = c64(g, 1);
  LLVMTypeRef vt = vtype(g, W), ft = g->f32;
  LLVMValueRef ninf = LLVMConstReal(ft, -INFINITY), zero = LLVMConstNull(vt);
  LLVMValueRef dlast = c64(g, D - 1), vlast = c64(g, Dv - 1);
  /* constant masks of the last vector along D and Dv */
  LLVMValueRef dmask = D % W ? lane_mask(g, 0, W, c64(g, D % W)) : NULL;
  LLVMValueRef vmask = Dv % W ? lane_mask(g, 0, W, c64(g, Dv % W)) : NULL;

  /* per-tile state: running max and sum per row, accumulators, scores */
  LLVMValueRef m[8], l[8], acc[ATT_MAX_VECS];
  for (int i = 0; i < QB; i++) m[i] = alloca_of(g, ft), l[i] = alloca_of(g, ft);
  for (int i = 0; i < QB * nV; i++) acc[i] = alloca_of(g, vt);
  LLVMValueRef S = LLVMBuildAlloca(g->ab, LLVMArrayType(ft, (unsigned)(QB * KB)), "scores");
  LLVMSetAlignment(S, 64);

  /* a tile: QB consecutive rows of the (query head of the group, query
   * row) pairs of one (b, K/V head), query rows fastest: in a decode step
   * the G query heads of a group share every K and V row read */
  LLVMValueRef G = LLVMBuildSDiv(g->b, Hq, Hkv, "");
  LLVMValueRef R = mul(g, G, Tq);
  LLVMValueRef nrt = LLVMBuildSDiv(g->b, add(g, R, c64(g, QB - 1)), c64(g, QB), "");
  LLVMValueRef ntiles = mul(g, mul(g, B, Hkv), nrt);
  loop Lt;
  LLVMValueRef tile = par ? loop_begin_outer(g, &Lt, begin, end, c64(g, 1))
                          : loop_begin_outer(g, &Lt, c64(g, 0), ntiles, c64(g, 1));
  LLVMValueRef rt = LLVMBuildSRem(g->b, tile, nrt, "");
  LLVMValueRef bk = LLVMBuildSDiv(g->b, tile, nrt, "");
  LLVMValueRef kvh = LLVMBuildSRem(g->b, bk, Hkv, ""), b = LLVMBuildSDiv(g->b, bk, Hkv, "");
  LLVMValueRef r0 = mul(g, rt, c64(g, QB));
  LLVMValueRef nrows = smin(g, c64(g, QB), sub(g, R, r0));
  LLVMValueRef off = sub(g, Tk, Tq); /* causal: query row t sees keys j <= t + off */
  LLVMValueRef qrow[8], orow[8], rlim[8];
  LLVMValueRef qbase = gep(g, pq, mul(g, b, sq[0]));
  LLVMValueRef obase = gep(g, po, mul(g, b, so[0]));
  LLVMValueRef kbase = gep(g, pk, add(g, mul(g, b, sk[0]), mul(g, kvh, sk[1])));
  LLVMValueRef vbase = gep(g, pv, add(g, mul(g, b, sv[0]), mul(g, kvh, sv[1])));
  LLVMValueRef kmax = NULL;
  for (int i = 0; i < QB; i++) {
    LLVMValueRef r = smin(g, add(g, r0, c64(g, i)), sub(g, R, c64(g, 1)));
    LLVMValueRef tq = LLVMBuildSRem(g->b, r, Tq, "");
    LLVMValueRef h = add(g, mul(g, kvh, G), LLVMBuildSDiv(g->b, r, Tq, ""));
    qrow[i] = gep(g, qbase, add(g, mul(g, h, sq[1]), mul(g, tq, sq[2])));
    orow[i] = gep(g, obase, add(g, mul(g, h, so[1]), mul(g, tq, so[2])));
    rlim[i] = add(g, tq, off); /* the last key row i sees */
    kmax = i ? LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSGT, rlim[i], kmax, ""), rlim[i],
                               kmax, "")
             : rlim[i];
    LLVMBuildStore(g->b, ninf, m[i]);
    LLVMBuildStore(g->b, LLVMConstReal(ft, 0.0), l[i]);
    for (int c = 0; c < nV; c++) LLVMBuildStore(g->b, zero, acc[i * nV + c]);
  }
  /* keys [0, kend): all, or up to the furthest limit of the tile's rows */
  LLVMValueRef kend = t->causal ? smin(g, Tk, add(g, kmax, c64(g, 1))) : Tk;

  loop Lb;
  LLVMValueRef j0 = loop_begin_outer(g, &Lb, c64(g, 0), kend, c64(g, KB));
  LLVMValueRef jn = smin(g, c64(g, KB), sub(g, kend, j0));

  /* scores: W keys at a time, then one at a time */
  LLVMValueRef jfull = mul(g, LLVMBuildSDiv(g->b, jn, c64(g, W), ""), c64(g, W));
  if (W > 1) {
    loop Lj;
    LLVMValueRef jj = loop_begin(g, &Lj, c64(g, 0), jfull, c64(g, W));
    LLVMValueRef j = add(g, j0, jj);
    for (int i = 0; i < QB; i++) {
      LLVMValueRef qv[ATT_MAX_VECS];
      for (int c = 0; c < nD; c++)
        qv[c] = load_lanes(g, qrow[i], c64(g, (int64_t)c * W), uq, sq[3], W,
                           c == nD - 1 ? dmask : NULL, dlast);
      LLVMValueRef part[16];
      for (int u = 0; u < W; u++) { /* q_i . k_{j+u}, W lanes of partial sums */
        LLVMValueRef krow = gep(g, kbase, mul(g, add(g, j, c64(g, u)), sk[2]));
        if (i == 0 && uv)
          prefetch_row(g, gep(g, vbase, mul(g, add(g, j, c64(g, u)), sv[2])), (int64_t)Dv * 4);
        LLVMValueRef dot = zero;
        for (int c = 0; c < nD; c++) {
          LLVMValueRef kv = load_lanes(g, krow, c64(g, (int64_t)c * W), uk, sk[3], W,
                                       c == nD - 1 ? dmask : NULL, dlast);
          LLVMValueRef a3[3] = {qv[c], kv, dot};
          dot = call_intrinsic(g, "llvm.fmuladd", &vt, 1, a3, 3);
        }
        part[u] = dot;
      }
      LLVMValueRef sv = reduce_transpose(g, part, W);
      sv = LLVMBuildFMul(g->b, sv, splat(g, scale, W), "");
      if (t->causal) {
        LLVMValueRef keys = LLVMBuildAdd(g->b, splat_i64(g, j, W), lane_ids(g, 0, W), "");
        LLVMValueRef late = LLVMBuildICmp(g->b, LLVMIntSGT, keys, splat_i64(g, rlim[i], W), "");
        sv = LLVMBuildSelect(g->b, late, splat(g, ninf, W), sv, "");
      }
      store(g, sv, gep(g, S, add(g, c64(g, (int64_t)i * KB), jj)), 4);
    }
    loop_end(g, &Lj);
  }
  {
    loop Lj;
    LLVMValueRef jj = loop_begin(g, &Lj, W > 1 ? jfull : c64(g, 0), jn, c64(g, 1));
    LLVMValueRef j = add(g, j0, jj);
    LLVMValueRef krow = gep(g, kbase, mul(g, j, sk[2]));
    if (uv) prefetch_row(g, gep(g, vbase, mul(g, j, sv[2])), (int64_t)Dv * 4);
    LLVMValueRef kv[ATT_MAX_VECS];
    for (int c = 0; c < nD; c++)
      kv[c] = load_lanes(g, krow, c64(g, (int64_t)c * W), uk, sk[3], W, c == nD - 1 ? dmask : NULL,
                         dlast);
    for (int i = 0; i < QB; i++) {
      LLVMValueRef dot = zero;
      for (int c = 0; c < nD; c++) {
        LLVMValueRef qv = load_lanes(g, qrow[i], c64(g, (int64_t)c * W), uq, sq[3], W,
                                     c == nD - 1 ? dmask : NULL, dlast);
        LLVMValueRef a3[3] = {qv, kv[c], dot};
        dot = call_intrinsic(g, "llvm.fmuladd", &vt, 1, a3, 3);
      }
      LLVMValueRef a2[2] = {LLVMConstReal(ft, 0.0), dot};
      LLVMValueRef s = call_intrinsic(g, "llvm.vector.reduce.fadd", &vt, 1, a2, 2);
      s = LLVMBuildFMul(g->b, s, scale, "");
      if (t->causal)
        s = LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSGT, j, rlim[i], ""), ninf, s, "");
      store(g, s, gep(g, S, add(g, c64(g, (int64_t)i * KB), jj)), 4);
    }
    loop_end(g, &Lj);
  }

  /* online softmax, W keys at a time */
  for (int i = 0; i < QB; i++) {
    LLVMValueRef srow = gep(g, S, c64(g, (int64_t)i * KB));
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
    LLVMValueRef mold = LLVMBuildLoad2(g->b, ft, m[i], "");
    LLVMValueRef mo[2] = {mold, bmax};
    LLVMValueRef mnew = call_intrinsic(g, "llvm.maxnum", &ft, 1, mo, 2);
    LLVMValueRef d1 = LLVMBuildInsertElement(g->b, LLVMGetUndef(vtype(g, 1)),
                                             LLVMBuildFSub(g->b, mold, mnew, ""), c32(g, 0), "");
    LLVMValueRef corr = LLVMBuildExtractElement(g->b, vexp(g, d1, 1), c32(g, 0), "");
    LLVMBuildStore(g->b, mnew, m[i]);
    LLVMBuildStore(g->b, LLVMBuildFMul(g->b, LLVMBuildLoad2(g->b, ft, l[i], ""), corr, ""), l[i]);
    LLVMValueRef cv = splat(g, corr, W);
    for (int c = 0; c < nV; c++)
      LLVMBuildStore(g->b, LLVMBuildFMul(g->b, LLVMBuildLoad2(g->b, vt, acc[i * nV + c], ""), cv, ""),
                     acc[i * nV + c]);
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
    LLVMBuildStore(g->b, LLVMBuildFAdd(g->b, LLVMBuildLoad2(g->b, ft, l[i], ""), bsum, ""), l[i]);
  }

  /* P V */
  {
    loop Lj;
    LLVMValueRef jj = loop_begin(g, &Lj, c64(g, 0), jn, c64(g, 1));
    LLVMValueRef vrow = gep(g, vbase, mul(g, add(g, j0, jj), sv[2]));
    if (uk) /* the next block's K row, KB keys ahead */
      prefetch_row(g, gep(g, kbase, mul(g, add(g, add(g, j0, c64(g, KB)), jj), sk[2])),
                   (int64_t)D * 4);
    LLVMValueRef vv[ATT_MAX_VECS];
    for (int c = 0; c < nV; c++)
      vv[c] = load_lanes(g, vrow, c64(g, (int64_t)c * W), uv, sv[3], W, c == nV - 1 ? vmask : NULL,
                         vlast);
    for (int i = 0; i < QB; i++) {
      LLVMValueRef p = load(g, ft, gep(g, S, add(g, c64(g, (int64_t)i * KB), jj)), 4);
      LLVMValueRef ps = splat(g, p, W);
      for (int c = 0; c < nV; c++) {
        LLVMValueRef a3[3] = {ps, vv[c], LLVMBuildLoad2(g->b, vt, acc[i * nV + c], "")};
        LLVMBuildStore(g->b, call_intrinsic(g, "llvm.fmuladd", &vt, 1, a3, 3), acc[i * nV + c]);
      }
    }
    loop_end(g, &Lj);
  }
  loop_end(g, &Lb);

  /* O = acc / l for the tile's valid rows */
  for (int i = 0; i < QB; i++) {
    LLVMBasicBlockRef join = i ? if_begin(g, LLVMBuildICmp(g->b, LLVMIntSLT, c64(g, i), nrows, ""))
                               : NULL;
    LLVMValueRef inv = LLVMBuildFDiv(g->b, LLVMConstReal(ft, 1.0), LLVMBuildLoad2(g->b, ft, l[i], ""), "");
    LLVMValueRef iv = splat(g, inv, W);
    for (int c = 0; c < nV; c++) {
      LLVMValueRef x = LLVMBuildFMul(g->b, LLVMBuildLoad2(g->b, vt, acc[i * nV + c], ""), iv, "");
      store_lanes(g, x, orow[i], c64(g, (int64_t)c * W), uo, so[3], W, c == nV - 1 ? vmask : NULL);
    }
    if (join) if_end(g, join);
  }
  loop_end(g, &Lt);
  return end_kernel(g, start, 0, out, err, errcap);
}
