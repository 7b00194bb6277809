/* cg_common.h - LLVM-C building blocks shared by the code generators
 * (internal; included by codegen.c and codegen_conv.c only). */
#ifndef TLM_JIT_CG_COMMON_H
#define TLM_JIT_CG_COMMON_H

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "activation.h"
#include "../runtime/kernel_abi.h"
#include "../runtime/loopnest.h"
#include "../runtime/task.h"

#define MAX_ACC 64   /* == MAX_ACCUMULATORS in space.c */
#define MAX_TB 64    /* tile_b bound (accumulator bound with m = nv = 1) */

typedef struct cg {
  LLVMContextRef C;
  LLVMModuleRef mod;
  LLVMBuilderRef b;
  LLVMBuilderRef ab; /* positioned in the entry block, for allocas */
  LLVMValueRef fn;
  LLVMTypeRef i1, i32, i64, f32, ptr, vd;
  const tlm_task *task;
  const tlm_matmul_task *mm;
  const ln_nest *nest;
  /* matmul, in-place residual (has_residual 3): epi_pass, the nest applies
   * the epilogue in a pass of its own; res_single, while a tile's epilogue
   * is built, i1 "this tile's K was one block" (NULL: none to add) */
  int epi_pass;
  LLVMValueRef res_single;
  int batched;
  LLVMValueRef begin, end, scratch;
  LLVMValueRef pa, pb, pc, pbias, pres, pbpk, M, N, K;
  LLVMValueRef mblock;     /* tlm_mm_args.mblock: the run-time M split (ln_node.split_m) */
  LLVMValueRef sa[6], sb[6], sc[6], sr[6], sbias;
  /* packing state, valid inside an LN_PACK_B */
  int packed;
  LLVMValueRef pk_b0, pk_n0, pk_k0;
  LLVMValueRef pk_base;    /* the packed block: scratch, or in args->bpk */
  LLVMValueRef pk_bstride; /* floats from one batch's packed block to the next */
  int64_t pk_kb, pk_width;
} cg;

typedef struct blk {
  LLVMValueRef start[LN_NAXES], size[LN_NAXES];
} blk;

/* ---- small builders ---------------------------------------------------- */

static inline LLVMValueRef c64(cg *g, int64_t v) { return LLVMConstInt(g->i64, (unsigned long long)v, 1); }
static inline LLVMValueRef c32(cg *g, int32_t v) { return LLVMConstInt(g->i32, (unsigned long long)v, 1); }
static inline LLVMValueRef add(cg *g, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildAdd(g->b, x, y, ""); }
static inline LLVMValueRef sub(cg *g, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildSub(g->b, x, y, ""); }
static inline LLVMValueRef mul(cg *g, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildMul(g->b, x, y, ""); }
static inline LLVMValueRef smin(cg *g, LLVMValueRef x, LLVMValueRef y) {
  return LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, x, y, ""), x, y, "");
}
static inline LLVMValueRef smax(cg *g, LLVMValueRef x, LLVMValueRef y) {
  return LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSGT, x, y, ""), x, y, "");
}
static inline LLVMValueRef gep(cg *g, LLVMValueRef base, LLVMValueRef idx) {
  return LLVMBuildGEP2(g->b, g->f32, base, &idx, 1, "");
}
static inline LLVMTypeRef vtype(cg *g, int w) { return LLVMVectorType(g->f32, (unsigned)w); }

static inline LLVMValueRef alloca_of(cg *g, LLVMTypeRef t) { return LLVMBuildAlloca(g->ab, t, ""); }

static inline LLVMValueRef load(cg *g, LLVMTypeRef t, LLVMValueRef p, unsigned align) {
  LLVMValueRef v = LLVMBuildLoad2(g->b, t, p, "");
  LLVMSetAlignment(v, align);
  return v;
}
static inline void store(cg *g, LLVMValueRef v, LLVMValueRef p, unsigned align) {
  LLVMSetAlignment(LLVMBuildStore(g->b, v, p), align);
}

static inline LLVMValueRef call_intrinsic(cg *g, const char *name, LLVMTypeRef *ovl, size_t novl,
                                   LLVMValueRef *args, unsigned nargs) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  LLVMValueRef f = LLVMGetIntrinsicDeclaration(g->mod, id, ovl, novl);
  LLVMTypeRef ft = LLVMIntrinsicGetType(g->C, id, ovl, novl);
  return LLVMBuildCall2(g->b, ft, f, args, nargs, "");
}

static inline LLVMValueRef splat(cg *g, LLVMValueRef s, int w) {
  LLVMTypeRef vt = vtype(g, w);
  LLVMValueRef v = LLVMBuildInsertElement(g->b, LLVMGetUndef(vt), s, c32(g, 0), "");
  if (w == 1) return v;
  LLVMValueRef zeros = LLVMConstNull(LLVMVectorType(g->i32, (unsigned)w));
  return LLVMBuildShuffleVector(g->b, v, LLVMGetUndef(vt), zeros, "");
}

static inline LLVMValueRef splat_f(cg *g, double x, int w) {
  LLVMValueRef e[16];
  for (int i = 0; i < w; i++) e[i] = LLVMConstReal(g->f32, x);
  return LLVMConstVector(e, (unsigned)w);
}

/* <lane0 + 0, lane0 + 1, ...> as i64 */
static inline LLVMValueRef lane_ids(cg *g, int64_t lane0, int w) {
  LLVMValueRef e[16];
  for (int i = 0; i < w; i++) e[i] = c64(g, lane0 + i);
  return LLVMConstVector(e, (unsigned)w);
}

/* mask of lanes lane0+l < limit (limit an i64 value). The count of valid
 * lanes is clamped to [0, w] in scalar code and compared as i32 lanes: a
 * <16 x i64> compare is two registers wide on AVX-512 (four on AVX2), and
 * splitting it cost instruction selection time in every tail version. */
static inline LLVMValueRef lane_mask(cg *g, int64_t lane0, int w, LLVMValueRef limit) {
  LLVMValueRef n = LLVMBuildSub(g->b, limit, c64(g, lane0), "");
  n = smin(g, n, c64(g, w));
  n = LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, n, c64(g, 0), ""), c64(g, 0), n, "");
  n = LLVMBuildTrunc(g->b, n, g->i32, "");
  LLVMTypeRef vi = LLVMVectorType(g->i32, (unsigned)w);
  LLVMValueRef lim = LLVMBuildInsertElement(g->b, LLVMGetUndef(vi), n, c32(g, 0), "");
  if (w > 1)
    lim = LLVMBuildShuffleVector(g->b, lim, LLVMGetUndef(vi), LLVMConstNull(vi), "");
  LLVMValueRef e[16];
  for (int i = 0; i < w; i++) e[i] = c32(g, i);
  return LLVMBuildICmp(g->b, LLVMIntSLT, LLVMConstVector(e, (unsigned)w), lim, "");
}

/* ---- loops --------------------------------------------------------------- */

typedef struct loop {
  LLVMValueRef iv;
  LLVMValueRef step;
  LLVMBasicBlockRef cond, exit;
  int opaque; /* counter in memory: see loop_begin_outer */
} loop;

static inline LLVMValueRef loop_begin_ex(cg *g, loop *L, LLVMValueRef start, LLVMValueRef end,
                                         LLVMValueRef step, int opaque) {
  L->iv = alloca_of(g, g->i64);
  L->step = step;
  L->opaque = opaque;
  LLVMBuildStore(g->b, start, L->iv);
  L->cond = LLVMAppendBasicBlockInContext(g->C, g->fn, "loop");
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(g->C, g->fn, "body");
  L->exit = LLVMAppendBasicBlockInContext(g->C, g->fn, "exit");
  LLVMBuildBr(g->b, L->cond);
  LLVMPositionBuilderAtEnd(g->b, L->cond);
  LLVMValueRef i = LLVMBuildLoad2(g->b, g->i64, L->iv, "i");
  if (opaque) LLVMSetVolatile(i, 1);
  LLVMBuildCondBr(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, i, end, ""), body, L->exit);
  LLVMPositionBuilderAtEnd(g->b, body);
  return i;
}

static inline LLVMValueRef loop_begin(cg *g, loop *L, LLVMValueRef start, LLVMValueRef end,
                                      LLVMValueRef step) {
  return loop_begin_ex(g, L, start, end, step, 0);
}

/* A loop whose counter stays in memory (volatile loads and stores), for
 * loops whose body is a whole register tile or more. LLVM's loop strength
 * reduction runs on every loop before instruction selection; with an
 * SSA counter on the loops around the tiles it took 35-40% of a matmul
 * kernel's compile (14 of 38 ms for a 6x64 AVX-512 tile, `tlm run
 * 128x768:768x768`; llc -time-passes agrees), and finds nothing to gain
 * there. A counter in memory is no induction variable, so it skips them;
 * one store and one load per iteration of a loop around a tile cost
 * nothing measurable. The k loops, packing and element-wise loops keep
 * SSA counters. */
static inline LLVMValueRef loop_begin_outer(cg *g, loop *L, LLVMValueRef start, LLVMValueRef end,
                                            LLVMValueRef step) {
  return loop_begin_ex(g, L, start, end, step, 1);
}

static inline void loop_end(cg *g, loop *L) {
  LLVMValueRef i = LLVMBuildLoad2(g->b, g->i64, L->iv, "");
  if (L->opaque) LLVMSetVolatile(i, 1);
  LLVMValueRef st = LLVMBuildStore(g->b, add(g, i, L->step), L->iv);
  if (L->opaque) LLVMSetVolatile(st, 1);
  LLVMBuildBr(g->b, L->cond);
  LLVMPositionBuilderAtEnd(g->b, L->exit);
}

/* if (cond) { ... } : returns the join block; the builder is in "then" */
static inline LLVMBasicBlockRef if_begin(cg *g, LLVMValueRef cond) {
  LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(g->C, g->fn, "then");
  LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(g->C, g->fn, "join");
  LLVMBuildCondBr(g->b, cond, then, join);
  LLVMPositionBuilderAtEnd(g->b, then);
  return join;
}
static inline void if_end(cg *g, LLVMBasicBlockRef join) {
  LLVMBuildBr(g->b, join);
  LLVMPositionBuilderAtEnd(g->b, join);
}

/* Loads W lanes of row `base` at columns nstart + l (column stride `stride`,
 * unit when `unit`). With a mask, lanes outside it read 0 and touch no
 * memory beyond column nlast. */
static inline LLVMValueRef load_lanes(cg *g, LLVMValueRef base, LLVMValueRef nstart, int unit,
                               LLVMValueRef stride, int w, LLVMValueRef mask,
                               LLVMValueRef nlast) {
  LLVMTypeRef vt = vtype(g, w);
  if (unit) {
    LLVMValueRef p = gep(g, base, nstart);
    if (!mask) return load(g, vt, p, 4);
    LLVMTypeRef ovl[2] = {vt, g->ptr};
    LLVMValueRef args[4] = {p, c32(g, 4), mask, LLVMConstNull(vt)};
    return call_intrinsic(g, "llvm.masked.load", ovl, 2, args, 4);
  }
  LLVMValueRef v = LLVMGetUndef(vt);
  for (int l = 0; l < w; l++) {
    LLVMValueRef n = add(g, nstart, c64(g, l));
    if (mask) n = smin(g, n, nlast);
    LLVMValueRef s = load(g, g->f32, gep(g, base, mul(g, n, stride)), 4);
    v = LLVMBuildInsertElement(g->b, v, s, c32(g, l), "");
  }
  if (mask) v = LLVMBuildSelect(g->b, mask, v, LLVMConstNull(vt), "");
  return v;
}

static inline void store_lanes(cg *g, LLVMValueRef val, LLVMValueRef base, LLVMValueRef nstart,
                        int unit, LLVMValueRef stride, int w, LLVMValueRef mask) {
  LLVMTypeRef vt = vtype(g, w);
  if (unit) {
    LLVMValueRef p = gep(g, base, nstart);
    if (!mask) {
      store(g, val, p, 4);
      return;
    }
    LLVMTypeRef ovl[2] = {vt, g->ptr};
    LLVMValueRef args[4] = {val, p, c32(g, 4), mask};
    call_intrinsic(g, "llvm.masked.store", ovl, 2, args, 4);
    return;
  }
  for (int l = 0; l < w; l++) {
    LLVMBasicBlockRef join = NULL;
    if (mask) join = if_begin(g, LLVMBuildExtractElement(g->b, mask, c32(g, l), ""));
    LLVMValueRef n = add(g, nstart, c64(g, l));
    LLVMValueRef s = LLVMBuildExtractElement(g->b, val, c32(g, l), "");
    store(g, s, gep(g, base, mul(g, n, stride)), 4);
    if (mask) if_end(g, join);
  }
}

/* ---- epilogue ------------------------------------------------------------ */

/* exp on W lanes, inline: 2^(x log2 e) = 2^n * 2^f with n = rint(x log2 e),
 * f in [-0.5, 0.5], 2^f = e^(f ln 2) by a degree-6 Taylor polynomial
 * (relative error < 2e-7), 2^n added to the exponent bits. Inputs are
 * clamped to [-87, 88] so the result stays a normal float or +inf-free;
 * the same algorithm as the int8 decoder's fast_exp (lm/infer.c). Below
 * -87 the result is exactly 0 (e^x is then under the smallest normal
 * float; a masked logit of -inf gets probability 0), and NaN stays NaN
 * (the NaN rule: NaN in, NaN out, for every operator). */
static inline LLVMValueRef vexp(cg *g, LLVMValueRef x, int w) {
  LLVMTypeRef vt = vtype(g, w), vi = LLVMVectorType(g->i32, (unsigned)w);
  LLVMValueRef lo = splat_f(g, -87.0, w), hi = splat_f(g, 88.0, w);
  LLVMValueRef x0 = x;
  LLVMValueRef under = LLVMBuildFCmp(g->b, LLVMRealOLT, x, lo, "");
  LLVMValueRef nan = LLVMBuildFCmp(g->b, LLVMRealUNO, x, x, "");
  x = LLVMBuildSelect(g->b, under, lo, x, "");
  x = LLVMBuildSelect(g->b, nan, splat_f(g, 0.0, w), x, ""); /* no NaN through the integer part */
  x = LLVMBuildSelect(g->b, LLVMBuildFCmp(g->b, LLVMRealOGT, x, hi, ""), hi, x, "");
  LLVMValueRef t = LLVMBuildFMul(g->b, x, splat_f(g, 1.4426950408889634, w), "");
  LLVMValueRef n = call_intrinsic(g, "llvm.rint", &vt, 1, &t, 1);
  LLVMValueRef f = LLVMBuildFMul(g->b, LLVMBuildFSub(g->b, t, n, ""),
                                 splat_f(g, 0.6931471805599453, w), "");
  static const double c[] = {0.0013888889, 0.0083333338, 0.041666668, 0.16666667, 0.5, 1.0, 1.0};
  LLVMValueRef p = splat_f(g, c[0], w);
  for (int i = 1; i < 7; i++) {
    LLVMValueRef args[3] = {p, f, splat_f(g, c[i], w)};
    p = call_intrinsic(g, "llvm.fmuladd", &vt, 1, args, 3);
  }
  LLVMValueRef ni = LLVMBuildFPToSI(g->b, n, vi, "");
  LLVMValueRef shift[16];
  for (int i = 0; i < w; i++) shift[i] = c32(g, 23);
  LLVMValueRef e = LLVMBuildShl(g->b, ni, LLVMConstVector(shift, (unsigned)w), "");
  LLVMValueRef bits = LLVMBuildAdd(g->b, LLVMBuildBitCast(g->b, p, vi, ""), e, "");
  LLVMValueRef r = LLVMBuildBitCast(g->b, bits, vt, "");
  r = LLVMBuildSelect(g->b, under, splat_f(g, 0.0, w), r, "");
  return LLVMBuildSelect(g->b, nan, x0, r, "");
}

/* the activation `act` (tlm_activation) on W lanes: jit/activation.c */
static inline LLVMValueRef act_splat(const tlm_act_ir *m, double c) {
  return splat_f((cg *)m->gen, c, m->lanes);
}

static inline LLVMValueRef act_exp(const tlm_act_ir *m, LLVMValueRef x) {
  return vexp((cg *)m->gen, x, m->lanes);
}

static inline LLVMValueRef apply_activation(cg *g, LLVMValueRef x, int act, int w) {
  tlm_act_ir m = {g->b, act_splat, act_exp, g, w};
  return tlm_emit_activation(&m, act, x);
}

/* ---- entry --------------------------------------------------------------- */

static inline LLVMValueRef arg_field(cg *g, LLVMValueRef args, size_t offset, LLVMTypeRef t) {
  LLVMValueRef off = c64(g, (int64_t)offset);
  LLVMValueRef p = LLVMBuildGEP2(g->b, LLVMInt8TypeInContext(g->C), args, &off, 1, "");
  return load(g, t, p, 8);
}

static inline void load_strides(cg *g, LLVMValueRef args, size_t offset, LLVMValueRef *out, int unit_col) {
  for (int i = 0; i < 6; i++)
    out[i] = arg_field(g, args, offset + sizeof(int64_t) * (size_t)i, g->i64);
  if (unit_col) out[5] = c64(g, 1);
}

/* Module, kernel function `void name(ptr args, i64 begin, i64 end, ptr
 * scratch)` with the host's cpu/features attributes, an entry block for
 * allocas and a start block for code. Returns the start block. */
static inline LLVMBasicBlockRef begin_kernel(cg *g, LLVMContextRef ctx, const char *module,
                                      const char *name, const char *cpu, const char *features) {
  g->C = ctx;
  g->mod = LLVMModuleCreateWithNameInContext(module, ctx);
  g->b = LLVMCreateBuilderInContext(ctx);
  g->ab = LLVMCreateBuilderInContext(ctx);
  g->i1 = LLVMInt1TypeInContext(ctx);
  g->i32 = LLVMInt32TypeInContext(ctx);
  g->i64 = LLVMInt64TypeInContext(ctx);
  g->f32 = LLVMFloatTypeInContext(ctx);
  g->ptr = LLVMPointerTypeInContext(ctx, 0);
  g->vd = LLVMVoidTypeInContext(ctx);
  LLVMTypeRef params[4] = {g->ptr, g->i64, g->i64, g->ptr};
  g->fn = LLVMAddFunction(g->mod, name, LLVMFunctionType(g->vd, params, 4, 0));
  LLVMSetLinkage(g->fn, LLVMExternalLinkage);
  if (cpu && *cpu)
    LLVMAddAttributeAtIndex(g->fn, LLVMAttributeFunctionIndex,
                            LLVMCreateStringAttribute(ctx, "target-cpu", 10, cpu, (unsigned)strlen(cpu)));
  if (features && *features)
    LLVMAddAttributeAtIndex(g->fn, LLVMAttributeFunctionIndex,
                            LLVMCreateStringAttribute(ctx, "target-features", 15, features,
                                                      (unsigned)strlen(features)));
  unsigned nounwind = LLVMGetEnumAttributeKindForName("nounwind", 8);
  LLVMAddAttributeAtIndex(g->fn, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(ctx, nounwind, 0));
  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(ctx, g->fn, "entry");
  LLVMBasicBlockRef start = LLVMAppendBasicBlockInContext(ctx, g->fn, "start");
  LLVMPositionBuilderAtEnd(g->ab, entry);
  LLVMPositionBuilderAtEnd(g->b, start);
  return start;
}

/* Closes the function (rc 0) and verifies the module; hands it to *out or
 * disposes of it. */
static inline int end_kernel(cg *g, LLVMBasicBlockRef start, int rc, LLVMModuleRef *out, char *err,
                      int errcap) {
  if (rc == 0) {
    LLVMBuildRetVoid(g->b);
    LLVMBuildBr(g->ab, start);
    char *msg = NULL;
    if (LLVMVerifyModule(g->mod, LLVMReturnStatusAction, &msg)) {
      snprintf(err, (size_t)errcap, "generated IR failed verification: %.300s", msg ? msg : "");
      rc = -1;
    }
    LLVMDisposeMessage(msg);
  } else {
    snprintf(err, (size_t)errcap, "loop nest has a node the code generator cannot emit");
  }
  LLVMDisposeBuilder(g->b);
  LLVMDisposeBuilder(g->ab);
  if (rc) {
    LLVMDisposeModule(g->mod);
    return -1;
  }
  *out = g->mod;
  return 0;
}


#endif
