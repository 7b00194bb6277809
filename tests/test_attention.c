/* Fused attention (TLM_OP_ATTENTION): default and random schedules against
 * the double-precision reference (runtime/reference.c) on decode (one
 * query over a cache), prefill, grouped- and multi-query heads, head dims
 * that divide no vector width, causal and not; Q, K, V and O dense
 * (B, H, T, D), token-major views of (T, H, D) buffers (a KV cache's first
 * Tk positions) and a feature stride of 2. Elements around O must be left
 * as they were. Then one kernel for every length, and bad input. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/validate.h"
#include "check.h"
#include "engine/engine.h"
#include "runtime/reference.h"

static uint64_t g_rng = 99;
static float frand(void) {
  return (float)((double)(tlm_rng_next(&g_rng) >> 40) / (double)(1 << 24) * 2.0 - 1.0);
}

/* a (B, H, T, D) tensor inside a buffer of `n` floats: layout 0 dense,
 * 1 token-major (T, H, D) rows of a cache of `cap` >= T positions (B = 1
 * folded into the head stride), 2 dense with feature stride 2 */
static tlm_tensor make4(float *data, int64_t B, int64_t H, int64_t T, int64_t D, int layout,
                        int64_t cap) {
  tlm_tensor t = {TLM_F32, 4, {B, H, T, D}, {0}, data, TLM_DEVICE_CPU, 0};
  int64_t fs = layout == 2 ? 2 : 1;
  if (layout == 1) {
    int64_t s[4] = {cap * H * D, D, H * D, 1};
    memcpy(t.strides, s, sizeof s);
  } else {
    int64_t s[4] = {H * T * D * fs, T * D * fs, D * fs, fs};
    memcpy(t.strides, s, sizeof s);
  }
  return t;
}

static int64_t span4(const tlm_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < 4; i++) n += (t->shape[i] - 1) * t->strides[i];
  return n;
}

static void attention(tlm_runtime *rt, int *checked) {
  static const int64_t shapes[][8] = {
      /* B, Hq, Hkv, Tq, Tk, D, Dv, causal */
      {1, 1, 1, 1, 1, 4, 4, 0},     {1, 2, 2, 1, 7, 16, 16, 1},   {2, 4, 2, 5, 5, 8, 8, 1},
      {1, 3, 1, 3, 11, 20, 12, 1},  {1, 12, 12, 1, 300, 64, 64, 1}, {1, 6, 3, 17, 40, 64, 64, 1},
      {2, 2, 2, 9, 9, 3, 5, 0},     {1, 8, 2, 33, 33, 128, 128, 1}, {1, 4, 4, 7, 130, 24, 40, 0},
      /* decode steps of grouped heads: a tile spans the group's heads */
      {1, 8, 2, 1, 77, 64, 64, 1},  {2, 6, 2, 1, 19, 24, 24, 1},  {1, 12, 1, 2, 5, 16, 16, 1},
      /* prefills: tiles in L1 (16-64 rows), the last one partial or
       * crossing into the group's next head, odd head dims */
      {1, 3, 1, 23, 29, 20, 12, 1}, {2, 4, 2, 19, 50, 40, 24, 0}, {1, 2, 1, 40, 45, 3, 5, 1},
      {1, 2, 2, 70, 70, 17, 33, 1}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
    for (int layout = 0; layout < 3; layout++) {
      const int64_t *p = shapes[si];
      int64_t B = p[0], Hq = p[1], Hkv = p[2], Tq = p[3], Tk = p[4], D = p[5], Dv = p[6];
      if (layout == 1 && B > 1) continue; /* token-major: one sequence */
      int64_t cap = Tk + 3;
      float *bq = NULL, *bk = NULL, *bv = NULL, *bo = NULL, *ref = NULL;
      tlm_tensor Q, K, V, O;
      /* sizes first (a tensor's span), then the buffers, 8 floats of margin */
      Q = make4(NULL, B, Hq, Tq, D, layout, Tq);
      K = make4(NULL, B, Hkv, Tk, D, layout, cap);
      V = make4(NULL, B, Hkv, Tk, Dv, layout, cap);
      O = make4(NULL, B, Hq, Tq, Dv, layout, Tq);
      int64_t nq = span4(&Q) + 8, nk = span4(&K) + 8, nv = span4(&V) + 8, no = span4(&O) + 16;
      bq = malloc(sizeof(float) * (size_t)nq), bk = malloc(sizeof(float) * (size_t)nk);
      bv = malloc(sizeof(float) * (size_t)nv), bo = malloc(sizeof(float) * (size_t)no);
      ref = malloc(sizeof(float) * (size_t)no);
      for (int64_t i = 0; i < nq; i++) bq[i] = 2.0f * frand();
      for (int64_t i = 0; i < nk; i++) bk[i] = 2.0f * frand();
      for (int64_t i = 0; i < nv; i++) bv[i] = 3.0f * frand();
      Q.data = bq, K.data = bk, V.data = bv, O.data = bo + 8;
      tlm_op op = tlm_op_attention((int)p[7]);
      tlm_tensor in[3] = {Q, K, V};
      tlm_task task;
      tlm_attn_args args;
      char err[256];
      tlm_status st = tlm_validate_attention(&op, in, 3, &O, 1, &task, &args, err, sizeof err);
      CHECK(st == TLM_OK, "attention validate: %s", err);
      if (st == TLM_OK) {
        for (int64_t i = 0; i < no; i++) ref[i] = -7.0f;
        args.o = ref + 8;
        tlm_ref_attention(&task, &args);
        /* default, two random schedules, then random ones with each tile
         * in L1 the space offers */
        for (int rs = 0; rs < 6; rs++) {
          for (int64_t i = 0; i < no; i++) bo[i] = -7.0f;
          if (rs == 0) {
            st = tlm_run(rt, &op, in, 3, &O, 1);
            if (st) snprintf(err, sizeof err, "%s", tlm_last_error(rt));
          } else {
            tlm_space sp;
            tlm_space_init(&sp, &task, &rt->target);
            tlm_schedule sched;
            tlm_space_sample(&sp, &g_rng, &sched);
            if (rs >= 3) {
              int32_t c[TLM_MAX_CANDIDATES], want = 16 << (rs - 3), found = 0;
              int n = tlm_space_candidates(&sp, ATT_QBLOCK, sched.v, c);
              for (int i = 0; i < n; i++) found |= c[i] == want;
              if (!found) continue;
              sched.v[ATT_QBLOCK] = want;
              CHECK(tlm_space_accepts(&sp, &sched), "tile_q=%d not accepted", (int)want);
            }
            tlm_kernel *k;
            st = tlm_validate_attention(&op, in, 3, &O, 1, &task, &args, err, sizeof err);
            if (st == TLM_OK) st = tlm_engine_kernel(rt, &task, &sched, &k, err, sizeof err);
            if (st == TLM_OK) st = tlm_engine_exec(rt, k, &task, &args, err, sizeof err);
          }
          double worst = 0;
          for (int64_t i = 0; i < no && st == TLM_OK; i++) {
            double e = fabs((double)bo[i] - ref[i]) / (1.0 + fabs((double)ref[i]));
            if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
          }
          CHECK(st == TLM_OK && worst <= 2e-5,
                "attention b%lld hq%lld hkv%lld tq%lld tk%lld d%lld dv%lld causal %lld layout %d "
                "%s: %s err %g",
                (long long)B, (long long)Hq, (long long)Hkv, (long long)Tq, (long long)Tk,
                (long long)D, (long long)Dv, (long long)p[7], layout,
                rs >= 3 ? "tile in L1" : rs ? "random" : "default",
                st ? err : "", worst);
          (*checked)++;
        }
      }
      free(bq), free(bk), free(bv), free(bo), free(ref);
    }

  /* one kernel for every cache length (decode steps) */
  {
    int64_t H = 4, D = 32, cap = 200;
    float *kc = calloc((size_t)(cap * H * D), sizeof(float)), *vc = calloc((size_t)(cap * H * D), sizeof(float));
    float q[4 * 32], o[4 * 32];
    for (int64_t i = 0; i < cap * H * D; i++) kc[i] = frand(), vc[i] = frand();
    for (int i = 0; i < 4 * 32; i++) q[i] = frand();
    tlm_op op = tlm_op_attention(1);
    tlm_stats s0, s1;
    tlm_status st = TLM_OK;
    for (int64_t L = 1; L <= cap && st == TLM_OK; L += 37) {
      tlm_tensor in[3] = {make4(q, 1, H, 1, D, 1, 1), make4(kc, 1, H, L, D, 1, cap),
                          make4(vc, 1, H, L, D, 1, cap)};
      tlm_tensor O = make4(o, 1, H, 1, D, 1, 1);
      if (L == 1) tlm_get_stats(rt, &s0);
      st = tlm_run(rt, &op, in, 3, &O, 1);
    }
    tlm_get_stats(rt, &s1);
    CHECK(st == TLM_OK && s1.compiles - s0.compiles <= 1,
          "decode over growing caches compiled %llu kernels: %s",
          (unsigned long long)(s1.compiles - s0.compiles), tlm_last_error(rt));
    free(kc), free(vc);
  }

  /* bad input */
  float a[2 * 2 * 4 * 8], b2[2 * 2 * 4 * 8], c[2 * 2 * 4 * 8], d[2 * 2 * 4 * 8];
  tlm_tensor Q = make4(a, 1, 2, 4, 8, 0, 4), K = make4(b2, 1, 2, 4, 8, 0, 4);
  tlm_tensor V = make4(c, 1, 2, 4, 8, 0, 4), O = make4(d, 1, 2, 4, 8, 0, 4);
  tlm_op op = tlm_op_attention(1);
  tlm_tensor in[3] = {Q, K, V};
  CHECK(tlm_run(rt, &op, in, 2, &O, 1) == TLM_ERR_INVALID_ARGUMENT, "attention without V");
  tlm_tensor K3 = make4(b2, 1, 3, 2, 8, 0, 2), V3 = make4(c, 1, 3, 2, 8, 0, 2);
  tlm_tensor in3[3] = {Q, K3, V3};
  CHECK(tlm_run(rt, &op, in3, 3, &O, 1) == TLM_ERR_SHAPE_MISMATCH, "3 K/V heads for 2 query heads");
  tlm_tensor K2 = make4(b2, 1, 2, 2, 8, 0, 2), V2 = make4(c, 1, 2, 2, 8, 0, 2);
  tlm_tensor in2[3] = {Q, K2, V2};
  CHECK(tlm_run(rt, &op, in2, 3, &O, 1) == TLM_ERR_SHAPE_MISMATCH, "causal, 4 queries over 2 keys");
  tlm_tensor Kd = make4(b2, 1, 2, 4, 4, 0, 4), ind[3] = {Q, Kd, V};
  CHECK(tlm_run(rt, &op, ind, 3, &O, 1) == TLM_ERR_SHAPE_MISMATCH, "K's D differs from Q's");
  tlm_tensor Oq = make4(a, 1, 2, 4, 8, 0, 4);
  CHECK(tlm_run(rt, &op, in, 3, &Oq, 1) == TLM_ERR_ALIASING, "O over Q");
  tlm_tensor Q3 = {TLM_F32, 3, {2, 4, 8}, {32, 8, 1}, a, TLM_DEVICE_CPU, 0}, in33[3] = {Q3, K, V};
  CHECK(tlm_run(rt, &op, in33, 3, &O, 1) == TLM_ERR_INVALID_ARGUMENT, "3-dim Q");
  tlm_op bad = tlm_op_attention(2);
  CHECK(tlm_run(rt, &bad, in, 3, &O, 1) == TLM_ERR_INVALID_ARGUMENT, "causal 2");
  bad = tlm_op_attention(0);
  bad.u.attention.scale = NAN;
  CHECK(tlm_run(rt, &bad, in, 3, &O, 1) == TLM_ERR_INVALID_ARGUMENT, "NaN scale");
}

int main(void) {
  if (check_isa_unsupported()) return CHECK_SKIP;
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.cache_dir = "none";
  cfg.model_path = "none";
  cfg.num_threads = 2;
  tlm_runtime *rt;
  if (tlm_create(&cfg, &rt)) return 1;
  int checked = 0;
  attention(rt, &checked);
  printf("attention problems checked: %d\n", checked);
  tlm_destroy(rt);
  return check_report("test_attention");
}
