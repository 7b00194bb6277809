/* problem.c - descriptor parsing, random problems, reference check. */
#include "problem.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/validate.h"
#include "runtime/reference.h"
#include "runtime/space.h"

/* tags: "ab", "abc", ... are row-major; the last two letters swapped is a
 * transposed matrix. Returns 0 plain, 1 transposed, -1 unknown. */
static int tag_transposed(const char *tag, size_t len) {
  if (len < 2 || len > 6) return -1;
  char plain[7];
  for (size_t i = 0; i < len; i++) plain[i] = (char)('a' + i);
  if (memcmp(tag, plain, len) == 0) return 0;
  plain[len - 2] = (char)('a' + len - 1);
  plain[len - 1] = (char)('a' + len - 2);
  if (memcmp(tag, plain, len) == 0) return 1;
  return -1;
}

static int parse_dims(const char *s, const char *line, int64_t *dims, int *nd, const char **end,
                      const char *what, char *err, int errcap) {
  *nd = 0;
  const char *q = s;
  for (;;) {
    if (!isdigit((unsigned char)*q)) {
      snprintf(err, (size_t)errcap, "%s: expected a dimension at column %d", what,
               (int)(q - line) + 1);
      return -1;
    }
    char *e;
    long long v = strtoll(q, &e, 10);
    if (v < 1 || v > ((long long)1 << 40)) {
      snprintf(err, (size_t)errcap, "%s: dimension %lld at column %d out of range 1..2^40", what,
               v, (int)(q - line) + 1);
      return -1;
    }
    if (*nd == TLM_MAX_DIMS) {
      snprintf(err, (size_t)errcap, "%s: more than %d dimensions", what, TLM_MAX_DIMS);
      return -1;
    }
    dims[(*nd)++] = v;
    q = e;
    if (*q != 'x') break;
    q++;
  }
  if (*nd < 2) {
    snprintf(err, (size_t)errcap, "%s: needs at least 2 dimensions (rows x cols)", what);
    return -1;
  }
  *end = q;
  return 0;
}

int tlm_mm_desc_parse(const char *line, tlm_mm_desc *d, char *err, int errcap) {
  memset(d, 0, sizeof *d);
  const char *q = line;
  for (;;) {
    while (*q == ' ' || *q == '\t') q++;
    if (!*q || *q == '#' || *q == '\n' || *q == '\r') return 0;
    if (q[0] != '-' || q[1] != '-') break;
    const char *end = q;
    while (*end && *end != ' ' && *end != '\t' && *end != '\n') end++;
    const char *eq = memchr(q, '=', (size_t)(end - q));
    if (eq) {
      size_t klen = (size_t)(eq - q), vlen = (size_t)(end - eq - 1);
      int which = -1;
      if (klen == 6 && !memcmp(q, "--stag", 6)) which = 0;
      if (klen == 6 && !memcmp(q, "--wtag", 6)) which = 1;
      if (which >= 0) {
        int t = tag_transposed(eq + 1, vlen);
        if (t < 0) {
          snprintf(err, (size_t)errcap, "unsupported memory tag '%.*s' at column %d", (int)vlen,
                   eq + 1, (int)(eq - line) + 2);
          return -1;
        }
        if (which == 0) d->transpose_a = t;
        else d->transpose_b = t;
      }
    }
    q = end;
  }
  const char *e;
  if (parse_dims(q, line, d->a, &d->nda, &e, "A (source)", err, errcap)) return -1;
  if (*e != ':') {
    snprintf(err, (size_t)errcap, "expected ':' between A and B at column %d", (int)(e - line) + 1);
    return -1;
  }
  if (parse_dims(e + 1, line, d->b, &d->ndb, &e, "B (weights)", err, errcap)) return -1;
  if (*e == '_') e++;
  if (*e == 'n') {
    const char *nm = e + 1;
    if (*nm == '"') nm++;
    size_t n = strcspn(nm, "\"\n\r");
    if (n >= sizeof d->name) n = sizeof d->name - 1;
    memcpy(d->name, nm, n);
    e = nm + n;
    if (*e == '"') e++;
  }
  while (*e == ' ' || *e == '\t' || *e == '\n' || *e == '\r') e++;
  if (*e) {
    snprintf(err, (size_t)errcap, "unexpected '%c' at column %d", *e, (int)(e - line) + 1);
    return -1;
  }
  if (d->a[d->nda - 1] != d->b[d->ndb - 2]) {
    snprintf(err, (size_t)errcap, "K of A (%lld) differs from K of B (%lld)",
             (long long)d->a[d->nda - 1], (long long)d->b[d->ndb - 2]);
    return -1;
  }
  return 1;
}

char *tlm_mm_desc_str(const tlm_mm_desc *d, char *buf, int cap) {
  int l = 0;
  for (int i = 0; i < d->nda && l < cap; i++)
    l += snprintf(buf + l, (size_t)(cap - l), "%s%lld", i ? "x" : "", (long long)d->a[i]);
  for (int i = 0; i < d->ndb && l < cap; i++)
    l += snprintf(buf + l, (size_t)(cap - l), "%s%lld", i ? "x" : ":", (long long)d->b[i]);
  return buf;
}

/* at most 2^31 elements (8 GiB): larger test problems are refused */
#define MAX_PROBLEM_ELEMENTS ((int64_t)1 << 31)

static float *random_buffer(int64_t n, uint64_t *rng) {
  if (n < 0 || n > MAX_PROBLEM_ELEMENTS) return NULL;
  float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  if (!p) return NULL;
  for (int64_t i = 0; i < n; i++)
    p[i] = (float)((double)(tlm_rng_next(rng) >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
  return p;
}

/* element count, -1 when it overflows */
static int64_t count(const int64_t *s, int nd) {
  int64_t n = 1;
  for (int i = 0; i < nd; i++)
    if (__builtin_mul_overflow(n, s[i], &n)) return -1;
  return n;
}

int tlm_mm_desc_shapes(const tlm_mm_desc *d, int64_t *sa, int64_t *sb, int64_t *sc, int *nc) {
  memcpy(sa, d->a, sizeof(int64_t) * TLM_MAX_DIMS);
  memcpy(sb, d->b, sizeof(int64_t) * TLM_MAX_DIMS);
  if (d->transpose_a) sa[d->nda - 2] = d->a[d->nda - 1], sa[d->nda - 1] = d->a[d->nda - 2];
  if (d->transpose_b) sb[d->ndb - 2] = d->b[d->ndb - 1], sb[d->ndb - 1] = d->b[d->ndb - 2];
  int nb = (d->nda > d->ndb ? d->nda : d->ndb) - 2;
  *nc = nb + 2;
  if (*nc > TLM_MAX_DIMS) return -1;
  for (int i = 0; i < nb; i++) {
    int ia = i - (nb - (d->nda - 2)), ib = i - (nb - (d->ndb - 2));
    int64_t ea = ia >= 0 ? d->a[ia] : 1, eb = ib >= 0 ? d->b[ib] : 1;
    sc[i] = ea > eb ? ea : eb;
  }
  sc[*nc - 2] = d->a[d->nda - 2];
  sc[*nc - 1] = d->b[d->ndb - 1];
  return 0;
}

int tlm_problem_make(const tlm_mm_desc *d, const tlm_matmul_desc *epi, uint64_t seed,
                     tlm_problem *p) {
  memset(p, 0, sizeof *p);
  uint64_t rng = seed;
  p->op = tlm_op_matmul();
  if (epi) p->op.u.matmul = *epi;
  p->op.u.matmul.transpose_a = d->transpose_a;
  p->op.u.matmul.transpose_b = d->transpose_b;
  int64_t sa[TLM_MAX_DIMS], sb[TLM_MAX_DIMS], sc[TLM_MAX_DIMS];
  int nc;
  if (tlm_mm_desc_shapes(d, sa, sb, sc, &nc)) return -1;
  int64_t N = sc[nc - 1];
  p->bufs[0] = random_buffer(count(sa, d->nda), &rng);
  p->bufs[1] = random_buffer(count(sb, d->ndb), &rng);
  p->bufs[4] = random_buffer(count(sc, nc), &rng);
  if (!p->bufs[0] || !p->bufs[1] || !p->bufs[4]) goto fail;
  tlm_tensor_dense(&p->in[0], TLM_F32, d->nda, sa, p->bufs[0]);
  tlm_tensor_dense(&p->in[1], TLM_F32, d->ndb, sb, p->bufs[1]);
  tlm_tensor_dense(&p->out, TLM_F32, nc, sc, p->bufs[4]);
  p->n_in = 2;
  if (p->op.u.matmul.has_bias) {
    if (!(p->bufs[2] = random_buffer(N, &rng))) goto fail;
    tlm_tensor_dense(&p->in[p->n_in++], TLM_F32, 1, &N, p->bufs[2]);
  }
  if (p->op.u.matmul.has_residual) {
    if (!(p->bufs[3] = random_buffer(count(sc, nc), &rng))) goto fail;
    tlm_tensor_dense(&p->in[p->n_in++], TLM_F32, nc, sc, p->bufs[3]);
  }
  return 0;
fail:
  tlm_problem_free(p);
  return -1;
}

void tlm_problem_free(tlm_problem *p) {
  for (int i = 0; i < 5; i++) free(p->bufs[i]);
  memset(p, 0, sizeof *p);
}

double tlm_problem_tolerance(int64_t K) { return 1e-5 + (double)K / 8388608.0; }

size_t tlm_tensor_span_bytes(const tlm_tensor *t) {
  size_t last = 0;
  for (int i = 0; i < t->ndim; i++) last += (size_t)(t->shape[i] - 1) * (size_t)t->strides[i];
  return (last + 1) * sizeof(float);
}


static int64_t boff(const tlm_matmul_task *t, int64_t bi, const int64_t *s) {
  int64_t off = 0;
  for (int d = t->nbatch - 1; d >= 0; d--) {
    off += (bi % t->batch[d]) * s[d];
    bi /= t->batch[d];
  }
  return off;
}

double tlm_problem_check(const tlm_problem *p) { return tlm_problem_check_sampled(p, 0, 0); }

static double check_point(const tlm_matmul_task *t, const tlm_mm_args *args, int64_t b,
                          int64_t m, int64_t n) {
  int64_t ao = boff(t, b, args->sa), bo = boff(t, b, args->sb);
  int64_t co = boff(t, b, args->sc), ro = boff(t, b, args->sr);
  double acc = 0, mag = 0;
  for (int64_t k = 0; k < t->K; k++) {
    double x = (double)args->a[ao + m * args->sa[4] + k * args->sa[5]] *
               (double)args->b[bo + k * args->sb[4] + n * args->sb[5]];
    acc += x;
    mag += fabs(x);
  }
  float r = (float)acc;
  if (t->has_bias) {
    r += args->bias[n * args->sbias];
    mag += fabs(args->bias[n * args->sbias]);
  }
  float rv = t->has_residual ? args->res[ro + m * args->sr[4] + n * args->sr[5]] : 0.0f;
  if (t->has_residual == 2) r += rv;
  r = tlm_ref_activation(t->act, r);
  if (t->has_residual == 1) r += rv;
  mag += fabs(rv);
  double c = args->c[co + m * args->sc[4] + n * args->sc[5]];
  double e = fabs(c - (double)r) / (mag + 1e-3);
  return isnan(e) ? INFINITY : e;
}

double tlm_problem_check_sampled(const tlm_problem *p, int points, uint64_t seed) {
  tlm_task task;
  tlm_mm_args args;
  char err[256];
  if (tlm_validate_matmul(&p->op, p->in, p->n_in, &p->out, 1, &task, &args, err, sizeof err))
    return -1;
  if (p->residual_before_act && task.u.mm.has_residual) task.u.mm.has_residual = 2;
  const tlm_matmul_task *t = &task.u.mm;
  int64_t btot = tlm_task_batch_total(&task);
  double worst = 0;
  if (points > 0) {
    uint64_t rng = seed;
    for (int i = 0; i < points; i++) {
      int64_t b = (int64_t)(tlm_rng_next(&rng) % (uint64_t)btot);
      int64_t m = (int64_t)(tlm_rng_next(&rng) % (uint64_t)t->M);
      int64_t n = (int64_t)(tlm_rng_next(&rng) % (uint64_t)t->N);
      double e = check_point(t, &args, b, m, n);
      if (!(e <= worst)) worst = e;
    }
    return worst;
  }
  for (int64_t b = 0; b < btot; b++)
    for (int64_t m = 0; m < t->M; m++)
      for (int64_t n = 0; n < t->N; n++) {
        double e = check_point(t, &args, b, m, n);
        if (!(e <= worst)) worst = e;
      }
  return worst;
}


/* `tlm run softmax:RxC` and friends: parses "OP:ROWSxCOLS"; returns 1 with
 * the kind, rows and cols, 0 if the text names no row-wise op, -1 (with a
 * message) if it does but is malformed. */
int tlm_row_desc_parse(const char *text, tlm_op *op, int64_t *rows, int64_t *cols, char *err,
                       int errcap) {
  static const struct {
    const char *name;
    tlm_op_kind kind;
    tlm_activation act;
    tlm_binary bin;
  } ops[] = {{"softmax:", TLM_OP_SOFTMAX, TLM_ACT_NONE, TLM_BINARY_NONE},
             {"layernorm:", TLM_OP_LAYERNORM, TLM_ACT_NONE, TLM_BINARY_NONE},
             {"rmsnorm:", TLM_OP_RMSNORM, TLM_ACT_NONE, TLM_BINARY_NONE},
             {"relu:", TLM_OP_ELTWISE, TLM_ACT_RELU, TLM_BINARY_NONE},
             {"relu6:", TLM_OP_ELTWISE, TLM_ACT_RELU6, TLM_BINARY_NONE},
             {"gelu:", TLM_OP_ELTWISE, TLM_ACT_GELU_TANH, TLM_BINARY_NONE},
             {"silu:", TLM_OP_ELTWISE, TLM_ACT_SILU, TLM_BINARY_NONE},
             {"swiglu:", TLM_OP_ELTWISE, TLM_ACT_SILU, TLM_BINARY_MUL},
             {"add:", TLM_OP_ELTWISE, TLM_ACT_NONE, TLM_BINARY_ADD},
             {"mul:", TLM_OP_ELTWISE, TLM_ACT_NONE, TLM_BINARY_MUL}};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    size_t l = strlen(ops[i].name);
    if (strncmp(text, ops[i].name, l)) continue;
    const char *q = text + l;
    char *e;
    long long r = strtoll(q, &e, 10);
    if (e == q || r < 1 || r > (1ll << 40)) {
      snprintf(err, (size_t)errcap, "expected ROWS (>= 1) at column %d", (int)(q - text) + 1);
      return -1;
    }
    if (*e != 'x') {
      snprintf(err, (size_t)errcap, "expected 'x' at column %d", (int)(e - text) + 1);
      return -1;
    }
    q = e + 1;
    long long c = strtoll(q, &e, 10);
    if (e == q || c < 1 || c > (1ll << 40) || *e) {
      snprintf(err, (size_t)errcap, "expected COLS (>= 1) and nothing after it at column %d",
               (int)(q - text) + 1);
      return -1;
    }
    *op = ops[i].kind == TLM_OP_ELTWISE ? tlm_op_eltwise(ops[i].act, ops[i].bin)
                                        : tlm_op_rownorm(ops[i].kind);
    *rows = r;
    *cols = c;
    return 1;
  }
  return 0;
}


int tlm_mm_desc_read_file(const char *path, tlm_mm_desc *out, int max) {
  FILE *fp = fopen(path, "r");
  if (!fp) return -1;
  char line[1024], err[256];
  int n = 0;
  while (n < max && fgets(line, sizeof line, fp))
    if (tlm_mm_desc_parse(line, &out[n], err, sizeof err) == 1) n++;
  fclose(fp);
  return n;
}

void tlm_mm_desc_shrink(tlm_mm_desc *d, int64_t cap, int64_t lo, int64_t span, int64_t max_batch) {
  for (int i = 0; i < d->nda; i++) d->a[i] = d->a[i] <= cap ? d->a[i] : lo + d->a[i] % span;
  for (int i = 0; i < d->ndb; i++) d->b[i] = d->b[i] <= cap ? d->b[i] : lo + d->b[i] % span;
  d->b[d->ndb - 2] = d->a[d->nda - 1];
  int64_t bprod = 1;
  for (int i = 0; i < d->nda - 2; i++) {
    int64_t e = d->a[i] > 1 ? (bprod >= max_batch ? 1 : 2 + d->a[i] % 2) : 1;
    int j = i - (d->nda - d->ndb);
    if (j >= 0 && d->b[j] > 1) d->b[j] = e;
    d->a[i] = e;
    bprod *= e;
  }
}

int tlm_mm_desc_load_shared(const char *shared, int per_file, tlm_mm_desc *out, int max) {
  static const char *const files[] = {"shapes_2d", "shapes_bert", "shapes_transformer",
                                      "harness_matmul_gpt-j_32-32_inf_lb_f32",
                                      "harness_matmul_gpt-j_2016-32_inf_lb_f32"};
  int n = 0;
  for (size_t f = 0; f < sizeof files / sizeof *files && shared && n < max; f++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/workloads/benchdnn/matmul/%s", shared, files[f]);
    int got = tlm_mm_desc_read_file(path, out + n, max - n < per_file ? max - n : per_file);
    if (got < 0) fprintf(stderr, "note: %s not found\n", path);
    n += got > 0 ? got : 0;
  }
  return n;
}

void tlm_mm_random_variant(uint64_t x, tlm_matmul_desc *epi, tlm_mm_desc *d) {
  memset(epi, 0, sizeof *epi);
  epi->has_bias = (int)(x & 1);
  epi->activation = (tlm_activation)((x >> 1) % TLM_ACT_COUNT_);
  epi->has_residual = (int)((x >> 3) & 1);
  if ((x >> 4) % 4 == 0) d->transpose_a ^= 1;
  if ((x >> 6) % 4 == 0) d->transpose_b ^= 1;
}
