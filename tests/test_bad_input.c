/* Bad input through the public API: every case returns its documented
 * status and a message, never crashes, and leaves the output untouched. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "runtime/target.h"
#include "tlm.h"

static float A[64 * 64], B[64 * 64], C[64 * 64], bias[64], R[64 * 64];

typedef struct setup {
  tlm_op op;
  tlm_tensor in[4];
  tlm_tensor out;
  int n_in;
} setup;

/* A (4, 8) x B (8, 6) -> C (4, 6), all dense */
static void base(setup *s) {
  memset(s, 0, sizeof *s);
  s->op = tlm_op_matmul();
  tlm_tensor_dense(&s->in[0], TLM_F32, 2, (int64_t[]){4, 8}, A);
  tlm_tensor_dense(&s->in[1], TLM_F32, 2, (int64_t[]){8, 6}, B);
  tlm_tensor_dense(&s->out, TLM_F32, 2, (int64_t[]){4, 6}, C);
  s->n_in = 2;
}

static void expect(tlm_runtime *rt, setup *s, tlm_status want, const char *what) {
  for (int i = 0; i < 64 * 64; i++) C[i] = 12345.0f;
  tlm_status st = tlm_run(rt, &s->op, s->in, s->n_in, &s->out, 1);
  const char *msg = tlm_last_error(rt);
  CHECK(st == want, "%s: got %d (%s), want %d (%s); message: %s", what, (int)st,
        tlm_status_str(st), (int)want, tlm_status_str(want), msg);
  if (want != TLM_OK) {
    CHECK(msg && strlen(msg) > 0, "%s: no message", what);
    int untouched = 1;
    for (int i = 0; i < 64 * 64; i++) untouched &= C[i] == 12345.0f;
    CHECK(untouched, "%s: output written on a validation error", what);
  }
}

/* ---- constant weights -------------------------------------------------- */

enum { CM = 37, CK = 300, CN = 50 };
static float ca[CM * CK], cb[CK * CN], cwant[CM * CN];

typedef struct cworker {
  tlm_runtime *rt;
  float c[CM * CN];
  int wrong, failed;
} cworker;

static int run_const_mm(tlm_runtime *rt, float *c) {
  tlm_op op = tlm_op_matmul();
  tlm_tensor in[2], out;
  tlm_tensor_dense(&in[0], TLM_F32, 2, (int64_t[]){CM, CK}, ca);
  tlm_tensor_dense(&in[1], TLM_F32, 2, (int64_t[]){CK, CN}, cb);
  tlm_tensor_dense(&out, TLM_F32, 2, (int64_t[]){CM, CN}, c);
  return tlm_run(rt, &op, in, 2, &out, 1) != TLM_OK;
}

static int same_as_want(const float *c) {
  for (int i = 0; i < CM * CN; i++)
    if (!(fabsf(c[i] - cwant[i]) <= 1e-3f * (1.0f + fabsf(cwant[i])))) return 0;
  return 1;
}

static void *const_worker(void *p) {
  cworker *w = p;
  for (int r = 0; r < 40; r++) {
    memset(w->c, 0xff, sizeof w->c);
    w->failed += run_const_mm(w->rt, w->c);
    w->wrong += !same_as_want(w->c);
  }
  return NULL;
}

/* tlm_constant_add/remove: statuses, and runs racing declarations (TSan) */
static void constant_cases(tlm_runtime *rt) {
  static float w[256];
  CHECK(tlm_constant_add(NULL, w, sizeof w) == TLM_ERR_NULL_POINTER, "constant_add(NULL rt)");
  CHECK(tlm_constant_add(rt, NULL, 16) == TLM_ERR_NULL_POINTER, "constant_add(NULL data)");
  CHECK(strlen(tlm_last_error(rt)) > 0, "constant_add message");
  CHECK(tlm_constant_add(rt, w, 0) == TLM_ERR_INVALID_ARGUMENT, "constant_add 0 bytes");
  CHECK(tlm_constant_add(rt, (void *)(UINTPTR_MAX - 15), 64) == TLM_ERR_INVALID_ARGUMENT,
        "constant_add wrapping range");
  CHECK(tlm_constant_add(rt, w, sizeof w) == TLM_OK, "constant_add");
  CHECK(tlm_constant_add(rt, w + 10, 16) == TLM_ERR_INVALID_ARGUMENT, "constant_add inside");
  CHECK(tlm_constant_add(rt, w, sizeof w) == TLM_ERR_INVALID_ARGUMENT, "constant_add twice");
  CHECK(tlm_constant_remove(rt, w + 1) == TLM_ERR_INVALID_ARGUMENT, "remove not a start");
  CHECK(strlen(tlm_last_error(rt)) > 0, "constant_remove message");
  CHECK(tlm_constant_remove(NULL, w) == TLM_ERR_NULL_POINTER, "remove(NULL rt)");
  CHECK(tlm_constant_remove(rt, NULL) == TLM_ERR_NULL_POINTER, "remove(NULL data)");
  CHECK(tlm_constant_remove(rt, w) == TLM_OK, "constant_remove");
  CHECK(tlm_constant_remove(rt, w) == TLM_ERR_INVALID_ARGUMENT, "remove twice");

  for (int i = 0; i < CM * CK; i++) ca[i] = (float)((i * 7) % 13) * 0.125f - 0.75f;
  for (int i = 0; i < CK * CN; i++) cb[i] = (float)((i * 5) % 11) * 0.25f - 1.25f;
  for (int m = 0; m < CM; m++)
    for (int n = 0; n < CN; n++) {
      double acc = 0;
      for (int k = 0; k < CK; k++) acc += (double)ca[m * CK + k] * cb[k * CN + n];
      cwant[m * CN + n] = (float)acc;
    }
  /* declared: right values, a copy kept; changed and re-declared: the new
   * values (remove dropped the old copy) */
  static float c[CM * CN];
  CHECK(tlm_constant_add(rt, cb, sizeof cb) == TLM_OK, "declare B");
  CHECK(!run_const_mm(rt, c) && same_as_want(c), "constant B: wrong result");
  tlm_stats st;
  tlm_get_stats(rt, &st);
  CHECK(st.prepacks >= 1 && st.prepacked_bytes >= sizeof cb, "no copy: %llu prepacks",
        (unsigned long long)st.prepacks);
  CHECK(tlm_constant_remove(rt, cb) == TLM_OK, "remove B");
  for (int i = 0; i < CK * CN; i++) cb[i] = -cb[i];
  for (int i = 0; i < CM * CN; i++) cwant[i] = -cwant[i];
  CHECK(!run_const_mm(rt, c) && same_as_want(c), "B changed after remove: stale result");
  CHECK(tlm_constant_add(rt, cb, sizeof cb) == TLM_OK, "declare B again");
  CHECK(!run_const_mm(rt, c) && same_as_want(c), "B re-declared: stale copy");
  CHECK(tlm_constant_remove(rt, cb) == TLM_OK, "remove B again");
  /* two threads run while the main thread declares and removes B */
  cworker wk[2];
  pthread_t th[2];
  for (int t = 0; t < 2; t++) {
    memset(&wk[t], 0, sizeof wk[t]);
    wk[t].rt = rt;
    pthread_create(&th[t], NULL, const_worker, &wk[t]);
  }
  for (int r = 0; r < 40; r++) {
    CHECK(tlm_constant_add(rt, cb, sizeof cb) == TLM_OK, "racing add %d", r);
    CHECK(tlm_constant_remove(rt, cb) == TLM_OK, "racing remove %d", r);
  }
  for (int t = 0; t < 2; t++) {
    pthread_join(th[t], NULL);
    CHECK(wk[t].failed == 0 && wk[t].wrong == 0, "thread %d: %d failed, %d wrong runs", t,
          wk[t].failed, wk[t].wrong);
  }
  tlm_get_stats(rt, &st);
  CHECK(st.prepacked_bytes == 0, "%llu bytes of copies left after removal",
        (unsigned long long)st.prepacked_bytes);
  /* prepack_bytes 0: declared memory is run as undeclared (no copy, and no
   * schedule that would then pack B on every call) */
  {
    tlm_config c0;
    tlm_config_init(&c0);
    c0.cache_dir = "none";
    c0.num_threads = 1;
    c0.prepack_bytes = 0;
    tlm_runtime *r0 = NULL;
    CHECK(tlm_create(&c0, &r0) == TLM_OK, "create with prepack_bytes 0");
    if (r0) {
      CHECK(tlm_constant_add(r0, cb, sizeof cb) == TLM_OK, "declare with no budget");
      CHECK(!run_const_mm(r0, c) && same_as_want(c), "no budget: wrong result");
      tlm_get_stats(r0, &st);
      CHECK(st.prepacks == 0 && st.prepacked_bytes == 0, "no budget: %llu copies",
            (unsigned long long)st.prepacks);
      tlm_destroy(r0);
    }
  }
  /* a copy still declared at tlm_destroy is freed there (ASan checks) */
  CHECK(tlm_constant_add(rt, cb, sizeof cb) == TLM_OK, "declare B before destroy");
  CHECK(!run_const_mm(rt, c) && same_as_want(c), "constant B before destroy");
}

static char g_log_text[8192];

static void collect_log(void *user, tlm_log_level level, const char *line) {
  (void)user;
  (void)level;
  size_t n = strlen(g_log_text);
  snprintf(g_log_text + n, sizeof g_log_text - n, "%s\n", line);
}

/* TLM_ASYNC as the test started (ctest and make test-tsan set 0, so that
 * the runtimes below build synchronously): put back after the checks that
 * set and unset it */
static char g_async_env[16];
static int g_async_set;
static void restore_async(void) {
  if (g_async_set) setenv("TLM_ASYNC", g_async_env, 1);
}

int main(void) {
  const char *async_env = getenv("TLM_ASYNC");
  if (async_env) snprintf(g_async_env, sizeof g_async_env, "%s", async_env), g_async_set = 1;
  for (int i = 0; i < 64 * 64; i++) A[i] = B[i] = R[i] = 1.0f;
  tlm_config cfg;
  CHECK(tlm_config_init(NULL) == TLM_ERR_NULL_POINTER, "config_init(NULL)");
  tlm_config_init(&cfg);
  cfg.cache_dir = "none"; /* measure compiles, never reuse them */
  cfg.num_threads = 2;
  cfg.async_compile = 0; /* the checks count builds and copies call by call, whatever TLM_ASYNC says */
  tlm_runtime *rt = NULL;
  CHECK(tlm_create(&cfg, NULL) == TLM_ERR_NULL_POINTER, "create(NULL out)");
  tlm_config bad = cfg;
  bad.num_threads = -3;
  CHECK(tlm_create(&bad, &rt) == TLM_ERR_INVALID_ARGUMENT && rt == NULL, "negative threads");
  CHECK(strlen(tlm_last_error(NULL)) > 0, "create error message");
  bad = cfg;
  bad.verbose = (tlm_log_level)9;
  CHECK(tlm_create(&bad, &rt) == TLM_ERR_INVALID_ARGUMENT, "verbose 9");
  /* the ISA: out of range, or wider than the host runs */
  bad = cfg;
  bad.isa = 9;
  CHECK(tlm_create(&bad, &rt) == TLM_ERR_INVALID_ARGUMENT && rt == NULL, "isa 9");
  bad.isa = -1;
  CHECK(tlm_create(&bad, &rt) == TLM_ERR_INVALID_ARGUMENT && rt == NULL, "isa -1");
  /* the workers' spin and the tier-0 switch, out of range */
  bad = cfg;
  bad.spin_us = -1;
  CHECK(tlm_create(&bad, &rt) == TLM_ERR_INVALID_ARGUMENT && rt == NULL, "spin_us -1");
  bad.spin_us = 1000001;
  CHECK(tlm_create(&bad, &rt) == TLM_ERR_INVALID_ARGUMENT && rt == NULL &&
            strstr(tlm_last_error(NULL), "spin_us"),
        "spin_us 1000001");
  bad = cfg;
  bad.tier0 = 2;
  CHECK(tlm_create(&bad, &rt) == TLM_ERR_INVALID_ARGUMENT && rt == NULL, "tier0 2");
  bad.tier0 = -2;
  CHECK(tlm_create(&bad, &rt) == TLM_ERR_INVALID_ARGUMENT && rt == NULL, "tier0 -2");
  bad = cfg;
  for (int isa = TLM_CPU_ISA_SCALAR; isa <= TLM_CPU_ISA_AVX512; isa++) {
    bad.isa = isa;
    tlm_status st = tlm_create(&bad, &rt);
    CHECK(st == TLM_OK || (st == TLM_ERR_UNSUPPORTED && rt == NULL &&
                           strstr(tlm_last_error(NULL), "runs at most")),
          "isa %d: status %d", isa, (int)st);
    if (st == TLM_OK) {
      char d[400];
      CHECK(tlm_describe_target(rt, d, sizeof d) == TLM_OK && strlen(d) > 20, "describe target");
      CHECK(tlm_describe_target(rt, d, 0) == TLM_ERR_INVALID_ARGUMENT, "describe target, cap 0");
      CHECK(tlm_describe_target(rt, NULL, 8) == TLM_ERR_NULL_POINTER, "describe target, NULL buf");
      tlm_destroy(rt);
      rt = NULL;
    }
  }
  /* background builds: NULL runtime; TLM_ASYNC parsed 0/1, anything else
   * ignored; waiting with nothing queued returns at once */
  CHECK(tlm_wait_background(NULL) == TLM_ERR_NULL_POINTER, "tlm_wait_background(NULL)");
  {
    tlm_config a;
    setenv("TLM_ASYNC", "1", 1);
    tlm_config_init(&a);
    CHECK(a.async_compile == 1, "TLM_ASYNC=1 -> %d", a.async_compile);
    setenv("TLM_ASYNC", "0", 1);
    tlm_config_init(&a);
    CHECK(a.async_compile == 0, "TLM_ASYNC=0 -> %d", a.async_compile);
    setenv("TLM_ASYNC", "yes", 1);
    tlm_config_init(&a);
    CHECK(a.async_compile == 1, "TLM_ASYNC=yes -> %d (the default)", a.async_compile);
    unsetenv("TLM_ASYNC");
    tlm_config_init(&a);
    CHECK(a.async_compile == 1, "background builds are the default: %d", a.async_compile);
    restore_async();
    a.cache_dir = "none";
    a.model_path = "none";
    a.async_compile = 1;
    tlm_runtime *ar = NULL;
    CHECK(tlm_create(&a, &ar) == TLM_OK, "async runtime");
    CHECK(tlm_wait_background(ar) == TLM_OK, "wait with nothing queued");
    tlm_destroy(ar);
  }
  /* the environment table: each integer variable sets its field, and a
   * malformed one is ignored and named in a warning at tlm_create */
  {
    static const char *const vars[] = {"TLM_NUM_THREADS", "TLM_VERBOSE", "TLM_CACHE_CAPACITY",
                                       "TLM_CACHE_CAPACITY_BYTES", "TLM_KERNEL_REUSE",
                                       "TLM_CONV_AS_MATMUL", "TLM_ASYNC", "TLM_TUNE",
                                       "TLM_CUDA_DEVICE", "TLM_PREPACK_BYTES",
                                       "TLM_CACHE_DISK_BYTES", "TLM_SPIN_US"};
    tlm_config a, d;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
    tlm_config_init(&d);
    /* the default copy budget: a quarter of the memory the process may
     * use, at most a quarter of physical memory */
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t mem = tlm_memory_bytes();
    CHECK(pages > 0 && page > 0 && mem > 0 && mem <= (uint64_t)pages * (uint64_t)page &&
              d.prepack_bytes == (size_t)(mem / 4),
          "default prepack_bytes %zu: a quarter of %llu bytes (%ld pages of %ld bytes)",
          d.prepack_bytes, (unsigned long long)mem, pages, page);
    setenv("TLM_NUM_THREADS", "3", 1);
    setenv("TLM_CACHE_CAPACITY", "17", 1);
    setenv("TLM_KERNEL_REUSE", "0", 1);
    setenv("TLM_CONV_AS_MATMUL", "0", 1);
    setenv("TLM_PREPACK_BYTES", "4096", 1);
    setenv("TLM_SPIN_US", "250", 1);
    tlm_config_init(&a);
    CHECK(a.num_threads == 3 && a.cache_capacity == 17 && a.disable_kernel_reuse == 1 &&
              a.disable_conv_as_matmul == 1 && a.prepack_bytes == 4096 && a.spin_us == 250,
          "environment table: %d %zu %d %d %zu %d", a.num_threads, a.cache_capacity,
          a.disable_kernel_reuse, a.disable_conv_as_matmul, a.prepack_bytes, a.spin_us);
    CHECK(d.spin_us == 0, "default spin_us %d (0: TLM_SPIN_US_DEFAULT)", d.spin_us);
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) setenv(vars[i], "-7x", 1);
    tlm_config_init(&a);
    CHECK(a.num_threads == 0 && a.cache_capacity == 0 && a.disable_kernel_reuse == 0 &&
              a.prepack_bytes == d.prepack_bytes && a.spin_us == 0,
          "malformed environment keeps the defaults");
    a.cache_dir = "none";
    a.model_path = "none";
    a.verbose = TLM_LOG_WARN;
    a.log_fn = collect_log;
    a.log_user = NULL;
    g_log_text[0] = 0;
    tlm_runtime *wr = NULL;
    CHECK(tlm_create(&a, &wr) == TLM_OK, "runtime with a malformed environment");
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
      char want[64];
      snprintf(want, sizeof want, "ignoring %s=", vars[i]);
      CHECK(strstr(g_log_text, want) != NULL, "no warning for a malformed %s", vars[i]);
      unsetenv(vars[i]);
    }
    restore_async();
    tlm_destroy(wr);
  }
  /* a TLM_ISA that names no ISA leaves the default (native) */
  setenv("TLM_ISA", "avx1024", 1);
  tlm_config env;
  tlm_config_init(&env);
  CHECK(env.isa == TLM_CPU_ISA_NATIVE, "TLM_ISA=avx1024 -> %d", env.isa);
  setenv("TLM_ISA", "scalar", 1);
  tlm_config_init(&env);
  CHECK(env.isa == TLM_CPU_ISA_SCALAR, "TLM_ISA=scalar -> %d", env.isa);
  unsetenv("TLM_ISA");
  if (tlm_create(&cfg, &rt) != TLM_OK) return 1;

  setup s;
  base(&s);
  expect(rt, &s, TLM_OK, "valid baseline");
  CHECK(C[0] == 8.0f, "baseline value %g", C[0]);

  CHECK(tlm_run(NULL, &s.op, s.in, 2, &s.out, 1) == TLM_ERR_NULL_POINTER, "NULL runtime");
  CHECK(tlm_run(rt, NULL, s.in, 2, &s.out, 1) == TLM_ERR_NULL_POINTER, "NULL op");
  CHECK(tlm_run(rt, &s.op, NULL, 2, &s.out, 1) == TLM_ERR_NULL_POINTER, "NULL inputs");
  CHECK(tlm_run(rt, &s.op, s.in, 2, NULL, 1) == TLM_ERR_NULL_POINTER, "NULL outputs");

  base(&s); s.in[0].data = NULL; expect(rt, &s, TLM_ERR_NULL_POINTER, "NULL data");
  base(&s); s.op.kind = (tlm_op_kind)77; expect(rt, &s, TLM_ERR_INVALID_ARGUMENT, "unknown op");
  base(&s); s.op.u.matmul.transpose_a = 2; expect(rt, &s, TLM_ERR_INVALID_ARGUMENT, "flag 2");
  base(&s); s.op.u.matmul.activation = (tlm_activation)9;
  expect(rt, &s, TLM_ERR_INVALID_ARGUMENT, "unknown activation");
  base(&s); s.n_in = 3; expect(rt, &s, TLM_ERR_INVALID_ARGUMENT, "too many inputs");
  base(&s); s.n_in = 1; expect(rt, &s, TLM_ERR_INVALID_ARGUMENT, "too few inputs");
  base(&s); s.in[0].shape[0] = 0; expect(rt, &s, TLM_ERR_INVALID_ARGUMENT, "zero extent");
  base(&s); s.in[1].shape[1] = -4; expect(rt, &s, TLM_ERR_INVALID_ARGUMENT, "negative extent");
  base(&s); s.in[0].strides[1] = -1; expect(rt, &s, TLM_ERR_INVALID_ARGUMENT, "negative stride");
  base(&s); s.in[0].ndim = 1; expect(rt, &s, TLM_ERR_INVALID_ARGUMENT, "A ndim 1");
  base(&s); s.in[0].ndim = 7; expect(rt, &s, TLM_ERR_INVALID_ARGUMENT, "A ndim 7");
  base(&s); s.in[0].data = (char *)A + 2; expect(rt, &s, TLM_ERR_INVALID_ARGUMENT, "misaligned");
  base(&s); s.in[1].dtype = (tlm_dtype)5; expect(rt, &s, TLM_ERR_DTYPE_MISMATCH, "dtype");
  base(&s); s.out.dtype = TLM_DTYPE_UNDEF; expect(rt, &s, TLM_ERR_DTYPE_MISMATCH, "C dtype");
  base(&s); s.in[1].shape[0] = 7; expect(rt, &s, TLM_ERR_SHAPE_MISMATCH, "K mismatch");
  base(&s); s.out.shape[1] = 5; expect(rt, &s, TLM_ERR_SHAPE_MISMATCH, "C shape");
  base(&s); s.op.u.matmul.transpose_b = 1; expect(rt, &s, TLM_ERR_SHAPE_MISMATCH, "transpose mismatch");
  /* batch: A (2, 4, 8), B (3, 8, 6) do not broadcast */
  base(&s);
  tlm_tensor_dense(&s.in[0], TLM_F32, 3, (int64_t[]){2, 4, 8}, A);
  tlm_tensor_dense(&s.in[1], TLM_F32, 3, (int64_t[]){3, 8, 6}, B);
  tlm_tensor_dense(&s.out, TLM_F32, 3, (int64_t[]){3, 4, 6}, C);
  expect(rt, &s, TLM_ERR_SHAPE_MISMATCH, "batch not broadcastable");
  /* batch with 5 dims + 2 */
  base(&s);
  s.out.ndim = 6;
  for (int i = 0; i < 4; i++) s.out.shape[i] = 1, s.out.strides[i] = 24;
  s.out.shape[4] = 4, s.out.shape[5] = 6, s.out.strides[4] = 6, s.out.strides[5] = 1;
  expect(rt, &s, TLM_OK, "4 unit batch dims");
  /* bias of the wrong length, residual of the wrong shape */
  base(&s);
  s.op.u.matmul.has_bias = 1;
  tlm_tensor_dense(&s.in[2], TLM_F32, 1, (int64_t[]){5}, bias);
  s.n_in = 3;
  expect(rt, &s, TLM_ERR_SHAPE_MISMATCH, "bias length");
  base(&s);
  s.op.u.matmul.has_residual = 1;
  tlm_tensor_dense(&s.in[2], TLM_F32, 2, (int64_t[]){4, 5}, R);
  s.n_in = 3;
  expect(rt, &s, TLM_ERR_SHAPE_MISMATCH, "residual shape");
  /* sizes whose element or byte count overflows */
  base(&s); s.in[0].shape[0] = INT64_MAX / 2; s.out.shape[0] = INT64_MAX / 2;
  expect(rt, &s, TLM_ERR_OVERFLOW, "element count overflow");
  base(&s); s.in[0].strides[0] = INT64_MAX / 2; expect(rt, &s, TLM_ERR_OVERFLOW, "offset overflow");
  base(&s); s.in[0].shape[0] = (int64_t)1 << 59; s.in[0].strides[0] = 8;
  s.out.shape[0] = (int64_t)1 << 59;
  expect(rt, &s, TLM_ERR_OVERFLOW, "byte size overflow");
  /* output strides that overlap, output aliasing inputs */
  base(&s); s.out.strides[0] = 3; expect(rt, &s, TLM_ERR_ALIASING, "C rows overlap");
  base(&s); s.out.strides[1] = 0; expect(rt, &s, TLM_ERR_ALIASING, "C zero stride");
  base(&s); s.out.data = A + 8; expect(rt, &s, TLM_ERR_ALIASING, "C overlaps A");
  base(&s);
  s.op.u.matmul.has_residual = 1;
  tlm_tensor_dense(&s.in[2], TLM_F32, 2, (int64_t[]){4, 6}, C);
  s.n_in = 3;
  /* the residual may be C itself (C += A x B) only without an activation,
   * which comes before a matmul's residual (tests/test_in_place.c) */
  s.op.u.matmul.activation = TLM_ACT_RELU;
  expect(rt, &s, TLM_ERR_ALIASING, "C is the residual, with ReLU");
  base(&s);
  s.op.u.matmul.has_residual = 1;
  tlm_tensor_dense(&s.in[2], TLM_F32, 2, (int64_t[]){4, 6}, C + 1);
  s.n_in = 3;
  expect(rt, &s, TLM_ERR_ALIASING, "the residual overlaps C, shifted by one");
  /* the per-thread fast path for repeated descriptors must still check the
   * data pointers: same descriptors, C moved onto A, then NULL, then odd */
  base(&s);
  expect(rt, &s, TLM_OK, "repeat baseline");
  base(&s); s.out.data = A + 8; expect(rt, &s, TLM_ERR_ALIASING, "repeat with C overlapping A");
  base(&s); s.in[1].data = NULL; expect(rt, &s, TLM_ERR_NULL_POINTER, "repeat with NULL B");
  base(&s); s.in[0].data = (char *)A + 1; expect(rt, &s, TLM_ERR_INVALID_ARGUMENT, "repeat misaligned");
  /* and serve new buffers with the right values */
  {
    static float a2[4 * 8], b2[8 * 6], c2[4 * 6];
    for (int i = 0; i < 32; i++) a2[i] = 2.0f;
    for (int i = 0; i < 48; i++) b2[i] = 3.0f;
    base(&s);
    s.in[0].data = a2, s.in[1].data = b2, s.out.data = c2;
    CHECK(tlm_run(rt, &s.op, s.in, 2, &s.out, 1) == TLM_OK && c2[0] == 48.0f && c2[23] == 48.0f,
          "repeat with new buffers: %g", c2[0]);
  }
  /* transposed output layout is fine (column-major C) */
  base(&s); s.out.strides[0] = 1; s.out.strides[1] = 4; expect(rt, &s, TLM_OK, "column-major C");

  /* status strings: every code has its own text, unknown codes a fallback */
  for (int i = 0; i < TLM_STATUS_COUNT_; i++)
    CHECK(strcmp(tlm_status_str((tlm_status)i), "unknown status") != 0, "status %d has no text", i);
  CHECK(!strcmp(tlm_status_str((tlm_status)999), "unknown status"), "unknown code");
  CHECK(!strcmp(tlm_status_str((tlm_status)-1), "unknown status"), "negative code");
  tlm_stats st;
  CHECK(tlm_get_stats(rt, &st) == TLM_OK && st.runs == 5, "runs %llu", (unsigned long long)st.runs);
  CHECK(tlm_get_stats(rt, NULL) == TLM_ERR_NULL_POINTER, "stats NULL");
  CHECK(tlm_tensor_dense(NULL, TLM_F32, 1, (int64_t[]){1}, A) == TLM_ERR_NULL_POINTER, "dense NULL");
  tlm_tensor t;
  CHECK(tlm_tensor_dense(&t, TLM_F32, 0, (int64_t[]){1}, A) == TLM_ERR_INVALID_ARGUMENT, "dense ndim");
  CHECK(tlm_tensor_dense(&t, TLM_F32, 3, (int64_t[]){1 << 30, 1 << 30, 1 << 30}, A) ==
            TLM_ERR_OVERFLOW, "dense overflow");
  constant_cases(rt);
  tlm_destroy(rt);
  tlm_destroy(NULL);
  return check_report("test_bad_input");
}
