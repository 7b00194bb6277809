/* gpu_emu.h - runs the host form of a GPU kernel with the CUDA thread model
 * on the CPU (internal).
 *
 * Each GPU thread of a block is a host thread; a barrier of the kernel is a
 * barrier of those threads; blocks run one after another (block x fastest,
 * then y, then z). Shared memory is filled with NaN before each block, so
 * a thread reading an element no thread wrote poisons the result the
 * reference check then rejects. Made for checking schedules' indexing,
 * staging and barrier placement on machines without a GPU: slow (about
 * microseconds per barrier per thread), so keep the grids small.
 */
#ifndef TLM_RUNTIME_GPU_EMU_H
#define TLM_RUNTIME_GPU_EMU_H

#include <stdint.h>

#include "gpu.h"

/* The host form emitted by jit/codegen_gpu.c (TLM_GPU_CODE_HOST). */
typedef void (*tlm_gpu_host_fn)(const int64_t *args, const int32_t *ids, float *smem,
                                void (*barrier)(void *), void *barrier_ctx);

/* Runs fn over the grid of `launch` with args[GA_COUNT]. Returns 0, or -1
 * with a message: threads could not be created, memory ran out, or the
 * block's threads did not meet at a barrier within 30 s (a kernel whose
 * threads disagree on the number of barriers). Thread-safe. */
int tlm_gpu_emulate(tlm_gpu_host_fn fn, const int64_t *args, const tlm_gpu_launch *launch,
                    char *err, int errcap);

#endif
