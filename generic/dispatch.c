/* dispatch.c - the tier-0 kernels of each ISA build (generic.h) */
#include "generic.h"

#include "../runtime/target.h"

void tlm_generic_conv_avx512(const tlm_conv_task *t, const tlm_conv_args *a, int64_t begin,
                             int64_t end);
void tlm_generic_conv_avx2(const tlm_conv_task *t, const tlm_conv_args *a, int64_t begin,
                           int64_t end);
void tlm_generic_conv_base(const tlm_conv_task *t, const tlm_conv_args *a, int64_t begin,
                           int64_t end);

void tlm_generic_matmul_avx512(const tlm_matmul_task *t, const tlm_mm_args *a, int64_t begin,
                               int64_t end);
void tlm_generic_matmul_avx2(const tlm_matmul_task *t, const tlm_mm_args *a, int64_t begin,
                             int64_t end);
void tlm_generic_matmul_base(const tlm_matmul_task *t, const tlm_mm_args *a, int64_t begin,
                             int64_t end);

tlm_generic_matmul_fn tlm_generic_matmul(int isa) {
  return isa >= TLM_ISA_AVX512 ? tlm_generic_matmul_avx512
         : isa == TLM_ISA_AVX2 ? tlm_generic_matmul_avx2
                               : tlm_generic_matmul_base;
}

tlm_generic_conv_fn tlm_generic_conv(int isa) {
  return isa >= TLM_ISA_AVX512 ? tlm_generic_conv_avx512
         : isa == TLM_ISA_AVX2 ? tlm_generic_conv_avx2
                               : tlm_generic_conv_base;
}
