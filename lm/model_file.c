/* model_file.c - model files: verifying and loading int8 models, the Q8
 * block format and the architecture's tensor sizes (writing, the quantizer
 * and fp32 checkpoints are the trainer's: train/checkpoint.c). */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "model.h"

/* ---- sizes ------------------------------------------------------------------ */

void tlm_gpt2_sizes(const tlm_gpt2_config *c, size_t s[TLM_GPT2_NTENSORS]) {
  size_t V = (size_t)c->vocab, T = (size_t)c->max_seq, L = (size_t)c->layers, C = (size_t)c->width;
  size_t i = 0;
  s[i++] = V * C;            /* wte */
  s[i++] = T * C;            /* wpe */
  s[i++] = L * C;            /* ln1w */
  s[i++] = L * C;            /* ln1b */
  s[i++] = L * 3 * C * C;    /* qkvw */
  s[i++] = L * 3 * C;        /* qkvb */
  s[i++] = L * C * C;        /* projw */
  s[i++] = L * C;            /* projb */
  s[i++] = L * C;            /* ln2w */
  s[i++] = L * C;            /* ln2b */
  s[i++] = L * 4 * C * C;    /* fcw */
  s[i++] = L * 4 * C;        /* fcb */
  s[i++] = L * C * 4 * C;    /* fcprojw */
  s[i++] = L * C;            /* fcprojb */
  s[i++] = C;                /* lnfw */
  s[i++] = C;                /* lnfb */
}


/* matrices quantized in int8 files, in tlm_gpt2_params order */
static const int k_is_matrix[TLM_GPT2_NTENSORS] = {1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};

size_t tlm_lm_row_len(const tlm_gpt2_config *c, int t) {
  return t == 12 ? (size_t)4 * c->width : (size_t)c->width;
}

void tlm_lm_q8_quantize_row(tlm_q8_block *out, const float *w, size_t n) {
  for (size_t b = 0; b < n / TLM_Q8_BLOCK; b++) {
    float amax = 0;
    for (int i = 0; i < TLM_Q8_BLOCK; i++) {
      float a = fabsf(w[b * TLM_Q8_BLOCK + i]);
      if (a > amax) amax = a;
    }
    float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
    out[b].d = d;
    for (int i = 0; i < TLM_Q8_BLOCK; i++)
      out[b].q[i] = (int8_t)lrintf(w[b * TLM_Q8_BLOCK + i] * id);
  }
}

size_t tlm_lm_q8_payload(const tlm_gpt2_config *c) {
  size_t s[TLM_GPT2_NTENSORS], n = 0;
  tlm_gpt2_sizes(c, s);
  for (int t = 0; t < TLM_GPT2_NTENSORS; t++)
    n += k_is_matrix[t] ? s[t] / TLM_Q8_BLOCK * sizeof(tlm_q8_block) : s[t] * sizeof(float);
  return n;
}

/* ---- reading --------------------------------------------------------------- */

typedef struct rbuf {
  const uint8_t *p;
  size_t len, at;
} rbuf;

static int get(rbuf *r, void *dst, size_t n) {
  if (r->at + n > r->len) return -1;
  memcpy(dst, r->p + r->at, n);
  r->at += n;
  return 0;
}

/* Reads and verifies a file; on TLM_OK *data (malloc'd) and the header
 * fields are set and r is positioned at the payload. */
static tlm_status open_model(const char *path, uint32_t want_kind, uint8_t **data, rbuf *r,
                             tlm_gpt2_config *cfg, tlm_vocab *vocab, int64_t *step,
                             uint64_t *seed, uint64_t *checksum, uint32_t prov[2],
                             tlm_lm_hw_set *hw, double *margin, char *err, int errcap) {
  *data = NULL;
  *margin = NAN;
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, (size_t)errcap, "cannot open model %s: %s", path, strerror(errno));
    return TLM_ERR_IO;
  }
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  if (size < 64 || size > (1L << 31)) {
    fclose(f);
    snprintf(err, (size_t)errcap, "model %s: size %ld is not a model file's", path, size);
    return TLM_ERR_FORMAT;
  }
  uint8_t *d = malloc((size_t)size);
  if (!d) {
    fclose(f);
    return TLM_ERR_OUT_OF_MEMORY;
  }
  size_t got = fread(d, 1, (size_t)size, f);
  fclose(f);
  if (got != (size_t)size) {
    free(d);
    snprintf(err, (size_t)errcap, "model %s: short read", path);
    return TLM_ERR_IO;
  }
#define BAD(...)                                 \
  do {                                           \
    snprintf(err, (size_t)errcap, __VA_ARGS__);  \
    free(d);                                     \
    return TLM_ERR_FORMAT;                       \
  } while (0)
  if (memcmp(d, "TLMM", 4)) BAD("model %s: bad magic (not a tlm model file)", path);
  uint64_t stored;
  memcpy(&stored, d + size - 8, 8);
  if (XXH3_64bits(d, (size_t)size - 8) != stored)
    BAD("model %s: checksum mismatch (truncated or corrupted)", path);
  *r = (rbuf){d, (size_t)size - 8, 4};
  /* zero: a file too short for a field reports 0 in the message */
  uint32_t version = 0, kind = 0, vv = 0, vn = 0;
  uint64_t vsum = 0;
  if (get(r, &version, 4) || version < 1 || version > TLM_LM_FILE_VERSION)
    BAD("model %s: format version %u, this build reads 1 to %u", path, version,
        TLM_LM_FILE_VERSION);
  if (get(r, &kind, 4) || kind != want_kind)
    BAD("model %s: kind %u, expected %u (%s)", path, kind, want_kind,
        want_kind == TLM_LM_KIND_INT8 ? "int8 model" : "fp32 checkpoint");
  if (get(r, cfg, sizeof *cfg) || cfg->vocab < 1 || cfg->vocab > TLM_LM_MAX_VOCAB ||
      cfg->max_seq < TLM_LM_MAX_SEQ || cfg->max_seq > 4096 || cfg->layers < 1 ||
      cfg->layers > 64 || cfg->heads < 1 || cfg->width < TLM_Q8_BLOCK || cfg->width > 8192 ||
      cfg->width % cfg->heads || cfg->width % TLM_Q8_BLOCK)
    BAD("model %s: invalid configuration", path);
  if (get(r, &vv, 4) || tlm_vocab_build_version(vocab, (int)vv))
    BAD("model %s: vocabulary version %u, this build reads %d to %d", path, vv,
        TLM_LM_VOCAB_VERSION_MIN, TLM_LM_VOCAB_VERSION);
  if (get(r, &vsum, 8) || vsum != tlm_vocab_checksum(vocab) || get(r, &vn, 4) ||
      (int)vn != vocab->n || cfg->vocab != vocab->n)
    BAD("model %s: vocabulary differs from this build's version %u", path, vv);
  for (uint32_t i = 0; i < vn; i++) {
    char t[16];
    if (get(r, t, 16) || memcmp(t, vocab->tok[i], 16)) BAD("model %s: vocabulary differs", path);
  }
  uint64_t payload;
  prov[0] = 1u << TLM_ISA_AVX512, prov[1] = 1; /* version 1 (model.h) */
  memset(hw, 0, sizeof *hw);
  if (get(r, step, 8) || get(r, seed, 8) ||
      (version >= 2 && (get(r, &prov[0], 4) || get(r, &prov[1], 4))))
    BAD("model %s: payload size does not match", path);
  if (version >= 3) {
    if (get(r, &hw->n, 4) || hw->n > TLM_LM_MAX_HW ||
        get(r, hw->tok, hw->n * sizeof hw->tok[0]))
      BAD("model %s: bad list of hardware seen in training", path);
    for (uint32_t i = 0; i < hw->n; i++)
      for (int w = 0; w < TLM_LM_HW_WORDS; w++)
        if (hw->tok[i][w] < 0 || hw->tok[i][w] >= vocab->n)
          BAD("model %s: bad list of hardware seen in training", path);
  } else if (version == 2) {
    /* every version-2 model was trained on one machine (model.h) */
    static const char *zen5[TLM_LM_HW_WORDS] = {"isa:avx512", "fma:512", "cores:1",
                                                "l1:5",       "l2:10",   "l3:15"};
    hw->n = 1;
    for (int w = 0; w < TLM_LM_HW_WORDS; w++) hw->tok[0][w] = tlm_vocab_find(vocab, zen5[w]);
  }
  /* the margin of selective decoding the model was gated at: NaN (none),
   * or finite in [0, 1000] nats */
  if (version >= 4 && (get(r, margin, 8) || (!isnan(*margin) && !(*margin >= 0 && *margin <= 1000))))
    BAD("model %s: bad sentence margin", path);
  if (get(r, &payload, 8) || payload != r->len - r->at)
    BAD("model %s: payload size does not match", path);
#undef BAD
  *checksum = stored;
  *data = d;
  return TLM_OK;
}


int tlm_lm_tensor_is_matrix(int t) { return t >= 0 && t < TLM_GPT2_NTENSORS && k_is_matrix[t]; }

tlm_status tlm_lm_file_read(const char *path, uint32_t want_kind, uint8_t **data,
                            const uint8_t **payload, size_t *payload_len, tlm_lm_file_info *info,
                            char *err, int errcap) {
  *data = NULL;
  *payload = NULL;
  *payload_len = 0;
  memset(info, 0, sizeof *info);
  tlm_vocab *v = malloc(sizeof *v);
  if (!v) return TLM_ERR_OUT_OF_MEMORY;
  rbuf r;
  uint32_t prov[2];
  tlm_status st = open_model(path, want_kind, data, &r, &info->cfg, v, &info->step, &info->seed,
                             &info->checksum, prov, &info->hw_seen, &info->sentence_margin, err,
                             errcap);
  info->vocab_version = (uint32_t)v->version;
  free(v);
  if (st) return st;
  info->isa_seen = prov[0];
  info->rule_version = prov[1];
  *payload = r.p + r.at;
  *payload_len = r.len - r.at;
  return TLM_OK;
}

tlm_status tlm_lm_q8_point(tlm_lm_model *q) {
  const tlm_gpt2_config *c = &q->cfg;
  size_t s[TLM_GPT2_NTENSORS];
  tlm_gpt2_sizes(c, s);
  uint8_t *p = q->mem;
  void **dst[TLM_GPT2_NTENSORS] = {
      (void **)&q->wte,  (void **)&q->wpe,   (void **)&q->ln1w,    (void **)&q->ln1b,
      (void **)&q->qkvw, (void **)&q->qkvb,  (void **)&q->projw,   (void **)&q->projb,
      (void **)&q->ln2w, (void **)&q->ln2b,  (void **)&q->fcw,     (void **)&q->fcb,
      (void **)&q->fcprojw, (void **)&q->fcprojb, (void **)&q->lnfw, (void **)&q->lnfb};
  for (int t = 0; t < TLM_GPT2_NTENSORS; t++) {
    *dst[t] = p;
    p += k_is_matrix[t] ? s[t] / TLM_Q8_BLOCK * sizeof(tlm_q8_block) : s[t] * sizeof(float);
  }
  return TLM_OK;
}

/* 1 when every scale and f32 parameter is finite: a file can pass its
 * checksum and still hold NaN or infinities (written by a buggy or hostile
 * tool), which would turn every logit into NaN */
static int q8_finite(const tlm_lm_model *q) {
  size_t s[TLM_GPT2_NTENSORS];
  tlm_gpt2_sizes(&q->cfg, s);
  const uint8_t *p = q->mem;
  for (int t = 0; t < TLM_GPT2_NTENSORS; t++) {
    if (k_is_matrix[t]) {
      const tlm_q8_block *b = (const tlm_q8_block *)p;
      for (size_t i = 0; i < s[t] / TLM_Q8_BLOCK; i++)
        if (!isfinite(b[i].d)) return 0;
      p += s[t] / TLM_Q8_BLOCK * sizeof(tlm_q8_block);
    } else {
      const float *f = (const float *)p;
      for (size_t i = 0; i < s[t]; i++)
        if (!isfinite(f[i])) return 0;
      p += s[t] * sizeof(float);
    }
  }
  return 1;
}

tlm_status tlm_lm_load(tlm_lm_model *q, const char *path, char *err, int errcap) {
  memset(q, 0, sizeof *q);
  q->rule_bonus = TLM_LM_RULE_BONUS;
  q->reuse_bonus = TLM_LM_REUSE_BONUS;
  uint8_t *d;
  rbuf r;
  uint32_t prov[2];
  double margin;
  tlm_status st = open_model(path, TLM_LM_KIND_INT8, &d, &r, &q->cfg, &q->vocab, &q->step,
                             &q->seed, &q->checksum, prov, &q->hw_seen, &margin, err, errcap);
  q->sentence_margin = isnan(margin) ? TLM_LM_SENTENCE_MARGIN : margin;
  q->isa_seen = prov[0];
  q->rule_version = prov[1];
  if (st) return st;
  size_t want = tlm_lm_q8_payload(&q->cfg);
  if (r.len - r.at != want) {
    free(d);
    snprintf(err, (size_t)errcap, "model %s: payload size does not match its configuration", path);
    return TLM_ERR_FORMAT;
  }
  q->mem = malloc(want);
  if (!q->mem) {
    free(d);
    return TLM_ERR_OUT_OF_MEMORY;
  }
  memcpy(q->mem, r.p + r.at, want);
  free(d);
  tlm_lm_q8_point(q);
  if (!q8_finite(q)) {
    tlm_lm_free(q);
    snprintf(err, (size_t)errcap, "model %s: a weight or scale is not finite (NaN or infinity)",
             path);
    return TLM_ERR_FORMAT;
  }
  if (tlm_lm_pack(q)) {
    tlm_lm_free(q);
    return TLM_ERR_OUT_OF_MEMORY;
  }
  return TLM_OK;
}

int tlm_lm_covers_hw(const tlm_lm_model *m, const tlm_target *t) {
  if (m->hw_seen.any) return 1;
  int32_t words[TLM_LM_HW_WORDS];
  tlm_lm_hw_words(&m->vocab, t, words);
  return tlm_lm_hw_has(&m->hw_seen, words);
}

int tlm_lm_covers_workers(const tlm_target *t) {
  return t->threads <= 0 || t->threads == t->cores;
}

int tlm_lm_covers(const tlm_lm_model *m, const tlm_target *t) {
  return t->isa >= 0 && t->isa < 32 && ((m->isa_seen >> t->isa) & 1u) &&
         m->rule_version >= TLM_RULE_VERSION_MIN && m->rule_version <= TLM_RULE_VERSION &&
         tlm_lm_covers_hw(m, t) && tlm_lm_covers_workers(t);
}

int tlm_lm_covers_task(const tlm_lm_model *m, const tlm_task *task, const tlm_target *tg) {
  /* the tensor language (vocabulary v5) has no words for rotary embeddings
   * and fused attention */
  if (task->kind == TLM_OP_ROPE || task->kind == TLM_OP_ATTENTION) return 0;
  /* nor for a B declared constant: the collector measures matmuls whose B
   * is not, while a constant B's kernel serves every M (op_matmul.c MM_M3:
   * prompt lengths and image sizes share it) and reads B packed ahead. A
   * model's schedule for one M is a guess for the others: candidate 44 on
   * the Zen 5 VM ran the vision sample's 1x1 and im2col layers (2 threads)
   * at 0.61-0.79x of oneDNN where the rule's ran at 0.78-0.98x */
  if (task->kind == TLM_OP_MATMUL && task->u.mm.b_const) return 0;
  return m->rule_version >= (uint32_t)tlm_rule_family_version(task, tg);
}

void tlm_lm_free(tlm_lm_model *m) {
  if (m->packed)
    for (int i = 0; i < 1 + 4 * m->cfg.layers; i++) {
      free(m->packed[i].q);
      free(m->packed[i].d);
      free(m->packed[i].comp);
      free(m->packed[i].q8);
      free(m->packed[i].d8);
    }
  free(m->packed);
  free(m->mem);
  memset(m, 0, sizeof *m);
}

/* ---- folders of models ------------------------------------------------------ */

static int cmp_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int tlm_lm_is_dir(const char *path) {
  struct stat st;
  return path && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int tlm_lm_list_dir(const char *dir, char (*paths)[TLM_LM_PATH_MAX], int cap) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  /* every name first (sorted), then the paths: readdir's order is the
   * file system's, and the choice must not depend on it */
  char **names = NULL;
  int n = 0, room = 0, out = 0, failed = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (e->d_name[0] == '.' || len < 6 || strcmp(e->d_name + len - 5, ".tlmq")) continue;
    char full[TLM_LM_PATH_MAX];
    struct stat st;
    if (snprintf(full, sizeof full, "%s/%s", dir, e->d_name) >= (int)sizeof full ||
        stat(full, &st) != 0 || !S_ISREG(st.st_mode))
      continue;
    if (n == room) {
      room = room ? 2 * room : 8;
      char **grown = realloc(names, sizeof *names * (size_t)room);
      if (!grown) {
        failed = 1;
        break;
      }
      names = grown;
    }
    if (!(names[n] = strdup(e->d_name))) {
      failed = 1;
      break;
    }
    n++;
  }
  closedir(d);
  if (!failed && n > 0) { /* (an empty folder: names is NULL, and qsort's base must not be) */
    qsort(names, (size_t)n, sizeof *names, cmp_name);
    for (int i = 0; i < n && out < cap; i++)
      if (snprintf(paths[out], TLM_LM_PATH_MAX, "%s/%s", dir, names[i]) < TLM_LM_PATH_MAX) out++;
  }
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
  return failed ? -1 : out;
}

tlm_status tlm_lm_load_for(tlm_lm_model *m, const char *path, const tlm_target *t, char *chosen,
                           char *err, int errcap) {
  if (!tlm_lm_is_dir(path)) {
    if (chosen) snprintf(chosen, TLM_LM_PATH_MAX, "%s", path);
    return tlm_lm_load(m, path, err, errcap);
  }
  enum { MAX_FILES = 64 };
  char(*files)[TLM_LM_PATH_MAX] = malloc(sizeof *files * MAX_FILES);
  if (!files) return TLM_ERR_OUT_OF_MEMORY;
  int n = tlm_lm_list_dir(path, files, MAX_FILES), first = -1;
  if (n <= 0) {
    free(files);
    snprintf(err, (size_t)errcap, n < 0 ? "model folder %s cannot be read"
                                        : "model folder %s holds no *.tlmq file", path);
    return TLM_ERR_IO;
  }
  tlm_status st = TLM_OK, first_err = TLM_OK;
  char msg[512] = "";
  for (int i = 0; i < n; i++) {
    st = tlm_lm_load(m, files[i], err, errcap);
    if (st != TLM_OK) {
      if (first_err == TLM_OK) first_err = st, snprintf(msg, sizeof msg, "%s", err);
      continue;
    }
    if (tlm_lm_covers(m, t)) {
      first = i;
      break;
    }
    if (first < 0) first = i;
    tlm_lm_free(m);
  }
  if (first < 0) {
    free(files);
    snprintf(err, (size_t)errcap, "%s", msg);
    return first_err;
  }
  if (!m->mem) st = tlm_lm_load(m, files[first], err, errcap); /* none covered: the first */
  if (st == TLM_OK && chosen) snprintf(chosen, TLM_LM_PATH_MAX, "%s", files[first]);
  free(files);
  return st;
}
