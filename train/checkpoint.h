/* checkpoint.h - model files written by the offline pipeline (train/,
 * outside libtlm): fp32 checkpoints, the int8 quantizer, and conversions
 * between the trainer's fp32 model and the decoder's int8 one. The file
 * layout is lm/model.h's. */
#ifndef TLM_TRAIN_CHECKPOINT_H
#define TLM_TRAIN_CHECKPOINT_H

#include "gpt2.h"
#include "lm/model.h"

/* Saves a trained fp32 model (kind 1) atomically (temporary file, then
 * rename). Returns TLM_OK or TLM_ERR_IO with a message. */
tlm_status tlm_gpt2_save(const tlm_gpt2 *m, const tlm_vocab *v, uint64_t seed, const char *path,
                         char *err, int errcap);

/* Loads an fp32 checkpoint into a new model. TLM_ERR_IO, TLM_ERR_FORMAT
 * (bad magic, version, kind, size, checksum, config or vocabulary). */
tlm_status tlm_gpt2_load(tlm_gpt2 *m, const char *path, char *err, int errcap);

/* Quantizes an fp32 model and writes the int8 file (kind 2) atomically. */
tlm_status tlm_lm_quantize(const tlm_gpt2 *m, const tlm_vocab *v, uint64_t seed,
                           const char *path, char *err, int errcap);

/* Builds an int8 model in memory from an fp32 one (what tlm_lm_quantize
 * writes), for tests. */
tlm_status tlm_lm_from_gpt2(tlm_lm_model *q, const tlm_gpt2 *m, const tlm_vocab *v);

/* The inverse, for fine-tuning a shipped int8 model: a new fp32 model
 * (*m, freed with tlm_gpt2_free) whose every weight is the int8 value times
 * its block's scale, and whose vectors (biases, LayerNorms, positions) are
 * copied; provenance (ISAs, rule version, hardware prompts) is kept. Not a
 * lossless round trip for the fp32 weights, but quantizing it again gives
 * the int8 weights back (tests/test_lm_model.c checks it).
 * TLM_OK or TLM_ERR_OUT_OF_MEMORY. */
tlm_status tlm_gpt2_from_lm(tlm_gpt2 *m, const tlm_lm_model *q);
#endif
