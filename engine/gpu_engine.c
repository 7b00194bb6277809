/* gpu_engine.c - tlm_run on CUDA device memory (see gpu_engine.h). */
#include "gpu_engine.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../cache/disk.h"
#include "../cache/key.h"
#include "../cache/map.h"
#include "../jit/codegen_gpu.h"
#include "../runtime/cuda_driver.h"

typedef struct gpu_kernel {
  tlm_key key; /* kernel key */
  tlm_schedule sched;
  tlm_cu_module mod;
  tlm_cu_function fn;
} gpu_kernel;

typedef struct tlm_gpu_state {
  pthread_mutex_t mu;
  tlm_status status; /* TLM_OK, or why there is no device (kept) */
  char msg[256];
  tlm_cuda cu;
  tlm_cu_device dev;
  tlm_cu_context ctx;
  int ctx_retained;
  tlm_gpu_target target;
  tlm_map shapes;  /* shape key -> gpu_kernel */
  tlm_map kernels; /* kernel key -> gpu_kernel */
  gpu_kernel **list;
  size_t n, cap;
} tlm_gpu_state;

static pthread_mutex_t g_create_mu = PTHREAD_MUTEX_INITIALIZER;

static double gpu_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Opens the driver, the device and its primary context; fills st->target. */
static void gpu_open(tlm_runtime *rt, tlm_gpu_state *st) {
  char e[200];
  tlm_cuda *cu = &st->cu;
  if (tlm_cuda_open(cu, st->msg, sizeof st->msg)) {
    st->status = TLM_ERR_NO_DEVICE;
    return;
  }
  int n = 0, ordinal = rt->cfg.cuda_device;
  tlm_cu_result r = cu->Init(0);
  if (!r) r = cu->DeviceGetCount(&n);
  if (r) {
    snprintf(st->msg, sizeof st->msg, "the CUDA driver did not start: %s",
             tlm_cuda_error(cu, r, e, sizeof e));
    st->status = TLM_ERR_NO_DEVICE;
    return;
  }
  if (ordinal >= n) {
    snprintf(st->msg, sizeof st->msg, "no CUDA device %d (the driver sees %d)", ordinal, n);
    st->status = TLM_ERR_NO_DEVICE;
    return;
  }
  tlm_gpu_target *t = &st->target;
  memset(t, 0, sizeof *t);
  int major = 0, minor = 0, v = 0;
  r = cu->DeviceGet(&st->dev, ordinal);
#define ATTR(field, id) \
  if (!r) r = cu->DeviceGetAttribute(&v, id, st->dev), t->field = v
  ATTR(sm_count, TLM_CU_ATTR_MULTIPROCESSOR_COUNT);
  ATTR(max_threads_block, TLM_CU_ATTR_MAX_THREADS_PER_BLOCK);
  ATTR(regs_per_sm, TLM_CU_ATTR_MAX_REGISTERS_PER_MULTIPROCESSOR);
  ATTR(smem_per_block, TLM_CU_ATTR_MAX_SHARED_MEMORY_PER_BLOCK);
  ATTR(smem_per_sm, TLM_CU_ATTR_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
  ATTR(warp, TLM_CU_ATTR_WARP_SIZE);
#undef ATTR
  if (!r) r = cu->DeviceGetAttribute(&major, TLM_CU_ATTR_COMPUTE_CAPABILITY_MAJOR, st->dev);
  if (!r) r = cu->DeviceGetAttribute(&minor, TLM_CU_ATTR_COMPUTE_CAPABILITY_MINOR, st->dev);
  if (!r) r = cu->DriverGetVersion(&v), t->driver_version = v;
  if (!r) r = cu->DeviceGetName(t->name, (int)sizeof t->name - 1, st->dev);
  if (!r) r = cu->DevicePrimaryCtxRetain(&st->ctx, st->dev);
  if (r) {
    snprintf(st->msg, sizeof st->msg, "CUDA device %d: %s", ordinal,
             tlm_cuda_error(cu, r, e, sizeof e));
    st->status = TLM_ERR_NO_DEVICE;
    return;
  }
  st->ctx_retained = 1;
  t->sm = major * 10 + minor;
  t->regs_per_thread = 255;
  /* the name NUL-padded: its bytes are part of keys */
  size_t len = strnlen(t->name, sizeof t->name);
  memset(t->name + len, 0, sizeof t->name - len);
  st->status = TLM_OK;
}

static tlm_gpu_state *gpu_state(tlm_runtime *rt) {
  tlm_gpu_state *st = atomic_load_explicit(&rt->gpu, memory_order_acquire);
  if (st) return st;
  pthread_mutex_lock(&g_create_mu);
  st = atomic_load_explicit(&rt->gpu, memory_order_acquire);
  if (!st && (st = calloc(1, sizeof *st)) != NULL) {
    pthread_mutex_init(&st->mu, NULL);
    tlm_map_init(&st->shapes);
    tlm_map_init(&st->kernels);
    gpu_open(rt, st);
    atomic_store_explicit(&rt->gpu, st, memory_order_release);
  }
  pthread_mutex_unlock(&g_create_mu);
  return st;
}

/* The runtime's GPU state, or a status (and message) saying why there is
 * none: out of memory, or the device's status kept from opening it. */
static tlm_status usable_state(tlm_runtime *rt, tlm_gpu_state **out, char *err, int errcap) {
  tlm_gpu_state *st = *out = gpu_state(rt);
  if (!st) {
    snprintf(err, (size_t)errcap, "out of memory");
    return TLM_ERR_OUT_OF_MEMORY;
  }
  if (st->status != TLM_OK) snprintf(err, (size_t)errcap, "%s", st->msg);
  return st->status;
}

tlm_status tlm_gpu_describe(tlm_runtime *rt, tlm_gpu_target *out, char *err, int errcap) {
  tlm_gpu_state *st;
  tlm_status s = usable_state(rt, &st, err, errcap);
  if (s != TLM_OK) return s;
  *out = st->target;
  return TLM_OK;
}

/* Builds (or finds by kernel key) the kernel of a shape; st->mu held and
 * the context current. */
static tlm_status gpu_build(tlm_runtime *rt, tlm_gpu_state *st, const tlm_task *task,
                            gpu_kernel **out, char *err, int errcap) {
  tlm_gpu_space sp;
  if (tlm_gpu_space_init(&sp, task, &st->target)) {
    snprintf(err, (size_t)errcap, "this operator has no GPU kernels yet");
    return TLM_ERR_UNSUPPORTED;
  }
  tlm_schedule sched;
  tlm_gpu_space_default(&sp, &sched);
  tlm_key kk;
  tlm_key_gpu_kernel(&kk, task, &st->target, &sched);
  gpu_kernel *k = tlm_map_get(&st->kernels, &kk);
  if (k) {
    *out = k;
    return TLM_OK;
  }
  if (st->n == st->cap) {
    size_t cap = st->cap ? 2 * st->cap : 16;
    gpu_kernel **l = realloc(st->list, cap * sizeof *l);
    if (!l) goto oom;
    st->list = l, st->cap = cap;
  }
  char *ptx = NULL;
  char name[48];
  static const char *const ops[] = {[TLM_OP_MATMUL] = "mm", [TLM_OP_SOFTMAX] = "softmax",
                                    [TLM_OP_LAYERNORM] = "layernorm", [TLM_OP_RMSNORM] = "rmsnorm"};
  snprintf(name, sizeof name, "tlm_gpu_%s_%016llx", ops[task->kind], (unsigned long long)kk.hash_lo);
  /* the disk cache keeps the PTX under the kernel key (verified like CPU
   * objects: owner, mode, checksum, full key); the driver assembles it */
  if (rt->disk) {
    void *obj = NULL;
    size_t len = 0;
    char sym[64];
    if (!tlm_disk_load_kernel(rt->disk, &kk, &obj, &len, sym, sizeof sym)) {
      if (len > 0 && ((char *)obj)[len - 1] == 0 && !strcmp(sym, name))
        ptx = obj;
      else
        free(obj);
    }
  }
  int from_disk = ptx != NULL;
  if (from_disk) atomic_fetch_add_explicit(&rt->disk_kernel_hits, 1, memory_order_relaxed);
  if (!ptx) {
    double t0 = gpu_now_ms();
    if (tlm_gpu_kernel_ptx(task, &sched, st->target.sm, name, &ptx, err, errcap)) {
      atomic_fetch_add_explicit(&rt->compile_fail, 1, memory_order_relaxed);
      return TLM_ERR_JIT;
    }
    atomic_fetch_add_explicit(&rt->compiles, 1, memory_order_relaxed);
    double ms = gpu_now_ms() - t0, old = atomic_load(&rt->compile_ms);
    while (!atomic_compare_exchange_weak(&rt->compile_ms, &old, old + ms)) {
    }
  }
  if (rt->disk && !from_disk) {
    char problem[160], decisions[256];
    tlm_gpu_space gs;
    tlm_gpu_space_init(&gs, task, &st->target);
    tlm_task_str(task, problem, (int)sizeof problem - 8);
    strcat(problem, " gpu");
    tlm_gpu_schedule_str(&gs, &sched, decisions, sizeof decisions);
    tlm_disk_store_kernel(rt->disk, &kk, ptx, strlen(ptx) + 1, name, problem, decisions);
  }
  k = calloc(1, sizeof *k);
  if (!k) {
    free(ptx);
    goto oom;
  }
  k->key = kk, k->sched = sched;
  char log[2048] = "";
  int opts[2] = {TLM_CU_JIT_ERROR_LOG_BUFFER, TLM_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *vals[2] = {log, (void *)(uintptr_t)sizeof log};
  tlm_cu_result r = st->cu.ModuleLoadDataEx(&k->mod, ptx, 2, opts, vals);
  free(ptx);
  if (!r) r = st->cu.ModuleGetFunction(&k->fn, k->mod, name);
  if (r) {
    char e[200];
    snprintf(err, (size_t)errcap, "the driver rejected the kernel's PTX: %s %.1500s",
             tlm_cuda_error(&st->cu, r, e, sizeof e), log);
    if (k->mod) st->cu.ModuleUnload(k->mod);
    free(k);
    return TLM_ERR_JIT;
  }
  if (tlm_map_put(&st->kernels, &kk, k)) {
    st->cu.ModuleUnload(k->mod);
    free(k);
    goto oom;
  }
  st->list[st->n++] = k;
  *out = k;
  return TLM_OK;
oom:
  snprintf(err, (size_t)errcap, "out of memory");
  return TLM_ERR_OUT_OF_MEMORY;
}

tlm_status tlm_gpu_run(tlm_runtime *rt, const tlm_task *task, const int64_t *args,
                       const size_t spans[5], void *stream, int sync, char *err, int errcap) {
  tlm_gpu_state *st;
  tlm_status s0 = usable_state(rt, &st, err, errcap);
  if (s0 != TLM_OK) return s0;
  if (!tlm_gpu_supports(task)) {
    snprintf(err, (size_t)errcap, "this operator has no GPU kernels yet");
    return TLM_ERR_UNSUPPORTED;
  }
  int nargs = tlm_gpu_arg_count(task), nptr = task->kind == TLM_OP_MATMUL ? 5 : 4;
  tlm_status status = TLM_OK;
  char e[200];
  pthread_mutex_lock(&st->mu);
  tlm_cu_result r = st->cu.CtxPushCurrent(st->ctx);
  if (r) {
    snprintf(err, (size_t)errcap, "cannot make the device's context current: %s",
             tlm_cuda_error(&st->cu, r, e, sizeof e));
    pthread_mutex_unlock(&st->mu);
    return TLM_ERR_NO_DEVICE;
  }
  /* every operand must be memory the device can address */
  static const char *const mm_names[5] = {"A", "B", "C", "bias", "residual"},
                           *const row_names[4] = {"x", "y", "gamma", "beta"};
  const char *const *names = task->kind == TLM_OP_MATMUL ? mm_names : row_names;
  for (int i = 0; i < nptr && status == TLM_OK; i++) {
    if (!args[i]) continue;
    /* the first and the last element's addresses: device or managed
     * memory, on this device */
    uint64_t ends[2] = {(uint64_t)args[i], (uint64_t)args[i] + (spans[i] > 4 ? spans[i] - 4 : 0)};
    for (int e2 = 0; e2 < 2 && status == TLM_OK; e2++) {
      unsigned int mt = 0;
      int ordinal = -1;
      r = st->cu.PointerGetAttribute(&mt, TLM_CU_POINTER_ATTR_MEMORY_TYPE, (tlm_cu_deviceptr)ends[e2]);
      if (!r && mt == TLM_CU_MEMTYPE_DEVICE)
        r = st->cu.PointerGetAttribute(&ordinal, TLM_CU_POINTER_ATTR_DEVICE_ORDINAL,
                                       (tlm_cu_deviceptr)ends[e2]);
      if (r || (mt != TLM_CU_MEMTYPE_DEVICE && mt != TLM_CU_MEMTYPE_UNIFIED) ||
          (mt == TLM_CU_MEMTYPE_DEVICE && ordinal != rt->cfg.cuda_device)) {
        snprintf(err, (size_t)errcap,
                 "%s (%p, %zu bytes) is not CUDA device or managed memory of device %d%s", names[i],
                 (void *)(uintptr_t)args[i], spans[i], rt->cfg.cuda_device,
                 e2 ? " to its end" : "");
        status = TLM_ERR_INVALID_ARGUMENT;
      }
    }
  }
  gpu_kernel *k = NULL;
  tlm_key sk;
  if (status == TLM_OK) {
    tlm_key_gpu_shape(&sk, task, &st->target);
    k = tlm_map_get(&st->shapes, &sk);
    if (k) {
      atomic_fetch_add_explicit(&rt->hits, 1, memory_order_relaxed);
    } else {
      atomic_fetch_add_explicit(&rt->misses, 1, memory_order_relaxed);
      status = gpu_build(rt, st, task, &k, err, errcap);
      if (status == TLM_OK && tlm_map_put(&st->shapes, &sk, k)) {
        snprintf(err, (size_t)errcap, "out of memory");
        status = TLM_ERR_OUT_OF_MEMORY;
      }
    }
  }
  tlm_gpu_launch l;
  if (status == TLM_OK && tlm_gpu_launch_dims(task, &k->sched, &l)) {
    snprintf(err, (size_t)errcap, "grid of %lld x %lld x %lld blocks is past CUDA's limits",
             (long long)l.grid_x, (long long)l.grid_y, (long long)l.grid_z);
    status = TLM_ERR_UNSUPPORTED;
  }
  if (status == TLM_OK) {
    int64_t a[TLM_GPU_MAX_ARGS];
    void *params[TLM_GPU_MAX_ARGS];
    for (int i = 0; i < nargs; i++) a[i] = args[i], params[i] = &a[i];
    r = st->cu.LaunchKernel(k->fn, (unsigned)l.grid_x, (unsigned)l.grid_y, (unsigned)l.grid_z,
                            (unsigned)l.threads, 1, 1, 0, (tlm_cu_stream)stream, params, NULL);
    if (!r && sync) r = st->cu.StreamSynchronize((tlm_cu_stream)stream);
    if (r) {
      snprintf(err, (size_t)errcap, "%s failed: %s", sync ? "launch or synchronization" : "launch",
               tlm_cuda_error(&st->cu, r, e, sizeof e));
      status = TLM_ERR_INTERNAL;
    }
  }
  tlm_cu_context dummy;
  st->cu.CtxPopCurrent(&dummy);
  pthread_mutex_unlock(&st->mu);
  return status;
}

void tlm_gpu_destroy(tlm_runtime *rt) {
  tlm_gpu_state *st = atomic_load_explicit(&rt->gpu, memory_order_acquire);
  if (!st) return;
  if (st->ctx_retained && !st->cu.CtxPushCurrent(st->ctx)) {
    for (size_t i = 0; i < st->n; i++) st->cu.ModuleUnload(st->list[i]->mod);
    tlm_cu_context dummy;
    st->cu.CtxPopCurrent(&dummy);
  }
  for (size_t i = 0; i < st->n; i++) free(st->list[i]);
  free(st->list);
  if (st->ctx_retained) st->cu.DevicePrimaryCtxRelease(st->dev);
  tlm_map_free(&st->shapes);
  tlm_map_free(&st->kernels);
  tlm_cuda_close(&st->cu);
  pthread_mutex_destroy(&st->mu);
  free(st);
  atomic_store_explicit(&rt->gpu, NULL, memory_order_release);
}
