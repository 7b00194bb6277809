/* problem.h - benchdnn matmul descriptors, test problems with random data
 * and the reference check (shared by the tlm command, tests and benches). */
#ifndef TLM_TRAIN_PROBLEM_H
#define TLM_TRAIN_PROBLEM_H

#include <stdint.h>

#include "tlm.h"

/* A parsed benchdnn matmul problem: "MxK:KxN", "BxMxK:BxKxN", up to 4
 * batch dims, optional trailing _n"name" label, optionally preceded by
 * benchdnn options of which --stag/--wtag/--dtag are read (a tag whose
 * last two letters are swapped, e.g. "ba" or "abdc", means transposed
 * storage of A or B) and the rest ignored. */
typedef struct tlm_mm_desc {
  int nda, ndb;        /* dims of A and B (logical shapes) */
  int64_t a[TLM_MAX_DIMS], b[TLM_MAX_DIMS];
  int transpose_a, transpose_b;
  char name[64];
} tlm_mm_desc;

/* Parses one line. Returns 1 with *d filled, 0 for a line with no problem
 * (blank, comment, options only), -1 with a message naming the offending
 * field and its column in err. */
int tlm_mm_desc_parse(const char *line, tlm_mm_desc *d, char *err, int errcap);

/* Reads up to `max` descriptors of a benchdnn matmul file, skipping lines
 * without a problem and malformed ones. Returns how many, or -1 when the
 * file cannot be opened. */
int tlm_mm_desc_read_file(const char *path, tlm_mm_desc *out, int max);

/* The first `per_file` problems of each shared benchdnn matmul file
 * (shapes_2d, shapes_bert, shapes_transformer, the two GPT-J harness files)
 * under SHARED/workloads/benchdnn/matmul, at most max in all; a missing
 * file is noted on stderr. Returns how many. */
int tlm_mm_desc_load_shared(const char *shared, int per_file, tlm_mm_desc *out, int max);

/* A random variant of a problem from 64 random bits x: *epi (zeroed
 * first) gets a bias (1 in 2), an activation (uniform) and a residual (1
 * in 2); d's storage of A and of B is transposed 1 time in 4 each. */
void tlm_mm_random_variant(uint64_t x, tlm_matmul_desc *epi, tlm_mm_desc *d);

/* Shrinks a descriptor for reference checks: every extent above `cap`
 * becomes lo + extent % span, B's K follows A's, and batch extents over 1
 * become 2 or 3 while the product of those before is below max_batch, 1
 * after (which dims broadcast stays as it was). */
void tlm_mm_desc_shrink(tlm_mm_desc *d, int64_t cap, int64_t lo, int64_t span, int64_t max_batch);

/* Stored shapes of A and B (transposes applied) and C's shape (batch dims
 * broadcast, then M x N); *nc gets C's rank. Returns 0, -1 if C would have
 * more than TLM_MAX_DIMS dims. */
int tlm_mm_desc_shapes(const tlm_mm_desc *d, int64_t *sa, int64_t *sb, int64_t *sc, int *nc);

/* "BxMxK:BxKxN" text of a descriptor. */
char *tlm_mm_desc_str(const tlm_mm_desc *d, char *buf, int cap);

/* Parses a row-wise or elementwise op on a (ROWS, COLS) tensor:
 * "softmax:RxC", "layernorm:", "rmsnorm:", "relu:", "relu6:", "gelu:",
 * "silu:", "swiglu:" (silu(x) * z), "add:" (x + z), "mul:" (x * z).
 * Returns 1 with *op (defaults of tlm_op_rownorm / tlm_op_eltwise) and
 * the extents, 0 if the text names no such op, -1 with a message naming
 * the offending column when it does but is malformed. */
int tlm_row_desc_parse(const char *text, tlm_op *op, int64_t *rows, int64_t *cols, char *err,
                       int errcap);

/* A runnable problem: tensors with owned, randomly filled buffers
 * (uniform in [-1, 1) from `seed`). */
typedef struct tlm_problem {
  tlm_op op;
  int n_in;
  tlm_tensor in[4];
  tlm_tensor out;
  float *bufs[5];
  int residual_before_act; /* 1: checked with the residual inside the
                              activation (the internal has_residual = 2 of
                              a convolution run as a matmul); 0 from make */
} tlm_problem;

/* Builds the problem of a descriptor with the epilogue of `epi` (NULL = none;
 * its transpose fields are ignored, the descriptor's are used). Returns 0,
 * -1 out of memory or a shape the API cannot describe. */
int tlm_problem_make(const tlm_mm_desc *d, const tlm_matmul_desc *epi, uint64_t seed,
                     tlm_problem *p);
void tlm_problem_free(tlm_problem *p);

/* Compares p->out against the double-precision reference: returns the
 * largest |c - ref| / (sum_k |a b| + |bias| + |residual| + 1e-3) over all
 * elements, or -1 if the problem does not validate. */
double tlm_problem_check(const tlm_problem *p);

/* The same on `points` output elements drawn from `seed` (every element
 * when points <= 0): O(points * K) instead of O(B * M * N * K). */
double tlm_problem_check_sampled(const tlm_problem *p, int points, uint64_t seed);

/* Tolerance for tlm_problem_check at reduction length K: float rounding
 * grows at most linearly in K (Higham, Accuracy and Stability of Numerical
 * Algorithms, 2nd ed., section 3.1); 2^-23 * K plus a floor for the
 * epilogue's exp/tanh. */
double tlm_problem_tolerance(int64_t K);

/* Bytes a tensor's view reaches from its data pointer (f32 elements):
 * what tlm_constant_add needs for a weight tensor. */
size_t tlm_tensor_span_bytes(const tlm_tensor *t);

#endif
