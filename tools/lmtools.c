/* lmtools.c - `tlm explain` and `tlm bench decode`. */
#include "lmtools.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/validate.h"
#include "lm/model.h"
#include "train/checkpoint.h"
#include "engine/engine.h"
#include "train/measure.h"
#include "train/problem.h"
#include "train/tasks.h"
#include "train/train.h"
#include "runtime/clock.h"

static double now_ms(void) { return tlm_clock_ms(); }

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* $TLM_MODEL (a file or a folder), else the shipped models' folder as
 * tlm_create finds it; tlm_lm_load_for picks a folder's file for the
 * target. */
static const char *default_model(void) {
  static char dir[TLM_LM_PATH_MAX];
  const char *m = getenv("TLM_MODEL");
  if (m && *m) return m;
  return tlm_engine_shipped_models(dir, sizeof dir) ? dir : TLM_SOURCE_MODELS_DIR;
}

/* The host, narrowed to TLM_ISA when set (the schedule space, the prompt
 * and the int8 decoder's path all follow it). */
static void target_from_env(tlm_target *tg) {
  tlm_target_detect(tg);
  int isa = tlm_isa_parse(getenv("TLM_ISA"));
  if (isa >= 0 && tlm_target_restrict(tg, isa) == 0) tlm_lm_force_isa(isa);
}

int tlm_cmd_explain(int argc, char **argv) {
  const char *desc = NULL, *model = default_model();
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
    else if (argv[i][0] == '-') {
      fprintf(stderr, "usage: tlm explain MATMUL_DESC [--model MODEL]\n"
                      "  Prints the prompt tokens, the decoded decisions with their\n"
                      "  probabilities and the loop nest the language model chooses.\n");
      return !strcmp(argv[i], "--help") ? 0 : 2;
    } else desc = argv[i];
  }
  if (!desc) {
    fprintf(stderr, "tlm explain: missing MATMUL_DESC\n");
    return 2;
  }
  tlm_task_spec spec;
  memset(&spec, 0, sizeof spec);
  char err[512];
  if (tlm_mm_desc_parse(desc, &spec.d, err, sizeof err) != 1) {
    fprintf(stderr, "tlm explain: bad descriptor: %s\n", err);
    return 2;
  }
  tlm_task task;
  if (tlm_task_spec_task(&spec, &task)) {
    fprintf(stderr, "tlm explain: the descriptor does not describe a valid matmul\n");
    return 2;
  }
  tlm_target tg;
  target_from_env(&tg);
  static tlm_lm_model m;
  static char chosen[TLM_LM_PATH_MAX];
  if (tlm_lm_load_for(&m, model, &tg, chosen, err, sizeof err)) {
    fprintf(stderr, "tlm explain: %s\n", err);
    return 1;
  }
  if (!tlm_lm_covers(&m, &tg))
    fprintf(stderr, "tlm explain: model %s does not cover this target (tlm_run would schedule "
            "with the rule); its decisions anyway:\n", chosen);
  tlm_space s;
  tlm_space_init(&s, &task, &tg);
  int32_t prompt[TLM_LM_PROMPT_LEN];
  tlm_lm_prompt(&m.vocab, &task, &tg, prompt);
  printf("prompt:");
  for (int i = 0; i < TLM_LM_PROMPT_LEN; i++)
    if (prompt[i] != TLM_TOK_PAD) printf(" %s", m.vocab.tok[prompt[i]]);
  printf("\n");
  tlm_schedule sched;
  float prob[TLM_MAX_POINTS];
  double t0 = now_ms();
  tlm_status st = tlm_lm_decode(&m, &s, &sched, prob);
  double ms = now_ms() - t0;
  if (st) {
    fprintf(stderr, "tlm explain: decoding failed\n");
    tlm_lm_free(&m);
    return 1;
  }
  /* selective decoding: how sure the model is of its greedy schedule */
  tlm_schedule greedy, rule;
  double margin = m.sentence_margin, lg = 0, lr = 0;
  m.sentence_margin = 0;
  tlm_space_default(&s, &rule);
  if (tlm_lm_decode(&m, &s, &greedy, NULL) == TLM_OK && tlm_lm_score(&m, &s, &greedy, &lg) == TLM_OK &&
      tlm_lm_score(&m, &s, &rule, &lr) == TLM_OK) {
    if (!memcmp(greedy.v, rule.v, sizeof rule.v[0] * (size_t)rule.n))
      printf("greedy schedule: the rule's\n");
    else
      printf("greedy schedule: %.2f nats more probable than the rule's (margin %.2f): %s\n", lg - lr,
             margin, margin > 0 && lg - lr < margin ? "the rule's schedule is kept" : "used");
  }
  m.sentence_margin = margin;
  int32_t cands[TLM_MAX_CANDIDATES];
  printf("decisions (decoded in %.2f ms, int8 path %s):\n", ms, tlm_lm_isa());
  for (int p = 0; p < s.npoints; p++) {
    int n = tlm_space_candidates(&s, p, sched.v, cands);
    printf("  %-12s = %-5d  p=%.3f  (of %d candidates)\n", s.points[p].name, sched.v[p], prob[p], n);
  }
  ln_nest nest;
  char buf[4096];
  ln_lower_matmul(&task, &sched, &nest);
  printf("loop nest:\n%s", ln_print(&nest, buf, sizeof buf));
  tlm_lm_free(&m);
  return 0;
}

int tlm_cmd_bench_decode(int argc, char **argv) {
  const char *model = default_model(), *ckpt = NULL, *json = NULL, *records = NULL;
  const char *shared = "../shared", *dump = NULL;
  int tasks_n = 200;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
    else if (!strcmp(argv[i], "--checkpoint") && i + 1 < argc) ckpt = argv[++i];
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!strcmp(argv[i], "--records") && i + 1 < argc) records = argv[++i];
    else if (!strcmp(argv[i], "--shared") && i + 1 < argc) shared = argv[++i];
    else if (!strcmp(argv[i], "--tasks") && i + 1 < argc) tasks_n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--dump") && i + 1 < argc) dump = argv[++i];
    else {
      fprintf(stderr,
              "usage: tlm bench decode [--model MODEL] [--json FILE] [--tasks N] [--dump FILE]\n"
              "                        [--checkpoint CKPT --records FILE]\n"
              "  Times greedy constrained decoding (one thread) over N tasks of the\n"
              "  collection list; with the fp32 checkpoint the model was quantized from\n"
              "  and a records file, also the int8-vs-fp32 agreement of greedy decisions\n"
              "  on the held-out tasks' best schedules (teacher forced). --dump writes each\n"
              "  task's decisions and their probabilities (C99 hex floats), one line a task,\n"
              "  so that two builds of the decoder can be compared byte for byte.\n");
      return !strcmp(argv[i], "--help") ? 0 : 2;
    }
  }
  tlm_target tg;
  target_from_env(&tg);
  static tlm_lm_model m;
  static char chosen[TLM_LM_PATH_MAX];
  char err[512];
  if (tlm_lm_load_for(&m, model, &tg, chosen, err, sizeof err)) {
    fprintf(stderr, "tlm bench decode: %s\n", err);
    return 1;
  }
  model = chosen;
  tlm_task_spec *specs;
  int ns = tlm_tasks_build(shared, 1, &specs, err, sizeof err);
  if (ns <= 0) {
    fprintf(stderr, "tlm bench decode: %s\n", err);
    return 1;
  }
  double *times = calloc((size_t)tasks_n, sizeof *times);
  int nt = 0;
  FILE *df = NULL;
  if (dump && !(df = fopen(dump, "w"))) {
    fprintf(stderr, "tlm bench decode: cannot write %s\n", dump);
    free(times);
    return 1;
  }
  for (int i = 0; i < tasks_n && times; i++) {
    tlm_task task;
    if (tlm_task_spec_task(&specs[(i * 7919) % ns], &task)) continue;
    tlm_space s;
    tlm_space_init(&s, &task, &tg);
    tlm_schedule sched;
    float prob[TLM_MAX_POINTS];
    double t0 = now_ms();
    tlm_status st = tlm_lm_decode(&m, &s, &sched, prob);
    times[nt++] = now_ms() - t0;
    if (df) {
      fprintf(df, "%s:", specs[(i * 7919) % ns].text);
      if (st != TLM_OK) fprintf(df, " error %d", (int)st);
      for (int p = 0; p < s.npoints && st == TLM_OK; p++) fprintf(df, " %d@%a", sched.v[p], prob[p]);
      fputc('\n', df);
    }
  }
  if (df && fclose(df)) {
    fprintf(stderr, "tlm bench decode: cannot write %s\n", dump);
    free(times);
    return 1;
  }
  qsort(times, (size_t)nt, sizeof *times, cmp_double);
  double p50 = nt ? times[nt / 2] : 0, p90 = nt ? times[(nt * 9) / 10] : 0;
  FILE *mf = fopen(model, "rb");
  long file_bytes = 0;
  if (mf) {
    fseek(mf, 0, SEEK_END);
    file_bytes = ftell(mf);
    fclose(mf);
  }
  size_t params = 0, sz[TLM_GPT2_NTENSORS];
  tlm_gpt2_sizes(&m.cfg, sz);
  for (int i = 0; i < TLM_GPT2_NTENSORS; i++) params += sz[i];
  printf("int8 decode (%s, %d layers x width %d, %zu parameters, %ld-byte file): %d schedules, "
         "p50 %.3f ms, p90 %.3f ms (one thread)\n",
         tlm_lm_isa(), m.cfg.layers, m.cfg.width, params, file_bytes, nt, p50, p90);
  /* agreement */
  int agree = 0, total = 0;
  double nmse = -1;
  if (ckpt && records) {
    tlm_gpt2 fm;
    tlm_config cfg;
    tlm_config_init(&cfg);
    cfg.cache_dir = "none"; /* measure compiles, never reuse them */
    cfg.async_compile = 0; /* every kernel its own, built before the call returns */
    cfg.num_threads = 1;
    cfg.model_path = "none";
    tlm_runtime *rt = NULL;
    tlm_best *best = NULL;
    int nb = tlm_best_load(records, 1, &best);
    if (tlm_gpt2_load(&fm, ckpt, err, sizeof err) == TLM_OK && tlm_create(&cfg, &rt) == TLM_OK &&
        tlm_gpt2_train_init(&fm, 1, TLM_LM_PROMPT_LEN + MM_NPOINTS, rt) == 0) {
      double se = 0, ss = 0;
      for (int i = 0; i < nb; i++) {
        tlm_task_spec spec;
        tlm_task task;
        tlm_space s;
        tlm_target btg;
        if (tlm_best_target(&best[i], &tg, &btg) || tlm_task_spec_parse(best[i].task, &spec) ||
            tlm_task_spec_task(&spec, &task))
          continue;
        tlm_space_init(&s, &task, &btg);
        if (!tlm_space_accepts(&s, &best[i].sched)) continue;
        int32_t toks[TLM_LM_MAX_SEQ] = {0}; /* padding past short sentences */
        int n = tlm_lm_sentence(&m.vocab, &s, &best[i].sched, toks, NULL);
        tlm_gpt2_forward(&fm, toks, NULL, NULL);
        const float *fl = tlm_gpt2_logits(&fm);
        tlm_lm_state st;
        tlm_lm_state_init(&st, &m);
        for (int t = 0; t < n - 1; t++) {
          const float *ql = tlm_lm_step(&st, toks[t]);
          const float *f = fl + (size_t)t * m.cfg.vocab;
          for (int v = 0; v < m.cfg.vocab; v++) {
            se += (ql[v] - f[v]) * (ql[v] - f[v]);
            ss += f[v] * f[v];
          }
          if (t < TLM_LM_PROMPT_LEN - 1) continue;
          int pt = t + 1 - TLM_LM_PROMPT_LEN;
          int32_t cands[TLM_MAX_CANDIDATES];
          int nc = tlm_space_candidates(&s, pt, best[i].sched.v, cands);
          if (nc < 2) continue;
          int bq = -1, bf = -1;
          for (int c = 0; c < nc; c++) {
            int tk = tlm_lm_decision_token(&m.vocab, &s, pt, cands[c]);
            if (bq < 0 || ql[tk] > ql[bq]) bq = tk;
            if (bf < 0 || f[tk] > f[bf]) bf = tk;
          }
          agree += bq == bf;
          total++;
        }
        tlm_lm_state_free(&st);
      }
      nmse = se / (ss + 1e-30);
      tlm_gpt2_free(&fm);
      printf("int8 vs fp32 on %d held-out tasks: greedy agreement %d/%d (%.2f%%), logits NMSE %.2e\n",
             nb, agree, total, total ? 100.0 * agree / total : 0, nmse);
    } else {
      fprintf(stderr, "tlm bench decode: agreement skipped: %s\n", err);
    }
    tlm_best_free(best, nb);
    tlm_destroy(rt);
  }
  if (json) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", model);
    cJSON_AddStringToObject(o, "int8_path", tlm_lm_isa());
    static const char *const names[] = {"layers",        "heads",         "width",
                                        "threads",       "schedules",     "decode_ms_p50",
                                        "decode_ms_p90", "parameters",    "file_bytes"};
    double v[] = {m.cfg.layers, m.cfg.heads, m.cfg.width,       1, nt, p50, p90,
                  (double)params, (double)file_bytes};
    tlm_json_numbers(o, names, v, 9);
    if (total) {
      static const char *const qn[] = {"int8_fp32_agreement", "decision_tokens", "logits_nmse"};
      double qv[] = {(double)agree / total, total, nmse};
      tlm_json_numbers(o, qn, qv, 3);
    }
    if (tlm_json_save(o, json)) fprintf(stderr, "tlm bench decode: cannot write %s\n", json);
    cJSON_Delete(o);
  }
  free(times);
  free(specs);
  tlm_lm_free(&m);
  return 0;
}
