/* gpt2.h - the fp32 GPT-2 trainer of the tensor language model (train/,
 * outside libtlm), written in the style of llm.c (plain structs, free
 * functions over float arrays, shapes in comments) but our own code. The
 * architecture (configuration, parameter tensors, sizes) is lm/gpt2.h's,
 * shared with the int8 decoder.
 *
 * The large matmuls run through tlm_run() on the given runtime, as any
 * application of the library would (its kernels never split K, so results
 * do not depend on the thread count); everything is deterministic for a
 * seed.
 *
 * The loss is cross-entropy over decision positions only, with the softmax
 * restricted to the candidates the schedule space allows at that position
 * (the same mask the constrained decoder applies), averaged over the
 * decision positions that have more than one candidate. */
#ifndef TLM_TRAIN_GPT2_H
#define TLM_TRAIN_GPT2_H

#include <stddef.h>
#include <stdint.h>

#include "lm/gpt2.h"
#include "lm/vocab.h"
#include "tlm.h"

typedef struct tlm_gpt2 {
  tlm_gpt2_config cfg;
  size_t nparams;
  float *mem;          /* parameters */
  tlm_gpt2_params p;
  /* training state (NULL until tlm_gpt2_train_init) */
  float *grad_mem, *m_mem, *v_mem;
  tlm_gpt2_params g;
  int B, T;            /* batch shape the activations were sized for */
  float *acts;         /* activations, see gpt2.c */
  size_t nacts;
  float *grad_acts;
  tlm_runtime *rt;     /* borrowed: runs the matmuls */
  /* inputs of the last forward, borrowed for the backward */
  const int32_t *tokens, *targets;
  const uint64_t (*allowed)[TLM_LM_MAX_VOCAB / 64];
  int64_t step;
  /* provenance written into model files (lm/model.h): the tlm_isa bits of
   * the targets whose prompts the model was trained on, and the
   * TLM_RULE_VERSION of the rule in those prompts; 0 = not set; and the
   * distinct hardware prompts of those sentences */
  uint32_t isa_seen, rule_version;
  tlm_lm_hw_set hw_seen;
  /* the sentence margin (nats) the model was gated at, written into its
   * files (format 4); NaN, the default: none, the runtime's default */
  double sentence_margin;
  /* the vocabulary version of its checkpoint or int8 model (0: a new
   * model, trained with this build's TLM_LM_VOCAB_VERSION) */
  int32_t vocab_version;
} tlm_gpt2;

/* Allocates a model with GPT-2's initialization (normal, std 0.02; the two
 * residual projections std 0.02 / sqrt(2 L)) from `seed`. Returns 0, -1. */
int tlm_gpt2_init(tlm_gpt2 *m, const tlm_gpt2_config *c, uint64_t seed);
void tlm_gpt2_free(tlm_gpt2 *m);

/* Prepares training for batches of B sequences of T tokens (T <= max_seq),
 * running matmuls on `rt`. Returns 0, -1. */
int tlm_gpt2_train_init(tlm_gpt2 *m, int B, int T, tlm_runtime *rt);

/* Forward pass over tokens (B, T). With `allowed` (B*T rows of
 * TLM_LM_MAX_VOCAB bits; rows with fewer than 2 bits carry no loss) also
 * computes and returns the mean loss; else returns 0. Logits of the last
 * forward are in tlm_gpt2_logits(). */
float tlm_gpt2_forward(tlm_gpt2 *m, const int32_t *tokens, const int32_t *targets,
                       const uint64_t (*allowed)[TLM_LM_MAX_VOCAB / 64]);

/* (B, T, V) logits of the last forward. */
const float *tlm_gpt2_logits(const tlm_gpt2 *m);

/* Gradients of the last forward's loss (zeroes them first). */
void tlm_gpt2_backward(tlm_gpt2 *m);

/* AdamW (Loshchilov & Hutter 2019) step with global-norm gradient
 * clipping at `clip`; weight decay applies to matrices only. Returns the
 * gradient norm before clipping. */
float tlm_gpt2_update(tlm_gpt2 *m, float lr, float beta1, float beta2, float eps,
                      float weight_decay, float clip);

/* Learning rate at `step`: linear warm-up, then cosine decay to min_lr. */
float tlm_gpt2_lr(int64_t step, int64_t warmup, int64_t total, float max_lr, float min_lr);

#endif
