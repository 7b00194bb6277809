/* family.c - the table of operator families (family.h): one row per
 * TLM_OP_ kind, designated by the kind. */
#include "family.h"

static const tlm_family *const k_families[] = {
    [TLM_OP_MATMUL] = &tlm_family_matmul,
    [TLM_OP_SOFTMAX] = &tlm_family_row,
    [TLM_OP_LAYERNORM] = &tlm_family_row,
    [TLM_OP_RMSNORM] = &tlm_family_row,
    [TLM_OP_CONV] = &tlm_family_conv,
    [TLM_OP_POOL] = &tlm_family_pool,
    [TLM_OP_ELTWISE] = &tlm_family_row,
    [TLM_OP_ROPE] = &tlm_family_row,
    [TLM_OP_ATTENTION] = &tlm_family_attention,
};

const tlm_family *tlm_family_of(const tlm_task *task) {
  int k = (int)task->kind;
  if (k < 0 || k >= (int)(sizeof k_families / sizeof k_families[0])) return NULL;
  return k_families[k];
}
