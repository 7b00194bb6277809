/* openblas_peer.c - see openblas_peer.h. */
#include "openblas_peer.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/target.h"
#include "train/measure.h"

/* cblas.h's enums, as the ABI fixes them */
enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };
typedef void (*sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha,
                         const float *a, int lda, const float *b, int ldb, float beta, float *c,
                         int ldc);

struct tlm_openblas {
  void *lib;
  sgemm_fn sgemm;
  char *(*corename)(void);
};

tlm_openblas *tlm_openblas_open(int threads, int isa, char *err, int errcap) {
  tlm_target host;
  tlm_target_detect(&host);
  /* OpenBLAS reads its kernel family when it loads */
  static const char *const cores[] = {"Prescott", "Nehalem", "Haswell", "SkylakeX"};
  if (isa >= 0 && isa < host.isa && isa <= TLM_ISA_AVX512) setenv("OPENBLAS_CORETYPE", cores[isa], 1);
  void *lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(err, (size_t)errcap, "OpenBLAS not installed (libopenblas.so.0: %s)", dlerror());
    return NULL;
  }
  tlm_openblas *b = calloc(1, sizeof *b);
  void (*set_threads)(int) = (void (*)(int))dlsym(lib, "openblas_set_num_threads");
  if (b) {
    b->lib = lib;
    b->sgemm = (sgemm_fn)dlsym(lib, "cblas_sgemm");
    b->corename = (char *(*)(void))dlsym(lib, "openblas_get_corename");
  }
  if (!b || !b->sgemm || !set_threads) {
    snprintf(err, (size_t)errcap, "libopenblas.so.0 lacks cblas_sgemm or openblas_set_num_threads");
    free(b);
    dlclose(lib);
    return NULL;
  }
  set_threads(threads);
  return b;
}

void tlm_openblas_close(tlm_openblas *b) {
  if (!b) return;
  dlclose(b->lib);
  free(b);
}

const char *tlm_openblas_core(const tlm_openblas *b) {
  const char *c = b && b->corename ? b->corename() : NULL;
  return c ? c : "?";
}

/* the cblas form of one operand of extent rows x cols with strides (sr,
 * sc): 0 with *trans and *ld set, -1 when neither stride is unit */
static int operand(int64_t rows, int64_t cols, int64_t sr, int64_t sc, int *trans, int *ld) {
  if (cols == 1) sc = 1; /* an axis of extent 1: any stride reads the same */
  if (rows == 1) sr = cols;
  if (sc == 1 && sr >= cols && sr <= 0x7fffffff) {
    *trans = NO_TRANS, *ld = (int)(sr > 0 ? sr : 1);
    return 0;
  }
  if (sr == 1 && sc >= rows && sc <= 0x7fffffff) {
    *trans = TRANS, *ld = (int)sc;
    return 0;
  }
  return -1;
}

int tlm_openblas_matmul(tlm_openblas *b, const tlm_task *task, const tlm_mm_args *a) {
  const tlm_matmul_task *m = &task->u.mm;
  if (task->kind != TLM_OP_MATMUL || m->has_bias || m->has_residual || m->act != TLM_ACT_NONE ||
      a->M > 0x7fffffff || a->N > 0x7fffffff || a->K > 0x7fffffff)
    return -1;
  int ta, tb, tc, lda, ldb, ldc;
  if (operand(a->M, a->K, a->sa[4], a->sa[5], &ta, &lda) ||
      operand(a->K, a->N, a->sb[4], a->sb[5], &tb, &ldb) ||
      operand(a->M, a->N, a->sc[4], a->sc[5], &tc, &ldc) || tc != NO_TRANS)
    return -1;
  int64_t batches = 1;
  for (int d = 0; d < m->nbatch; d++) batches *= m->batch[d];
  for (int64_t o = 0; o < batches; o++) {
    int64_t oa, ob, oc;
    tlm_mm_batch_offsets(task, a, o, &oa, &ob, &oc);
    b->sgemm(ROW_MAJOR, ta, tb, (int)a->M, (int)a->N, (int)a->K, 1.0f, a->a + oa, lda, a->b + ob,
             ldb, 0.0f, a->c + oc, ldc);
  }
  return 0;
}
