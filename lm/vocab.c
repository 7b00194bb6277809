/* vocab.c - the tensor language's vocabulary, prompts and sentences. */
#include "vocab.h"

#include <stdio.h>
#include <string.h>
#include <xxhash.h>

static const char *k_kind_prefix[8] = {"vec",  "tile", "unroll", "order",
                                       "pack", "par",  "at",     "axis"};

static int add(tlm_vocab *v, const char *s) {
  if (v->n >= TLM_LM_MAX_VOCAB) return -1;
  snprintf(v->tok[v->n], sizeof v->tok[0], "%s", s);
  return v->n++;
}

static void add_decision(tlm_vocab *v, int kind, int value) {
  char s[16];
  snprintf(s, sizeof s, "%s:%d", k_kind_prefix[kind], value);
  v->decision[kind][value] = (int16_t)add(v, s);
}

void tlm_vocab_build(tlm_vocab *v) { (void)tlm_vocab_build_version(v, TLM_LM_VOCAB_VERSION); }

int tlm_vocab_build_version(tlm_vocab *v, int version) {
  if (version < TLM_LM_VOCAB_VERSION_MIN || version > TLM_LM_VOCAB_VERSION) return -1;
  memset(v, 0, sizeof *v);
  v->version = version;
  memset(v->decision, 0xff, sizeof v->decision); /* -1 */
  static const char *fixed[] = {"<pad>", "<bos>", "<sep>", "<eos>", "op:matmul", "dtype:f32",
                                "bias:0", "bias:1", "res:0", "res:1", "act:none", "act:relu",
                                "act:gelu", "act:silu", "uA:0", "uA:1", "uB:0", "uB:1", "uC:0",
                                "uC:1", "ax:b", "ax:m", "ax:n", "ax:k", "isa:scalar", "isa:sse",
                                "isa:avx2", "isa:avx512", "vnni:0", "vnni:1",
                                /* version 2 */
                                "op:softmax", "op:layernorm", "op:rmsnorm", "causal:0",
                                "causal:1"};
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) add(v, fixed[i]);
  char s[16];
  for (int i = 0; i <= 40; i++) snprintf(s, sizeof s, "mag:%d", i), add(v, s);
  for (int i = 0; i < 4; i++) snprintf(s, sizeof s, "frac:%d", i), add(v, s);
  for (int i = 0; i <= 6; i++) snprintf(s, sizeof s, "p2:%d", i), add(v, s);
  for (int i = 0; i <= 10; i++) snprintf(s, sizeof s, "cores:%d", i), add(v, s);
  for (int i = 0; i <= 20; i++) snprintf(s, sizeof s, "l1:%d", i), add(v, s);
  for (int i = 0; i <= 20; i++) snprintf(s, sizeof s, "l2:%d", i), add(v, s);
  for (int i = 0; i <= 24; i++) snprintf(s, sizeof s, "l3:%d", i), add(v, s);
  /* decisions */
  static const int vecs[] = {1, 4, 8, 16};
  for (int i = 0; i < 4; i++) add_decision(v, TLM_PK_VEC, vecs[i]);
  /* tile values: every split factor, register row and n3 the space offers */
  for (int t = 1; t <= 4096; t++) {
    int offered = t <= 8 || (t <= 128 && t % 4 == 0) || (t <= 512 && t % 32 == 0) ||
                  t == 10 || t == 14 || t == 640 || t == 768 || t == 896 || t == 1024 ||
                  t == 1536 || t == 2048 || t == 3072 || t == 4096;
    if (offered) add_decision(v, TLM_PK_TILE, t);
  }
  static const int unrolls[] = {1, 2, 4, 8};
  for (int i = 0; i < 4; i++) add_decision(v, TLM_PK_UNROLL, unrolls[i]);
  for (int i = 0; i < 2; i++) add_decision(v, TLM_PK_ORDER, i);
  for (int i = 0; i < 2; i++) add_decision(v, TLM_PK_PACK, i);
  for (int i = 0; i <= 3; i++) add_decision(v, TLM_PK_PARALLEL, i);
  static const int ats[] = {0, 1, 3};
  for (int i = 0; i < 3; i++) add_decision(v, TLM_PK_COMPUTE_AT, ats[i]);
  /* version 3: vectors along k */
  for (int i = 1; i < 4; i++) add_decision(v, TLM_PK_VEC, TLM_VEC_K + vecs[i]);
  /* version 4: convolutions */
  static const char *conv_words[] = {"op:conv", "act:relu6", "win:1", "win:3", "win:5", "win:7",
                                     "win:big", "stride:1", "stride:2", "stride:big", "groups:1",
                                     "groups:dw", "groups:some"};
  for (size_t i = 0; i < sizeof conv_words / sizeof conv_words[0]; i++) add(v, conv_words[i]);
  for (int i = 0; i < 3; i++) add_decision(v, TLM_PK_VEC_AXIS, i);
  /* version 5: pooling and elementwise */
  static const char *v5_words[] = {"op:pool", "op:eltwise", "pool:max", "pool:avg",
                                   "bin:none", "bin:add", "bin:mul"};
  for (size_t i = 0; i < sizeof v5_words / sizeof v5_words[0]; i++) add(v, v5_words[i]);
  /* version 6: the rule's decisions in the prompt */
  add(v, "<rule>");
  /* version 7: the FMA datapath's width */
  add(v, "fma:128");
  add(v, "fma:256");
  add(v, "fma:512");
  if (version < 8) return 0;
  /* version 8: trailing zero bits up to 10 (a row of 1024 floats is 4 KiB:
   * operands whose rows are multiples of it alias in the caches, so N = 768
   * and N = 1024 want different schedules; both read p2:6 before), and a
   * depthwise convolution's n word is its group count (conv_words) */
  for (int i = 7; i <= 10; i++) snprintf(s, sizeof s, "p2:%d", i), add(v, s);
  return 0;
}

int tlm_vocab_find(const tlm_vocab *v, const char *s) {
  for (int i = 0; i < v->n; i++)
    if (!strcmp(v->tok[i], s)) return i;
  return -1;
}

static int tok(const tlm_vocab *v, const char *fmt, long long x) {
  char s[32];
  snprintf(s, sizeof s, fmt, x);
  int t = tlm_vocab_find(v, s);
  return t < 0 ? TLM_TOK_PAD : t;
}

static int ilog2(uint64_t x) {
  int l = 0;
  while (x > 1) x >>= 1, l++;
  return l;
}

void tlm_lm_extent_words(int64_t e, int p2_max, int *mag, int *frac, int *p2) {
  if (e < 1) e = 1;
  *mag = ilog2((uint64_t)e);
  if (*mag > 40) *mag = 40;
  *frac = (int)(4.0 * ((double)e / (double)((uint64_t)1 << *mag) - 1.0));
  if (*frac > 3) *frac = 3;
  *p2 = __builtin_ctzll((unsigned long long)e);
  if (*p2 > p2_max) *p2 = p2_max;
}

static int extent_tokens(const tlm_vocab *v, const char *axis, int64_t e, int32_t *out) {
  char s[16];
  snprintf(s, sizeof s, "ax:%s", axis);
  out[0] = tlm_vocab_find(v, s);
  int mag, frac, p2; /* trailing zero bits up to 10 from version 8 */
  tlm_lm_extent_words(e, v->version >= 8 ? 10 : 6, &mag, &frac, &p2);
  out[1] = tok(v, "mag:%lld", mag);
  out[2] = tok(v, "frac:%lld", frac);
  out[3] = tok(v, "p2:%lld", p2);
  return 4;
}

/* The task's words of the prompt, one writer per operator kind (their
 * order and count are the tensor language's, vocabulary version in
 * vocab.h): each writes at out[0..] and returns how many. Rotary
 * embeddings and attention have no words of their own yet (a model does
 * not schedule them, tlm_lm_covers_task): they are read as a row operator
 * and a matmul. */
typedef int (*prompt_words_fn)(const tlm_vocab *v, const tlm_task *task, int32_t *out);

static const char *const k_act_words[] = {"act:none", "act:relu", "act:gelu", "act:silu",
                                          "act:relu6"};
static const char *const k_op_words[] = {"", "op:matmul", "op:softmax", "op:layernorm",
                                         "op:rmsnorm"};

/* The words every task ends with: which operands are unit-stride (uA, uB,
 * uC) and the b, m, n, k extents of its product form. */
static int shape_words(const tlm_vocab *v, int ua, int ub, int uc, int64_t b, int64_t m,
                       int64_t n_, int64_t k, int32_t *out) {
  int n = 0;
  out[n++] = tok(v, "uA:%lld", ua != 0);
  out[n++] = tok(v, "uB:%lld", ub != 0);
  out[n++] = tok(v, "uC:%lld", uc != 0);
  n += extent_tokens(v, "b", b, out + n);
  n += extent_tokens(v, "m", m, out + n);
  n += extent_tokens(v, "n", n_, out + n);
  n += extent_tokens(v, "k", k, out + n);
  return n;
}

static int pool_words(const tlm_vocab *v, const tlm_task *task, int32_t *out) {
  int n = 0;
  const tlm_pool_task *p = &task->u.pool;
  out[n++] = tlm_vocab_find(v, "op:pool");
  out[n++] = tlm_vocab_find(v, p->alg == TLM_POOL_MAX ? "pool:max" : "pool:avg");
  out[n++] = tlm_vocab_find(v, p->KH == 1   ? "win:1"
                               : p->KH == 3 ? "win:3"
                               : p->KH == 5 ? "win:5"
                               : p->KH == 7 ? "win:7"
                                            : "win:big");
  out[n++] = tlm_vocab_find(v, p->sh == 1 ? "stride:1" : p->sh == 2 ? "stride:2" : "stride:big");
  out[n++] = tlm_vocab_find(v, "act:none");
  n += shape_words(v, p->unit & TLM_UNIT_POOL_SRC_C, 0, p->unit & TLM_UNIT_POOL_DST_C, p->N,
                   p->OD * p->OH * p->OW, p->C,
                   (int64_t)(p->KD ? p->KD : p->ID) * (p->KH ? p->KH : p->IH) *
                       (p->KW ? p->KW : p->IW),
                   out + n);
  return n;
}

static int eltwise_words(const tlm_vocab *v, const tlm_task *task, int32_t *out) {
  int n = 0;
  const tlm_row_task *r = &task->u.row;
  static const char *bins[] = {"bin:none", "bin:add", "bin:mul"};
  out[n++] = tlm_vocab_find(v, "op:eltwise");
  out[n++] = tlm_vocab_find(v, "dtype:f32");
  out[n++] = tlm_vocab_find(v, bins[r->binary >= 0 && r->binary < 3 ? r->binary : 0]);
  out[n++] = tlm_vocab_find(v, k_act_words[r->act >= 0 && r->act < 5 ? r->act : 0]);
  out[n++] = tok(v, "causal:%lld", 0);
  n += shape_words(v, r->unit & TLM_UNIT_ROW_X, r->unit & TLM_UNIT_ROW_Z, r->unit & TLM_UNIT_ROW_Y,
                   1, r->rows, r->cols, 1, out + n);
  return n;
}

static int conv_words(const tlm_vocab *v, const tlm_task *task, int32_t *out) {
  int n = 0;
  const tlm_conv_task *c = &task->u.conv;
  out[n++] = tlm_vocab_find(v, "op:conv");
  out[n++] = tlm_vocab_find(v, c->KH == 1   ? "win:1"
                               : c->KH == 3 ? "win:3"
                               : c->KH == 5 ? "win:5"
                               : c->KH == 7 ? "win:7"
                                            : "win:big");
  out[n++] = tlm_vocab_find(v, c->sh == 1 ? "stride:1" : c->sh == 2 ? "stride:2" : "stride:big");
  out[n++] = tlm_vocab_find(v, c->G == 1                       ? "groups:1"
                               : c->ICg == 1 && c->OCg == 1 ? "groups:dw"
                                                            : "groups:some");
  out[n++] = tlm_vocab_find(v, k_act_words[c->act >= 0 && c->act < 5 ? c->act : 0]);
  /* n: the output channels a kernel's lanes run along: OCg, or from
   * version 8 the groups of a depthwise convolution (OCg = 1 read every
   * depthwise layer alike) */
  int dw = v->version >= 8 && c->G > 1 && c->ICg == 1 && c->OCg == 1;
  n += shape_words(v, c->unit & TLM_UNIT_CONV_SRC_C, c->unit & TLM_UNIT_CONV_WEI_O,
                   c->unit & TLM_UNIT_CONV_DST_C, c->N, c->OD * c->OH * c->OW, dw ? c->G : c->OCg,
                   (int64_t)c->ICg * c->KD * c->KH * c->KW, out + n);
  return n;
}

static int row_words(const tlm_vocab *v, const tlm_task *task, int32_t *out) {
  int n = 0;
  out[n++] = tlm_vocab_find(v, k_op_words[task->kind >= 1 && task->kind <= 4 ? task->kind : 1]);
  out[n++] = tlm_vocab_find(v, "dtype:f32");
  const tlm_row_task *r = &task->u.row;
  out[n++] = tlm_vocab_find(v, "bias:0");
  out[n++] = tlm_vocab_find(v, "act:none");
  out[n++] = tok(v, "causal:%lld", r->causal);
  n += shape_words(v, r->unit & TLM_UNIT_ROW_X, r->unit & TLM_UNIT_ROW_G, r->unit & TLM_UNIT_ROW_Y,
                   1, r->rows, r->cols, 1, out + n);
  return n;
}

static int matmul_words(const tlm_vocab *v, const tlm_task *task, int32_t *out) {
  int n = 0;
  out[n++] = tlm_vocab_find(v, k_op_words[task->kind >= 1 && task->kind <= 4 ? task->kind : 1]);
  out[n++] = tlm_vocab_find(v, "dtype:f32");
  const tlm_matmul_task *m = &task->u.mm;
  out[n++] = tok(v, "bias:%lld", m->has_bias);
  out[n++] = tlm_vocab_find(v, k_act_words[m->act >= 0 && m->act < 5 ? m->act : 0]);
  out[n++] = tok(v, "res:%lld", m->has_residual != 0);
  n += shape_words(v, m->unit & TLM_UNIT_A_K, m->unit & TLM_UNIT_B_N, m->unit & TLM_UNIT_C_N,
                   tlm_task_batch_total(task), m->M, m->N, m->K, out + n);
  return n;
}

static const prompt_words_fn k_prompt_words[] = {
    [TLM_OP_MATMUL] = matmul_words, [TLM_OP_SOFTMAX] = row_words,
    [TLM_OP_LAYERNORM] = row_words, [TLM_OP_RMSNORM] = row_words,
    [TLM_OP_CONV] = conv_words,     [TLM_OP_POOL] = pool_words,
    [TLM_OP_ELTWISE] = eltwise_words, [TLM_OP_ROPE] = row_words,
    [TLM_OP_ATTENTION] = matmul_words,
};

void tlm_lm_prompt(const tlm_vocab *v, const tlm_task *task, const tlm_target *tg, int32_t *out) {
  int n = 0;
  out[n++] = TLM_TOK_BOS;
  prompt_words_fn words =
      (int)task->kind > 0 && (int)task->kind < (int)(sizeof k_prompt_words / sizeof k_prompt_words[0])
          ? k_prompt_words[task->kind]
          : NULL;
  n += (words ? words : matmul_words)(v, task, out + n);
  n += tlm_lm_hw_words(v, tg, out + n);
  out[n++] = TLM_TOK_SEP;
  while (n < TLM_LM_TASK_LEN) out[n++] = TLM_TOK_PAD;
  /* the hand rule's schedule, which the decisions then edit */
  out[n++] = tlm_vocab_find(v, "<rule>");
  /* for one worker per CPU, as every training sentence was measured (a
   * runtime on other than one thread per core does not use the model:
   * tlm_lm_covers_workers; tools that build prompts for such targets get
   * the prompt the model knows) */
  tlm_target ptg = *tg;
  ptg.threads = ptg.cores;
  tlm_space sp;
  tlm_schedule rule;
  if (tlm_space_init(&sp, task, &ptg) == 0) {
    tlm_space_default(&sp, &rule);
    for (int p = 0; p < sp.npoints && n < TLM_LM_PROMPT_LEN; p++) {
      int t = tlm_lm_decision_token(v, &sp, p, rule.v[p]);
      out[n++] = t >= 0 ? t : TLM_TOK_PAD;
    }
  }
  while (n < TLM_LM_PROMPT_LEN) out[n++] = TLM_TOK_PAD;
}

int tlm_lm_hw_words(const tlm_vocab *v, const tlm_target *tg, int32_t *out) {
  static const char *isas[] = {"isa:scalar", "isa:sse", "isa:avx2", "isa:avx512"};
  int n = 0;
  out[n++] = tlm_vocab_find(v, isas[tg->isa >= 0 && tg->isa < 4 ? tg->isa : 0]);
  out[n++] = tok(v, "fma:%lld", tg->fma_bits >= 512 ? 512 : tg->fma_bits >= 256 ? 256 : 128);
  out[n++] = tok(v, "cores:%lld", ilog2((uint64_t)(tg->cores > 0 ? tg->cores : 1)));
  out[n++] = tok(v, "l1:%lld", ilog2((uint64_t)(tg->l1d_bytes / 1024 + 1)));
  out[n++] = tok(v, "l2:%lld", ilog2((uint64_t)(tg->l2_bytes / 1024 + 1)));
  out[n++] = tok(v, "l3:%lld", ilog2((uint64_t)(tg->l3_bytes / 1024 + 1)));
  return n;
}

int tlm_lm_hw_has(const tlm_lm_hw_set *set, const int32_t *words) {
  for (uint32_t i = 0; i < set->n && i < TLM_LM_MAX_HW; i++)
    if (!memcmp(set->tok[i], words, sizeof set->tok[i])) return 1;
  return 0;
}

int tlm_lm_hw_add(tlm_lm_hw_set *set, const int32_t *words) {
  if (tlm_lm_hw_has(set, words)) return 0;
  if (set->n >= TLM_LM_MAX_HW) return -1;
  memcpy(set->tok[set->n++], words, sizeof set->tok[0]);
  return 0;
}

char *tlm_lm_hw_str(const tlm_vocab *v, const int32_t *words, char *buf, int cap) {
  int len = 0;
  buf[0] = 0;
  for (int i = 0; i < TLM_LM_HW_WORDS && len < cap; i++) {
    const char *w = words[i] >= 0 && words[i] < v->n ? v->tok[words[i]] : "?";
    len += snprintf(buf + len, (size_t)(cap - len), "%s%.16s", i ? " " : "", w);
  }
  return buf;
}

int tlm_lm_decision_token(const tlm_vocab *v, const tlm_space *s, int p, int32_t value) {
  if (p < 0 || p >= s->npoints || value < 0 || value > 4096) return -1;
  if (s->points[p].kind < 0 || s->points[p].kind >= 8) return -1;
  return v->decision[s->points[p].kind][value];
}

int tlm_lm_sentence(const tlm_vocab *v, const tlm_space *s, const tlm_schedule *sched,
                    int32_t *tokens, uint64_t (*allowed)[TLM_LM_MAX_VOCAB / 64]) {
  tlm_lm_prompt(v, &s->task, &s->target, tokens);
  int32_t cands[TLM_MAX_CANDIDATES];
  for (int p = 0; p < s->npoints; p++) {
    int t = tlm_lm_decision_token(v, s, p, sched->v[p]);
    if (t < 0) return -1;
    tokens[TLM_LM_PROMPT_LEN + p] = t;
    if (allowed) {
      uint64_t *row = allowed[TLM_LM_PROMPT_LEN + p];
      memset(row, 0, sizeof(uint64_t) * (TLM_LM_MAX_VOCAB / 64));
      int n = tlm_space_candidates(s, p, sched->v, cands);
      for (int i = 0; i < n; i++) {
        int ct = tlm_lm_decision_token(v, s, p, cands[i]);
        if (ct >= 0) row[ct / 64] |= 1ull << (ct % 64);
      }
    }
  }
  return TLM_LM_PROMPT_LEN + s->npoints;
}

int tlm_lm_schedule_of(const tlm_vocab *v, const tlm_space *s, const int32_t *decisions,
                       tlm_schedule *out) {
  memset(out, 0, sizeof *out);
  out->n = s->npoints;
  int32_t cands[TLM_MAX_CANDIDATES];
  for (int p = 0; p < s->npoints; p++) {
    int n = tlm_space_candidates(s, p, out->v, cands), found = 0;
    for (int i = 0; i < n && !found; i++)
      if (tlm_lm_decision_token(v, s, p, cands[i]) == decisions[p]) {
        out->v[p] = cands[i];
        found = 1;
      }
    if (!found) return -1;
  }
  return 0;
}

uint64_t tlm_vocab_checksum(const tlm_vocab *v) {
  XXH3_state_t *st = XXH3_createState();
  XXH3_64bits_reset(st);
  for (int i = 0; i < v->n; i++) XXH3_64bits_update(st, v->tok[i], strlen(v->tok[i]) + 1);
  uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}
