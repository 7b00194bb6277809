/* generic.h - tier-0 kernels: compiled ahead of time with the library, one
 * build per ISA, every extent and stride at run time (internal; issue #17).
 *
 * A shape the runtime has no kernel for runs on one of these at once while
 * its scheduled kernel compiles on the background thread (TLM_ASYNC=1),
 * so a new operator costs no compile on the caller's thread. They are
 * plain C whose inner loops the C compiler vectorizes (register blocks of
 * fixed size, block.h); correct for every task of their family (matmul,
 * convolution, pooling), as fast as a first answer needs to be, not as the
 * scheduled kernels.
 *
 * Layering: runtime/ below, engine/ above (engine/engine.c dispatches). */
#ifndef TLM_GENERIC_GENERIC_H
#define TLM_GENERIC_GENERIC_H

#include <stdint.h>

#include "../runtime/kernel_abi.h"
#include "../runtime/task.h"

/* Rows [begin, end) of a convolution: row r is (n, od, oh) =
 * (r / (OD*OH), r / OH % OD, r % OH); each row writes every channel of its
 * OW output pixels, epilogue included (bias, scale and shift, residual,
 * activation, in the order of tlm_ref_conv). t: the task (static fields:
 * groups, channels, window, strides, padding, dilation, epilogue); a: the
 * call's pointers, extents and strides (in elements). Thread-safe: rows
 * are independent, nothing is written but dst's rows [begin, end). */
typedef void (*tlm_generic_conv_fn)(const tlm_conv_task *t, const tlm_conv_args *a, int64_t begin,
                                    int64_t end);

/* The convolution kernel for a target ISA (TLM_ISA_*): the AVX-512 build
 * for TLM_ISA_AVX512, AVX2+FMA for TLM_ISA_AVX2, baseline x86-64 (SSE2)
 * for SSE and scalar; the caller guarantees the host runs that ISA (the
 * runtime's target ISA never exceeds the host's). Never NULL. */
tlm_generic_conv_fn tlm_generic_conv(int isa);

/* Iterations [begin, end) of a matmul's parallel loop (see
 * tlm_generic_matmul_iters): every batch, row and column of C, epilogue
 * included (bias, activation, residual, in the order of tlm_ref_matmul).
 * t: the task's static fields (batch dims and extents, epilogue); a: the
 * call's pointers, M, N, K and strides (bpk is not read). Thread-safe as
 * above. */
typedef void (*tlm_generic_matmul_fn)(const tlm_matmul_task *t, const tlm_mm_args *a,
                                      int64_t begin, int64_t end);
/* The matmul kernel for a target ISA, as tlm_generic_conv. Never NULL. */
tlm_generic_matmul_fn tlm_generic_matmul(int isa);

/* A generic matmul's iterations: batches x ceil(M / 4) row blocks x
 * ceil(N / 256) column chunks (generic/matmul.c). */
static inline int64_t tlm_generic_matmul_iters(int64_t batches, int64_t M, int64_t N) {
  return batches * ((M + 3) / 4) * ((N + 255) / 256);
}

/* Rows [begin, end) of a pooling, (n, od, oh) as for a convolution: max
 * (NaN propagates) or average (positions inside the input only, summed in
 * double), as tlm_ref_pool; a window extent of 0 is the whole input
 * extent. Thread-safe as above. Never NULL. */
typedef void (*tlm_generic_pool_fn)(const tlm_pool_task *t, const tlm_pool_args *a, int64_t begin,
                                    int64_t end);
tlm_generic_pool_fn tlm_generic_pool(int isa);

/* The iterations of a generic convolution's or pooling's parallel loop:
 * N * OD * OH. */
static inline int64_t tlm_generic_conv_rows(const tlm_conv_args *a) {
  return a->N * a->OD * a->OH;
}

#endif
