/* cuda_driver.h - the CUDA driver API, opened at run time (internal).
 *
 * libtlm has no link-time dependency on CUDA: tlm_cuda_open() dlopens
 * libcuda.so.1 and looks up the few entry points tlm uses, so the library
 * builds and runs on machines without a driver or a GPU (GPU requests then
 * get TLM_ERR_NO_DEVICE). The types and constants below are the driver
 * API's ABI as documented in cuda.h (CUDA 11 and later); tests compare
 * them with cuda.h where the toolkit is installed.
 */
#ifndef TLM_RUNTIME_CUDA_DRIVER_H
#define TLM_RUNTIME_CUDA_DRIVER_H

#include <stddef.h>
#include <stdint.h>

typedef int tlm_cu_result;              /* CUresult; 0 = CUDA_SUCCESS */
typedef int tlm_cu_device;              /* CUdevice */
typedef struct tlm_cu_ctx_ *tlm_cu_context;    /* CUcontext */
typedef struct tlm_cu_mod_ *tlm_cu_module;     /* CUmodule */
typedef struct tlm_cu_fn_ *tlm_cu_function;    /* CUfunction */
typedef struct tlm_cu_stream_ *tlm_cu_stream;  /* CUstream */
typedef unsigned long long tlm_cu_deviceptr;   /* CUdeviceptr (64-bit) */

/* CUdevice_attribute values */
enum {
  TLM_CU_ATTR_MAX_THREADS_PER_BLOCK = 1,
  TLM_CU_ATTR_MAX_SHARED_MEMORY_PER_BLOCK = 8,
  TLM_CU_ATTR_MAX_REGISTERS_PER_BLOCK = 12,
  TLM_CU_ATTR_WARP_SIZE = 10,
  TLM_CU_ATTR_MULTIPROCESSOR_COUNT = 16,
  TLM_CU_ATTR_COMPUTE_CAPABILITY_MAJOR = 75,
  TLM_CU_ATTR_COMPUTE_CAPABILITY_MINOR = 76,
  TLM_CU_ATTR_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81,
  TLM_CU_ATTR_MAX_REGISTERS_PER_MULTIPROCESSOR = 82
};
/* CUpointer_attribute (MEMORY_TYPE, DEVICE_ORDINAL) and CUmemorytype */
enum { TLM_CU_POINTER_ATTR_MEMORY_TYPE = 2, TLM_CU_POINTER_ATTR_DEVICE_ORDINAL = 9 };
enum { TLM_CU_MEMTYPE_HOST = 1, TLM_CU_MEMTYPE_DEVICE = 2, TLM_CU_MEMTYPE_ARRAY = 3,
       TLM_CU_MEMTYPE_UNIFIED = 4 };
/* CUjit_option values for cuModuleLoadDataEx */
enum { TLM_CU_JIT_INFO_LOG_BUFFER = 3, TLM_CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
       TLM_CU_JIT_ERROR_LOG_BUFFER = 5, TLM_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6 };

typedef struct tlm_cuda {
  void *lib; /* dlopen handle */
  tlm_cu_result (*Init)(unsigned flags);
  tlm_cu_result (*DriverGetVersion)(int *v);
  tlm_cu_result (*DeviceGetCount)(int *n);
  tlm_cu_result (*DeviceGet)(tlm_cu_device *d, int ordinal);
  tlm_cu_result (*DeviceGetAttribute)(int *v, int attr, tlm_cu_device d);
  tlm_cu_result (*DeviceGetName)(char *name, int len, tlm_cu_device d);
  tlm_cu_result (*DevicePrimaryCtxRetain)(tlm_cu_context *c, tlm_cu_device d);
  tlm_cu_result (*DevicePrimaryCtxRelease)(tlm_cu_device d);
  tlm_cu_result (*CtxPushCurrent)(tlm_cu_context c);
  tlm_cu_result (*CtxPopCurrent)(tlm_cu_context *c);
  tlm_cu_result (*ModuleLoadDataEx)(tlm_cu_module *m, const void *image, unsigned nopt,
                                    int *opts, void **vals);
  tlm_cu_result (*ModuleGetFunction)(tlm_cu_function *f, tlm_cu_module m, const char *name);
  tlm_cu_result (*ModuleUnload)(tlm_cu_module m);
  tlm_cu_result (*LaunchKernel)(tlm_cu_function f, unsigned gx, unsigned gy, unsigned gz,
                                unsigned bx, unsigned by, unsigned bz, unsigned smem,
                                tlm_cu_stream s, void **params, void **extra);
  tlm_cu_result (*StreamSynchronize)(tlm_cu_stream s);
  tlm_cu_result (*PointerGetAttribute)(void *data, int attr, tlm_cu_deviceptr p);
  tlm_cu_result (*MemAlloc)(tlm_cu_deviceptr *p, size_t bytes);
  tlm_cu_result (*MemFree)(tlm_cu_deviceptr p);
  tlm_cu_result (*MemcpyHtoD)(tlm_cu_deviceptr dst, const void *src, size_t bytes);
  tlm_cu_result (*MemcpyDtoH)(void *dst, tlm_cu_deviceptr src, size_t bytes);
  tlm_cu_result (*GetErrorString)(tlm_cu_result r, const char **s);
} tlm_cuda;

/* Opens the driver library (libcuda.so.1, or the path in TLM_CUDA_LIBRARY
 * when set) and resolves every entry point; does not call cuInit. Returns
 * 0, or -1 with a message (no driver installed, a symbol missing). *d is
 * zeroed first; close it with tlm_cuda_close. Thread-safe. */
int tlm_cuda_open(tlm_cuda *d, char *err, int errcap);
void tlm_cuda_close(tlm_cuda *d);

/* "CUDA_ERROR_...: text" of a result, into buf; returns buf. */
char *tlm_cuda_error(const tlm_cuda *d, tlm_cu_result r, char *buf, int cap);

#endif
