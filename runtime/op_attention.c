/* op_attention.c - fused scaled dot-product attention (grouped K/V
 * heads, causal or not): its schedule space (ATT_* in space.h), rule,
 * scratch, FLOPs, text and run-time fields. Row of the family table:
 * tlm_family_attention (family.h). */
#include "family.h"

#include <stdio.h>
#include <string.h>

static const tlm_point k_attn_points[ATT_NPOINTS] = {
    [ATT_VEC] = {"vec", TLM_PK_VEC},
    [ATT_QBLOCK] = {"tile_q", TLM_PK_TILE},
    [ATT_KBLOCK] = {"tile_k", TLM_PK_TILE},
    [ATT_PARALLEL] = {"parallel", TLM_PK_PARALLEL},
};

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

/* vectors of w lanes covering n (the last one masked) */
static int64_t att_vecs(int64_t n, int64_t w) { return (n + w - 1) / w; }

static int attn_candidates(const tlm_space *s, int p, const int32_t *d, int32_t *c) {
  const tlm_attn_task *t = &s->task.u.attn;
  int n = 0;
  switch (p) {
  case ATT_VEC: {
    n = vec_width_candidates(s, c, n);
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

static int64_t attn_scratch_bytes(const tlm_task *task, const tlm_schedule *s) {
  return tlm_attn_scratch_layout(task, s, NULL);
}

static int attn_rule_version(const tlm_task *task, const tlm_target *tg) {
  (void)tg; /* the same on every target */
  (void)task;
  return 9;
}

static double attn_flops(const tlm_task *t) {
  /* Q K^T and P V over every key (the causal half too) */
  const tlm_attn_task *a = &t->u.attn;
  return 2.0 * (double)a->B * (double)a->Hq * (double)a->Tq * (double)a->Tk *
         (double)(a->D + a->Dv);
}

static void attn_str(const tlm_task *t, char *buf, int cap) {
  const tlm_attn_task *a = &t->u.attn;
  snprintf(buf, (size_t)cap, "attention%s:b%lldhq%lldhkv%lldtq%lldtk%lldd%lldv%lld",
           a->causal ? "_causal" : "", (long long)a->B, (long long)a->Hq, (long long)a->Hkv,
           (long long)a->Tq, (long long)a->Tk, (long long)a->D, (long long)a->Dv);
}

static void attn_clear_runtime(tlm_task *t) {
  /* B, heads, lengths, strides, scale */
  tlm_attn_task *a = &t->u.attn;
  a->B = a->Hq = a->Hkv = a->Tq = a->Tk = 0;
  a->scale = 0;
  memset(a->sq, 0, sizeof a->sq);
  memset(a->sk, 0, sizeof a->sk);
  memset(a->sv, 0, sizeof a->sv);
  memset(a->so, 0, sizeof a->so);
}

/* (b, K/V head, block of (group head, row)) tiles */
static int64_t attn_parallel_count(const tlm_task *task, const tlm_schedule *s,
                                   const ln_nest *nest, int64_t workers) {
  (void)workers;
  (void)nest;
  const tlm_attn_task *a = &task->u.attn;
  int64_t qb = s->v[ATT_QBLOCK], rows = a->Hq / a->Hkv * a->Tq;
  return s->v[ATT_PARALLEL] ? a->B * a->Hkv * ((rows + qb - 1) / qb) : 1;
}

static double attn_extent_distance(const tlm_task *a, const tlm_task *b) {
  return log_gap(a->u.attn.B * a->u.attn.Hq * a->u.attn.Tq,
                 b->u.attn.B * b->u.attn.Hq * b->u.attn.Tq) +
         log_gap(a->u.attn.Tk, b->u.attn.Tk);
}

const tlm_family tlm_family_attention = {
    .name = "attention",
    .points = k_attn_points,
    .npoints = ATT_NPOINTS,
    .candidates = attn_candidates,
    .rule = attn_default,
    .rule_version = attn_rule_version,
    .scratch_bytes = attn_scratch_bytes,
    .flops = attn_flops,
    .str = attn_str,
    .clear_runtime = attn_clear_runtime,
    .parallel_count = attn_parallel_count,
    .extent_distance = attn_extent_distance,
};
