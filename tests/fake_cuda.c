/* fake_cuda.c - a stand-in for libcuda.so.1 that tests load through
 * TLM_CUDA_LIBRARY, so the GPU dispatcher (engine/gpu_engine.c) runs on
 * machines without a GPU.
 *
 * One device (sm_90, 132 SMs). "Device memory" is host memory from
 * cuMemAlloc, known to cuPointerGetAttribute; any other address is host
 * memory. cuModuleLoadDataEx accepts text that looks like PTX with a
 * .visible .entry and counts modules; cuLaunchKernel checks the launch
 * against the limits and computes what the kernel must compute from its
 * arguments (runtime/gpu.h's GA_* layout): C = A B (+ bias) (+ residual),
 * no activation (the epilogue's activation is compiled into the kernel,
 * not passed), with every stride and batch extent as passed. So a test
 * checks the dispatcher's arguments, geometry, caching and errors end to
 * end; the PTX itself is checked by ptxas and the host thread model
 * (test_gpu). FAKE_CUDA_FAIL=init makes cuInit fail. */
#include <pthread.h>
#include <stdatomic.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/gpu.h"

typedef int CUresult;
static atomic_int g_modules, g_launches;
static pthread_mutex_t g_alloc_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  uintptr_t lo, hi;
} g_allocs[256];
static int g_nallocs;

int fake_cuda_modules(void) { return g_modules; }
int fake_cuda_launches(void) { return g_launches; }

CUresult cuInit(unsigned f) {
  (void)f;
  const char *e = getenv("FAKE_CUDA_FAIL");
  return e && !strcmp(e, "init") ? 100 /* CUDA_ERROR_NO_DEVICE */ : 0;
}
CUresult cuDriverGetVersion(int *v) { return *v = 13000, 0; }
CUresult cuDeviceGetCount(int *n) { return *n = 1, 0; }
CUresult cuDeviceGet(int *d, int o) { return o ? 101 : (*d = 0, 0); }
CUresult cuDeviceGetAttribute(int *v, int attr, int d) {
  (void)d;
  switch (attr) {
  case 1: *v = 1024; break;
  case 8: *v = 48 * 1024; break;
  case 10: *v = 32; break;
  case 12: *v = 65536; break;
  case 16: *v = 132; break;
  case 75: *v = 9; break;
  case 76: *v = 0; break;
  case 81: *v = 228 * 1024; break;
  case 82: *v = 65536; break;
  default: return 1;
  }
  return 0;
}
CUresult cuDeviceGetName(char *s, int len, int d) {
  (void)d;
  snprintf(s, (size_t)len, "fake sm_90");
  return 0;
}
static int g_ctx;
CUresult cuDevicePrimaryCtxRetain(void **c, int d) { return (void)d, *c = &g_ctx, 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int d) { return (void)d, 0; }
CUresult cuCtxPushCurrent_v2(void *c) { return c == &g_ctx ? 0 : 201; }
CUresult cuCtxPopCurrent_v2(void **c) { return *c = &g_ctx, 0; }
CUresult cuModuleLoadDataEx(void **m, const void *image, unsigned n, int *o, void **v) {
  (void)n, (void)o, (void)v;
  const char *p = image;
  if (!strstr(p, ".visible .entry") || !strstr(p, ".target sm_90")) return 218; /* INVALID_PTX */
  g_modules++;
  *m = malloc(1);
  return 0;
}
/* a function handle: the operator its name says (tlm_gpu_<op>_<hash>) */
static int g_fn_kinds[4] = {TLM_OP_MATMUL, TLM_OP_SOFTMAX, TLM_OP_LAYERNORM, TLM_OP_RMSNORM};
CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
  (void)m;
  static const char *const ops[4] = {"tlm_gpu_mm_", "tlm_gpu_softmax_", "tlm_gpu_layernorm_",
                                     "tlm_gpu_rmsnorm_"};
  static const char *const exported[4] = {"tlm_mm", "tlm_softmax", "tlm_layernorm", "tlm_rmsnorm"};
  for (int i = 0; i < 4; i++)
    if (!strncmp(name, ops[i], strlen(ops[i])) || !strcmp(name, exported[i])) {
      *f = &g_fn_kinds[i];
      return 0;
    }
  return 500; /* CUDA_ERROR_NOT_FOUND */
}

/* Row operators from their arguments (runtime/gpu.h GRA_*), as compiled
 * by default: softmax with scale 1 and no mask, eps 1e-5. */
static void fake_rows(int kind, const int64_t *a) {
  for (int64_t r = 0; r < a[GRA_ROWS]; r++) {
    const float *x = (const float *)(uintptr_t)a[GRA_X] + r * a[GRA_SX0];
    float *y = (float *)(uintptr_t)a[GRA_Y] + r * a[GRA_SY0];
    const float *g = (const float *)(uintptr_t)a[GRA_G], *b = (const float *)(uintptr_t)a[GRA_B];
    int64_t C = a[GRA_COLS];
    double m = kind == TLM_OP_SOFTMAX ? -1e300 : 0, s = 0;
    for (int64_t c = 0; c < C; c++) {
      double v = x[c * a[GRA_SX1]];
      if (kind == TLM_OP_SOFTMAX) m = v > m ? v : m;
      else if (kind == TLM_OP_LAYERNORM) m += v / (double)C;
    }
    for (int64_t c = 0; c < C; c++) {
      double v = x[c * a[GRA_SX1]];
      s += kind == TLM_OP_SOFTMAX ? exp(v - m) : (v - m) * (v - m);
    }
    double rs = kind == TLM_OP_SOFTMAX ? 1 / s : 1 / sqrt(s / (double)C + 1e-5);
    for (int64_t c = 0; c < C; c++) {
      double v = x[c * a[GRA_SX1]], o;
      if (kind == TLM_OP_SOFTMAX) o = exp(v - m) * rs;
      else o = (v - m) * rs * g[c * a[GRA_SG]] + (kind == TLM_OP_LAYERNORM ? b[c * a[GRA_SB]] : 0);
      y[c * a[GRA_SY1]] = (float)o;
    }
  }
}
CUresult cuModuleUnload(void *m) { return free(m), 0; }

static float *at(int64_t base, int64_t off) { return (float *)(uintptr_t)base + off; }

CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned smem, void *stream, void **params, void **extra) {
  (void)stream, (void)extra, (void)smem;
  if (bx < 32 || bx > 1024 || by != 1 || bz != 1 || gx < 1 || gy < 1 || gy > 65535 || gz > 65535)
    return 1; /* CUDA_ERROR_INVALID_VALUE */
  int kind = *(int *)f;
  int64_t a[GA_COUNT];
  int nargs = kind == TLM_OP_MATMUL ? GA_COUNT : GRA_COUNT;
  for (int i = 0; i < nargs; i++) memcpy(&a[i], params[i], sizeof a[i]);
  if (kind != TLM_OP_MATMUL) {
    if ((int64_t)gx != a[GRA_ROWS]) return 1;
    fake_rows(kind, a);
    g_launches++;
    return 0;
  }
  int64_t nb = 1;
  for (int d = 0; d < 4; d++) nb *= a[GA_BATCH + d];
  if ((int64_t)gz != nb) return 1;
  for (int64_t z = 0; z < nb; z++) {
    int64_t idx[4], r = z, oa = 0, ob = 0, oc = 0, orr = 0;
    for (int d = 3; d >= 0; d--) idx[d] = r % a[GA_BATCH + d], r /= a[GA_BATCH + d];
    for (int d = 0; d < 4; d++)
      oa += idx[d] * a[GA_SAB + d], ob += idx[d] * a[GA_SBB + d], oc += idx[d] * a[GA_SCB + d],
          orr += idx[d] * a[GA_SRB + d];
    for (int64_t m = 0; m < a[GA_M]; m++)
      for (int64_t n = 0; n < a[GA_N]; n++) {
        double s = 0;
        for (int64_t k = 0; k < a[GA_K]; k++)
          s += (double)*at(a[GA_A], oa + m * a[GA_SAM] + k * a[GA_SAK]) *
               *at(a[GA_B], ob + k * a[GA_SBK] + n * a[GA_SBN]);
        if (a[GA_BIAS]) s += *at(a[GA_BIAS], n * a[GA_SBIAS]);
        if (a[GA_R]) s += *at(a[GA_R], orr + m * a[GA_SRM] + n * a[GA_SRN]);
        *at(a[GA_C], oc + m * a[GA_SCM] + n * a[GA_SCN]) = (float)s;
      }
  }
  g_launches++;
  return 0;
}
CUresult cuStreamSynchronize(void *s) { return (void)s, 0; }
CUresult cuPointerGetAttribute(void *data, int attr, unsigned long long p) {
  if (attr != 2 && attr != 9) return 1;
  int found = 0;
  pthread_mutex_lock(&g_alloc_mu);
  for (int i = 0; i < g_nallocs; i++)
    if (p >= g_allocs[i].lo && p < g_allocs[i].hi) found = 1;
  pthread_mutex_unlock(&g_alloc_mu);
  if (!found) return 1; /* CUDA_ERROR_INVALID_VALUE: not memory the driver knows */
  if (attr == 9)
    *(int *)data = 0; /* device ordinal */
  else
    *(unsigned *)data = 2; /* device */
  return 0;
}
CUresult cuMemAlloc_v2(unsigned long long *p, size_t bytes) {
  void *m = calloc(1, bytes ? bytes : 1);
  if (!m) return 2;
  pthread_mutex_lock(&g_alloc_mu);
  int ok = g_nallocs < 256;
  if (ok) {
    g_allocs[g_nallocs].lo = (uintptr_t)m, g_allocs[g_nallocs].hi = (uintptr_t)m + bytes;
    g_nallocs++;
  }
  pthread_mutex_unlock(&g_alloc_mu);
  if (!ok) {
    free(m);
    return 2;
  }
  *p = (uintptr_t)m;
  return 0;
}
CUresult cuMemFree_v2(unsigned long long p) {
  int found = 0;
  pthread_mutex_lock(&g_alloc_mu);
  for (int i = 0; i < g_nallocs && !found; i++)
    if (g_allocs[i].lo == p) {
      g_allocs[i] = g_allocs[--g_nallocs];
      found = 1;
    }
  pthread_mutex_unlock(&g_alloc_mu);
  if (!found) return 1;
  free((void *)(uintptr_t)p);
  return 0;
}
CUresult cuMemcpyHtoD_v2(unsigned long long d, const void *s, size_t n) {
  return memcpy((void *)(uintptr_t)d, s, n), 0;
}
CUresult cuMemcpyDtoH_v2(void *d, unsigned long long s, size_t n) {
  return memcpy(d, (void *)(uintptr_t)s, n), 0;
}
CUresult cuGetErrorString(CUresult r, const char **s) {
  *s = r == 100 ? "no CUDA-capable device is detected (fake)" : "fake error";
  return 0;
}
