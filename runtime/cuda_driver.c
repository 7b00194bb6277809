/* cuda_driver.c - the CUDA driver API through dlopen (see cuda_driver.h). */
#include "cuda_driver.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tlm_cuda_open(tlm_cuda *d, char *err, int errcap) {
  memset(d, 0, sizeof *d);
  const char *path = getenv("TLM_CUDA_LIBRARY");
  if (!path || !*path) path = "libcuda.so.1";
  d->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!d->lib) {
    const char *e = dlerror();
    snprintf(err, (size_t)errcap, "no CUDA driver (%s): %s", path, e ? e : "not found");
    return -1;
  }
  /* the versioned names are the current ABI of those entry points */
  static const struct {
    const char *name;
    size_t off;
  } syms[] = {
      {"cuInit", offsetof(tlm_cuda, Init)},
      {"cuDriverGetVersion", offsetof(tlm_cuda, DriverGetVersion)},
      {"cuDeviceGetCount", offsetof(tlm_cuda, DeviceGetCount)},
      {"cuDeviceGet", offsetof(tlm_cuda, DeviceGet)},
      {"cuDeviceGetAttribute", offsetof(tlm_cuda, DeviceGetAttribute)},
      {"cuDeviceGetName", offsetof(tlm_cuda, DeviceGetName)},
      {"cuDevicePrimaryCtxRetain", offsetof(tlm_cuda, DevicePrimaryCtxRetain)},
      {"cuDevicePrimaryCtxRelease_v2", offsetof(tlm_cuda, DevicePrimaryCtxRelease)},
      {"cuCtxPushCurrent_v2", offsetof(tlm_cuda, CtxPushCurrent)},
      {"cuCtxPopCurrent_v2", offsetof(tlm_cuda, CtxPopCurrent)},
      {"cuModuleLoadDataEx", offsetof(tlm_cuda, ModuleLoadDataEx)},
      {"cuModuleGetFunction", offsetof(tlm_cuda, ModuleGetFunction)},
      {"cuModuleUnload", offsetof(tlm_cuda, ModuleUnload)},
      {"cuLaunchKernel", offsetof(tlm_cuda, LaunchKernel)},
      {"cuStreamSynchronize", offsetof(tlm_cuda, StreamSynchronize)},
      {"cuPointerGetAttribute", offsetof(tlm_cuda, PointerGetAttribute)},
      {"cuMemAlloc_v2", offsetof(tlm_cuda, MemAlloc)},
      {"cuMemFree_v2", offsetof(tlm_cuda, MemFree)},
      {"cuMemcpyHtoD_v2", offsetof(tlm_cuda, MemcpyHtoD)},
      {"cuMemcpyDtoH_v2", offsetof(tlm_cuda, MemcpyDtoH)},
      {"cuGetErrorString", offsetof(tlm_cuda, GetErrorString)},
  };
  for (size_t i = 0; i < sizeof syms / sizeof *syms; i++) {
    void *f = dlsym(d->lib, syms[i].name);
    if (!f) {
      snprintf(err, (size_t)errcap, "CUDA driver %s has no %s", path, syms[i].name);
      tlm_cuda_close(d);
      return -1;
    }
    memcpy((char *)d + syms[i].off, &f, sizeof f);
  }
  return 0;
}

void tlm_cuda_close(tlm_cuda *d) {
  if (d->lib) dlclose(d->lib);
  memset(d, 0, sizeof *d);
}

char *tlm_cuda_error(const tlm_cuda *d, tlm_cu_result r, char *buf, int cap) {
  const char *s = NULL;
  if (d->GetErrorString && d->GetErrorString(r, &s) != 0) s = NULL;
  snprintf(buf, (size_t)cap, "CUDA error %d%s%s", r, s ? ": " : "", s ? s : "");
  return buf;
}
