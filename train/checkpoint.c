/* checkpoint.c - writing model files (fp32 checkpoints and the int8 models
 * the quantizer makes, atomically), reading checkpoints, and conversions
 * between the trainer's fp32 model and the decoder's int8 one. The file
 * layout is lm/model.h's; reading and verification are lm's
 * (tlm_lm_file_read). */
#include "checkpoint.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

typedef struct wbuf {
  uint8_t *p;
  size_t len, cap;
  int oom;
} wbuf;

static void put(wbuf *b, const void *src, size_t n) {
  if (b->oom) return;
  if (b->len + n > b->cap) {
    size_t cap = (b->len + n) * 2 + 4096;
    uint8_t *p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, src, n);
  b->len += n;
}
static void put_u32(wbuf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(wbuf *b, uint64_t v) { put(b, &v, 8); }

static void header(wbuf *b, uint32_t kind, const tlm_gpt2_config *c, const tlm_vocab *v,
                   int64_t step, uint64_t seed, uint32_t isa_seen, uint32_t rule_version,
                   const tlm_lm_hw_set *hw, double margin) {
  put(b, "TLMM", 4);
  put_u32(b, TLM_LM_FILE_VERSION);
  put_u32(b, kind);
  put(b, c, sizeof *c);
  put_u32(b, (uint32_t)v->version);
  put_u64(b, tlm_vocab_checksum(v));
  put_u32(b, (uint32_t)v->n);
  for (int i = 0; i < v->n; i++) put(b, v->tok[i], 16);
  put(b, &step, 8);
  put_u64(b, seed);
  put_u32(b, isa_seen);
  put_u32(b, rule_version);
  uint32_t nhw = hw->n < TLM_LM_MAX_HW ? hw->n : TLM_LM_MAX_HW;
  put_u32(b, nhw);
  put(b, hw->tok, nhw * sizeof hw->tok[0]);
  put(b, &margin, 8);
}

static tlm_status write_atomic(wbuf *b, const char *path, char *err, int errcap) {
  if (b->oom) {
    snprintf(err, (size_t)errcap, "out of memory building %s", path);
    return TLM_ERR_OUT_OF_MEMORY;
  }
  uint64_t h = XXH3_64bits(b->p, b->len);
  put_u64(b, h);
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    snprintf(err, (size_t)errcap, "cannot create %s: %s", tmp, strerror(errno));
    return TLM_ERR_IO;
  }
  int ok = fwrite(b->p, 1, b->len, f) == b->len;
  ok &= fflush(f) == 0;
  ok &= fsync(fileno(f)) == 0;
  ok &= fclose(f) == 0;
  if (!ok || rename(tmp, path) != 0) {
    snprintf(err, (size_t)errcap, "cannot write %s: %s", path, strerror(errno));
    unlink(tmp);
    return TLM_ERR_IO;
  }
  return TLM_OK;
}

tlm_status tlm_gpt2_save(const tlm_gpt2 *m, const tlm_vocab *v, uint64_t seed, const char *path,
                         char *err, int errcap) {
  wbuf b = {0};
  header(&b, TLM_LM_KIND_FP32, &m->cfg, v, m->step, seed, m->isa_seen, m->rule_version,
         &m->hw_seen, m->sentence_margin);
  put_u64(&b, m->nparams * sizeof(float));
  put(&b, m->mem, m->nparams * sizeof(float));
  tlm_status st = write_atomic(&b, path, err, errcap);
  free(b.p);
  return st;
}

tlm_status tlm_lm_quantize(const tlm_gpt2 *m, const tlm_vocab *v, uint64_t seed,
                           const char *path, char *err, int errcap) {
  if (m->cfg.width % TLM_Q8_BLOCK) {
    snprintf(err, (size_t)errcap, "width %d is not a multiple of %d", m->cfg.width, TLM_Q8_BLOCK);
    return TLM_ERR_INVALID_ARGUMENT;
  }
  wbuf b = {0};
  header(&b, TLM_LM_KIND_INT8, &m->cfg, v, m->step, seed, m->isa_seen, m->rule_version,
         &m->hw_seen, m->sentence_margin);
  put_u64(&b, tlm_lm_q8_payload(&m->cfg));
  size_t s[TLM_GPT2_NTENSORS];
  tlm_gpt2_sizes(&m->cfg, s);
  const float *src = m->mem;
  for (int t = 0; t < TLM_GPT2_NTENSORS; t++) {
    if (tlm_lm_tensor_is_matrix(t)) {
      size_t rl = tlm_lm_row_len(&m->cfg, t), nb = s[t] / TLM_Q8_BLOCK;
      tlm_q8_block *q = malloc(nb * sizeof *q);
      if (!q) {
        free(b.p);
        return TLM_ERR_OUT_OF_MEMORY;
      }
      for (size_t r = 0; r < s[t] / rl; r++) tlm_lm_q8_quantize_row(q + r * rl / TLM_Q8_BLOCK, src + r * rl, rl);
      put(&b, q, nb * sizeof *q);
      free(q);
    } else {
      put(&b, src, s[t] * sizeof(float));
    }
    src += s[t];
  }
  tlm_status st = write_atomic(&b, path, err, errcap);
  free(b.p);
  return st;
}

tlm_status tlm_gpt2_load(tlm_gpt2 *m, const char *path, char *err, int errcap) {
  uint8_t *d;
  const uint8_t *payload;
  size_t len;
  tlm_lm_file_info info;
  tlm_status st =
      tlm_lm_file_read(path, TLM_LM_KIND_FP32, &d, &payload, &len, &info, err, errcap);
  if (st) return st;
  if (tlm_gpt2_init(m, &info.cfg, 0)) {
    free(d);
    return TLM_ERR_OUT_OF_MEMORY;
  }
  if (len != m->nparams * sizeof(float)) {
    free(d);
    tlm_gpt2_free(m);
    snprintf(err, (size_t)errcap, "model %s: parameter count does not match", path);
    return TLM_ERR_FORMAT;
  }
  memcpy(m->mem, payload, m->nparams * sizeof(float));
  m->step = info.step;
  m->isa_seen = info.isa_seen;
  m->rule_version = info.rule_version;
  m->hw_seen = info.hw_seen;
  m->sentence_margin = info.sentence_margin;
  m->vocab_version = (int32_t)info.vocab_version;
  free(d);
  return TLM_OK;
}

tlm_status tlm_lm_from_gpt2(tlm_lm_model *q, const tlm_gpt2 *m, const tlm_vocab *v) {
  memset(q, 0, sizeof *q);
  if (m->cfg.width % TLM_Q8_BLOCK) return TLM_ERR_INVALID_ARGUMENT;
  q->cfg = m->cfg;
  q->vocab = *v;
  q->step = m->step;
  /* in-memory models (tests) stand for any hardware and this rule */
  q->isa_seen = ~0u;
  q->rule_version = TLM_RULE_VERSION;
  q->hw_seen = m->hw_seen;
  if (q->hw_seen.n == 0) q->hw_seen.any = 1;
  q->mem = malloc(tlm_lm_q8_payload(&m->cfg));
  if (!q->mem) return TLM_ERR_OUT_OF_MEMORY;
  tlm_lm_q8_point(q);
  size_t s[TLM_GPT2_NTENSORS];
  tlm_gpt2_sizes(&m->cfg, s);
  const float *src = m->mem;
  uint8_t *dst = q->mem;
  for (int t = 0; t < TLM_GPT2_NTENSORS; t++) {
    if (tlm_lm_tensor_is_matrix(t)) {
      size_t rl = tlm_lm_row_len(&m->cfg, t);
      for (size_t r = 0; r < s[t] / rl; r++)
        tlm_lm_q8_quantize_row((tlm_q8_block *)dst + r * rl / TLM_Q8_BLOCK, src + r * rl, rl);
      dst += s[t] / TLM_Q8_BLOCK * sizeof(tlm_q8_block);
    } else {
      memcpy(dst, src, s[t] * sizeof(float));
      dst += s[t] * sizeof(float);
    }
    src += s[t];
  }
  q->checksum = XXH3_64bits(q->mem, tlm_lm_q8_payload(&m->cfg));
  return tlm_lm_pack(q) ? TLM_ERR_OUT_OF_MEMORY : TLM_OK;
}

tlm_status tlm_gpt2_from_lm(tlm_gpt2 *m, const tlm_lm_model *q) {
  if (tlm_gpt2_init(m, &q->cfg, 0)) return TLM_ERR_OUT_OF_MEMORY;
  size_t s[TLM_GPT2_NTENSORS];
  tlm_gpt2_sizes(&q->cfg, s);
  const uint8_t *src = q->mem;
  float *dst = m->mem;
  for (int t = 0; t < TLM_GPT2_NTENSORS; t++) {
    if (tlm_lm_tensor_is_matrix(t)) {
      const tlm_q8_block *b = (const tlm_q8_block *)src;
      for (size_t i = 0; i < s[t] / TLM_Q8_BLOCK; i++)
        for (int j = 0; j < TLM_Q8_BLOCK; j++) dst[i * TLM_Q8_BLOCK + (size_t)j] = b[i].d * (float)b[i].q[j];
      src += s[t] / TLM_Q8_BLOCK * sizeof(tlm_q8_block);
    } else {
      memcpy(dst, src, s[t] * sizeof(float));
      src += s[t] * sizeof(float);
    }
    dst += s[t];
  }
  m->step = q->step;
  m->isa_seen = q->isa_seen;
  m->rule_version = q->rule_version;
  m->hw_seen = q->hw_seen;
  /* a model made from another (tlm adapt) is gated again: no margin */
  m->sentence_margin = NAN;
  m->vocab_version = q->vocab.version;
  return TLM_OK;
}

