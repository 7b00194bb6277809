/* validate.c - checks a caller's op and tensors and turns them into a
 * canonical task plus kernel arguments. Nothing below the API re-checks. */
#include "validate.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define FAIL(st, ...)                                   \
  do {                                                  \
    snprintf(err, (size_t)errcap, __VA_ARGS__);         \
    return (st);                                        \
  } while (0)

/* Largest element offset a tensor reaches; -1 on overflow. */
static int64_t max_offset(const tlm_tensor *t) {
  int64_t off = 0, term;
  for (int i = 0; i < t->ndim; i++) {
    if (__builtin_mul_overflow(t->shape[i] - 1, t->strides[i], &term) ||
        __builtin_add_overflow(off, term, &off))
      return -1;
  }
  int64_t bytes;
  if (off == INT64_MAX || __builtin_mul_overflow(off + 1, (int64_t)sizeof(float), &bytes))
    return -1;
  return off;
}

static tlm_status check_tensor(const tlm_tensor *t, const char *name, int min_ndim,
                               char *err, int errcap) {
  if (t->dtype != TLM_F32)
    FAIL(TLM_ERR_DTYPE_MISMATCH, "%s: dtype %d is not f32 (only TLM_F32 is supported)", name,
         (int)t->dtype);
  if (t->ndim < min_ndim || t->ndim > TLM_MAX_DIMS)
    FAIL(TLM_ERR_INVALID_ARGUMENT, "%s: ndim %d out of range %d..%d", name, t->ndim, min_ndim,
         TLM_MAX_DIMS);
  if (!t->data) FAIL(TLM_ERR_NULL_POINTER, "%s: data is NULL", name);
  if ((uintptr_t)t->data % sizeof(float))
    FAIL(TLM_ERR_INVALID_ARGUMENT, "%s: data %p is not aligned to 4 bytes", name, t->data);
  int64_t count = 1;
  for (int i = 0; i < t->ndim; i++) {
    if (t->shape[i] < 1)
      FAIL(TLM_ERR_INVALID_ARGUMENT, "%s: extent %lld of dim %d is < 1", name,
           (long long)t->shape[i], i);
    if (t->strides[i] < 0)
      FAIL(TLM_ERR_INVALID_ARGUMENT, "%s: stride %lld of dim %d is negative", name,
           (long long)t->strides[i], i);
    if (__builtin_mul_overflow(count, t->shape[i], &count))
      FAIL(TLM_ERR_OVERFLOW, "%s: element count overflows int64", name);
  }
  int64_t bytes;
  if (__builtin_mul_overflow(count, (int64_t)sizeof(float), &bytes))
    FAIL(TLM_ERR_OVERFLOW, "%s: byte size overflows int64", name);
  if (max_offset(t) < 0) FAIL(TLM_ERR_OVERFLOW, "%s: largest byte offset overflows int64", name);
  return TLM_OK;
}

/* The output must map distinct indices to distinct elements: no zero stride
 * on an extent > 1, and each stride (sorted) beyond the span of the smaller
 * ones. */
static int self_overlaps(const tlm_tensor *t) {
  int idx[TLM_MAX_DIMS], n = 0;
  for (int i = 0; i < t->ndim; i++)
    if (t->shape[i] > 1) {
      if (t->strides[i] == 0) return 1;
      idx[n++] = i;
    }
  for (int i = 1; i < n; i++) /* insertion sort by stride */
    for (int j = i; j > 0 && t->strides[idx[j]] < t->strides[idx[j - 1]]; j--) {
      int tmp = idx[j];
      idx[j] = idx[j - 1];
      idx[j - 1] = tmp;
    }
  int64_t span = 0; /* largest offset reachable by the smaller dims */
  for (int i = 0; i < n; i++) {
    if (t->strides[idx[i]] <= span) return 1;
    span += (t->shape[idx[i]] - 1) * t->strides[idx[i]];
  }
  return 0;
}

static int ranges_overlap(const tlm_tensor *x, const tlm_tensor *y) {
  uintptr_t x0 = (uintptr_t)x->data, x1 = x0 + (uintptr_t)(max_offset(x) + 1) * sizeof(float);
  uintptr_t y0 = (uintptr_t)y->data, y1 = y0 + (uintptr_t)(max_offset(y) + 1) * sizeof(float);
  return x0 < y1 && y0 < x1;
}

/* Batch dims of input t (of which the last 2 are matrix dims) aligned to C's
 * nb batch dims: writes per-C-dim extents (1 when missing) and strides. */
static tlm_status align_batch(const tlm_tensor *t, const char *name, int nb,
                              int64_t *ext, int64_t *str, char *err, int errcap) {
  int tb = t->ndim - 2;
  if (tb > nb)
    FAIL(TLM_ERR_SHAPE_MISMATCH, "%s has %d batch dims but the output has %d", name, tb, nb);
  for (int d = 0; d < nb; d++) {
    int td = d - (nb - tb);
    ext[d] = td >= 0 ? t->shape[td] : 1;
    str[d] = (td >= 0 && t->shape[td] > 1) ? t->strides[td] : 0;
  }
  return TLM_OK;
}

/* y is x itself: the same data, dims and extents, and the same stride on
 * every dim of extent > 1 (an in-place operator) */
static int same_view(const tlm_tensor *X, const tlm_tensor *Y) {
  int same = X->data == Y->data && X->ndim == Y->ndim;
  for (int i = 0; i < X->ndim && same; i++)
    same = X->shape[i] == Y->shape[i] && (X->strides[i] == Y->strides[i] || X->shape[i] == 1);
  return same;
}

tlm_status tlm_validate_matmul(const tlm_op *op, const tlm_tensor *in, int n_in,
                               const tlm_tensor *out, int n_out, tlm_task *task,
                               tlm_mm_args *args, char *err, int errcap) {
  return tlm_validate_matmul_order(op, in, n_in, out, n_out, 0, task, args, err, errcap);
}

tlm_status tlm_validate_matmul_order(const tlm_op *op, const tlm_tensor *in, int n_in,
                                     const tlm_tensor *out, int n_out, int conv_order,
                                     tlm_task *task, tlm_mm_args *args, char *err, int errcap) {
  const tlm_matmul_desc *d = &op->u.matmul;
  memset(task, 0, sizeof *task);
  memset(args, 0, sizeof *args);
  if ((d->transpose_a & ~1) || (d->transpose_b & ~1) || (d->has_bias & ~1) ||
      (d->has_residual & ~1))
    FAIL(TLM_ERR_INVALID_ARGUMENT, "matmul flags must be 0 or 1");
  if ((int)d->activation < 0 || d->activation >= TLM_ACT_COUNT_)
    FAIL(TLM_ERR_INVALID_ARGUMENT, "unknown activation %d", (int)d->activation);
  int want = 2 + d->has_bias + d->has_residual;
  if (n_in != want)
    FAIL(TLM_ERR_INVALID_ARGUMENT, "matmul takes %d inputs here (A, B%s%s), got %d", want,
         d->has_bias ? ", bias" : "", d->has_residual ? ", residual" : "", n_in);
  if (n_out != 1) FAIL(TLM_ERR_INVALID_ARGUMENT, "matmul writes 1 output, got %d", n_out);
  const tlm_tensor *A = &in[0], *B = &in[1], *C = &out[0];
  const tlm_tensor *bias = d->has_bias ? &in[2] : NULL;
  const tlm_tensor *R = d->has_residual ? &in[2 + d->has_bias] : NULL;
  tlm_status st;
  if ((st = check_tensor(A, "A", 2, err, errcap)) || (st = check_tensor(B, "B", 2, err, errcap)) ||
      (st = check_tensor(C, "C", 2, err, errcap)))
    return st;
  if (bias && (st = check_tensor(bias, "bias", 1, err, errcap))) return st;
  if (R && (st = check_tensor(R, "residual", 2, err, errcap))) return st;

  int na = A->ndim, nbd = B->ndim, nc = C->ndim;
  int64_t M = d->transpose_a ? A->shape[na - 1] : A->shape[na - 2];
  int64_t K = d->transpose_a ? A->shape[na - 2] : A->shape[na - 1];
  int64_t KB = d->transpose_b ? B->shape[nbd - 1] : B->shape[nbd - 2];
  int64_t N = d->transpose_b ? B->shape[nbd - 2] : B->shape[nbd - 1];
  if (K != KB)
    FAIL(TLM_ERR_SHAPE_MISMATCH, "inner dims differ: A gives K=%lld, B gives K=%lld",
         (long long)K, (long long)KB);
  if (C->shape[nc - 2] != M || C->shape[nc - 1] != N)
    FAIL(TLM_ERR_SHAPE_MISMATCH, "C is %lldx%lld, expected M x N = %lldx%lld",
         (long long)C->shape[nc - 2], (long long)C->shape[nc - 1], (long long)M, (long long)N);
  int nb = nc - 2;
  if (nb > TLM_MAX_BATCH) FAIL(TLM_ERR_INVALID_ARGUMENT, "more than %d batch dims", TLM_MAX_BATCH);
  int64_t ea[TLM_MAX_BATCH], eb[TLM_MAX_BATCH], er[TLM_MAX_BATCH];
  int64_t sa[TLM_MAX_BATCH], sb[TLM_MAX_BATCH], sr[TLM_MAX_BATCH];
  if ((st = align_batch(A, "A", nb, ea, sa, err, errcap)) ||
      (st = align_batch(B, "B", nb, eb, sb, err, errcap)))
    return st;
  if (R && (st = align_batch(R, "residual", nb, er, sr, err, errcap))) return st;
  for (int i = 0; i < nb; i++) {
    int64_t e = C->shape[i];
    int64_t bc = ea[i] > eb[i] ? ea[i] : eb[i];
    if ((ea[i] != 1 && ea[i] != e) || (eb[i] != 1 && eb[i] != e) || bc != e)
      FAIL(TLM_ERR_SHAPE_MISMATCH,
           "batch dim %d: A has %lld, B has %lld, C has %lld (not their broadcast)", i,
           (long long)ea[i], (long long)eb[i], (long long)e);
    if (R && er[i] != 1 && er[i] != e)
      FAIL(TLM_ERR_SHAPE_MISMATCH, "residual batch dim %d is %lld, C has %lld", i,
           (long long)er[i], (long long)e);
  }
  if (bias) {
    int ok = (bias->ndim == 1 && bias->shape[0] == N) ||
             (bias->ndim == 2 && bias->shape[0] == 1 && bias->shape[1] == N);
    if (!ok) FAIL(TLM_ERR_SHAPE_MISMATCH, "bias must be (N) or (1, N) with N=%lld", (long long)N);
  }
  if (R) {
    int nr = R->ndim;
    if (R->shape[nr - 2] != M || R->shape[nr - 1] != N)
      FAIL(TLM_ERR_SHAPE_MISMATCH, "residual is %lldx%lld, expected %lldx%lld",
           (long long)R->shape[nr - 2], (long long)R->shape[nr - 1], (long long)M, (long long)N);
  }
  if (self_overlaps(C)) FAIL(TLM_ERR_ALIASING, "C's strides make distinct elements overlap");
  /* C holds partial sums between K blocks, so it may not share memory with
   * any input; but the residual may be C itself (C += A x B: the kernel
   * starts from C's contents instead of zero), where the residual comes
   * before the activation or there is none */
  int in_place = R && same_view(R, C);
  if (in_place && !conv_order && d->activation != TLM_ACT_NONE)
    FAIL(TLM_ERR_ALIASING, "the residual is C itself (in place), which needs activation none: a "
         "matmul adds its residual after the activation; pass a separate residual");
  if (ranges_overlap(C, A) || ranges_overlap(C, B) || (bias && ranges_overlap(C, bias)) ||
      (R && !in_place && ranges_overlap(C, R)))
    FAIL(TLM_ERR_ALIASING, "C overlaps an input; outputs must not share memory with inputs (the "
         "residual may be C itself: same data, shape and strides)");

  /* canonical task: drop batch dims of extent 1 */
  tlm_matmul_task *t = &task->u.mm;
  task->kind = TLM_OP_MATMUL;
  task->dtype = TLM_F32;
  for (int i = 0; i < nb; i++) {
    if (C->shape[i] == 1) continue;
    int j = t->nbatch++;
    t->batch[j] = C->shape[i];
    args->sa[j] = sa[i];
    args->sb[j] = sb[i];
    args->sc[j] = C->strides[i];
    args->sr[j] = R ? sr[i] : 0;
  }
  for (int j = t->nbatch; j < TLM_MAX_BATCH; j++) t->batch[j] = 1;
  t->M = M, t->N = N, t->K = K;
  t->act = (int32_t)d->activation;
  t->has_bias = d->has_bias;
  t->has_residual = !R                                          ? 0
                    : in_place                                    ? 3
                    : conv_order && d->activation != TLM_ACT_NONE ? 2
                                                                  : 1;
  /* matrix strides; the stride of an extent-1 dim never matters, call it 1 */
#define STR(x, dim, ext) ((ext) > 1 ? (x)->strides[dim] : 1)
  args->sa[4] = d->transpose_a ? STR(A, na - 1, M) : STR(A, na - 2, M);
  args->sa[5] = d->transpose_a ? STR(A, na - 2, K) : STR(A, na - 1, K);
  args->sb[4] = d->transpose_b ? STR(B, nbd - 1, K) : STR(B, nbd - 2, K);
  args->sb[5] = d->transpose_b ? STR(B, nbd - 2, N) : STR(B, nbd - 1, N);
  args->sc[4] = STR(C, nc - 2, M);
  args->sc[5] = STR(C, nc - 1, N);
  if (R) {
    args->sr[4] = STR(R, R->ndim - 2, M);
    args->sr[5] = STR(R, R->ndim - 1, N);
  }
  if (bias) args->sbias = STR(bias, bias->ndim - 1, N);
#undef STR
  t->unit = (args->sa[5] == 1 ? TLM_UNIT_A_K : 0) | (args->sb[5] == 1 ? TLM_UNIT_B_N : 0) |
            (args->sc[5] == 1 ? TLM_UNIT_C_N : 0) |
            (R && args->sr[5] == 1 ? TLM_UNIT_R_N : 0) |
            (bias && args->sbias == 1 ? TLM_UNIT_BIAS : 0) |
            (args->sb[4] == 1 ? TLM_UNIT_B_K : 0);
  memcpy(t->sa, args->sa, sizeof t->sa);
  memcpy(t->sb, args->sb, sizeof t->sb);
  memcpy(t->sc, args->sc, sizeof t->sc);
  memcpy(t->sr, args->sr, sizeof t->sr);
  t->sbias = args->sbias;
  args->a = A->data;
  args->b = B->data;
  args->c = C->data;
  args->bias = bias ? bias->data : NULL;
  args->res = R ? R->data : NULL;
  args->M = M;
  args->N = N;
  args->K = K;
  return TLM_OK;
}

/* ---- row-wise operators -------------------------------------------------------- */

/* y (the output of a row-wise operator) has x's shape */
static tlm_status check_same_shape(const tlm_tensor *X, const tlm_tensor *Y, char *err,
                                   int errcap) {
  if (X->ndim != Y->ndim) FAIL(TLM_ERR_SHAPE_MISMATCH, "y has %d dims, x has %d", Y->ndim, X->ndim);
  for (int i = 0; i < X->ndim; i++)
    if (X->shape[i] != Y->shape[i])
      FAIL(TLM_ERR_SHAPE_MISMATCH, "y's dim %d is %lld, x's is %lld", i, (long long)Y->shape[i],
           (long long)X->shape[i]);
  return TLM_OK;
}

/* The dims hi..0 of x and y (and of z's strides zst, when given) that have
 * extent > 1 collapse into one axis of one stride: walking outwards, each
 * stride must be the previous stride times the previous extent. Fills the
 * axis' extent and the strides of its first (innermost) dim; returns -1, or
 * the dim that breaks the pattern, with *z_only set when only z breaks it. */
typedef struct collapsed {
  int64_t n, sx, sy, sz;
} collapsed;

static int collapse_axis(const tlm_tensor *X, const tlm_tensor *Y, const int64_t *zst, int hi,
                         collapsed *c, int *z_only) {
  int64_t px = 0, py = 0, pz = 0, pe = 0;
  int first = 1;
  *c = (collapsed){1, 0, 0, 0};
  *z_only = 0;
  for (int i = hi; i >= 0; i--) {
    if (X->shape[i] == 1) continue;
    int64_t zs = zst ? zst[i] : 0;
    c->n *= X->shape[i];
    if (first) {
      c->sx = X->strides[i], c->sy = Y->strides[i], c->sz = zs;
      first = 0;
    } else if (X->strides[i] != px * pe || Y->strides[i] != py * pe || zs != pz * pe) {
      *z_only = X->strides[i] == px * pe && Y->strides[i] == py * pe;
      return i;
    }
    px = X->strides[i], py = Y->strides[i], pz = zs, pe = X->shape[i];
  }
  return -1;
}

/* the strides and pointers a row task and its arguments share */
static void row_finish(tlm_row_task *t, tlm_row_args *args, const tlm_tensor *X,
                       const tlm_tensor *Y, const float *z) {
  memcpy(t->sx, args->sx, sizeof t->sx);
  memcpy(t->sy, args->sy, sizeof t->sy);
  memcpy(t->sz, args->sz, sizeof t->sz);
  args->x = X->data;
  args->y = Y->data;
  args->z = z;
  args->rows = t->rows;
  args->cols = t->cols;
  args->mrows = t->mrows;
}

tlm_status tlm_validate_row(const tlm_op *op, const tlm_tensor *in, int n_in,
                            const tlm_tensor *out, int n_out, tlm_task *task,
                            tlm_row_args *args, char *err, int errcap) {
  memset(task, 0, sizeof *task);
  memset(args, 0, sizeof *args);
  int elt = op->kind == TLM_OP_ELTWISE;
  const tlm_rownorm_desc *d = &op->u.rownorm;
  const tlm_eltwise_desc *ed = &op->u.eltwise;
  static const char *const names[] = {"", "", "softmax", "layernorm", "rmsnorm", "", "", "eltwise"};
  const char *name = names[op->kind];
  int want = op->kind == TLM_OP_LAYERNORM ? 3 : op->kind == TLM_OP_RMSNORM ? 2 : 1;
  if (elt) {
    if ((int)ed->activation < 0 || ed->activation >= TLM_ACT_COUNT_)
      FAIL(TLM_ERR_INVALID_ARGUMENT, "eltwise: unknown activation %d", (int)ed->activation);
    if ((int)ed->binary < 0 || ed->binary > TLM_BINARY_MUL)
      FAIL(TLM_ERR_INVALID_ARGUMENT, "eltwise: unknown binary op %d", (int)ed->binary);
    want = ed->binary != TLM_BINARY_NONE ? 2 : 1;
    if (n_in != want)
      FAIL(TLM_ERR_INVALID_ARGUMENT, "eltwise takes %d inputs here (x%s), got %d", want,
           want == 2 ? ", z" : "", n_in);
  } else {
    if (d->causal & ~1) FAIL(TLM_ERR_INVALID_ARGUMENT, "%s: causal must be 0 or 1", name);
    if (!(d->eps >= 0.0f) || !(d->eps < 1e30f))
      FAIL(TLM_ERR_INVALID_ARGUMENT, "%s: eps must be finite and >= 0", name);
    if (!(d->scale == d->scale) || d->scale < 0.0f || d->scale > 1e30f)
      FAIL(TLM_ERR_INVALID_ARGUMENT, "%s: scale must be finite and >= 0", name);
    if (op->kind != TLM_OP_SOFTMAX && d->causal)
      FAIL(TLM_ERR_INVALID_ARGUMENT, "%s: causal applies to softmax only", name);
    if (n_in != want)
      FAIL(TLM_ERR_INVALID_ARGUMENT, "%s takes %d inputs (x%s), got %d", name, want,
           want == 3 ? ", gamma, beta" : want == 2 ? ", gamma" : "", n_in);
  }
  if (n_out != 1) FAIL(TLM_ERR_INVALID_ARGUMENT, "%s writes 1 output, got %d", name, n_out);
  const tlm_tensor *X = &in[0], *Y = &out[0];
  tlm_status st;
  if ((st = check_tensor(X, "x", 1, err, errcap)) || (st = check_tensor(Y, "y", 1, err, errcap)))
    return st;
  if ((st = check_same_shape(X, Y, err, errcap))) return st;
  int nd = X->ndim;
  int64_t C = X->shape[nd - 1];
  /* eltwise's z: x's shape with broadcast dims (extent 1 or missing) at
   * stride 0, so it collapses into rows like x */
  int64_t zst[TLM_MAX_DIMS] = {0};
  const tlm_tensor *Z = elt && want == 2 ? &in[1] : NULL;
  if (Z) {
    if ((st = check_tensor(Z, "z", 1, err, errcap))) return st;
    if (Z->ndim > X->ndim) FAIL(TLM_ERR_SHAPE_MISMATCH, "z has more dims than x");
    for (int i = 0; i < X->ndim; i++) {
      int zi = i - (X->ndim - Z->ndim);
      int64_t ze = zi >= 0 ? Z->shape[zi] : 1;
      if (ze != X->shape[i] && ze != 1)
        FAIL(TLM_ERR_SHAPE_MISMATCH, "z's dim %d is %lld, x's is %lld (z may only broadcast "
             "dims of extent 1)", zi, (long long)ze, (long long)X->shape[i]);
      zst[i] = (zi >= 0 && ze > 1) ? Z->strides[zi] : 0;
    }
  }
  for (int i = 1; i < want && !elt; i++) {
    const char *pname = i == 1 ? "gamma" : "beta";
    if ((st = check_tensor(&in[i], pname, 1, err, errcap))) return st;
    if (in[i].ndim != 1 || in[i].shape[0] != C)
      FAIL(TLM_ERR_SHAPE_MISMATCH, "%s must be (C) with C=%lld", pname, (long long)C);
  }
  /* leading dims collapse into rows of one stride: walking outwards over
   * the dims of extent > 1, each stride must equal the previous stride
   * times the previous extent (for x and y alike). x may broadcast every
   * row (all leading strides 0); y may not. */
  collapsed rw;
  int z_only, bad = collapse_axis(X, Y, zst, nd - 2, &rw, &z_only);
  if (bad >= 0 && z_only)
    FAIL(TLM_ERR_UNSUPPORTED, "eltwise: z must have x's shape or broadcast over all of x's "
         "leading dims (one row); its dim %d (stride %lld) breaks the row pattern", bad,
         (long long)zst[bad]);
  if (bad >= 0)
    FAIL(TLM_ERR_UNSUPPORTED, "%s: the leading dims of x and y must collapse into rows of one "
         "stride (dim %d has stride %lld/%lld)", name, bad, (long long)X->strides[bad],
         (long long)Y->strides[bad]);
  int64_t rows = rw.n, sx = rw.sx, sy = rw.sy, sz = rw.sz;
  if (rows > 1 && sy == 0) FAIL(TLM_ERR_ALIASING, "y's rows overlap (zero stride)");
  if (C > 1 && Y->strides[nd - 1] == 0) FAIL(TLM_ERR_ALIASING, "y's columns overlap (zero stride)");
  if (self_overlaps(Y)) FAIL(TLM_ERR_ALIASING, "y's strides make distinct elements overlap");
  if (ranges_overlap(X, Y) && !same_view(X, Y))
    FAIL(TLM_ERR_ALIASING, "y overlaps x without being x itself");
  if (Z) { /* y may also be z itself */
    int zsame = Z->data == Y->data && Z->ndim == Y->ndim;
    for (int i = 0; i < nd && zsame; i++)
      zsame = Z->shape[i] == Y->shape[i] && (Z->strides[i] == Y->strides[i] || Y->shape[i] == 1);
    if (ranges_overlap(Y, Z) && !zsame) FAIL(TLM_ERR_ALIASING, "y overlaps z without being z itself");
  }
  for (int i = 1; i < want && !elt; i++)
    if (ranges_overlap(Y, &in[i])) FAIL(TLM_ERR_ALIASING, "y overlaps gamma or beta");
  tlm_row_task *t = &task->u.row;
  task->kind = op->kind;
  task->dtype = TLM_F32;
  t->causal = elt ? 0 : d->causal;
  t->eps = op->kind == TLM_OP_SOFTMAX || elt ? 0.0f : d->eps;
  t->scale = op->kind == TLM_OP_SOFTMAX ? (d->scale > 0 ? d->scale : 1.0f) : 0.0f;
  if (elt) {
    t->act = (int32_t)ed->activation;
    t->binary = (int32_t)ed->binary;
  }
  t->rows = rows;
  t->cols = C;
  t->mrows = t->causal ? (nd >= 2 ? X->shape[nd - 2] : 1) : 1;
  args->sx[0] = rows > 1 ? sx : 0;
  args->sy[0] = rows > 1 ? sy : 0;
  args->sx[1] = C > 1 ? X->strides[nd - 1] : 1;
  args->sy[1] = C > 1 ? Y->strides[nd - 1] : 1;
  if (want >= 2 && !elt) args->sg = C > 1 ? in[1].strides[0] : 1;
  if (want >= 3) args->sb = C > 1 ? in[2].strides[0] : 1;
  if (Z) {
    args->z = Z->data;
    args->sz[0] = rows > 1 ? sz : 0;
    args->sz[1] = C > 1 ? zst[nd - 1] : 1;
  }
  t->unit = (args->sx[1] == 1 ? TLM_UNIT_ROW_X : 0) | (args->sy[1] == 1 ? TLM_UNIT_ROW_Y : 0) |
            (want >= 2 && !elt && args->sg == 1 ? TLM_UNIT_ROW_G : 0) |
            (want >= 3 && args->sb == 1 ? TLM_UNIT_ROW_B : 0) |
            (Z && args->sz[1] == 1 ? TLM_UNIT_ROW_Z : 0);
  t->sg = args->sg;
  t->sb = args->sb;
  row_finish(t, args, X, Y, Z ? Z->data : NULL);
  args->gamma = want >= 2 && !elt ? in[1].data : NULL;
  args->beta = want >= 3 ? in[2].data : NULL;
  return TLM_OK;
}

/* ---- rotary position embedding ------------------------------------------------------- */

tlm_status tlm_validate_rope(const tlm_op *op, const tlm_tensor *in, int n_in,
                             const tlm_tensor *out, int n_out, tlm_task *task,
                             tlm_row_args *args, char *err, int errcap) {
  memset(task, 0, sizeof *task);
  memset(args, 0, sizeof *args);
  if ((int)op->u.rope.style < 0 || op->u.rope.style > TLM_ROPE_INTERLEAVED)
    FAIL(TLM_ERR_INVALID_ARGUMENT, "rope: unknown style %d", (int)op->u.rope.style);
  if (n_in != 2) FAIL(TLM_ERR_INVALID_ARGUMENT, "rope takes 2 inputs (x, table), got %d", n_in);
  if (n_out != 1) FAIL(TLM_ERR_INVALID_ARGUMENT, "rope writes 1 output, got %d", n_out);
  const tlm_tensor *X = &in[0], *Tb = &in[1], *Y = &out[0];
  tlm_status st;
  if ((st = check_tensor(X, "x", 3, err, errcap)) || (st = check_tensor(Y, "y", 3, err, errcap)) ||
      (st = check_tensor(Tb, "table", 2, err, errcap)))
    return st;
  if ((st = check_same_shape(X, Y, err, errcap))) return st;
  int nd = X->ndim;
  int64_t D = X->shape[nd - 1], H = X->shape[nd - 2];
  if (D % 2) FAIL(TLM_ERR_SHAPE_MISMATCH, "rope: the feature dim D=%lld must be even", (long long)D);
  /* tokens: dims 0..nd-3 collapse into one axis of one stride */
  collapsed tok;
  int z_only, bad = collapse_axis(X, Y, NULL, nd - 3, &tok, &z_only);
  if (bad >= 0)
    FAIL(TLM_ERR_UNSUPPORTED, "rope: the dims before H must collapse into one token axis of one "
         "stride (dim %d has stride %lld/%lld)", bad, (long long)X->strides[bad],
         (long long)Y->strides[bad]);
  int64_t T = tok.n, sxt = tok.sx, syt = tok.sy;
  if (Tb->ndim != 2 || Tb->shape[0] != T || Tb->shape[1] != D)
    FAIL(TLM_ERR_SHAPE_MISMATCH, "rope: table must be (T, D) = (%lld, %lld), one row per token",
         (long long)T, (long long)D);
  if (self_overlaps(Y)) FAIL(TLM_ERR_ALIASING, "y's strides make distinct elements overlap");
  if (ranges_overlap(X, Y) && !same_view(X, Y))
    FAIL(TLM_ERR_ALIASING, "y overlaps x without being x itself");
  if (ranges_overlap(Y, Tb)) FAIL(TLM_ERR_ALIASING, "y overlaps the table");
  tlm_row_task *t = &task->u.row;
  task->kind = TLM_OP_ROPE;
  task->dtype = TLM_F32;
  t->rope_style = (int32_t)op->u.rope.style;
  t->rows = T * H;
  t->cols = D;
  t->mrows = H;
  args->sx[0] = T > 1 ? sxt : 0;
  args->sy[0] = T > 1 ? syt : 0;
  args->sxh = H > 1 ? X->strides[nd - 2] : 0;
  args->syh = H > 1 ? Y->strides[nd - 2] : 0;
  args->sx[1] = X->strides[nd - 1];
  args->sy[1] = Y->strides[nd - 1];
  args->sz[0] = T > 1 ? Tb->strides[0] : 0;
  args->sz[1] = Tb->strides[1];
  t->unit = (args->sx[1] == 1 ? TLM_UNIT_ROW_X : 0) | (args->sy[1] == 1 ? TLM_UNIT_ROW_Y : 0) |
            (args->sz[1] == 1 ? TLM_UNIT_ROW_Z : 0);
  t->sxh = args->sxh;
  t->syh = args->syh;
  row_finish(t, args, X, Y, Tb->data);
  return TLM_OK;
}

/* ---- fused attention ------------------------------------------------------------------- */

tlm_status tlm_validate_attention(const tlm_op *op, const tlm_tensor *in, int n_in,
                                  const tlm_tensor *out, int n_out, tlm_task *task,
                                  tlm_attn_args *args, char *err, int errcap) {
  memset(task, 0, sizeof *task);
  memset(args, 0, sizeof *args);
  const tlm_attention_desc *d = &op->u.attention;
  if (d->causal & ~1) FAIL(TLM_ERR_INVALID_ARGUMENT, "attention: causal must be 0 or 1");
  if (!(d->scale >= 0.0f) || !(d->scale < 1e30f))
    FAIL(TLM_ERR_INVALID_ARGUMENT, "attention: scale must be finite and >= 0");
  if (n_in != 3) FAIL(TLM_ERR_INVALID_ARGUMENT, "attention takes 3 inputs (Q, K, V), got %d", n_in);
  if (n_out != 1) FAIL(TLM_ERR_INVALID_ARGUMENT, "attention writes 1 output, got %d", n_out);
  static const char *const names[4] = {"Q", "K", "V", "O"};
  const tlm_tensor *t4[4] = {&in[0], &in[1], &in[2], &out[0]};
  tlm_status st;
  for (int i = 0; i < 4; i++) {
    if ((st = check_tensor(t4[i], names[i], 4, err, errcap))) return st;
    if (t4[i]->ndim != 4)
      FAIL(TLM_ERR_INVALID_ARGUMENT, "attention: %s must have 4 dims (B, H, T, D), has %d",
           names[i], t4[i]->ndim);
  }
  const int64_t *q = in[0].shape, *k = in[1].shape, *v = in[2].shape, *o = out[0].shape;
  int64_t B = q[0], Hq = q[1], Tq = q[2], D = q[3], Hkv = k[1], Tk = k[2], Dv = v[3];
  if (k[0] != B || v[0] != B || o[0] != B)
    FAIL(TLM_ERR_SHAPE_MISMATCH, "attention: batch B must agree (Q %lld, K %lld, V %lld, O %lld)",
         (long long)B, (long long)k[0], (long long)v[0], (long long)o[0]);
  if (k[3] != D) FAIL(TLM_ERR_SHAPE_MISMATCH, "attention: K's D is %lld, Q's %lld", (long long)k[3], (long long)D);
  if (v[1] != Hkv || v[2] != Tk)
    FAIL(TLM_ERR_SHAPE_MISMATCH, "attention: V must be (B, Hkv, Tk, Dv) with K's Hkv=%lld, Tk=%lld",
         (long long)Hkv, (long long)Tk);
  if (o[1] != Hq || o[2] != Tq || o[3] != Dv)
    FAIL(TLM_ERR_SHAPE_MISMATCH, "attention: O must be (B, Hq, Tq, Dv) = (%lld, %lld, %lld, %lld)",
         (long long)B, (long long)Hq, (long long)Tq, (long long)Dv);
  if (Hq % Hkv)
    FAIL(TLM_ERR_SHAPE_MISMATCH, "attention: K/V heads %lld do not divide query heads %lld",
         (long long)Hkv, (long long)Hq);
  if (d->causal && Tq > Tk)
    FAIL(TLM_ERR_SHAPE_MISMATCH, "attention: causal with more queries (%lld) than keys (%lld)",
         (long long)Tq, (long long)Tk);
  if (D > 1024 || Dv > 1024)
    FAIL(TLM_ERR_UNSUPPORTED, "attention: head dims above 1024 (D %lld, Dv %lld)", (long long)D,
         (long long)Dv);
  if (self_overlaps(&out[0])) FAIL(TLM_ERR_ALIASING, "O's strides make distinct elements overlap");
  for (int i = 0; i < 3; i++)
    if (ranges_overlap(&out[0], &in[i])) FAIL(TLM_ERR_ALIASING, "O overlaps %s", names[i]);
  tlm_attn_task *t = &task->u.attn;
  task->kind = TLM_OP_ATTENTION;
  task->dtype = TLM_F32;
  t->causal = d->causal;
  t->scale = d->scale > 0 ? d->scale : 1.0f / sqrtf((float)D);
  t->D = D, t->Dv = Dv, t->B = B, t->Hq = Hq, t->Hkv = Hkv, t->Tq = Tq, t->Tk = Tk;
  int64_t *sd[4] = {t->sq, t->sk, t->sv, t->so};
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) sd[i][j] = t4[i]->shape[j] > 1 ? t4[i]->strides[j] : 0;
  t->unit = (D == 1 || t->sq[3] == 1 ? TLM_UNIT_ATT_Q : 0) | (D == 1 || t->sk[3] == 1 ? TLM_UNIT_ATT_K : 0) |
            (Dv == 1 || t->sv[3] == 1 ? TLM_UNIT_ATT_V : 0) | (Dv == 1 || t->so[3] == 1 ? TLM_UNIT_ATT_O : 0);
  args->o = out[0].data;
  args->q = in[0].data, args->k = in[1].data, args->v = in[2].data;
  args->B = B, args->Hq = Hq, args->Hkv = Hkv, args->Tq = Tq, args->Tk = Tk;
  memcpy(args->sq, t->sq, sizeof t->sq);
  memcpy(args->sk, t->sk, sizeof t->sk);
  memcpy(args->sv, t->sv, sizeof t->sv);
  memcpy(args->so, t->so, sizeof t->so);
  args->scale = t->scale;
  return TLM_OK;
}

/* ---- convolution ------------------------------------------------------------------ */

/* Logical dim order of an activation tensor: positions of n, c and the S
 * spatial dims in its shape. */
static void act_dims(int layout, int ndim, int *pn, int *pc, int *psp) {
  int S = ndim - 2;
  *pn = 0;
  *pc = layout == TLM_LAYOUT_NCHW ? 1 : ndim - 1;
  for (int j = 0; j < S; j++) psp[j] = layout == TLM_LAYOUT_NCHW ? 2 + j : 1 + j;
}

/* (n, c, d, h, w) extents and strides of an activation tensor; missing
 * spatial dims get extent 1, stride 0 */
void tlm_act_view(const tlm_tensor *t, int layout, int64_t ext[5], int64_t str[5]) {
  int pn, pc, psp[3], S = t->ndim - 2;
  act_dims(layout, t->ndim, &pn, &pc, psp);
  ext[0] = t->shape[pn], str[0] = t->strides[pn];
  ext[1] = t->shape[pc], str[1] = t->strides[pc];
  for (int j = 0; j < 3; j++) ext[2 + j] = 1, str[2 + j] = 0;
  for (int j = 0; j < S; j++) {
    ext[2 + 3 - S + j] = t->shape[psp[j]];
    str[2 + 3 - S + j] = t->strides[psp[j]];
  }
  for (int i = 0; i < 5; i++)
    if (ext[i] == 1) str[i] = 0; /* canonical: a stride of extent 1 is never used */
}

void tlm_conv_args_extents(tlm_conv_args *a, const tlm_conv_task *t) {
  a->N = t->N;
  a->ID = t->ID, a->IH = t->IH, a->IW = t->IW;
  a->OD = t->OD, a->OH = t->OH, a->OW = t->OW;
  memcpy(a->ss, t->ss, sizeof a->ss);
  memcpy(a->sw, t->sw_, sizeof a->sw);
  memcpy(a->sd, t->sdst, sizeof a->sd);
  memcpy(a->sr, t->sr, sizeof a->sr);
  a->sbias = t->sbias, a->sscale = t->sscale, a->sshift = t->sshift;
}

tlm_status tlm_validate_conv(const tlm_op *op, const tlm_tensor *in, int n_in,
                             const tlm_tensor *out, int n_out, tlm_task *task,
                             tlm_conv_args *args, char *err, int errcap) {
  const tlm_conv_desc *d = &op->u.conv;
  memset(task, 0, sizeof *task);
  memset(args, 0, sizeof *args);
  if (d->layout != TLM_LAYOUT_NCHW && d->layout != TLM_LAYOUT_NHWC)
    FAIL(TLM_ERR_INVALID_ARGUMENT, "conv: unknown layout %d", (int)d->layout);
  if (d->weight_layout != TLM_WEIGHTS_OIHW && d->weight_layout != TLM_WEIGHTS_HWIO)
    FAIL(TLM_ERR_INVALID_ARGUMENT, "conv: unknown weight layout %d", (int)d->weight_layout);
  if ((d->has_bias & ~1) || (d->has_scale_shift & ~1) || (d->has_residual & ~1))
    FAIL(TLM_ERR_INVALID_ARGUMENT, "conv: has_bias, has_scale_shift, has_residual must be 0 or 1");
  if ((int)d->activation < 0 || d->activation >= TLM_ACT_COUNT_)
    FAIL(TLM_ERR_INVALID_ARGUMENT, "conv: unknown activation %d", (int)d->activation);
  int want = 2 + d->has_bias + 2 * d->has_scale_shift + d->has_residual;
  if (n_in != want)
    FAIL(TLM_ERR_INVALID_ARGUMENT, "conv takes %d inputs here (src, weights%s%s%s), got %d", want,
         d->has_bias ? ", bias" : "", d->has_scale_shift ? ", scale, shift" : "",
         d->has_residual ? ", residual" : "", n_in);
  if (n_out != 1) FAIL(TLM_ERR_INVALID_ARGUMENT, "conv writes 1 output, got %d", n_out);
  const tlm_tensor *X = &in[0], *Wt = &in[1], *Y = &out[0];
  int next = 2;
  const tlm_tensor *bias = d->has_bias ? &in[next++] : NULL;
  const tlm_tensor *scale = d->has_scale_shift ? &in[next++] : NULL;
  const tlm_tensor *shift = d->has_scale_shift ? &in[next++] : NULL;
  const tlm_tensor *R = d->has_residual ? &in[next++] : NULL;
  tlm_status st;
  if ((st = check_tensor(X, "src", 3, err, errcap)) ||
      (st = check_tensor(Wt, "weights", 3, err, errcap)) ||
      (st = check_tensor(Y, "dst", 3, err, errcap)))
    return st;
  int nd = X->ndim, S = nd - 2;
  if (nd > 5) FAIL(TLM_ERR_INVALID_ARGUMENT, "src: %d dims; a convolution takes 3 to 5", nd);
  if (Y->ndim != nd) FAIL(TLM_ERR_SHAPE_MISMATCH, "dst has %d dims, src has %d", Y->ndim, nd);
  if (Wt->ndim != nd)
    FAIL(TLM_ERR_SHAPE_MISMATCH, "weights have %d dims, src has %d (weights are (OC, IC/groups, "
         "kernel...) or their HWIO order)", Wt->ndim, nd);
  int64_t xe[5], xs[5], ye[5], ys[5];
  tlm_act_view(X, d->layout, xe, xs);
  tlm_act_view(Y, d->layout, ye, ys);
  int64_t G = d->groups, IC = xe[1], OC = ye[1];
  if (G < 1) FAIL(TLM_ERR_INVALID_ARGUMENT, "conv: groups %lld must be >= 1", (long long)G);
  if (IC > (1 << 24) || OC > (1 << 24))
    FAIL(TLM_ERR_UNSUPPORTED, "conv: more than 2^24 channels");
  if (IC % G || OC % G)
    FAIL(TLM_ERR_SHAPE_MISMATCH, "conv: groups %lld must divide IC %lld and OC %lld",
         (long long)G, (long long)IC, (long long)OC);
  if (ye[0] != xe[0])
    FAIL(TLM_ERR_SHAPE_MISMATCH, "dst's N is %lld, src's is %lld", (long long)ye[0],
         (long long)xe[0]);
  /* weights: (OC, ICg, k...) or (k..., ICg, OC) */
  int wo = d->weight_layout == TLM_WEIGHTS_OIHW ? 0 : S + 1;
  int wi = d->weight_layout == TLM_WEIGHTS_OIHW ? 1 : S;
  int wk0 = d->weight_layout == TLM_WEIGHTS_OIHW ? 2 : 0;
  if (Wt->shape[wo] != OC)
    FAIL(TLM_ERR_SHAPE_MISMATCH, "weights' OC dim (%d) is %lld, dst has %lld channels", wo,
         (long long)Wt->shape[wo], (long long)OC);
  if (Wt->shape[wi] != IC / G)
    FAIL(TLM_ERR_SHAPE_MISMATCH, "weights' IC/groups dim (%d) is %lld, expected %lld/%lld = %lld",
         wi, (long long)Wt->shape[wi], (long long)IC, (long long)G, (long long)(IC / G));
  int64_t ke[3] = {1, 1, 1}, ks[3] = {0, 0, 0};
  for (int j = 0; j < S; j++) {
    ke[3 - S + j] = Wt->shape[wk0 + j];
    ks[3 - S + j] = Wt->shape[wk0 + j] > 1 ? Wt->strides[wk0 + j] : 0;
  }
  static const char *const axn[3] = {"d", "h", "w"};
  int32_t sv[3], pv[3], dv[3];
  for (int j = 0; j < 3; j++) {
    int used = j >= 3 - S;
    sv[j] = used ? d->stride[j] : 1;
    pv[j] = used ? d->pad[j] : 0;
    dv[j] = used ? d->dilation[j] : 1;
    if (sv[j] < 1 || sv[j] > 65536)
      FAIL(TLM_ERR_INVALID_ARGUMENT, "conv: stride[%d] (%s) = %d out of 1..65536", j, axn[j], sv[j]);
    if (pv[j] < 0 || pv[j] > 65536)
      FAIL(TLM_ERR_INVALID_ARGUMENT, "conv: pad[%d] (%s) = %d out of 0..65536", j, axn[j], pv[j]);
    if (dv[j] < 1 || dv[j] > 65536)
      FAIL(TLM_ERR_INVALID_ARGUMENT, "conv: dilation[%d] (%s) = %d out of 1..65536 (1 = dense)",
           j, axn[j], dv[j]);
    if (ke[j] > 4096)
      FAIL(TLM_ERR_UNSUPPORTED, "conv: kernel extent %lld along %s exceeds 4096", (long long)ke[j],
           axn[j]);
    /* output positions are bounded by what int64 index arithmetic allows */
    if (ye[2 + j] > ((int64_t)1 << 40) || xe[2 + j] > ((int64_t)1 << 40))
      FAIL(TLM_ERR_OVERFLOW, "conv: spatial extent along %s too large", axn[j]);
  }
  const tlm_tensor *vec[3] = {bias, scale, shift};
  static const char *const vname[3] = {"bias", "scale", "shift"};
  int64_t vs[3] = {0, 0, 0};
  for (int i = 0; i < 3; i++) {
    if (!vec[i]) continue;
    if ((st = check_tensor(vec[i], vname[i], 1, err, errcap))) return st;
    if (vec[i]->ndim != 1 || vec[i]->shape[0] != OC)
      FAIL(TLM_ERR_SHAPE_MISMATCH, "%s must be (OC) with OC=%lld", vname[i], (long long)OC);
    vs[i] = OC > 1 ? vec[i]->strides[0] : 0;
  }
  int64_t re[5] = {0}, rs[5] = {0};
  if (R) {
    if ((st = check_tensor(R, "residual", 3, err, errcap))) return st;
    if (R->ndim != nd) FAIL(TLM_ERR_SHAPE_MISMATCH, "residual must have dst's shape");
    for (int i = 0; i < nd; i++)
      if (R->shape[i] != Y->shape[i])
        FAIL(TLM_ERR_SHAPE_MISMATCH, "residual's dim %d is %lld, dst's is %lld", i,
             (long long)R->shape[i], (long long)Y->shape[i]);
    tlm_act_view(R, d->layout, re, rs);
  }
  if (self_overlaps(Y)) FAIL(TLM_ERR_ALIASING, "dst's strides make distinct elements overlap");
  /* the residual may be dst itself (oneDNN's sum post-op): every kernel
   * reads an element's residual before it writes that element, and the
   * ones that run as matmuls accumulate into dst (has_residual 3) */
  for (int i = 0; i < n_in; i++)
    if (!(&in[i] == R && same_view(R, Y)) && ranges_overlap(Y, &in[i]))
      FAIL(TLM_ERR_ALIASING, "dst overlaps input %d (conv writes dst while reading its inputs; "
           "only the residual may be dst itself, with the same data, shape and strides)", i);

  tlm_conv_task *t = &task->u.conv;
  task->kind = TLM_OP_CONV;
  task->dtype = TLM_F32;
  t->G = (int32_t)G;
  t->ICg = (int32_t)(IC / G);
  t->OCg = (int32_t)(OC / G);
  t->KD = (int32_t)ke[0], t->KH = (int32_t)ke[1], t->KW = (int32_t)ke[2];
  t->sd = sv[0], t->sh = sv[1], t->sw = sv[2];
  t->pd = pv[0], t->ph = pv[1], t->pw = pv[2];
  /* a dilation over a kernel extent of 1 is never used: canonical 1 */
  t->dd = ke[0] > 1 ? dv[0] : 1, t->dh = ke[1] > 1 ? dv[1] : 1, t->dw = ke[2] > 1 ? dv[2] : 1;
  t->act = (int32_t)d->activation;
  t->has_bias = d->has_bias;
  t->has_ss = d->has_scale_shift;
  t->has_residual = d->has_residual;
  t->ndim_sp = S;
  t->N = xe[0];
  t->ID = xe[2], t->IH = xe[3], t->IW = xe[4];
  t->OD = ye[2], t->OH = ye[3], t->OW = ye[4];
  memcpy(t->ss, xs, sizeof xs);
  memcpy(t->sdst, ys, sizeof ys);
  memcpy(t->sr, rs, sizeof rs);
  t->sw_[0] = OC > 1 ? Wt->strides[wo] : 0;
  t->sw_[1] = IC / G > 1 ? Wt->strides[wi] : 0;
  for (int j = 0; j < 3; j++) t->sw_[2 + j] = ks[j];
  t->sbias = vs[0], t->sscale = vs[1], t->sshift = vs[2];
  /* unit classes: a stride counts as 1 when the extent is 1 (never used) */
  int unit = 0;
  if (xs[1] == 1 || IC == 1) unit |= TLM_UNIT_CONV_SRC_C;
  if (xs[4] == 1 || xe[4] == 1) unit |= TLM_UNIT_CONV_SRC_W;
  if (t->sw_[0] == 1 || OC == 1) unit |= TLM_UNIT_CONV_WEI_O;
  int rc_unit = !R || rs[1] == 1 || OC == 1, rw_unit = !R || rs[4] == 1 || ye[4] == 1;
  if ((ys[1] == 1 || OC == 1) && rc_unit) unit |= TLM_UNIT_CONV_DST_C;
  if ((ys[4] == 1 || ye[4] == 1) && rw_unit) unit |= TLM_UNIT_CONV_DST_W;
  int vec_unit = 1;
  for (int i = 0; i < 3; i++)
    if (vec[i] && OC > 1 && vs[i] != 1) vec_unit = 0;
  if (vec_unit) unit |= TLM_UNIT_CONV_VEC;
  int plane = ke[0] == 1 && ke[1] == 1 && ke[2] == 1 && sv[1] == 1 && sv[2] == 1 &&
              pv[1] == 0 && pv[2] == 0 && xe[2] == 1 && ye[2] == 1 && xe[3] == ye[3] &&
              xe[4] == ye[4] && (unit & TLM_UNIT_CONV_SRC_W) && (unit & TLM_UNIT_CONV_DST_W) &&
              (xe[3] == 1 || xs[3] == xe[4]) && (ye[3] == 1 || ys[3] == ye[4]) &&
              (!R || ye[3] == 1 || rs[3] == ye[4]);
  if (plane) unit |= TLM_UNIT_CONV_PLANE;
  /* dense strides; a stride over an extent of 1 is never used, so any */
  {
    const int64_t we[5] = {OC, IC / G, ke[0], ke[1], ke[2]};
    const int64_t dense[5] = {1, OC, ke[1] * ke[2] * (IC / G) * OC, ke[2] * (IC / G) * OC,
                              (IC / G) * OC};
    int hwio = 1;
    for (int j = 0; j < 5; j++) hwio &= we[j] == 1 || t->sw_[j] == dense[j];
    if (hwio) unit |= TLM_UNIT_CONV_WEI_HWIO;
  }
  if ((unit & TLM_UNIT_CONV_SRC_C) && (xe[4] == 1 || xs[4] == IC)) unit |= TLM_UNIT_CONV_SRC_PIX;
  if ((unit & TLM_UNIT_CONV_DST_C) && (ye[4] == 1 || (ys[4] == OC && (!R || rs[4] == OC))))
    unit |= TLM_UNIT_CONV_DST_PIX;
  t->unit = unit;

  args->dst = Y->data;
  args->src = X->data;
  args->wei = Wt->data;
  args->bias = bias ? bias->data : NULL;
  args->scale = scale ? scale->data : NULL;
  args->shift = shift ? shift->data : NULL;
  args->res = R ? R->data : NULL;
  tlm_conv_args_extents(args, t);
  return TLM_OK;
}

/* ---- pooling ------------------------------------------------------------------------ */

tlm_status tlm_validate_pool(const tlm_op *op, const tlm_tensor *in, int n_in,
                             const tlm_tensor *out, int n_out, tlm_task *task,
                             tlm_pool_args *args, char *err, int errcap) {
  const tlm_pool_desc *d = &op->u.pool;
  memset(task, 0, sizeof *task);
  memset(args, 0, sizeof *args);
  if (d->layout != TLM_LAYOUT_NCHW && d->layout != TLM_LAYOUT_NHWC)
    FAIL(TLM_ERR_INVALID_ARGUMENT, "pool: unknown layout %d", (int)d->layout);
  if (d->alg != TLM_POOL_MAX && d->alg != TLM_POOL_AVG)
    FAIL(TLM_ERR_INVALID_ARGUMENT, "pool: unknown algorithm %d", (int)d->alg);
  if (n_in != 1) FAIL(TLM_ERR_INVALID_ARGUMENT, "pool takes 1 input (src), got %d", n_in);
  if (n_out != 1) FAIL(TLM_ERR_INVALID_ARGUMENT, "pool writes 1 output, got %d", n_out);
  const tlm_tensor *X = &in[0], *Y = &out[0];
  tlm_status st;
  if ((st = check_tensor(X, "src", 3, err, errcap)) || (st = check_tensor(Y, "dst", 3, err, errcap)))
    return st;
  int nd = X->ndim, S = nd - 2;
  if (nd > 5) FAIL(TLM_ERR_INVALID_ARGUMENT, "src: %d dims; pooling takes 3 to 5", nd);
  if (Y->ndim != nd) FAIL(TLM_ERR_SHAPE_MISMATCH, "dst has %d dims, src has %d", Y->ndim, nd);
  int64_t xe[5], xs[5], ye[5], ys[5];
  tlm_act_view(X, d->layout, xe, xs);
  tlm_act_view(Y, d->layout, ye, ys);
  if (ye[0] != xe[0] || ye[1] != xe[1])
    FAIL(TLM_ERR_SHAPE_MISMATCH, "dst's N, C (%lld, %lld) differ from src's (%lld, %lld)",
         (long long)ye[0], (long long)ye[1], (long long)xe[0], (long long)xe[1]);
  static const char *const axn[3] = {"d", "h", "w"};
  int32_t kv[3], sv[3], pv[3];
  for (int j = 0; j < 3; j++) {
    int used = j >= 3 - S;
    kv[j] = used ? d->kernel[j] : 1;
    sv[j] = used ? d->stride[j] : 1;
    pv[j] = used ? d->pad[j] : 0;
    if (kv[j] == 0) { /* global */
      if (ye[2 + j] != 1)
        FAIL(TLM_ERR_SHAPE_MISMATCH, "pool: global pooling along %s needs a dst extent of 1, got "
             "%lld", axn[j], (long long)ye[2 + j]);
      sv[j] = 1, pv[j] = 0;
      continue;
    }
    if (kv[j] < 0 || kv[j] > 4096)
      FAIL(TLM_ERR_INVALID_ARGUMENT, "pool: kernel[%d] (%s) = %d out of 0..4096", j, axn[j], kv[j]);
    if (sv[j] < 1 || sv[j] > 65536)
      FAIL(TLM_ERR_INVALID_ARGUMENT, "pool: stride[%d] (%s) = %d out of 1..65536", j, axn[j], sv[j]);
    if (pv[j] < 0 || pv[j] >= kv[j])
      FAIL(TLM_ERR_INVALID_ARGUMENT, "pool: pad[%d] (%s) = %d out of 0..kernel-1", j, axn[j], pv[j]);
    if (ye[2 + j] > ((int64_t)1 << 40))
      FAIL(TLM_ERR_OVERFLOW, "pool: spatial extent along %s too large", axn[j]);
    /* the last window must reach into the input */
    if ((ye[2 + j] - 1) * sv[j] - pv[j] >= xe[2 + j])
      FAIL(TLM_ERR_SHAPE_MISMATCH, "pool: dst extent %lld along %s has windows entirely beyond "
           "the input (extent %lld)", (long long)ye[2 + j], axn[j], (long long)xe[2 + j]);
  }
  if (self_overlaps(Y)) FAIL(TLM_ERR_ALIASING, "dst's strides make distinct elements overlap");
  if (ranges_overlap(X, Y)) FAIL(TLM_ERR_ALIASING, "dst overlaps src");
  tlm_pool_task *t = &task->u.pool;
  task->kind = TLM_OP_POOL;
  task->dtype = TLM_F32;
  t->alg = (int32_t)d->alg;
  t->KD = kv[0], t->KH = kv[1], t->KW = kv[2];
  t->sd = sv[0], t->sh = sv[1], t->sw = sv[2];
  t->pd = pv[0], t->ph = pv[1], t->pw = pv[2];
  t->ndim_sp = S;
  t->C = xe[1];
  t->N = xe[0];
  t->ID = xe[2], t->IH = xe[3], t->IW = xe[4];
  t->OD = ye[2], t->OH = ye[3], t->OW = ye[4];
  memcpy(t->ss, xs, sizeof xs);
  memcpy(t->sdst, ys, sizeof ys);
  t->unit = (xs[1] == 1 || xe[1] == 1 ? TLM_UNIT_POOL_SRC_C : 0) |
            (ys[1] == 1 || ye[1] == 1 ? TLM_UNIT_POOL_DST_C : 0);
  args->dst = Y->data;
  args->src = X->data;
  args->N = t->N;
  args->ID = t->ID, args->IH = t->IH, args->IW = t->IW;
  args->OD = t->OD, args->OH = t->OH, args->OW = t->OW;
  memcpy(args->ss, xs, sizeof xs);
  memcpy(args->sd, ys, sizeof ys);
  return TLM_OK;
}
