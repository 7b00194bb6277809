/* Determinism: the same task and schedule give byte-identical LLVM IR
 * (generated and optimized) across runtimes; the same seed gives the same
 * sampled schedule; the default rule is stable; and a schedule printed and
 * parsed back is the same schedule. */
#include <stdlib.h>
#include <string.h>

#include "api/validate.h"
#include "cache/key.h"
#include "check.h"
#include "engine/engine.h"
#include "train/problem.h"
#include "train/records.h"
#include "train/tasks.h"

static const char *k_shapes[] = {"128x768:768x768", "1x768:768x2304", "12x37x64:12x64x37",
                                 "7x13:13x31", "3x1x53:3x53x11"};

/* The validated task of a benchdnn matmul descriptor under epilogue epi;
 * its problem goes in *p (the caller frees it). 0, or -1 after a failed
 * CHECK. */
static int mm_task(const char *shape, tlm_matmul_desc epi, tlm_problem *p, tlm_task *task) {
  tlm_mm_desc d;
  char err[256] = "";
  int ok = tlm_mm_desc_parse(shape, &d, err, sizeof err) == 1 && tlm_problem_make(&d, &epi, 7, p) == 0;
  CHECK(ok, "%s: cannot build it: %s", shape, err);
  if (!ok) return -1;
  tlm_mm_args args;
  ok = tlm_validate_matmul(&p->op, p->in, p->n_in, &p->out, 1, task, &args, err, sizeof err) == 0;
  CHECK(ok, "%s: %s", shape, err);
  if (!ok) tlm_problem_free(p);
  return ok ? 0 : -1;
}

/* The rule's schedule of a benchdnn matmul (no epilogue) on target tg. */
static int rule_schedule(const char *shape, const tlm_target *tg, tlm_schedule *out) {
  tlm_problem p;
  tlm_task task;
  if (mm_task(shape, (tlm_matmul_desc){0}, &p, &task)) return -1;
  tlm_space sp;
  tlm_space_init(&sp, &task, tg);
  tlm_space_default(&sp, out);
  tlm_problem_free(&p);
  return 0;
}

int main(void) {
  tlm_runtime *r1, *r2;
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.cache_dir = "none"; /* measure compiles, never reuse them */
  cfg.num_threads = 1;
  if (tlm_create(&cfg, &r1) || tlm_create(&cfg, &r2)) return 1;
  for (size_t i = 0; i < sizeof k_shapes / sizeof k_shapes[0]; i++) {
    char err[256];
    tlm_matmul_desc epi = {0, 0, 1, TLM_ACT_GELU_TANH, 1};
    tlm_problem p;
    tlm_task task;
    if (mm_task(k_shapes[i], epi, &p, &task)) return check_report("test_determinism");
    tlm_space sp;
    tlm_space_init(&sp, &task, &r1->target);
    tlm_schedule def1, def2;
    tlm_space_default(&sp, &def1);
    tlm_space_default(&sp, &def2);
    CHECK(!memcmp(&def1, &def2, sizeof def1), "%s: default rule differs between calls", k_shapes[i]);
    CHECK(tlm_space_accepts(&sp, &def1), "%s: default schedule outside the space", k_shapes[i]);
    for (int s = 0; s < 4; s++) {
      uint64_t seed1 = 1000 + (uint64_t)s, seed2 = seed1;
      tlm_schedule a, b, parsed;
      tlm_space_sample(&sp, &seed1, &a);
      tlm_space_sample(&sp, &seed2, &b);
      CHECK(!memcmp(&a, &b, sizeof a), "%s: same seed, different schedules", k_shapes[i]);
      char txt[512];
      tlm_schedule_str(&sp, &a, txt, sizeof txt);
      CHECK(tlm_schedule_parse(&sp, txt, &parsed, err, sizeof err) == 0 &&
                !memcmp(&a, &parsed, sizeof a),
            "%s: print/parse round trip failed for '%s': %s", k_shapes[i], txt, err);
      for (int opt = 0; opt <= 1; opt++) {
        char *ir1 = NULL, *ir2 = NULL;
        CHECK(tlm_engine_ir(r1, &task, &a, opt, &ir1, err, sizeof err) == TLM_OK, "%s", err);
        CHECK(tlm_engine_ir(r2, &task, &a, opt, &ir2, err, sizeof err) == TLM_OK, "%s", err);
        CHECK(ir1 && ir2 && !strcmp(ir1, ir2), "%s [%s]: IR differs (optimized=%d)", k_shapes[i],
              txt, opt);
        free(ir1);
        free(ir2);
      }
    }
    tlm_problem_free(&p);
  }
  /* The rule blocks for the runtime's worker threads, not the host's CPUs:
   * GEMV on one thread of an 8-CPU host is one serial block of all of N
   * (a split for absent workers streamed B in strided stripes: 19 -> 27
   * GFLOPS on Zen 3 AVX2); on 8 threads it is shared among them. Plans
   * for different thread counts are keyed apart. */
  {
    tlm_problem p;
    tlm_task task;
    if (mm_task("1x768:768x768", (tlm_matmul_desc){0}, &p, &task)) return check_report("test_determinism");
    CHECK(r1->target.threads == 1, "a 1-thread runtime's target has %d threads", r1->target.threads);
    tlm_target one = r1->target, eight = r1->target;
    one.cores = 8, one.threads = 1;
    eight.cores = 8, eight.threads = 8;
    tlm_space s1, s8;
    tlm_space_init(&s1, &task, &one);
    tlm_space_init(&s8, &task, &eight);
    tlm_schedule d1, d8;
    tlm_space_default(&s1, &d1);
    tlm_space_default(&s8, &d8);
    CHECK(d1.v[MM_PARALLEL] == 0, "1 thread of 8 CPUs: GEMV rule is parallel (%d)", d1.v[MM_PARALLEL]);
    CHECK((int64_t)d1.v[MM_N3] * d1.v[MM_N2] >= 768, "1 thread: GEMV rule splits N (%d x %d)",
          d1.v[MM_N3], d1.v[MM_N2]);
    CHECK(d8.v[MM_PARALLEL] > 0, "8 threads: GEMV rule runs serially");
    tlm_key k1, k8;
    tlm_key_shape(&k1, &task, &one, 0);
    tlm_key_shape(&k8, &task, &eight, 0);
    CHECK(!tlm_key_equal(&k1, &k8), "plans for 1 and 8 threads share a key");
    tlm_problem_free(&p);
  }
  /* Rule version 8: several workers and all of M in one block (decode,
   * short prompts): N's level-1 blocks are grouped so that each worker
   * takes about one contiguous range (tile_n1), and its busiest worker
   * has no more blocks than with one-block chunks; one worker, or a
   * batch, keeps tile_n1 = 1. */
  {
    static const char *const shapes[] = {"7x768:768x3072", "32x1024:1024x4096", "13x768:768x768",
                                         "1x4096:4096x11008"};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
      for (int threads = 1; threads <= 4; threads *= 2) {
        tlm_target tg = r1->target;
        tg.threads = threads;
        tlm_schedule sc;
        if (rule_schedule(shapes[i], &tg, &sc)) return check_report("test_determinism");
        int64_t m_rows = atoll(shapes[i]);
        int64_t n_cols = atoll(strrchr(shapes[i], 'x') + 1);
        int64_t nb = (n_cols + (int64_t)sc.v[MM_N3] * sc.v[MM_N2] - 1) / ((int64_t)sc.v[MM_N3] * sc.v[MM_N2]);
        int one_m_block = m_rows <= (int64_t)sc.v[MM_M3] * sc.v[MM_M2];
        if (threads == 1 || !one_m_block || nb <= threads) {
          CHECK(sc.v[MM_N1] == 1, "%s, %d threads: tile_n1=%d", shapes[i], threads, sc.v[MM_N1]);
          continue;
        }
        int64_t n1 = sc.v[MM_N1], groups = (nb + n1 - 1) / n1;
        int64_t busiest = (groups + threads - 1) / threads * n1;
        if (busiest > nb) busiest = nb;
        if (threads == 2 && nb % 2 == 0)
          CHECK(n1 > 1, "%s, %d threads: N's %lld blocks handed out one by one", shapes[i], threads,
                (long long)nb);
        CHECK(busiest <= (nb + threads - 1) / threads,
              "%s, %d threads: busiest worker %lld of %lld blocks", shapes[i], threads,
              (long long)busiest, (long long)nb);
      }
  }
  /* Rule version 11: level-1 tiles are balanced by work, not only by block
   * count: with all of M in one block, no N block holds more than 5/4 of
   * a worker's share of N (2304 columns on two workers had been 1536 +
   * 768: 0.84x of 512-column blocks on the Xeon) */
  {
    static const char *const shapes[] = {"32x768:768x2304", "200x768:768x2304", "5x768:768x2304",
                                         "32x1024:1024x4096", "7x768:768x3072"};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
      for (int isa = TLM_ISA_SSE; isa <= TLM_ISA_AVX512; isa++) {
        tlm_target tg = r1->target;
        if (isa > tg.isa) continue;
        tlm_target_restrict(&tg, (tlm_isa)isa);
        tg.threads = 2;
        tlm_schedule sc;
        if (rule_schedule(shapes[i], &tg, &sc)) return check_report("test_determinism");
        int64_t m_rows = atoll(shapes[i]);
        int64_t n_cols = atoll(strrchr(shapes[i], 'x') + 1);
        int64_t block = (int64_t)sc.v[MM_N3] * sc.v[MM_N2] * sc.v[MM_N1];
        if (block > n_cols) block = n_cols;
        if (m_rows <= (int64_t)sc.v[MM_M3] * sc.v[MM_M2] * sc.v[MM_M1])
          CHECK(4 * block <= 5 * n_cols / 2, "%s, %s: an N block of %lld of %lld columns on 2 workers",
                shapes[i], tlm_isa_name((tlm_isa)isa), (long long)block, (long long)n_cols);
      }
  }
  /* Packed B: the rule's M block does not depend on M beyond the L2 bound
   * (B packed once per block of up to mm_l3_m2 tiles), so 300 and 512 rows
   * run one kernel and each packs B once. */
  {
    tlm_schedule sch[2];
    const char *sh[2] = {"300x768:768x3072", "512x768:768x3072"};
    tlm_target tg = r1->target;
    tlm_target_restrict(&tg, TLM_ISA_AVX2 < tg.host_isa ? TLM_ISA_AVX2 : tg.host_isa);
    tg.l2_bytes = 512 * 1024, tg.l3_bytes = 32 << 20, tg.l3_sharing = 8;
    for (int i = 0; i < 2; i++) {
      if (rule_schedule(sh[i], &tg, &sch[i])) return check_report("test_determinism");
      if (sch[i].v[MM_PACK_B])
        CHECK((int64_t)sch[i].v[MM_M2] * sch[i].v[MM_M3] >= 512, "%s: B packed per block of %d rows",
              sh[i], sch[i].v[MM_M2] * sch[i].v[MM_M3]);
    }
    CHECK(!memcmp(&sch[0], &sch[1], sizeof sch[0]), "300 and 512 rows: different rule schedules");
  }
  /* Packed B (mm_rule_packs_b). Under AVX2 the rule's tile is 4 x 24 where
   * 24 columns divide N (3 vectors: a 96-byte row, not whole cache lines),
   * packed over more than two register tiles of rows whatever the
   * prefetcher; else 6 x 16 (one 64-byte line a row: past the prefetch reach
   * packed over more than one tile, else the lone-line test). With AVX-512's
   * 6 x 64 (256-byte rows), B rows further apart than the L1 stride
   * prefetcher's reach (tlm_target.pf_stride_bytes, Intel's 2 KiB) are
   * packed over more than two tiles when two pages or more apart and over
   * more than 8 between the reach and two pages; a target whose prefetcher
   * names no reach keeps the lone-line test (wide rows: never). A core
   * whose strided loads cross pages (Zen 5: TLM_PF_CROSS_PAGE, rule 20)
   * packs rows under two lines only over more than 16 tiles, or 4 where
   * the rows lie a whole number of pages apart. */
  for (int isa = TLM_ISA_AVX2; isa <= TLM_ISA_AVX512 && isa <= r1->target.host_isa; isa++) {
    tlm_target intel = r1->target, amd;
    tlm_target_restrict(&intel, (tlm_isa)isa);
    intel.pf_stride_bytes = 2048;
    amd = intel;
    amd.pf_stride_bytes = 0;
    tlm_target zen5 = amd;
    zen5.pf_stride_bytes = TLM_PF_CROSS_PAGE;
    struct pack_case {
      const char *shape;
      int intel, amd, n3, zen5;
    };
    static const struct pack_case k_avx2[] = {
        {"24x768:768x3072", 1, 1, 24, 1}, /* 6 tiles of 4 rows, 12 KiB apart */
        {"32x768:768x768", 1, 1, 24, 0},  /* 3 KiB rows */
        {"64x768:768x768", 1, 1, 24, 0},  /* 16 tiles */
        {"128x768:768x768", 1, 1, 24, 1}, /* 32 tiles */
        {"32x768:768x1024", 1, 1, 16, 1}, /* 4 KiB lone-line rows, 5 tiles of 6 */
        {"24x64:64x1024", 1, 1, 16, 0},   /* 4 tiles (B in L2: not streamed) */
        {"64x512:512x512", 1, 1, 16, 0},  /* 2 KiB rows: within the reach */
        {"8x768:768x3072", 0, 0, 24, 0}}; /* 2 tiles: never */
    static const struct pack_case k_avx512[] = {
        {"24x768:768x3072", 1, 0, 64, 0}, /* 12 KiB rows: past two pages */
        {"32x768:768x768", 0, 0, 64, 0},  /* 3 KiB rows, 6 tiles */
        {"128x768:768x768", 1, 0, 64, 0}, /* 22 tiles */
        {"32x768:768x1024", 0, 0, 64, 0}, /* 4 KiB rows */
        {"64x512:512x512", 0, 0, 64, 0},  /* 2 KiB rows: within the reach */
        {"12x768:768x3072", 0, 0, 64, 0}}; /* 2 tiles: never */
    const int avx2 = isa == TLM_ISA_AVX2;
    const struct pack_case *k = avx2 ? k_avx2 : k_avx512;
    size_t nk = avx2 ? sizeof k_avx2 / sizeof k_avx2[0] : sizeof k_avx512 / sizeof k_avx512[0];
    for (size_t i = 0; i < nk; i++) {
      const char *shape = k[i].shape;
      int wi = k[i].intel, wa = k[i].amd, want_n3 = k[i].n3, wz = k[i].zen5;
      tlm_schedule si, sa, sz;
      if (rule_schedule(shape, &intel, &si) || rule_schedule(shape, &amd, &sa) ||
          rule_schedule(shape, &zen5, &sz))
        return check_report("test_determinism");
      CHECK(si.v[MM_N3] == want_n3, "%s, %s: tile_n3=%d", shape, tlm_isa_name((tlm_isa)isa),
            si.v[MM_N3]);
      CHECK(si.v[MM_PACK_B] == wi, "%s, %s: pack_b=%d with a 2 KiB prefetch reach", shape,
            tlm_isa_name((tlm_isa)isa), si.v[MM_PACK_B]);
      CHECK(sa.v[MM_PACK_B] == wa, "%s, %s: pack_b=%d with no prefetch reach", shape,
            tlm_isa_name((tlm_isa)isa), sa.v[MM_PACK_B]);
      CHECK(sz.v[MM_PACK_B] == wz, "%s, %s: pack_b=%d with strides across pages", shape,
            tlm_isa_name((tlm_isa)isa), sz.v[MM_PACK_B]);
    }
  }
  /* Batched dot products (rule 21): a tile of 1 column x 2 batches where
   * all of B outlasts the L2 and L3 share of the target's cores (the Zen 5
   * VM's: 2 x (1 + 32 / 8) MiB), else 4 columns of one batch. */
  for (int isa = TLM_ISA_AVX2; isa <= TLM_ISA_AVX512 && isa <= r1->target.host_isa; isa++) {
    tlm_target tg = r1->target;
    tlm_target_restrict(&tg, (tlm_isa)isa);
    tg.cores = 2, tg.l2_bytes = 1 << 20, tg.l3_bytes = 32 << 20, tg.l3_sharing = 8;
    static const struct {
      const char *shape;
      int b3, n3;
    } k_dots[] = {
        {"--wtag=acb 16x1x256:16x256x2030", 2, 1}, /* GPT-J decode QK^T, 33 MB */
        {"--wtag=acb 16x4x256:16x256x2030", 2, 1}, /* 4 rows */
        {"--wtag=acb 16x1x64:16x64x4096", 2, 1},   /* 16.8 MB */
        {"--wtag=acb 16x1x64:16x64x2048", 1, 4},   /* 8.4 MB: from L3 */
        {"--wtag=acb 12x1x64:12x64x500", 1, 4},    /* GPT-2 decode, 1.5 MB */
        {"--wtag=ba 1x4096:4096x4096", 1, 4}};     /* no batch */
    for (size_t i = 0; i < sizeof k_dots / sizeof k_dots[0]; i++) {
      tlm_schedule sch;
      if (rule_schedule(k_dots[i].shape, &tg, &sch)) return check_report("test_determinism");
      CHECK(tlm_vec_is_k(sch.v[MM_VEC]) && sch.v[MM_B3] == k_dots[i].b3 &&
                sch.v[MM_N3] == k_dots[i].n3,
            "%s, %s: vec %d tile_b3=%d tile_n3=%d", k_dots[i].shape, tlm_isa_name((tlm_isa)isa),
            sch.v[MM_VEC], sch.v[MM_B3], sch.v[MM_N3]);
    }
  }
  /* A streamed B over batches (rule 21), attention's P V at decode: the
   * long K block where N is one or two tiles (AVX-512's 128 columns), the
   * short one without batches or over wider N (AVX2's 64-column tiles). */
  if (r1->target.host_isa >= TLM_ISA_AVX2) {
    static const struct {
      const char *shape;
      int isa, k1;
    } k_pv[] = {{"16x1x2030:16x2030x256", TLM_ISA_AVX512, 256}, {"1x2030:2030x256", TLM_ISA_AVX512, 16},
                {"16x1x2030:16x2030x1024", TLM_ISA_AVX512, 16}, {"16x1x2030:16x2030x256", TLM_ISA_AVX2, 16}};
    for (size_t i = 0; i < sizeof k_pv / sizeof k_pv[0]; i++) {
      if (k_pv[i].isa > r1->target.host_isa) continue;
      tlm_target tg = r1->target;
      tlm_target_restrict(&tg, (tlm_isa)k_pv[i].isa);
      tg.threads = 1, tg.cores = 2, tg.l2_bytes = 1 << 20, tg.l3_bytes = 32 << 20, tg.l3_sharing = 8;
      tlm_schedule sch;
      if (rule_schedule(k_pv[i].shape, &tg, &sch)) return check_report("test_determinism");
      CHECK(sch.v[MM_K1] == k_pv[i].k1, "%s, %s: tile_k1=%d (tile_n3=%d)", k_pv[i].shape,
            tlm_isa_name((tlm_isa)k_pv[i].isa), sch.v[MM_K1], sch.v[MM_N3]);
    }
  }
  /* Rule 22: where vectors are double-pumped (Zen 4's AVX-512), a B that
   * is not constant takes the register tile rows over M with the fewest
   * cycles by the target's FMA and load issue (tlm_reg_rows_timed); the
   * task moves to version 22 only on the targets where its rows changed */
  {
    tlm_target z4, z5;
    CHECK(tlm_target_from_hw("znver4; avx512+vnni 16 lanes, 32 regs, FMA 2x256 lat 4 (4 chains), 2 "
                             "cores, L1 32K L2 1024K L3 32768K; host avx512; AMD EPYC (family 25 "
                             "model 17)",
                             &z4) == 0 &&
              tlm_target_from_hw("znver5; avx512+vnni 16 lanes, 32 regs, FMA 2x512 lat 4 (8 "
                                 "chains), 2 cores, L1 48K L2 1024K L3 32768K; host avx512; AMD "
                                 "EPYC (family 26 model 2)",
                                 &z5) == 0,
          "the Zen 4 and Zen 5 descriptions");
    /* 6 x 4 vectors: 16 rows as 4 x 4 (64 FMA slots, not 72 as 6 + 6 + 4),
     * 7 as 4 + 4 (a lone row of 4 vectors reloads B at every FMA), a long
     * extent keeps 6 */
    CHECK(tlm_reg_rows_timed(&z4, 16, 4, 6) == 4, "16 rows: %d", tlm_reg_rows_timed(&z4, 16, 4, 6));
    CHECK(tlm_reg_rows_timed(&z4, 7, 4, 6) == 4, "7 rows: %d", tlm_reg_rows_timed(&z4, 7, 4, 6));
    CHECK(tlm_reg_rows_timed(&z4, 1200, 4, 6) == 6 && tlm_reg_rows_timed(&z4, 6, 4, 6) == 6,
          "1200 rows: %d", tlm_reg_rows_timed(&z4, 1200, 4, 6));
    tlm_schedule sch;
    if (rule_schedule("16x4096:4096x11008", &z4, &sch)) return check_report("test_determinism");
    CHECK(sch.v[MM_M3] == 4, "16x4096:4096x11008 on the Zen 4: tile_m3=%d", sch.v[MM_M3]);
    if (rule_schedule("16x4096:4096x11008", &z5, &sch)) return check_report("test_determinism");
    CHECK(sch.v[MM_M3] == 6, "16x4096:4096x11008 on the Zen 5: tile_m3=%d", sch.v[MM_M3]);
    static const struct {
      const char *shape;
      int v22;
    } k_v22[] = {{"16x4096:4096x11008", 1}, {"1200x768:768x768", 0}, {"12x768:768x768", 0}};
    for (size_t i = 0; i < sizeof k_v22 / sizeof k_v22[0]; i++) {
      tlm_problem p;
      tlm_task task;
      if (mm_task(k_v22[i].shape, (tlm_matmul_desc){0}, &p, &task)) return check_report("test_determinism");
      int v = tlm_rule_family_version(&task, &z4);
      CHECK((v == 22) == k_v22[i].v22, "%s on the Zen 4: rule version %d", k_v22[i].shape, v);
      /* pipes as wide as the vectors (Zen 5's AVX-512): rule 21's rows */
      CHECK(tlm_rule_family_version(&task, &z5) < 22, "%s on the Zen 5: version 22", k_v22[i].shape);
      task.u.mm.b_const = 1; /* one tile for every M: unchanged by rule 22 (rule 24's M split
                              * moves every unbatched constant B of more than one row to 24) */
      v = tlm_rule_family_version(&task, &z4);
      CHECK(v == 24, "%s, constant B: version %d", k_v22[i].shape, v);
      tlm_problem_free(&p);
    }
    /* convolutions' tile rows too: 49 pixels of a 1x1 NHWC layer as 5-row
     * tiles on the Zen 4 (10 x 5 slots against 9 x 6 and a tail), 6 on the
     * Zen 5; a depthwise layer's rows come from the register file alone
     * (its version is rule 23's on these 2-worker targets, below 22 with
     * one worker) */
    static const struct {
      const char *spec;
      int rows4, rows5, v22;
    } k_cv[] = {
        {"conv:g1mb1_ic2048ih7iw7_oc512oh7ow7_kh1kw1_sh1sw1_ph0pw0_dh0dw0 nhwc bias1 bn0 act1 res0", 5, 6, 1},
        {"conv:g1mb1_ic64ih56iw56_oc64oh56ow56_kh3kw3_sh1sw1_ph1pw1_dh0dw0 nhwc bias1 bn0 act1 res0", 6, 6, 0},
        {"conv:g32mb1_ic32ih112iw112_oc32oh112ow112_kh3kw3_sh1sw1_ph1pw1_dh0dw0 nhwc bias1 bn0 act1 res0",
         -1, -1, 0}};
    tlm_target z4one = z4;
    z4one.threads = 1;
    for (size_t i = 0; i < sizeof k_cv / sizeof k_cv[0]; i++) {
      tlm_task_spec spec;
      tlm_task task;
      CHECK(tlm_task_spec_parse(k_cv[i].spec, &spec) == 0 && tlm_task_spec_task(&spec, &task) == 0,
            "%s: no task", k_cv[i].spec);
      tlm_space sp;
      tlm_schedule a, b;
      tlm_space_init(&sp, &task, &z4);
      tlm_space_default(&sp, &a);
      tlm_space_init(&sp, &task, &z5);
      tlm_space_default(&sp, &b);
      if (k_cv[i].rows4 > 0)
        CHECK(a.v[CV_ROWS] == k_cv[i].rows4 && b.v[CV_ROWS] == k_cv[i].rows5,
              "%s: tile_rows %d (Zen 4), %d (Zen 5)", k_cv[i].spec, a.v[CV_ROWS], b.v[CV_ROWS]);
      int v4 = tlm_rule_family_version(&task, &z4), v5 = tlm_rule_family_version(&task, &z5);
      if (k_cv[i].rows4 < 0) { /* depthwise */
        int v1 = tlm_rule_family_version(&task, &z4one);
        CHECK(v4 == 23 && v5 == 23 && v1 < 22, "%s: rule version %d (Zen 4), %d (Zen 5), %d (one worker)",
              k_cv[i].spec, v4, v5, v1);
        continue;
      }
      CHECK((v4 == 22) == k_cv[i].v22 && v5 < 22, "%s: rule version %d (Zen 4), %d (Zen 5)",
            k_cv[i].spec, v4, v5);
    }
  }
  /* Small M shares one kernel too: prompt lengths 13 and 42 of one layer
   * get one rule schedule (a block sized to each M compiled a kernel per
   * prompt length: 49 instead of 35 kernels in 200 serving requests).
   * Serving's weights are constant (packed ahead); a B that is not, beyond
   * L2, is streamed up to 16 rows (rule 14), so there 17 and 42 share. */
  {
    tlm_schedule sch[2];
    const char *sh[2] = {"13x768:768x2304", "42x768:768x2304"};
    for (int i = 0; i < 2; i++) {
      tlm_problem p;
      tlm_task task;
      if (mm_task(sh[i], (tlm_matmul_desc){0}, &p, &task)) return check_report("test_determinism");
      task.u.mm.b_const = 1; /* as tlm_run makes it for a declared constant */
      tlm_space sp;
      tlm_space_init(&sp, &task, &r1->target);
      tlm_space_default(&sp, &sch[i]);
      tlm_problem_free(&p);
    }
    CHECK(!memcmp(&sch[0], &sch[1], sizeof sch[0]),
          "13 and 42 rows, constant B: different rule schedules");
    sh[0] = "17x768:768x2304";
    for (int i = 0; i < 2; i++)
      if (rule_schedule(sh[i], &r1->target, &sch[i])) return check_report("test_determinism");
    CHECK(!memcmp(&sch[0], &sch[1], sizeof sch[0]), "17 and 42 rows: different rule schedules");
  }
  /* Constant B (tlm_constant_add) is packed once, so every schedule that
   * can pack it does, from a matrix-vector product up; the shape keys of
   * constant and plain B differ, the kernel keys of one schedule do not. */
  {
    const char *sh[3] = {"1x768:768x768", "12x768:768x2304", "196x1024:1024x256"};
    for (int i = 0; i < 3; i++) {
      tlm_problem p;
      tlm_task task;
      if (mm_task(sh[i], (tlm_matmul_desc){0}, &p, &task)) return check_report("test_determinism");
      tlm_task ct = task;
      ct.u.mm.b_const = 1;
      tlm_space sp, cs;
      tlm_space_init(&sp, &task, &r1->target);
      tlm_space_init(&cs, &ct, &r1->target);
      tlm_schedule plain, cst;
      tlm_space_default(&sp, &plain);
      tlm_space_default(&cs, &cst);
      if (!tlm_vec_is_k(cst.v[MM_VEC]))
        CHECK(cst.v[MM_PACK_B] == 1, "%s: constant B not packed by the rule", sh[i]);
      CHECK(tlm_space_accepts(&cs, &cst), "%s: constant-B rule schedule rejected", sh[i]);
      tlm_key a, b;
      tlm_key_shape(&a, &task, &r1->target, 0);
      tlm_key_shape(&b, &ct, &r1->target, 0);
      CHECK(!tlm_key_equal(&a, &b), "%s: constant and plain B share a shape key", sh[i]);
      tlm_key_schedule(&a, &task, &r1->target, &cst);
      tlm_key_schedule(&b, &ct, &r1->target, &cst);
      CHECK(tlm_key_equal(&a, &b), "%s: constant B keys its kernel apart", sh[i]);
      tlm_problem_free(&p);
    }
  }
  /* B in declared memory is a constant-B task only when its copy can be
   * made: with no budget it stays plain (else its packed schedule would
   * pack B on every call) */
  {
    tlm_problem p;
    tlm_task task;
    tlm_mm_args args;
    char err[256];
    tlm_config c0 = cfg;
    tlm_runtime *budget, *none;
    c0.prepack_bytes = 0;
    if (mm_task("12x768:768x2304", (tlm_matmul_desc){0}, &p, &task) == 0 &&
        tlm_validate_matmul(&p.op, p.in, p.n_in, &p.out, 1, &task, &args, err, sizeof err) == 0 &&
        tlm_create(&cfg, &budget) == TLM_OK && tlm_create(&c0, &none) == TLM_OK) {
      size_t bytes = sizeof(float) * 768 * 2304;
      CHECK(tlm_constant_add(budget, p.in[1].data, bytes) == TLM_OK, "declare");
      CHECK(tlm_constant_add(none, p.in[1].data, bytes) == TLM_OK, "declare, no budget");
      CHECK(tlm_prepack_b_constant(budget, &task, &args) == 1, "declared B is not constant");
      CHECK(tlm_prepack_b_constant(none, &task, &args) == 0,
            "declared B with no budget for its copy is a constant-B task");
      tlm_destroy(budget);
      tlm_destroy(none);
      tlm_problem_free(&p);
    }
  }
  tlm_destroy(r1);
  tlm_destroy(r2);
  return check_report("test_determinism");
}
