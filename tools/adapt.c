/* adapt.c - `tlm adapt`: the model learns the machine it runs on (issue #17).
 *
 * The published TLM needs a new data set and a retrain for every CPU. Here a
 * user's machine measures its own: an adaptation round (tlm collect --adapt)
 * times, for each training task, the rule, the base model's top-K and a few
 * schedules near the rule side by side, checked against the reference; the
 * base model is then fine-tuned on those targets (tlm train --init: the
 * task's fastest schedule where it beats the rule by the trainer's margin,
 * else the rule) under this machine's hardware prompt, quantized, and
 * written where tlm_create looks first (tlm_adapted_model_path). Held-out
 * families are neither measured nor taught, so `tlm eval --heldout` judges
 * the result fairly. A fifth of the measured families is set aside from
 * fine-tuning to choose the model's sentence margin on (below), recorded in
 * the model file.
 *
 * The time budget is split: --collect-share of it measuring (resumable: a
 * second run goes on with the tasks not yet measured, and trains on all of
 * them), the rest fine-tuning, cut to the steps that fit, less what the gate
 * needs. The gate is the shipping rule of models/README.md applied on this
 * machine: the held-out tasks (tlm eval --heldout --k 0 --random 0) timed
 * with the new model's picks and the rule's side by side; the model is
 * installed only when its geometric-mean speed is at least the rule's and
 * no family is below 0.95 of it, and no kernel is wrong (--force installs
 * it anyway). Otherwise it stays beside as a candidate file and whatever
 * scheduled before (the rule, or an earlier adapted model) still does. */
#include "adapt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/disk.h"
#include "engine/engine.h"
#include "runtime/clock.h"
#include "train/collect.h"
#include "train/measure.h"
#include "tools/pipeline.h"
#include "train/eval.h"
#include "train/records.h"
#include "train/tasks.h"
#include "train/train.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <xxhash.h>

static double now_s(void) { return tlm_clock_ms() * 1e-3; }

static void usage(FILE *f) {
  fprintf(f,
          "usage: tlm adapt [--minutes N] [--base MODEL] [--shared DIR] [--out MODEL]\n"
          "                 [--records FILE] [--topk K] [--mutants M] [--collect-share F]\n"
          "                 [--lr LR] [--seed S] [--gate-tasks N] [--force] [--synthetic S]\n"
          "                 [--rule-prior-variants V]\n"
          "  Measures schedules on this machine at this target (TLM_ISA narrows it)\n"
          "  and fine-tunes the base model (default: $TLM_MODEL, else the shipped\n"
          "  model) on them into a model for this CPU and ISA, which tlm_create then\n"
          "  loads by default (see TLM_VERBOSE=1). Within about N minutes (default\n"
          "  20): F of them (default 0.6) measuring the rule, the base model's top K\n"
          "  (default 8) and M schedules near the rule (default 4) for each training\n"
          "  task, side by side; the rest fine-tuning. A fifth of the measured\n"
          "  families (per operator) is left out of fine-tuning: the new model's\n"
          "  picks on their tasks, timed against the rule's, choose the margin by\n"
          "  which the model must prefer its own schedule to the rule's (written\n"
          "  into the model, and its figures to <out>.candidate.tlmq.margin.json).\n"
          "  Resumable: the measurements\n"
          "  (--records, default beside the model) are kept and a second run adds\n"
          "  to them. --out default: the disk cache's\n"
          "  models/adapted-<isa>-<cpu>.tlmq ($TLM_CACHE_DIR; needs a disk cache).\n"
          "  The gate: the new model is installed only if, on the held-out tasks\n"
          "  (--gate-tasks N of them, default all, about 2 minutes), its picks run at\n"
          "  least as fast as the rule's (geometric mean) with no family below 0.95\n"
          "  and no wrong kernel; else it is left as <out>.candidate.tlmq (--force:\n"
          "  install it anyway). --synthetic S: the task list also holds the layers of\n"
          "  S synthetic transformers (tlm collect --synthetic: widths 256-6144 other\n"
          "  than the held-out ones), so the model sees more widths than the\n"
          "  workloads' (default 8: natively on a Zen 5 the held-out GPT-2-355M\n"
          "  decode layers went from 0.86 to 1.00 of the rule with them).\n"
          "  --rule-prior-variants V (default 0): the rule taught, besides on the\n"
          "  unmeasured tasks of the list, on V scaled copies of each (tlm train).\n");
}

/* A JSON file tlm eval wrote (at most 4 MiB), parsed; NULL when it cannot
 * be read or parsed. */
static cJSON *json_file(const char *path) {
  FILE *f = fopen(path, "rb");
  char *text = f ? calloc(1, 1 << 22) : NULL;
  size_t n = text ? fread(text, 1, (1 << 22) - 1, f) : 0;
  if (f) fclose(f);
  cJSON *j = n ? cJSON_Parse(text) : NULL;
  free(text);
  return j;
}

/* The gate's verdict from tlm eval's JSON: 1 pass, 0 fail (why in msg) */
static int gate_passes(const char *json_path, char *msg, size_t cap) {
  cJSON *j = json_file(json_path);
  const cJSON *g = cJSON_GetObjectItem(j, "tlm1_geomean_speed_vs_default");
  const cJSON *w = cJSON_GetObjectItem(j, "wrong_kernels");
  const cJSON *fams = cJSON_GetObjectItem(j, "families");
  int ok = cJSON_IsNumber(g) && cJSON_IsArray(fams);
  if (!ok) snprintf(msg, cap, "no evaluation result in %.900s", json_path);
  else if (cJSON_IsNumber(w) && w->valuedouble > 0)
    ok = 0, snprintf(msg, cap, "%d wrong kernels", (int)w->valuedouble);
  else if (g->valuedouble < 1.0)
    ok = 0, snprintf(msg, cap, "held-out speed %.3f of the rule's (< 1)", g->valuedouble);
  else {
    int len = snprintf(msg, cap, "held-out speed %.3f of the rule's", g->valuedouble), below = 0;
    for (const cJSON *x = fams->child; x; x = x->next) {
      const cJSON *name = cJSON_GetObjectItem(x, "family");
      const cJSON *v = cJSON_GetObjectItem(x, "tlm1_geomean_speed_vs_default");
      if (!cJSON_IsNumber(v) || v->valuedouble >= 0.95) continue;
      ok = 0;
      if (len > 0 && (size_t)len < cap)
        len += snprintf(msg + len, cap - (size_t)len, "%s %s %.3f", below++ ? "," : "; families below 0.95:",
                        cJSON_IsString(name) ? name->valuestring : "?", v->valuedouble);
    }
  }
  cJSON_Delete(j);
  return ok;
}

/* ---- the margin's own split -------------------------------------------------
 *
 * Selective decoding keeps the rule's schedule unless the model ranks its
 * own sentence e^margin times as probable (model.h). The margin an adapted
 * model needs depends on how sure it has become of what it learned here, so
 * it is chosen here, on data of this machine the fine-tuning never saw: a
 * fifth of the measured training families (per operator, by the hash of
 * their names) is set aside, left out of fine-tuning and of the rule prior,
 * and their tasks are timed with the new model's plain greedy picks against
 * the rule (tlm eval --margin 0). The held-out split stays the gate's alone:
 * choosing the margin on it would fit the gate. */

enum { ASIDE_MAX_TASKS = 96, ASIDE_OPS = 16 };

typedef struct aside_set {
  char family[TLM_TRAIN_MAX_SKIP][48];
  int nfamily;
  tlm_task_spec *specs; /* their measured tasks, malloc'd */
  int n;
} aside_set;

typedef struct fam_entry {
  char name[48];
  int op;
  uint64_t hash;
} fam_entry;

static int fam_cmp(const void *a, const void *b) {
  const fam_entry *x = a, *y = b;
  if (x->op != y->op) return x->op < y->op ? -1 : 1;
  if (x->hash != y->hash) return x->hash < y->hash ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* The families set aside (deterministic for the records' family names):
 * of each operator's measured training families, the first round(n / 5)
 * by XXH64 of the name, at least one where the operator has three or more.
 * Returns the tasks set aside (0: none; a with nothing to free). */
static int aside_choose(const char *records, aside_set *a) {
  memset(a, 0, sizeof *a);
  tlm_best *best = NULL;
  int nbest = tlm_best_load(records, 0, &best);
  if (nbest <= 0) return 0;
  fam_entry *fam = calloc((size_t)nbest, sizeof *fam);
  int nfam = 0;
  for (int i = 0; fam && i < nbest; i++) {
    tlm_task_spec spec;
    if (tlm_task_spec_parse(best[i].task, &spec) || spec.op < 0 || spec.op >= ASIDE_OPS) continue;
    int j = 0;
    while (j < nfam && strcmp(fam[j].name, best[i].family)) j++;
    if (j < nfam) continue;
    snprintf(fam[nfam].name, sizeof fam[nfam].name, "%s", best[i].family);
    fam[nfam].op = spec.op;
    fam[nfam].hash = XXH64(best[i].family, strlen(best[i].family), 0);
    nfam++;
  }
  if (fam) qsort(fam, (size_t)nfam, sizeof *fam, fam_cmp);
  for (int lo = 0, hi; fam && lo < nfam; lo = hi) {
    for (hi = lo; hi < nfam && fam[hi].op == fam[lo].op; hi++) {}
    int count = hi - lo, take = (count + 2) / 5;
    if (take < 1 && count >= 3) take = 1;
    for (int j = lo; j < lo + take && a->nfamily < TLM_TRAIN_MAX_SKIP; j++)
      memcpy(a->family[a->nfamily++], fam[j].name, sizeof fam[j].name);
  }
  free(fam);
  a->specs = a->nfamily ? calloc(ASIDE_MAX_TASKS, sizeof *a->specs) : NULL;
  /* their tasks, families in turn so a capped list samples them all */
  for (int added = 1; a->specs && added && a->n < ASIDE_MAX_TASKS;) {
    added = 0; /* each family's next task not yet taken */
    for (int f = 0; f < a->nfamily && a->n < ASIDE_MAX_TASKS; f++) {
      for (int i = 0; i < nbest; i++) {
        if (strcmp(best[i].family, a->family[f])) continue;
        int dup = 0; /* taken, or one task measured under two hw texts */
        for (int k = 0; k < a->n && !dup; k++) dup = !strcmp(a->specs[k].text, best[i].task);
        if (dup) continue;
        tlm_task_spec spec;
        if (tlm_task_spec_parse(best[i].task, &spec)) continue;
        snprintf(spec.family, sizeof spec.family, "%s", best[i].family);
        snprintf(spec.text, sizeof spec.text, "%s", best[i].task);
        a->specs[a->n++] = spec;
        added = 1;
        break;
      }
    }
  }
  tlm_best_free(best, nbest);
  if (!a->n) {
    free(a->specs);
    memset(a, 0, sizeof *a);
  }
  return a->n;
}

/* The sentence margin (nats) from the set-aside tasks' evaluation (plain
 * greedy; tlm eval's JSON): for each margin of 0, 0.25, ..., 30 a task
 * runs the greedy pick where its sentence's log-probability beats the
 * rule's by the margin, else the rule (speed 1); the margin with the best
 * geometric-mean speed whose every family keeps 0.95 of the rule's speed
 * (the gate's own bounds); of equals, the middle of the run of the largest
 * ones (one nat into it when it runs to the grid's end). NaN when the file
 * holds no usable task, or the model departs from the rule on none (no
 * evidence either way; msg says why). */
static double margin_choose(const char *json_path, char *msg, size_t cap) {
  cJSON *j = json_file(json_path);
  const cJSON *tasks = cJSON_GetObjectItem(j, "tasks");
  enum { MAXT = ASIDE_MAX_TASKS, MAXF = TLM_TRAIN_MAX_SKIP, GRID = 121 };
  double d[MAXT], g[MAXT];
  int fam[MAXT], n = 0, nf = 0;
  char fname[MAXF][48];
  for (const cJSON *t = cJSON_IsArray(tasks) ? tasks->child : NULL; t && n < MAXT; t = t->next) {
    const cJSON *r = cJSON_GetObjectItem(t, "default_ns"), *m = cJSON_GetObjectItem(t, "tlm1_ns");
    const cJSON *l1 = cJSON_GetObjectItem(t, "tlm1_logp"), *l0 = cJSON_GetObjectItem(t, "default_logp");
    const cJSON *fa = cJSON_GetObjectItem(t, "family");
    if (!cJSON_IsNumber(r) || !(r->valuedouble > 0) || !cJSON_IsString(fa)) continue;
    int k = 0;
    while (k < nf && strcmp(fname[k], fa->valuestring)) k++;
    if (k == nf) {
      if (nf == MAXF) continue;
      snprintf(fname[nf++], sizeof fname[0], "%s", fa->valuestring);
    }
    fam[n] = k;
    /* the rule's own schedule, or no score: the rule at every margin */
    int departs = cJSON_IsNumber(m) && m->valuedouble > 0 && cJSON_IsNumber(l1) && cJSON_IsNumber(l0) &&
                  !cJSON_IsTrue(cJSON_GetObjectItem(t, "tlm1_is_default"));
    d[n] = departs ? l1->valuedouble - l0->valuedouble : -INFINITY;
    g[n] = departs ? log(r->valuedouble / m->valuedouble) : 0;
    n++;
  }
  cJSON_Delete(j);
  if (!n) {
    snprintf(msg, cap, "no timed task in %.900s", json_path);
    return NAN;
  }
  int departs = 0;
  for (int i = 0; i < n; i++) departs += d[i] > -INFINITY;
  if (!departs) {
    snprintf(msg, cap, "the new model picked the rule's schedule on all %d set-aside tasks", n);
    return NAN;
  }
  double best_s = -INFINITY, at[GRID], score[GRID];
  for (int gi = 0; gi < GRID; gi++) {
    double margin = 0.25 * gi, sum = 0, fsum[MAXF] = {0};
    int fn[MAXF] = {0}, ok = 1;
    for (int i = 0; i < n; i++) {
      double v = d[i] >= margin ? g[i] : 0;
      sum += v, fsum[fam[i]] += v, fn[fam[i]]++;
    }
    for (int k = 0; k < nf; k++) ok = ok && fsum[k] / fn[k] >= log(0.95);
    at[gi] = exp(sum / n);
    score[gi] = ok ? sum / n : -INFINITY;
    if (score[gi] > best_s) best_s = score[gi];
  }
  /* the best margins form runs between the tasks' log-probability gaps:
   * the middle of the last run (away from the gaps on both sides); a run
   * up to the grid's end lies above every departure that mattered: one nat
   * above its start (its end is only the grid's) */
  int hi = GRID - 1;
  while (hi > 0 && !(score[hi] >= best_s - 1e-12)) hi--;
  int lo = hi;
  while (lo > 0 && score[lo - 1] >= best_s - 1e-12) lo--;
  int pick = hi < GRID - 1 ? (lo + hi) / 2 : lo + 4 < GRID ? lo + 4 : GRID - 1;
  double best_m = best_s > -INFINITY ? 0.25 * pick : 0.25 * (GRID - 1);
  snprintf(msg, cap,
           "%d tasks of %d families: TLM-1 / rule %.3f at margin %.2f (plain greedy %.3f, "
           "margin 2 %.3f, margin 4 %.3f)",
           n, nf, at[(int)(best_m / 0.25 + 0.5)], best_m, at[0], at[8], at[16]);
  return best_m;
}

int tlm_cmd_adapt(int argc, char **argv) {
  double minutes = 20, share = 0.6;
  int gate_tasks = 0, force = 0;
  const char *base = NULL, *shared = "../shared", *out = NULL, *records = NULL;
  const char *topk = "8", *mutants = "4", *lr = "3e-4", *seed = "1", *synthetic = "8";
  const char *prior_variants = "0";
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--minutes") && v) minutes = atof(argv[++i]);
    else if (!strcmp(a, "--base") && v) base = argv[++i];
    else if (!strcmp(a, "--shared") && v) shared = argv[++i];
    else if (!strcmp(a, "--out") && v) out = argv[++i];
    else if (!strcmp(a, "--records") && v) records = argv[++i];
    else if (!strcmp(a, "--topk") && v) topk = argv[++i];
    else if (!strcmp(a, "--mutants") && v) mutants = argv[++i];
    else if (!strcmp(a, "--collect-share") && v) share = atof(argv[++i]);
    else if (!strcmp(a, "--lr") && v) lr = argv[++i];
    else if (!strcmp(a, "--seed") && v) seed = argv[++i];
    else if (!strcmp(a, "--gate-tasks") && v) gate_tasks = atoi(argv[++i]);
    else if (!strcmp(a, "--force")) force = 1;
    else if (!strcmp(a, "--synthetic") && v) synthetic = argv[++i];
    else if (!strcmp(a, "--rule-prior-variants") && v) prior_variants = argv[++i];
    else {
      int help = !strcmp(a, "--help") || !strcmp(a, "-h");
      usage(help ? stdout : stderr);
      return help ? 0 : 2;
    }
  }
  if (!(minutes > 0 && minutes <= 24 * 60) || !(share > 0 && share < 1) || gate_tasks < 0) {
    usage(stderr);
    return 2;
  }
  double t0 = now_s();
  static char base_dir[TLM_LM_PATH_MAX];
  if (!base) {
    const char *m = getenv("TLM_MODEL");
    base = m && *m && strcmp(m, "none") ? m
           : tlm_engine_shipped_models(base_dir, sizeof base_dir) ? base_dir
                                                                   : TLM_SOURCE_MODELS_DIR;
  }
  /* this machine and target, and the adapted model's place */
  tlm_runtime *rt = tlm_tool_runtime("tlm adapt", -1, NULL, "none");
  if (!rt) return 1;
  /* a folder of models (the shipped one): the file tlm_create would pick
   * for this target, else the folder's first */
  static char base_file[TLM_LM_PATH_MAX];
  if (tlm_lm_is_dir(base)) {
    tlm_lm_model *pick = calloc(1, sizeof *pick);
    char perr[512];
    tlm_status pst = pick ? tlm_lm_load_for(pick, base, &rt->target, base_file, perr, sizeof perr)
                          : TLM_ERR_OUT_OF_MEMORY;
    if (pick) tlm_lm_free(pick);
    free(pick);
    if (pst != TLM_OK) {
      fprintf(stderr, "tlm adapt: base model: %s\n", pst == TLM_ERR_OUT_OF_MEMORY ? "out of memory" : perr);
      tlm_destroy(rt);
      return 1;
    }
    base = base_file;
  }
  char outbuf[4096], recbuf[4096], ckpt[4200], cand[4200], gate_json[4224], tbuf[320];
  if (!out) out = tlm_adapted_model_path(rt, outbuf, sizeof outbuf);
  fprintf(stderr, "tlm adapt: target %s\n", tlm_target_str(&rt->target, tbuf, sizeof tbuf));
  tlm_destroy(rt);
  if (!out) {
    fprintf(stderr, "tlm adapt: no disk cache (TLM_CACHE_DIR=none): name the model with --out\n");
    return 2;
  }
  if (strlen(out) >= 4096) { /* the names below add up to 20 characters to it */
    fprintf(stderr, "tlm adapt: the model path is too long (%zu characters; at most 4095)\n",
            strlen(out));
    return 2;
  }
  if (!records) {
    int n = snprintf(recbuf, sizeof recbuf, "%s", out);
    char *dot = strrchr(recbuf, '.');
    if (dot && !strcmp(dot, ".tlmq")) *dot = 0;
    if (n <= 0 || strlen(recbuf) + 12 >= sizeof recbuf) {
      fprintf(stderr, "tlm adapt: the model path is too long for its measurements' file name\n");
      return 2;
    }
    strcat(recbuf, ".jsonl.gz");
    records = recbuf;
  }
  snprintf(ckpt, sizeof ckpt, "%s.ckpt.tmp", out);
  snprintf(cand, sizeof cand, "%s", out);
  char *dot = strrchr(cand, '.');
  if (dot && !strcmp(dot, ".tlmq")) *dot = 0;
  strcat(cand, ".candidate.tlmq");
  snprintf(gate_json, sizeof gate_json, "%s.gate.json", cand);
  if (tlm_disk_make_parents(out) || tlm_disk_make_parents(records)) {
    fprintf(stderr, "tlm adapt: cannot create the directory of %s: %s\n", out, strerror(errno));
    return 1;
  }
  fprintf(stderr, "tlm adapt: base model %s; measurements %s; model %s\n", base, records, out);

  /* 1. measure */
  char mins[32];
  snprintf(mins, sizeof mins, "%.3f", minutes * share);
  char *cargv[] = {"--shared", (char *)shared, "--out", (char *)records, "--adapt", (char *)base,
                   "--topk", (char *)topk, "--mutants", (char *)mutants, "--minutes", mins,
                   "--synthetic", (char *)synthetic};
  int rc = tlm_cmd_collect((int)(sizeof cargv / sizeof cargv[0]), cargv);
  if (rc) {
    fprintf(stderr, "tlm adapt: measuring failed\n");
    return rc;
  }
  /* 2. a fifth of the measured families set aside for the margin */
  aside_set aside;
  int naside = aside_choose(records, &aside);
  if (naside) {
    fprintf(stderr, "tlm adapt: %d families set aside (%d tasks) to choose the sentence margin on:",
            aside.nfamily, naside);
    for (int f = 0; f < aside.nfamily; f++) fprintf(stderr, "%s %s", f ? "," : "", aside.family[f]);
    fprintf(stderr, "\n");
  } else
    fprintf(stderr, "tlm adapt: no family set aside (no operator has three measured families yet): "
                    "the sentence margin stays the build's (%.2f nats)\n", TLM_LM_SENTENCE_MARGIN);
  /* 3. fine-tune on everything else measured here so far (the trainer
   * keeps the held-out families out), within the time left; 15 s for
   * loading the records and quantizing, and the evaluations' time (about
   * 0.4 s a task on 2 cores; the gate's 374 held-out tasks) */
  double gate_s = ((gate_tasks > 0 && gate_tasks < 374 ? gate_tasks : 374) + naside) * 0.4;
  double left = minutes * 60 - (now_s() - t0) - 15 - gate_s;
  if (left < 10) left = 10;
  char secs[32];
  snprintf(secs, sizeof secs, "%.0f", left);
  char *targv[24 + 2 * TLM_TRAIN_MAX_SKIP] = {
      "--records", (char *)records, "--init", (char *)base, "--out", ckpt, "--steps", "3000",
      "--pretrain", "0", "--lr", (char *)lr, "--seed", (char *)seed, "--shared", (char *)shared,
      "--max-seconds", secs, "--rule-prior", "--rule-prior-variants", (char *)prior_variants,
      "--synthetic", (char *)synthetic};
  int targc = 23;
  for (int f = 0; f < aside.nfamily; f++) {
    targv[targc++] = "--skip-family";
    targv[targc++] = aside.family[f];
  }
  rc = tlm_cmd_train(targc, targv);
  if (rc) {
    fprintf(stderr, "tlm adapt: fine-tuning failed\n");
    remove(ckpt);
    free(aside.specs);
    return rc;
  }
  /* 4. quantize (written atomically); 5. the margin: the set-aside tasks
   * with plain greedy decoding, then quantized again with the margin
   * recorded in the file (what tlm_run decodes with) */
  char *qargv[] = {ckpt, cand, NULL, NULL};
  rc = tlm_cmd_quantize(2, qargv);
  double margin = NAN;
  char mwhy[1024] = "", aside_json[4240];
  snprintf(aside_json, sizeof aside_json, "%s.margin.json", cand);
  if (!rc && naside) {
    tlm_eval_opts eo;
    tlm_eval_opts_init(&eo);
    eo.k = 0, eo.nrand = 0, eo.margin = 0, eo.model = cand, eo.json = aside_json;
    eo.shared = shared, eo.specs = aside.specs, eo.nspecs = naside;
    fprintf(stderr, "tlm adapt: the margin: the set-aside tasks, the new model's greedy picks "
                    "against the rule\n");
    if (tlm_eval_run(&eo) == 0) margin = margin_choose(aside_json, mwhy, sizeof mwhy);
    else snprintf(mwhy, sizeof mwhy, "the evaluation of the set-aside tasks failed");
    char mtext[32];
    snprintf(mtext, sizeof mtext, "%.2f", margin);
    if (!isnan(margin)) {
      qargv[2] = "--margin", qargv[3] = mtext;
      rc = tlm_cmd_quantize(4, qargv);
    }
    if (isnan(margin))
      fprintf(stderr, "tlm adapt: sentence margin the build's (%.2f nats): %s\n", TLM_LM_SENTENCE_MARGIN,
              mwhy);
    else fprintf(stderr, "tlm adapt: sentence margin %s: %s\n", mtext, mwhy);
  }
  free(aside.specs);
  remove(ckpt);
  if (rc) return rc;
  /* 6. the gate, 7. install where tlm_create looks */
  char ntasks[16];
  snprintf(ntasks, sizeof ntasks, "%d", gate_tasks > 0 ? gate_tasks : 1 << 30);
  char mtext[32];
  snprintf(mtext, sizeof mtext, "%.2f", isnan(margin) ? TLM_LM_SENTENCE_MARGIN : margin);
  char *eargv[] = {"--heldout", "--k", "0", "--random", "0", "--model", cand, "--shared",
                   (char *)shared, "--json", gate_json, "--max-tasks", ntasks, "--margin", mtext};
  fprintf(stderr, "tlm adapt: the gate: held-out tasks, the new model's picks against the rule's\n");
  rc = tlm_cmd_eval((int)(sizeof eargv / sizeof eargv[0]), eargv);
  char why[1024] = "";
  int pass = rc == 0 && gate_passes(gate_json, why, sizeof why);
  if (rc) snprintf(why, sizeof why, "the evaluation failed");
  if (!pass && !force) {
    fprintf(stderr,
            "tlm adapt: not installed: %s. The model is left as %s (results: %s); new shapes keep "
            "their scheduler; --force installs it anyway. More minutes measure more tasks.\n",
            why, cand, gate_json);
    return 0;
  }
  if (rename(cand, out)) {
    fprintf(stderr, "tlm adapt: cannot install %s: %s\n", out, strerror(errno));
    return 1;
  }
  fprintf(stderr, "tlm adapt: gate %s: %s\n", pass ? "passed" : "failed, installed (--force)", why);
  fprintf(stderr,
          "tlm adapt: done in %.1f min; tlm_create loads %s by default on this CPU at this ISA "
          "(TLM_MODEL overrides; delete the file to go back to the shipped model)\n",
          (now_s() - t0) / 60, out);
  return 0;
}
