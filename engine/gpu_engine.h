/* gpu_engine.h - tlm_run on CUDA device memory (internal).
 *
 * The GPU side of the dispatcher: the driver opened on first use, one
 * primary context of tlm_config.cuda_device, kernels by shape key and by
 * kernel key (cache/key.h) in memory, each a PTX module loaded with
 * cuModuleLoadDataEx. Every call is serialized by the state's mutex
 * (lookups are a hash probe; a miss builds under it).
 */
#ifndef TLM_RUNTIME_GPU_ENGINE_H
#define TLM_RUNTIME_GPU_ENGINE_H

#include "engine.h"
#include "../runtime/gpu.h"

/* Runs a validated task (tlm_gpu_supports) on device pointers given in
 * args (tlm_gpu_mm_args or tlm_gpu_row_args; spans[i] the bytes the
 * i-th pointer argument reaches, each checked at both ends to be device
 * or managed memory of this device) on `stream` (a CUstream,
 * NULL = the legacy default stream), synchronizing that stream when
 * `sync`. Returns TLM_OK or a status with a message in err
 * (TLM_ERR_NO_DEVICE, TLM_ERR_INVALID_ARGUMENT for memory the driver does
 * not know as device memory, TLM_ERR_UNSUPPORTED for a grid past CUDA's
 * limits, TLM_ERR_JIT, TLM_ERR_OUT_OF_MEMORY, TLM_ERR_INTERNAL for a
 * failed launch or synchronization: a bad stream, or an error an earlier
 * kernel left on the context). Thread-safe. Counts a cache miss (and a
 * compile unless the PTX came from disk) or a hit, like host calls. */
tlm_status tlm_gpu_run(tlm_runtime *rt, const tlm_task *task, const int64_t *args,
                       const size_t spans[5], void *stream, int sync, char *err, int errcap);

/* The target of the runtime's device, opening the driver if needed.
 * Returns TLM_OK or TLM_ERR_NO_DEVICE with a message. */
tlm_status tlm_gpu_describe(tlm_runtime *rt, tlm_gpu_target *out, char *err, int errcap);

/* Frees the GPU state of a runtime: modules unloaded, the primary context
 * released, the driver closed. No other call on rt may run. */
void tlm_gpu_destroy(tlm_runtime *rt);

#endif
