/* gpt2.h - the tensor language model's architecture (internal): a GPT-2
 * (Radford et al. 2019) configuration, its parameter tensors and their
 * sizes, shared by the int8 decoder (lm/) and the fp32 trainer (train/,
 * outside libtlm).
 *
 * Token and learned position embeddings, L pre-LayerNorm blocks (causal
 * multi-head attention, GELU-tanh MLP of width 4C), final LayerNorm, output
 * projection tied to the token embedding. */
#ifndef TLM_LM_GPT2_H
#define TLM_LM_GPT2_H

#include <stddef.h>
#include <stdint.h>


typedef struct tlm_gpt2_config {
  int32_t vocab;   /* V */
  int32_t max_seq; /* T_max, learned positions */
  int32_t layers;  /* L */
  int32_t heads;   /* NH, divides C */
  int32_t width;   /* C */
} tlm_gpt2_config;

/* Parameter tensors, all views into one allocation. */
typedef struct tlm_gpt2_params {
  float *wte;     /* (V, C) */
  float *wpe;     /* (T_max, C) */
  float *ln1w, *ln1b;       /* (L, C) */
  float *qkvw, *qkvb;       /* (L, 3C, C), (L, 3C) */
  float *projw, *projb;     /* (L, C, C), (L, C) */
  float *ln2w, *ln2b;       /* (L, C) */
  float *fcw, *fcb;         /* (L, 4C, C), (L, 4C) */
  float *fcprojw, *fcprojb; /* (L, C, 4C), (L, C) */
  float *lnfw, *lnfb;       /* (C) */
} tlm_gpt2_params;

#define TLM_GPT2_NTENSORS 16

/* Number of floats of each parameter tensor, in the order of
 * tlm_gpt2_params. */
void tlm_gpt2_sizes(const tlm_gpt2_config *c, size_t sizes[TLM_GPT2_NTENSORS]);

#endif
