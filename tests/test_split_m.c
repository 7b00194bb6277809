/* The run-time split of M (ln_node.split_m, ln_split_m_block): a matmul
 * whose parallel loop is M's alone, with fewer blocks of its own than the
 * workers, runs one block a worker, cut from the run-time M in equal
 * rows. One kernel serves every M, so the test runs one
 * compiled kernel at M from 1 past its tiles, B constant and not, on 1, 2,
 * 3 and 4 threads, each result against the reference, and checks how
 * many blocks the engine hands the pool. */
#include <stdlib.h>
#include <string.h>

#include "api/validate.h"
#include "check.h"
#include "engine/engine.h"
#include "runtime/family.h"
#include "runtime/kernel_abi.h"
#include "runtime/loopnest.h"
#include "train/problem.h"

/* the rule's value at every point except the ones the split needs: M
 * outer at level 0, one level-0 block of M (its largest level-2 block,
 * level 1 of 1) and the parallel loop over M alone */
typedef struct pick_ctx {
  tlm_schedule rule;
} pick_ctx;

static int pick(void *ctx, const tlm_space *s, int p, const int32_t *decided,
                const int32_t *cands, int n) {
  (void)s, (void)decided;
  const pick_ctx *c = ctx;
  int32_t want = c->rule.v[p];
  if (p == MM_ORDER0) want = 0;
  if (p == MM_M1) want = 1;
  if (p == MM_PARALLEL) want = 1;
  if (p == MM_M2) return n - 1;
  for (int i = 0; i < n; i++)
    if (cands[i] == want) return i;
  return 0;
}

/* one problem of shape `shape` with M rows run on kernel k; 1 when it ran */
static int run_at(tlm_runtime *rt, const tlm_kernel *k, const char *shape, int64_t M, int b_const,
                  const char *ss, int64_t *count) {
  tlm_mm_desc d;
  char err[512];
  if (tlm_mm_desc_parse(shape, &d, err, sizeof err) != 1) return 0;
  d.a[d.nda - 2] = M;
  tlm_matmul_desc epi = {0, 0, 1, TLM_ACT_RELU, 0};
  tlm_problem p;
  if (tlm_problem_make(&d, &epi, 700 + (uint64_t)M, &p)) return 0;
  tlm_task task;
  tlm_mm_args args;
  int ran = 0;
  if (tlm_validate_matmul(&p.op, p.in, p.n_in, &p.out, 1, &task, &args, err, sizeof err) ==
      TLM_OK) {
    task.u.mm.b_const = b_const;
    if (b_const)
      CHECK(tlm_constant_add(rt, p.in[1].data, tlm_tensor_span_bytes(&p.in[1])) == TLM_OK,
            "constant_add: %s", tlm_last_error(rt));
    memset(p.out.data, 0xff, tlm_tensor_span_bytes(&p.out)); /* NaN: every element written */
    tlm_status st = tlm_engine_exec(rt, k, &task, &args, err, sizeof err);
    double e = st == TLM_OK ? tlm_problem_check(&p) : -1;
    CHECK(e >= 0 && e <= tlm_problem_tolerance(task.u.mm.K),
          "%s at M = %lld on %d threads%s [%s]: %s, error %g", shape, (long long)M, rt->nthreads,
          b_const ? ", B constant" : "", ss, st == TLM_OK ? "ran" : err, e);
    if (b_const) CHECK(tlm_constant_remove(rt, p.in[1].data) == TLM_OK, "constant_remove");
    *count = ln_parallel_count(&k->nest, &task, rt->nthreads);
    ran = 1;
    /* iteration 1 alone writes exactly the rows of the second block */
    int64_t mb = ln_parallel_m_block(&k->nest, &task, rt->nthreads);
    if (*count > 1 && !b_const && mb > 0) {
      size_t bytes = ((size_t)k->scratch_bytes + 63) & ~(size_t)63;
      float *scratch = bytes ? aligned_alloc(64, bytes) : NULL;
      tlm_mm_args one = args;
      one.mblock = mb;
      one.bpk = NULL;
      memset(p.out.data, 0xff, tlm_tensor_span_bytes(&p.out));
      if (!bytes || scratch) {
        ((tlm_mm_kernel_fn)k->fn)(&one, 1, 2, scratch);
        int64_t wrong = 0;
        for (int64_t i = 0; i < M; i++) {
          float v = one.c[i * one.sc[4]];
          int inside = i >= mb && i < 2 * mb;
          wrong += inside ? v != v : v == v;
        }
        CHECK(wrong == 0, "%s at M = %lld [%s]: iteration 1 of blocks of %lld rows wrote %lld "
              "rows wrong", shape, (long long)M, ss, (long long)mb, (long long)wrong);
      }
      free(scratch);
    }
  }
  tlm_problem_free(&p);
  return ran;
}

/* the matmul task of `shape` (bias and ReLU), B constant or not; 0, or -1
 * after a failed CHECK */
static int shape_task(const char *shape, int b_const, tlm_task *task) {
  tlm_mm_desc d;
  char err[512];
  if (tlm_mm_desc_parse(shape, &d, err, sizeof err) != 1) {
    CHECK(0, "%s: %s", shape, err);
    return -1;
  }
  tlm_matmul_desc epi = {0, 0, 1, TLM_ACT_RELU, 0};
  tlm_problem p;
  if (tlm_problem_make(&d, &epi, 5, &p)) {
    CHECK(0, "%s: no problem", shape);
    return -1;
  }
  tlm_mm_args args;
  tlm_status st = tlm_validate_matmul(&p.op, p.in, p.n_in, &p.out, 1, task, &args, err, sizeof err);
  tlm_problem_free(&p);
  CHECK(st == TLM_OK, "%s: %s", shape, err);
  task->u.mm.b_const = b_const;
  return st == TLM_OK ? 0 : -1;
}

int main(void) {
  if (check_isa_unsupported()) return CHECK_SKIP;

  /* the numbers: M rows, the nest's block, the tile's rows, the workers */
  static const struct {
    int64_t M, block, rows, workers, want;
  } cases[] = {
      {196, 6144, 6, 2, 98},  /* 33 tiles: 98 + 98 rows */
      {196, 96, 6, 2, 0},     /* 3 blocks of its own already */
      {192, 96, 6, 2, 0},     /* 2 of its own */
      {6, 6144, 6, 2, 0},     /* one tile: nothing to share */
      {7, 6144, 6, 2, 4},     /* two tiles: 4 + 3 rows */
      {196, 6144, 6, 1, 0},   /* one worker */
      {13, 6144, 6, 4, 5},    /* 3 tiles on 4 workers: 3 blocks, 5 + 5 + 3 */
      {200, 150, 6, 4, 50},   /* 2 blocks of its own on 4 workers: 4 of 50 */
      {1, 6144, 6, 2, 0},     {0, 6144, 6, 2, 0},   {50, 6144, 1, 3, 17},
      {50, 6144, 0, 3, 17},   /* rows under 1 count as 1 */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int64_t got = ln_split_m_block(cases[i].M, cases[i].block, cases[i].rows, cases[i].workers);
    CHECK(got == cases[i].want, "ln_split_m_block(%lld, %lld, %lld, %lld) = %lld, want %lld",
          (long long)cases[i].M, (long long)cases[i].block, (long long)cases[i].rows,
          (long long)cases[i].workers, (long long)got, (long long)cases[i].want);
  }

  static const char *shapes[] = {"196x64:64x96", "61x37:37x41", "100x129:129x33",
                                 "30x300:300x17"};
  static const int64_t rows[] = {1, 2, 3, 5, 6, 7, 11, 12, 13, 25, 49, 97, 196, 389};
  int split = 0, ran = 0;
  for (int threads = 1; threads <= 4; threads++) {
    tlm_config cfg;
    tlm_config_init(&cfg);
    cfg.cache_dir = "none";
    cfg.model_path = "none";
    cfg.num_threads = threads;
    cfg.async_compile = 0;
    tlm_runtime *rt;
    if (tlm_create(&cfg, &rt) != TLM_OK) {
      CHECK(0, "tlm_create: %s", tlm_last_error(NULL));
      continue;
    }
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      for (int b_const = 0; b_const <= 1; b_const++) {
        char err[512], ss[512];
        tlm_task task;
        if (shape_task(shapes[s], b_const, &task)) continue;
        tlm_target tg = rt->target;
        /* the space of two workers (N has two blocks at least, so every
         * M block is offered); the kernel runs on `threads` */
        tg.threads = 2;
        tlm_space sp;
        tlm_space_init(&sp, &task, &tg);
        pick_ctx c;
        tlm_space_default(&sp, &c.rule);
        tlm_schedule sched;
        tlm_space_walk(&sp, pick, &c, &sched);
        tlm_schedule_str(&sp, &sched, ss, sizeof ss);
        /* the space offers it: the split counts as the workers' blocks */
        CHECK(sched.v[MM_ORDER0] == 0 && sched.v[MM_PARALLEL] == 1 && sched.v[MM_M1] == 1,
              "%s: the space offers no parallel loop over M alone [%s]", shapes[s], ss);
        ln_nest nest;
        if (ln_lower_matmul(&task, &sched, &nest)) {
          CHECK(0, "%s [%s]: lowering", shapes[s], ss);
          continue;
        }
        const ln_node *root = &nest.nodes[nest.root];
        int vec_k = tlm_vec_is_k(sched.v[MM_VEC]);
        CHECK(root->split_m == 1 && root->split_rows == sched.v[MM_M3],
              "%s [%s]: split_m %d, rows %d", shapes[s], ss, root->split_m, root->split_rows);
        tlm_kernel *k;
        if (tlm_engine_kernel(rt, &task, &sched, &k, err, sizeof err) != TLM_OK) {
          CHECK(0, "%s [%s]: compile: %s", shapes[s], ss, err);
          continue;
        }
        for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
          int64_t count = 0, M = rows[r];
          if (!run_at(rt, k, shapes[s], M, b_const && !vec_k, ss, &count)) continue;
          ran++;
          /* the nest's own blocks where they are as many as the
           * threads, else one block a worker, of equal rows */
          int64_t m3 = sched.v[MM_M3], own_rows = m3 * sched.v[MM_M2] * sched.v[MM_M1];
          int64_t own = (M + own_rows - 1) / own_rows, want = own;
          int64_t tiles = (M + m3 - 1) / m3;
          if (own < threads && tiles > 1) {
            int64_t parts = tiles < threads ? tiles : threads;
            int64_t per = (M + parts - 1) / parts;
            want = (M + per - 1) / per;
          }
          CHECK(count == want, "%s at M = %lld on %d threads [%s]: %lld blocks, want %lld",
                shapes[s], (long long)M, threads, ss, (long long)count, (long long)want);
          split += count > 1;
        }
      }
    }
    tlm_destroy(rt);
  }
  /* rule 24: a constant B's rule shares M cut at run time where its M
   * tiles spread evenly (one schedule, so one kernel, for every such M),
   * not where they do not (9 tiles at M = 49), nor for a B that is not
   * constant (packed per block by each worker) */
  {
    tlm_config cfg;
    tlm_config_init(&cfg);
    cfg.cache_dir = "none";
    cfg.model_path = "none";
    cfg.num_threads = 2;
    tlm_runtime *rt;
    if (tlm_create(&cfg, &rt) == TLM_OK) {
      static const struct {
        const char *shape;
        int b_const, split;
      } rules[] = {{"196x512:512x512", 1, 1}, {"144x512:512x512", 1, 1},
                   {"324x512:512x1024", 1, 1}, {"196x256:256x1024", 1, 1},
                   {"100x512:512x512", 1, 1},   {"49x1024:1024x1024", 1, 0},
                   {"196x512:512x512", 0, 0},
                   {"2x3x196x64:2x3x64x512", 1, 0}};
      tlm_schedule first;
      int have_first = 0;
      for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        char ss[512];
        tlm_task task;
        if (shape_task(rules[i].shape, rules[i].b_const, &task)) continue;
        tlm_space sp;
        tlm_space_init(&sp, &task, &rt->target);
        tlm_schedule sched;
        tlm_space_default(&sp, &sched);
        tlm_schedule_str(&sp, &sched, ss, sizeof ss);
        ln_nest nest;
        int split = !ln_lower_matmul(&task, &sched, &nest) && nest.nodes[nest.root].split_m &&
                    ln_parallel_m_block(&nest, &task, 2) > 0;
        CHECK(split == rules[i].split, "%s%s: the rule %s M at run time [%s]", rules[i].shape,
              rules[i].b_const ? ", B constant" : "", split ? "cuts" : "does not cut", ss);
        if (split && !strncmp(rules[i].shape, "1", 1) && strstr(rules[i].shape, ":512x512")) {
          /* 196, 144 and 100 rows of the same layer: one schedule */
          if (have_first)
            CHECK(!memcmp(first.v, sched.v, sizeof sched.v), "%s: a schedule of its own [%s]",
                  rules[i].shape, ss);
          first = sched;
          have_first = 1;
        }
      }
      CHECK(have_first, "no constant-B rule schedule cut M");
      tlm_destroy(rt);
    }
  }
  CHECK(ran >= 400, "only %d runs", ran);
  CHECK(split >= 200, "only %d runs cut M among the workers", split);
  printf("%d runs, %d with M cut among the workers\n", ran, split);
  return check_report("test_split_m");
}
