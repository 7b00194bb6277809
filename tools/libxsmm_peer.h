/* libxsmm_peer.h - LIBXSMM's JIT small-matrix multiply (libxsmm_smmdispatch)
 * as a benchmark contender, for the matmuls within its limits: no
 * epilogue, operands not transposed, sizes its dispatcher accepts (beyond
 * its threshold it returns no kernel). Built into the tools only when
 * Debian's libxsmm-dev is found (TLM_HAVE_LIBXSMM).
 *
 * Not thread-safe: LIBXSMM's target is process-wide; call from one thread. */
#ifndef TLM_TOOLS_LIBXSMM_PEER_H
#define TLM_TOOLS_LIBXSMM_PEER_H

#include "runtime/kernel_abi.h"
#include "runtime/task.h"

/* Limits LIBXSMM's code generation to tlm_isa `isa` when it is below the
 * host's; returns the architecture LIBXSMM then targets ("hsw", "skx"). */
const char *tlm_libxsmm_init(int isa);

/* The kernel for a task (C = A B per batch, row-major), or NULL when the
 * task is outside LIBXSMM's limits (an epilogue, a transposed operand, a
 * size its dispatcher refuses). */
void *tlm_libxsmm_kernel(const tlm_task *task, const tlm_mm_args *a);

/* Runs kernel k (from tlm_libxsmm_kernel for this task) over every batch. */
void tlm_libxsmm_matmul(void *k, const tlm_task *task, const tlm_mm_args *a);

#endif
