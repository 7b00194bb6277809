/* runtime.c - a runtime's life: creating it from a checked configuration
 * (locks, kernel table, target, worker threads, scratch, the JIT, the model,
 * the disk cache) and destroying it (the background thread first, then
 * everything it used). api/tlm.c checks the configuration and calls these. */
#define _GNU_SOURCE /* dladdr, sched_getaffinity */
#include <dlfcn.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine.h"
#include "gpu_engine.h"
#include "../cache/disk.h"

static atomic_uint_fast64_t g_serial; /* runtimes ever created */

static void disk_warn(void *user, const char *message) {
  tlm_log(user, TLM_LOG_WARN, "%s", message);
}

/* The disk cache, unless cache_dir is "none"; a directory that cannot be
 * used safely means no disk cache (and one warning), never a failure. */
static void open_disk(tlm_runtime *rt, int64_t cap) {
  char dir[3072], err[512];
  if (rt->cache_dir && !strcmp(rt->cache_dir, "none")) return;
  if (!tlm_disk_default_dir(rt->cache_dir, dir, sizeof dir)) return;
  if (tlm_disk_open(dir, cap, disk_warn, rt, &rt->disk, err, sizeof err))
    tlm_log(rt, TLM_LOG_WARN, "no disk cache: %s", err);
}

/* The shipped models' folder's places, in order: beside the library that
 * holds this code (dladdr: <libdir>/../share/tlm/models for a shared
 * library, <bindir>/../share/... for a program linked statically), the
 * configured install prefix's, the source tree's. */
static int default_model_dirs(char paths[4][TLM_LM_PATH_MAX]) {
  int n = 0;
  Dl_info info;
  if (dladdr((void *)&tlm_engine_create, &info) && info.dli_fname && info.dli_fname[0] == '/') {
    const char *slash = strrchr(info.dli_fname, '/');
    int len = (int)(slash - info.dli_fname);
    snprintf(paths[n++], TLM_LM_PATH_MAX, "%.*s/%s", len, info.dli_fname, TLM_MODELS_FROM_LIBDIR);
    snprintf(paths[n++], TLM_LM_PATH_MAX, "%.*s/%s", len, info.dli_fname, TLM_MODELS_FROM_BINDIR);
  }
  snprintf(paths[n++], TLM_LM_PATH_MAX, "%s", TLM_INSTALLED_MODELS);
  snprintf(paths[n++], TLM_LM_PATH_MAX, "%s", TLM_SOURCE_MODELS);
  return n;
}

int tlm_engine_shipped_models(char *dir, size_t cap) {
  char found[4][TLM_LM_PATH_MAX], one[1][TLM_LM_PATH_MAX];
  int n = default_model_dirs(found);
  for (int i = 0; i < n; i++)
    if (tlm_lm_list_dir(found[i], one, 1) > 0) {
      if (strlen(found[i]) >= cap) return 0;
      memcpy(dir, found[i], strlen(found[i]) + 1);
      return 1;
    }
  return 0;
}

char *tlm_adapted_model_path(const tlm_runtime *rt, char *buf, size_t cap) {
  char dir[3072];
  if (rt->cache_dir && !strcmp(rt->cache_dir, "none")) return NULL;
  if (!tlm_disk_default_dir(rt->cache_dir, dir, sizeof dir)) return NULL;
  int n = snprintf(buf, cap, "%s/models/adapted-%s-%016llx.tlmq", dir, tlm_isa_name(rt->target.isa),
                   (unsigned long long)rt->target.cpu_id);
  return n > 0 && (size_t)n < cap ? buf : NULL;
}

/* The model `tlm adapt` made for this machine and ISA, when there is one
 * that loads and covers the target (else NULL, with a warning for a file
 * that is there but unusable). */
static tlm_lm_model *load_adapted(tlm_runtime *rt, char *path, size_t cap) {
  if (!tlm_adapted_model_path(rt, path, cap) || access(path, R_OK) != 0) return NULL;
  /* as the disk cache's files: a regular file of this user that no one
   * else may write, else another user of a shared cache directory would
   * choose this runtime's schedules */
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      (st.st_mode & (S_IWGRP | S_IWOTH))) {
    tlm_log(rt, TLM_LOG_WARN, "adapted model %s not used: not a regular file of this user, or "
            "writable by others", path);
    return NULL;
  }
  char err[512];
  tlm_lm_model *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  if (tlm_lm_load(m, path, err, sizeof err) != TLM_OK) {
    tlm_log(rt, TLM_LOG_WARN, "adapted model not used: %s", err);
    free(m);
    return NULL;
  }
  if (!tlm_lm_covers(m, &rt->target)) {
    tlm_log(rt, TLM_LOG_WARN, "adapted model %s not used: its rule version or hardware prompt is "
            "not this runtime's, or the runtime has other than one thread per core (run tlm "
            "adapt again, or use all cores)", path);
    tlm_lm_free(m);
    free(m);
    return NULL;
  }
  return m;
}

/* Says at TLM_LOG_ERROR level (TLM_VERBOSE >= 1) why model m, loaded from
 * path, does not cover rt's target (tlm_lm_covers is 0). */
static void log_not_covered(tlm_runtime *rt, const tlm_lm_model *m, const char *path) {
  /* its hardware prompt would be one it never saw: the rule is the
   * better guess (on an AVX2 EPYC the AVX-512 model ran at 0.39x of
   * best-of-64 random against the rule's 0.82x, issue #16) */
  if (m->rule_version < TLM_RULE_VERSION_MIN || m->rule_version > TLM_RULE_VERSION) {
    tlm_log(rt, TLM_LOG_ERROR,
            "model %s was trained against rule version %u, this build's rule is version %d "
            "(its prompts hold the rule's schedule): new shapes are scheduled by the rule",
            path, m->rule_version, TLM_RULE_VERSION);
  } else if (((m->isa_seen >> rt->target.isa) & 1u) && tlm_lm_covers_hw(m, &rt->target) &&
             !tlm_lm_covers_workers(&rt->target)) {
    tlm_log(rt, TLM_LOG_ERROR,
            "model %s answers for one worker per core (%d), this runtime has %d threads: new "
            "shapes are scheduled by the rule", path, rt->target.cores, rt->target.threads);
  } else if (((m->isa_seen >> rt->target.isa) & 1u) && !tlm_lm_covers_hw(m, &rt->target)) {
    /* the right ISA on a machine whose cores, caches or FMA width the
     * model never saw in a prompt */
    int32_t words[TLM_LM_HW_WORDS];
    char host[160], seen[TLM_LM_MAX_HW * 80] = "";
    tlm_lm_hw_words(&m->vocab, &rt->target, words);
    tlm_lm_hw_str(&m->vocab, words, host, sizeof host);
    for (uint32_t i = 0, len = 0; i < m->hw_seen.n && len < sizeof seen; i++) {
      char one[160];
      len += (uint32_t)snprintf(seen + len, sizeof seen - len, "%s(%s)", i ? ", " : "",
                                tlm_lm_hw_str(&m->vocab, m->hw_seen.tok[i], one, sizeof one));
    }
    tlm_log(rt, TLM_LOG_ERROR,
            "model %s was trained on the hardware prompts %s only; this machine's is (%s): "
            "new shapes are scheduled by the rule", path, seen[0] ? seen : "(none)", host);
  } else {
    char seen[64] = "";
    for (int i = 0, len = 0; i <= TLM_ISA_AVX512; i++)
      if ((m->isa_seen >> i) & 1u)
        len += snprintf(seen + len, sizeof seen - (size_t)len, "%s%s", len ? "," : "",
                        tlm_isa_name(i));
    tlm_log(rt, TLM_LOG_ERROR,
            "model %s was trained on %s hardware only; this runtime targets %s: new shapes "
            "are scheduled by the rule", path, seen, tlm_isa_name(rt->target.isa));
  }
}

/* Loads one model file: TLM_OK with *out set when it covers rt's target,
 * TLM_OK with *out NULL (and the reason logged) when it does not, else
 * tlm_lm_load's status and message. */
static tlm_status try_model(tlm_runtime *rt, const char *path, tlm_lm_model **out, char *err,
                            int errcap) {
  *out = NULL;
  tlm_lm_model *m = calloc(1, sizeof *m);
  if (!m) return TLM_ERR_OUT_OF_MEMORY;
  tlm_status st = tlm_lm_load(m, path, err, errcap);
  if (st != TLM_OK) {
    free(m);
    return st;
  }
  if (!tlm_lm_covers(m, &rt->target)) {
    log_not_covered(rt, m, path);
    tlm_lm_free(m);
    free(m);
    return TLM_OK;
  }
  *out = m;
  return TLM_OK;
}

/* The model: config/TLM_MODEL ("none" = no model; a file; or a folder,
 * whose *.tlmq files are tried in name order), else the adapted model of
 * this machine (tlm adapt), else the shipped folder (default_model_dirs)
 * when present. The first model that loads and covers the target
 * schedules; where none does, the rule, and why is logged at
 * TLM_LOG_ERROR level (TLM_VERBOSE >= 1). A model named explicitly must
 * load (every file of a folder named so); a shipped file that does not is
 * skipped with a warning. */
static tlm_status load_model(tlm_runtime *rt, char *err, int errcap) {
  const char *path = rt->model_path;
  if (path && !strcmp(path, "none")) {
    tlm_log(rt, TLM_LOG_INFO, "no model (TLM_MODEL=none): new shapes are scheduled by the rule");
    return TLM_OK;
  }
  int explicit = path != NULL;
  char shipped[TLM_LM_PATH_MAX];
  if (!path) {
    char adapted[4096];
    tlm_lm_model *am = load_adapted(rt, adapted, sizeof adapted);
    if (am) {
      rt->model = am;
      tlm_log(rt, TLM_LOG_ERROR,
              "model %s (tlm adapt, this machine): new shapes are scheduled by it (sentence margin "
              "%.2f nats)",
              adapted, am->sentence_margin);
      return TLM_OK;
    }
    if (!tlm_engine_shipped_models(shipped, sizeof shipped)) {
      tlm_log(rt, TLM_LOG_ERROR,
              "no model found (looked for *.tlmq in %s beside the library, then %s and %s): new "
              "shapes are scheduled by the rule", TLM_MODELS_FROM_LIBDIR, TLM_INSTALLED_MODELS,
              TLM_SOURCE_MODELS);
      return TLM_OK;
    }
    path = shipped;
  }
  enum { MAX_FILES = 64 };
  char (*files)[TLM_LM_PATH_MAX] = NULL;
  int n = 1;
  if (tlm_lm_is_dir(path)) {
    files = malloc(sizeof *files * MAX_FILES);
    if (!files) return TLM_ERR_OUT_OF_MEMORY;
    n = tlm_lm_list_dir(path, files, MAX_FILES);
    if (n <= 0) {
      free(files);
      /* only a folder named explicitly gets here (the shipped one has a
       * model: tlm_engine_shipped_models) */
      snprintf(err, (size_t)errcap, n < 0 ? "model folder %s cannot be read"
                                          : "model folder %s holds no *.tlmq file", path);
      return TLM_ERR_IO;
    }
  }
  tlm_status st = TLM_OK;
  for (int i = 0; i < n; i++) {
    const char *file = files ? files[i] : path;
    if (rt->model) {
      /* a folder named explicitly: every file must load, whichever
       * covers the target (else the outcome would depend on name order) */
      if (!explicit) break;
      tlm_lm_model *chk = calloc(1, sizeof *chk);
      if (!chk) {
        st = TLM_ERR_OUT_OF_MEMORY;
        break;
      }
      st = tlm_lm_load(chk, file, err, errcap);
      if (st == TLM_OK) tlm_lm_free(chk);
      free(chk);
      if (st != TLM_OK) break;
      continue;
    }
    tlm_lm_model *m;
    st = try_model(rt, file, &m, err, errcap);
    if (st != TLM_OK) {
      if (explicit || st == TLM_ERR_OUT_OF_MEMORY) break;
      tlm_log(rt, TLM_LOG_WARN, "shipped model not used: %s", err);
      st = TLM_OK;
      continue;
    }
    if (m) {
      rt->model = m;
      tlm_log(rt, TLM_LOG_INFO, "model %s: %d layers, width %d, int8 path %s: new shapes are "
              "scheduled by it", file, m->cfg.layers, m->cfg.width, tlm_lm_isa());
    }
  }
  free(files);
  return st;
}

tlm_status tlm_engine_create(const tlm_config *config, int64_t disk_cap_bytes, tlm_runtime **out,
                             char *err, int errcap) {
  *out = NULL;
  tlm_runtime *rt = calloc(1, sizeof *rt);
  if (!rt) {
    snprintf(err, (size_t)errcap, "runtime");
    return TLM_ERR_OUT_OF_MEMORY;
  }
  const tlm_config cfg = *config;
  rt->cfg = cfg;
  tlm_status st = TLM_OK;
  pthread_rwlock_init(&rt->map_lock, NULL);
  pthread_mutex_init(&rt->state_mu, NULL);
  pthread_cond_init(&rt->state_cv, NULL);
  pthread_mutex_init(&rt->exec_lock, NULL);
  pthread_rwlock_init(&rt->const_lock, NULL);
  tlm_engine_bg_init(rt);
  rt->prepack_limit = cfg.prepack_bytes;
  rt->serial = atomic_fetch_add(&g_serial, 1) + 1;
  tlm_map_init(&rt->plans);
  tlm_table_init(&rt->kernels, cfg.cache_capacity, cfg.cache_capacity_bytes);
  rt->cache_dir = cfg.cache_dir ? strdup(cfg.cache_dir) : NULL;
  rt->model_path = cfg.model_path ? strdup(cfg.model_path) : NULL;
  rt->cfg.cache_dir = rt->cache_dir;
  rt->cfg.model_path = rt->model_path;
  const char *so = getenv("TLM_SCHEDULE_OVERRIDE");
  rt->sched_override = so && *so ? strdup(so) : NULL;
  if (rt->sched_override)
    rt->sched_override_id = XXH64(rt->sched_override, strlen(rt->sched_override), 0x5c4edu) | 1;
  if ((cfg.cache_dir && !rt->cache_dir) || (cfg.model_path && !rt->model_path) ||
      (so && *so && !rt->sched_override)) {
    st = TLM_ERR_OUT_OF_MEMORY;
    snprintf(err, (size_t)errcap, "config strings");
    goto fail;
  }
  tlm_target_detect(&rt->target);
  if (tlm_target_restrict(&rt->target, cfg.isa - 1)) {
    st = TLM_ERR_UNSUPPORTED;
    snprintf(err, (size_t)errcap, "isa %s asked for, but this CPU runs at most %s",
             tlm_isa_name(cfg.isa - 1), tlm_isa_name(rt->target.host_isa));
    goto fail;
  }
  int threads = cfg.num_threads ? cfg.num_threads : rt->target.cores;
  rt->nthreads = threads;
  rt->target.threads = threads; /* the rule blocks for the workers it has */
  rt->target.passes = cfg.passes; /* in every key */
  if (tlm_pool_create(threads, &rt->pool)) {
    st = TLM_ERR_THREAD;
    snprintf(err, (size_t)errcap, "cannot start %d worker threads", threads - 1);
    goto fail;
  }
  rt->spin_ns = (int64_t)(cfg.spin_us ? cfg.spin_us : TLM_SPIN_US_DEFAULT) * 1000;
  /* more threads than CPUs the process may run on: a spinning worker
   * holds a CPU another of them needs (OpenMP runtimes shorten their spin
   * there too), so at most the short spin */
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0 && threads > CPU_COUNT(&allowed) &&
      rt->spin_ns > TLM_POOL_SPIN_SHORT_NS)
    rt->spin_ns = TLM_POOL_SPIN_SHORT_NS;
  tlm_pool_set_spin_ns(rt->pool, rt->spin_ns);
  rt->scratch = calloc((size_t)threads, sizeof *rt->scratch);
  if (!rt->scratch) {
    st = TLM_ERR_OUT_OF_MEMORY;
    snprintf(err, (size_t)errcap, "scratch table");
    goto fail;
  }
  if (tlm_jit_create(&rt->jit, rt->target.isa, err, errcap)) {
    st = TLM_ERR_JIT;
    goto fail;
  }
  if (!tlm_jit_llvm_options()) rt->target.passes |= TLM_PASSES_CODEGEN_LSR; /* in every key */
  if ((st = load_model(rt, err, errcap)) != TLM_OK) goto fail;
  open_disk(rt, disk_cap_bytes);
  *out = rt;
  return TLM_OK;
fail:
  tlm_engine_destroy(rt);
  return st;
}

void tlm_engine_stats(const tlm_runtime *rt, tlm_stats *out) {
  tlm_runtime *r = (tlm_runtime *)rt; /* atomics are read only */
  out->runs = atomic_load(&r->runs);
  out->cache_hits = atomic_load(&r->hits);
  out->cache_misses = atomic_load(&r->misses);
  out->cache_waits = atomic_load(&r->waits);
  out->decodes = atomic_load(&r->decodes);
  out->schedules = out->decodes + atomic_load(&r->rule_schedules);
  out->compiles = atomic_load(&r->compiles);
  out->compile_fail = atomic_load(&r->compile_fail);
  out->evictions = atomic_load(&r->evictions);
  out->disk_plan_hits = atomic_load(&r->disk_plan_hits);
  out->disk_kernel_hits = atomic_load(&r->disk_kernel_hits);
  pthread_rwlock_rdlock(&r->map_lock);
  out->kernels_resident = r->kernels.ready;
  out->code_bytes_resident = r->kernels.ready_bytes;
  pthread_rwlock_unlock(&r->map_lock);
  out->schedule_ms = atomic_load(&r->schedule_ms);
  out->compile_ms = atomic_load(&r->compile_ms);
  out->disk_load_ms = atomic_load(&r->disk_load_ms);
  out->tunes = atomic_load(&r->tunes);
  out->tune_improved = atomic_load(&r->tune_improved);
  out->tune_ms = atomic_load(&r->tune_ms);
  out->compile_ir_ms = atomic_load(&r->compile_ir_ms);
  out->compile_opt_ms = atomic_load(&r->compile_opt_ms);
  out->compile_emit_ms = atomic_load(&r->compile_emit_ms);
  out->compile_link_ms = atomic_load(&r->compile_link_ms);
  out->provisional = atomic_load(&r->provisional);
  out->upgrades = atomic_load(&r->upgrades);
  out->bg_rescues = atomic_load(&r->bg_rescues);
  out->prepacks = atomic_load(&r->prepacks);
  out->prepacked_bytes = atomic_load(&r->prepacked_bytes_pub);
}

/* a kernel of the table at destroy: its code, then the kernel */
static void free_kernel(tlm_table_entry *e, void *ctx) {
  tlm_runtime *rt = ctx;
  tlm_kernel *k = (tlm_kernel *)e;
  if (k->code) tlm_jit_unload(rt->jit, k->code);
  free(k);
}

void tlm_engine_destroy(tlm_runtime *rt) {
  if (!rt) return;
  tlm_engine_bg_stop(rt); /* first: the thread uses everything below */
  tlm_gpu_destroy(rt);
  if (rt->disk) { /* this runtime's counters into the directory's lifetime ones */
    tlm_stats s;
    tlm_engine_stats(rt, &s);
    if (s.runs || s.compiles) {
      tlm_disk_usage u = {1,
                          (int64_t)s.runs,
                          (int64_t)s.cache_hits,
                          (int64_t)s.cache_misses,
                          (int64_t)s.cache_waits,
                          (int64_t)s.compiles,
                          (int64_t)s.evictions,
                          (int64_t)s.disk_plan_hits,
                          (int64_t)s.disk_kernel_hits,
                          s.compile_ms,
                          s.disk_load_ms};
      tlm_disk_add_usage(rt->disk, &u);
    }
  }
  tlm_pool_destroy(rt->pool);
  if (rt->model) {
    tlm_lm_free(rt->model);
    free(rt->model);
  }
  if (rt->scratch) {
    for (int t = 0; t < rt->nthreads; t++) free(rt->scratch[t]);
    free(rt->scratch);
  }
  free(rt->wcopy);
  tlm_table_free(&rt->kernels, free_kernel, rt);
  for (size_t i = 0; i < rt->nplans; i++) free(rt->plan_list[i]);
  free(rt->plan_list);
  tlm_prepack_free_all(rt);
  tlm_disk_close(rt->disk);
  tlm_jit_destroy(rt->jit);
  tlm_map_free(&rt->plans);
  pthread_rwlock_destroy(&rt->map_lock);
  pthread_mutex_destroy(&rt->state_mu);
  pthread_cond_destroy(&rt->state_cv);
  pthread_mutex_destroy(&rt->exec_lock);
  pthread_rwlock_destroy(&rt->const_lock);
  free(rt->cache_dir);
  free(rt->model_path);
  free(rt->sched_override);
  tlm_error_clear(rt, 1);
  free(rt);
}
