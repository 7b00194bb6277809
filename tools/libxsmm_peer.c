/* libxsmm_peer.c - see libxsmm_peer.h. */
#include "libxsmm_peer.h"

#include <libxsmm.h>

#include "runtime/target.h"
#include "train/measure.h"

const char *tlm_libxsmm_init(int isa) {
  static const char *const arch[] = {"generic", "wsm", "hsw", "skx"};
  tlm_target host;
  tlm_target_detect(&host);
  /* after libxsmm_init, which sets the arch it detects (set before it, the
   * AVX2 runs of session 27 got "cpx" code: 232 GFLOPS on a 115 GFLOPS
   * AVX2 peak) */
  libxsmm_init();
  if (isa >= 0 && isa < host.isa && isa <= TLM_ISA_AVX512) libxsmm_set_target_arch(arch[isa]);
  return libxsmm_get_target_arch();
}

/* row-major C (M x N) = A (M x K) B (K x N) is column-major C^T = B^T A^T:
 * LIBXSMM's m = N, n = M, its A = our B (leading dimension: B's row
 * stride), its B = our A */
void *tlm_libxsmm_kernel(const tlm_task *task, const tlm_mm_args *a) {
  const tlm_matmul_task *m = &task->u.mm;
  if (task->kind != TLM_OP_MATMUL || m->has_bias || m->has_residual || m->act != TLM_ACT_NONE)
    return NULL;
  int64_t sa = a->M == 1 ? a->K : a->sa[4], sb = a->K == 1 ? a->N : a->sb[4];
  int64_t sc = a->M == 1 ? a->N : a->sc[4];
  if ((a->K > 1 && a->sa[5] != 1) || (a->N > 1 && (a->sb[5] != 1 || a->sc[5] != 1)) ||
      sa < a->K || sb < a->N || sc < a->N || a->M > 0x7fffffff || a->N > 0x7fffffff ||
      a->K > 0x7fffffff || sa > 0x7fffffff || sb > 0x7fffffff || sc > 0x7fffffff)
    return NULL;
  const libxsmm_blasint lda = (libxsmm_blasint)sb, ldb = (libxsmm_blasint)sa,
                        ldc = (libxsmm_blasint)sc;
  const float alpha = 1.0f, beta = 0.0f;
  const int flags = LIBXSMM_GEMM_FLAG_BETA_0;
  libxsmm_smmfunction f =
      libxsmm_smmdispatch((libxsmm_blasint)a->N, (libxsmm_blasint)a->M, (libxsmm_blasint)a->K,
                          &lda, &ldb, &ldc, &alpha, &beta, &flags, NULL);
  return (void *)f;
}

void tlm_libxsmm_matmul(void *k, const tlm_task *task, const tlm_mm_args *a) {
  const tlm_matmul_task *m = &task->u.mm;
  libxsmm_smmfunction f = (libxsmm_smmfunction)k;
  int64_t batches = 1;
  for (int d = 0; d < m->nbatch; d++) batches *= m->batch[d];
  for (int64_t o = 0; o < batches; o++) {
    int64_t oa, ob, oc;
    tlm_mm_batch_offsets(task, a, o, &oa, &ob, &oc);
    f(a->b + ob, a->a + oa, a->c + oc);
  }
}
