/* pool_case.h - pooling test cases (test_conv, test_generic): a case's op
 * and the dense shapes of its source and destination. */
#ifndef TLM_TESTS_POOL_CASE_H
#define TLM_TESTS_POOL_CASE_H

#include <stdint.h>

#include "tlm.h"

/* nd dims in all (3: 1-D, 4: 2-D, 5: 3-D); spatial (d, h, w) extents i,
 * window k (0: global), stride s, padding p */
typedef struct pool_case {
  int nd;
  int64_t n, c, i[3], k[3], s[3], p[3];
} pool_case;

/* The op of case pc (alg: 0 max, 1 average; lay: 0 NCHW, 1 NHWC) and the
 * shapes and element counts of its source xs/nx and destination ys/ny. */
static inline tlm_op pool_case_shapes(const pool_case *pc, int alg, int lay, int64_t xs[5],
                                      int64_t ys[5], int64_t *nx, int64_t *ny) {
  int nd = pc->nd, S = nd - 2, q = 0;
  int64_t o[3];
  for (int j = 0; j < 3; j++) {
    int64_t k = pc->k[j] ? pc->k[j] : pc->i[j];
    o[j] = pc->k[j] ? (pc->i[j] + 2 * pc->p[j] - k) / pc->s[j] + 1 : 1;
  }
  xs[q] = ys[q] = pc->n, q++;
  if (!lay) xs[q] = ys[q] = pc->c, q++;
  for (int j = 0; j < S; j++) xs[q] = pc->i[3 - S + j], ys[q] = o[3 - S + j], q++;
  if (lay) xs[q] = ys[q] = pc->c, q++;
  *nx = *ny = 1;
  for (int j = 0; j < nd; j++) *nx *= xs[j], *ny *= ys[j];
  tlm_op op = tlm_op_pool(lay ? TLM_LAYOUT_NHWC : TLM_LAYOUT_NCHW, alg ? TLM_POOL_AVG : TLM_POOL_MAX);
  for (int j = 0; j < 3; j++) {
    op.u.pool.kernel[j] = (int)pc->k[j];
    op.u.pool.stride[j] = (int)pc->s[j];
    op.u.pool.pad[j] = (int)pc->p[j];
  }
  return op;
}

#endif
