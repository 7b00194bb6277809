/* codegen_gpu.c - GPU matmul schedules to LLVM IR and PTX.
 *
 * Kernel structure (see runtime/gpu.h for the decisions), per block:
 *
 *   z -> batch coordinates -> operand offsets
 *   m0 = blockIdx.x * bm, n0 = blockIdx.y * bn
 *   stage tile 0: registers <- global (zeros past M, N, K), shared <- registers
 *   barrier
 *   for kt in 0 .. ceil(K / bk) - 1:
 *     [stages 2] registers <- global tile kt + 1 (zeros past K)
 *     for kk in 0 .. bk - 1 (unrolled by "unroll"):
 *       a[i] = As[kk][ty + i*TY], b[j] = Bs[kk][tx + j*TX]
 *       acc[i][j] += a[i] * b[j]
 *     [stages 2] other buffer <- registers; barrier
 *     [stages 1] barrier; buffer <- global tile kt + 1; barrier
 *   epilogue: (+ bias[n]) -> activation -> (+ residual) -> C, for m < M, n < N
 *
 * Loads past the operands' ends never happen: an element outside M, N or K
 * reads the operand's first element and the value is replaced by zero.
 */
#include "codegen_gpu.h"

#include "activation.h"
#include "jit.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

typedef struct gg {
  LLVMContextRef C;
  LLVMModuleRef mod;
  LLVMBuilderRef b, ab;
  LLVMValueRef fn;
  int host;
  LLVMTypeRef i32, i64, f32, gptr, vd;
  LLVMValueRef args, ids, smem, barrier, bctx; /* host form */
  LLVMValueRef argv[GA_COUNT];                 /* loaded or parameter values */
} gg;

static LLVMValueRef c64(gg *g, int64_t v) { return LLVMConstInt(g->i64, (unsigned long long)v, 1); }
static LLVMValueRef c32(gg *g, int32_t v) { return LLVMConstInt(g->i32, (unsigned long long)v, 1); }
static LLVMValueRef add(gg *g, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildAdd(g->b, x, y, ""); }
static LLVMValueRef mul(gg *g, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildMul(g->b, x, y, ""); }
static LLVMValueRef slt(gg *g, LLVMValueRef x, LLVMValueRef y) {
  return LLVMBuildICmp(g->b, LLVMIntSLT, x, y, "");
}
static LLVMValueRef fconst(gg *g, double v) { return LLVMConstReal(g->f32, v); }

static LLVMValueRef intrinsic(gg *g, const char *name, LLVMTypeRef *ovl, size_t novl,
                              LLVMValueRef *args, unsigned nargs) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  LLVMValueRef f = LLVMGetIntrinsicDeclaration(g->mod, id, ovl, novl);
  LLVMTypeRef ft = LLVMIntrinsicGetType(g->C, id, ovl, novl);
  return LLVMBuildCall2(g->b, ft, f, args, nargs, "");
}

/* thread index, block x, y, z as i32 */
static LLVMValueRef special(gg *g, int which) {
  if (g->host) {
    LLVMValueRef idx = c64(g, which);
    LLVMValueRef p = LLVMBuildGEP2(g->b, g->i32, g->ids, &idx, 1, "");
    return LLVMBuildLoad2(g->b, g->i32, p, "");
  }
  static const char *const names[4] = {"llvm.nvvm.read.ptx.sreg.tid.x",
                                       "llvm.nvvm.read.ptx.sreg.ctaid.x",
                                       "llvm.nvvm.read.ptx.sreg.ctaid.y",
                                       "llvm.nvvm.read.ptx.sreg.ctaid.z"};
  return intrinsic(g, names[which], NULL, 0, NULL, 0);
}

static void barrier(gg *g) {
  if (g->host) {
    LLVMTypeRef pt = LLVMPointerTypeInContext(g->C, 0);
    LLVMTypeRef ft = LLVMFunctionType(g->vd, &pt, 1, 0);
    LLVMValueRef a = g->bctx;
    LLVMBuildCall2(g->b, ft, g->barrier, &a, 1, "");
    return;
  }
  intrinsic(g, "llvm.nvvm.barrier0", NULL, 0, NULL, 0);
}

static LLVMValueRef gptr_arg(gg *g, int i) { return LLVMBuildIntToPtr(g->b, g->argv[i], g->gptr, ""); }

static LLVMValueRef gload(gg *g, LLVMValueRef base, LLVMValueRef idx) {
  LLVMValueRef p = LLVMBuildGEP2(g->b, g->f32, base, &idx, 1, "");
  LLVMValueRef v = LLVMBuildLoad2(g->b, g->f32, p, "");
  LLVMSetAlignment(v, 4);
  return v;
}
static void gstore(gg *g, LLVMValueRef v, LLVMValueRef base, LLVMValueRef idx) {
  LLVMValueRef p = LLVMBuildGEP2(g->b, g->f32, base, &idx, 1, "");
  LLVMSetAlignment(LLVMBuildStore(g->b, v, p), 4);
}

static LLVMBasicBlockRef block(gg *g, const char *name) { return LLVMAppendBasicBlockInContext(g->C, g->fn, name); }

/* x * log2(e) through ex2: exp(x) */
static LLVMValueRef fexp(gg *g, LLVMValueRef x) {
  LLVMValueRef y = LLVMBuildFMul(g->b, x, fconst(g, 1.4426950408889634), "");
  if (g->host) return intrinsic(g, "llvm.exp2", &g->f32, 1, &y, 1);
  return intrinsic(g, "llvm.nvvm.ex2.approx.f", NULL, 0, &y, 1);
}

static LLVMValueRef fmaxf_(gg *g, LLVMValueRef x, LLVMValueRef y) {
  LLVMValueRef a[2] = {x, y};
  return intrinsic(g, "llvm.maxnum", &g->f32, 1, a, 2);
}

static LLVMValueRef act_splat(const tlm_act_ir *m, double c) { return fconst(m->gen, c); }

static LLVMValueRef act_exp(const tlm_act_ir *m, LLVMValueRef x) { return fexp(m->gen, x); }

/* the activation `act` on one float: jit/activation.c */
static LLVMValueRef activation(gg *g, int act, LLVMValueRef x) {
  tlm_act_ir m = {g->b, act_splat, act_exp, g, 1};
  return tlm_emit_activation(&m, act, x);
}

typedef struct mmk {
  int32_t tm, tn, bm, bn, bk, stages, unroll, TX, TY, threads, na, nb;
  int a_kmajor_load; /* A unit-stride in k: consecutive threads read consecutive k */
  int b_nmajor_load; /* B unit-stride in n */
  LLVMValueRef tid, tx, ty, m0, n0, M, N, K;
  LLVMValueRef pa, pb, sam, sak, sbk, sbn;
  LLVMValueRef ra[64], rb[64]; /* staged elements held in registers */
} mmk;

/* The tile coordinates of this thread's r-th staged element of A (is_a)
 * or B: *x is its row of A (m) or column of B (n) within the block, *kl
 * its k within the step. Consecutive threads take consecutive elements
 * along the operand's unit-stride axis, so the global loads coalesce. */
static void tile_coord(gg *g, const mmk *k, int is_a, int r, LLVMValueRef *x, LLVMValueRef *kl) {
  LLVMValueRef e = add(g, k->tid, c64(g, (int64_t)r * k->threads));
  int k_major = is_a ? k->a_kmajor_load : !k->b_nmajor_load; /* k the fast axis */
  int64_t ext = is_a ? k->bm : k->bn;
  if (k_major) {
    *x = LLVMBuildUDiv(g->b, e, c64(g, k->bk), "");
    *kl = LLVMBuildURem(g->b, e, c64(g, k->bk), "");
  } else {
    *kl = LLVMBuildUDiv(g->b, e, c64(g, ext), "");
    *x = LLVMBuildURem(g->b, e, c64(g, ext), "");
  }
}

/* Loads this thread's elements of the A and B tiles at k0 into k->ra/rb
 * (zero past M, N or K, read from the operand's first element). */
static void load_tiles(gg *g, mmk *k, LLVMValueRef k0) {
  for (int is_a = 1; is_a >= 0; is_a--)
    for (int r = 0; r < (is_a ? k->na : k->nb); r++) {
      LLVMValueRef x, kl;
      tile_coord(g, k, is_a, r, &x, &kl);
      LLVMValueRef i = add(g, is_a ? k->m0 : k->n0, x), kk = add(g, k0, kl);
      LLVMValueRef in = LLVMBuildAnd(g->b, slt(g, i, is_a ? k->M : k->N), slt(g, kk, k->K), "");
      LLVMValueRef off = is_a ? add(g, mul(g, i, k->sam), mul(g, kk, k->sak))
                              : add(g, mul(g, kk, k->sbk), mul(g, i, k->sbn));
      off = LLVMBuildSelect(g->b, in, off, c64(g, 0), "");
      LLVMValueRef v = LLVMBuildSelect(g->b, in, gload(g, is_a ? k->pa : k->pb, off), fconst(g, 0.0), "");
      if (is_a)
        k->ra[r] = v;
      else
        k->rb[r] = v;
    }
}

/* Stores them to a stage of shared memory: A as [bk][bm], then B as
 * [bk][bn]. */
static void store_tiles(gg *g, mmk *k, LLVMValueRef stage_off) {
  for (int is_a = 1; is_a >= 0; is_a--)
    for (int r = 0; r < (is_a ? k->na : k->nb); r++) {
      LLVMValueRef x, kl;
      tile_coord(g, k, is_a, r, &x, &kl);
      int64_t base = is_a ? 0 : (int64_t)k->bk * k->bm, ext = is_a ? k->bm : k->bn;
      gstore(g, is_a ? k->ra[r] : k->rb[r], g->smem,
             add(g, stage_off, add(g, c64(g, base), add(g, mul(g, kl, c64(g, ext)), x))));
    }
}

/* Module, kernel function (PTX: GA-style i64 parameters, the kernel
 * marker, maxntidx; host: the emulator's signature), the shared-memory
 * array, the entry block and the argument values g->argv[0..nargs). */
static LLVMBasicBlockRef setup(gg *g, LLVMContextRef ctx, int code, const char *name, int nargs,
                               int64_t smem_floats, int threads) {
  g->C = ctx;
  g->host = code == TLM_GPU_CODE_HOST;
  g->mod = LLVMModuleCreateWithNameInContext(name, ctx);
  g->i32 = LLVMInt32TypeInContext(ctx);
  g->i64 = LLVMInt64TypeInContext(ctx), g->f32 = LLVMFloatTypeInContext(ctx);
  g->vd = LLVMVoidTypeInContext(ctx);
  g->gptr = LLVMPointerTypeInContext(ctx, g->host ? 0 : 1);
  if (g->host) {
    LLVMTypeRef p0 = LLVMPointerTypeInContext(ctx, 0);
    LLVMTypeRef ps[5] = {p0, p0, p0, p0, p0};
    g->fn = LLVMAddFunction(g->mod, name, LLVMFunctionType(g->vd, ps, 5, 0));
    g->args = LLVMGetParam(g->fn, 0), g->ids = LLVMGetParam(g->fn, 1);
    g->smem = LLVMGetParam(g->fn, 2), g->barrier = LLVMGetParam(g->fn, 3);
    g->bctx = LLVMGetParam(g->fn, 4);
  } else {
    LLVMTypeRef ps[TLM_GPU_MAX_ARGS];
    for (int i = 0; i < nargs; i++) ps[i] = g->i64;
    g->fn = LLVMAddFunction(g->mod, name, LLVMFunctionType(g->vd, ps, (unsigned)nargs, 0));
    LLVMSetFunctionCallConv(g->fn, LLVMPTXKernelCallConv);
    /* the kernel marker and its block size for the register allocator */
    LLVMMetadataRef kmd[3] = {LLVMValueAsMetadata(g->fn), LLVMMDStringInContext2(ctx, "kernel", 6),
                              LLVMValueAsMetadata(c32(g, 1))};
    LLVMAddNamedMetadataOperand(g->mod, "nvvm.annotations",
                                LLVMMetadataAsValue(ctx, LLVMMDNodeInContext2(ctx, kmd, 3)));
    LLVMMetadataRef tmd[3] = {LLVMValueAsMetadata(g->fn),
                              LLVMMDStringInContext2(ctx, "maxntidx", 8),
                              LLVMValueAsMetadata(c32(g, threads))};
    LLVMAddNamedMetadataOperand(g->mod, "nvvm.annotations",
                                LLVMMetadataAsValue(ctx, LLVMMDNodeInContext2(ctx, tmd, 3)));
    LLVMTypeRef at = LLVMArrayType2(g->f32, (uint64_t)smem_floats);
    LLVMValueRef gv = LLVMAddGlobalInAddressSpace(g->mod, at, "tlm_smem", 3);
    LLVMSetInitializer(gv, LLVMGetUndef(at));
    LLVMSetLinkage(gv, LLVMInternalLinkage);
    LLVMSetAlignment(gv, 16);
    g->smem = gv;
  }
  LLVMAddAttributeAtIndex(g->fn, LLVMAttributeFunctionIndex,
                          LLVMCreateEnumAttribute(ctx, LLVMGetEnumAttributeKindForName("nounwind", 8), 0));
  LLVMBasicBlockRef entry = block(g, "entry");
  g->b = LLVMCreateBuilderInContext(ctx);
  LLVMPositionBuilderAtEnd(g->b, entry);
  for (int i = 0; i < nargs; i++) {
    if (g->host) {
      LLVMValueRef idx = c64(g, i);
      LLVMValueRef p = LLVMBuildGEP2(g->b, g->i64, g->args, &idx, 1, "");
      g->argv[i] = LLVMBuildLoad2(g->b, g->i64, p, "");
    } else {
      g->argv[i] = LLVMGetParam(g->fn, (unsigned)i);
    }
  }
  return entry;
}

/* Verifies and hands over the module, or disposes of it. */
static int finish(gg *g, LLVMModuleRef *out, char *err, int errcap) {
  LLVMDisposeBuilder(g->b);
  char *msg = NULL;
  if (LLVMVerifyModule(g->mod, LLVMReturnStatusAction, &msg)) {
    snprintf(err, (size_t)errcap, "GPU kernel IR does not verify: %.200s", msg ? msg : "");
    LLVMDisposeMessage(msg);
    LLVMDisposeModule(g->mod);
    return -1;
  }
  LLVMDisposeMessage(msg);
  *out = g->mod;
  return 0;
}

int tlm_codegen_gpu_matmul(LLVMContextRef ctx, const tlm_task *task, const tlm_schedule *sched,
                           int code, const char *name, LLVMModuleRef *out, char *err, int errcap) {
  *out = NULL;
  if (task->kind != TLM_OP_MATMUL || sched->n != GM_NPOINTS) {
    snprintf(err, (size_t)errcap, "GPU code generation covers matmul schedules only");
    return -1;
  }
  const tlm_matmul_task *t = &task->u.mm;
  gg G = {0}, *g = &G;
  mmk K = {0}, *k = &K;
  const int32_t *v = sched->v;
  k->tm = v[GM_TM], k->tn = v[GM_TN], k->bm = v[GM_BM], k->bn = v[GM_BN], k->bk = v[GM_BK];
  k->stages = v[GM_STAGES], k->unroll = v[GM_UNROLL];
  if (k->tm < 1 || k->tn < 1 || k->bm % k->tm || k->bn % k->tn || k->bk < 1 || k->unroll < 1 ||
      k->bk % k->unroll || k->tm > 8 || k->tn > 8 || (k->stages != 1 && k->stages != 2)) {
    snprintf(err, (size_t)errcap, "GPU schedule out of range");
    return -1;
  }
  k->TX = k->bn / k->tn, k->TY = k->bm / k->tm, k->threads = k->TX * k->TY;
  if (((int64_t)k->bm * k->bk) % k->threads || ((int64_t)k->bn * k->bk) % k->threads) {
    snprintf(err, (size_t)errcap, "GPU schedule: tiles do not split evenly over the threads");
    return -1;
  }
  k->na = k->bm * k->bk / k->threads, k->nb = k->bn * k->bk / k->threads;
  if (k->na > 64 || k->nb > 64) {
    snprintf(err, (size_t)errcap, "GPU schedule: too many staged elements a thread");
    return -1;
  }
  k->a_kmajor_load = (t->unit & TLM_UNIT_A_K) != 0;
  k->b_nmajor_load = (t->unit & TLM_UNIT_B_N) != 0 || !(t->unit & TLM_UNIT_B_K);

  int64_t smem_floats = (int64_t)k->stages * k->bk * (k->bm + k->bn);
  LLVMBasicBlockRef entry = setup(g, ctx, code, name, GA_COUNT, smem_floats, k->threads);
  /* accumulators, promoted to registers by SROA: every index is constant */
  LLVMTypeRef acc_t = LLVMArrayType2(g->f32, (uint64_t)(k->tm * k->tn));
  LLVMValueRef acc = LLVMBuildAlloca(g->b, acc_t, "acc");
  for (int i = 0; i < k->tm * k->tn; i++) {
    LLVMValueRef ix[2] = {c64(g, 0), c64(g, i)};
    LLVMBuildStore(g->b, fconst(g, 0.0), LLVMBuildGEP2(g->b, acc_t, acc, ix, 2, ""));
  }

  k->M = g->argv[GA_M], k->N = g->argv[GA_N], k->K = g->argv[GA_K];
  k->sam = g->argv[GA_SAM];
  k->sak = (t->unit & TLM_UNIT_A_K) ? c64(g, 1) : g->argv[GA_SAK];
  k->sbk = (t->unit & TLM_UNIT_B_K) ? c64(g, 1) : g->argv[GA_SBK];
  k->sbn = (t->unit & TLM_UNIT_B_N) ? c64(g, 1) : g->argv[GA_SBN];
  k->tid = LLVMBuildZExt(g->b, special(g, 0), g->i64, "tid");
  k->tx = LLVMBuildURem(g->b, k->tid, c64(g, k->TX), "tx");
  k->ty = LLVMBuildUDiv(g->b, k->tid, c64(g, k->TX), "ty");
  /* M tiles along x (up to 2^31 - 1 blocks), N tiles along y */
  k->m0 = mul(g, LLVMBuildZExt(g->b, special(g, 1), g->i64, ""), c64(g, k->bm));
  k->n0 = mul(g, LLVMBuildZExt(g->b, special(g, 2), g->i64, ""), c64(g, k->bn));
  /* batch coordinates of blockIdx.z, innermost dim last */
  LLVMValueRef z = LLVMBuildZExt(g->b, special(g, 3), g->i64, "");
  LLVMValueRef offa = c64(g, 0), offb = c64(g, 0), offc = c64(g, 0), offr = c64(g, 0);
  if (t->nbatch > 0) {
    for (int d = 3; d >= 0; d--) {
      LLVMValueRef ext = g->argv[GA_BATCH + d];
      LLVMValueRef i = LLVMBuildURem(g->b, z, ext, "");
      z = LLVMBuildUDiv(g->b, z, ext, "");
      offa = add(g, offa, mul(g, i, g->argv[GA_SAB + d]));
      offb = add(g, offb, mul(g, i, g->argv[GA_SBB + d]));
      offc = add(g, offc, mul(g, i, g->argv[GA_SCB + d]));
      offr = add(g, offr, mul(g, i, g->argv[GA_SRB + d]));
    }
  }
  k->pa = LLVMBuildGEP2(g->b, g->f32, gptr_arg(g, GA_A), &offa, 1, "");
  k->pb = LLVMBuildGEP2(g->b, g->f32, gptr_arg(g, GA_B), &offb, 1, "");
  LLVMValueRef pc = LLVMBuildGEP2(g->b, g->f32, gptr_arg(g, GA_C), &offc, 1, "");

  /* nkt = ceil(K / bk) >= 1 */
  LLVMValueRef nkt = LLVMBuildUDiv(g->b, add(g, k->K, c64(g, k->bk - 1)), c64(g, k->bk), "nkt");
  int64_t stage_floats = (int64_t)k->bk * (k->bm + k->bn);
  load_tiles(g, k, c64(g, 0));
  store_tiles(g, k, c64(g, 0));
  barrier(g);

  LLVMBasicBlockRef loop = block(g, "kt"), after = block(g, "epilogue");
  LLVMBuildBr(g->b, loop);
  LLVMPositionBuilderAtEnd(g->b, loop);
  LLVMValueRef kt = LLVMBuildPhi(g->b, g->i64, "kt");
  LLVMValueRef kt1 = add(g, kt, c64(g, 1));
  LLVMValueRef stage_off = c64(g, 0), other_off = c64(g, 0);
  if (k->stages == 2) {
    LLVMValueRef st = LLVMBuildAnd(g->b, kt, c64(g, 1), "");
    stage_off = mul(g, st, c64(g, stage_floats));
    other_off = mul(g, LLVMBuildXor(g->b, st, c64(g, 1), ""), c64(g, stage_floats));
    /* the next tiles (all zeros past K, so the last step needs no branch) */
    load_tiles(g, k, mul(g, kt1, c64(g, k->bk)));
  }
  /* the k loop over the staged tile: bk / unroll iterations of unroll steps */
  LLVMValueRef a_base = stage_off;
  LLVMValueRef b_base = add(g, stage_off, c64(g, (int64_t)k->bk * k->bm));
  LLVMBasicBlockRef kk_loop = NULL, kk_done = NULL;
  LLVMValueRef kk0 = c64(g, 0), kkphi = NULL;
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(g->b);
  if (k->unroll < k->bk) {
    kk_loop = block(g, "kk"), kk_done = block(g, "kk_done");
    LLVMBuildBr(g->b, kk_loop);
    LLVMPositionBuilderAtEnd(g->b, kk_loop);
    kkphi = LLVMBuildPhi(g->b, g->i64, "kk");
    kk0 = kkphi;
  }
  int steps = k->unroll < k->bk ? k->unroll : k->bk;
  for (int s = 0; s < steps; s++) {
    LLVMValueRef kk = add(g, kk0, c64(g, s));
    LLVMValueRef av[8], bv[8];
    for (int i = 0; i < k->tm; i++)
      av[i] = gload(g, g->smem,
                    add(g, a_base, add(g, mul(g, kk, c64(g, k->bm)), add(g, k->ty, c64(g, (int64_t)i * k->TY)))));
    for (int j = 0; j < k->tn; j++)
      bv[j] = gload(g, g->smem,
                    add(g, b_base, add(g, mul(g, kk, c64(g, k->bn)), add(g, k->tx, c64(g, (int64_t)j * k->TX)))));
    for (int i = 0; i < k->tm; i++)
      for (int j = 0; j < k->tn; j++) {
        LLVMValueRef ix[2] = {c64(g, 0), c64(g, i * k->tn + j)};
        LLVMValueRef p = LLVMBuildGEP2(g->b, acc_t, acc, ix, 2, "");
        LLVMValueRef fa[3] = {av[i], bv[j], LLVMBuildLoad2(g->b, g->f32, p, "")};
        LLVMBuildStore(g->b, intrinsic(g, "llvm.fmuladd", &g->f32, 1, fa, 3), p);
      }
  }
  if (kk_loop) {
    LLVMValueRef next = add(g, kkphi, c64(g, k->unroll));
    LLVMValueRef zero = c64(g, 0);
    LLVMAddIncoming(kkphi, &zero, &pre, 1);
    LLVMBasicBlockRef cur = LLVMGetInsertBlock(g->b);
    LLVMAddIncoming(kkphi, &next, &cur, 1);
    LLVMBuildCondBr(g->b, slt(g, next, c64(g, k->bk)), kk_loop, kk_done);
    LLVMPositionBuilderAtEnd(g->b, kk_done);
  }
  if (k->stages == 2) {
    store_tiles(g, k, other_off);
    barrier(g);
  } else {
    barrier(g);
    load_tiles(g, k, mul(g, kt1, c64(g, k->bk)));
    store_tiles(g, k, c64(g, 0));
    barrier(g);
  }
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(g->b);
  LLVMValueRef zero = c64(g, 0);
  LLVMAddIncoming(kt, &zero, &entry, 1);
  LLVMAddIncoming(kt, &kt1, &latch, 1);
  LLVMBuildCondBr(g->b, slt(g, kt1, nkt), loop, after);

  /* epilogue */
  LLVMPositionBuilderAtEnd(g->b, after);
  LLVMValueRef pbias = t->has_bias ? gptr_arg(g, GA_BIAS) : NULL;
  LLVMValueRef pr = NULL;
  if (t->has_residual) pr = LLVMBuildGEP2(g->b, g->f32, gptr_arg(g, GA_R), &offr, 1, "");
  LLVMValueRef scm = g->argv[GA_SCM];
  LLVMValueRef scn = (t->unit & TLM_UNIT_C_N) ? c64(g, 1) : g->argv[GA_SCN];
  for (int i = 0; i < k->tm; i++) {
    LLVMValueRef m = add(g, k->m0, add(g, k->ty, c64(g, (int64_t)i * k->TY)));
    for (int j = 0; j < k->tn; j++) {
      LLVMValueRef n = add(g, k->n0, add(g, k->tx, c64(g, (int64_t)j * k->TX)));
      LLVMValueRef in = LLVMBuildAnd(g->b, slt(g, m, k->M), slt(g, n, k->N), "");
      LLVMBasicBlockRef yes = block(g, "st"), next = block(g, "st_next");
      LLVMBuildCondBr(g->b, in, yes, next);
      LLVMPositionBuilderAtEnd(g->b, yes);
      LLVMValueRef ix[2] = {c64(g, 0), c64(g, i * k->tn + j)};
      LLVMValueRef x = LLVMBuildLoad2(g->b, g->f32, LLVMBuildGEP2(g->b, acc_t, acc, ix, 2, ""), "");
      if (pbias) {
        LLVMValueRef sb = (t->unit & TLM_UNIT_BIAS) ? c64(g, 1) : g->argv[GA_SBIAS];
        x = LLVMBuildFAdd(g->b, x, gload(g, pbias, mul(g, n, sb)), "");
      }
      /* the residual after the activation, or before it (has_residual 2) */
      for (int pre = 1; pre >= 0; pre--) {
        if (pr && pre == (t->has_residual == 2)) {
          LLVMValueRef srn = (t->unit & TLM_UNIT_R_N) ? c64(g, 1) : g->argv[GA_SRN];
          x = LLVMBuildFAdd(g->b, x,
                            gload(g, pr, add(g, mul(g, m, g->argv[GA_SRM]), mul(g, n, srn))), "");
        }
        if (pre) x = activation(g, t->act, x);
      }
      gstore(g, x, pc, add(g, mul(g, m, scm), mul(g, n, scn)));
      LLVMBuildBr(g->b, next);
      LLVMPositionBuilderAtEnd(g->b, next);
    }
  }
  LLVMBuildRetVoid(g->b);
  return finish(g, out, err, errcap);
}


/* ---- row operators ---------------------------------------------------------------
 *
 *   row = blockIdx.x; x_r = x + row * sx0, y_r = y + row * sy0
 *   softmax:   lim = causal ? clamp(row % mrows + cols - mrows + 1, 0, cols) : cols
 *              m = max over c < lim of scale * x  (tree over shared memory)
 *              s = sum over c < lim of exp(scale * x - m)
 *              y = c < lim ? exp(scale * x - m) / s : 0
 *   layernorm: mean, then the variance of (x - mean) (two reductions),
 *              y = (x - mean) / sqrt(var + eps) * gamma + beta
 *   rmsnorm:   y = x / sqrt(mean(x^2) + eps) * gamma
 * A thread handles columns tid + i * threads, "unroll" of them an iteration.
 */

typedef struct rowk {
  int threads, unroll, kind, causal;
  float scale, eps;
  LLVMValueRef tid, px, py, pg, pb, cols, sx1, sy1, sg, sb, lim;
} rowk;

/* a loop over this thread's columns c < lim: body(c) run "unroll" times an
 * iteration, each guarded */
typedef void (*col_body)(gg *g, rowk *r, LLVMValueRef c, void *ctx);

static void for_cols(gg *g, rowk *r, LLVMValueRef lim, col_body body, void *ctx) {
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(g->b), head = block(g, "cols"), done = block(g, "cols_done");
  LLVMBuildCondBr(g->b, slt(g, r->tid, lim), head, done);
  LLVMPositionBuilderAtEnd(g->b, head);
  LLVMValueRef c0 = LLVMBuildPhi(g->b, g->i64, "c");
  for (int u = 0; u < r->unroll; u++) {
    LLVMValueRef c = add(g, c0, c64(g, (int64_t)u * r->threads));
    if (u == 0) {
      body(g, r, c, ctx);
      continue;
    }
    LLVMBasicBlockRef yes = block(g, "col"), next = block(g, "col_next");
    LLVMBuildCondBr(g->b, slt(g, c, lim), yes, next);
    LLVMPositionBuilderAtEnd(g->b, yes);
    body(g, r, c, ctx);
    LLVMBuildBr(g->b, next);
    LLVMPositionBuilderAtEnd(g->b, next);
  }
  LLVMValueRef cn = add(g, c0, c64(g, (int64_t)r->unroll * r->threads));
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(g->b);
  LLVMAddIncoming(c0, &r->tid, &pre, 1);
  LLVMAddIncoming(c0, &cn, &latch, 1);
  LLVMBuildCondBr(g->b, slt(g, cn, lim), head, done);
  LLVMPositionBuilderAtEnd(g->b, done);
}

static LLVMValueRef xload(gg *g, rowk *r, LLVMValueRef c) { return gload(g, r->px, mul(g, c, r->sx1)); }

/* the accumulator: an alloca SROA turns into a phi */
typedef struct red_ctx {
  LLVMValueRef acc;  /* float alloca */
  int op;            /* 0 max of scale x, 1 sum exp(scale x - m), 2 sum x, 3 sum (x - m)^2, 4 sum x^2 */
  LLVMValueRef m;
} red_ctx;

static void red_body(gg *g, rowk *r, LLVMValueRef c, void *vctx) {
  red_ctx *q = vctx;
  LLVMValueRef x = xload(g, r, c), a = LLVMBuildLoad2(g->b, g->f32, q->acc, ""), v;
  switch (q->op) {
  case 0: v = fmaxf_(g, a, LLVMBuildFMul(g->b, x, fconst(g, r->scale), "")); break;
  case 1:
    v = LLVMBuildFAdd(g->b, a, fexp(g, LLVMBuildFSub(g->b, LLVMBuildFMul(g->b, x, fconst(g, r->scale), ""), q->m, "")), "");
    break;
  case 2: v = LLVMBuildFAdd(g->b, a, x, ""); break;
  case 3: {
    LLVMValueRef d = LLVMBuildFSub(g->b, x, q->m, "");
    LLVMValueRef fa[3] = {d, d, a};
    v = intrinsic(g, "llvm.fmuladd", &g->f32, 1, fa, 3);
    break;
  }
  default: {
    LLVMValueRef fa[3] = {x, x, a};
    v = intrinsic(g, "llvm.fmuladd", &g->f32, 1, fa, 3);
  }
  }
  LLVMBuildStore(g->b, v, q->acc);
}

/* Reduces this thread's partial over the block (max for op 0, else sum)
 * through shared memory; every thread gets the result. */
static LLVMValueRef block_reduce(gg *g, rowk *r, LLVMValueRef part, int is_max) {
  gstore(g, part, g->smem, r->tid);
  barrier(g);
  for (int s = r->threads / 2; s >= 1; s /= 2) {
    LLVMBasicBlockRef yes = block(g, "red"), next = block(g, "red_next");
    LLVMBuildCondBr(g->b, slt(g, r->tid, c64(g, s)), yes, next);
    LLVMPositionBuilderAtEnd(g->b, yes);
    LLVMValueRef a = gload(g, g->smem, r->tid), b = gload(g, g->smem, add(g, r->tid, c64(g, s)));
    gstore(g, is_max ? fmaxf_(g, a, b) : LLVMBuildFAdd(g->b, a, b, ""), g->smem, r->tid);
    LLVMBuildBr(g->b, next);
    LLVMPositionBuilderAtEnd(g->b, next);
    barrier(g);
  }
  LLVMValueRef v = gload(g, g->smem, c64(g, 0));
  barrier(g); /* before shared memory is written again */
  return v;
}

static LLVMValueRef reduce(gg *g, rowk *r, int op, LLVMValueRef m, LLVMValueRef lim, LLVMValueRef acc) {
  LLVMBuildStore(g->b, op == 0 ? fconst(g, -INFINITY) : fconst(g, 0.0), acc);
  red_ctx q = {acc, op, m};
  for_cols(g, r, lim, red_body, &q);
  return block_reduce(g, r, LLVMBuildLoad2(g->b, g->f32, acc, ""), op == 0);
}

typedef struct out_ctx {
  LLVMValueRef m, inv, rs; /* softmax: max, 1 / sum; norms: mean, 1 / sqrt(var + eps) */
} out_ctx;

static void out_body(gg *g, rowk *r, LLVMValueRef c, void *vctx) {
  out_ctx *o = vctx;
  LLVMValueRef x = xload(g, r, c), y;
  if (r->kind == TLM_OP_SOFTMAX) {
    LLVMValueRef e = fexp(g, LLVMBuildFSub(g->b, LLVMBuildFMul(g->b, x, fconst(g, r->scale), ""), o->m, ""));
    y = LLVMBuildFMul(g->b, e, o->inv, "");
    if (r->causal) y = LLVMBuildSelect(g->b, slt(g, c, r->lim), y, fconst(g, 0.0), "");
  } else {
    LLVMValueRef d = r->kind == TLM_OP_LAYERNORM ? LLVMBuildFSub(g->b, x, o->m, "") : x;
    y = LLVMBuildFMul(g->b, LLVMBuildFMul(g->b, d, o->rs, ""), gload(g, r->pg, mul(g, c, r->sg)), "");
    if (r->kind == TLM_OP_LAYERNORM) y = LLVMBuildFAdd(g->b, y, gload(g, r->pb, mul(g, c, r->sb)), "");
  }
  gstore(g, y, r->py, mul(g, c, r->sy1));
}

int tlm_codegen_gpu_row(LLVMContextRef ctx, const tlm_task *task, const tlm_schedule *sched, int code,
                        const char *name, LLVMModuleRef *out, char *err, int errcap) {
  *out = NULL;
  const tlm_row_task *t = &task->u.row;
  rowk R = {0}, *r = &R;
  r->threads = sched->v[GR_THREADS], r->unroll = sched->v[GR_UNROLL];
  r->kind = task->kind, r->causal = task->kind == TLM_OP_SOFTMAX && t->causal;
  r->scale = t->scale != 0.0f ? t->scale : 1.0f, r->eps = t->eps;
  if (sched->n != GR_NPOINTS || r->threads < 1 || r->threads > 1024 ||
      (r->threads & (r->threads - 1)) || r->unroll < 1 || r->unroll > 4 ||
      (task->kind != TLM_OP_SOFTMAX && task->kind != TLM_OP_LAYERNORM && task->kind != TLM_OP_RMSNORM)) {
    snprintf(err, (size_t)errcap, "GPU row schedule out of range");
    return -1;
  }
  gg G = {0}, *g = &G;
  setup(g, ctx, code, name, GRA_COUNT, r->threads, r->threads);
  LLVMValueRef acc = LLVMBuildAlloca(g->b, g->f32, "acc");
  r->tid = LLVMBuildZExt(g->b, special(g, 0), g->i64, "tid");
  LLVMValueRef row = LLVMBuildZExt(g->b, special(g, 1), g->i64, "row");
  r->cols = g->argv[GRA_COLS];
  r->sx1 = (t->unit & TLM_UNIT_ROW_X) ? c64(g, 1) : g->argv[GRA_SX1];
  r->sy1 = (t->unit & TLM_UNIT_ROW_Y) ? c64(g, 1) : g->argv[GRA_SY1];
  r->sg = (t->unit & TLM_UNIT_ROW_G) ? c64(g, 1) : g->argv[GRA_SG];
  r->sb = (t->unit & TLM_UNIT_ROW_B) ? c64(g, 1) : g->argv[GRA_SB];
  LLVMValueRef ox = mul(g, row, g->argv[GRA_SX0]), oy = mul(g, row, g->argv[GRA_SY0]);
  r->px = LLVMBuildGEP2(g->b, g->f32, gptr_arg(g, GRA_X), &ox, 1, "");
  r->py = LLVMBuildGEP2(g->b, g->f32, gptr_arg(g, GRA_Y), &oy, 1, "");
  r->pg = gptr_arg(g, GRA_G), r->pb = gptr_arg(g, GRA_B);
  r->lim = r->cols;
  out_ctx o = {0};
  if (task->kind == TLM_OP_SOFTMAX) {
    if (r->causal) { /* lim = clamp(row % mrows + cols - mrows + 1, 0, cols) */
      LLVMValueRef mr = g->argv[GRA_MROWS];
      LLVMValueRef l = add(g, LLVMBuildURem(g->b, row, mr, ""), add(g, LLVMBuildSub(g->b, r->cols, mr, ""), c64(g, 1)));
      l = LLVMBuildSelect(g->b, slt(g, l, r->cols), l, r->cols, "");
      l = LLVMBuildSelect(g->b, slt(g, l, c64(g, 0)), c64(g, 0), l, "");
      r->lim = l;
    }
    o.m = reduce(g, r, 0, NULL, r->lim, acc);
    LLVMValueRef sum = reduce(g, r, 1, o.m, r->lim, acc);
    o.inv = LLVMBuildFDiv(g->b, fconst(g, 1.0), sum, "");
  } else {
    LLVMValueRef fc = LLVMBuildSIToFP(g->b, r->cols, g->f32, "");
    if (task->kind == TLM_OP_LAYERNORM) {
      o.m = LLVMBuildFDiv(g->b, reduce(g, r, 2, NULL, r->cols, acc), fc, "");
      LLVMValueRef var = LLVMBuildFDiv(g->b, reduce(g, r, 3, o.m, r->cols, acc), fc, "");
      LLVMValueRef sq = LLVMBuildFAdd(g->b, var, fconst(g, r->eps), "");
      o.rs = LLVMBuildFDiv(g->b, fconst(g, 1.0), intrinsic(g, "llvm.sqrt", &g->f32, 1, &sq, 1), "");
    } else {
      LLVMValueRef ms = LLVMBuildFDiv(g->b, reduce(g, r, 4, NULL, r->cols, acc), fc, "");
      LLVMValueRef sq = LLVMBuildFAdd(g->b, ms, fconst(g, r->eps), "");
      o.rs = LLVMBuildFDiv(g->b, fconst(g, 1.0), intrinsic(g, "llvm.sqrt", &g->f32, 1, &sq, 1), "");
    }
  }
  /* the output over every column (masked ones of a causal softmax get 0) */
  for_cols(g, r, r->cols, out_body, &o);
  LLVMBuildRetVoid(g->b);
  return finish(g, out, err, errcap);
}

int tlm_gpu_kernel_module(LLVMContextRef ctx, const tlm_task *task, const tlm_schedule *sched, int code,
                          const char *name, LLVMModuleRef *out, char *err, int errcap) {
  if (task->kind == TLM_OP_MATMUL)
    return tlm_codegen_gpu_matmul(ctx, task, sched, code, name, out, err, errcap);
  return tlm_codegen_gpu_row(ctx, task, sched, code, name, out, err, errcap);
}

static pthread_once_t g_nvptx_once = PTHREAD_ONCE_INIT;
static void nvptx_init(void) {
  LLVMInitializeNVPTXTargetInfo();
  LLVMInitializeNVPTXTarget();
  LLVMInitializeNVPTXTargetMC();
  LLVMInitializeNVPTXAsmPrinter();
}

int tlm_gpu_emit_ptx(LLVMModuleRef mod, int sm, char **ptx, char *err, int errcap) {
  *ptx = NULL;
  if (sm < 50 || sm > 999) {
    snprintf(err, (size_t)errcap, "compute capability %d out of range", sm);
    return -1;
  }
  /* the newest architecture this LLVM knows at or below sm: PTX of an older
   * target runs on newer GPUs (the driver compiles it forward), while an
   * unknown one made LLVM 19 fall back to PTX 6.0 (and say so on stderr) */
  static const int known[] = {50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90};
  int use = known[0];
  for (size_t i = 0; i < sizeof known / sizeof *known; i++)
    if (known[i] <= sm) use = known[i];
  sm = use;
  int lsr_in_pipeline = tlm_jit_llvm_options(); /* else the code generator runs it */
  pthread_once(&g_nvptx_once, nvptx_init);
  const char *triple = "nvptx64-nvidia-cuda";
  LLVMTargetRef target;
  char *msg = NULL;
  if (LLVMGetTargetFromTriple(triple, &target, &msg)) {
    snprintf(err, (size_t)errcap, "this LLVM has no NVPTX target: %s", msg ? msg : "");
    LLVMDisposeMessage(msg);
    return -1;
  }
  char cpu[16];
  snprintf(cpu, sizeof cpu, "sm_%d", sm);
  LLVMTargetMachineRef tm = LLVMCreateTargetMachine(target, triple, cpu, "", LLVMCodeGenLevelAggressive,
                                                    LLVMRelocDefault, LLVMCodeModelDefault);
  if (!tm) {
    snprintf(err, (size_t)errcap, "no NVPTX target machine for %s", cpu);
    return -1;
  }
  LLVMSetTarget(mod, triple);
  LLVMTargetDataRef td = LLVMCreateTargetDataLayout(tm);
  LLVMSetModuleDataLayout(mod, td);
  LLVMDisposeTargetData(td);
  LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
  LLVMErrorRef e = LLVMRunPasses(
      mod, lsr_in_pipeline ? "default<O3>," TLM_PIPELINE_LSR : "default<O3>", tm, opts);
  LLVMDisposePassBuilderOptions(opts);
  int rc = 0;
  if (e) {
    char *m = LLVMGetErrorMessage(e);
    snprintf(err, (size_t)errcap, "NVPTX optimization failed: %s", m);
    LLVMDisposeErrorMessage(m);
    rc = -1;
  }
  LLVMMemoryBufferRef buf = NULL;
  if (!rc && LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMAssemblyFile, &msg, &buf)) {
    snprintf(err, (size_t)errcap, "PTX emission failed: %s", msg ? msg : "");
    LLVMDisposeMessage(msg);
    rc = -1;
  }
  if (!rc) {
    size_t n = LLVMGetBufferSize(buf);
    *ptx = malloc(n + 1);
    if (*ptx) {
      memcpy(*ptx, LLVMGetBufferStart(buf), n);
      (*ptx)[n] = 0;
    } else {
      snprintf(err, (size_t)errcap, "out of memory");
      rc = -1;
    }
    LLVMDisposeMemoryBuffer(buf);
  }
  LLVMDisposeTargetMachine(tm);
  return rc;
}

int tlm_gpu_kernel_ptx(const tlm_task *task, const tlm_schedule *sched, int sm, const char *name,
                       char **ptx, char *err, int errcap) {
  *ptx = NULL;
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMModuleRef mod;
  int rc = tlm_gpu_kernel_module(ctx, task, sched, TLM_GPU_CODE_PTX, name, &mod, err, errcap);
  if (!rc) {
    rc = tlm_gpu_emit_ptx(mod, sm, ptx, err, errcap);
    LLVMDisposeModule(mod);
  }
  LLVMContextDispose(ctx);
  return rc;
}
