/* codegen.c - matmul loop nest -> LLVM IR.
 *
 * The emitted code keeps every loop variable and accumulator in an alloca of
 * the entry block; SROA/mem2reg in the optimization pipeline turns them into
 * SSA registers, so the register tile's accumulators live in vector
 * registers across the k loop. Tails: one copy of the register tile serves
 * every block: it clamps its row and batch indices to valid ones (a
 * clamped row recomputes and rewrites the block's last row) and masks its
 * column lanes, so no out-of-bounds address is ever touched; the k loop's
 * plain-load copy runs only where every column is valid.
 */
#include "codegen.h"

#include <llvm-c/Analysis.h>
#include <math.h>

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/kernel_abi.h"

#include "cg_common.h"

/* ---- addressing ---------------------------------------------------------- */

/* element offset of flat batch index bi through strides s[0..3] */
static LLVMValueRef batch_offset(cg *g, LLVMValueRef bi, LLVMValueRef *s) {
  if (!g->batched) return c64(g, 0);
  LLVMValueRef off = c64(g, 0), q = bi;
  for (int d = g->mm->nbatch - 1; d >= 0; d--) {
    LLVMValueRef ext = c64(g, g->mm->batch[d]);
    LLVMValueRef idx = d ? LLVMBuildURem(g->b, q, ext, "") : q;
    if (d) q = LLVMBuildUDiv(g->b, q, ext, "");
    off = add(g, off, mul(g, idx, s[d]));
  }
  return off;
}


/* ---- epilogue ------------------------------------------------------------ */

/* bias, activation, residual on W lanes of row `row` of batch offset roff
 * (has_residual 2: the residual before the activation, a convolution's
 * order; 3: the residual is C itself, before the activation, where
 * g->res_single says so: first_k_block) */
static LLVMValueRef epilogue(cg *g, LLVMValueRef x, LLVMValueRef roff, LLVMValueRef row,
                             LLVMValueRef nstart, int w, LLVMValueRef mask,
                             LLVMValueRef nlast) {
  const tlm_matmul_task *mm = g->mm;
  if (mm->has_bias) {
    LLVMValueRef bv = load_lanes(g, g->pbias, nstart, (mm->unit & TLM_UNIT_BIAS) != 0,
                                 g->sbias, w, mask, nlast);
    x = LLVMBuildFAdd(g->b, x, bv, "");
  }
  for (int pre = 1; pre >= 0; pre--) {
    int before = mm->has_residual >= 2; /* a convolution's order, or in place */
    int in_place = mm->has_residual == 3;
    if (mm->has_residual && (!in_place || g->res_single) && pre == before) {
      LLVMValueRef base = gep(g, g->pres, add(g, roff, mul(g, row, g->sr[4])));
      LLVMValueRef rv = load_lanes(g, base, nstart, (mm->unit & TLM_UNIT_R_N) != 0, g->sr[5], w,
                                   mask, nlast);
      LLVMValueRef y = LLVMBuildFAdd(g->b, x, rv, "");
      x = in_place ? LLVMBuildSelect(g->b, g->res_single, y, x, "") : y;
    }
    if (pre) x = apply_activation(g, x, mm->act, w);
  }
  return x;
}

/* ---- nodes ----------------------------------------------------------------- */

static int emit_node(cg *g, int idx, blk *bk);

static int emit_body(cg *g, const ln_node *n, blk *bk) {
  for (int i = 0; i < n->nbody; i++) {
    blk copy = *bk;
    if (emit_node(g, n->body[i], &copy)) return -1;
  }
  return 0;
}

static LLVMValueRef root_extent(cg *g, int axis) {
  switch (axis) {
  case LN_B: return c64(g, tlm_task_batch_total(g->task));
  case LN_M: return g->M;
  case LN_N: return g->N;
  default: return g->K;
  }
}

static int emit_parallel(cg *g, const ln_node *n, blk *bk) {
  loop L;
  LLVMValueRef p = loop_begin_outer(g, &L, g->begin, g->end, c64(g, 1));
  LLVMValueRef q = p;
  for (int f = n->nfused - 1; f >= 0; f--) {
    int a = n->fused_axis[f];
    LLVMValueRef bsz = c64(g, n->fused_block[f]);
    if (n->split_m && a == LN_M) { /* the run-time split (ln_parallel_m_block) */
      LLVMValueRef mb = g->mblock;
      bsz = LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSGT, mb, c64(g, 0), ""), mb, bsz, "");
    }
    LLVMValueRef ext = root_extent(g, a);
    LLVMValueRef trips = LLVMBuildSDiv(g->b, sub(g, add(g, ext, bsz), c64(g, 1)), bsz, "");
    LLVMValueRef i = f ? LLVMBuildSRem(g->b, q, trips, "") : q;
    if (f) q = LLVMBuildSDiv(g->b, q, trips, "");
    LLVMValueRef st = mul(g, i, bsz);
    bk->start[a] = st;
    bk->size[a] = smin(g, bsz, sub(g, ext, st));
  }
  if (emit_body(g, n, bk)) return -1;
  loop_end(g, &L);
  return 0;
}

static int emit_for(cg *g, const ln_node *n, blk *bk) {
  int a = n->axis;
  LLVMValueRef bsz = c64(g, n->block);
  LLVMValueRef start = bk->start[a], size = bk->size[a];
  loop L;
  LLVMValueRef off = loop_begin_outer(g, &L, c64(g, 0), size, bsz);
  bk->start[a] = add(g, start, off);
  bk->size[a] = smin(g, bsz, sub(g, size, off));
  if (emit_body(g, n, bk)) return -1;
  loop_end(g, &L);
  return 0;
}

/* One k row of one panel of B's block into the packed copy: nr floats
 * from row (B's row k0 + kk of batch ib), columns n0 + poff on, in vectors
 * of w; masked lanes past lim when lim is not NULL (an N tail's panel). */
static void pack_row(cg *g, const ln_node *n, LLVMValueRef ib, LLVMValueRef poff, LLVMValueRef kk,
                     LLVMValueRef row, LLVMValueRef n0, int w, int unit, LLVMValueRef lim,
                     LLVMValueRef nlast) {
  int64_t nr = n->pack_width;
  LLVMValueRef panel = LLVMBuildSDiv(g->b, poff, c64(g, nr), "");
  LLVMValueRef dst_idx = mul(
      g, add(g, mul(g, add(g, mul(g, ib, c64(g, n->pack_panels)), panel), c64(g, n->pack_kblock)), kk),
      c64(g, nr));
  for (int64_t v = 0; v < nr / w; v++) {
    LLVMValueRef mask = lim ? lane_mask(g, v * w, w, lim) : NULL;
    LLVMValueRef nstart = add(g, add(g, n0, poff), c64(g, v * w));
    LLVMValueRef vals = load_lanes(g, row, nstart, unit, g->sb[5], w, mask, nlast);
    store(g, vals, gep(g, g->scratch, add(g, dst_idx, c64(g, v * w))), 4);
  }
}

static int emit_pack(cg *g, const ln_node *n, blk *bk) {
  const tlm_matmul_task *mm = g->mm;
  int64_t nr = n->pack_width;
  /* vector width for the copy: the largest of 16/8/4/1 dividing nr */
  int w = nr % 16 == 0 ? 16 : nr % 8 == 0 ? 8 : nr % 4 == 0 ? 4 : 1;
  LLVMValueRef b0 = bk->start[LN_B], bs = bk->size[LN_B];
  LLVMValueRef n0 = bk->start[LN_N], ns = bk->size[LN_N];
  LLVMValueRef k0 = bk->start[LN_K], ks = bk->size[LN_K];
  LLVMValueRef nlast = sub(g, add(g, n0, ns), c64(g, 1));
  int unit = (mm->unit & TLM_UNIT_B_N) != 0;
  /* B packed ahead (args->bpk, the layout of ln_prepack_b): this block's
   * panels start at panel n0 / nr of slab (k0 / kblock, b0), a batch's
   * slab further on, and the copy below is skipped */
  LLVMValueRef base = LLVMBuildAlloca(g->ab, g->ptr, "");
  LLVMValueRef bstride = LLVMBuildAlloca(g->ab, g->i64, "");
  LLVMBasicBlockRef bpre = LLVMAppendBasicBlockInContext(g->C, g->fn, "prepacked");
  LLVMBasicBlockRef bcopy = LLVMAppendBasicBlockInContext(g->C, g->fn, "pack");
  LLVMBasicBlockRef bbody = LLVMAppendBasicBlockInContext(g->C, g->fn, "packed_body");
  LLVMBuildCondBr(g->b, LLVMBuildIsNull(g->b, g->pbpk, ""), bcopy, bpre);
  LLVMPositionBuilderAtEnd(g->b, bpre);
  {
    /* N is a run-time extent (kernels are shared across K and N) */
    LLVMValueRef npanels = LLVMBuildSDiv(g->b, add(g, g->N, c64(g, nr - 1)), c64(g, nr), "");
    LLVMValueRef slab = mul(g, npanels, c64(g, n->pack_kblock * nr));
    LLVMValueRef jk = LLVMBuildSDiv(g->b, k0, c64(g, n->pack_kblock), "");
    LLVMValueRef sno = add(g, mul(g, jk, c64(g, tlm_task_batch_total(g->task))), b0);
    LLVMValueRef off = add(g, mul(g, sno, slab),
                           mul(g, LLVMBuildSDiv(g->b, n0, c64(g, nr), ""), c64(g, n->pack_kblock * nr)));
    LLVMBuildStore(g->b, gep(g, g->pbpk, off), base);
    LLVMBuildStore(g->b, slab, bstride);
    LLVMBuildBr(g->b, bbody);
  }
  LLVMPositionBuilderAtEnd(g->b, bcopy);
  LLVMBuildStore(g->b, g->scratch, base);
  LLVMBuildStore(g->b, c64(g, n->pack_panels * n->pack_kblock * nr), bstride);
  loop Lb, Lp, Lk;
  LLVMValueRef ib = loop_begin_outer(g, &Lb, c64(g, 0), bs, c64(g, 1));
  LLVMValueRef boff = batch_offset(g, add(g, b0, ib), g->sb);
  if (unit && nr * 4 < 2 * 64) {
    /* Panels under two cache lines wide, row by row: each k row of the
     * block is read whole and its panels' segments written, so B is read as
     * the streams the prefetchers follow. Panel by panel, a 16-float panel
     * read one lone line of each of k1 rows a row apart (Intel Xeon, AVX2,
     * 6 x 16 packed, tlm run: 128x768:768x768 90 -> 98 GFLOPS,
     * 128x4096:4096x4096 77 -> 89; 24-float panels even). Wider panels
     * (AVX-512's 64 floats, 4 lines a row) keep the panel order: row by row
     * they ran 3-5% slower (152 -> 148, 141 -> 134). Two
     * copies of the panel loop's last panel: whole with plain loads, and the
     * partial panel of an N tail with masked ones (vmaskmov on AVX2 and the
     * mask arithmetic would otherwise cost every row of every panel). */
    LLVMValueRef nwhole = mul(g, LLVMBuildSDiv(g->b, ns, c64(g, nr), ""), c64(g, nr));
    LLVMValueRef kk = loop_begin_ex(g, &Lk, c64(g, 0), ks, c64(g, 1), 0);
    LLVMValueRef row = gep(g, g->pb, add(g, boff, mul(g, add(g, k0, kk), g->sb[4])));
    for (int tail = 0; tail < 2; tail++) {
      LLVMValueRef poff, lim = NULL;
      LLVMBasicBlockRef bj = NULL;
      if (!tail) {
        /* a counter in memory too once a row's copy hides its store and load */
        poff = loop_begin_ex(g, &Lp, c64(g, 0), nwhole, c64(g, nr), nr >= 32);
      } else {
        LLVMBasicBlockRef bp = LLVMAppendBasicBlockInContext(g->C, g->fn, "pack_tail");
        bj = LLVMAppendBasicBlockInContext(g->C, g->fn, "pack_next");
        LLVMBuildCondBr(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, nwhole, ns, ""), bp, bj);
        LLVMPositionBuilderAtEnd(g->b, bp);
        poff = nwhole;
        lim = sub(g, ns, poff);
      }
      pack_row(g, n, ib, poff, kk, row, n0, w, unit, tail ? lim : NULL, nlast);
      if (!tail) {
        loop_end(g, &Lp);
      } else {
        LLVMBuildBr(g->b, bj);
        LLVMPositionBuilderAtEnd(g->b, bj);
      }
    }
    loop_end(g, &Lk);
  } else {
    /* panel by panel (B stored (N, K): a panel's gathers along k reuse the
     * lines of its nr rows) */
    LLVMValueRef poff = loop_begin_outer(g, &Lp, c64(g, 0), ns, c64(g, nr));
    LLVMValueRef lim = sub(g, ns, poff);
    /* two copies of the k loop: whole panels with plain loads, and the last,
     * partial panel of an N tail with masked ones (vmaskmov on AVX2 and the
     * mask arithmetic would otherwise cost every row of every panel) */
    LLVMValueRef whole = LLVMBuildICmp(g->b, LLVMIntSGE, lim, c64(g, nr), "");
    LLVMBasicBlockRef bw = LLVMAppendBasicBlockInContext(g->C, g->fn, "pack_whole");
    LLVMBasicBlockRef bp = LLVMAppendBasicBlockInContext(g->C, g->fn, "pack_tail");
    LLVMBasicBlockRef bj = LLVMAppendBasicBlockInContext(g->C, g->fn, "pack_next");
    LLVMBuildCondBr(g->b, whole, bw, bp);
    for (int tail = 0; tail < 2; tail++) {
      LLVMPositionBuilderAtEnd(g->b, tail ? bp : bw);
      /* a counter in memory too once a row's copy hides its store and load */
      LLVMValueRef kk = loop_begin_ex(g, &Lk, c64(g, 0), ks, c64(g, 1), nr >= 32);
      LLVMValueRef row = gep(g, g->pb, add(g, boff, mul(g, add(g, k0, kk), g->sb[4])));
      pack_row(g, n, ib, poff, kk, row, n0, w, unit, tail ? lim : NULL, nlast);
      loop_end(g, &Lk);
      LLVMBuildBr(g->b, bj);
    }
    LLVMPositionBuilderAtEnd(g->b, bj);
    loop_end(g, &Lp);
  }
  loop_end(g, &Lb);
  LLVMBuildBr(g->b, bbody);
  LLVMPositionBuilderAtEnd(g->b, bbody);
  cg saved = *g;
  g->packed = 1;
  g->pk_base = LLVMBuildLoad2(g->b, g->ptr, base, "");
  g->pk_bstride = LLVMBuildLoad2(g->b, g->i64, bstride, "");
  g->pk_b0 = b0;
  g->pk_n0 = n0;
  g->pk_k0 = k0;
  g->pk_kb = n->pack_kblock;
  g->pk_width = nr;
  int rc = emit_body(g, n, bk);
  g->packed = saved.packed;
  g->pk_base = saved.pk_base;
  g->pk_bstride = saved.pk_bstride;
  return rc;
}

/* where a register tile version's block starts and how far it reaches, on
 * each loop axis */
typedef struct tile_span {
  LLVMValueRef b0, bs, m0, ms, n0, ns, k0, ks;
} tile_span;

/* An in-place residual (has_residual 3: C holds it on entry; kernels are
 * shared across K, so whether K is one block is known at run time only).
 * A tile whose K is one block starts from zero and its epilogue adds the
 * residual from C before the activation, as for has_residual 2 (each
 * element is read before it is written), so the FMAs do not wait on loads
 * of C: ResNet's res2 branch2c layers 0.68-0.89x -> 0.91-0.96x oneDNN
 * under AVX2 (vision --profile, session 43). Over several K blocks, or
 * with the epilogue in a pass of its own, the first block starts from C
 * instead of zero and nothing is added after.
 * first_k_block: i1, the accumulators start from zero (else from C); sets
 * g->res_single for the tile's epilogue. */
static LLVMValueRef first_k_block(cg *g, const tile_span *sp) {
  LLVMValueRef first = LLVMBuildICmp(g->b, LLVMIntEQ, sp->k0, c64(g, 0), "");
  g->res_single = NULL;
  if (g->mm->has_residual != 3) return first;
  if (g->epi_pass) return LLVMConstInt(g->i1, 0, 0);
  first = LLVMBuildAnd(g->b, first,
                       LLVMBuildICmp(g->b, LLVMIntEQ, add(g, sp->k0, sp->ks), g->K, ""), "");
  g->res_single = first;
  return first;
}

static tile_span span_of(const blk *bk) {
  return (tile_span){bk->start[LN_B], bk->size[LN_B], bk->start[LN_M], bk->size[LN_M],
                     bk->start[LN_N], bk->size[LN_N], bk->start[LN_K], bk->size[LN_K]};
}

/* The register tile (vectors along n), one copy of it for every block:
 * rows and batches clamped to the block (a clamped row repeats the block's
 * last row: it computes and stores that row's values again, the same
 * values, so no store needs a guard), column lanes masked below the
 * block's width. B in place: the k loop unrolled with plain loads runs
 * over the whole-column tiles' k block (a multiple of the unroll), and one
 * masked k loop runs the rest: the unroll's remainder there, all of k for
 * a column tail (masked loads, vmaskmov on AVX2, on every k step of a
 * whole tile would slow it). B packed: whole zero-padded vectors, no masks
 * in the k loops. C is loaded masked once a k block, and stored whole or
 * masked by a branch on the tile's columns (a masked store is slow on
 * AVX2). Code size matters here: object emission time grows with the IR
 * (about 16 us an instruction on the Zen 5 VM), and the two versions this
 * replaced (whole columns, column tail, each with its own remainder loop,
 * C loads and epilogue) were a third of a matmul kernel's IR. */
static void emit_tile_version(cg *g, const ln_node *n, blk *bk, int rows) {
  const tlm_matmul_task *mm = g->mm;
  const int TB = n->tile_b, TM = rows, NV = n->nvec, W = n->vec;
  LLVMTypeRef vt = vtype(g, W);
  const tile_span sp = span_of(bk);
  LLVMValueRef nlast = sub(g, add(g, sp.n0, sp.ns), c64(g, 1));
  LLVMValueRef acc[MAX_ACC];
  LLVMValueRef aoff[MAX_TB], boff[MAX_TB], coff[MAX_TB], roff[MAX_TB], bidx[MAX_TB];
  LLVMValueRef arow[MAX_ACC], crow[MAX_ACC], rowv[MAX_ACC];
  LLVMValueRef mask[8] = {0}, nomask[8] = {0};
  int unit_b = (mm->unit & TLM_UNIT_B_N) != 0, unit_c = (mm->unit & TLM_UNIT_C_N) != 0;
  LLVMValueRef whole = LLVMBuildICmp(g->b, LLVMIntEQ, sp.ns, c64(g, (int64_t)W * NV), "");

  for (int i = 0; i < TB * TM * NV; i++) acc[i] = alloca_of(g, vt);
  for (int ib = 0; ib < TB; ib++) {
    LLVMValueRef bi = add(g, sp.b0, smin(g, c64(g, ib), sub(g, sp.bs, c64(g, 1))));
    bidx[ib] = bi;
    aoff[ib] = batch_offset(g, bi, g->sa);
    boff[ib] = batch_offset(g, bi, g->sb);
    coff[ib] = batch_offset(g, bi, g->sc);
    roff[ib] = mm->has_residual ? batch_offset(g, bi, g->sr) : c64(g, 0);
    for (int im = 0; im < TM; im++) {
      LLVMValueRef r = add(g, sp.m0, smin(g, c64(g, im), sub(g, sp.ms, c64(g, 1))));
      rowv[ib * TM + im] = r;
      arow[ib * TM + im] = gep(g, g->pa, add(g, aoff[ib], mul(g, r, g->sa[4])));
      crow[ib * TM + im] = gep(g, g->pc, add(g, coff[ib], mul(g, r, g->sc[4])));
    }
  }
  /* lane masks: all lanes for a whole-column tile, computed only for a
   * column tail (a tile visit of a matrix-vector product's short k block
   * is 16 steps: eight masks built at each cost it 5%) */
  {
    LLVMBasicBlockRef from = LLVMGetInsertBlock(g->b);
    LLVMBasicBlockRef bm = LLVMAppendBasicBlockInContext(g->C, g->fn, "tail_masks");
    LLVMBasicBlockRef bj = LLVMAppendBasicBlockInContext(g->C, g->fn, "masks_ready");
    LLVMBuildCondBr(g->b, whole, bj, bm);
    LLVMPositionBuilderAtEnd(g->b, bm);
    LLVMValueRef tail[8];
    for (int v = 0; v < NV; v++) tail[v] = lane_mask(g, (int64_t)v * W, W, sp.ns);
    LLVMBuildBr(g->b, bj);
    LLVMPositionBuilderAtEnd(g->b, bj);
    LLVMTypeRef mt = LLVMVectorType(g->i1, (unsigned)W);
    for (int v = 0; v < NV; v++) {
      mask[v] = LLVMBuildPhi(g->b, mt, "");
      LLVMValueRef in[2] = {LLVMConstAllOnes(mt), tail[v]};
      LLVMBasicBlockRef bb[2] = {from, bm};
      LLVMAddIncoming(mask[v], in, bb, 2);
    }
  }
  /* packed B: batch bl's panel of this tile's columns, less sp.k0's rows */
  LLVMValueRef pbase[MAX_TB] = {0};
  if (g->packed)
    for (int ib = 0; ib < TB; ib++) {
      LLVMValueRef bl = sub(g, bidx[ib], g->pk_b0);
      LLVMValueRef panel = LLVMBuildSDiv(g->b, sub(g, sp.n0, g->pk_n0), c64(g, g->pk_width), "");
      LLVMValueRef off = mul(g, sub(g, mul(g, panel, c64(g, g->pk_kb)), g->pk_k0), c64(g, g->pk_width));
      pbase[ib] = gep(g, g->pk_base, add(g, mul(g, bl, g->pk_bstride), off));
    }

  /* accumulators: zero on the first k block, else the partial sums in C */
  LLVMValueRef zero = LLVMConstNull(vt);
  LLVMValueRef first = first_k_block(g, &sp);
  LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(g->C, g->fn, "acc_zero");
  LLVMBasicBlockRef other = LLVMAppendBasicBlockInContext(g->C, g->fn, "acc_load");
  LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(g->C, g->fn, "acc_ready");
  LLVMBuildCondBr(g->b, first, then, other);
  LLVMPositionBuilderAtEnd(g->b, then);
  for (int i = 0; i < TB * TM * NV; i++) LLVMBuildStore(g->b, zero, acc[i]);
  LLVMBuildBr(g->b, join);
  LLVMPositionBuilderAtEnd(g->b, other);
  for (int r = 0; r < TB * TM; r++)
    for (int v = 0; v < NV; v++) {
      LLVMValueRef ns0 = add(g, sp.n0, c64(g, (int64_t)v * W));
      LLVMBuildStore(g->b, load_lanes(g, crow[r], ns0, unit_c, g->sc[5], W, mask[v], nlast),
                     acc[r * NV + v]);
    }
  LLVMBuildBr(g->b, join);
  LLVMPositionBuilderAtEnd(g->b, join);

  /* k loops: the unrolled one, then one step at a time (masked B loads
   * unless B is packed) */
  LLVMValueRef kend = add(g, sp.k0, sp.ks);
  const int U = n->unroll;
  LLVMValueRef kmain = add(g, sp.k0, mul(g, LLVMBuildSDiv(g->b, sp.ks, c64(g, U), ""), c64(g, U)));
  if (!g->packed) kmain = LLVMBuildSelect(g->b, whole, kmain, sp.k0, "");
  /* a tile of fewer accumulators than the FMA unit has chains in flight
   * would wait on FMA latency (a matrix-vector product with N = 5: one
   * chain): unrolled step u adds into set u % S, the sets summed below */
  const int NACC = TB * TM * NV;
  int S = n->chains > NACC ? (n->chains + NACC - 1) / NACC : 1;
  if (S > U) S = U;
  if (S > MAX_ACC / NACC) S = MAX_ACC / NACC;
  if (S < 1) S = 1;
  LLVMValueRef accx[MAX_ACC];
  for (int i = 0; i < (S - 1) * NACC; i++) {
    accx[i] = alloca_of(g, vt);
    LLVMBuildStore(g->b, zero, accx[i]);
  }
  for (int part = 0; part < 2; part++) {
    /* packed and not unrolled: the first loop is all of k */
    if (part == 1 && U == 1 && g->packed) break;
    const LLVMValueRef *mk = part == 1 && !g->packed ? mask : nomask;
    loop L;
    /* SSA counters here: one in memory cost 2-4% even on 6x64 tiles */
    LLVMValueRef kk = part == 0 ? loop_begin(g, &L, sp.k0, kmain, c64(g, U))
                                : loop_begin(g, &L, kmain, kend, c64(g, 1));
    int steps = part == 0 ? U : 1;
    for (int u = 0; u < steps; u++) {
      LLVMValueRef k = add(g, kk, c64(g, u));
      for (int ib = 0; ib < TB; ib++) {
        LLVMValueRef bvec[8];
        for (int v = 0; v < NV; v++) {
          if (g->packed) {
            /* base + k * width + v * W: the form loop strength reduction
             * handles at least cost */
            LLVMValueRef idx = add(g, mul(g, k, c64(g, g->pk_width)), c64(g, (int64_t)v * W));
            bvec[v] = load(g, vt, gep(g, pbase[ib], idx), 4);
          } else {
            LLVMValueRef row = gep(g, g->pb, add(g, boff[ib], mul(g, k, g->sb[4])));
            bvec[v] = load_lanes(g, row, add(g, sp.n0, c64(g, (int64_t)v * W)), unit_b, g->sb[5], W,
                                 mk[v], nlast);
          }
        }
        for (int im = 0; im < TM; im++) {
          LLVMValueRef a = load(g, g->f32, gep(g, arow[ib * TM + im], mul(g, k, g->sa[5])), 4);
          LLVMValueRef as = splat(g, a, W);
          for (int v = 0; v < NV; v++) {
            int set = part == 0 ? u % S : 0, i = (ib * TM + im) * NV + v;
            LLVMValueRef slot = set ? accx[(set - 1) * NACC + i] : acc[i];
            LLVMValueRef cur = LLVMBuildLoad2(g->b, vt, slot, "");
            LLVMValueRef args[3] = {as, bvec[v], cur};
            LLVMBuildStore(g->b, call_intrinsic(g, "llvm.fmuladd", &vt, 1, args, 3), slot);
          }
        }
      }
    }
    loop_end(g, &L);
  }
  for (int i = 0; i < NACC && S > 1; i++) {
    LLVMValueRef x = LLVMBuildLoad2(g->b, vt, acc[i], "");
    for (int set = 1; set < S; set++)
      x = LLVMBuildFAdd(g->b, x, LLVMBuildLoad2(g->b, vt, accx[(set - 1) * NACC + i], ""), "");
    LLVMBuildStore(g->b, x, acc[i]);
  }

  /* epilogue in registers after the last k block */
  if (n->epilogue) {
    LLVMBasicBlockRef ej = if_begin(g, LLVMBuildICmp(g->b, LLVMIntEQ, kend, g->K, ""));
    for (int ib = 0; ib < TB; ib++)
      for (int im = 0; im < TM; im++)
        for (int v = 0; v < NV; v++) {
          LLVMValueRef slot = acc[(ib * TM + im) * NV + v];
          LLVMValueRef x = LLVMBuildLoad2(g->b, vt, slot, "");
          x = epilogue(g, x, roff[ib], rowv[ib * TM + im], add(g, sp.n0, c64(g, (int64_t)v * W)), W,
                       mask[v], nlast);
          LLVMBuildStore(g->b, x, slot);
        }
    if_end(g, ej);
  }

  /* the stores: whole vectors, or masked lanes for a column tail */
  LLVMBasicBlockRef var_bb[2] = {LLVMAppendBasicBlockInContext(g->C, g->fn, "c_whole"),
                                 LLVMAppendBasicBlockInContext(g->C, g->fn, "c_masked")};
  LLVMBasicBlockRef c_done = LLVMAppendBasicBlockInContext(g->C, g->fn, "c_done");
  LLVMBuildCondBr(g->b, whole, var_bb[0], var_bb[1]);
  for (int var = 0; var < 2; var++) {
    const LLVMValueRef *mk = var == 0 ? nomask : mask;
    LLVMPositionBuilderAtEnd(g->b, var_bb[var]);
    for (int r = 0; r < TB * TM; r++)
      for (int v = 0; v < NV; v++) {
        LLVMValueRef x = LLVMBuildLoad2(g->b, vt, acc[r * NV + v], "");
        store_lanes(g, x, crow[r], add(g, sp.n0, c64(g, (int64_t)v * W)), unit_c, g->sc[5], W, mk[v]);
      }
    LLVMBuildBr(g->b, c_done);
  }
  LLVMPositionBuilderAtEnd(g->b, c_done);
}

/* Dot-product register tile (vectors along k): tile_b x tile_m x nvec
 * columns, each accumulator W lanes of partial sums over the k block,
 * reduced at the end and added to C's partial sum. A and B are unit-stride
 * in k (the space offers this form only then). Partial tiles clamp rows and
 * columns to valid ones and store only the valid; the k tail is masked. */
static void emit_tile_kvec(cg *g, const ln_node *n, blk *bk, int partial) {
  const tlm_matmul_task *mm = g->mm;
  const int TB = n->tile_b, TM = n->tile_m, NC = n->nvec, W = n->vec;
  LLVMTypeRef vt = vtype(g, W);
  const tile_span sp = span_of(bk);
  LLVMValueRef acc[MAX_ACC], arow[MAX_ACC], crow[MAX_ACC], rowv[MAX_ACC];
  LLVMValueRef bcol[MAX_ACC], colv[8], roff[MAX_TB];
  int unit_c = (mm->unit & TLM_UNIT_C_N) != 0;
  for (int i = 0; i < TB * TM * NC; i++) {
    acc[i] = alloca_of(g, vt);
    LLVMBuildStore(g->b, LLVMConstNull(vt), acc[i]);
  }
  for (int j = 0; j < NC; j++)
    colv[j] = add(g, sp.n0, partial ? smin(g, c64(g, j), sub(g, sp.ns, c64(g, 1))) : c64(g, j));
  for (int ib = 0; ib < TB; ib++) {
    LLVMValueRef bi = add(g, sp.b0, partial ? smin(g, c64(g, ib), sub(g, sp.bs, c64(g, 1))) : c64(g, ib));
    LLVMValueRef aoff = batch_offset(g, bi, g->sa), boff = batch_offset(g, bi, g->sb);
    LLVMValueRef coff = batch_offset(g, bi, g->sc);
    roff[ib] = mm->has_residual ? batch_offset(g, bi, g->sr) : c64(g, 0);
    for (int im = 0; im < TM; im++) {
      LLVMValueRef r = add(g, sp.m0, partial ? smin(g, c64(g, im), sub(g, sp.ms, c64(g, 1))) : c64(g, im));
      rowv[ib * TM + im] = r;
      arow[ib * TM + im] = gep(g, g->pa, add(g, aoff, mul(g, r, g->sa[4])));
      crow[ib * TM + im] = gep(g, g->pc, add(g, coff, mul(g, r, g->sc[4])));
    }
    for (int j = 0; j < NC; j++) bcol[ib * NC + j] = gep(g, g->pb, add(g, boff, mul(g, colv[j], g->sb[5])));
  }
  /* k in steps of W, unrolled; then one masked step for the tail */
  LLVMValueRef kend = add(g, sp.k0, sp.ks);
  int64_t step = (int64_t)W * n->unroll;
  LLVMValueRef kmain = add(g, sp.k0, mul(g, LLVMBuildSDiv(g->b, sp.ks, c64(g, step), ""), c64(g, step)));
  LLVMValueRef kvec_end = add(g, sp.k0, mul(g, LLVMBuildSDiv(g->b, sp.ks, c64(g, W), ""), c64(g, W)));
  for (int part = 0; part < 3; part++) {
    loop L;
    LLVMValueRef kk = part == 0   ? loop_begin(g, &L, sp.k0, kmain, c64(g, step))
                      : part == 1 ? loop_begin(g, &L, kmain, kvec_end, c64(g, W))
                                  : loop_begin(g, &L, kvec_end, kend, c64(g, W));
    int steps = part == 0 ? n->unroll : 1;
    for (int u = 0; u < steps; u++) {
      LLVMValueRef k = add(g, kk, c64(g, (int64_t)u * W));
      LLVMValueRef mask = part == 2 ? lane_mask(g, 0, W, sub(g, kend, k)) : NULL;
      for (int ib = 0; ib < TB; ib++) {
        LLVMValueRef bv[8];
        for (int j = 0; j < NC; j++)
          bv[j] = load_lanes(g, bcol[ib * NC + j], k, 1, c64(g, 1), W, mask, sub(g, kend, c64(g, 1)));
        for (int im = 0; im < TM; im++) {
          LLVMValueRef av = load_lanes(g, arow[ib * TM + im], k, 1, c64(g, 1), W, mask,
                                       sub(g, kend, c64(g, 1)));
          for (int j = 0; j < NC; j++) {
            LLVMValueRef slot = acc[(ib * TM + im) * NC + j];
            LLVMValueRef args[3] = {av, bv[j], LLVMBuildLoad2(g->b, vt, slot, "")};
            LLVMBuildStore(g->b, call_intrinsic(g, "llvm.fmuladd", &vt, 1, args, 3), slot);
          }
        }
      }
    }
    loop_end(g, &L);
  }
  /* reduce, add C's partial sum, epilogue at the last k block, store */
  LLVMValueRef first = first_k_block(g, &sp);
  LLVMValueRef last = LLVMBuildICmp(g->b, LLVMIntEQ, kend, g->K, "");
  LLVMTypeRef v1 = vtype(g, 1);
  for (int ib = 0; ib < TB; ib++)
    for (int im = 0; im < TM; im++)
      for (int j = 0; j < NC; j++) {
        LLVMBasicBlockRef sj = NULL;
        if (partial) {
          LLVMValueRef ok = LLVMBuildAnd(
              g->b,
              LLVMBuildAnd(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, c64(g, ib), sp.bs, ""),
                           LLVMBuildICmp(g->b, LLVMIntSLT, c64(g, im), sp.ms, ""), ""),
              LLVMBuildICmp(g->b, LLVMIntSLT, c64(g, j), sp.ns, ""), "");
          sj = if_begin(g, ok);
        }
        LLVMValueRef a = acc[(ib * TM + im) * NC + j];
        LLVMValueRef args[2] = {LLVMConstReal(g->f32, 0.0), LLVMBuildLoad2(g->b, vt, a, "")};
        LLVMValueRef sum = call_intrinsic(g, "llvm.vector.reduce.fadd", &vt, 1, args, 2);
        LLVMValueRef cptr = gep(g, crow[ib * TM + im], mul(g, colv[j], unit_c ? c64(g, 1) : g->sc[5]));
        LLVMValueRef old = load(g, g->f32, cptr, 4);
        sum = LLVMBuildSelect(g->b, first, sum, LLVMBuildFAdd(g->b, sum, old, ""), "");
        if (n->epilogue) {
          LLVMValueRef x1 = LLVMBuildInsertElement(g->b, LLVMGetUndef(v1), sum, c32(g, 0), "");
          x1 = epilogue(g, x1, roff[ib], rowv[ib * TM + im], colv[j], 1, NULL, NULL);
          LLVMValueRef done = LLVMBuildExtractElement(g->b, x1, c32(g, 0), "");
          sum = LLVMBuildSelect(g->b, last, done, sum, "");
        }
        store(g, sum, cptr, 4);
        if (partial) if_end(g, sj);
      }
}

/* if (cond) version(a) else version(b), each on its own copy of the block */
static void emit_two_versions(cg *g, const ln_node *n, blk *bk, LLVMValueRef cond,
                              void (*version)(cg *, const ln_node *, blk *, int), int a, int b) {
  LLVMBasicBlockRef ba = LLVMAppendBasicBlockInContext(g->C, g->fn, "tile_a");
  LLVMBasicBlockRef bb = LLVMAppendBasicBlockInContext(g->C, g->fn, "tile_b");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(g->C, g->fn, "tile_done");
  LLVMBuildCondBr(g->b, cond, ba, bb);
  const int which[2] = {a, b};
  const LLVMBasicBlockRef at[2] = {ba, bb};
  for (int i = 0; i < 2; i++) {
    LLVMPositionBuilderAtEnd(g->b, at[i]);
    blk copy = *bk;
    version(g, n, &copy, which[i]);
    LLVMBuildBr(g->b, done);
  }
  LLVMPositionBuilderAtEnd(g->b, done);
}

/* Emits the register tile: one version (vectors along n, emit_tile_version),
 * two with tail_m (tail_m rows for a block of at most that many rows, else
 * tile_m) or, for dot-product tiles, a full one (0) and a partial one (1)
 * chosen at run time by the block's size. */
static int emit_tile(cg *g, const ln_node *n, blk *bk) {
  if (n->tile_b * n->tile_m * n->nvec > MAX_ACC || n->tile_b > MAX_TB || n->nvec > 8) return -1;
  if (!n->kvec) {
    if (n->tail_m > 0 && n->tail_m < n->tile_m) {
      LLVMValueRef few = LLVMBuildICmp(g->b, LLVMIntSLE, bk->size[LN_M], c64(g, n->tail_m), "");
      emit_two_versions(g, n, bk, few, emit_tile_version, n->tail_m, n->tile_m);
    } else {
      blk copy = *bk;
      emit_tile_version(g, n, &copy, n->tile_m);
    }
    return 0;
  }
  LLVMValueRef full = LLVMBuildAnd(
      g->b, LLVMBuildICmp(g->b, LLVMIntEQ, bk->size[LN_B], c64(g, n->tile_b), ""),
      LLVMBuildAnd(g->b, LLVMBuildICmp(g->b, LLVMIntEQ, bk->size[LN_M], c64(g, n->tile_m), ""),
                   LLVMBuildICmp(g->b, LLVMIntEQ, bk->size[LN_N], c64(g, n->nvec), ""), ""),
      "");
  emit_two_versions(g, n, bk, full, emit_tile_kvec, 0, 1);
  return 0;
}

static int emit_epilogue_pass(cg *g, blk *bk) {
  const tlm_matmul_task *mm = g->mm;
  loop Lb, Lm, Ln;
  LLVMValueRef b0 = bk->start[LN_B], m0 = bk->start[LN_M], n0 = bk->start[LN_N];
  LLVMValueRef ib = loop_begin_outer(g, &Lb, b0, add(g, b0, bk->size[LN_B]), c64(g, 1));
  LLVMValueRef coff = batch_offset(g, ib, g->sc);
  LLVMValueRef roff = mm->has_residual ? batch_offset(g, ib, g->sr) : c64(g, 0);
  LLVMValueRef m = loop_begin_outer(g, &Lm, m0, add(g, m0, bk->size[LN_M]), c64(g, 1));
  LLVMValueRef crow = gep(g, g->pc, add(g, coff, mul(g, m, g->sc[4])));
  LLVMValueRef n = loop_begin(g, &Ln, n0, add(g, n0, bk->size[LN_N]), c64(g, 1));
  int unit_c = (mm->unit & TLM_UNIT_C_N) != 0;
  LLVMValueRef x = load_lanes(g, crow, n, unit_c, g->sc[5], 1, NULL, NULL);
  x = epilogue(g, x, roff, m, n, 1, NULL, NULL);
  store_lanes(g, x, crow, n, unit_c, g->sc[5], 1, NULL);
  loop_end(g, &Ln);
  loop_end(g, &Lm);
  loop_end(g, &Lb);
  return 0;
}

static int emit_node(cg *g, int idx, blk *bk) {
  const ln_node *n = &g->nest->nodes[idx];
  switch (n->kind) {
  case LN_PARALLEL: return emit_parallel(g, n, bk);
  case LN_FOR: return emit_for(g, n, bk);
  case LN_PACK_B: return emit_pack(g, n, bk);
  case LN_TILE: return emit_tile(g, n, bk);
  case LN_EPILOGUE: return emit_epilogue_pass(g, bk);
  default: return -1;
  }
}

static int codegen(LLVMContextRef ctx, const tlm_task *task, const ln_nest *nest,
                   const char *name, const char *cpu, const char *features, int static_m,
                   LLVMModuleRef *out, char *err, int errcap);

int tlm_codegen_matmul(LLVMContextRef ctx, const tlm_task *task, const ln_nest *nest,
                       const char *name, const char *cpu, const char *features,
                       LLVMModuleRef *out, char *err, int errcap) {
  return codegen(ctx, task, nest, name, cpu, features, 0, out, err, errcap);
}

int tlm_codegen_matmul_static_m(LLVMContextRef ctx, const tlm_task *task, const ln_nest *nest,
                                const char *name, const char *cpu, const char *features,
                                LLVMModuleRef *out, char *err, int errcap) {
  return codegen(ctx, task, nest, name, cpu, features, 1, out, err, errcap);
}

static int codegen(LLVMContextRef ctx, const tlm_task *task, const ln_nest *nest,
                   const char *name, const char *cpu, const char *features, int static_m,
                   LLVMModuleRef *out, char *err, int errcap) {
  cg g = {.task = task};
  g.mm = &task->u.mm;
  g.nest = nest;
  g.batched = tlm_task_batch_total(task) > 1;
  for (int i = 0; i < nest->nnodes; i++) g.epi_pass |= nest->nodes[i].kind == LN_EPILOGUE;
  LLVMBasicBlockRef start = begin_kernel(&g, ctx, "tlm_matmul", name, cpu, features);

  LLVMValueRef args = LLVMGetParam(g.fn, 0);
  g.begin = LLVMGetParam(g.fn, 1);
  g.end = LLVMGetParam(g.fn, 2);
  g.scratch = LLVMGetParam(g.fn, 3);
  g.pc = arg_field(&g, args, offsetof(tlm_mm_args, c), g.ptr);
  g.pa = arg_field(&g, args, offsetof(tlm_mm_args, a), g.ptr);
  g.pb = arg_field(&g, args, offsetof(tlm_mm_args, b), g.ptr);
  g.pbias = arg_field(&g, args, offsetof(tlm_mm_args, bias), g.ptr);
  g.pres = arg_field(&g, args, offsetof(tlm_mm_args, res), g.ptr);
  g.pbpk = arg_field(&g, args, offsetof(tlm_mm_args, bpk), g.ptr);
  g.mblock = arg_field(&g, args, offsetof(tlm_mm_args, mblock), g.i64);
  /* static_m: every extent a constant (the fully specialized kernel that
   * benchmarks compare against) */
  g.M = static_m ? c64(&g, g.mm->M) : arg_field(&g, args, offsetof(tlm_mm_args, M), g.i64);
  g.N = static_m ? c64(&g, g.mm->N) : arg_field(&g, args, offsetof(tlm_mm_args, N), g.i64);
  g.K = static_m ? c64(&g, g.mm->K) : arg_field(&g, args, offsetof(tlm_mm_args, K), g.i64);
  load_strides(&g, args, offsetof(tlm_mm_args, sa), g.sa, (g.mm->unit & TLM_UNIT_A_K) != 0);
  load_strides(&g, args, offsetof(tlm_mm_args, sb), g.sb, (g.mm->unit & TLM_UNIT_B_N) != 0);
  load_strides(&g, args, offsetof(tlm_mm_args, sc), g.sc, (g.mm->unit & TLM_UNIT_C_N) != 0);
  load_strides(&g, args, offsetof(tlm_mm_args, sr), g.sr, (g.mm->unit & TLM_UNIT_R_N) != 0);
  g.sbias = (g.mm->unit & TLM_UNIT_BIAS) ? c64(&g, 1)
                                          : arg_field(&g, args, offsetof(tlm_mm_args, sbias), g.i64);

  blk root;
  for (int a = 0; a < LN_NAXES; a++) {
    root.start[a] = c64(&g, 0);
    root.size[a] = root_extent(&g, a);
  }
  int rc = emit_node(&g, nest->root, &root);
  return end_kernel(&g, start, rc, out, err, errcap);
}

/* ---- row-wise operators ------------------------------------------------------------- */

/* horizontal reductions of U vector accumulators */
static LLVMValueRef hmax(cg *g, LLVMValueRef *acc, int U, int W) {
  LLVMTypeRef vt = vtype(g, W);
  LLVMValueRef v = LLVMBuildLoad2(g->b, vt, acc[0], "");
  for (int u = 1; u < U; u++) {
    LLVMValueRef args[2] = {v, LLVMBuildLoad2(g->b, vt, acc[u], "")};
    v = call_intrinsic(g, "llvm.maxnum", &vt, 1, args, 2);
  }
  return call_intrinsic(g, "llvm.vector.reduce.fmax", &vt, 1, &v, 1);
}

static LLVMValueRef hsum(cg *g, LLVMValueRef *acc, int U, int W) {
  LLVMTypeRef vt = vtype(g, W);
  LLVMValueRef v = LLVMBuildLoad2(g->b, vt, acc[0], "");
  for (int u = 1; u < U; u++) v = LLVMBuildFAdd(g->b, v, LLVMBuildLoad2(g->b, vt, acc[u], ""), "");
  LLVMValueRef args[2] = {LLVMConstReal(g->f32, 0.0), v};
  return call_intrinsic(g, "llvm.vector.reduce.fadd", &vt, 1, args, 2);
}

typedef struct row_ctx {
  LLVMValueRef x, y, gamma, beta; /* row pointers / vectors bases */
  LLVMValueRef z, sz1;            /* eltwise's second input (row pointer) */
  int uz;
  LLVMValueRef sx1, sy1, sg, sb;
  int ux, uy, ug, ub;
  LLVMValueRef lim;               /* columns in play (causal softmax) */
  LLVMValueRef cols, mrows;       /* run-time extents */
  LLVMValueRef shift;             /* layernorm: x[0] of the row, subtracted
                                     first (exact by Sterbenz's lemma for
                                     nearby values), so a large common
                                     offset costs no precision in the mean */
  LLVMValueRef a, b2;             /* per-row scalars: max/mean, 1/sum or rstd */
} row_ctx;

enum { RP_MAX, RP_EXP_SUM, RP_SCALE, RP_SUM, RP_SQDEV, RP_SUMSQ, RP_NORM, RP_ELT };

/* One pass over columns [0, lim): main part W*U wide, remainder W wide
 * with masks. Reductions accumulate into acc (U vectors). */
static void row_pass(cg *g, row_ctx *rc, int kind, int pass, int W, int U, float scale,
                     LLVMValueRef *acc) {
  LLVMTypeRef vt = vtype(g, W);
  LLVMValueRef step = c64(g, (int64_t)W * U);
  LLVMValueRef full = mul(g, LLVMBuildSDiv(g->b, rc->lim, step, ""), step);
  LLVMValueRef nlast = sub(g, rc->lim, c64(g, 1));
  for (int part = 0; part < 2; part++) {
    loop L;
    LLVMValueRef c0 = part == 0 ? loop_begin(g, &L, c64(g, 0), full, step)
                                : loop_begin(g, &L, full, rc->lim, c64(g, W));
    int n = part == 0 ? U : 1;
    for (int u = 0; u < n; u++) {
      LLVMValueRef c = add(g, c0, c64(g, (int64_t)u * W));
      LLVMValueRef mask = part == 1 ? lane_mask(g, 0, W, sub(g, rc->lim, c)) : NULL;
      LLVMValueRef xv = load_lanes(g, rc->x, c, rc->ux, rc->sx1, W, mask, nlast);
      if (scale != 1.0f) xv = LLVMBuildFMul(g->b, xv, splat_f(g, scale, W), "");
      if (rc->shift) {
        xv = LLVMBuildFSub(g->b, xv, splat(g, rc->shift, W), "");
        if (mask) xv = LLVMBuildSelect(g->b, mask, xv, LLVMConstNull(vt), "");
      }
      LLVMValueRef slot = acc ? acc[u] : NULL, v = NULL;
      switch (pass) {
      case RP_MAX: {
        LLVMValueRef in = mask ? LLVMBuildSelect(g->b, mask, xv, splat_f(g, -INFINITY, W), "") : xv;
        LLVMValueRef args[2] = {LLVMBuildLoad2(g->b, vt, slot, ""), in};
        LLVMBuildStore(g->b, call_intrinsic(g, "llvm.maxnum", &vt, 1, args, 2), slot);
        break;
      }
      case RP_EXP_SUM: {
        LLVMValueRef e = vexp(g, LLVMBuildFSub(g->b, xv, splat(g, rc->a, W), ""), W);
        if (mask) e = LLVMBuildSelect(g->b, mask, e, LLVMConstNull(vt), "");
        store_lanes(g, e, rc->y, c, rc->uy, rc->sy1, W, mask);
        LLVMBuildStore(g->b, LLVMBuildFAdd(g->b, LLVMBuildLoad2(g->b, vt, slot, ""), e, ""), slot);
        break;
      }
      case RP_SCALE: /* y *= 1/sum */
        v = load_lanes(g, rc->y, c, rc->uy, rc->sy1, W, mask, nlast);
        store_lanes(g, LLVMBuildFMul(g->b, v, splat(g, rc->b2, W), ""), rc->y, c, rc->uy, rc->sy1,
                    W, mask);
        break;
      case RP_SUM:
        LLVMBuildStore(g->b, LLVMBuildFAdd(g->b, LLVMBuildLoad2(g->b, vt, slot, ""), xv, ""), slot);
        break;
      case RP_SQDEV: {
        LLVMValueRef dv = LLVMBuildFSub(g->b, xv, splat(g, rc->a, W), "");
        if (mask) dv = LLVMBuildSelect(g->b, mask, dv, LLVMConstNull(vt), "");
        LLVMValueRef args[3] = {dv, dv, LLVMBuildLoad2(g->b, vt, slot, "")};
        LLVMBuildStore(g->b, call_intrinsic(g, "llvm.fmuladd", &vt, 1, args, 3), slot);
        break;
      }
      case RP_SUMSQ: {
        LLVMValueRef args[3] = {xv, xv, LLVMBuildLoad2(g->b, vt, slot, "")};
        LLVMBuildStore(g->b, call_intrinsic(g, "llvm.fmuladd", &vt, 1, args, 3), slot);
        break;
      }
      case RP_ELT: {
        const tlm_row_task *rt = &g->task->u.row;
        v = apply_activation(g, xv, rt->act, W);
        if (rt->binary != TLM_BINARY_NONE) {
          LLVMValueRef zv = load_lanes(g, rc->z, c, rc->uz, rc->sz1, W, mask, nlast);
          v = rt->binary == TLM_BINARY_ADD ? LLVMBuildFAdd(g->b, v, zv, "")
                                           : LLVMBuildFMul(g->b, v, zv, "");
        }
        store_lanes(g, v, rc->y, c, rc->uy, rc->sy1, W, mask);
        break;
      }
      case RP_NORM: {
        LLVMValueRef gv = load_lanes(g, rc->gamma, c, rc->ug, rc->sg, W, mask, nlast);
        v = kind == TLM_OP_LAYERNORM ? LLVMBuildFSub(g->b, xv, splat(g, rc->a, W), "") : xv;
        v = LLVMBuildFMul(g->b, LLVMBuildFMul(g->b, v, splat(g, rc->b2, W), ""), gv, "");
        if (kind == TLM_OP_LAYERNORM)
          v = LLVMBuildFAdd(g->b, v, load_lanes(g, rc->beta, c, rc->ub, rc->sb, W, mask, nlast), "");
        store_lanes(g, v, rc->y, c, rc->uy, rc->sy1, W, mask);
        break;
      }
      default: break;
      }
    }
    loop_end(g, &L);
  }
}

/* interleave: lane j of the result is a[j / 2] (j even) or b[j / 2] (j
 * odd), for j in [lane0, lane0 + W); deinterleave: a's or b's lanes of
 * the pair (lo, hi) */
static LLVMValueRef shuffle_idx(cg *g, LLVMValueRef a, LLVMValueRef b, const int *idx, int w) {
  LLVMValueRef m[32];
  for (int j = 0; j < w; j++) m[j] = c32(g, idx[j]);
  return LLVMBuildShuffleVector(g->b, a, b, LLVMConstVector(m, (unsigned)w), "");
}

/* Rotary position embedding of one (token, head) row: pairs i < D/2 in
 * steps of W pairs (U steps unrolled), the remainder W pairs at a time
 * with masks. The table row holds cos at i and sin at D/2 + i. */
static void rope_pass(cg *g, row_ctx *rc, int W, int U) {
  int inter = g->task->u.row.rope_style == TLM_ROPE_INTERLEAVED;
  LLVMValueRef C = rc->cols;
  LLVMValueRef half = LLVMBuildSDiv(g->b, C, c64(g, 2), "");
  LLVMValueRef step = c64(g, (int64_t)W * U);
  LLVMValueRef full = mul(g, LLVMBuildSDiv(g->b, half, step, ""), step);
  LLVMValueRef clast = sub(g, C, c64(g, 1)), hlast = sub(g, half, c64(g, 1));
  int ev[32], od[32], lo[32], hi[32];
  for (int j = 0; j < W; j++) {
    ev[j] = 2 * j, od[j] = 2 * j + 1;
    lo[j] = j % 2 ? W + j / 2 : j / 2;
    hi[j] = (W + j) % 2 ? W + (W + j) / 2 : (W + j) / 2;
  }
  for (int part = 0; part < 2; part++) {
    loop L;
    LLVMValueRef i0 = part == 0 ? loop_begin(g, &L, c64(g, 0), full, step)
                                : loop_begin(g, &L, full, half, c64(g, W));
    for (int u = 0; u < (part == 0 ? U : 1); u++) {
      LLVMValueRef i = add(g, i0, c64(g, (int64_t)u * W));
      LLVMValueRef mask = part == 1 ? lane_mask(g, 0, W, sub(g, half, i)) : NULL;
      LLVMValueRef cv = load_lanes(g, rc->z, i, rc->uz, rc->sz1, W, mask, hlast);
      LLVMValueRef sv = load_lanes(g, rc->z, add(g, i, half), rc->uz, rc->sz1, W, mask, clast);
      LLVMValueRef xa, xb, ia = i, ib = add(g, i, half), ma = mask, mb = mask;
      LLVMValueRef v0 = NULL, v1 = NULL;
      if (inter) { /* floats [2i, 2i + 2W) as two vectors, split into pairs */
        ia = mul(g, i, c64(g, 2));
        ib = add(g, ia, c64(g, W));
        LLVMValueRef left = sub(g, C, ia);
        ma = part == 1 ? lane_mask(g, 0, W, left) : NULL;
        mb = part == 1 ? lane_mask(g, W, W, left) : NULL;
        v0 = load_lanes(g, rc->x, ia, rc->ux, rc->sx1, W, ma, clast);
        v1 = load_lanes(g, rc->x, ib, rc->ux, rc->sx1, W, mb, clast);
        xa = shuffle_idx(g, v0, v1, ev, W);
        xb = shuffle_idx(g, v0, v1, od, W);
      } else {
        xa = load_lanes(g, rc->x, ia, rc->ux, rc->sx1, W, ma, clast);
        xb = load_lanes(g, rc->x, ib, rc->ux, rc->sx1, W, mb, clast);
      }
      LLVMValueRef ya = LLVMBuildFSub(g->b, LLVMBuildFMul(g->b, xa, cv, ""),
                                      LLVMBuildFMul(g->b, xb, sv, ""), "");
      LLVMValueRef yb = LLVMBuildFAdd(g->b, LLVMBuildFMul(g->b, xb, cv, ""),
                                      LLVMBuildFMul(g->b, xa, sv, ""), "");
      if (inter) {
        LLVMValueRef o0 = shuffle_idx(g, ya, yb, lo, W), o1 = shuffle_idx(g, ya, yb, hi, W);
        ya = o0, yb = o1;
      }
      store_lanes(g, ya, rc->y, ia, rc->uy, rc->sy1, W, ma);
      store_lanes(g, yb, rc->y, ib, rc->uy, rc->sy1, W, mb);
    }
    loop_end(g, &L);
  }
}

static void row_body(cg *g, const tlm_task *task, row_ctx *rc, LLVMValueRef r, int W, int U) {
  const tlm_row_task *t = &task->u.row;
  LLVMTypeRef vt = vtype(g, W);
  LLVMValueRef acc[4];
  for (int u = 0; u < U; u++) acc[u] = alloca_of(g, vt);
  LLVMValueRef C = rc->cols;
  rc->lim = C;
  if (task->kind == TLM_OP_ROPE) {
    rope_pass(g, rc, W, U);
    return;
  }
  if (task->kind == TLM_OP_ELTWISE) {
    row_pass(g, rc, task->kind, RP_ELT, W, U, 1.0f, NULL);
    return;
  }
  if (task->kind == TLM_OP_SOFTMAX) {
    if (t->causal) {
      LLVMValueRef lim = add(g, LLVMBuildSRem(g->b, r, rc->mrows, ""),
                             add(g, sub(g, C, rc->mrows), c64(g, 1)));
      lim = smin(g, lim, C);
      rc->lim = LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, lim, c64(g, 0), ""),
                                c64(g, 0), lim, "");
    }
    for (int u = 0; u < U; u++) LLVMBuildStore(g->b, splat_f(g, -INFINITY, W), acc[u]);
    row_pass(g, rc, task->kind, RP_MAX, W, U, t->scale, acc);
    rc->a = hmax(g, acc, U, W);
    for (int u = 0; u < U; u++) LLVMBuildStore(g->b, LLVMConstNull(vt), acc[u]);
    row_pass(g, rc, task->kind, RP_EXP_SUM, W, U, t->scale, acc);
    rc->b2 = LLVMBuildFDiv(g->b, LLVMConstReal(g->f32, 1.0), hsum(g, acc, U, W), "");
    row_pass(g, rc, task->kind, RP_SCALE, W, U, 1.0f, NULL);
    if (t->causal) { /* masked columns are 0 */
      loop L;
      LLVMValueRef c = loop_begin(g, &L, rc->lim, C, c64(g, 1));
      store(g, LLVMConstReal(g->f32, 0.0), gep(g, rc->y, mul(g, c, rc->sy1)), 4);
      loop_end(g, &L);
    }
    return;
  }
  LLVMValueRef invc = LLVMBuildFDiv(g->b, LLVMConstReal(g->f32, 1.0),
                                    LLVMBuildSIToFP(g->b, C, g->f32, ""), "");
  rc->a = LLVMConstReal(g->f32, 0.0);
  if (task->kind == TLM_OP_LAYERNORM) {
    rc->shift = load(g, g->f32, rc->x, 4);
    for (int u = 0; u < U; u++) LLVMBuildStore(g->b, LLVMConstNull(vt), acc[u]);
    row_pass(g, rc, task->kind, RP_SUM, W, U, 1.0f, acc);
    rc->a = LLVMBuildFMul(g->b, hsum(g, acc, U, W), invc, "");
  }
  for (int u = 0; u < U; u++) LLVMBuildStore(g->b, LLVMConstNull(vt), acc[u]);
  row_pass(g, rc, task->kind, task->kind == TLM_OP_LAYERNORM ? RP_SQDEV : RP_SUMSQ, W, U, 1.0f,
           acc);
  LLVMValueRef var = LLVMBuildFAdd(g->b, LLVMBuildFMul(g->b, hsum(g, acc, U, W), invc, ""),
                                   LLVMConstReal(g->f32, t->eps), "");
  LLVMTypeRef ft = g->f32;
  LLVMValueRef sq = call_intrinsic(g, "llvm.sqrt", &ft, 1, &var, 1);
  rc->b2 = LLVMBuildFDiv(g->b, LLVMConstReal(g->f32, 1.0), sq, "");
  row_pass(g, rc, task->kind, RP_NORM, W, U, 1.0f, NULL);
}

int tlm_codegen_row(LLVMContextRef ctx, const tlm_task *task, const tlm_schedule *sched,
                    const char *name, const char *cpu, const char *features, LLVMModuleRef *out,
                    char *err, int errcap) {
  const tlm_row_task *t = &task->u.row;
  cg g = {.task = task};
  LLVMBasicBlockRef start = begin_kernel(&g, ctx, "tlm_row", name, cpu, features);
  LLVMValueRef args = LLVMGetParam(g.fn, 0);
  LLVMValueRef begin = LLVMGetParam(g.fn, 1), end = LLVMGetParam(g.fn, 2);
  row_ctx rc;
  memset(&rc, 0, sizeof rc);
  LLVMValueRef py = arg_field(&g, args, offsetof(tlm_row_args, y), g.ptr);
  LLVMValueRef px = arg_field(&g, args, offsetof(tlm_row_args, x), g.ptr);
  rc.gamma = arg_field(&g, args, offsetof(tlm_row_args, gamma), g.ptr);
  rc.beta = arg_field(&g, args, offsetof(tlm_row_args, beta), g.ptr);
  LLVMValueRef rows = arg_field(&g, args, offsetof(tlm_row_args, rows), g.i64);
  rc.cols = arg_field(&g, args, offsetof(tlm_row_args, cols), g.i64);
  rc.mrows = arg_field(&g, args, offsetof(tlm_row_args, mrows), g.i64);
  LLVMValueRef sx0 = arg_field(&g, args, offsetof(tlm_row_args, sx), g.i64);
  LLVMValueRef sy0 = arg_field(&g, args, offsetof(tlm_row_args, sy), g.i64);
  /* rope: head strides (rows are (token, head) pairs) */
  LLVMValueRef sxh = task->kind == TLM_OP_ROPE ? arg_field(&g, args, offsetof(tlm_row_args, sxh), g.i64) : NULL;
  LLVMValueRef syh = task->kind == TLM_OP_ROPE ? arg_field(&g, args, offsetof(tlm_row_args, syh), g.i64) : NULL;
  rc.ux = (t->unit & TLM_UNIT_ROW_X) != 0;
  rc.uy = (t->unit & TLM_UNIT_ROW_Y) != 0;
  rc.ug = (t->unit & TLM_UNIT_ROW_G) != 0;
  rc.ub = (t->unit & TLM_UNIT_ROW_B) != 0;
  rc.sx1 = rc.ux ? c64(&g, 1) : arg_field(&g, args, offsetof(tlm_row_args, sx) + 8, g.i64);
  rc.sy1 = rc.uy ? c64(&g, 1) : arg_field(&g, args, offsetof(tlm_row_args, sy) + 8, g.i64);
  rc.sg = rc.ug ? c64(&g, 1) : arg_field(&g, args, offsetof(tlm_row_args, sg), g.i64);
  rc.sb = rc.ub ? c64(&g, 1) : arg_field(&g, args, offsetof(tlm_row_args, sb), g.i64);
  LLVMValueRef pz = arg_field(&g, args, offsetof(tlm_row_args, z), g.ptr);
  LLVMValueRef sz0 = arg_field(&g, args, offsetof(tlm_row_args, sz), g.i64);
  rc.uz = (t->unit & TLM_UNIT_ROW_Z) != 0;
  rc.sz1 = rc.uz ? c64(&g, 1) : arg_field(&g, args, offsetof(tlm_row_args, sz) + 8, g.i64);
  int W = sched->v[ROW_VEC], U = sched->v[ROW_UNROLL];
  int64_t T = sched->v[ROW_TILE];
  LLVMValueRef r0, r1;
  loop Lb;
  int parallel = sched->v[ROW_PARALLEL];
  if (parallel) {
    LLVMValueRef blk = loop_begin(&g, &Lb, begin, end, c64(&g, 1));
    r0 = mul(&g, blk, c64(&g, T));
    r1 = smin(&g, add(&g, r0, c64(&g, T)), rows);
  } else {
    r0 = c64(&g, 0);
    r1 = rows;
  }
  /* rows in blocks of T, one row at a time */
  loop Lr;
  LLVMValueRef r = loop_begin(&g, &Lr, r0, r1, c64(&g, 1));
  if (task->kind == TLM_OP_ROPE) { /* row r: token r / heads, head r % heads */
    LLVMValueRef tok = LLVMBuildSDiv(g.b, r, rc.mrows, ""), h = LLVMBuildSRem(g.b, r, rc.mrows, "");
    rc.x = gep(&g, px, add(&g, mul(&g, tok, sx0), mul(&g, h, sxh)));
    rc.y = gep(&g, py, add(&g, mul(&g, tok, sy0), mul(&g, h, syh)));
    rc.z = gep(&g, pz, mul(&g, tok, sz0));
  } else {
    rc.x = gep(&g, px, mul(&g, r, sx0));
    rc.y = gep(&g, py, mul(&g, r, sy0));
    rc.z = gep(&g, pz, mul(&g, r, sz0));
  }
  row_body(&g, task, &rc, r, W, U);
  loop_end(&g, &Lr);
  if (parallel) loop_end(&g, &Lb);
  return end_kernel(&g, start, 0, out, err, errcap);
}
