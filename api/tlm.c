/* tlm.c - the public entry points declared in tlm.h. */
#include "tlm.h"

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cache/disk.h"
#include "../engine/engine.h"
#include "../engine/gpu_engine.h"
#include "conv_as_matmul.h"
#include "validate.h"
#include "../runtime/status.h"
#include "../runtime/threadpool.h"

const char *tlm_version(void) { return TLM_VERSION_TEXT; }

int tlm_version_number(void) { return TLM_VERSION_NUMBER; }

const char *tlm_status_str(tlm_status s) { return tlm_status_text(s); }

/* ---- per-thread last error ------------------------------------------------ */


const char *tlm_last_error(const tlm_runtime *rt) { return tlm_error_message(rt); }

static void clear_error(const tlm_runtime *rt) { tlm_error_clear(rt, 0); }

/* ---- configuration -------------------------------------------------------- */

/* Parses a decimal integer in [lo, hi]; returns 0 and *out, or -1. */
static int env_int(const char *name, long long lo, long long hi, long long *out) {
  const char *v = getenv(name);
  if (!v || !*v) return 1;
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || *end || x < lo || x > hi) return -1;
  *out = x;
  return 0;
}

/* TLM_PASSES: a tlm_passes, -1 when unset, -2 when not a known name */
static int passes_parse(const char *s) {
  static const char *const names[] = {"fast", "O1", "O2", "O3"};
  if (!s || !*s) return -1;
  for (int i = 0; i < 4; i++)
    if (!strcmp(s, names[i])) return i;
  return -2;
}

/* Every integer environment variable the runtime reads, with its range and
 * the tlm_config field it sets: one table for tlm_config_init and for the
 * warnings tlm_create gives about malformed values. */
typedef enum { FIELD_INT, FIELD_SIZE, FIELD_FLAG_OFF, FIELD_NONE } field_kind;
static const struct env_var {
  const char *name;
  long long lo, hi;
  size_t offset; /* in tlm_config */
  field_kind kind; /* FIELD_FLAG_OFF: the field is set to (value == 0);
                    * FIELD_NONE: read elsewhere (TLM_CACHE_DISK_BYTES) */
} k_env[] = {
    {"TLM_NUM_THREADS", 0, 1024, offsetof(tlm_config, num_threads), FIELD_INT},
    {"TLM_VERBOSE", 0, 4, offsetof(tlm_config, verbose), FIELD_INT},
    {"TLM_CACHE_CAPACITY", 0, (long long)1 << 40, offsetof(tlm_config, cache_capacity), FIELD_SIZE},
    {"TLM_CACHE_CAPACITY_BYTES", 0, (long long)1 << 50, offsetof(tlm_config, cache_capacity_bytes),
     FIELD_SIZE},
    {"TLM_KERNEL_REUSE", 0, 1, offsetof(tlm_config, disable_kernel_reuse), FIELD_FLAG_OFF},
    {"TLM_CONV_AS_MATMUL", 0, 1, offsetof(tlm_config, disable_conv_as_matmul), FIELD_FLAG_OFF},
    {"TLM_ASYNC", 0, 1, offsetof(tlm_config, async_compile), FIELD_INT},
    {"TLM_TIER0", -1, 1, offsetof(tlm_config, tier0), FIELD_INT},
    {"TLM_SPIN_US", 0, 1000000, offsetof(tlm_config, spin_us), FIELD_INT},
    {"TLM_TUNE", 0, TLM_TUNE_MAX, offsetof(tlm_config, tune_k), FIELD_INT},
    {"TLM_CUDA_DEVICE", 0, 1023, offsetof(tlm_config, cuda_device), FIELD_INT},
    {"TLM_PREPACK_BYTES", 0, (long long)1 << 50, offsetof(tlm_config, prepack_bytes), FIELD_SIZE},
    {"TLM_CACHE_DISK_BYTES", 0, (long long)1 << 50, 0, FIELD_NONE},
};

_Static_assert(sizeof(tlm_log_level) == sizeof(int), "verbose is set as an int");

/* A quarter of the memory the process may use (tlm_memory_bytes: physical
 * memory or a smaller cgroup limit): the copies duplicate weights the
 * caller keeps, so a model whose weights take up to a quarter of it is
 * packed whole and half stays for everything else. 1 GiB where it cannot
 * be read. */
static size_t default_prepack_bytes(void) {
  uint64_t m = tlm_memory_bytes();
  return m ? (size_t)(m / 4) : (size_t)1 << 30;
}

tlm_status tlm_config_init(tlm_config *c) {
  if (!c) return TLM_ERR_NULL_POINTER;
  memset(c, 0, sizeof *c);
  c->verbose = TLM_LOG_NONE;
  c->async_compile = 1; /* tiered: a new shape never waits on a compile it can avoid */
  c->prepack_bytes = default_prepack_bytes();
  for (size_t i = 0; i < sizeof k_env / sizeof k_env[0]; i++) {
    const struct env_var *e = &k_env[i];
    long long x;
    if (e->kind == FIELD_NONE || env_int(e->name, e->lo, e->hi, &x) != 0) continue;
    char *field = (char *)c + e->offset;
    if (e->kind == FIELD_SIZE) {
      size_t v = (size_t)x;
      memcpy(field, &v, sizeof v);
    } else {
      int v = e->kind == FIELD_FLAG_OFF ? x == 0 : (int)x;
      memcpy(field, &v, sizeof v);
    }
  }
  const char *isa = getenv("TLM_ISA");
  int i = tlm_isa_parse(isa);
  if (i >= -1) c->isa = i + 1; /* tlm_isa -> tlm_cpu_isa; -1 (native) -> 0 */
  int ps = passes_parse(getenv("TLM_PASSES"));
  if (ps >= 0) c->passes = ps;
  const char *d = getenv("TLM_CACHE_DIR");
  if (d && *d) c->cache_dir = d;
  const char *m = getenv("TLM_MODEL");
  if (m && *m) c->model_path = m;
  return TLM_OK;
}

static void warn_bad_env(const tlm_runtime *rt) {
  for (size_t i = 0; i < sizeof k_env / sizeof k_env[0]; i++) {
    long long x;
    if (env_int(k_env[i].name, k_env[i].lo, k_env[i].hi, &x) < 0)
      tlm_log(rt, TLM_LOG_WARN, "ignoring %s='%s': expected an integer in %lld..%lld",
              k_env[i].name, getenv(k_env[i].name), k_env[i].lo, k_env[i].hi);
  }
  if (passes_parse(getenv("TLM_PASSES")) == -2)
    tlm_log(rt, TLM_LOG_WARN, "ignoring TLM_PASSES='%s': expected fast, O1, O2 or O3",
            getenv("TLM_PASSES"));
  if (tlm_isa_parse(getenv("TLM_ISA")) == -2)
    tlm_log(rt, TLM_LOG_WARN, "ignoring TLM_ISA='%s': expected native, avx512, avx2, sse or scalar",
            getenv("TLM_ISA"));
}

/* ---- create / destroy ------------------------------------------------------ */

tlm_status tlm_create(const tlm_config *config, tlm_runtime **out) {
  if (!out) return tlm_set_error(NULL, TLM_ERR_NULL_POINTER, "out is NULL");
  *out = NULL;
  tlm_config cfg;
  if (config)
    cfg = *config;
  else
    tlm_config_init(&cfg);
  if (cfg.num_threads < 0 || cfg.num_threads > 1024)
    return tlm_set_error(NULL, TLM_ERR_INVALID_ARGUMENT, "num_threads must be in 0..1024");
  if ((int)cfg.verbose < 0 || cfg.verbose > TLM_LOG_DEBUG)
    return tlm_set_error(NULL, TLM_ERR_INVALID_ARGUMENT, "verbose must be in 0..4");
  if (cfg.tune_k < 0 || cfg.tune_k > TLM_TUNE_MAX)
    return tlm_set_error(NULL, TLM_ERR_INVALID_ARGUMENT, "tune_k must be in 0..TLM_TUNE_MAX");
  if (cfg.passes < TLM_PASSES_FAST || cfg.passes > TLM_PASSES_O3)
    return tlm_set_error(NULL, TLM_ERR_INVALID_ARGUMENT, "passes must be a tlm_passes (0..3)");
  if (cfg.isa < TLM_CPU_ISA_NATIVE || cfg.isa > TLM_CPU_ISA_AVX512)
    return tlm_set_error(NULL, TLM_ERR_INVALID_ARGUMENT, "isa must be a tlm_cpu_isa (0..4)");
  if (cfg.cuda_device < 0 || cfg.cuda_device > 1023)
    return tlm_set_error(NULL, TLM_ERR_INVALID_ARGUMENT, "cuda_device must be in 0..1023");
  if (cfg.tier0 < -1 || cfg.tier0 > 1)
    return tlm_set_error(NULL, TLM_ERR_INVALID_ARGUMENT, "tier0 must be -1, 0 or 1");
  if (cfg.spin_us < 0 || cfg.spin_us > 1000000)
    return tlm_set_error(NULL, TLM_ERR_INVALID_ARGUMENT, "spin_us must be in 0..1000000");
  long long disk_cap = 256ll << 20, x;
  if (env_int("TLM_CACHE_DISK_BYTES", 0, (long long)1 << 50, &x) == 0) disk_cap = x;
  tlm_runtime *rt;
  char err[TLM_ERRMSG] = "";
  tlm_status st = tlm_engine_create(&cfg, (int64_t)disk_cap, &rt, err, sizeof err);
  if (st != TLM_OK) return tlm_set_error(NULL, st, err);
  warn_bad_env(rt);
  if (cfg.verbose >= TLM_LOG_INFO) {
    char ts[160];
    tlm_log(rt, TLM_LOG_INFO, "tlm %s, %d threads, target %s, cpu %s", tlm_version(), rt->nthreads,
            tlm_target_str(&rt->target, ts, sizeof ts), tlm_jit_cpu(rt->jit));
  }
  *out = rt;
  return TLM_OK;
}

void tlm_destroy(tlm_runtime *rt) { tlm_engine_destroy(rt); }

/* ---- tensors and ops ------------------------------------------------------- */

tlm_status tlm_tensor_dense(tlm_tensor *t, tlm_dtype dtype, int ndim, const int64_t *shape,
                            void *data) {
  if (!t || !shape) return TLM_ERR_NULL_POINTER;
  if (ndim < 1 || ndim > TLM_MAX_DIMS) return TLM_ERR_INVALID_ARGUMENT;
  memset(t, 0, sizeof *t);
  t->dtype = dtype;
  t->ndim = ndim;
  t->data = data;
  int64_t stride = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    if (shape[i] < 1) return TLM_ERR_INVALID_ARGUMENT;
    t->shape[i] = shape[i];
    t->strides[i] = stride;
    if (__builtin_mul_overflow(stride, shape[i], &stride)) return TLM_ERR_OVERFLOW;
  }
  return TLM_OK;
}

/* every byte zero (the hit path compares ops with memcmp), then the kind */
static tlm_op op_of(tlm_op_kind kind) {
  tlm_op op;
  memset(&op, 0, sizeof op);
  op.kind = kind;
  return op;
}

tlm_op tlm_op_conv(tlm_layout layout) {
  tlm_op op = op_of(TLM_OP_CONV);
  op.u.conv.layout = layout;
  op.u.conv.weight_layout = TLM_WEIGHTS_OIHW;
  op.u.conv.groups = 1;
  for (int i = 0; i < 3; i++) op.u.conv.stride[i] = op.u.conv.dilation[i] = 1;
  return op;
}

tlm_op tlm_op_pool(tlm_layout layout, tlm_pool_alg alg) {
  tlm_op op = op_of(TLM_OP_POOL);
  op.u.pool.layout = layout;
  op.u.pool.alg = alg;
  for (int i = 0; i < 3; i++) op.u.pool.kernel[i] = op.u.pool.stride[i] = 1;
  return op;
}

tlm_op tlm_op_eltwise(tlm_activation activation, tlm_binary binary) {
  tlm_op op = op_of(TLM_OP_ELTWISE);
  op.u.eltwise = (tlm_eltwise_desc){activation, binary};
  return op;
}

tlm_op tlm_op_rope(tlm_rope_style style) {
  tlm_op op = op_of(TLM_OP_ROPE);
  op.u.rope.style = style;
  return op;
}

tlm_op tlm_op_attention(int causal) {
  tlm_op op = op_of(TLM_OP_ATTENTION);
  op.u.attention.causal = causal;
  return op;
}

tlm_op tlm_op_rownorm(tlm_op_kind kind) {
  tlm_op op = op_of(kind);
  op.u.rownorm.eps = 1e-5f;
  op.u.rownorm.scale = 1.0f;
  return op;
}

tlm_op tlm_op_matmul(void) { return op_of(TLM_OP_MATMUL); }

/* ---- run ---------------------------------------------------------------- */

/* The calling thread's last successful run, for the hit fast path: a call
 * with the same runtime, op and tensor descriptors (data pointers aside)
 * skips validation, hashing and lookup; only the data pointers are checked
 * (NULL, alignment, overlap) and the plan is rerun if nothing was evicted. */
typedef struct memo {
  uint64_t serial; /* the runtime's serial, 0 = empty */
  tlm_op op;
  int n_in;
  tlm_tensor in[4], out; /* data fields zeroed */
  uintptr_t span[5];     /* bytes each tensor reaches from its data pointer */
  tlm_task task;
  tlm_mm_args args;
  tlm_plan *plan;
  uint64_t epoch;
} memo;

static _Thread_local memo tls_memo;

static int same_desc(const tlm_tensor *a, const tlm_tensor *b) {
  return memcmp(a, b, offsetof(tlm_tensor, data)) == 0;
}

static uintptr_t span_bytes(const tlm_tensor *t) {
  uintptr_t off = 0;
  for (int i = 0; i < t->ndim; i++) off += (uintptr_t)(t->shape[i] - 1) * (uintptr_t)t->strides[i];
  return (off + 1) * sizeof(float);
}

static int disjoint(const void *a, uintptr_t na, const void *b, uintptr_t nb) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x + na <= y || y + nb <= x;
}

/* 1 if this call could be served from the memo (and was run) */
static int run_memo(tlm_runtime *rt, const tlm_op *op, const tlm_tensor *in, int n_in,
                    const tlm_tensor *out, int n_out) {
  memo *m = &tls_memo;
  if (m->serial != rt->serial || n_out != 1 || n_in != m->n_in ||

      memcmp(op, &m->op, sizeof *op) || !same_desc(out, &m->out))
    return 0;
  for (int i = 0; i < n_in; i++)
    if (!same_desc(&in[i], &m->in[i])) return 0;
  const void *c = out->data;
  if (!c || (uintptr_t)c % sizeof(float)) return 0;
  /* an in-place residual (has_residual 3) must be C again, any other
   * input apart from C */
  int in_place = m->task.u.mm.has_residual == 3 ? 2 + m->task.u.mm.has_bias : -1;
  for (int i = 0; i < n_in; i++)
    if (!in[i].data || (uintptr_t)in[i].data % sizeof(float) ||
        (i == in_place ? in[i].data != c : !disjoint(c, m->span[4], in[i].data, m->span[i])))
      return 0; /* the slow path reports the error */
  tlm_mm_args args = m->args;
  args.a = in[0].data;
  args.b = in[1].data;
  int k = 2;
  if (m->task.u.mm.has_bias) args.bias = in[k++].data;
  if (m->task.u.mm.has_residual) args.res = in[k].data;
  args.c = out->data;
  /* the plan was made for B constant or not: another B must be the same */
  if (tlm_prepack_b_constant(rt, &m->task, &args) != m->task.u.mm.b_const) return 0;
  return tlm_engine_rerun(rt, m->plan, m->epoch, &m->task, &args);
}

static void remember_run(tlm_runtime *rt, const tlm_op *op, const tlm_tensor *in, int n_in,
                         const tlm_tensor *out, const tlm_task *task, const tlm_mm_args *args,
                         tlm_plan *plan, uint64_t epoch) {
  memo *m = &tls_memo;
  if (n_in > 4) return;
  m->serial = rt->serial;
  m->op = *op;
  m->n_in = n_in;
  for (int i = 0; i < n_in; i++) {
    m->in[i] = in[i];
    m->in[i].data = NULL;
    m->span[i] = span_bytes(&in[i]);
  }
  m->out = *out;
  m->out.data = NULL;
  m->span[4] = span_bytes(out);
  m->task = *task;
  m->args = *args;
  m->plan = plan;
  m->epoch = epoch;
}

/* ---- measured top-k: private copies of a call's operands ------------------------------ */

/* the API-boundary checks of any family (the task and the kernel's args) */
static tlm_status validate_any(const tlm_op *op, const tlm_tensor *in, int n_in,
                               const tlm_tensor *out, int n_out, tlm_task *task, tlm_any_args *a,
                               char *err, int errcap) {
  switch (op->kind) {
  case TLM_OP_MATMUL: return tlm_validate_matmul(op, in, n_in, out, n_out, task, &a->mm, err, errcap);
  case TLM_OP_SOFTMAX:
  case TLM_OP_LAYERNORM:
  case TLM_OP_RMSNORM:
  case TLM_OP_ELTWISE: return tlm_validate_row(op, in, n_in, out, n_out, task, &a->row, err, errcap);
  case TLM_OP_ROPE: return tlm_validate_rope(op, in, n_in, out, n_out, task, &a->row, err, errcap);
  case TLM_OP_ATTENTION:
    return tlm_validate_attention(op, in, n_in, out, n_out, task, &a->attn, err, errcap);
  case TLM_OP_POOL: return tlm_validate_pool(op, in, n_in, out, n_out, task, &a->pool, err, errcap);
  case TLM_OP_CONV: return tlm_validate_conv(op, in, n_in, out, n_out, task, &a->conv, err, errcap);
  default:
    snprintf(err, (size_t)errcap, "unknown operator kind %d", (int)op->kind);
    return TLM_ERR_INVALID_ARGUMENT;
  }
}

/* Most bytes of operand copies one tuning job may hold. */
#define TUNE_COPY_MAX ((size_t)256 << 20)

/* Channel blocks (tlm_conv_oc_blocks): rewrites task and args into one
 * block's, oc_blocks set and the weight strides those of the packed copy;
 * the engine runs the blocks. require_const: only when the weights lie in
 * memory declared constant, where the copy is made once; the tuner's
 * private copies are not (their blocks then read the copies through
 * their own strides, as the engine does when the copy does not fit the
 * prepack limit). Returns 1 when task and args were rewritten. */
static int conv_oc_blocked(tlm_runtime *rt, const tlm_op *op, tlm_task *task, tlm_conv_args *args,
                           int require_const) {
  tlm_conv_task *t = &task->u.conv;
  int blocks = rt->cfg.disable_conv_as_matmul ? 0 : tlm_conv_oc_blocks(task, op, &rt->target);
  if (blocks < 2) return 0;
  if (require_const && !tlm_prepack_conv_constant(rt, t, args->wei)) return 0;
  const int64_t W = TLM_CONV_OC_BLOCK;
  t->oc_blocks = blocks;
  t->OCg = TLM_CONV_OC_BLOCK;
  t->sw_[0] = 1;
  t->sw_[1] = W;
  t->sw_[2] = (int64_t)t->KH * t->KW * t->ICg * W;
  t->sw_[3] = (int64_t)t->KW * t->ICg * W;
  t->sw_[4] = (int64_t)t->ICg * W;
  /* strides as run-time values: the blocks read the packed copy or, past
   * the prepack limit, the caller's weights; and dst pixels lie the whole
   * OC apart, not a block's */
  t->unit &= ~(TLM_UNIT_CONV_WEI_HWIO | TLM_UNIT_CONV_DST_PIX);
  tlm_conv_args_extents(args, t);
  return 1;
}

/* Queues the shape's tuning (tlm_engine_tune_enqueue) with private copies
 * of this call's operands: a tensor sharing an earlier one's data (in
 * place) shares its copy. Best effort: without memory, or above
 * TUNE_COPY_MAX, the shape is not tuned. `task` is what the engine ran. */
static void tune_request(tlm_runtime *rt, const tlm_op *op, const tlm_tensor *in, int n_in,
                         const tlm_tensor *out, const tlm_task *task, int conv_order) {
  enum { MAXB = 8 };
  if (n_in < 1 || n_in > MAXB - 1) return;
  tlm_tensor t[MAXB];
  void *bufs[MAXB] = {0};
  size_t sizes[MAXB] = {0}, total = 0;
  int is_in[MAXB] = {0}, is_out[MAXB] = {0}, nb = 0, of[MAXB];
  const void *orig[MAXB];
  for (int i = 0; i <= n_in; i++) {
    const tlm_tensor *src = i < n_in ? &in[i] : out;
    t[i] = *src;
    orig[i] = src->data;
    int shared = -1;
    for (int e = 0; e < i && shared < 0; e++)
      if (orig[e] == src->data) { /* the same memory (in place): one copy, same span */
        if (span_bytes(&t[e]) != span_bytes(src)) goto drop;
        shared = of[e];
      }
    if (shared >= 0) {
      of[i] = shared;
    } else {
      size_t bytes = span_bytes(src);
      total += bytes;
      if (total > TUNE_COPY_MAX) goto drop;
      /* each copy on a cache line: constant weights off one are read
       * from an aligned copy in the run too (tlm_prepack_conv_aligned_locked),
       * and no candidate pays for split loads the others do not */
      bufs[nb] = aligned_alloc(64, ((bytes ? bytes : 1) + 63) & ~(size_t)63);
      if (!bufs[nb]) goto drop;
      sizes[nb] = bytes;
      if (i < n_in) memcpy(bufs[nb], src->data, bytes);
      else memset(bufs[nb], 0, bytes);
      of[i] = nb++;
    }
    if (i < n_in) is_in[of[i]] = 1;
    else is_out[of[i]] = 1;
    t[i].data = bufs[of[i]];
  }
  tlm_task t2;
  tlm_any_args a;
  char err[TLM_ERRMSG];
  if ((op->kind == TLM_OP_MATMUL
           ? tlm_validate_matmul_order(op, t, n_in, &t[n_in], 1, conv_order, &t2, &a.mm, err,
                                       sizeof err)
           : validate_any(op, t, n_in, &t[n_in], 1, &t2, &a, err, sizeof err)) != TLM_OK)
    goto drop;
  if (t2.kind == TLM_OP_CONV && task->u.conv.oc_blocks > 1 &&
      !conv_oc_blocked(rt, op, &t2, &a.conv, 0))
    goto drop;
  if (t2.kind == TLM_OP_MATMUL) t2.u.mm.b_const = task->u.mm.b_const;
  if (memcmp(&t2, task, sizeof t2)) goto drop; /* the copies' layout is the caller's */
  if (tlm_engine_tune_enqueue(rt, &t2, &a, sizeof a, bufs, sizes, is_in, is_out, nb) == 0) return;
drop:
  for (int i = 0; i < nb; i++) free(bufs[i]);
}

/* Where a call's tensors live: TLM_DEVICE_CPU when every one is on the
 * host (or the counts are out of range: validation reports them),
 * TLM_DEVICE_CUDA when every one is on the GPU, -1 mixed, -2 a device
 * value that is neither (or reserved_ not 0). */
static int call_device(const tlm_tensor *in, int n_in, const tlm_tensor *out, int n_out) {
  if (!in || !out || n_in < 0 || n_in > 8 || n_out < 0 || n_out > 8) return TLM_DEVICE_CPU;
  int cpu = 0, gpu = 0;
  for (int i = 0; i < n_in + n_out; i++) {
    const tlm_tensor *t = i < n_in ? &in[i] : &out[i - n_in];
    int32_t d = t->device;
    if (t->reserved_) return -2;
    if (d == TLM_DEVICE_CPU) cpu++;
    else if (d == TLM_DEVICE_CUDA) gpu++;
    else return -2;
  }
  return !gpu ? TLM_DEVICE_CPU : cpu ? -1 : TLM_DEVICE_CUDA;
}

/* The error of a call_device result < 0. */
static tlm_status device_error(tlm_runtime *rt, int dev) {
  return tlm_set_error(rt, TLM_ERR_INVALID_ARGUMENT,
                       dev == -1 ? "tensors of one call on different devices"
                                 : "a tensor's device is neither TLM_DEVICE_CPU nor TLM_DEVICE_CUDA, or its "
                                   "reserved_ field is not 0");
}

/* A call on GPU tensors (tlm_run_on_stream). */
static tlm_status run_gpu(tlm_runtime *rt, const tlm_op *op, const tlm_tensor *in, int n_in,
                          const tlm_tensor *out, int n_out, void *stream, int sync) {
  char err[TLM_ERRMSG];
  if (!op) return tlm_set_error(rt, TLM_ERR_NULL_POINTER, "op is NULL");
  /* every kind validated as on the host, so a bad call gets the same
   * status wherever its tensors live */
  tlm_task task;
  tlm_any_args a;
  tlm_status st = validate_any(op, in, n_in, out, n_out, &task, &a, err, sizeof err);
  if (st != TLM_OK) return tlm_set_error(rt, st, err);
  int64_t args[TLM_GPU_MAX_ARGS];
  if (op->kind == TLM_OP_MATMUL && task.u.mm.has_residual == 3)
    return tlm_set_error(rt, TLM_ERR_UNSUPPORTED,
                         "GPU tensors: a residual that is C itself (in place) runs on the host "
                         "only so far; pass a separate residual");
  if (op->kind == TLM_OP_MATMUL) {
    int k = 2;
    uint64_t bias = task.u.mm.has_bias ? (uint64_t)(uintptr_t)in[k++].data : 0;
    uint64_t res = task.u.mm.has_residual ? (uint64_t)(uintptr_t)in[k].data : 0;
    tlm_gpu_mm_args(&task, (uint64_t)(uintptr_t)in[0].data, (uint64_t)(uintptr_t)in[1].data,
                    (uint64_t)(uintptr_t)out[0].data, bias, res, args);
  } else if (tlm_gpu_supports(&task)) {
    const tlm_row_args *ra = &a.row;
    tlm_gpu_row_args(&task, (uint64_t)(uintptr_t)ra->x, (uint64_t)(uintptr_t)ra->y,
                     (uint64_t)(uintptr_t)ra->gamma, (uint64_t)(uintptr_t)ra->beta, ra->rows,
                     ra->cols, ra->mrows, ra->sx, ra->sy, ra->sg, ra->sb, args);
  } else {
    return tlm_set_error(rt, TLM_ERR_UNSUPPORTED,
                         "GPU tensors: matmul, softmax, layernorm and rmsnorm have GPU kernels so "
                         "far");
  }
  /* the bytes each operand slot reaches, for the driver's pointer checks */
  size_t spans[5] = {0};
  if (op->kind == TLM_OP_MATMUL) {
    int k = 2;
    spans[0] = span_bytes(&in[0]), spans[1] = span_bytes(&in[1]), spans[2] = span_bytes(&out[0]);
    if (task.u.mm.has_bias) spans[3] = span_bytes(&in[k++]);
    if (task.u.mm.has_residual) spans[4] = span_bytes(&in[k]);
  } else {
    spans[0] = span_bytes(&in[0]), spans[1] = span_bytes(&out[0]);
    for (int i = 1; i < n_in && i < 3; i++) spans[1 + i] = span_bytes(&in[i]);
  }
  st = tlm_gpu_run(rt, &task, args, spans, stream, sync, err, sizeof err);
  if (st != TLM_OK) return tlm_set_error(rt, st, err);
  atomic_fetch_add_explicit(&rt->runs, 1, memory_order_relaxed);
  clear_error(rt);
  return TLM_OK;
}

tlm_status tlm_run_on_stream(tlm_runtime *rt, const tlm_op *op, const tlm_tensor *inputs,
                             int n_inputs, const tlm_tensor *outputs, int n_outputs,
                             void *cuda_stream) {
  if (!rt) return tlm_set_error(NULL, TLM_ERR_NULL_POINTER, "runtime is NULL");
  /* missing pointers and counts out of range: tlm_run's statuses */
  if (!op || !inputs || !outputs || n_inputs < 0 || n_inputs > 8 || n_outputs < 0 || n_outputs > 8)
    return tlm_run(rt, op, inputs, n_inputs, outputs, n_outputs);
  int dev = call_device(inputs, n_inputs, outputs, n_outputs);
  if (dev == TLM_DEVICE_CPU) {
    if (cuda_stream)
      return tlm_set_error(rt, TLM_ERR_INVALID_ARGUMENT,
                           "a CUDA stream was given for tensors in host memory");
    return tlm_run(rt, op, inputs, n_inputs, outputs, n_outputs);
  }
  if (dev < 0) return device_error(rt, dev);
  return run_gpu(rt, op, inputs, n_inputs, outputs, n_outputs, cuda_stream, 0);
}

/* rows [begin, end) of a convolution's copy for a matmul (tlm_run's pool job) */
typedef struct gather_ctx {
  const tlm_task *task;
  const tlm_op *op;
  const tlm_tensor *in, *out;
  float *buf;
} gather_ctx;

static void gather_chunk(void *ctx, int64_t begin, int64_t end, int tid) {
  (void)tid;
  const gather_ctx *g = ctx;
  tlm_conv_gather_range(g->task, g->op, g->in, g->out, g->buf, begin, end);
}

tlm_status tlm_run(tlm_runtime *rt, const tlm_op *op, const tlm_tensor *inputs, int n_inputs,
                   const tlm_tensor *outputs, int n_outputs) {
  char err[TLM_ERRMSG];
  if (!rt) return tlm_set_error(NULL, TLM_ERR_NULL_POINTER, "runtime is NULL");
  int dev = call_device(inputs, n_inputs, outputs, n_outputs);
  if (dev != TLM_DEVICE_CPU) {
    if (dev < 0) return device_error(rt, dev);
    return run_gpu(rt, op, inputs, n_inputs, outputs, n_outputs, NULL, 1);
  }
  if (op && inputs && outputs && op->kind == TLM_OP_MATMUL &&
      run_memo(rt, op, inputs, n_inputs, outputs, n_outputs)) {
    atomic_fetch_add_explicit(&rt->runs, 1, memory_order_relaxed);
    tlm_error_clear(rt, 0);
    return TLM_OK;
  }
  if (!op || !inputs || !outputs)
    return tlm_set_error(rt, TLM_ERR_NULL_POINTER,
                         !op ? "op is NULL" : !inputs ? "inputs is NULL" : "outputs is NULL");
  tlm_task task;
  tlm_status st;
  tlm_plan *plan = NULL;
  uint64_t epoch = 0;
  int tune = 0; /* tlm_config.tune_k: this call queues its shape's tuning */
  if (op->kind == TLM_OP_MATMUL) {
    tlm_mm_args args;
    st = tlm_validate_matmul(op, inputs, n_inputs, outputs, n_outputs, &task, &args, err,
                             sizeof err);
    if (st != TLM_OK) return tlm_set_error(rt, st, err);
    task.u.mm.b_const = tlm_prepack_b_constant(rt, &task, &args);
    st = tlm_engine_run(rt, &task, &args, &plan, &epoch, &tune, err, sizeof err);
    if (st != TLM_OK) return tlm_set_error(rt, st, err);
    remember_run(rt, op, inputs, n_inputs, outputs, &task, &args, plan, epoch);
    if (tune) tune_request(rt, op, inputs, n_inputs, outputs, &task, 0);
  } else if (op->kind == TLM_OP_CONV) {
    tlm_conv_args args;
    st = tlm_validate_conv(op, inputs, n_inputs, outputs, n_outputs, &task, &args, err,
                           sizeof err);
    if (st != TLM_OK) return tlm_set_error(rt, st, err);
    tlm_op mop;
    tlm_tensor min[4], mout;
    int mn;
    tlm_mm_args margs;
    tlm_task mtask;
    char merr[TLM_ERRMSG];
    /* a 1x1 convolution runs as a matmul, from a dense copy of the pixels
     * it reads when they are strided (tlm_conv_gather_bytes); without
     * memory for the copy, the convolution kernels */
    float *gathered = NULL;
    int as_mm = 0;
    if (!rt->cfg.disable_conv_as_matmul && !conv_oc_blocked(rt, op, &task, &args, 1)) {
      size_t gb = tlm_conv_gather_bytes(&task, op, inputs, outputs);
      if (gb && (gathered = malloc(gb)) != NULL) {
        int64_t rows = tlm_conv_gather_rows(&task, op, inputs, outputs);
        /* the copy in parts on the runtime's threads: written by the
         * caller alone, it held the other threads up before every product
         * it feeds (ResNet-50's res4 3x3 layers, 2 threads) */
        if (rt->nthreads > 1 && rows >= 4 * (int64_t)rt->nthreads) {
          gather_ctx gc = {&task, op, inputs, outputs, gathered};
          tlm_pool_run(rt->pool, rows, gather_chunk, &gc);
        } else {
          tlm_conv_gather(&task, op, inputs, outputs, gathered);
        }
      }
      as_mm = (!gb || gathered) &&
              tlm_conv_as_matmul(&task, op, inputs, outputs, gathered, &mop, min, &mn, &mout) &&
              tlm_validate_matmul_order(&mop, min, mn, &mout, 1, 1, &mtask, &margs, merr,
                                        sizeof merr) == TLM_OK;
    }
    if (as_mm) {
      /* (a convolution adds its residual before the activation, ResNet's
       * relu(conv + bias + shortcut): has_residual 2, or 3 in place, from
       * tlm_validate_matmul_order; the public matmul after it) */
      mtask.u.mm.b_const = tlm_prepack_b_constant(rt, &mtask, &margs);
      st = tlm_engine_run(rt, &mtask, &margs, &plan, &epoch, &tune, err, sizeof err);
      if (st == TLM_OK && tune) tune_request(rt, &mop, min, mn, &mout, &mtask, 1);
    } else {
      st = tlm_engine_run(rt, &task, &args, &plan, &epoch, &tune, err, sizeof err);
      if (st == TLM_OK && tune) tune_request(rt, op, inputs, n_inputs, outputs, &task, 0);
    }
    free(gathered);
    if (st != TLM_OK) return tlm_set_error(rt, st, err);
  } else { /* every other family: validate, then the engine (unknown kinds fail here) */
    tlm_any_args args;
    st = validate_any(op, inputs, n_inputs, outputs, n_outputs, &task, &args, err, sizeof err);
    if (st != TLM_OK) return tlm_set_error(rt, st, err);
    st = tlm_engine_run(rt, &task, &args, &plan, &epoch, &tune, err, sizeof err);
    if (st != TLM_OK) return tlm_set_error(rt, st, err);
    if (tune) tune_request(rt, op, inputs, n_inputs, outputs, &task, 0);
  }
  atomic_fetch_add_explicit(&rt->runs, 1, memory_order_relaxed);
  clear_error(rt);
  return TLM_OK;
}

tlm_status tlm_describe_target(const tlm_runtime *rt, char *buf, size_t cap) {
  if (!rt || !buf) return TLM_ERR_NULL_POINTER;
  if (cap == 0) return TLM_ERR_INVALID_ARGUMENT;
  char t[320];
  tlm_target_str(&rt->target, t, sizeof t);
  snprintf(buf, cap, "%s; schedules: %s", t, rt->model ? "model" : "rule");
  return TLM_OK;
}

tlm_status tlm_get_stats(const tlm_runtime *rt, tlm_stats *out) {
  if (!rt || !out) return TLM_ERR_NULL_POINTER;
  tlm_engine_stats(rt, out);
  return TLM_OK;
}

tlm_status tlm_constant_add(tlm_runtime *rt, const void *data, size_t bytes) {
  if (!rt) return tlm_set_error(NULL, TLM_ERR_NULL_POINTER, "tlm_constant_add: rt is NULL");
  if (!data) return tlm_set_error(rt, TLM_ERR_NULL_POINTER, "tlm_constant_add: data is NULL");
  clear_error(rt);
  char msg[160];
  if (bytes == 0 || (uintptr_t)data + bytes < (uintptr_t)data) {
    snprintf(msg, sizeof msg, "tlm_constant_add: %zu bytes at %p is not a range", bytes, data);
    return tlm_set_error(rt, TLM_ERR_INVALID_ARGUMENT, msg);
  }
  pthread_mutex_lock(&rt->exec_lock);
  int rc = tlm_prepack_add_locked(rt, data, bytes);
  pthread_mutex_unlock(&rt->exec_lock);
  if (rc > 0) {
    snprintf(msg, sizeof msg, "tlm_constant_add: %zu bytes at %p overlap a range declared before",
             bytes, data);
    return tlm_set_error(rt, TLM_ERR_INVALID_ARGUMENT, msg);
  }
  if (rc < 0) return tlm_set_error(rt, TLM_ERR_OUT_OF_MEMORY, "tlm_constant_add: range table");
  return TLM_OK;
}

tlm_status tlm_constant_remove(tlm_runtime *rt, const void *data) {
  if (!rt) return tlm_set_error(NULL, TLM_ERR_NULL_POINTER, "tlm_constant_remove: rt is NULL");
  if (!data) return tlm_set_error(rt, TLM_ERR_NULL_POINTER, "tlm_constant_remove: data is NULL");
  clear_error(rt);
  pthread_mutex_lock(&rt->exec_lock);
  int rc = tlm_prepack_remove_locked(rt, data);
  pthread_mutex_unlock(&rt->exec_lock);
  if (rc) {
    char msg[128];
    snprintf(msg, sizeof msg, "tlm_constant_remove: no constant range starts at %p", data);
    return tlm_set_error(rt, TLM_ERR_INVALID_ARGUMENT, msg);
  }
  return TLM_OK;
}

tlm_status tlm_wait_background(tlm_runtime *rt) {
  if (!rt) return TLM_ERR_NULL_POINTER;
  tlm_engine_bg_wait(rt);
  return TLM_OK;
}
