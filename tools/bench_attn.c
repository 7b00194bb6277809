/* bench_attn.c - `tlm bench attention`: the fused attention operator
 * against the three-operator path (Q K^T, causal scaled softmax, P V, each
 * a tlm_run call) on the same operands, per key length: decode (one query
 * row) by default, LLaMA-7B's heads (32 of 128) by default. Both outputs
 * are checked against the double-precision reference before anything is
 * timed; then rounds of alternating batches, per-round ratios, medians. */
#include "bench_attn.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/validate.h"
#include "engine/engine.h"
#include "runtime/reference.h"
#include "train/measure.h"

static tlm_tensor t4(float *d, int64_t a, int64_t b, int64_t c, int64_t e, int64_t sa, int64_t sb,
                     int64_t sc) {
  tlm_tensor t = {.dtype = TLM_F32, .ndim = 4, .shape = {a, b, c, e}, .strides = {sa, sb, sc, 1}, .data = d};
  return t;
}

typedef struct att_case {
  int64_t H, Hk, D, Tq, L;
  float *q, *k, *v, *o_fused, *o_split, *scores, *ref;
} att_case;

static tlm_status run_fused(tlm_runtime *rt, att_case *c) {
  tlm_op op = tlm_op_attention(1);
  tlm_tensor in[3] = {t4(c->q, 1, c->H, c->Tq, c->D, 0, c->Tq * c->D, c->D),
                      t4(c->k, 1, c->Hk, c->L, c->D, 0, c->L * c->D, c->D),
                      t4(c->v, 1, c->Hk, c->L, c->D, 0, c->L * c->D, c->D)};
  tlm_tensor o = t4(c->o_fused, 1, c->H, c->Tq, c->D, 0, c->Tq * c->D, c->D);
  return tlm_run(rt, &op, in, 3, &o, 1);
}

/* scores (Hk, G, Tq, L) = Q K^T; softmax in place; O = P V */
static tlm_status run_split(tlm_runtime *rt, att_case *c) {
  int64_t G = c->H / c->Hk, D = c->D, L = c->L, Tq = c->Tq;
  tlm_op mm = tlm_op_matmul();
  mm.u.matmul.transpose_b = 1;
  tlm_tensor in[2] = {t4(c->q, c->Hk, G, Tq, D, G * Tq * D, Tq * D, D),
                      t4(c->k, c->Hk, 1, L, D, L * D, 0, D)};
  tlm_tensor s;
  tlm_tensor_dense(&s, TLM_F32, 4, (int64_t[]){c->Hk, G, Tq, L}, c->scores);
  tlm_status st = tlm_run(rt, &mm, in, 2, &s, 1);
  if (st) return st;
  tlm_op sm = tlm_op_rownorm(TLM_OP_SOFTMAX);
  sm.u.rownorm.causal = 1;
  sm.u.rownorm.scale = 1.0f / sqrtf((float)D);
  if ((st = tlm_run(rt, &sm, &s, 1, &s, 1))) return st;
  tlm_op pv = tlm_op_matmul();
  tlm_tensor in2[2] = {s, t4(c->v, c->Hk, 1, L, D, L * D, 0, D)};
  tlm_tensor o = t4(c->o_split, c->Hk, G, Tq, D, G * Tq * D, Tq * D, D);
  return tlm_run(rt, &pv, in2, 2, &o, 1);
}

static double max_diff(const float *a, const float *b, int64_t n) {
  double w = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs((double)a[i] - b[i]) / (1.0 + fabs((double)b[i]));
    if (!(e <= w)) w = isnan(e) ? INFINITY : e;
  }
  return w;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, tlm_cmp_double);
  return v[n / 2];
}

int tlm_cmd_bench_attention(int argc, char **argv) {
  int64_t H = 32, Hk = 32, D = 128, Tq = 1;
  int threads = 0, rounds = 15;
  const char *json = NULL, *lens = "128,512,2048,4096";
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    int more = i + 1 < argc;
    if (!strcmp(a, "--heads") && more) H = atoll(argv[++i]);
    else if (!strcmp(a, "--kv-heads") && more) Hk = atoll(argv[++i]);
    else if (!strcmp(a, "--dim") && more) D = atoll(argv[++i]);
    else if (!strcmp(a, "--queries") && more) Tq = atoll(argv[++i]);
    else if (!strcmp(a, "--lengths") && more) lens = argv[++i];
    else if (!strcmp(a, "--threads") && more) threads = atoi(argv[++i]);
    else if (!strcmp(a, "--rounds") && more) rounds = atoi(argv[++i]);
    else if (!strcmp(a, "--json") && more) json = argv[++i];
    else {
      fprintf(stderr,
              "usage: tlm bench attention [--heads H] [--kv-heads HK] [--dim D] [--queries TQ]\n"
              "                           [--lengths L1,L2,...] [--threads N] [--rounds R]\n"
              "                           [--json F]\n"
              "  Fused attention (tlm_op_attention, causal) against Q K^T + causal softmax +\n"
              "  P V (three tlm_run calls) over key lengths L (default 128,512,2048,4096),\n"
              "  H query heads and HK K/V heads of D features (default LLaMA-7B's 32, 32,\n"
              "  128), TQ query rows (default 1: a decode step). Both are checked against\n"
              "  the reference first; R rounds (default 15) of alternating batches.\n");
      return 2;
    }
  }
  if (H < 1 || Hk < 1 || H % Hk || D < 1 || D > 1024 || Tq < 1 || rounds < 1 || rounds > 101) {
    fprintf(stderr, "tlm bench attention: heads, dims and rounds out of range\n");
    return 2;
  }
  tlm_runtime *rt = tlm_tool_runtime("tlm", threads > 0 ? threads : -1, "none", NULL);
  if (!rt) return 1;
  char tdesc[400];
  tlm_describe_target(rt, tdesc, sizeof tdesc);
  printf("attention, decode-style: %lld query heads, %lld K/V heads, D %lld, %lld query rows, "
         "causal\n  target: %s\n", (long long)H, (long long)Hk, (long long)D, (long long)Tq, tdesc);
  cJSON *root = cJSON_CreateObject(), *arr = cJSON_CreateArray();
  cJSON_AddNumberToObject(root, "heads", (double)H);
  cJSON_AddNumberToObject(root, "kv_heads", (double)Hk);
  cJSON_AddNumberToObject(root, "dim", (double)D);
  cJSON_AddNumberToObject(root, "queries", (double)Tq);
  cJSON_AddStringToObject(root, "target", tdesc);
  cJSON_AddItemToObject(root, "lengths", arr);
  int rc = 0;
  for (const char *p = lens; *p;) {
    char *e;
    int64_t L = strtoll(p, &e, 10);
    if (e == p || L < Tq || L > (1 << 20)) {
      fprintf(stderr, "tlm bench attention: bad length list at '%s' (each >= queries)\n", p);
      rc = 2;
      break;
    }
    p = *e == ',' ? e + 1 : e;
    att_case c = {H, Hk, D, Tq, L, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    size_t nq = (size_t)(H * Tq * D), nk = (size_t)(Hk * L * D);
    c.q = malloc(nq * 4), c.k = malloc(nk * 4), c.v = malloc(nk * 4);
    c.o_fused = malloc(nq * 4), c.o_split = malloc(nq * 4), c.ref = malloc(nq * 4);
    c.scores = malloc((size_t)(H * Tq * L) * 4);
    if (!c.q || !c.k || !c.v || !c.o_fused || !c.o_split || !c.ref || !c.scores) {
      fprintf(stderr, "tlm bench attention: out of memory\n");
      rc = 1;
    }
    uint64_t rng = 7;
    for (size_t i = 0; !rc && i < nq; i++) c.q[i] = (float)((tlm_rng_next(&rng) >> 40) % 2000) / 1000.0f - 1.0f;
    for (size_t i = 0; !rc && i < nk; i++) {
      c.k[i] = (float)((tlm_rng_next(&rng) >> 40) % 2000) / 1000.0f - 1.0f;
      c.v[i] = (float)((tlm_rng_next(&rng) >> 40) % 2000) / 1000.0f - 1.0f;
    }
    double dfused = INFINITY, dsplit = INFINITY;
    if (!rc) { /* correctness first (and the compiles) */
      tlm_status s1 = run_fused(rt, &c), s2 = run_split(rt, &c);
      tlm_task task;
      tlm_attn_args args;
      char err[256];
      tlm_op op = tlm_op_attention(1);
      tlm_tensor in[3] = {t4(c.q, 1, H, Tq, D, 0, Tq * D, D), t4(c.k, 1, Hk, L, D, 0, L * D, D),
                          t4(c.v, 1, Hk, L, D, 0, L * D, D)};
      tlm_tensor o = t4(c.ref, 1, H, Tq, D, 0, Tq * D, D);
      if (s1 || s2 || tlm_validate_attention(&op, in, 3, &o, 1, &task, &args, err, sizeof err)) {
        fprintf(stderr, "tlm bench attention: %s\n", tlm_last_error(rt));
        rc = 1;
      } else {
        tlm_ref_attention(&task, &args);
        dfused = max_diff(c.o_fused, c.ref, (int64_t)nq);
        dsplit = max_diff(c.o_split, c.ref, (int64_t)nq);
        if (!(dfused <= 1e-4) || !(dsplit <= 1e-4)) {
          fprintf(stderr, "tlm bench attention: L %lld: outputs differ from the reference "
                          "(fused %g, split %g)\n", (long long)L, dfused, dsplit);
          rc = 1;
        }
      }
    }
    if (!rc) {
      /* calls per batch: about 2 ms of the fused path */
      double a = tlm_now_ns();
      run_fused(rt, &c);
      double one = tlm_now_ns() - a;
      int n = (int)(2e6 / (one > 1 ? one : 1));
      if (n < 1) n = 1;
      if (n > 10000) n = 10000;
      double tf[101], ts[101], ratio[101];
      for (int r = 0; r < rounds; r++) {
        a = tlm_now_ns();
        for (int i = 0; i < n; i++) run_fused(rt, &c);
        tf[r] = (tlm_now_ns() - a) / n;
        a = tlm_now_ns();
        for (int i = 0; i < n; i++) run_split(rt, &c);
        ts[r] = (tlm_now_ns() - a) / n;
        ratio[r] = ts[r] / tf[r];
      }
      double mf = median(tf, rounds), ms = median(ts, rounds), mr = median(ratio, rounds);
      double lo = ratio[0], hi = ratio[rounds - 1]; /* sorted by median() */
      printf("  keys %6lld  fused %9.1f us  split %9.1f us  split/fused %.2fx (min %.2f, max %.2f)"
             "  max rel err vs reference %.1e / %.1e\n",
             (long long)L, mf * 1e-3, ms * 1e-3, mr, lo, hi, dfused, dsplit);
      cJSON *e1 = cJSON_CreateObject();
      cJSON_AddNumberToObject(e1, "keys", (double)L);
      cJSON_AddNumberToObject(e1, "fused_us_median", mf * 1e-3);
      cJSON_AddNumberToObject(e1, "split_us_median", ms * 1e-3);
      cJSON_AddNumberToObject(e1, "speedup_fused_over_split_median", mr);
      cJSON_AddNumberToObject(e1, "speedup_min", lo);
      cJSON_AddNumberToObject(e1, "speedup_max", hi);
      cJSON_AddNumberToObject(e1, "fused_max_rel_err", dfused);
      cJSON_AddNumberToObject(e1, "split_max_rel_err", dsplit);
      cJSON_AddItemToArray(arr, e1);
    }
    free(c.q), free(c.k), free(c.v), free(c.o_fused), free(c.o_split), free(c.ref), free(c.scores);
    if (rc) break;
  }
  if (json && !rc) {
    if (tlm_json_save(root, json)) {
      fprintf(stderr, "tlm bench attention: cannot write %s\n", json);
      rc = 1;
    }
  }
  cJSON_Delete(root);
  tlm_destroy(rt);
  return rc;
}
