/* gpu.c - `tlm gpu` (see gpu.h). */
#include "gpu.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/validate.h"
#include "cache/disk.h"
#include "jit/codegen_gpu.h"
#include "lm/gpu_lang.h"
#include "engine/engine.h"
#include "runtime/gpu.h"
#include "engine/gpu_engine.h"
#include "train/measure.h"
#include "train/problem.h"

static const char *const k_acts[TLM_ACT_COUNT_] = {"none", "relu", "gelu", "silu", "relu6"};

static int act_parse(const char *s) {
  for (int i = 0; i < TLM_ACT_COUNT_; i++)
    if (!strcmp(s, k_acts[i])) return i;
  return -1;
}

/* The validated task of a descriptor and epilogue: tensors described at
 * far-apart addresses that are never read (validation only does
 * arithmetic on them). */
static int task_of(const tlm_mm_desc *d, const tlm_matmul_desc *epi, tlm_task *task, char *err,
                   int errcap) {
  int64_t sa[TLM_MAX_DIMS], sb[TLM_MAX_DIMS], sc[TLM_MAX_DIMS];
  int nc;
  if (tlm_mm_desc_shapes(d, sa, sb, sc, &nc)) {
    snprintf(err, (size_t)errcap, "too many dims");
    return -1;
  }
  tlm_tensor in[4], out;
  uintptr_t base = (uintptr_t)1 << 44; /* 16 TiB apart: no two views overlap */
  tlm_tensor_dense(&in[0], TLM_F32, d->nda, sa, (void *)(base * 1));
  tlm_tensor_dense(&in[1], TLM_F32, d->ndb, sb, (void *)(base * 2));
  tlm_tensor_dense(&out, TLM_F32, nc, sc, (void *)(base * 3));
  int n = 2;
  int64_t N = sc[nc - 1];
  if (epi->has_bias) tlm_tensor_dense(&in[n++], TLM_F32, 1, &N, (void *)(base * 4));
  if (epi->has_residual) tlm_tensor_dense(&in[n++], TLM_F32, nc, sc, (void *)(base * 5));
  tlm_op op = tlm_op_matmul();
  op.u.matmul = *epi;
  op.u.matmul.transpose_a = d->transpose_a;
  op.u.matmul.transpose_b = d->transpose_b;
  tlm_mm_args args;
  return tlm_validate_matmul(&op, in, n, &out, 1, task, &args, err, errcap) == TLM_OK ? 0 : -1;
}

static int usage(void) {
  fprintf(stderr,
          "usage: tlm gpu ptx DESC [--sm N] [--schedule TEXT] [--bias] [--residual] [--act A] "
          "[--ta] [--tb]\n"
          "       tlm gpu export [--sm N] [--random R] [--seed S] --out DIR ([--group G] FILE|DESC)...\n"
          "       tlm gpu info\n");
  return 2;
}

static int cmd_ptx(int argc, char **argv) {
  const char *desc = NULL, *sched_text = NULL;
  int sm = 90;
  tlm_matmul_desc epi;
  memset(&epi, 0, sizeof epi);
  int ta = 0, tb = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--sm") && i + 1 < argc) sm = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--schedule") && i + 1 < argc) sched_text = argv[++i];
    else if (!strcmp(argv[i], "--bias")) epi.has_bias = 1;
    else if (!strcmp(argv[i], "--residual")) epi.has_residual = 1;
    else if (!strcmp(argv[i], "--ta")) ta = 1;
    else if (!strcmp(argv[i], "--tb")) tb = 1;
    else if (!strcmp(argv[i], "--act") && i + 1 < argc) {
      int a = act_parse(argv[++i]);
      if (a < 0) return usage();
      epi.activation = (tlm_activation)a;
    } else if (argv[i][0] != '-' && !desc) desc = argv[i];
    else return usage();
  }
  if (!desc) return usage();
  tlm_mm_desc d;
  char err[512];
  if (tlm_mm_desc_parse(desc, &d, err, sizeof err) != 1) {
    fprintf(stderr, "tlm gpu: %s\n", err);
    return 2;
  }
  d.transpose_a |= ta, d.transpose_b |= tb;
  tlm_task task;
  if (task_of(&d, &epi, &task, err, sizeof err)) {
    fprintf(stderr, "tlm gpu: %s\n", err);
    return 1;
  }
  tlm_gpu_target tg;
  tlm_gpu_target_offline(&tg, sm);
  tlm_gpu_space sp;
  tlm_gpu_space_init(&sp, &task, &tg);
  tlm_schedule sc;
  if (sched_text) {
    if (tlm_gpu_schedule_parse(&sp, sched_text, &sc, err, sizeof err)) {
      fprintf(stderr, "tlm gpu: %s\n", err);
      return 1;
    }
  } else {
    tlm_gpu_space_default(&sp, &sc);
  }
  char ss[256], *ptx = NULL;
  tlm_gpu_launch l;
  if (tlm_gpu_launch_dims(&task, &sc, &l))
    printf("// note: this grid is past CUDA's limits; tlm_run would refuse the shape\n");
  printf("// %s sm_%d schedule %s: %d threads, grid %lld x %lld x %lld, %d bytes shared\n", desc,
         sm, tlm_gpu_schedule_str(&sp, &sc, ss, sizeof ss), l.threads, (long long)l.grid_x,
         (long long)l.grid_y, (long long)l.grid_z, l.smem_bytes);
  if (tlm_gpu_kernel_ptx(&task, &sc, sm, "tlm_mm", &ptx, err, sizeof err)) {
    fprintf(stderr, "tlm gpu: %s\n", err);
    return 1;
  }
  fputs(ptx, stdout);
  free(ptx);
  return 0;
}

static cJSON *int_array(const int64_t *v, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
  return a;
}

/* one kernel of the export: writes its PTX and appends its manifest entry */
static int export_one(const char *dir, int idx, const tlm_mm_desc *d, const tlm_matmul_desc *epi,
                      const tlm_task *task, const tlm_gpu_space *sp, const tlm_schedule *sc,
                      int is_rule, int sm, cJSON *list) {
  char err[512], *ptx = NULL, file[64], path[1200], ss[256], ds[128], sent[1024];
  tlm_gpu_launch l;
  if (tlm_gpu_launch_dims(task, sc, &l)) return 0; /* past CUDA's limits: skipped */
  if (tlm_gpu_kernel_ptx(task, sc, sm, "tlm_mm", &ptx, err, sizeof err)) {
    fprintf(stderr, "tlm gpu export: %s\n", err);
    return -1;
  }
  snprintf(file, sizeof file, "k%04d.ptx", idx);
  snprintf(path, sizeof path, "%s/%s", dir, file);
  FILE *f = fopen(path, "w");
  int ok = f && fputs(ptx, f) >= 0;
  if (f && fclose(f)) ok = 0;
  free(ptx);
  if (!ok) {
    fprintf(stderr, "tlm gpu export: cannot write %s\n", path);
    return -1;
  }
  int64_t sa[TLM_MAX_DIMS], sb[TLM_MAX_DIMS], scs[TLM_MAX_DIMS];
  int nc;
  tlm_mm_desc_shapes(d, sa, sb, scs, &nc);
  /* the argument list with the operands' slots as -1 .. -5 (A, B, C, bias,
   * residual): the checker puts its buffers' addresses there */
  int64_t args[GA_COUNT];
  tlm_gpu_mm_args(task, (uint64_t)-1, (uint64_t)-2, (uint64_t)-3, (uint64_t)-4, (uint64_t)-5, args);
  cJSON *o = cJSON_CreateObject();
  int64_t grid[3] = {l.grid_x, l.grid_y, l.grid_z};
  tlm_mm_desc_str(d, ds, sizeof ds);
  if (!o || !cJSON_AddStringToObject(o, "desc", ds) ||
      !cJSON_AddStringToObject(o, "ptx", file) || !cJSON_AddStringToObject(o, "kernel", "tlm_mm") ||
      !cJSON_AddStringToObject(o, "schedule", tlm_gpu_schedule_str(sp, sc, ss, sizeof ss)) ||
      !cJSON_AddBoolToObject(o, "rule", is_rule) ||
      !cJSON_AddNumberToObject(o, "transpose_a", d->transpose_a) ||
      !cJSON_AddNumberToObject(o, "transpose_b", d->transpose_b) ||
      !cJSON_AddNumberToObject(o, "bias", epi->has_bias) ||
      !cJSON_AddNumberToObject(o, "residual", epi->has_residual) ||
      !cJSON_AddStringToObject(o, "act", k_acts[epi->activation]) ||
      !cJSON_AddItemToObject(o, "a_shape", int_array(sa, d->nda)) ||
      !cJSON_AddItemToObject(o, "b_shape", int_array(sb, d->ndb)) ||
      !cJSON_AddItemToObject(o, "c_shape", int_array(scs, nc)) ||
      !cJSON_AddNumberToObject(o, "threads", l.threads) ||
      !cJSON_AddItemToObject(o, "grid", int_array(grid, 3)) ||
      !cJSON_AddNumberToObject(o, "flops", tlm_task_flops(task)) ||
      !cJSON_AddItemToObject(o, "args", int_array(args, GA_COUNT)) ||
      !cJSON_AddStringToObject(o, "sentence", tlm_gpu_sentence(task, &sp->target, sc, sent, sizeof sent))) {
    cJSON_Delete(o);
    return -1;
  }
  cJSON_AddItemToArray(list, o);
  return 1;
}

/* a row operator's kernel: x (rows, cols) dense, y likewise, gamma and
 * beta (cols); causal softmax over one (rows, cols) matrix */
static int export_row(const char *dir, int idx, const char *text, tlm_op op, int64_t rows,
                      int64_t cols, int random, uint64_t *rng, const tlm_gpu_target *tg, int sm,
                      cJSON *list) {
  char err[512];
  int made = 0;
  for (int r = 0; r <= random; r++) {
    tlm_op o = op;
    if (o.kind == TLM_OP_SOFTMAX && r % 2 == 1) o.u.rownorm.causal = 1, o.u.rownorm.scale = 0.125f;
    int64_t shape[2] = {rows, cols};
    tlm_tensor in[3], out;
    uintptr_t base = (uintptr_t)1 << 40;
    tlm_tensor_dense(&in[0], TLM_F32, 2, shape, (void *)base);
    tlm_tensor_dense(&out, TLM_F32, 2, shape, (void *)(2 * base));
    int nin = 1;
    if (o.kind != TLM_OP_SOFTMAX) tlm_tensor_dense(&in[nin++], TLM_F32, 1, &cols, (void *)(3 * base));
    if (o.kind == TLM_OP_LAYERNORM) tlm_tensor_dense(&in[nin++], TLM_F32, 1, &cols, (void *)(4 * base));
    tlm_task task;
    tlm_row_args ra;
    if (tlm_validate_row(&o, in, nin, &out, 1, &task, &ra, err, sizeof err) != TLM_OK) {
      fprintf(stderr, "tlm gpu export: %s: %s\n", text, err);
      return -1;
    }
    tlm_gpu_space sp;
    tlm_gpu_space_init(&sp, &task, tg);
    tlm_schedule sc;
    if (r == 0)
      tlm_gpu_space_default(&sp, &sc);
    else
      tlm_gpu_space_sample(&sp, rng, &sc);
    tlm_gpu_launch l0;
    if (tlm_gpu_launch_dims(&task, &sc, &l0)) {
      fprintf(stderr, "tlm gpu export: %s: grid past CUDA's limits, skipped\n", text);
      return made;
    }
    char *ptx = NULL, file[64], path[1200], ss[128], sent[1024];
    static const char *const kernels[] = {[TLM_OP_SOFTMAX] = "tlm_softmax",
                                          [TLM_OP_LAYERNORM] = "tlm_layernorm",
                                          [TLM_OP_RMSNORM] = "tlm_rmsnorm"};
    if (tlm_gpu_kernel_ptx(&task, &sc, sm, kernels[o.kind], &ptx, err, sizeof err)) {
      fprintf(stderr, "tlm gpu export: %s\n", err);
      return -1;
    }
    snprintf(file, sizeof file, "k%04d.ptx", idx + made);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "w");
    int ok = f && fputs(ptx, f) >= 0;
    if (f && fclose(f)) ok = 0;
    free(ptx);
    if (!ok) return -1;
    int64_t args[GRA_COUNT];
    tlm_gpu_row_args(&task, (uint64_t)-1, (uint64_t)-2, o.kind != TLM_OP_SOFTMAX ? (uint64_t)-3 : 0,
                     o.kind == TLM_OP_LAYERNORM ? (uint64_t)-4 : 0, ra.rows, ra.cols, ra.mrows,
                     ra.sx, ra.sy, ra.sg, ra.sb, args);
    tlm_gpu_launch l;
    if (tlm_gpu_launch_dims(&task, &sc, &l)) {
      fprintf(stderr, "tlm gpu export: %s: grid past CUDA's limits, skipped\n", text);
      return made;
    }
    int64_t grid[3] = {l.grid_x, l.grid_y, l.grid_z};
    static const char *const names[] = {[TLM_OP_SOFTMAX] = "softmax", [TLM_OP_LAYERNORM] = "layernorm",
                                        [TLM_OP_RMSNORM] = "rmsnorm"};
    cJSON *e = cJSON_CreateObject();
    if (!e || !cJSON_AddStringToObject(e, "op", names[o.kind]) ||
        !cJSON_AddStringToObject(e, "desc", text) || !cJSON_AddStringToObject(e, "ptx", file) ||
        !cJSON_AddStringToObject(e, "kernel", kernels[o.kind]) ||
        !cJSON_AddStringToObject(e, "schedule", tlm_gpu_schedule_str(&sp, &sc, ss, sizeof ss)) ||
        !cJSON_AddBoolToObject(e, "rule", r == 0) || !cJSON_AddNumberToObject(e, "rows", (double)rows) ||
        !cJSON_AddNumberToObject(e, "cols", (double)cols) ||
        !cJSON_AddNumberToObject(e, "causal", o.u.rownorm.causal) ||
        !cJSON_AddNumberToObject(e, "scale", o.u.rownorm.scale != 0.0f ? o.u.rownorm.scale : 1.0) ||
        !cJSON_AddNumberToObject(e, "eps", o.u.rownorm.eps) ||
        !cJSON_AddNumberToObject(e, "threads", l.threads) ||
        !cJSON_AddItemToObject(e, "grid", int_array(grid, 3)) ||
        !cJSON_AddItemToObject(e, "args", int_array(args, GRA_COUNT)) ||
        !cJSON_AddStringToObject(e, "sentence", tlm_gpu_sentence(&task, tg, &sc, sent, sizeof sent))) {
      cJSON_Delete(e);
      return -1;
    }
    cJSON_AddItemToArray(list, e);
    made++;
  }
  return made;
}

static int cmd_export(int argc, char **argv) {
  int sm = 90, random = 2;
  uint64_t seed = 1;
  const char *dir = NULL;
  const char *items[256], *groups[256], *group = NULL;
  int nitems = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--sm") && i + 1 < argc) sm = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--random") && i + 1 < argc) random = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--out") && i + 1 < argc) dir = argv[++i];
    else if (!strcmp(argv[i], "--group") && i + 1 < argc) group = argv[++i];
    else if (argv[i][0] != '-' && nitems < 256) groups[nitems] = group, items[nitems++] = argv[i];
    else return usage();
  }
  if (!dir || !nitems || random < 0 || random > 100) return usage();
  char probe[1200];
  snprintf(probe, sizeof probe, "%s/manifest.json", dir);
  if (tlm_disk_make_parents(probe)) {
    fprintf(stderr, "tlm gpu export: cannot create %s\n", dir);
    return 1;
  }
  tlm_gpu_target tg;
  tlm_gpu_target_offline(&tg, sm);
  cJSON *root = cJSON_CreateObject(), *list = cJSON_CreateArray(), *gr = cJSON_CreateObject();
  if (!root || !list || !gr) return 1;
  cJSON_AddItemToObject(root, "groups", gr);
  cJSON_AddNumberToObject(root, "sm", sm);
  cJSON_AddNumberToObject(root, "ga_count", GA_COUNT);
  cJSON_AddNumberToObject(root, "gra_count", GRA_COUNT);
  cJSON_AddItemToObject(root, "kernels", list);
  int idx = 0, failed = 0;
  uint64_t rng = seed;
  for (int it = 0; it < nitems; it++) {
    /* a file of descriptors, else one descriptor */
    char line[1024], err[512];
    FILE *f = fopen(items[it], "r");
    int from_file = f != NULL;
    int done = 0;
    while (!done) {
      const char *text;
      if (from_file) {
        if (!fgets(line, sizeof line, f)) break;
        text = line;
      } else {
        text = items[it];
        done = 1;
      }
      tlm_op rop;
      int64_t rows, cols;
      char rerr[256], trimmed[128];
      size_t tl = strcspn(text, "\r\n");
      if (tl >= sizeof trimmed) tl = sizeof trimmed - 1;
      memcpy(trimmed, text, tl);
      trimmed[tl] = 0;
      if (tlm_row_desc_parse(trimmed, &rop, &rows, &cols, rerr, sizeof rerr) == 1) {
        tlm_task probe;
        probe.kind = rop.kind;
        if (!tlm_gpu_supports(&probe)) {
          fprintf(stderr, "tlm gpu export: %s: no GPU kernels for this operator\n", text);
          failed = 1;
          continue;
        }
        int e = export_row(dir, idx, trimmed, rop, rows, cols, random, &rng, &tg, sm, list);
        if (e < 0) failed = 1;
        else idx += e;
        continue;
      }
      tlm_mm_desc d;
      int pr = tlm_mm_desc_parse(text, &d, err, sizeof err);
      if (pr == 0) continue;
      if (pr < 0) {
        fprintf(stderr, "tlm gpu export: %s: %s\n", items[it], err);
        failed = 1;
        continue;
      }
      for (int r = 0; r <= random; r++) {
        tlm_matmul_desc epi;
        memset(&epi, 0, sizeof epi);
        tlm_mm_desc dr = d;
        /* random kernels get random epilogues and transposes */
        if (r > 0) tlm_mm_random_variant(tlm_rng_next(&rng), &epi, &dr);
        tlm_task task;
        if (task_of(&dr, &epi, &task, err, sizeof err)) {
          fprintf(stderr, "tlm gpu export: %s\n", err);
          failed = 1;
          break;
        }
        tlm_gpu_space sp;
        tlm_gpu_space_init(&sp, &task, &tg);
        tlm_schedule sc;
        if (r == 0)
          tlm_gpu_space_default(&sp, &sc);
        else
          tlm_gpu_space_sample(&sp, &rng, &sc);
        int e = export_one(dir, idx, &dr, &epi, &task, &sp, &sc, r == 0, sm, list);
        if (e > 0 && r == 0 && groups[it]) { /* the group's shapes, by descriptor */
          cJSON *g = cJSON_GetObjectItemCaseSensitive(gr, groups[it]);
          if (!g) cJSON_AddItemToObject(gr, groups[it], g = cJSON_CreateArray());
          char ds[128];
          tlm_mm_desc_str(&d, ds, sizeof ds);
          if (g) cJSON_AddItemToArray(g, cJSON_CreateString(ds));
        }
        if (e < 0) failed = 1;
        if (e > 0) idx++;
      }
    }
    if (f) fclose(f);
  }
  char path[1200];
  snprintf(path, sizeof path, "%s/manifest.json", dir);
  if (tlm_json_save(root, path)) {
    fprintf(stderr, "tlm gpu export: cannot write %s\n", path);
    failed = 1;
  }
  cJSON_Delete(root);
  printf("tlm gpu export: %d kernels for sm_%d in %s\n", idx, sm, dir);
  return failed;
}

static int cmd_info(void) {
  tlm_runtime *rt = NULL;
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.cache_dir = "none";
  cfg.async_compile = 0;
  if (tlm_create(&cfg, &rt) != TLM_OK) {
    fprintf(stderr, "tlm gpu: %s\n", tlm_last_error(NULL));
    return 1;
  }
  tlm_gpu_target tg;
  char err[512];
  tlm_status st = tlm_gpu_describe(rt, &tg, err, sizeof err);
  if (st == TLM_OK)
    printf("CUDA device %d: %s, sm_%d, %d SMs, %d registers and %d KiB shared memory per SM, "
           "driver %d\n",
           cfg.cuda_device, tg.name, tg.sm, tg.sm_count, tg.regs_per_sm, tg.smem_per_sm / 1024,
           tg.driver_version);
  else
    printf("no GPU: %s\n", err);
  tlm_destroy(rt);
  return st == TLM_OK ? 0 : 1;
}

int tlm_cmd_gpu(int argc, char **argv) {
  if (argc < 1) return usage();
  if (!strcmp(argv[0], "ptx")) return cmd_ptx(argc - 1, argv + 1);
  if (!strcmp(argv[0], "export")) return cmd_export(argc - 1, argv + 1);
  if (!strcmp(argv[0], "info")) return cmd_info();
  return usage();
}
