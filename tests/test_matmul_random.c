/* Reference check of random schedules (and the default rule through the
 * public tlm_run) over shapes from ../shared/workloads/benchdnn/matmul
 * (shapes_2d, BERT, GPT-J; large dims reduced so the double-precision
 * reference stays fast, keeping odd residues) plus extents of 1, primes and
 * non-multiples of 16, with transposes, broadcast batches and every
 * epilogue. Usage: test_matmul_random [SHARED_DIR] [SCHEDULES_PER_SHAPE] */
#include <stdlib.h>
#include <string.h>

#include "api/validate.h"
#include "cache/key.h"
#include "check.h"
#include "engine/engine.h"
#include "runtime/family.h"
#include "runtime/loopnest.h"
#include "train/problem.h"

#define MAX_SHAPES 256

static const char *k_builtin[] = {
    "1x1:1x1",         "1x17:17x1",       "2x3:3x5",          "7x13:13x31",
    "31x37:37x41",     "17x1:1x19",       "97x101:101x103",   "1x768:768x33",
    "15x15:15x15",     "16x16:16x16",     "33x65:65x129",     "127x3:3x47",
    "5x200:200x7",     "61x255:255x17",   "3x1x53:3x53x11",   "2x3x9x5:1x3x5x13",
    "4x7x19:19x23",    "6x1x29:6x29x3",   "2x2x2x3x4:1x2x4x5", "1x1x67:1x67x1",
    "13x160:160x160",  "160x13:13x160",   "43x97:97x89",      "8x8:8x8",
    "9x129:129x33",    "1x3:3x2048",      "2x5x1x41:2x5x41x43", "3x3x3:3x3x3",
};

static int load_shapes(const char *dir, tlm_mm_desc *out, int max) {
  int n = tlm_mm_desc_load_shared(dir, 14, out, max);
  /* small dims kept, large ones folded into [97, 158) (odd stays odd),
   * at most 6 batches in all */
  for (int k = 0; k < n; k++) tlm_mm_desc_shrink(&out[k], 160, 97, 61, 6);
  for (size_t i = 0; i < sizeof k_builtin / sizeof k_builtin[0] && n < max; i++) {
    char err[256];
    if (tlm_mm_desc_parse(k_builtin[i], &out[n], err, sizeof err) == 1) n++;
  }
  return n;
}

/* A kernel compiled for one shape run on other M, N and K of its family
 * (the same static parts: what an asynchronous first call does with a
 * sibling whose schedule the new shape's space would not offer, engine.c
 * nearest_sibling): extents from 1 and primes to past the tiles. Returns 1
 * when it ran (0: the redrawn shape fell into another static class). */
static int cross_extents(tlm_runtime *rt, const tlm_kernel *k, const tlm_task *t0,
                         const tlm_mm_desc *d0, const tlm_matmul_desc *epi, uint64_t *rng,
                         const char *ss) {
  static const int64_t ext[] = {1, 2, 3, 5, 7, 13, 16, 17, 31, 64, 97, 130, 257, 300};
  const int n_ext = (int)(sizeof ext / sizeof ext[0]);
  tlm_mm_desc d = *d0;
  uint64_t x = tlm_rng_next(rng);
  int64_t M = ext[x % (uint64_t)n_ext], N = ext[(x >> 8) % (uint64_t)n_ext];
  int64_t K = ext[(x >> 16) % (uint64_t)n_ext];
  d.a[d.nda - 2] = M, d.a[d.nda - 1] = K, d.b[d.ndb - 2] = K, d.b[d.ndb - 1] = N;
  tlm_problem p;
  if (tlm_problem_make(&d, epi, x, &p)) return 0;
  tlm_task task;
  tlm_mm_args args;
  char err[512], ds[128];
  int ran = 0;
  if (tlm_validate_matmul(&p.op, p.in, p.n_in, &p.out, 1, &task, &args, err, sizeof err) ==
      TLM_OK) {
    if (t0->u.mm.has_residual == 2 && task.u.mm.has_residual) {
      task.u.mm.has_residual = 2;
      p.residual_before_act = 1;
    }
    tlm_schedule none;
    memset(&none, 0, sizeof none);
    tlm_key a, b;
    tlm_key_schedule(&a, t0, &rt->target, &none);
    tlm_key_schedule(&b, &task, &rt->target, &none);
    if (tlm_key_equal(&a, &b)) {
      memset(p.out.data, 0xff, tlm_tensor_span_bytes(&p.out)); /* NaN: every element written */
      tlm_status st = tlm_engine_exec(rt, k, &task, &args, err, sizeof err);
      double e = st == TLM_OK ? tlm_problem_check(&p) : -1;
      tlm_mm_desc_str(&d, ds, sizeof ds);
      CHECK(e >= 0 && e <= tlm_problem_tolerance(K), "%s on a kernel of another shape [%s]: "
            "error %g", ds, ss, e);
      ran = 1;
    }
  }
  tlm_problem_free(&p);
  return ran;
}

/* The task and kernel arguments of shape `shape` (random operands from
 * `seed`, bias when `bias`) with p's buffers, and the space of the host's
 * target at `workers` threads; 0, or -1 (p freed) when it cannot be made */
static int rule_case(tlm_runtime *rt, const char *shape, uint64_t seed, int bias, int workers,
                     tlm_problem *p, tlm_task *task, tlm_mm_args *args, tlm_space *sp) {
  tlm_mm_desc d;
  char err[512];
  if (tlm_mm_desc_parse(shape, &d, err, sizeof err) != 1) {
    CHECK(0, "%s: %s", shape, err);
    return -1;
  }
  tlm_matmul_desc epi = {0, 0, bias, TLM_ACT_NONE, 0};
  if (tlm_problem_make(&d, &epi, seed, p)) return -1;
  if (tlm_validate_matmul(&p->op, p->in, p->n_in, &p->out, 1, task, args, err, sizeof err)) {
    CHECK(0, "%s: %s", shape, err);
    tlm_problem_free(p);
    return -1;
  }
  tlm_target tg = rt->target;
  tg.threads = workers;
  tlm_space_init(sp, task, &tg);
  return 0;
}

/* the rule's (or any) schedule compiled, run on p's operands and checked
 * against the reference */
static void check_kernel(tlm_runtime *rt, const char *what, const tlm_task *task,
                         const tlm_schedule *sched, tlm_mm_args *args, tlm_problem *p,
                         const char *ss) {
  char err[256];
  tlm_kernel *k;
  tlm_status st = tlm_engine_kernel(rt, task, sched, &k, err, sizeof err);
  if (st == TLM_OK) st = tlm_engine_exec(rt, k, task, args, err, sizeof err);
  double e = st == TLM_OK ? tlm_problem_check(p) : -1;
  CHECK(e >= 0 && e <= tlm_problem_tolerance(task->u.mm.K), "%s [%s]: %s, error %g", what, ss,
        st == TLM_OK ? "ran" : err, e);
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : NULL;
  if (check_isa_unsupported()) return CHECK_SKIP;
  int per_shape = argc > 2 ? atoi(argv[2]) : 10;
  static tlm_mm_desc shapes[MAX_SHAPES];
  int nshapes = load_shapes(dir, shapes, MAX_SHAPES);
  CHECK(nshapes >= 50, "only %d shapes", nshapes);
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.cache_dir = "none"; /* measure compiles, never reuse them */
  cfg.num_threads = 2;
  tlm_runtime *rt;
  if (tlm_create(&cfg, &rt)) {
    fprintf(stderr, "tlm_create: %s\n", tlm_last_error(NULL));
    return 1;
  }
  uint64_t rng = 12345;
  int schedules = 0, epilogues_seen = 0, prepacked = 0, crossed = 0, preact = 0;
  /* a sample of the files' shapes under TLM_TEST_STRIDE; the built-in
   * odd shapes (the last ones) always */
  const int stride = check_sample_stride();
  const int from_files = nshapes - (int)(sizeof k_builtin / sizeof k_builtin[0]);
  for (int s = 0; s < nshapes; s++) {
    if (s < from_files && s % stride) continue;
    for (int r = 0; r <= per_shape; r++) {
      tlm_mm_desc d = shapes[s];
      tlm_matmul_desc epi;
      uint64_t x = tlm_rng_next(&rng);
      tlm_mm_random_variant(x, &epi, &d);
      epilogues_seen |= 1 << (epi.has_bias + 2 * epi.has_residual + 4 * (int)epi.activation);
      tlm_problem p;
      if (tlm_problem_make(&d, &epi, x, &p)) {
        CHECK(0, "cannot build problem %d", s);
        continue;
      }
      char ds[128], ss[512], err[512];
      tlm_mm_desc_str(&d, ds, sizeof ds);
      int64_t K = d.a[d.nda - 1];
      if (r == per_shape) {
        /* the default rule through the public API, with B declared
         * constant every other shape: rule kernels are shared across N and
         * K, so B packed ahead must follow the run-time extents */
        int constant = s % 2 == 1;
        if (constant)
          CHECK(tlm_constant_add(rt, p.in[1].data, tlm_tensor_span_bytes(&p.in[1])) == TLM_OK,
                "constant_add: %s", tlm_last_error(rt));
        tlm_status st = tlm_run(rt, &p.op, p.in, p.n_in, &p.out, 1);
        CHECK(st == TLM_OK, "%s default: %s", ds, tlm_last_error(rt));
        double e = st == TLM_OK ? tlm_problem_check(&p) : -1;
        CHECK(e >= 0 && e <= tlm_problem_tolerance(K), "%s default%s: error %g", ds,
              constant ? " (B constant)" : "", e);
        if (constant) CHECK(tlm_constant_remove(rt, p.in[1].data) == TLM_OK, "constant_remove");
      } else {
        tlm_task task;
        tlm_mm_args args;
        tlm_status st = tlm_validate_matmul(&p.op, p.in, p.n_in, &p.out, 1, &task, &args, err,
                                            sizeof err);
        CHECK(st == TLM_OK, "%s: validate: %s", ds, err);
        /* every other residual with an activation in a convolution's order
         * (the residual inside the activation: conv-as-matmul's epilogue) */
        if (st == TLM_OK && task.u.mm.has_residual && task.u.mm.act != TLM_ACT_NONE && (x >> 40 & 1)) {
          task.u.mm.has_residual = 2;
          p.residual_before_act = 1;
          preact++;
        }
        if (st == TLM_OK) {
          tlm_space space;
          tlm_space_init(&space, &task, &rt->target);
          tlm_schedule sched;
          tlm_space_sample(&space, &rng, &sched);
          tlm_schedule_str(&space, &sched, ss, sizeof ss);
          CHECK(tlm_space_accepts(&space, &sched), "%s: sampled schedule rejected: %s", ds, ss);
          /* a parallel schedule shares at least min(cores, the most level-0
           * blocks its register tile allows) among the threads: neither its
           * level-2 nor its level-1 tiles leave a core idle */
          if (sched.v[MM_PARALLEL] > 0) {
            tlm_schedule most = sched;
            most.v[MM_N1] = most.v[MM_M1] = most.v[MM_B1] = 1;
            most.v[MM_N2] = most.v[MM_M2] = most.v[MM_B2] = 1;
            most.v[MM_PARALLEL] = 3;
            ln_nest nest, nest_most;
            if (!ln_lower_matmul(&task, &sched, &nest) && !ln_lower_matmul(&task, &most, &nest_most)) {
              int64_t got = ln_parallel_count(&nest, &task, rt->nthreads);
              int64_t all = ln_parallel_count(&nest_most, &task, rt->nthreads);
              int64_t want = all < rt->target.cores ? all : rt->target.cores;
              CHECK(got >= want, "%s [%s]: %lld parallel blocks, %lld possible", ds, ss,
                    (long long)got, (long long)all);
            }
          }
          tlm_kernel *k;
          st = tlm_engine_kernel(rt, &task, &sched, &k, err, sizeof err);
          CHECK(st == TLM_OK, "%s [%s]: compile: %s", ds, ss, err);
          if (st == TLM_OK) {
            st = tlm_engine_exec(rt, k, &task, &args, err, sizeof err);
            double e = tlm_problem_check(&p);
            CHECK(st == TLM_OK && e >= 0 && e <= tlm_problem_tolerance(K),
                  "%s tA%d tB%d bias%d act%d res%d [%s]: error %g", ds, d.transpose_a,
                  d.transpose_b, epi.has_bias, (int)epi.activation, epi.has_residual, ss, e);
            schedules++;
            if (st == TLM_OK) crossed += cross_extents(rt, k, &task, &d, &epi, &rng, ss);
            if (k->scratch_bytes > 0 && st == TLM_OK) {
              /* B declared constant: the same kernel reads B packed ahead */
              size_t bbytes = tlm_tensor_span_bytes(&p.in[1]), cbytes = tlm_tensor_span_bytes(&p.out);
              tlm_stats before, after;
              tlm_get_stats(rt, &before);
              CHECK(tlm_constant_add(rt, p.in[1].data, bbytes) == TLM_OK, "constant_add: %s",
                    tlm_last_error(rt));
              memset(p.out.data, 0xff, cbytes); /* NaN: every element must be written */
              st = tlm_engine_exec(rt, k, &task, &args, err, sizeof err);
              e = tlm_problem_check(&p);
              tlm_get_stats(rt, &after);
              CHECK(st == TLM_OK && e >= 0 && e <= tlm_problem_tolerance(K),
                    "%s tA%d tB%d prepacked B [%s]: error %g", ds, d.transpose_a, d.transpose_b,
                    ss, e);
              CHECK(after.prepacks == before.prepacks + 1 && after.prepacked_bytes > 0,
                    "%s [%s]: B was not packed ahead", ds, ss);
              CHECK(tlm_constant_remove(rt, p.in[1].data) == TLM_OK, "constant_remove");
              tlm_get_stats(rt, &after);
              CHECK(after.prepacked_bytes == 0, "copies kept after remove");
              prepacked++;
            }
          }
        }
      }
      tlm_problem_free(&p);
    }
  }
  /* B packed ahead for shapes that share one rule kernel across K and N
   * (ResNet's res5 1x1 and 3x3-as-im2col products), K past one K block, N
   * and M tails, a batched B */
  static const char *shared_kernel[] = {"49x1024:1024x512", "49x4608:4608x512",
                                        "50x1000:1000x300", "7x520:520x17",
                                        "3x19x300:3x300x41"};
  for (size_t i = 0; i < sizeof shared_kernel / sizeof shared_kernel[0]; i++) {
    tlm_mm_desc d;
    char err[256];
    tlm_mm_desc_parse(shared_kernel[i], &d, err, sizeof err);
    tlm_matmul_desc epi = {0, 0, 1, TLM_ACT_NONE, 0};
    tlm_problem p;
    if (tlm_problem_make(&d, &epi, 99 + i, &p)) continue;
    CHECK(tlm_constant_add(rt, p.in[1].data, tlm_tensor_span_bytes(&p.in[1])) == TLM_OK, "constant_add");
    for (int rep = 0; rep < 2; rep++) { /* packs, then reuses the copy */
      memset(p.out.data, 0xff, tlm_tensor_span_bytes(&p.out));
      tlm_status st = tlm_run(rt, &p.op, p.in, p.n_in, &p.out, 1);
      double e = st == TLM_OK ? tlm_problem_check(&p) : -1;
      CHECK(e >= 0 && e <= tlm_problem_tolerance(d.a[d.nda - 1]), "%s B constant, run %d: error %g",
            shared_kernel[i], rep, e);
    }
    CHECK(tlm_constant_remove(rt, p.in[1].data) == TLM_OK, "constant_remove");
    tlm_problem_free(&p);
  }
  /* a constant B's tile of half the rows for M's tail (loopnest.c
   * tail_m): the rule's kernel for the constant B, run at M from 1 to past
   * two tiles and at a few larger M (tails of every length), B packed by
   * the kernel and packed ahead, with a bias, against the reference */
  {
    static const char *tall[] = {"48x300:300x130", "60x64:64x64", "30x520:520x17"};
    static const int64_t rows[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 25, 49, 97};
    int halved = 0;
    for (size_t i = 0; i < sizeof tall / sizeof tall[0]; i++) {
      char ss[512], err[256];
      tlm_problem p;
      tlm_task task;
      tlm_mm_args args;
      tlm_space sp;
      if (rule_case(rt, tall[i], 91 + i, 1, 1, &p, &task, &args, &sp)) continue;
      tlm_problem_free(&p);
      task.u.mm.b_const = 1;
      tlm_target tg = rt->target;
      tg.threads = 1;
      tlm_space_init(&sp, &task, &tg);
      tlm_schedule sched;
      tlm_space_default(&sp, &sched);
      tlm_schedule_str(&sp, &sched, ss, sizeof ss);
      ln_nest nest;
      int tail = -1;
      if (!ln_lower_matmul(&task, &sched, &nest))
        for (int j = 0; j < nest.nnodes; j++)
          if (nest.nodes[j].kind == LN_TILE) tail = nest.nodes[j].tail_m;
      const int32_t *v = sched.v;
      int want = !tlm_vec_is_k(v[MM_VEC]) && v[MM_B3] == 1 && v[MM_M3] >= 4 ? (v[MM_M3] + 1) / 2 : 0;
      CHECK(tail == want, "%s, B constant: tail_m %d, want %d [%s]", tall[i], tail, want, ss);
      halved += want > 0;
      tlm_kernel *k;
      if (tlm_engine_kernel(rt, &task, &sched, &k, err, sizeof err) != TLM_OK) {
        CHECK(0, "%s, B constant [%s]: compile: %s", tall[i], ss, err);
        continue;
      }
      for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
        for (int ahead = 0; ahead <= 1; ahead++) {
          tlm_mm_desc d;
          tlm_mm_desc_parse(tall[i], &d, err, sizeof err);
          d.a[d.nda - 2] = rows[r];
          tlm_matmul_desc epi = {0, 0, 1, TLM_ACT_NONE, 0};
          tlm_problem q;
          tlm_task qt;
          tlm_mm_args qa;
          if (tlm_problem_make(&d, &epi, 300 + r, &q)) continue;
          if (tlm_validate_matmul(&q.op, q.in, q.n_in, &q.out, 1, &qt, &qa, err, sizeof err) ==
              TLM_OK) {
            qt.u.mm.b_const = 1;
            if (ahead)
              CHECK(tlm_constant_add(rt, q.in[1].data, tlm_tensor_span_bytes(&q.in[1])) == TLM_OK,
                    "constant_add: %s", tlm_last_error(rt));
            memset(q.out.data, 0xff, tlm_tensor_span_bytes(&q.out)); /* NaN: every row written */
            tlm_status st = tlm_engine_exec(rt, k, &qt, &qa, err, sizeof err);
            double e = st == TLM_OK ? tlm_problem_check(&q) : -1;
            CHECK(e >= 0 && e <= tlm_problem_tolerance(qt.u.mm.K),
                  "%s at M = %lld, B constant%s [%s]: %s, error %g", tall[i], (long long)rows[r],
                  ahead ? ", packed ahead" : "", ss, st == TLM_OK ? "ran" : err, e);
            if (ahead) CHECK(tlm_constant_remove(rt, q.in[1].data) == TLM_OK, "constant_remove");
          } else {
            CHECK(0, "%s at M = %lld: %s", tall[i], (long long)rows[r], err);
          }
          tlm_problem_free(&q);
        }
    }
    if (rt->target.vec_lanes >= 8)
      CHECK(halved >= 1, "no constant-B rule tile of 4 or more rows to halve");
  }

  /* rule 12: with M >= N the rule's workers share M (mm_rule_split_m2),
   * in blocks that the pool's contiguous shares (4 chunks a worker at
   * most, worker t owning the t-th run) spread within 1/16 of the even
   * share; what it compiles is correct */
  {
    static const char *msplit[] = {"400x256:256x256", "100x512:512x64", "97x101:101x53",
                                   "500x384:384x384", "131x67:67x61"};
    int split_seen = 0;
    for (size_t i = 0; i < sizeof msplit / sizeof msplit[0]; i++) {
      for (int w = 2; w <= 4; w++) {
        char err[512], ss[512];
        tlm_problem p;
        tlm_task task;
        tlm_mm_args args;
        tlm_space sp;
        if (rule_case(rt, msplit[i], 31 + i, 1, w, &p, &task, &args, &sp)) continue;
        tlm_schedule sched;
        tlm_space_default(&sp, &sched);
        tlm_schedule_str(&sp, &sched, ss, sizeof ss);
        const int32_t *v = sched.v;
        int64_t M = task.u.mm.M, N = task.u.mm.N;
        int64_t mrows = (int64_t)v[MM_M3] * v[MM_M2] * v[MM_M1];
        int64_t ncols = (int64_t)v[MM_N3] * v[MM_N2] * v[MM_N1];
        int64_t bm = (M + mrows - 1) / mrows, bn = (N + ncols - 1) / ncols;
        if (!tlm_vec_is_k(v[MM_VEC]) && v[MM_ORDER0] == 0 && bm >= w && v[MM_PARALLEL] > 0) {
          /* the fused parallel loop's iterations (m outer, n inner when
           * both are fused), their work shared as the pool shares them */
          int64_t iters = v[MM_PARALLEL] >= 2 ? bm * bn : bm;
          int64_t chunks = iters < 4 * w ? iters : 4 * w;
          double most = 0, all = (double)M * (double)N;
          for (int t = 0; t < w; t++) {
            int64_t c0 = t * chunks / w, c1 = (t + 1) * chunks / w;
            double work = 0;
            for (int64_t it = iters * c0 / chunks; it < iters * c1 / chunks; it++) {
              int64_t mi = v[MM_PARALLEL] >= 2 ? it / bn : it;
              int64_t rows = M - mi * mrows < mrows ? M - mi * mrows : mrows;
              work += (double)rows * (v[MM_PARALLEL] >= 2 ? (double)(N - (it % bn) * ncols < ncols
                                                                        ? N - (it % bn) * ncols
                                                                        : ncols)
                                                          : (double)N);
            }
            if (work > most) most = work;
          }
          /* within 1/16 where a block size allows it (always at 2
           * workers for these shapes), else within 5/4 */
          double tol = w == 2 ? 17.0 / 16 : 5.0 / 4;
          CHECK(most * w < tol * all, "%s at %d workers [%s]: busiest worker %.0f of %.0f",
                msplit[i], w, ss, most, all);
          split_seen++;
        }
        tlm_kernel *k;
        tlm_status st = tlm_engine_kernel(rt, &task, &sched, &k, err, sizeof err);
        if (st == TLM_OK) st = tlm_engine_exec(rt, k, &task, &args, err, sizeof err);
        double e = st == TLM_OK ? tlm_problem_check(&p) : -1;
        CHECK(e >= 0 && e <= tlm_problem_tolerance(task.u.mm.K), "%s rule at %d workers [%s]: "
              "%s, error %g", msplit[i], w, ss, st == TLM_OK ? "ran" : err, e);
        tlm_problem_free(&p);
      }
    }
    CHECK(split_seen >= 8, "the rule shared M among workers for only %d of 15 (shape, workers)",
          split_seen);
  }

  /* rule 13: every M that fits one block gets the same schedule (one
   * kernel), and tlm_mm_canonical turns a schedule written the earlier way
   * (tile_m2 the smallest value covering M) into it; a schedule of several
   * M blocks stays as it is */
  {
    /* all over 16 register tiles of rows: B packed on every target (rule
     * 20 packs narrow rows from there where strided loads cross pages) */
    static const char *one_block[] = {"144x256:256x512", "196x256:256x512", "160x256:256x512",
                                      "137x256:256x512"};
    tlm_schedule first;
    int have_first = 0;
    for (size_t i = 0; i < sizeof one_block / sizeof one_block[0]; i++) {
      tlm_problem p;
      tlm_task task;
      tlm_mm_args args;
      tlm_space sp;
      if (rule_case(rt, one_block[i], 5 + i, 0, 1, &p, &task, &args, &sp)) continue;
      tlm_schedule sched;
      tlm_space_default(&sp, &sched);
      if (!have_first) first = sched, have_first = 1;
      CHECK(!memcmp(&sched, &first, sizeof sched), "%s: a rule schedule of its own (want one for "
            "every M in one block)", one_block[i]);
      /* the earlier form: the smallest offered tile_m2 that covers M */
      int32_t c[TLM_MAX_CANDIDATES];
      int n = tlm_space_candidates(&sp, MM_M2, sched.v, c);
      tlm_schedule old = sched;
      for (int j = 0; j < n; j++)
        if ((int64_t)c[j] * sched.v[MM_M3] >= task.u.mm.M) {
          old.v[MM_M2] = c[j];
          break;
        }
      tlm_mm_canonical(&sp, &old);
      CHECK(!memcmp(&old, &sched, sizeof sched), "%s: canonical form is not the rule's",
            one_block[i]);
      tlm_schedule several = sched;
      several.v[MM_M2] = 1; /* blocks of one register tile */
      tlm_schedule kept = several;
      tlm_mm_canonical(&sp, &kept);
      CHECK(!memcmp(&kept, &several, sizeof kept), "%s: canonical form changed a schedule of "
            "several M blocks", one_block[i]);
      tlm_problem_free(&p);
    }
  }

  /* rule 14: up to 16 rows, a B whose share a worker reads is larger
   * than its L2 and spans two pages of each row is streamed (K blocks of
   * 16, not packed), as under one register tile; with more rows, B within
   * L2 or narrow shares of its rows the rule's earlier choice stays. The
   * rule's kernels pass the reference check either way. */
  {
    static const char *streamed[] = {"12x768:768x3072", "9x1024:1024x4096", "24x1024:1024x1024",
                                     "9x768:768x768",   "7x512:512x4100",   "16x512:512x4100",
                                     "17x512:512x4100"};
    int stream_seen = 0;
    for (size_t i = 0; i < sizeof streamed / sizeof streamed[0]; i++)
      for (int w = 1; w <= 2; w++) {
        tlm_problem p;
        tlm_task task;
        tlm_mm_args args;
        tlm_space sp;
        if (rule_case(rt, streamed[i], 31 + i, 1, w, &p, &task, &args, &sp)) continue;
        tlm_schedule sched;
        tlm_space_default(&sp, &sched);
        const int32_t *v = sched.v;
        int64_t M = task.u.mm.M, bytes = (int64_t)task.u.mm.K * task.u.mm.N * 4;
        int64_t l2 = rt->target.l2_bytes > 0 ? rt->target.l2_bytes : 256 * 1024;
        int want = !tlm_vec_is_k(v[MM_VEC]) && M > v[MM_M3] && M <= 16 && bytes > l2 * w &&
                   task.u.mm.N * 4 >= 8192 * w && task.u.mm.N > v[MM_N3];
        char ss[512];
        tlm_schedule_str(&sp, &sched, ss, sizeof ss);
        CHECK((v[MM_K1] == 16 && !v[MM_PACK_B]) == want,
              "%s at %d workers: tile_k1 %d, pack_b %d, want %s [%s]", streamed[i], w, v[MM_K1],
              v[MM_PACK_B], want ? "16, unpacked (B streamed)" : "the deep block", ss);
        stream_seen += want;
        char what[160];
        snprintf(what, sizeof what, "%s rule at %d workers", streamed[i], w);
        check_kernel(rt, what, &task, &sched, &args, &p, ss);
        tlm_problem_free(&p);
      }
    CHECK(stream_seen >= 5 || rt->target.l2_bytes > (4 << 20),
          "rule 14 streamed B for only %d of 14 (shape, workers)", stream_seen);
  }

  /* rule 15: a tile of at most TLM_MM_PTR_ROWS rows (its rows' pointers
   * fit the general-purpose registers), rows chosen for M's tail when B is
   * not constant (10 rows as 5 + 5, not 8 + 2), and a task under
   * TLM_PARALLEL_MIN_FLOPS on one worker; the rule's kernels pass the
   * reference check. */
  {
    static const struct {
      const char *shape;
      int rows; /* the rule's tile rows on 32 registers of 16 lanes; 0: only <= 8 */
    } narrow[] = {{"64x256:256x32", 8}, {"53x16x32x256:53x16x256x32", 8}, {"10x30:30x20", 5},
                  {"10x30:30x1", 0},    {"100x64:64x16", 0},              {"12x64:64x48", 6},
                  {"97x33:33x7", 0}};
    for (size_t i = 0; i < sizeof narrow / sizeof narrow[0]; i++)
      for (int w = 1; w <= 2; w++) {
        char ss[512];
        tlm_problem p;
        tlm_task task;
        tlm_mm_args args;
        tlm_space sp;
        if (rule_case(rt, narrow[i].shape, 41 + i, 1, w, &p, &task, &args, &sp)) continue;
        tlm_schedule sched;
        tlm_space_default(&sp, &sched);
        tlm_schedule_str(&sp, &sched, ss, sizeof ss);
        const int32_t *v = sched.v;
        if (!tlm_vec_is_k(v[MM_VEC])) {
          CHECK(v[MM_M3] <= TLM_MM_PTR_ROWS, "%s: %d tile rows, at most %d [%s]", narrow[i].shape,
                v[MM_M3], TLM_MM_PTR_ROWS, ss);
          if (narrow[i].rows && rt->target.vec_regs == 32 && rt->target.vec_lanes == 16)
            CHECK(v[MM_M3] == narrow[i].rows, "%s: %d tile rows, want %d [%s]", narrow[i].shape,
                  v[MM_M3], narrow[i].rows, ss);
        }
        double flops = 2.0 * (double)tlm_task_batch_total(&task) * (double)task.u.mm.M *
                       (double)task.u.mm.N * (double)task.u.mm.K;
        if (w > 1 && flops < TLM_PARALLEL_MIN_FLOPS)
          CHECK(v[MM_PARALLEL] == 0, "%s: %.0f FLOPs shared among %d workers [%s]",
                narrow[i].shape, flops, w, ss);
        char what[160];
        snprintf(what, sizeof what, "%s rule at %d workers", narrow[i].shape, w);
        check_kernel(rt, what, &task, &sched, &args, &p, ss);
        tlm_problem_free(&p);
      }
  }

  /* rule 17: a few tiles of rows over a B beyond twice the workers' L2 take
   * the K block that keeps B's micro-panel (k1 x n3) in half of L1, where
   * that is under 256 (96 with 6 x 64 AVX-512 tiles and 48 KiB of L1),
   * when the C block of all rows fits the other half of L2; a constant B
   * keeps 256 (one packed copy for every M). Computed here from the target
   * as the rule states it; the rule's
   * kernels (K tails: 1500 = 15 x 96 + 60) pass the reference check. */
  {
    static const char *few_rows[] = {"37x1500:1500x1500", "24x1024:1024x4096", "7x2048:2048x1024",
                                     "130x1100:1100x2100", "256x1024:1024x4096", "64x300:300x4000",
                                     "29x2000:2000x777"};
    int short_seen = 0;
    for (size_t i = 0; i < sizeof few_rows / sizeof few_rows[0]; i++)
      for (int w = 1; w <= 2; w++)
        for (int bc = 0; bc <= 1; bc++) {
          char ss[512];
          tlm_problem p;
          tlm_task task;
          tlm_mm_args args;
          tlm_space sp;
          if (rule_case(rt, few_rows[i], 61 + i, 0, w, &p, &task, &args, &sp)) continue;
          if (bc) { /* the same task with B declared constant: its schedule only */
            tlm_target tg = rt->target;
            tg.threads = w;
            task.u.mm.b_const = 1;
            tlm_space_init(&sp, &task, &tg);
          }
          tlm_schedule sched;
          tlm_space_default(&sp, &sched);
          tlm_schedule_str(&sp, &sched, ss, sizeof ss);
          const int32_t *v = sched.v;
          const tlm_target *tg = &rt->target;
          int64_t M = task.u.mm.M, K = task.u.mm.K, N = task.u.mm.N;
          int64_t l1 = tg->l1d_bytes > 0 ? tg->l1d_bytes : 32 * 1024;
          int64_t l2 = tg->l2_bytes > 0 ? tg->l2_bytes : 256 * 1024;
          int64_t k1 = tlm_vec_is_k(v[MM_VEC]) ? 256 : l1 / 2 / ((int64_t)v[MM_N3] * 4), nb = 1;
          while (k1 < 256 && k1 >= 16 && nb * 2 <= l2 / 2 / (k1 * v[MM_N3] * 4)) nb *= 2;
          int streamed = !bc && M <= 16 && K * N * 4 > l2 * w && N * 4 >= 8192 * w && N > v[MM_N3];
          int want = !bc && !tlm_vec_is_k(v[MM_VEC]) && !streamed && M > v[MM_M3] && K > 256 && k1 < 256 &&
                     k1 >= 16 && K * N * 4 > 2 * l2 * w && M * nb * v[MM_N3] * 4 <= l2 / 2;
          if (want)
            CHECK(v[MM_K1] <= k1 && v[MM_K1] > k1 / 2, "%s at %d workers, B constant %d: tile_k1 "
                  "%d, want at most %lld (B's micro-panel in half of L1) [%s]", few_rows[i], w, bc,
                  v[MM_K1], (long long)k1, ss);
          else if (!streamed)
            CHECK(v[MM_K1] == 256 || v[MM_K1] >= K, "%s at %d workers, B constant %d: tile_k1 %d, "
                  "want 256 [%s]", few_rows[i], w, bc, v[MM_K1], ss);
          if (!strcmp(few_rows[i], "24x1024:1024x4096") && w == 1 && !bc && tg->vec_lanes == 16 &&
              tg->vec_regs == 32 && l1 == 48 * 1024)
            CHECK(v[MM_K1] == 96, "%s: tile_k1 %d on 6 x 64 tiles and 48 KiB of L1, want 96 [%s]",
                  few_rows[i], v[MM_K1], ss);
          short_seen += want;
          if (!bc) {
            char what[160];
            snprintf(what, sizeof what, "%s rule at %d workers", few_rows[i], w);
            check_kernel(rt, what, &task, &sched, &args, &p, ss);
          }
          tlm_problem_free(&p);
        }
    if (rt->target.vec_lanes == 16 && rt->target.l1d_bytes == 48 * 1024)
      CHECK(short_seen >= 4, "rule 17 shortened the K block for only %d of 14 cases", short_seen);
  }

  /* rule 18: N under the full width takes the narrowest vector of at least
   * 4 lanes that holds it (dot products along k aside); the rule's kernels
   * pass the reference check */
  {
    static const char *narrow_n[] = {"97x33:33x7", "1x300:300x1", "13x64:64x4", "33x17:17x9",
                                     "2x3x5:2x5x3", "64x128:128x12", "7x100:100x16"};
    for (size_t i = 0; i < sizeof narrow_n / sizeof narrow_n[0]; i++) {
      char ss[512];
      tlm_problem p;
      tlm_task task;
      tlm_mm_args args;
      tlm_space sp;
      if (rule_case(rt, narrow_n[i], 81 + i, 1, 1, &p, &task, &args, &sp)) continue;
      tlm_schedule sched;
      tlm_space_default(&sp, &sched);
      tlm_schedule_str(&sp, &sched, ss, sizeof ss);
      int32_t v = sched.v[MM_VEC], lanes = rt->target.vec_lanes;
      if (!tlm_vec_is_k(v)) {
        int32_t want = lanes;
        if (task.u.mm.N < lanes)
          for (int32_t w = 4; w <= lanes; w *= 2)
            if (w >= task.u.mm.N) {
              want = w;
              break;
            }
        CHECK(v == want, "%s: vec %d, want %d [%s]", narrow_n[i], v, want, ss);
      }
      check_kernel(rt, narrow_n[i], &task, &sched, &args, &p, ss);
      tlm_problem_free(&p);
    }
  }

  /* rule 19: one column (N = 1) with A and B unit-stride in k is dot
   * products along k at every M, 8 lanes over several rows (the full
   * width under 8), the full width for one row; under 16 steps of k the
   * outer product stays; the kernels pass the reference check (K tails,
   * one row, primes, a batch) */
  {
    static const char *one_col[] = {"1x300:300x1", "10x30:30x1", "64x768:768x1", "1x17:17x1",
                                    "13x301:301x1", "100x17:17x1", "7x16:16x1", "3x1x64:3x64x1",
                                    "1x15:15x1", "37x15:15x1"};
    for (size_t i = 0; i < sizeof one_col / sizeof one_col[0]; i++) {
      char ss[512];
      tlm_problem p;
      tlm_task task;
      tlm_mm_args args;
      tlm_space sp;
      if (rule_case(rt, one_col[i], 91 + i, 1, 1, &p, &task, &args, &sp)) continue;
      tlm_schedule sched;
      tlm_space_default(&sp, &sched);
      tlm_schedule_str(&sp, &sched, ss, sizeof ss);
      int32_t v = sched.v[MM_VEC], lanes = rt->target.vec_lanes;
      if (task.u.mm.K >= 16 && lanes > 1) { /* (scalar targets have no vectors) */
        int32_t want = (task.u.mm.M > 1 || tlm_task_batch_total(&task) > 1) && lanes > 8 ? 8 : lanes;
        CHECK(v == TLM_VEC_K + want, "%s: vec %d, want dot products of %d lanes [%s]", one_col[i],
              v, want, ss);
        CHECK(sched.v[MM_N3] == 1, "%s: %d columns of dot products [%s]", one_col[i],
              sched.v[MM_N3], ss);
      } else if (task.u.mm.K < 16) {
        CHECK(!tlm_vec_is_k(v), "%s: dot products under 16 steps of k [%s]", one_col[i], ss);
      }
      check_kernel(rt, one_col[i], &task, &sched, &args, &p, ss);
      tlm_problem_free(&p);
    }
  }

  tlm_stats ps;
  tlm_get_stats(rt, &ps);
  CHECK(ps.prepacks >= 3, "only %llu B matrices packed ahead", (unsigned long long)ps.prepacks);
  CHECK(ps.prepacked_bytes == 0, "%llu bytes of copies left", (unsigned long long)ps.prepacked_bytes);

  /* activations at extreme inputs (exp overflow and underflow ranges) */
  for (int act = 1; act < TLM_ACT_COUNT_; act++) {
    tlm_mm_desc d;
    char err[256];
    tlm_mm_desc_parse("37x19:19x53", &d, err, sizeof err);
    tlm_matmul_desc epi = {0, 0, 1, (tlm_activation)act, 0};
    tlm_problem p;
    if (tlm_problem_make(&d, &epi, 77, &p)) continue;
    for (int i = 0; i < 37 * 19; i++) p.bufs[0][i] *= (i % 3 == 0) ? 1000.0f : 30.0f;
    tlm_status st = tlm_run(rt, &p.op, p.in, p.n_in, &p.out, 1);
    double e = tlm_problem_check(&p);
    CHECK(st == TLM_OK && e >= 0 && e <= tlm_problem_tolerance(19), "activation %d at large "
          "inputs: error %g", act, e);
    tlm_problem_free(&p);
  }
  CHECK(schedules >= 500 || per_shape < 7, "only %d random schedules checked", schedules);
  CHECK(prepacked >= 50 || per_shape < 7, "only %d schedules with B packed ahead", prepacked);
  CHECK(crossed >= schedules / 2, "only %d of %d kernels run on other extents", crossed, schedules);
  CHECK(preact > 0, "no residual in a convolution's order");
  printf("shapes %d, random schedules %d (%d with B packed ahead, %d run on other extents, %d "
         "with the residual inside the activation), epilogue combinations %d\n",
         nshapes, schedules, prepacked, crossed, preact, __builtin_popcount((unsigned)epilogues_seen));
  tlm_destroy(rt);
  return check_report("test_matmul_random");
}
