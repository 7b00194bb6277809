/* dispatch.c - the tier-0 kernels of each ISA build (generic.h) */
#include "generic.h"

#include "../runtime/target.h"

/* the three builds of a kernel (conv.c and matmul.c are compiled once per
 * ISA with TLM_GENERIC_SUFFIX avx512, avx2 and base) */
#define ISA_BUILDS(name, params)                                                              \
  void name##_avx512 params;                                                                   \
  void name##_avx2 params;                                                                     \
  void name##_base params;
#define PICK(name, isa)                                                                        \
  ((isa) >= TLM_ISA_AVX512 ? name##_avx512 : (isa) == TLM_ISA_AVX2 ? name##_avx2 : name##_base)

ISA_BUILDS(tlm_generic_conv, (const tlm_conv_task *t, const tlm_conv_args *a, int64_t begin,
                              int64_t end))
ISA_BUILDS(tlm_generic_matmul, (const tlm_matmul_task *t, const tlm_mm_args *a, int64_t begin,
                                int64_t end))

ISA_BUILDS(tlm_generic_pool, (const tlm_pool_task *t, const tlm_pool_args *a, int64_t begin,
                              int64_t end))

tlm_generic_pool_fn tlm_generic_pool(int isa) { return PICK(tlm_generic_pool, isa); }

tlm_generic_matmul_fn tlm_generic_matmul(int isa) { return PICK(tlm_generic_matmul, isa); }

tlm_generic_conv_fn tlm_generic_conv(int isa) { return PICK(tlm_generic_conv, isa); }
