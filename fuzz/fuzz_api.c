/* fuzz_api - the public API's operator and tensor descriptors (issue #20).
 *
 * The input is read (fdp.h) as an operator (kind and every field of its
 * descriptor, enums and floats included, mostly in range and sometimes
 * not), 0-6 input tensors and 0-2 outputs (dtype, rank, extents, dense or
 * arbitrary strides, data at an offset into one arena, NULL, or aliasing
 * another tensor). The descriptors go through the API-boundary checks
 * tlm_run() makes. A rejected call must give a documented status and a
 * message, and tlm_run() must return the same status (it does nothing
 * else then). An accepted one must yield a task whose space builds, whose
 * rule schedule the space accepts and whose keys can be made; for a
 * convolution, its matmul form must pass the matmul checks. Accepted calls
 * are not executed: their tensors would have to cover the extents the
 * fuzzer wrote (test_bad_input and the reference tests run kernels). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/conv_as_matmul.h"
#include "api/validate.h"
#include "cache/key.h"
#include "fdp.h"
#include "runtime/space.h"
#include "runtime/target.h"
#include "tlm.h"

#define REQUIRE(c) \
  do {             \
    if (!(c)) __builtin_trap(); \
  } while (0)

static float g_arena[1 << 16];
static tlm_runtime *g_rt;
static tlm_target g_target;

static void read_tensor(fdp *f, tlm_tensor *t, const tlm_tensor *others, int nothers) {
  memset(t, 0, sizeof *t);
  unsigned sel = fdp_u8(f);
  t->dtype = sel < 240 ? TLM_F32 : (tlm_dtype)(sel % 4);
  unsigned nd = fdp_u8(f);
  t->ndim = nd < 224 ? 1 + (int)(nd % 5) : (int)(nd % 10) - 2;
  int n = t->ndim >= 1 && t->ndim <= TLM_MAX_DIMS ? t->ndim : 0;
  for (int i = 0; i < n; i++) t->shape[i] = fdp_extent(f);
  unsigned smode = fdp_u8(f);
  if (smode < 192) { /* dense row-major */
    int64_t s = 1;
    for (int i = n - 1; i >= 0; i--) {
      t->strides[i] = s;
      if (t->shape[i] > 0 && __builtin_mul_overflow(s, t->shape[i], &s)) s = INT64_MAX;
    }
  } else if (smode < 224) { /* dense with one broadcast or transposed pair */
    int64_t s = 1;
    for (int i = n - 1; i >= 0; i--) {
      t->strides[i] = s;
      if (t->shape[i] > 0 && __builtin_mul_overflow(s, t->shape[i], &s)) s = INT64_MAX;
    }
    if (n >= 2 && (smode & 1)) {
      int64_t x = t->strides[n - 1];
      t->strides[n - 1] = t->strides[n - 2];
      t->strides[n - 2] = x;
    } else if (n) {
      t->strides[fdp_u8(f) % n] = 0;
    }
  } else {
    for (int i = 0; i < n; i++) t->strides[i] = (int64_t)((uint64_t)fdp_extent(f) - 2); /* negatives too */
  }
  unsigned dmode = fdp_u8(f);
  if (dmode < 200) t->data = g_arena + (fdp_bytes(f, 2) % (sizeof g_arena / sizeof g_arena[0]));
  else if (dmode < 224 && nothers > 0) t->data = others[dmode % nothers].data;
  else if (dmode < 240) t->data = NULL;
  else t->data = (char *)g_arena + 1; /* misaligned */
}

static void read_op(fdp *f, tlm_op *op) {
  memset(op, 0, sizeof *op);
  unsigned k = fdp_u8(f);
  op->kind = (tlm_op_kind)(k < 248 ? 1 + k % 9 : k % 12);
  switch (op->kind) {
  case TLM_OP_MATMUL:
    op->u.matmul.transpose_a = fdp_int(f);
    op->u.matmul.transpose_b = fdp_int(f);
    op->u.matmul.has_bias = fdp_int(f);
    op->u.matmul.activation = (tlm_activation)fdp_int(f);
    op->u.matmul.has_residual = fdp_int(f);
    break;
  case TLM_OP_ROPE: op->u.rope.style = (tlm_rope_style)fdp_int(f); break;
  case TLM_OP_ATTENTION:
    op->u.attention.scale = fdp_float(f);
    op->u.attention.causal = fdp_int(f);
    break;
  case TLM_OP_SOFTMAX:
  case TLM_OP_LAYERNORM:
  case TLM_OP_RMSNORM:
    op->u.rownorm.eps = fdp_float(f);
    op->u.rownorm.scale = fdp_float(f);
    op->u.rownorm.causal = fdp_int(f);
    break;
  case TLM_OP_CONV:
    op->u.conv.layout = (tlm_layout)fdp_int(f);
    op->u.conv.weight_layout = (tlm_weight_layout)fdp_int(f);
    op->u.conv.groups = fdp_int(f);
    for (int i = 0; i < 3; i++) {
      op->u.conv.stride[i] = fdp_int(f);
      op->u.conv.pad[i] = fdp_int(f);
      op->u.conv.dilation[i] = fdp_int(f);
    }
    op->u.conv.has_bias = fdp_int(f);
    op->u.conv.has_scale_shift = fdp_int(f);
    op->u.conv.has_residual = fdp_int(f);
    op->u.conv.activation = (tlm_activation)fdp_int(f);
    break;
  case TLM_OP_POOL:
    op->u.pool.layout = (tlm_layout)fdp_int(f);
    op->u.pool.alg = (tlm_pool_alg)fdp_int(f);
    for (int i = 0; i < 3; i++) {
      op->u.pool.kernel[i] = fdp_int(f);
      op->u.pool.stride[i] = fdp_int(f);
      op->u.pool.pad[i] = fdp_int(f);
    }
    break;
  case TLM_OP_ELTWISE:
    op->u.eltwise.activation = (tlm_activation)fdp_int(f);
    op->u.eltwise.binary = (tlm_binary)fdp_int(f);
    break;
  default:
    break;
  }
}

static void accepted(const tlm_task *task) {
  static tlm_space s;
  if (tlm_space_init(&s, task, &g_target)) return;
  tlm_schedule rule;
  tlm_space_default(&s, &rule);
  REQUIRE(tlm_space_accepts(&s, &rule));
  tlm_key k;
  tlm_key_shape(&k, task, &g_target, 0);
  tlm_key_schedule(&k, task, &g_target, &rule);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_rt) {
    tlm_config cfg;
    tlm_config_init(&cfg);
    cfg.cache_dir = "none";
    cfg.model_path = "none";
    cfg.num_threads = 1;
    if (tlm_create(&cfg, &g_rt) != TLM_OK) __builtin_trap();
    tlm_target_detect(&g_target);
  }
  fdp f = {data, size};
  tlm_op op;
  read_op(&f, &op);
  tlm_tensor in[6], out[2];
  unsigned ni = fdp_u8(&f), no = fdp_u8(&f);
  int n_in = ni < 240 ? (int)(ni % 7) : (int)(ni % 9) - 2;
  int n_out = no < 224 ? 1 : (int)(no % 4) - 1;
  int nin_read = n_in > 0 ? (n_in < 6 ? n_in : 6) : 0;
  int nout_read = n_out > 0 ? (n_out < 2 ? n_out : 2) : 0;
  for (int i = 0; i < nin_read; i++) read_tensor(&f, &in[i], in, i);
  for (int i = 0; i < nout_read; i++) read_tensor(&f, &out[i], in, nin_read);
  if (!nout_read) memset(out, 0, sizeof out);
  if (n_in > 6) n_in = 6;
  if (n_out > 2) n_out = 2;

  tlm_task task;
  char err[512];
  err[0] = 0;
  tlm_status st;
  tlm_any_args args;
  switch (op.kind) {
  case TLM_OP_MATMUL:
    st = tlm_validate_matmul(&op, in, n_in, out, n_out, &task, &args.mm, err, sizeof err);
    break;
  case TLM_OP_SOFTMAX:
  case TLM_OP_LAYERNORM:
  case TLM_OP_RMSNORM:
  case TLM_OP_ELTWISE:
    st = tlm_validate_row(&op, in, n_in, out, n_out, &task, &args.row, err, sizeof err);
    break;
  case TLM_OP_ROPE:
    st = tlm_validate_rope(&op, in, n_in, out, n_out, &task, &args.row, err, sizeof err);
    break;
  case TLM_OP_ATTENTION:
    st = tlm_validate_attention(&op, in, n_in, out, n_out, &task, &args.attn, err, sizeof err);
    break;
  case TLM_OP_POOL:
    st = tlm_validate_pool(&op, in, n_in, out, n_out, &task, &args.pool, err, sizeof err);
    break;
  case TLM_OP_CONV:
    st = tlm_validate_conv(&op, in, n_in, out, n_out, &task, &args.conv, err, sizeof err);
    break;
  default:
    st = TLM_ERR_INVALID_ARGUMENT;
    snprintf(err, sizeof err, "unknown kind");
    break;
  }
  REQUIRE(st >= TLM_OK && st <= TLM_ERR_INTERNAL);
  if (getenv("TLM_FUZZ_VERBOSE")) /* for corpus upkeep: what each input reached */
    fprintf(stderr, "fuzz_api: kind %d, %d in, %d out: %s%s%s\n", (int)op.kind, n_in, n_out,
            tlm_status_str(st), err[0] ? ": " : "", err);
  if (st != TLM_OK) {
    REQUIRE(err[0]);
    /* tlm_run refuses it the same way, with a message, before any work */
    tlm_status rs = tlm_run(g_rt, &op, in, n_in, out, n_out);
    REQUIRE(rs == st);
    const char *msg = tlm_last_error(g_rt);
    REQUIRE(msg && msg[0]);
    return 0;
  }
  REQUIRE(task.kind == (int32_t)op.kind);
  accepted(&task);
  if (op.kind == TLM_OP_CONV) {
    tlm_op mop;
    tlm_tensor min[4], mout;
    int mn = 0;
    (void)tlm_conv_gather_bytes(&task, &op, in, out);
    if (tlm_conv_as_matmul(&task, &op, in, out, NULL, &mop, min, &mn, &mout)) {
      tlm_task mtask;
      tlm_mm_args margs;
      char merr[512];
      if (tlm_validate_matmul(&mop, min, mn, &mout, 1, &mtask, &margs, merr, sizeof merr) ==
          TLM_OK)
        accepted(&mtask);
    }
  }
  return 0;
}
