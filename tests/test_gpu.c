/* test_gpu.c - the GPU matmul path without a GPU (#21).
 *
 * Usage: test_gpu SHARED_DIR [PTXAS|-] [SCHEDULES_PER_SHAPE]
 *
 * For shapes of ../shared/workloads/benchdnn/matmul (at their real sizes)
 * and odd built-in ones, with random epilogues, transposes and batches:
 *  1. PTX: the rule's schedule and random ones from the GPU space are
 *     emitted through LLVM's NVPTX target and assembled by `ptxas` for
 *     sm_90 and sm_80 (`-v`): no error, registers x threads within the
 *     register file, the shared memory the space computed, no spills for
 *     the rule's schedule. Skipped, with a note, when no ptxas is given.
 *  2. Correctness: the same schedules' host form runs on the CPU with the
 *     CUDA thread model (runtime/gpu_emu.c: one host thread per GPU thread,
 *     barriers as barriers, shared memory poisoned with NaN per block) on
 *     shrunk extents (tails that divide no tile, 1, primes) and is checked
 *     against the double-precision reference.
 *  3. The space: every sampled schedule is accepted, parses back from its
 *     text, and the rule is deterministic.
 *  4. Row operators (softmax with scale and causal mask, layernorm,
 *     rmsnorm) on odd row lengths and strided rows, the rule and random
 *     schedules, the same two checks against runtime/reference.c.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "api/validate.h"
#include "jit/codegen_gpu.h"
#include "jit/jit.h"
#include "lm/gpu_lang.h"
#include "runtime/gpu.h"
#include "runtime/gpu_emu.h"
#include "runtime/reference.h"
#include "train/problem.h"

#define MAX_SHAPES 96

static const char *const k_builtin[] = {
    "1x1:1x1",     "7x13:13x5",      "37x129:129x61", "2x3x17:2x17x19", "1x97:97x67",
    "64x64:64x64", "129x17:17x130",  "3x1x31:1x31x7", "5x300:300x3",    "2x2x5x9:2x2x9x11",
};

static int load_shapes(const char *dir, tlm_mm_desc *out, int max) {
  int n = tlm_mm_desc_load_shared(dir, 12, out, max);
  for (size_t i = 0; i < sizeof k_builtin / sizeof *k_builtin && n < max; i++) {
    char err[256];
    if (tlm_mm_desc_parse(k_builtin[i], &out[n], err, sizeof err) == 1) n++;
  }
  return n;
}

typedef struct ptx_stats {
  int regs, smem, spill;
} ptx_stats;

/* Assembles ptx with ptxas for sm; parses -v. Returns 0, -1 on an error
 * (message printed). */
static int assemble(const char *ptxas, const char *ptx, int sm, const char *tag, ptx_stats *st) {
  char path[] = "/tmp/tlm_test_gpu_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return -1;
  size_t len = strlen(ptx);
  int ok = write(fd, ptx, len) == (ssize_t)len;
  close(fd);
  if (!ok) {
    unlink(path);
    return -1;
  }
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "'%s' -arch=sm_%d -v -o /dev/null '%s' 2>&1", ptxas, sm, path);
  FILE *p = popen(cmd, "r");
  char line[1024], all[4096] = "";
  memset(st, 0, sizeof *st);
  while (p && fgets(line, sizeof line, p)) {
    if (strlen(all) + strlen(line) < sizeof all) strcat(all, line);
    const char *q;
    if ((q = strstr(line, "Used "))) st->regs = atoi(q + 5);
    if ((q = strstr(line, "bytes smem"))) {
      const char *s = q;
      while (s > line && s[-1] == ' ') s--;
      while (s > line && s[-1] >= '0' && s[-1] <= '9') s--;
      st->smem = atoi(s);
    }
    if ((q = strstr(line, "bytes spill stores"))) {
      const char *s = q;
      while (s > line && s[-1] == ' ') s--;
      while (s > line && s[-1] >= '0' && s[-1] <= '9') s--;
      st->spill += atoi(s);
    }
  }
  int rc = p ? pclose(p) : -1;
  unlink(path);
  if (rc != 0) {
    fprintf(stderr, "ptxas sm_%d failed for %s:\n%s\n", sm, tag, all);
    return -1;
  }
  return 0;
}

/* Runs the host form of (task, schedule) on p's buffers. */
static int emulate(tlm_jit *jit, const tlm_task *task, const tlm_schedule *sc, tlm_problem *p,
                   char *err, int errcap) {
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMModuleRef mod;
  int rc = tlm_codegen_gpu_matmul(ctx, task, sc, TLM_GPU_CODE_HOST, "gpu_host", &mod, err, errcap);
  void *obj = NULL, *fn = NULL;
  size_t len = 0;
  tlm_jit_code *code = NULL;
  if (!rc) {
    rc = tlm_jit_compile_object(jit, mod, "default<O1>", &obj, &len, NULL, err, errcap);
    LLVMDisposeModule(mod);
  }
  LLVMContextDispose(ctx);
  if (!rc) rc = tlm_jit_load(jit, obj, len, "gpu_host", &fn, &code, err, errcap);
  free(obj);
  if (rc) return -1;
  const tlm_matmul_task *t = &task->u.mm;
  int64_t args[GA_COUNT];
  int k = 2;
  uint64_t bias = t->has_bias ? (uint64_t)(uintptr_t)p->in[k++].data : 0;
  uint64_t res = t->has_residual ? (uint64_t)(uintptr_t)p->in[k++].data : 0;
  tlm_gpu_mm_args(task, (uint64_t)(uintptr_t)p->in[0].data, (uint64_t)(uintptr_t)p->in[1].data,
                  (uint64_t)(uintptr_t)p->out.data, bias, res, args);
  tlm_gpu_launch l;
  rc = tlm_gpu_launch_dims(task, sc, &l);
  if (!rc) {
    tlm_gpu_host_fn f;
    memcpy(&f, &fn, sizeof f);
    rc = tlm_gpu_emulate(f, args, &l, err, errcap);
  } else {
    snprintf(err, (size_t)errcap, "grid too large");
  }
  tlm_jit_unload(jit, code);
  return rc;
}


/* Row operators: x (B, R, C) with a row stride of C + pad, gamma, beta. */
static void check_rows(tlm_jit *jit, const char *ptxas, int schedules, uint64_t *rng, int *kernels,
                       int *assembled, int *emulated) {
  static const int64_t shapes[][3] = {{1, 1, 1},  {1, 3, 7},   {2, 5, 33},   {1, 17, 100},
                                      {1, 4, 1000}, {2, 2, 4097}, {1, 8, 768}, {3, 3, 13}};
  static const tlm_op_kind kinds[] = {TLM_OP_SOFTMAX, TLM_OP_SOFTMAX, TLM_OP_LAYERNORM, TLM_OP_RMSNORM};
  tlm_gpu_target tg;
  tlm_gpu_target_offline(&tg, 90);
  char err[512];
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (size_t q = 0; q < sizeof kinds / sizeof *kinds; q++) {
      int64_t B = shapes[s][0], R = shapes[s][1], C = shapes[s][2], pad = (int64_t)(s % 3);
      int64_t n = B * R * (C + pad);
      float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
      float *ref = malloc((size_t)n * sizeof *ref), *g = malloc((size_t)C * sizeof *g);
      float *b = malloc((size_t)C * sizeof *b);
      for (int64_t i = 0; i < n; i++) x[i] = (float)((double)(tlm_rng_next(rng) >> 11) / 9007199254740992.0 * 8 - 4);
      for (int64_t i = 0; i < C; i++) g[i] = 0.5f + (float)(i % 7) * 0.1f, b[i] = (float)(i % 5) * 0.2f - 0.4f;
      tlm_op op = tlm_op_rownorm(kinds[q]);
      if (q == 1) op.u.rownorm.causal = 1, op.u.rownorm.scale = 0.125f;
      int64_t shape[3] = {B, R, C};
      tlm_tensor in[3], out;
      memset(in, 0, sizeof in);
      memset(&out, 0, sizeof out);
      in[0].dtype = out.dtype = TLM_F32;
      in[0].ndim = out.ndim = 3;
      for (int i = 0; i < 3; i++) in[0].shape[i] = out.shape[i] = shape[i];
      in[0].strides[0] = out.strides[0] = R * (C + pad);
      in[0].strides[1] = out.strides[1] = C + pad;
      in[0].strides[2] = out.strides[2] = 1;
      in[0].data = x, out.data = y;
      int nin = 1;
      if (kinds[q] != TLM_OP_SOFTMAX) tlm_tensor_dense(&in[nin++], TLM_F32, 1, &C, g);
      if (kinds[q] == TLM_OP_LAYERNORM) tlm_tensor_dense(&in[nin++], TLM_F32, 1, &C, b);
      tlm_task task;
      tlm_row_args ra;
      tlm_status st = tlm_validate_row(&op, in, nin, &out, 1, &task, &ra, err, sizeof err);
      CHECK(st == TLM_OK, "row %lldx%lldx%lld kind %d: %s", (long long)B, (long long)R, (long long)C,
            (int)kinds[q], err);
      if (st != TLM_OK) goto next;
      tlm_row_args rr = ra;
      rr.y = ref;
      tlm_ref_row(&task, &rr);
      tlm_gpu_space sp;
      CHECK(tlm_gpu_space_init(&sp, &task, &tg) == 0, "row space");
      for (int r = 0; r < schedules; r++) {
        tlm_schedule sc;
        if (r == 0)
          tlm_gpu_space_default(&sp, &sc);
        else
          tlm_gpu_space_sample(&sp, rng, &sc);
        char ss[128], tag[256];
        tlm_gpu_schedule_str(&sp, &sc, ss, sizeof ss);
        snprintf(tag, sizeof tag, "kind %d%s %lldx%lldx%lld (pad %lld) [%s]", (int)kinds[q],
                 q == 1 ? " causal" : "", (long long)B, (long long)R, (long long)C, (long long)pad, ss);
        CHECK(tlm_gpu_space_accepts(&sp, &sc), "%s: not accepted", tag);
        char *ptx = NULL;
        if (tlm_gpu_kernel_ptx(&task, &sc, 90, "tlm_row", &ptx, err, sizeof err)) {
          CHECK(0, "%s: PTX: %s", tag, err);
          continue;
        }
        (*kernels)++;
        if (ptxas) {
          ptx_stats ps;
          CHECK(assemble(ptxas, ptx, 90, tag, &ps) == 0, "%s: ptxas", tag);
          (*assembled)++;
        }
        free(ptx);
        /* the host form, where the emulation stays cheap (a host thread
         * per GPU thread: 1024-thread blocks over many rows cost seconds) */
        tlm_gpu_launch l;
        tlm_gpu_launch_dims(&task, &sc, &l);
        if (r > 0 && (int64_t)l.threads * l.grid_x > 4096) continue;
        for (int64_t i = 0; i < n; i++) y[i] = -7.0f;
        int64_t args[GRA_COUNT];
        tlm_gpu_row_args(&task, (uint64_t)(uintptr_t)ra.x, (uint64_t)(uintptr_t)ra.y,
                         (uint64_t)(uintptr_t)ra.gamma, (uint64_t)(uintptr_t)ra.beta, ra.rows, ra.cols,
                         ra.mrows, ra.sx, ra.sy, ra.sg, ra.sb, args);
        LLVMContextRef ctx = LLVMContextCreate();
        LLVMModuleRef mod;
        void *obj = NULL, *fn = NULL;
        size_t len = 0;
        tlm_jit_code *code = NULL;
        int rc = tlm_gpu_kernel_module(ctx, &task, &sc, TLM_GPU_CODE_HOST, "row_host", &mod, err, sizeof err);
        if (!rc) {
          rc = tlm_jit_compile_object(jit, mod, "default<O1>", &obj, &len, NULL, err, sizeof err);
          LLVMDisposeModule(mod);
        }
        LLVMContextDispose(ctx);
        if (!rc) rc = tlm_jit_load(jit, obj, len, "row_host", &fn, &code, err, sizeof err);
        free(obj);
        if (!rc) {
          tlm_gpu_host_fn f;
          memcpy(&f, &fn, sizeof f);
          rc = tlm_gpu_emulate(f, args, &l, err, sizeof err);
        }
        tlm_jit_unload(jit, code);
        CHECK(rc == 0, "%s: host form: %s", tag, err);
        if (rc) continue;
        (*emulated)++;
        double worst = 0;
        for (int64_t bb = 0; bb < B; bb++)
          for (int64_t rr2 = 0; rr2 < R; rr2++)
            for (int64_t c = 0; c < C; c++) {
              int64_t i = bb * R * (C + pad) + rr2 * (C + pad) + c;
              double e = fabs((double)y[i] - ref[i]) / (1.0 + fabs((double)ref[i]));
              if (!(e <= worst)) worst = e; /* NaN stays */
            }
        CHECK(worst <= 2e-5, "%s: error %g", tag, worst);
      }
    next:
      free(x), free(y), free(ref), free(g), free(b);
    }
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : NULL;
  const char *ptxas = argc > 2 && strcmp(argv[2], "-") ? argv[2] : NULL;
  int per_shape = argc > 3 ? atoi(argv[3]) : 5;
  /* every stride-th shape (sanitizer builds: the host emulation under ASan
   * is what takes the time; the plain build runs every shape) */
  int stride = argc > 4 ? atoi(argv[4]) : 1;
  if (stride < 1) stride = 1;
  if (ptxas && access(ptxas, X_OK)) {
    printf("note: %s is not an executable: PTX is not assembled\n", ptxas);
    ptxas = NULL;
  }
  if (!ptxas) printf("note: no ptxas (CUDA toolkit): PTX is emitted but not assembled\n");
  static tlm_mm_desc shapes[MAX_SHAPES];
  int nshapes = load_shapes(dir, shapes, MAX_SHAPES);
  CHECK(nshapes >= 30, "only %d shapes", nshapes);
  char err[512];
  tlm_jit *jit = NULL;
  CHECK(tlm_jit_create(&jit, -1, err, sizeof err) == 0, "jit: %s", err);
  if (!jit) return check_report("gpu");
  tlm_gpu_target tg90, tg80;
  tlm_gpu_target_offline(&tg90, 90);
  tlm_gpu_target_offline(&tg80, 80);
  uint64_t rng = 0x5eed6a11ULL;
  int kernels = 0, assembled = 0, emulated = 0, shapes_used = 0, max_regs = 0;
  for (int s = 0; s < nshapes; s += stride) {
    int used = 0;
    for (int r = 0; r <= per_shape; r++) {
      tlm_mm_desc d = shapes[s];
      tlm_matmul_desc epi;
      uint64_t x = tlm_rng_next(&rng);
      tlm_mm_random_variant(x, &epi, &d);
      char ds[128], ss[256], tag[512];
      /* the task at the real extents: the schedule for PTX */
      tlm_problem big;
      tlm_mm_desc dsmall = d;
      tlm_mm_desc_shrink(&dsmall, 80, 33, 47, 3); /* [33, 80), at most 3 batches */
      tlm_task task;
      tlm_mm_args margs;
      tlm_mm_desc_str(&d, ds, sizeof ds);
      /* real extents only describe the task (no buffers): make the small
       * problem, then rewrite its task's extents */
      if (tlm_problem_make(&dsmall, &epi, x, &big)) {
        CHECK(0, "cannot build problem %s", ds);
        continue;
      }
      tlm_status st = tlm_validate_matmul(&big.op, big.in, big.n_in, &big.out, 1, &task, &margs,
                                          err, sizeof err);
      CHECK(st == TLM_OK, "%s: %s", ds, err);
      if (st != TLM_OK) {
        tlm_problem_free(&big);
        continue;
      }
      tlm_task real = task;
      {
        int64_t sa[TLM_MAX_DIMS], sb[TLM_MAX_DIMS], sc[TLM_MAX_DIMS];
        int nc;
        tlm_mm_desc_shapes(&d, sa, sb, sc, &nc);
        real.u.mm.M = sc[nc - 2], real.u.mm.N = sc[nc - 1];
        real.u.mm.K = d.a[d.nda - 1];
      }
      tlm_gpu_space sp, spsmall;
      CHECK(tlm_gpu_space_init(&sp, &real, &tg90) == 0, "space");
      tlm_gpu_space_init(&spsmall, &task, &tg90);
      tlm_schedule sc;
      if (r == 0) {
        tlm_gpu_space_default(&sp, &sc);
        tlm_schedule again;
        tlm_gpu_space_default(&sp, &again);
        CHECK(!memcmp(&sc, &again, sizeof sc), "rule not deterministic for %s", ds);
      } else {
        tlm_gpu_space_sample(&sp, &rng, &sc);
      }
      tlm_gpu_schedule_str(&sp, &sc, ss, sizeof ss);
      snprintf(tag, sizeof tag, "%s%s%s%s act %d [%s]", ds, epi.has_bias ? " bias" : "",
               epi.has_residual ? " residual" : "", r == 0 ? " rule" : "", (int)epi.activation, ss);
      CHECK(tlm_gpu_space_accepts(&sp, &sc), "%s: not accepted", tag);
      if (r <= 1) { /* the tensor language: deterministic, task, GPU prompt, rule, decisions */
        char s1[1024], s2[1024];
        tlm_gpu_sentence(&real, &tg90, &sc, s1, sizeof s1);
        tlm_gpu_sentence(&real, &tg90, &sc, s2, sizeof s2);
        CHECK(!strcmp(s1, s2) && !strncmp(s1, "op:matmul ", 10) && strstr(s1, " gpu:sm90 sms:7 ") &&
                  strstr(s1, " <rule> tn:") && strstr(s1, " <sep> tn:"),
              "%s: sentence '%s'", tag, s1);
      }
      tlm_schedule back;
      CHECK(tlm_gpu_schedule_parse(&sp, ss, &back, err, sizeof err) == 0 &&
                !memcmp(back.v, sc.v, sizeof sc.v),
            "%s: parse back: %s", tag, err);
      /* PTX for the real task (the code does not depend on the extents) */
      char *ptx = NULL;
      int rc = tlm_gpu_kernel_ptx(&real, &sc, 90, "tlm_mm", &ptx, err, sizeof err);
      CHECK(rc == 0, "%s: PTX: %s", tag, err);
      if (!rc) {
        kernels++;
        used = 1;
        tlm_gpu_launch l;
        tlm_gpu_launch_dims(&real, &sc, &l);
        if (ptxas) {
          ptx_stats ps;
          int ok = assemble(ptxas, ptx, 90, tag, &ps) == 0;
          CHECK(ok, "%s: ptxas sm_90", tag);
          if (ok) {
            assembled++;
            if (ps.regs > max_regs) max_regs = ps.regs;
            CHECK((int64_t)ps.regs * l.threads <= tg90.regs_per_sm && ps.regs <= 255,
                  "%s: %d registers x %d threads", tag, ps.regs, l.threads);
            CHECK(ps.smem == l.smem_bytes, "%s: smem %d, space says %d", tag, ps.smem,
                  l.smem_bytes);
            if (r == 0) CHECK(ps.spill == 0, "%s: rule spills %d bytes", tag, ps.spill);
          }
          if (r % 3 == 0) { /* sm_80 for a third of them */
            char *p80 = NULL;
            if (!tlm_gpu_kernel_ptx(&real, &sc, 80, "tlm_mm", &p80, err, sizeof err)) {
              CHECK(assemble(ptxas, p80, 80, tag, &ps) == 0, "%s: ptxas sm_80", tag);
              assembled++;
            } else {
              CHECK(0, "%s: PTX sm_80: %s", tag, err);
            }
            free(p80);
          }
        }
        free(ptx);
      }
      /* correctness of the host form on the small extents, for the rule
       * of the small task and this schedule where the small task's space
       * takes it (it always does: the space does not depend on extents) */
      if (r < 2) {
        if (r == 0) tlm_gpu_space_default(&spsmall, &sc);
        if (emulate(jit, &task, &sc, &big, err, sizeof err)) {
          CHECK(0, "%s: emulation: %s", tag, err);
        } else {
          double e = tlm_problem_check(&big);
          CHECK(e >= 0 && e <= tlm_problem_tolerance(task.u.mm.K), "%s (run at %lldx%lldx%lld): error %g",
                tag, (long long)task.u.mm.M, (long long)task.u.mm.N, (long long)task.u.mm.K, e);
          emulated++;
        }
      }
      tlm_problem_free(&big);
    }
    shapes_used += used;
  }
  printf("gpu: %d kernels over %d shapes, %d PTX assembled by ptxas (most registers %d), %d run "
         "on the host thread model\n",
         kernels, shapes_used, assembled, max_regs, emulated);
  /* NaN passes ReLU and ReLU6 as in the reference (PTX max.f32 would drop it) */
  for (int act = TLM_ACT_RELU; act <= TLM_ACT_RELU6; act += TLM_ACT_RELU6 - TLM_ACT_RELU) {
    tlm_mm_desc d;
    tlm_mm_desc_parse("2x1:1x1", &d, err, sizeof err);
    tlm_matmul_desc epi;
    memset(&epi, 0, sizeof epi);
    epi.activation = (tlm_activation)act;
    tlm_problem p;
    if (tlm_problem_make(&d, &epi, 1, &p)) continue;
    ((float *)p.in[0].data)[0] = NAN;
    ((float *)p.in[0].data)[1] = -1.0f;
    ((float *)p.in[1].data)[0] = 1.0f;
    tlm_task task;
    tlm_mm_args margs;
    tlm_validate_matmul(&p.op, p.in, p.n_in, &p.out, 1, &task, &margs, err, sizeof err);
    tlm_gpu_space sp;
    tlm_gpu_space_init(&sp, &task, &tg90);
    tlm_schedule sc;
    tlm_gpu_space_default(&sp, &sc);
    int rc = emulate(jit, &task, &sc, &p, err, sizeof err);
    const float *c = p.out.data;
    CHECK(rc == 0 && isnan(c[0]) && c[1] == 0.0f, "act %d: NaN -> %g, -1 -> %g (%s)", act, c[0],
          c[1], rc ? err : "");
    tlm_problem_free(&p);
  }
  int rk = 0, ra = 0, re = 0;
  check_rows(jit, ptxas, per_shape >= 5 ? 3 : 2, &rng, &rk, &ra, &re);
  printf("gpu rows: %d kernels, %d assembled, %d run on the host thread model\n", rk, ra, re);
  /* the bar (#21), at the CI's schedules per shape (fewer under
   * sanitizers, which slow the emulation, not the PTX) */
  if (per_shape >= 5)
    CHECK(shapes_used >= 30 && kernels >= 300 && (!ptxas || assembled >= 300),
          "%d kernels over %d shapes: want >= 300 over >= 30", kernels, shapes_used);
  tlm_jit_destroy(jit);
  return check_report("gpu");
}
