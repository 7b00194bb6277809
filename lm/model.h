/* model.h - model files (reading and verifying; the writer and the int8
 * quantizer are train/checkpoint.c's), the int8 decoder with a KV cache,
 * and constrained decoding of schedules (internal).
 *
 * File layout (little-endian), both kinds:
 *   magic "TLMM", u32 format version (TLM_LM_FILE_VERSION), u32 kind
 *   (1 fp32 checkpoint, 2 int8 model), 5 x i32 config (vocab, max_seq,
 *   layers, heads, width), u32 vocab version, u64 vocab checksum, u32 vocab
 *   size, vocab strings (16 bytes each), i64 training step, u64 seed,
 *   [version 2: u32 ISA bits seen in training, u32 rule version],
 *   [version 3: u32 count H (at most TLM_LM_MAX_HW), H x TLM_LM_HW_WORDS
 *   i32 token ids: the hardware prompts seen in training], [version 4:
 *   f64 sentence margin, in nats, the model was gated at (`tlm quantize
 *   --margin`; NaN: none, the build's TLM_LM_SENTENCE_MARGIN)], u64 payload
 *   bytes, payload, u64 XXH3-64 of every byte before it. Version 1 files
 *   are read as ISA bits = AVX-512 only, rule version 1, no hardware.
 *   Version 2 files are read as the one hardware prompt every one of them
 *   was trained on: the session-8/9 AMD EPYC Zen 5 VM (isa:avx512 fma:512
 *   cores:1 l1:5 l2:10 l3:15; models/README.md), as `tlm train` built
 *   every prompt on its own host's target.
 * fp32 payload: the parameters in tlm_gpt2_params order.
 * int8 payload: per tensor in that order, the matrices (wte, qkvw, projw,
 *   fcw, fcprojw) as blocks of 32 int8 weights along the input dimension
 *   with one f32 scale each (ggml's Q8_0 idea: w ~= d * q, d = max|w|/127),
 *   the rest as f32. The decoder multiplies int8 weights by int8
 *   activations (blocks of 32, one scale each) everywhere except the output
 *   logits, whose activations stay f32.
 * A file is accepted only if its size, checksum, magic, version, kind,
 * config and vocabulary all check out.
 *
 * Accuracy of the int8 decoder against the fp32 model it was quantized
 * from: normalized mean squared error of the logits (sum (q - f)^2 /
 * sum f^2) below 2e-3 and greedy agreement on decision tokens of at least
 * 97% on random weights at 3x GPT-2's initialization scale
 * (tests/test_lm_model.c); `tlm bench decode` reports both for a trained
 * model on its validation tasks. */
#ifndef TLM_LM_MODEL_H
#define TLM_LM_MODEL_H

#include <stdint.h>

#include "gpt2.h"
#include "tlm.h"
#include "vocab.h"

#define TLM_LM_FILE_VERSION 4
#define TLM_LM_KIND_FP32 1
#define TLM_LM_KIND_INT8 2
#define TLM_Q8_BLOCK 32

typedef struct tlm_q8_block {
  float d;                   /* scale */
  int8_t q[TLM_Q8_BLOCK];    /* weights / d, rounded */
} tlm_q8_block;

/* A quantized matrix repacked for the AVX-512 VNNI matrix-vector product:
 * groups of 16 rows; for each group and block, the 8 four-byte chunks of
 * the 16 rows interleaved (64 bytes per chunk), so one vpdpbusd with a
 * broadcast chunk of x yields 16 row sums. x enters as unsigned (x + 128);
 * comp = 128 * sum of the row's weights in the block corrects for it (the
 * compensation oneDNN uses for u8 x s8). Rows are padded to 16 with zeros. */
typedef struct tlm_q8_packed {
  int32_t rows, nb;   /* logical rows, blocks per row */
  int8_t *q;          /* (groups, nb, 8, 16, 4) */
  float *d;           /* (groups, nb, 16) row scales */
  int32_t *comp;      /* (groups, nb, 16) */
  /* The same matrix for the AVX2 kernel (vpmaddwd on sign-extended int16):
   * groups of 8 rows; for each group and block, its 16 pairs of
   * consecutive weights (k = 2j, 2j + 1) for the 8 rows, 16 bytes a pair,
   * so one widened load times a broadcast pair of x yields 8 row partial
   * sums. NULL when rows is not a multiple of 16 (the row-wise kernel is
   * used instead). */
  int8_t *q8;         /* (rows / 8, nb, 16, 8, 2) */
  float *d8;          /* (rows / 8, nb, 8) row scales */
} tlm_q8_packed;

/* int8 model for decoding: matrices quantized, the rest f32. */
typedef struct tlm_lm_model {
  tlm_gpt2_config cfg;
  tlm_vocab vocab;
  uint64_t checksum; /* file checksum: identifies the model in cache keys */
  int64_t step;
  uint64_t seed;
  tlm_q8_block *wte;     /* (V, C/32) */
  float *wpe;            /* (T, C) */
  float *ln1w, *ln1b, *ln2w, *ln2b, *lnfw, *lnfb;
  tlm_q8_block *qkvw, *projw, *fcw, *fcprojw; /* (L, OC, IC/32) */
  float *qkvb, *projb, *fcb, *fcprojb;
  void *mem;
  /* VNNI layouts: wte, then per layer qkv, proj, fc, fcproj (1 + 4L) */
  tlm_q8_packed *packed;
  /* rule-anchored decoding: added to the log-probability of the hand
   * rule's value at each decision (TLM_LM_RULE_BONUS when loaded); 0 =
   * plain greedy. Part of what a schedule key means: change it only with
   * TLM_CODEGEN_VERSION, or in tools that use no cache. */
  double rule_bonus;
  /* kernel reuse: added to the log-probability of an already compiled
   * sibling kernel's values (TLM_LM_REUSE_BONUS when loaded; 0 = none).
   * Same caveat as rule_bonus. */
  double reuse_bonus;
  /* selective decoding: the greedy schedule replaces the rule's only when
   * the model ranks the whole sentence at least e^sentence_margin times as
   * probable as the rule's sentence (when loaded: the margin the file
   * records, format 4, else TLM_LM_SENTENCE_MARGIN; 0 = plain greedy).
   * Same caveat as rule_bonus; the engine's plan keys carry it
   * (tlm_engine_scheduler_id). */
  double sentence_margin;
  /* The hardware the model was trained on, as a bit per tlm_isa whose
   * prompts its training sentences held, and the TLM_RULE_VERSION of the
   * rule whose schedule those prompts held. A target or rule outside them
   * is scheduled by the rule (tlm_lm_covers). Version-1 files carry no
   * such section: every one was trained on records measured on AVX-512
   * machines only (data/README.md) against rule version 1. */
  uint32_t isa_seen, rule_version;
  /* The hardware prompts of its training sentences (format 3; a version-2
   * file stands for the one it was trained on, model.h's file layout) */
  tlm_lm_hw_set hw_seen;
} tlm_lm_model;

/* 1 when the model was trained on hardware like `t` (same ISA class, hence
 * lanes and vector registers, and the same hardware prompt: FMA width,
 * cores and caches, tlm_lm_hw_words) against a rule version this build
 * still has for some family (TLM_RULE_VERSION_MIN..TLM_RULE_VERSION), and
 * `t` runs one worker per core (tlm_lm_covers_workers); 0 when its prompts
 * would be ones it never saw. */
int tlm_lm_covers(const tlm_lm_model *m, const tlm_target *t);

/* 1 when t's hardware prompt is one the model was trained on (part of
 * tlm_lm_covers; apart so that callers can say which test failed). */
int tlm_lm_covers_hw(const tlm_lm_model *m, const tlm_target *t);

/* 1 when t runs one worker per core (t->threads == t->cores, or threads
 * unset): every training sentence was measured so, and the decisions that
 * split work over workers (N blocks, fused parallel loops, tile sizes that
 * make enough blocks) are answers for that many workers. A runtime on
 * fewer or more threads is scheduled by the rule, which blocks for the
 * workers it has (part of tlm_lm_covers). Measured on a Zen 5 VM (2 cores,
 * AVX-512, bench_matmul and bench_conv at --threads 1, session 24): a model
 * answering for two workers ran 1x768:768x768 at 0.80-0.87x of the rule
 * and MobileNet's depthwise layers at 0.87x. */
int tlm_lm_covers_workers(const tlm_target *t);

/* Oldest rule version any family of this build still has
 * (tlm_rule_family_version): models trained against older rules cover
 * nothing. */
#define TLM_RULE_VERSION_MIN 2

/* 1 when the model (already covering the target tg, not NULL) knows the
 * task's family as this build schedules and compiles it on tg: its rule
 * version is at least the family's (tlm_rule_family_version), and the
 * task is one the
 * tensor language has sentences for (not rotary embeddings, fused
 * attention or a matmul whose B is declared constant). 0: that task is
 * scheduled by the rule. */
int tlm_lm_covers_task(const tlm_lm_model *m, const tlm_task *task, const tlm_target *tg);

/* Added to the log-probability of the rule's value at each decision when
 * a model is loaded. With a bonus B the decoder keeps the rule's value
 * unless the model ranks another candidate more than e^B times as probable
 * (the model learned schedules as edits of the rule's, which is in its
 * prompt). 0, plain greedy, since model 10 (session 5): on 279 held-out
 * tasks it beat the rule on 52% of tasks with B = 0 against 47% with
 * B = ln 2, at the same geometric-mean speed (models/README.md). Models
 * 5-8 were better with ln 2. */
#define TLM_LM_RULE_BONUS 0.0

/* Sentence margin of selective decoding, in nats (model.sentence_margin):
 * a model's greedy schedule is used only where the model finds it at
 * least e^2 (7.4) times as probable as the rule's schedule; elsewhere the
 * rule's stands. A model is unsure where its training sentences
 * disagreed or never reached, and there its picks lose to the rule as
 * often as they win. The value comes from another model on another
 * machine than the ones it is used with: candidate 28's held-out split on
 * the Zen 5 VM (session 22, models/README.md), where 2 nats kept every
 * family >= 0.978 of the rule against 0.903 greedy; not fitted to the
 * split a model is gated on. */
#define TLM_LM_SENTENCE_MARGIN 2.0

/* Builds m->packed from the row-major blocks (tlm_lm_load does; a model
 * already packed is left as it is). Returns 0, -1 (out of memory). */
int tlm_lm_pack(tlm_lm_model *m);

/* Loads an int8 model file. TLM_OK, TLM_ERR_IO, TLM_ERR_OUT_OF_MEMORY,
 * TLM_ERR_FORMAT (bad magic, version, kind, size, checksum, config,
 * vocabulary, or a weight that is not finite), with a message. */
tlm_status tlm_lm_load(tlm_lm_model *m, const char *path, char *err, int errcap);

void tlm_lm_free(tlm_lm_model *m);

/* A folder of models: the names of its regular files ending in ".tlmq"
 * (not hidden), in byte order of their names, each as "dir/name" in
 * paths[i] (TLM_LM_PATH_MAX bytes each). Returns how many (at most cap;
 * the first cap in that order), 0 for a folder with none, -1 when dir is
 * not a folder that can be read or memory ran out. Thread-safe. A runtime uses the first file of its
 * models folder that loads and covers its target (engine/runtime.c). */
#define TLM_LM_PATH_MAX 4096
int tlm_lm_list_dir(const char *dir, char (*paths)[TLM_LM_PATH_MAX], int cap);

/* 1 when path names a folder (following links), else 0. */
int tlm_lm_is_dir(const char *path);

/* Loads the model for target t from path, as a tool would pick it: a file
 * is loaded as it is; of a folder's files (tlm_lm_list_dir) the first that
 * loads and covers t (tlm_lm_covers), else the first that loads. The
 * chosen file's path is copied to chosen (TLM_LM_PATH_MAX bytes) when not
 * NULL. Statuses as tlm_lm_load (the first failure's, when no file of a
 * folder loads); TLM_ERR_IO for a folder that cannot be read or holds no
 * *.tlmq file. */
tlm_status tlm_lm_load_for(tlm_lm_model *m, const char *path, const tlm_target *t, char *chosen,
                           char *err, int errcap);

/* ---- the file format, for the writer (train/checkpoint.c) ---- */

/* What a verified file's header says. */
typedef struct tlm_lm_file_info {
  tlm_gpt2_config cfg;
  int64_t step;
  uint64_t seed, checksum;
  uint32_t isa_seen, rule_version;
  uint32_t vocab_version; /* the vocabulary (and prompts) it was trained with */
  tlm_lm_hw_set hw_seen;
  double sentence_margin; /* format 4's gated margin; NaN: none recorded */
} tlm_lm_file_info;

/* Reads and verifies a model file of kind want_kind (TLM_LM_KIND_*): on
 * TLM_OK *data (malloc'd, the caller frees it) holds the file and
 * [*payload, *payload + *payload_len) its payload. Statuses as
 * tlm_lm_load. Thread-safe. */
tlm_status tlm_lm_file_read(const char *path, uint32_t want_kind, uint8_t **data,
                            const uint8_t **payload, size_t *payload_len, tlm_lm_file_info *info,
                            char *err, int errcap);

/* 1 when parameter tensor t (tlm_gpt2_params order) is stored as Q8
 * blocks in int8 files, else 0 (f32). */
int tlm_lm_tensor_is_matrix(int t);
/* Input dimension (row length) of matrix t. */
size_t tlm_lm_row_len(const tlm_gpt2_config *c, int t);
/* Bytes of an int8 file's payload for configuration c. */
size_t tlm_lm_q8_payload(const tlm_gpt2_config *c);
/* Quantizes n floats (a multiple of TLM_Q8_BLOCK) into n / 32 blocks. */
void tlm_lm_q8_quantize_row(tlm_q8_block *out, const float *w, size_t n);
/* Points the tensor fields of q into q->mem (tlm_lm_q8_payload bytes).
 * Returns TLM_OK. */
tlm_status tlm_lm_q8_point(tlm_lm_model *q);

/* Which int8 dot-product path runs: "avx512-vnni", "avx2" or "scalar". */
const char *tlm_lm_isa(void);
/* Forces the scalar reference path (1) or the best available (0). */
void tlm_lm_force_scalar(int on);
/* Caps the decoder's path at a tlm_isa (TLM_ISA_AVX2: the AVX2 path on an
 * AVX-512 VNNI host), -1 = the best available. Process-wide, for
 * benchmarks and tests; not synchronized with decodes in flight. */
void tlm_lm_force_isa(int isa);

/* out = W x for quantized activations (xq: in-dim int8, xd: one scale per
 * 32) with matrix `which` (0 = wte, 1 + 4 l + j for layer l's qkv, proj,
 * fc, fcproj), through the path tlm_lm_isa() names (or the scalar one when
 * forced). For tests of the SIMD paths against the scalar reference. */
void tlm_lm_matvec(const tlm_lm_model *m, int which, const int8_t *xq, const float *xd,
                   float *out);

/* Decoding state: the KV cache of one sequence. */
typedef struct tlm_lm_state {
  const tlm_lm_model *m;
  int pos;
  float *k, *v;     /* (L, C, T) keys, transposed; (L, T, C) values */
  float *x, *buf, *qkv, *att, *fch, *logits; /* scratch */
  int8_t *xq;       /* quantized activations */
  float *xd;        /* their block scales */
} tlm_lm_state;

int tlm_lm_state_init(tlm_lm_state *s, const tlm_lm_model *m);
void tlm_lm_state_free(tlm_lm_state *s);
int tlm_lm_state_copy(tlm_lm_state *dst, const tlm_lm_state *src);
/* Feeds one token at the next position; returns the (V) logits of the next
 * token (owned by the state), or NULL when the context is full. */
const float *tlm_lm_step(tlm_lm_state *s, int32_t token);

/* Feeds n tokens at once (n >= 1; a prompt): each weight matrix is read
 * once for all of them. The same state and logits as n tlm_lm_step calls
 * (each token's arithmetic is the same), or NULL when they do not fit the
 * context, a token is out of range, or out of memory. */
const float *tlm_lm_feed(tlm_lm_state *s, const int32_t *tokens, int n);

/* Greedy constrained decoding: at each decision point only its candidates
 * may be chosen (logits of all other tokens masked); the most probable
 * candidate wins (the rule's value with m->rule_bonus added to its
 * log-probability), ties to the earlier candidate. Then selective
 * decoding: when m->sentence_margin > 0 and the greedy schedule is not
 * the rule's, the rule's schedule is written instead unless the greedy
 * sentence's log-probability exceeds the rule's by at least the margin
 * (no bonuses in either sum). Writes the schedule and, if prob is not
 * NULL, the probability of each of its decisions under the masked
 * softmax. Deterministic. Returns TLM_OK, TLM_ERR_OUT_OF_MEMORY or
 * TLM_ERR_INTERNAL (a candidate without a token, context too short). */
tlm_status tlm_lm_decode(const tlm_lm_model *m, const tlm_space *s, tlm_schedule *out,
                         float *prob);

/* Kernel reuse: a new shape's schedule follows a kernel already compiled
 * for the same operator (M, N, K or the image size differ; the kernel
 * takes them at run time) unless the model ranks another value more than
 * e^TLM_LM_REUSE_BONUS times as probable at some decision. The model,
 * unlike the rule, does not choose blocks that nearby shapes share: on the
 * serving sample (200 requests, 460 shapes) model 10 compiled 89 kernels
 * against the rule's 23 without it. */
#define TLM_LM_REUSE_BONUS 1.3862943611198906 /* ln 4 */

/* Greedy decoding as tlm_lm_decode, with `anchor_bonus` added to the
 * log-probability of anchor's value at each decision while the schedule
 * decoded so far equals anchor's prefix (anchor NULL: tlm_lm_decode).
 * A result equal to the anchor is kept whatever the sentence margin (the
 * anchor's kernel exists; it passed the margin when it was decoded).
 * Same statuses. */
tlm_status tlm_lm_decode_anchored(const tlm_lm_model *m, const tlm_space *s,
                                  const tlm_schedule *anchor, double anchor_bonus,
                                  tlm_schedule *out, float *prob);

/* The model's log-probability (natural log) of `sched` in space s: the sum
 * over decisions of the masked log-softmax of its value among that
 * decision's candidates (no rule bonus). Sets *logp (-INFINITY on error).
 * Returns TLM_OK, TLM_ERR_INVALID_ARGUMENT (sched is not a point of s),
 * TLM_ERR_OUT_OF_MEMORY or TLM_ERR_INTERNAL. */
tlm_status tlm_lm_score(const tlm_lm_model *m, const tlm_space *s, const tlm_schedule *sched,
                        double *logp);

/* The k most probable distinct schedules (beam search of width k over the
 * masked log-probabilities, the rule's values favoured by m->rule_bonus as
 * in greedy decoding), best first. Returns how many were found
 * (<= k; fewer when the space is smaller), or -1. logp may be NULL. */
int tlm_lm_decode_topk(const tlm_lm_model *m, const tlm_space *s, int k, tlm_schedule *out,
                       double *logp);

#endif
