/* pipeline.c - the command-line front end of the offline pipeline (train/):
 * `tlm collect`, `tlm train`, `tlm quantize`, `tlm bound` and `tlm eval`
 * parse their arguments into the options of train/ and run it. */
#include "tools/pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lm/model.h"
#include "train/collect.h"
#include "train/eval.h"
#include "train/tasks.h"
#include "train/train.h"

/* ---- tlm collect ------------------------------------------------------------ */

static void usage_collect(void) {
  fprintf(stderr,
          "usage: tlm collect [--shared DIR] [--out FILE] [--schedules N] [--threads N]\n"
          "                   [--min-time-ms T] [--max-tasks N] [--seed S] [--list]\n"
          "                   [--propose MODEL [--topk K] [--round R]]\n"
          "                   [--mutate N [--round R]] [--verify K [--round R]]\n"
          "                   [--known FILE] [--adapt MODEL [--topk K] [--mutants M]]\n"
          "                   [--minutes M]\n"
          "                   [--synthetic N] [--synthetic-conv N]\n"
          "  Measures the default and random schedules of every task drawn from\n"
          "  DIR/workloads (default ../shared) and appends JSON-lines records to FILE\n"
          "  (default data/records.jsonl.gz). Resumes: tasks with N records are skipped.\n"
          "  --propose: a fine-tuning round instead: MODEL's top-K schedules (default\n"
          "  8) of every training task (held-out families skipped) are measured and\n"
          "  recorded with kind \"model\" and round R (default 1); training then\n"
          "  keeps the best schedule per task, proposals included.\n"
          "  --mutate: a local-search round instead: N new schedules per training task,\n"
          "  each 1-3 decisions away from one of the task's four best measured so far\n"
          "  (the records, then this round's own), kind \"mutant\" and round R.\n"
          "  --verify: a verification round: the rule and the K fastest distinct\n"
          "  schedules recorded for each training task are re-timed side by side (5\n"
          "  interleaved rounds, --min-time-ms in all per schedule), kind \"verify\"\n"
          "  and round R; training prefers these times to the separate records'.\n"
          "  --known FILE: --mutate and --verify draw the measured schedules from\n"
          "  FILE instead of --out (a round on another CPU into its own file).\n"
          "  --adapt MODEL: an adaptation round (tlm adapt): the rule, MODEL's top-K\n"
          "  schedules for this target (default 8; whatever hardware MODEL was\n"
          "  trained on; \"none\": no proposals) and M schedules 1-3 decisions from\n"
          "  the rule (default 4) of every training task, checked and timed side by\n"
          "  side as --verify does (kind \"verify\", round R).\n"
          "  --minutes M: start no task after M minutes (the rest on the next run).\n"
          "  --synthetic N: the task list also holds the layers of N synthetic\n"
          "  transformer models (more shapes to learn from; training families).\n"
          "  --synthetic-conv N: also the convolutions of N synthetic mobile\n"
          "  networks (inverted-residual blocks; training families). Pass the same\n"
          "  --synthetic and --synthetic-conv to every round of one data set.\n");
}

int tlm_cmd_collect(int argc, char **argv) {
  tlm_collect_opts o;
  tlm_collect_opts_init(&o);
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--shared") && v) o.shared = argv[++i];
    else if (!strcmp(a, "--out") && v) o.out = argv[++i];
    else if (!strcmp(a, "--schedules") && v) o.schedules = atoi(argv[++i]);
    else if (!strcmp(a, "--threads") && v) o.threads = atoi(argv[++i]);
    else if (!strcmp(a, "--min-time-ms") && v) o.min_time_ms = atof(argv[++i]);
    else if (!strcmp(a, "--max-tasks") && v) o.max_tasks = atoi(argv[++i]);
    else if (!strcmp(a, "--seed") && v) o.seed = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(a, "--list")) o.list = 1;
    else if (!strcmp(a, "--propose") && v) o.propose = argv[++i];
    else if (!strcmp(a, "--topk") && v) o.topk = atoi(argv[++i]);
    else if (!strcmp(a, "--round") && v) o.round_no = atoi(argv[++i]);
    else if (!strcmp(a, "--mutate") && v) o.mutate = atoi(argv[++i]);
    else if (!strcmp(a, "--verify") && v) o.verify = atoi(argv[++i]);
    else if (!strcmp(a, "--known") && v) o.known_path = argv[++i];
    else if (!strcmp(a, "--adapt") && v) o.adapt = argv[++i];
    else if (!strcmp(a, "--mutants") && v) o.mutants = atoi(argv[++i]);
    else if (!strcmp(a, "--minutes") && v) o.minutes = atof(argv[++i]);
    else if (!strcmp(a, "--synthetic") && v) tlm_tasks_set_synthetic(atoi(argv[++i]));
    else if (!strcmp(a, "--synthetic-conv") && v) tlm_tasks_set_synthetic_conv(atoi(argv[++i]));
    else {
      usage_collect();
      return !strcmp(a, "--help") || !strcmp(a, "-h") ? 0 : 2;
    }
  }
  if (tlm_collect_opts_check(&o)) {
    usage_collect();
    return 2;
  }
  return tlm_collect_run(&o);
}

/* ---- tlm train, tlm quantize, tlm bound ------------------------------------- */

static void usage_train(void) {
  fprintf(stderr,
          "usage: tlm train --records FILE --out CKPT [--steps N] [--pretrain N] [--batch B]\n"
          "                 [--layers L] [--heads H] [--width C] [--lr LR] [--seed S]\n"
          "                 [--shared DIR] [--threads N] [--rule-margin F] [--targets latest|mean]\n"
          "                 [--init MODEL] [--max-seconds S] [--epilogue-variants]\n"
          "  Trains the tensor language model (fp32) on the best measured schedule of\n"
          "  every training task in the records (held-out families excluded), after\n"
          "  --pretrain steps on random schedules of the same tasks. Deterministic for\n"
          "  the same data, seed and machine. A task whose rule schedule (the\n"
          "  prompt's) measured within --rule-margin (default 0.03 = 3%%) of its best,\n"
          "  or within the spread of the rule's own samples, is taught the rule: a\n"
          "  smaller gain is measurement noise. Where a task has a verification round\n"
          "  (collect --verify), its latest one decides instead: the fastest schedule\n"
          "  of that side-by-side timing, or the rule if within --rule-margin of it.\n"
          "  --targets mean: rank by the mean over all verification rounds of each\n"
          "  schedule's time relative to the rule's in the same round instead.\n"
          "  --near F (e.g. 0.02): also teach every verified schedule within F of the\n"
          "  task's best that beats the rule by --rule-margin (its equals in noise).\n"
          "  --max-round R: leave out verification rounds after R.\n"
          "  --skip-family TEXT: leave out the tasks whose family contains TEXT\n"
          "  (e.g. synth: the data before the synthetic models), their measured\n"
          "  targets and their --rule-prior sentences; repeatable (64 at most).\n"
          "  --pretrain-variants V: pretrain also on V copies of each matmul and\n"
          "  convolution task with its extents scaled by 2^u, u in [-1.5, 1.5]\n"
          "  (unmeasured: random schedules only).\n"
          "  --equal-within F (e.g. 0.02): the verified schedules within F of the task's\n"
          "  best that beat the rule by --rule-margin are its equals in noise; of them\n"
          "  teach the one with the fewest decisions changed from the rule\n"
          "  (--pick edits, the default) or the one whose decisions agree most\n"
          "  with the picks of the other tasks of its family (--pick consensus:\n"
          "  three rounds of voting); ties: the faster.\n"
          "  --good F --good-per-task K (default 16): teach, for every task, its\n"
          "  K fastest distinct measured schedules at least 1 + F times as fast as\n"
          "  the rule (its fastest record) instead of its one best; a task with\n"
          "  none keeps its usual target.\n"
          "  --rule-targets drop: a task whose target would be the rule's schedule\n"
          "  is left out of fine-tuning (kept for pretraining), so the model never\n"
          "  learns the rule as an answer; teach (the default) keeps it.\n"
          "  --init MODEL: fine-tune MODEL (an int8 model file, its weights\n"
          "  dequantized, or an fp32 checkpoint; its layers, heads and width)\n"
          "  instead of a new model.\n"
          "  --max-seconds S: fine-tuning steps cut to those that fit in about S\n"
          "  seconds (measured over the first 10), the learning-rate decay with them.\n"
          "  --rule-prior: also teach the rule's schedule for this host's target on\n"
          "  every training task of the collection's list (tlm collect --list, with\n"
          "  --synthetic N as collect's) that has no record: unmeasured, the\n"
          "  target-derived rule is the answer to keep; measured tasks override it\n"
          "  where a schedule beat the rule. What `tlm adapt` uses, so that a model\n"
          "  fine-tuned on few measurements of a new target falls back on that\n"
          "  target's rule for shapes unlike those measured.\n"
          "  --rule-prior-variants V (0-16, with --rule-prior): the rule also on V\n"
          "  copies of each listed task with its extents scaled by 2^u, u in\n"
          "  [-1.5, 1.5] (not on a measured task): the shapes between the list's.\n"
          "  --epilogue-variants: teach each convolution's target also on the same\n"
          "  layer with a bare epilogue and with bias and ReLU (the epilogue runs once\n"
          "  per output after the reduction, and the records hold most layers under\n"
          "  one epilogue only).\n"
          "  --unmeasured-rule best|skip|rule: a task (on one machine) whose records\n"
          "  never timed the current rule's schedule (they predate a rule change)\n"
          "  cannot say whether its best beats that rule: teach nothing (skip, the\n"
          "  default), its best anyway (best: every model before candidate 29), or\n"
          "  the rule (rule).\n");
}
int tlm_cmd_train(int argc, char **argv) {
  tlm_train_opts o;
  tlm_train_opts_init(&o);
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--records") && v) o.records = argv[++i];
    else if (!strcmp(a, "--out") && v) o.out = argv[++i];
    else if (!strcmp(a, "--shared") && v) o.shared = argv[++i];
    else if (!strcmp(a, "--steps") && v) o.steps = atoi(argv[++i]);
    else if (!strcmp(a, "--pretrain") && v) o.pretrain = atoi(argv[++i]);
    else if (!strcmp(a, "--pretrain-variants") && v) o.variants = atoi(argv[++i]);
    else if (!strcmp(a, "--batch") && v) o.batch = atoi(argv[++i]);
    else if (!strcmp(a, "--layers") && v) o.layers = atoi(argv[++i]);
    else if (!strcmp(a, "--heads") && v) o.heads = atoi(argv[++i]);
    else if (!strcmp(a, "--width") && v) o.width = atoi(argv[++i]);
    else if (!strcmp(a, "--threads") && v) o.threads = atoi(argv[++i]);
    else if (!strcmp(a, "--lr") && v) o.lr = (float)atof(argv[++i]);
    else if (!strcmp(a, "--rule-margin") && v) o.rule_margin = atof(argv[++i]);
    else if (!strcmp(a, "--targets") && v && (!strcmp(argv[i + 1], "latest") || !strcmp(argv[i + 1], "mean")))
      o.mean_targets = !strcmp(argv[++i], "mean");
    else if (!strcmp(a, "--seed") && v) o.seed = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(a, "--near") && v) o.near = atof(argv[++i]);
    else if (!strcmp(a, "--skip-family") && v && o.nskip_family < TLM_TRAIN_MAX_SKIP)
      o.skip_family[o.nskip_family++] = argv[++i];
    else if (!strcmp(a, "--equal-within") && v) o.equal_within = atof(argv[++i]);
    else if (!strcmp(a, "--pick") && v && !strcmp(argv[i + 1], "edits")) i++;
    else if (!strcmp(a, "--pick") && v && !strcmp(argv[i + 1], "consensus")) o.consensus = 1, i++;
    else if (!strcmp(a, "--rule-targets") && v && !strcmp(argv[i + 1], "teach")) i++;
    else if (!strcmp(a, "--rule-targets") && v && !strcmp(argv[i + 1], "drop")) o.drop_rule = 1, i++;
    else if (!strcmp(a, "--good") && v) o.good = atof(argv[++i]);
    else if (!strcmp(a, "--good-per-task") && v) o.good_k = atoi(argv[++i]);
    else if (!strcmp(a, "--max-round") && v) o.max_round = atoi(argv[++i]);
    else if (!strcmp(a, "--init") && v) o.init = argv[++i];
    else if (!strcmp(a, "--max-seconds") && v) o.max_seconds = atof(argv[++i]);
    else if (!strcmp(a, "--rule-prior")) o.rule_prior = 1;
    else if (!strcmp(a, "--rule-prior-variants") && v) o.rule_prior_variants = atoi(argv[++i]);
    else if (!strcmp(a, "--epilogue-variants")) o.epilogue_variants = 1;
    else if (!strcmp(a, "--unmeasured-rule") && v && !strcmp(argv[i + 1], "best")) o.unmeasured_rule = 0, i++;
    else if (!strcmp(a, "--unmeasured-rule") && v && !strcmp(argv[i + 1], "skip")) o.unmeasured_rule = 1, i++;
    else if (!strcmp(a, "--unmeasured-rule") && v && !strcmp(argv[i + 1], "rule")) o.unmeasured_rule = 2, i++;
    else if (!strcmp(a, "--synthetic") && v) tlm_tasks_set_synthetic(atoi(argv[++i]));
    else {
      usage_train();
      return !strcmp(a, "--help") || !strcmp(a, "-h") ? 0 : 2;
    }
  }
  if (tlm_train_opts_check(&o)) {
    usage_train();
    return 2;
  }
  return tlm_train_run(&o);
}

int tlm_cmd_quantize(int argc, char **argv) {
  const char *pos[2] = {NULL, NULL}, *only[TLM_LM_MAX_HW];
  int npos = 0, nonly = 0, bad = 0;
  double margin = NAN;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--only-hw") && i + 1 < argc && nonly < TLM_LM_MAX_HW) only[nonly++] = argv[++i];
    else if (!strcmp(argv[i], "--margin") && i + 1 < argc) {
      char *end;
      const char *text = argv[++i];
      margin = strtod(text, &end);
      if (end == text || *end || !(margin >= 0 && margin <= 1000)) bad = 1;
    }
    else if (argv[i][0] != '-' && npos < 2) pos[npos++] = argv[i];
    else bad = 1;
  }
  if (bad || npos != 2) {
    fprintf(stderr,
"usage: tlm quantize CKPT MODEL [--only-hw PROMPT]... [--margin NATS]\n"
            "  Quantizes an fp32 checkpoint from `tlm train` to the int8 model file\n"
            "  the runtime loads (blocks of 32 weights, one scale each).\n"
            "  --only-hw PROMPT: list only these of the checkpoint's hardware prompts\n"
            "  (as `tlm train` prints them, e.g. \"isa:avx512 fma:512 cores:1 l1:5 l2:10\n"
            "  l3:18\"; repeatable), so the model serves only the machines it was gated\n"
            "  on and the rule schedules everywhere else.\n"
            "  --margin NATS: the sentence margin of selective decoding the model was\n"
            "  gated at (tlm eval --margin), recorded in the file for tlm_run: 0 is\n"
            "  plain greedy; without it the runtime's default (2 nats).\n");
    return argc == 1 && !strcmp(argv[0], "--help") ? 0 : 2;
  }
  return tlm_quantize_run(pos[0], pos[1], only, nonly, margin);
}

int tlm_cmd_bound(int argc, char **argv) {
  const char *records = NULL, *skip_family = NULL;
  for (int i = 0; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(argv[i], "--records") && v) records = argv[++i];
    else if (!strcmp(argv[i], "--skip-family") && v) skip_family = argv[++i];
    else {
      fprintf(stderr,
              "usage: tlm bound --records FILE [--skip-family TEXT]\n"
              "  For every pair of verification rounds (A, B) of the training tasks:\n"
              "  pick each task's fastest schedule in round A (the rule when nothing\n"
              "  beat it there) and count the tasks where it beats the rule in round B,\n"
              "  by any margin and by more than 2%%, and where it is slower by more than\n"
              "  2%%. A winner that round B did not time counts as not faster.\n");
      return !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h") ? 0 : 2;
    }
  }
  if (!records) {
    fprintf(stderr, "tlm bound: --records FILE is required\n");
    return 2;
  }
  return tlm_bound_run(records, skip_family);
}


/* ---- tlm eval ---------------------------------------------------------------- */

static void usage_eval(void) {
  fprintf(stderr,
          "usage: tlm eval [--k K] [--random N] [--model MODEL] [--threads T] [--json FILE]\n"
          "                [--max-tasks N] [--max-gflop G] [--heldout] [--shared DIR]\n"
          "                [--random-cache F] [--rule-bonus B] [--margin T] [--skip N]\n"
          "                [--rounds R]\n"
          "                [--family TEXT] [FILE...]\n"
          "  FILE: benchdnn matmul or convolution shape files (convolutions in NHWC at\n"
          "  minibatch 1). --heldout: the held-out families of the\n"
          "  collection's task list. Tasks above 4 GFLOP have M reduced, as in collect.\n"
          "  Random search measures N distinct schedules (fewer when the space is\n"
          "  smaller). --random-cache F: reuse (and add to) random-search results in F\n"
          "  (JSON) for the same task, N and machine; their times then come from the\n"
          "  run that measured them, not from this one. --max-gflop G: leave out tasks\n"
          "  above G GFLOP (before --max-tasks). --rule-bonus B: decode with B added to\n"
          "  the log-probability of the rule's value (default TLM_LM_RULE_BONUS, 0: plain greedy,\n"
          "  < 0: a penalty on the rule's values). --margin T: TLM-1 is the greedy\n"
          "  schedule only where the model finds it at least e^T times as probable\n"
          "  as the rule's (default TLM_LM_SENTENCE_MARGIN; 0: plain greedy, whose\n"
          "  tlm1_logp and default_logp in --json then tell any margin's result).\n"
          "  --random 0: no random search; speeds are then relative to the rule (a\n"
          "  head-to-head of TLM-1 and the rule that affords every held-out task).\n"
          "  --k 0: no TLM-k. --skip N: leave out the first N tasks (after\n"
          "  --max-gflop; e.g. a validation set first, a test set after it).\n"
          "  --rounds R: rounds of the side-by-side final (default 7, at most 15).\n"
          "  --family TEXT: only the tasks whose family contains TEXT (first).\n");
}
int tlm_cmd_eval(int argc, char **argv) {
  tlm_eval_opts o;
  tlm_eval_opts_init(&o);
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    int more = i + 1 < argc;
    if (!strcmp(a, "--k") && more) o.k = atoi(argv[++i]);
    else if (!strcmp(a, "--random") && more) o.nrand = atoi(argv[++i]);
    else if (!strcmp(a, "--model") && more) o.model = argv[++i];
    else if (!strcmp(a, "--threads") && more) o.threads = atoi(argv[++i]);
    else if (!strcmp(a, "--json") && more) o.json = argv[++i];
    else if (!strcmp(a, "--max-tasks") && more) o.max_tasks = atoi(argv[++i]);
    else if (!strcmp(a, "--skip") && more) o.skip = atoi(argv[++i]);
    else if (!strcmp(a, "--rounds") && more) o.rounds = atoi(argv[++i]);
    else if (!strcmp(a, "--shared") && more) o.shared = argv[++i];
    else if (!strcmp(a, "--heldout")) o.heldout = 1;
    else if (!strcmp(a, "--family") && more) o.family = argv[++i];
    else if (!strcmp(a, "--random-cache") && more) o.rcache_path = argv[++i];
    else if (!strcmp(a, "--max-gflop") && more) o.max_gflop = atof(argv[++i]);
    else if (!strcmp(a, "--rule-bonus") && more) o.rule_bonus = atof(argv[++i]);
    else if (!strcmp(a, "--margin") && more) o.margin = atof(argv[++i]);
    else if (a[0] == '-') {
      usage_eval();
      return !strcmp(a, "--help") ? 0 : 2;
    } else if (o.nfiles < TLM_EVAL_MAX_FILES) o.files[o.nfiles++] = a;
  }
  if (tlm_eval_opts_check(&o)) {
    usage_eval();
    return 2;
  }
  return tlm_eval_run(&o);
}
