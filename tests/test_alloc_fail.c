/* Failing allocations (issue #20): for each operator family, and for model
 * loading, the n-th allocation of tlm's own code is made to fail, for
 * n = 0, 1, 2, ... until a whole cold call (tlm_create with its model,
 * plan, decode, compile, disk store, run) makes fewer than n allocations.
 * Every call must return TLM_OK with the right answer or a status with a
 * message, never crash; a runtime that saw a failure must serve the same
 * call correctly once allocations succeed again; tlm_destroy must free
 * everything (leaks are checked by LeakSanitizer in `make test-asan`).
 *
 * How: the test links libtlm statically with -Wl,--wrap for malloc,
 * calloc, realloc, aligned_alloc, posix_memalign, strdup and strndup, so
 * that every allocation the library's own objects make goes through the
 * __wrap_ functions below (LLVM's, inside its shared library, do not: an
 * allocation failure inside LLVM aborts by LLVM's design). cJSON's
 * allocations are routed here with cJSON_InitHooks.
 *
 * Usage: test_alloc_fail [STEP]   STEP > 1 tries every STEP-th n only (a
 * quick run); the default and the ctest entry try every n.
 *        test_alloc_fail trim     the disk cache's trim sweep alone. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/disk.h"
#include "check.h"
#include "fixtures.h"
#include "train/gpt2.h"
#include "lm/model.h"
#include "lm/vocab.h"
#include "runtime/target.h"
#include "tlm.h"

/* ---- the failing allocator ---------------------------------------------- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t align, size_t n);
int __real_posix_memalign(void **p, size_t align, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);

static atomic_long g_seen;       /* allocations counted while armed */
static atomic_long g_fail_at = -1; /* the index that fails; -1: none */
static atomic_int g_armed;
static atomic_long g_failed;     /* failures injected */

static int fail_now(void) {
  if (!atomic_load(&g_armed)) return 0;
  long i = atomic_fetch_add(&g_seen, 1);
  if (i == atomic_load(&g_fail_at)) {
    atomic_fetch_add(&g_failed, 1);
    return 1;
  }
  return 0;
}

void *__wrap_malloc(size_t n) { return fail_now() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t size) { return fail_now() ? NULL : __real_calloc(n, size); }
void *__wrap_realloc(void *p, size_t n) { return fail_now() ? NULL : __real_realloc(p, n); }
void *__wrap_aligned_alloc(size_t align, size_t n) {
  return fail_now() ? NULL : __real_aligned_alloc(align, n);
}
int __wrap_posix_memalign(void **p, size_t align, size_t n) {
  return fail_now() ? 12 /* ENOMEM */ : __real_posix_memalign(p, align, n);
}
char *__wrap_strdup(const char *s) { return fail_now() ? NULL : __real_strdup(s); }
char *__wrap_strndup(const char *s, size_t n) { return fail_now() ? NULL : __real_strndup(s, n); }

static void *cjson_malloc(size_t n) { return __wrap_malloc(n); }
static void cjson_free(void *p) { free(p); }

static void arm(long fail_at) {
  atomic_store(&g_seen, 0);
  atomic_store(&g_fail_at, fail_at);
  atomic_store(&g_armed, 1);
}
static long disarm(void) {
  atomic_store(&g_armed, 0);
  return atomic_load(&g_seen);
}

/* ---- the calls ---------------------------------------------------------- */

static char g_dir[512], g_model[600];

static void clear_cache(void) {
  static const char *subs[] = {"plans", "kernels"};
  for (int s = 0; s < 2; s++) {
    char sub[700];
    snprintf(sub, sizeof sub, "%s/%s", g_dir, subs[s]);
    DIR *d = opendir(sub);
    if (!d) continue;
    struct dirent *e;
    while ((e = readdir(d))) {
      if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
        continue;
      char p[1000];
      snprintf(p, sizeof p, "%s/%s", sub, e->d_name);
      unlink(p);
    }
    closedir(d);
  }
}

#define MAXN 1024
typedef struct call {
  const char *name;
  tlm_op op;
  int n_in;
  int64_t in_shape[4][5];
  int in_ndim[4];
  int64_t out_shape[5];
  int out_ndim;
  int use_model;
  float in[4][MAXN];
  float out[MAXN];
  float want[MAXN];
  tlm_tensor tin[4], tout;
} call;

static int64_t numel(const int64_t *shape, int ndim) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  return n;
}

static void setup(call *c) {
  uint64_t rng = 7;
  for (int i = 0; i < c->n_in; i++) {
    for (int j = 0; j < MAXN; j++) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      c->in[i][j] = (float)((rng >> 40) % 2001) / 1000.0f - 1.0f;
      if (c->op.kind != TLM_OP_SOFTMAX && i > 0 && c->op.kind != TLM_OP_ELTWISE)
        c->in[i][j] *= 0.5f;
    }
    tlm_tensor_dense(&c->tin[i], TLM_F32, c->in_ndim[i], c->in_shape[i], c->in[i]);
  }
  tlm_tensor_dense(&c->tout, TLM_F32, c->out_ndim, c->out_shape, c->out);
}

static tlm_runtime *make_rt(const call *c, tlm_status *st) {
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.cache_dir = g_dir;
  cfg.model_path = c->use_model ? g_model : "none";
  cfg.num_threads = 2;
  cfg.async_compile = 0;
  cfg.verbose = TLM_LOG_NONE;
  tlm_runtime *rt = NULL;
  *st = tlm_create(&cfg, &rt);
  return rt;
}

static int same(const call *c) {
  int64_t n = numel(c->out_shape, c->out_ndim);
  for (int64_t i = 0; i < n; i++)
    if (!(fabsf(c->out[i] - c->want[i]) <= 1e-5f * (1.0f + fabsf(c->want[i])))) return 0;
  return 1;
}

/* The sweep over one call; returns the allocations a whole call made.
 * warm_disk 0: every call is cold (empty disk cache: plan, decode,
 * compile, store); 1: the disk cache holds the call's plan and kernel
 * (a new process's path: load, verify, link). */
static long sweep(call *c, int step, int warm_disk) {
  setup(c);
  /* the answer, from a runtime whose allocations all succeed */
  tlm_status st;
  clear_cache();
  tlm_runtime *rt = make_rt(c, &st);
  CHECK(st == TLM_OK && rt, "%s: tlm_create: %s", c->name, tlm_status_str(st));
  if (!rt) return 0;
  arm(-1);
  st = tlm_run(rt, &c->op, c->tin, c->n_in, &c->tout, 1);
  long total_run = disarm();
  CHECK(st == TLM_OK, "%s: %s: %s", c->name, tlm_status_str(st), tlm_last_error(rt));
  memcpy(c->want, c->out, sizeof c->want);
  tlm_destroy(rt);
  tlm_stats s;

  long n = 0, failed_calls = 0, created = 0;
  for (;; n += step) {
    if (!warm_disk) clear_cache();
    memset(c->out, 0, sizeof c->out);
    atomic_store(&g_failed, 0);
    arm(n);
    rt = make_rt(c, &st);
    if (st != TLM_OK) {
      disarm();
      CHECK(rt == NULL, "%s: allocation %ld: tlm_create failed (%s) but returned a runtime", c->name,
            n, tlm_status_str(st));
      CHECK(st == TLM_ERR_OUT_OF_MEMORY || st == TLM_ERR_JIT || st == TLM_ERR_THREAD,
            "%s: allocation %ld: tlm_create returned %s", c->name, n, tlm_status_str(st));
      failed_calls++;
      continue;
    }
    created++;
    st = tlm_run(rt, &c->op, c->tin, c->n_in, &c->tout, 1);
    long seen = disarm();
    int hit = atomic_load(&g_failed) > 0;
    if (st == TLM_OK) {
      CHECK(same(c), "%s: allocation %ld failed, tlm_run returned TLM_OK with a wrong answer",
            c->name, n);
    } else {
      failed_calls++;
      const char *msg = tlm_last_error(rt);
      CHECK(hit, "%s: allocation %ld: %s without a failed allocation", c->name, n,
            tlm_status_str(st));
      CHECK(msg && *msg, "%s: allocation %ld: %s without a message", c->name, n,
            tlm_status_str(st));
      CHECK(st == TLM_ERR_OUT_OF_MEMORY || st == TLM_ERR_JIT || st == TLM_ERR_IO ||
                st == TLM_ERR_THREAD,
            "%s: allocation %ld: tlm_run returned %s (%s)", c->name, n, tlm_status_str(st), msg);
      /* the runtime recovers once allocations succeed again */
      memset(c->out, 0, sizeof c->out);
      st = tlm_run(rt, &c->op, c->tin, c->n_in, &c->tout, 1);
      CHECK(st == TLM_OK && same(c), "%s: after failing allocation %ld, a retry gave %s", c->name,
            n, tlm_status_str(st));
    }
    if (warm_disk && !hit) {
      memset(&s, 0, sizeof s);
      tlm_get_stats(rt, &s);
      CHECK(s.compiles == 0 && s.disk_kernel_hits == 1,
            "%s: warm disk: %llu compiles, %llu kernels from disk", c->name,
            (unsigned long long)s.compiles, (unsigned long long)s.disk_kernel_hits);
    }
    tlm_destroy(rt);
    if (!hit) {
      (void)seen;
      break; /* a whole cold call made fewer than n + 1 allocations */
    }
    if (n > 200000) {
      CHECK(0, "%s: the sweep did not end", c->name);
      break;
    }
  }
  printf("%-26s %-9s %4ld allocations in tlm_create + tlm_run (cold run alone %ld): %ld failed "
         "calls, %ld runtimes\n",
         c->name, warm_disk ? "warm disk" : "cold", n, total_run, failed_calls, created);
  fflush(stdout);
  return n;
}

/* A trim pass of the disk cache with the n-th allocation failing, over a
 * cache holding entries in both folders (kernels listed first). The pass
 * runs on a thread of its own after a runtime's first store, so the runs
 * above reach its allocations only by chance of timing: a failed
 * allocation while listing kernels once left the pass writing entries of
 * plans through a null array (a CI crash). Here the pass runs inline
 * (tlm_disk_trim) and every allocation index is tried. */
static void sweep_trim(void) {
  char dir[700], sub[800], path[900];
  snprintf(dir, sizeof dir, "%s/trim", g_dir);
  static const char *subs[] = {"kernels", "plans"};
  static const char *ext[] = {"o", "json"};
  mkdir(dir, 0700);
  for (int s = 0; s < 2; s++) {
    snprintf(sub, sizeof sub, "%s/%s", dir, subs[s]);
    mkdir(sub, 0700);
    for (int i = 0; i < 300; i++) { /* past the first capacity of both arrays */
      snprintf(path, sizeof path, "%s/%032x.%s", sub, i, ext[s]);
      FILE *f = fopen(path, "w");
      if (f) {
        fputs("x", f);
        fclose(f);
      }
    }
  }
  char err[256];
  tlm_disk *d = NULL;
  /* a cap below what the folders hold: a whole pass would remove entries,
   * so the cap stays above it until the sweep is over */
  CHECK(tlm_disk_open(dir, (int64_t)1 << 40, NULL, NULL, &d, err, sizeof err) == 0, "%s", err);
  if (!d) return;
  long n = 0;
  for (;; n++) {
    atomic_store(&g_failed, 0);
    arm(n);
    tlm_disk_trim(d);
    disarm();
    if (!atomic_load(&g_failed)) break;
    if (n > 10000) {
      CHECK(0, "trim: the sweep did not end");
      break;
    }
  }
  CHECK(n >= 2, "trim: only %ld allocations counted", n);
  CHECK(tlm_disk_trims(d) == n + 1, "trim: %lld passes for %ld calls",
        (long long)tlm_disk_trims(d), n + 1);
  tlm_disk_stats ds;
  tlm_disk_stat(d, &ds);
  CHECK(ds.kernels == 300 && ds.plans == 300, "trim: %lld kernels, %lld plans left",
        (long long)ds.kernels, (long long)ds.plans);
  tlm_disk_close(d);
  printf("%-26s %-9s %4ld allocations in a trim pass\n", "disk trim", "", n);
  for (int s = 0; s < 2; s++) {
    for (int i = 0; i < 300; i++) {
      snprintf(path, sizeof path, "%s/%s/%032x.%s", dir, subs[s], i, ext[s]);
      unlink(path);
    }
    snprintf(sub, sizeof sub, "%s/%s", dir, subs[s]);
    rmdir(sub);
  }
  rmdir(dir);
}

static void write_model(const char *path) {
  char err[256];
  CHECK(fixture_write_model(path, 5, 1.0f, err, sizeof err) == 0, "%s", err);
}

static call g_calls[8];

int main(int argc, char **argv) {
  int step = argc > 1 ? atoi(argv[1]) : 1;
  if (step < 1) step = 1;
  snprintf(g_dir, sizeof g_dir, "/tmp/tlm_alloc_fail_%d", (int)getpid());
  snprintf(g_model, sizeof g_model, "%s.model", g_dir);
  mkdir(g_dir, 0700);
  if (argc > 1 && !strcmp(argv[1], "trim")) { /* the disk trim sweep alone */
    sweep_trim();
    rmdir(g_dir);
    return check_report("test_alloc_fail trim");
  }
  write_model(g_model);
  cJSON_InitHooks(&(cJSON_Hooks){cjson_malloc, cjson_free});

  int nc = 0;
  call *c;
  /* matmul (5, 7) x (7, 9) + bias, gelu, + residual */
  c = &g_calls[nc++];
  c->name = "matmul+bias+gelu+res";
  c->op = tlm_op_matmul();
  c->op.u.matmul = (tlm_matmul_desc){0, 0, 1, TLM_ACT_GELU_TANH, 1};
  c->n_in = 4;
  memcpy(c->in_shape, (int64_t[4][5]){{5, 7}, {7, 9}, {9}, {5, 9}}, sizeof c->in_shape);
  memcpy(c->in_ndim, (int[4]){2, 2, 1, 2}, sizeof c->in_ndim);
  memcpy(c->out_shape, (int64_t[5]){5, 9}, sizeof c->out_shape);
  c->out_ndim = 2;
  /* the same, scheduled by the language model (model loading included) */
  g_calls[nc] = *c;
  g_calls[nc].name = "matmul, model";
  g_calls[nc++].use_model = 1;
  /* 3x3 convolution, NHWC, padding 1, bias, relu: 1x6x6x4 -> 1x6x6x8 */
  c = &g_calls[nc++];
  c->name = "conv 3x3 nhwc";
  c->op = tlm_op_conv(TLM_LAYOUT_NHWC);
  c->op.u.conv.pad[1] = c->op.u.conv.pad[2] = 1;
  c->op.u.conv.has_bias = 1;
  c->op.u.conv.activation = TLM_ACT_RELU;
  c->n_in = 3;
  memcpy(c->in_shape, (int64_t[4][5]){{1, 6, 6, 4}, {8, 4, 3, 3}, {8}}, sizeof c->in_shape);
  memcpy(c->in_ndim, (int[4]){4, 4, 1}, sizeof c->in_ndim);
  memcpy(c->out_shape, (int64_t[5]){1, 6, 6, 8}, sizeof c->out_shape);
  c->out_ndim = 4;
  /* 1x1 convolution (runs as a matmul): 1x5x5x8 -> 1x5x5x6 */
  c = &g_calls[nc++];
  c->name = "conv 1x1 as matmul";
  c->op = tlm_op_conv(TLM_LAYOUT_NHWC);
  c->n_in = 2;
  memcpy(c->in_shape, (int64_t[4][5]){{1, 5, 5, 8}, {6, 8, 1, 1}}, sizeof c->in_shape);
  memcpy(c->in_ndim, (int[4]){4, 4}, sizeof c->in_ndim);
  memcpy(c->out_shape, (int64_t[5]){1, 5, 5, 6}, sizeof c->out_shape);
  c->out_ndim = 4;
  /* 3x3 max pooling, stride 2: 1x7x7x3 -> 1x3x3x3 */
  c = &g_calls[nc++];
  c->name = "max pool 3x3/2";
  c->op = tlm_op_pool(TLM_LAYOUT_NHWC, TLM_POOL_MAX);
  c->op.u.pool.kernel[1] = c->op.u.pool.kernel[2] = 3;
  c->op.u.pool.stride[1] = c->op.u.pool.stride[2] = 2;
  c->n_in = 1;
  memcpy(c->in_shape, (int64_t[4][5]){{1, 7, 7, 3}}, sizeof c->in_shape);
  c->in_ndim[0] = 4;
  memcpy(c->out_shape, (int64_t[5]){1, 3, 3, 3}, sizeof c->out_shape);
  c->out_ndim = 4;
  /* causal softmax 5 x 13 */
  c = &g_calls[nc++];
  c->name = "softmax causal";
  c->op = tlm_op_rownorm(TLM_OP_SOFTMAX);
  c->op.u.rownorm.causal = 1;
  c->n_in = 1;
  memcpy(c->in_shape, (int64_t[4][5]){{5, 13}}, sizeof c->in_shape);
  c->in_ndim[0] = 2;
  memcpy(c->out_shape, (int64_t[5]){5, 13}, sizeof c->out_shape);
  c->out_ndim = 2;
  /* layernorm 3 x 17 */
  c = &g_calls[nc++];
  c->name = "layernorm";
  c->op = tlm_op_rownorm(TLM_OP_LAYERNORM);
  c->n_in = 3;
  memcpy(c->in_shape, (int64_t[4][5]){{3, 17}, {17}, {17}}, sizeof c->in_shape);
  memcpy(c->in_ndim, (int[4]){2, 1, 1}, sizeof c->in_ndim);
  memcpy(c->out_shape, (int64_t[5]){3, 17}, sizeof c->out_shape);
  c->out_ndim = 2;
  /* gated silu: silu(x) * z, 4 x 9 */
  c = &g_calls[nc++];
  c->name = "eltwise silu*z";
  c->op = tlm_op_eltwise(TLM_ACT_SILU, TLM_BINARY_MUL);
  c->n_in = 2;
  memcpy(c->in_shape, (int64_t[4][5]){{4, 9}, {4, 9}}, sizeof c->in_shape);
  memcpy(c->in_ndim, (int[4]){2, 2}, sizeof c->in_ndim);
  memcpy(c->out_shape, (int64_t[5]){4, 9}, sizeof c->out_shape);
  c->out_ndim = 2;

  for (int i = 0; i < nc; i++) {
    long n = sweep(&g_calls[i], step, 0);
    CHECK(n > 10, "%s: only %ld allocations counted (is the wrapper linked?)", g_calls[i].name, n);
  }
  /* a new process with a warm disk cache: plans and kernels loaded (the
   * same path for every family: a matmul with the model, a convolution) */
  sweep(&g_calls[1], step, 1);
  sweep(&g_calls[2], step, 1);
  sweep_trim();
  clear_cache();
  char sub[700];
  snprintf(sub, sizeof sub, "%s/plans", g_dir);
  rmdir(sub);
  snprintf(sub, sizeof sub, "%s/kernels", g_dir);
  rmdir(sub);
  rmdir(g_dir);
  unlink(g_model);
  return check_report("test_alloc_fail");
}
