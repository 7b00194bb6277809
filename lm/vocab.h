/* vocab.h - the tensor language: a closed vocabulary, the prompt that
 * describes a task and the hardware, and one token per schedule decision
 * (internal).
 *
 * A sentence is   prompt (TLM_LM_PROMPT_LEN tokens)   decisions (one per
 * decision point, in the space's order). The prompt has a fixed length, so
 * the position of every decision is fixed too.
 *
 * Prompt: <bos> op dtype bias act res unitA unitB unitC, then for each axis
 * (row-wise operators: bias:0 act:none causal:<0|1> and the unit flags of x,
 * gamma and y; axes b = 1, m = rows, n = cols, k = 1)
 * (b = batch total, m, n, k): ax:<axis> mag:<floor(log2 E)>
 * frac:<quarter of the octave> p2:<trailing zero bits, at most 6>, then the
 * hardware: isa fma cores(log2) l1(log2 KiB) l2 l3, then <sep> (isa fixes
 * the lanes and vector registers; fma:<128|256|512> is the width of the FMA
 * datapath, so avx512 with fma:256 is a double-pumped core; version 7 put
 * it where vnni:<0|1> was, which says nothing about f32 kernels). Extents are
 * never spelled out: magnitude plus divisibility covers extents the model
 * never saw (37 -> mag:5 frac:0 p2:0; 11008 -> mag:13 frac:1 p2:6).
 *
 * Convolutions (version 4) see themselves as the implicit GEMM they
 * compute: <bos> op:conv win:<kernel h: 1|3|5|7|big> stride:<1|2|big>
 * groups:<1|dw|some> act uA (src channels unit) uB (weights' output
 * channels unit) uC (dst channels unit), axes b = N, m = OH*OW (one
 * image's output pixels, D folded in), n = OC per group, k = IC per group x
 * window, then the hardware.
 *
 * Pooling (version 5): <bos> op:pool pool:<max|avg> win:<kernel h, "big" for
 * global> stride:<..> act:none uA (src channels unit) uB:0 uC (dst channels
 * unit), axes b = N, m = output pixels, n = C, k = window positions.
 * Elementwise (version 5) as row-wise operators with op:eltwise, bin:<none|
 * add|mul> in the bias slot, the activation, and uB = z's unit flag.
 *
 * Rule (version 6): after the TLM_LM_TASK_LEN task tokens, <rule> and the
 * decisions of the hand rule (tlm_space_default) for this task, padded to
 * TLM_MAX_POINTS. The model so learns schedules as edits of the rule's: on
 * a task unlike its training tasks it can fall back to copying the rule,
 * and where measured search beat the rule on similar tasks it learns the
 * change (the rule is the prior; the measurements are the correction).
 *
 * Decision tokens are "<kind>:<value>" (vec:16, tile:8, unroll:4, order:1,
 * pack:0, par:2, at:3); tile tokens are shared by every tile point.
 * The vocabulary of each version is rebuilt identically by every build and
 * stored in model files with its version. A build trains and writes
 * TLM_LM_VOCAB_VERSION and reads every version from
 * TLM_LM_VOCAB_VERSION_MIN: a model keeps the words and prompts it was
 * trained with (tlm_vocab.version; version 8 added the p2 words 7-10 and
 * the depthwise n word), and a file whose words differ from its version's
 * is refused. */
#ifndef TLM_LM_VOCAB_H
#define TLM_LM_VOCAB_H

#include <stdint.h>

#include "../runtime/space.h"
#include "../runtime/target.h"
#include "../runtime/task.h"

#define TLM_LM_VOCAB_VERSION 8     /* what this build trains and writes */
#define TLM_LM_VOCAB_VERSION_MIN 7 /* the oldest it reads (and prompts for) */
#define TLM_LM_MAX_VOCAB 512
#define TLM_LM_TASK_LEN 32 /* task and hardware words, <sep>, padding */
#define TLM_LM_PROMPT_LEN (TLM_LM_TASK_LEN + 1 + TLM_MAX_POINTS)
#define TLM_LM_MAX_SEQ (TLM_LM_PROMPT_LEN + TLM_MAX_POINTS)

enum { TLM_TOK_PAD = 0, TLM_TOK_BOS = 1, TLM_TOK_SEP = 2, TLM_TOK_EOS = 3 };

typedef struct tlm_vocab {
  int32_t n;
  int32_t version; /* TLM_LM_VOCAB_VERSION_MIN .. TLM_LM_VOCAB_VERSION: its words and prompts */
  char tok[TLM_LM_MAX_VOCAB][16];
  /* decision token of (point kind, value), -1 if none; values < 4097 */
  int16_t decision[8][4097];
} tlm_vocab;

/* Builds the vocabulary of TLM_LM_VOCAB_VERSION. Deterministic. */
void tlm_vocab_build(tlm_vocab *v);

/* Builds the vocabulary of an older version, whose prompts a model file of
 * that version was trained on (the prompt writers follow v->version).
 * Returns 0, or -1 for a version outside TLM_LM_VOCAB_VERSION_MIN ..
 * TLM_LM_VOCAB_VERSION. Deterministic. */
int tlm_vocab_build_version(tlm_vocab *v, int version);

/* The words an extent e >= 1 is spelled with: mag:<floor(log2 e), at most
 * 40> frac:<quarter of the octave> p2:<trailing zero bits, at most p2_max>
 * (6 for the GPU language and vocabulary 7, 10 from vocabulary 8). */
void tlm_lm_extent_words(int64_t e, int p2_max, int *mag, int *frac, int *p2);

/* Token id of a string, -1 if absent. */
int tlm_vocab_find(const tlm_vocab *v, const char *s);

/* Writes the TLM_LM_PROMPT_LEN prompt tokens of a task on a target (task
 * words, then the rule's decisions when the task has a schedule space). */
void tlm_lm_prompt(const tlm_vocab *v, const tlm_task *task, const tlm_target *target,
                   int32_t *out);

/* The hardware words of the prompt: isa fma cores l1 l2 l3, in that order. */
#define TLM_LM_HW_WORDS 6
/* Hardware prompts a model file can list as seen in training. */
#define TLM_LM_MAX_HW 16

/* The distinct hardware prompts a model's training sentences held (token
 * ids of this vocabulary, TLM_LM_HW_WORDS each). A model schedules only
 * for a target whose hardware words are one of them (tlm_lm_covers): a
 * prompt it never saw is the rule's job (issue #16: model 23, trained on
 * one Zen 5, ran at 0.82x the rule on an Intel Xeon whose l2 and l3 words
 * it had never seen). `any`: stands for every target (in-memory test
 * models only; never written to a file). */
typedef struct tlm_lm_hw_set {
  uint32_t n, any;
  int32_t tok[TLM_LM_MAX_HW][TLM_LM_HW_WORDS];
} tlm_lm_hw_set;

/* Writes the TLM_LM_HW_WORDS hardware tokens of `tg`'s prompt into out;
 * returns TLM_LM_HW_WORDS. */
int tlm_lm_hw_words(const tlm_vocab *v, const tlm_target *tg, int32_t *out);
/* 1 when `words` (TLM_LM_HW_WORDS tokens) is in the set. */
int tlm_lm_hw_has(const tlm_lm_hw_set *set, const int32_t *words);
/* Adds `words` unless present. Returns 0, or -1 when the set is full. */
int tlm_lm_hw_add(tlm_lm_hw_set *set, const int32_t *words);
/* "isa:avx512 fma:512 cores:1 l1:5 l2:10 l3:15" into buf; returns buf. */
char *tlm_lm_hw_str(const tlm_vocab *v, const int32_t *words, char *buf, int cap);

/* Token of decision point p of the space taking `value`, -1 if none. */
int tlm_lm_decision_token(const tlm_vocab *v, const tlm_space *s, int p, int32_t value);

/* Full sentence of a schedule: prompt then one token per decision. Returns
 * its length (TLM_LM_PROMPT_LEN + s->npoints), or -1 if a value has no
 * token. If `allowed` is not NULL, allowed[i] receives the candidate tokens
 * bitmask (TLM_LM_MAX_VOCAB bits) of the decision at sentence position i
 * (only decision positions are written). */
int tlm_lm_sentence(const tlm_vocab *v, const tlm_space *s, const tlm_schedule *sched,
                    int32_t *tokens, uint64_t (*allowed)[TLM_LM_MAX_VOCAB / 64]);

/* The schedule of a sentence's decision tokens (tokens after the prompt);
 * -1 if a token is not a candidate of its point. */
int tlm_lm_schedule_of(const tlm_vocab *v, const tlm_space *s, const int32_t *decisions,
                       tlm_schedule *out);

/* 64-bit checksum of the vocabulary (XXH3 of its strings), for files. */
uint64_t tlm_vocab_checksum(const tlm_vocab *v);

#endif
