/* openblas_peer.h - OpenBLAS's cblas_sgemm as a benchmark contender, opened
 * at run time (dlopen of libopenblas.so.0: Debian's libopenblas0-pthread
 * or libopenblas0-openmp), so that nothing links against it and the tools
 * run without it.
 *
 * Not thread-safe: one process-wide library handle; call from one thread. */
#ifndef TLM_TOOLS_OPENBLAS_PEER_H
#define TLM_TOOLS_OPENBLAS_PEER_H

#include "api/tlm.h"
#include "runtime/kernel_abi.h"
#include "runtime/task.h"

typedef struct tlm_openblas tlm_openblas;

/* Opens OpenBLAS for `threads` threads, its kernels limited to tlm_isa `isa`
 * (OPENBLAS_CORETYPE, set before the library loads, when `isa` is below
 * the host's). NULL when the library is not installed (why in err). */
tlm_openblas *tlm_openblas_open(int threads, int isa, char *err, int errcap);
void tlm_openblas_close(tlm_openblas *b);

/* The kernel family OpenBLAS picked, e.g. "Haswell" or "SkylakeX". */
const char *tlm_openblas_core(const tlm_openblas *b);

/* C = A B for a matmul task without an epilogue, one cblas_sgemm per batch
 * (row-major; each operand dense along one axis: A or B given transposed
 * when its unit stride is along M or N). Returns 0, or -1 for a task
 * sgemm has no form for (bias, activation, residual, or strides that are
 * unit along neither axis). */
int tlm_openblas_matmul(tlm_openblas *b, const tlm_task *task, const tlm_mm_args *a);

#endif
