/* collect.c - `tlm collect`: measured schedules for the language model.
 *
 * For each task of tlm_tasks_build(): the default schedule and random
 * schedules from the full space are compiled, checked against the reference
 * on sampled outputs, and timed warm (repeats until --min-time-ms, median,
 * min and max kept). Failures are records too. Each finished task is
 * appended to the output as one gzip member of JSON lines, so an
 * interrupted run loses at most the task in progress and resumes where it
 * stopped.
 *
 * Record (one JSON object per line):
 *   {"v":1,"hw":"...","threads":2,"task":"<task text>","family":"...",
 *    "kind":"default"|"random","seed":N,"sched":[...],"status":"ok"|
 *    "compile_error"|"wrong"|"run_error","ns":median,"ns_min":..,"ns_max":..,
 *    "reps":N,"compile_ms":..}
 */
#include "collect.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>
#include <zlib.h>

#include "api/validate.h"
#include "runtime/engine.h"
#include "tools/measure.h"
#include "tools/tasks.h"
#include "tools/train.h"

#define RECORD_VERSION 1

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- reading records back ------------------------------------------------ */

int tlm_records_read(const char *path, tlm_record_fn fn, void *ctx) {
  gzFile f = gzopen(path, "rb");
  if (!f) return -1;
  char *line = malloc(1 << 16);
  int n = 0;
  while (line && gzgets(f, line, 1 << 16)) {
    cJSON *r = cJSON_Parse(line);
    if (!r) continue; /* a torn last member reads as garbage: skip it */
    const cJSON *v = cJSON_GetObjectItem(r, "v");
    if (cJSON_IsNumber(v) && v->valueint == RECORD_VERSION) {
      n++;
      if (fn && fn(ctx, r)) {
        cJSON_Delete(r);
        break;
      }
    }
    cJSON_Delete(r);
  }
  free(line);
  gzclose(f);
  return n;
}

/* ---- collection ------------------------------------------------------------ */

/* schedule number s of a task: 0 is the default rule, the rest random */
static void schedule_for(const tlm_space *space, uint64_t task_seed, int s, tlm_schedule *out) {
  if (s == 0) {
    tlm_space_default(space, out);
  } else {
    uint64_t r = task_seed + (uint64_t)s;
    tlm_space_sample(space, &r, out);
  }
}

typedef struct prefetch {
  tlm_runtime *rt;
  const tlm_task *task;
  tlm_schedule sched;
  int status;
} prefetch;

static void *prefetch_main(void *arg) {
  prefetch *p = arg;
  tlm_kernel *k;
  char err[256];
  p->status = tlm_engine_kernel(p->rt, p->task, &p->sched, &k, err, sizeof err);
  return NULL;
}

typedef struct done_count {
  char **task;
  int *count;
  int n, cap;
  int round; /* > 0: count only the model proposals of this round */
} done_count;

static int count_record(void *ctx, const cJSON *r) {
  done_count *d = ctx;
  const cJSON *t = cJSON_GetObjectItem(r, "task");
  if (!cJSON_IsString(t)) return 0;
  if (d->round > 0) {
    const cJSON *k = cJSON_GetObjectItem(r, "kind"), *rd = cJSON_GetObjectItem(r, "round");
    if (!cJSON_IsString(k) || strcmp(k->valuestring, "model") || !cJSON_IsNumber(rd) ||
        (int)rd->valuedouble != d->round)
      return 0;
  }
  for (int i = 0; i < d->n; i++)
    if (!strcmp(d->task[i], t->valuestring)) {
      d->count[i]++;
      return 0;
    }
  if (d->n == d->cap) {
    d->cap = d->cap ? d->cap * 2 : 1024;
    d->task = realloc(d->task, (size_t)d->cap * sizeof *d->task);
    d->count = realloc(d->count, (size_t)d->cap * sizeof *d->count);
    if (!d->task || !d->count) return 1;
  }
  d->task[d->n] = strdup(t->valuestring);
  d->count[d->n++] = 1;
  return 0;
}

static int done_for(const done_count *d, const char *task) {
  for (int i = 0; i < d->n; i++)
    if (!strcmp(d->task[i], task)) return d->count[i];
  return 0;
}

typedef struct buf {
  char *p;
  size_t len, cap;
} buf;

static void buf_add(buf *b, const char *s) {
  size_t n = strlen(s);
  if (b->len + n + 1 > b->cap) {
    size_t cap = (b->len + n + 1) * 2;
    char *p = realloc(b->p, cap);
    if (!p) return;
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n + 1);
  b->len += n;
}

static void usage(void) {
  fprintf(stderr,
          "usage: tlm collect [--shared DIR] [--out FILE] [--schedules N] [--threads N]\n"
          "                   [--min-time-ms T] [--max-tasks N] [--seed S] [--list]\n"
          "                   [--propose MODEL [--topk K] [--round R]]\n"
          "  Measures the default and random schedules of every task drawn from\n"
          "  DIR/workloads (default ../shared) and appends JSON-lines records to FILE\n"
          "  (default data/records.jsonl.gz). Resumes: tasks with N records are skipped.\n"
          "  --propose: a fine-tuning round instead: MODEL's top-K schedules (default\n"
          "  8) of every training task (held-out families skipped) are measured and\n"
          "  recorded with kind \"model\" and round R (default 1); training then\n"
          "  keeps the best schedule per task, proposals included.\n");
}

int tlm_cmd_collect(int argc, char **argv) {
  const char *shared = "../shared", *out = "data/records.jsonl.gz";
  int schedules = 32, threads = 2, max_tasks = 1 << 30, list = 0;
  double min_time_ms = 10;
  uint64_t seed = 1;
  const char *propose = NULL;
  int topk = 8, round_no = 1;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--shared") && i + 1 < argc) shared = argv[++i];
    else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
    else if (!strcmp(argv[i], "--schedules") && i + 1 < argc) schedules = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--min-time-ms") && i + 1 < argc) min_time_ms = atof(argv[++i]);
    else if (!strcmp(argv[i], "--max-tasks") && i + 1 < argc) max_tasks = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--list")) list = 1;
    else if (!strcmp(argv[i], "--propose") && i + 1 < argc) propose = argv[++i];
    else if (!strcmp(argv[i], "--topk") && i + 1 < argc) topk = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--round") && i + 1 < argc) round_no = atoi(argv[++i]);
    else {
      usage();
      return !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h") ? 0 : 2;
    }
  }
  if (propose) schedules = topk;
  if (schedules < 1 || threads < 1 || min_time_ms <= 0 || topk < 1 || topk > 64 || round_no < 1) {
    usage();
    return 2;
  }
  char err[512];
  tlm_task_spec *tasks;
  int ntasks = tlm_tasks_build(shared, seed, &tasks, err, sizeof err);
  if (ntasks < 0) {
    fprintf(stderr, "tlm collect: %s\n", err);
    return 1;
  }
  /* visit families round-robin, so a partial collection covers them all */
  if (tlm_tasks_interleave(tasks, ntasks)) {
    fprintf(stderr, "tlm collect: out of memory\n");
    free(tasks);
    return 1;
  }
  if (list) {
    for (int i = 0; i < ntasks; i++) printf("%-28s %s\n", tasks[i].family, tasks[i].text);
    printf("%d tasks\n", ntasks);
    free(tasks);
    return 0;
  }
  done_count done = {0};
  done.round = propose ? round_no : 0;
  int have = tlm_records_read(out, count_record, &done);
  if (have > 0) fprintf(stderr, "tlm collect: %s holds %d records; resuming\n", out, have);
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.cache_dir = "none"; /* measure compiles, never reuse them */
  cfg.num_threads = threads;
  cfg.model_path = propose ? propose : "none";
  int todo = 0;
  for (int i = 0; i < ntasks && i < max_tasks; i++)
    if (done_for(&done, tasks[i].text) < schedules &&
        !(propose && tlm_family_heldout(tasks[i].family)))
      todo++;
  double t_start = now_s();
  int measured = 0, tasks_done = 0;
  for (int ti = 0; ti < ntasks && ti < max_tasks; ti++) {
    tlm_task_spec *ts = &tasks[ti];
    int start = done_for(&done, ts->text);
    if (start >= schedules) continue;
    if (propose && tlm_family_heldout(ts->family)) continue; /* never trained on */
    /* a fresh runtime per task: its JIT memory goes with it */
    tlm_runtime *rt;
    if (tlm_create(&cfg, &rt)) {
      fprintf(stderr, "tlm collect: %s\n", tlm_last_error(NULL));
      return 1;
    }
    char hw[200];
    snprintf(hw, sizeof hw, "%s; %s", tlm_jit_cpu(rt->jit), tlm_target_str(&rt->target, err, 160));
    tlm_spec_problem p;
    if (tlm_spec_problem_make(ts, 7, &p)) {
      fprintf(stderr, "tlm collect: skipping %s: cannot build it\n", ts->text);
      tlm_destroy(rt);
      continue;
    }
    const tlm_task task = p.task;
    tlm_space space;
    tlm_space_init(&space, &task, &rt->target);
    uint64_t task_seed = XXH3_64bits(ts->text, strlen(ts->text)) ^ seed;
    buf out_buf = {0};
    double tol = tlm_spec_problem_tolerance(&p);
    double best_ns = INFINITY; /* fastest median of this task so far */
    /* proposal rounds: the model's top-k, distinct schedules in rank order */
    tlm_schedule top[64];
    int ntop = 0;
    if (propose) {
      if (!rt->model) {
        fprintf(stderr, "tlm collect: cannot load the model %s\n", propose);
        tlm_spec_problem_free(&p);
        tlm_destroy(rt);
        return 1;
      }
      ntop = tlm_lm_decode_topk(rt->model, &space, topk, top, NULL);
      if (ntop < 0) ntop = 0;
    }
    int task_schedules = propose ? ntop : schedules;
    for (int s = start; s < task_schedules; s++) {
      tlm_schedule sched;
      uint64_t sseed = task_seed + (uint64_t)s;
      if (propose) sched = top[s];
      else schedule_for(&space, task_seed, s, &sched);
      /* compile the next schedule on the other core meanwhile; timing
       * starts only when both compiles are done */
      prefetch pf = {rt, &task, {0}, 0};
      pthread_t th;
      int started = 0;
      if ((s - start) % 2 == 0 && s + 1 < task_schedules) {
        if (propose) pf.sched = top[s + 1];
        else schedule_for(&space, task_seed, s + 1, &pf.sched);
        started = pthread_create(&th, NULL, prefetch_main, &pf) == 0;
      }
      tlm_kernel *k0 = NULL;
      tlm_engine_kernel(rt, &task, &sched, &k0, err, sizeof err); /* result reused below */
      if (started) pthread_join(th, NULL);
      const char *status = "ok";
      double med = 0, lo = 0, hi = 0, compile_ms = 0;
      int reps = 0;
      tlm_kernel *k = NULL;
      if (tlm_engine_kernel(rt, &task, &sched, &k, err, sizeof err)) {
        status = "compile_error";
      } else {
        compile_ms = k->compile_ms;
        if (tlm_engine_exec(rt, k, &task, p.args, err, sizeof err)) {
          status = "run_error";
        } else {
          double e = tlm_spec_problem_check(&p, 64, sseed);
          if (!(e >= 0 && e <= tol)) {
            status = "wrong";
          } else {
            tlm_timing tm;
            tlm_time_kernel(rt, k, &task, p.args, min_time_ms, best_ns, &tm);
            med = tm.median_ns, lo = tm.min_ns, hi = tm.max_ns, reps = tm.reps;
            if (med < best_ns) best_ns = med;
          }
        }
      }
      cJSON *r = cJSON_CreateObject();
      cJSON_AddNumberToObject(r, "v", RECORD_VERSION);
      cJSON_AddStringToObject(r, "hw", hw);
      cJSON_AddNumberToObject(r, "threads", threads);
      cJSON_AddStringToObject(r, "task", ts->text);
      cJSON_AddStringToObject(r, "family", ts->family);
      cJSON_AddStringToObject(r, "kind", propose ? "model" : s == 0 ? "default" : "random");
      if (propose) cJSON_AddNumberToObject(r, "round", round_no);
      cJSON_AddNumberToObject(r, "seed", (double)s);
      cJSON *arr = cJSON_AddArrayToObject(r, "sched");
      for (int pnt = 0; pnt < sched.n; pnt++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber(sched.v[pnt]));
      cJSON_AddStringToObject(r, "status", status);
      cJSON_AddNumberToObject(r, "ns", round(med));
      cJSON_AddNumberToObject(r, "ns_min", round(lo));
      cJSON_AddNumberToObject(r, "ns_max", round(hi));
      cJSON_AddNumberToObject(r, "reps", reps);
      cJSON_AddNumberToObject(r, "compile_ms", round(compile_ms * 100) / 100);
      char *line = cJSON_PrintUnformatted(r);
      if (line) {
        buf_add(&out_buf, line);
        buf_add(&out_buf, "\n");
      }
      free(line);
      cJSON_Delete(r);
      measured++;
    }
    tlm_spec_problem_free(&p);
    tlm_destroy(rt);
    /* publish this task's records as one gzip member */
    gzFile gz = gzopen(out, "ab");
    if (!gz || gzwrite(gz, out_buf.p, (unsigned)out_buf.len) != (int)out_buf.len) {
      fprintf(stderr, "tlm collect: cannot append to %s\n", out);
      if (gz) gzclose(gz);
      free(out_buf.p);
      return 1;
    }
    gzclose(gz);
    free(out_buf.p);
    tasks_done++;
    double el = now_s() - t_start, rate = measured / el;
    double eta = rate > 0 ? (double)(todo - tasks_done) * schedules / rate : 0;
    fprintf(stderr, "[%d/%d tasks] %s: %d schedules, %.1f schedules/s, ETA %.0f min\n",
            tasks_done, todo, ts->text, task_schedules - start, rate, eta / 60);
  }
  for (int i = 0; i < done.n; i++) free(done.task[i]);
  free(done.task);
  free(done.count);
  free(tasks);
  fprintf(stderr, "tlm collect: %d schedules measured in %.0f s\n", measured, now_s() - t_start);
  return 0;
}
