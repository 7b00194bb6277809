/* gpu_lang.h - GPU schedules as sentences of the tensor language
 * (internal; the words a GPU model will read and write).
 *
 * A sentence is the task, the GPU hardware prompt, the rule's decisions
 * and the schedule's decisions, as words:
 *
 *   op:matmul bias:0 act:none res:0 uA:1 uB:1 uC:1
 *   ax:b mag:.. frac:.. p2:..  ax:m ..  ax:n ..  ax:k ..       (as lm/vocab.h)
 *   gpu:sm90 sms:7 smem:17 regs:16 warp:32                     (log2 of SMs,
 *                                        shared memory bytes and registers per SM)
 *   <rule> tn:8 tm:8 bn:128 bm:128 bk:8 stages:2 unroll:8
 *   <sep> tn:4 tm:8 ...
 *
 * Row operators use op:softmax|layernorm|rmsnorm, causal:<0|1> in place of
 * bias, the unit flags of x, gamma and y, axes m = rows and n = cols. The
 * vocabulary of the CPU model (any TLM_LM_VOCAB_VERSION) does not hold these
 * words: a GPU model needs GPU-measured records first, and `tlm gpu export`
 * writes each kernel's sentence into the device check's manifest so its
 * timings are such records. */
#ifndef TLM_LM_GPU_LANG_H
#define TLM_LM_GPU_LANG_H

#include "../runtime/gpu.h"

/* Writes the sentence of (task, target, schedule) into buf (NUL-terminated,
 * truncated to cap). Deterministic. Returns buf. */
char *tlm_gpu_sentence(const tlm_task *task, const tlm_gpu_target *target,
                       const tlm_schedule *sched, char *buf, int cap);

#endif
