/* disk.c - verified, atomically published disk cache entries. */
#define _GNU_SOURCE
#include "disk.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <llvm-c/Core.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "../runtime/status.h"

#define MAX_FILE_BYTES (64 << 20)

struct tlm_disk {
  char dir[3072];
  int64_t max_bytes;
  tlm_disk_warn_fn warn;
  void *user;
  pthread_mutex_t mu;
  unsigned warned; /* bit per warning kind */
  /* the running total (under mu): bytes of the cache's files as of the last
   * trim pass, plus what was stored since; pending: stored while a pass
   * runs */
  int64_t total, pending, trims;
  int scanned, trim_running, has_thread;
  /* set by tlm_disk_close: a trim pass in flight stops at its next file
   * (the next process's first store over the cap starts another) */
  atomic_int stop;
  pthread_t thread;
};

static void account_store(tlm_disk *d, int64_t bytes);

enum { W_PERM = 1, W_CORRUPT = 2, W_IO = 4, W_STALE = 8 };

static void warn_once(tlm_disk *d, unsigned kind, const char *fmt, const char *path) {
  pthread_mutex_lock(&d->mu);
  int first = !(d->warned & kind);
  d->warned |= kind;
  pthread_mutex_unlock(&d->mu);
  if (first && d->warn) {
    char msg[4096];
    snprintf(msg, sizeof msg, fmt, path);
    d->warn(d->user, msg);
  }
}

char *tlm_disk_default_dir(const char *configured, char *buf, size_t cap) {
  const char *e;
  if (configured && *configured) snprintf(buf, cap, "%s", configured);
  else if ((e = getenv("TLM_CACHE_DIR")) && *e) snprintf(buf, cap, "%s", e);
  else if ((e = getenv("XDG_CACHE_HOME")) && *e) snprintf(buf, cap, "%s/tlm", e);
  else if ((e = getenv("HOME")) && *e) snprintf(buf, cap, "%s/.cache/tlm", e);
  else return NULL;
  return buf;
}

/* a directory we may trust: real directory, ours, not writable by others */
static int dir_ok(const char *path) {
  struct stat st;
  if (lstat(path, &st) || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
      (st.st_mode & (S_IWGRP | S_IWOTH)))
    return 0;
  return 1;
}

int tlm_disk_make_parents(const char *path) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) return -1;
  int rc = 0;
  for (char *p = tmp + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      if (mkdir(tmp, 0700) && errno != EEXIST) rc = -1;
      *p = '/';
    }
  return rc;
}

static int make_dir(const char *path) {
  if (mkdir(path, 0700) && errno != EEXIST) return -1;
  return dir_ok(path) ? 0 : -1;
}

int tlm_disk_open(const char *dir, int64_t max_bytes, tlm_disk_warn_fn warn, void *user,
                  tlm_disk **out, char *err, int errcap) {
  *out = NULL;
  if (!dir || !*dir || strlen(dir) > 2800) {
    snprintf(err, (size_t)errcap, "no usable cache directory");
    return -1;
  }
  tlm_disk_make_parents(dir); /* e.g. ~/.cache; the directory itself is checked below */
  char sub[3100];
  if (make_dir(dir)) {
    snprintf(err, (size_t)errcap,
             "cache directory %s is not a directory owned by this user and closed to others",
             dir);
    return -1;
  }
  snprintf(sub, sizeof sub, "%s/plans", dir);
  int ok = make_dir(sub) == 0;
  snprintf(sub, sizeof sub, "%s/kernels", dir);
  ok &= make_dir(sub) == 0;
  if (!ok) {
    snprintf(err, (size_t)errcap, "cache subdirectories of %s are not safe to use", dir);
    return -1;
  }
  tlm_disk *d = calloc(1, sizeof *d);
  if (!d) return -1;
  snprintf(d->dir, sizeof d->dir, "%s", dir);
  d->max_bytes = max_bytes;
  d->warn = warn;
  d->user = user;
  pthread_mutex_init(&d->mu, NULL);
  *out = d;
  return 0;
}

void tlm_disk_close(tlm_disk *d) {
  if (!d) return;
  atomic_store(&d->stop, 1);
  tlm_disk_wait_trim(d);
  pthread_mutex_destroy(&d->mu);
  free(d);
}

const char *tlm_disk_dir(const tlm_disk *d) { return d->dir; }

/* ---- files ------------------------------------------------------------------ */

/* Reads a file that must be a regular file of ours, closed to others. */
static int read_checked(tlm_disk *d, const char *path, char **data, size_t *len) {
  *data = NULL;
  /* O_NONBLOCK: a FIFO planted as an entry must not block the open; the
   * S_ISREG check below then refuses it */
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ELOOP) warn_once(d, W_PERM, "cache entry %s is a symbolic link: ignored", path);
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      (st.st_mode & (S_IWGRP | S_IWOTH)) || st.st_size > MAX_FILE_BYTES) {
    warn_once(d, W_PERM, "cache entry %s is not a private regular file of this user: ignored",
              path);
    close(fd);
    return -1;
  }
  char *buf = malloc((size_t)st.st_size + 1);
  size_t got = 0;
  while (buf && got < (size_t)st.st_size) {
    ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  if (!buf || got != (size_t)st.st_size) {
    free(buf);
    return -1;
  }
  buf[got] = 0;
  *data = buf;
  *len = got;
  return 0;
}

static int write_atomic(tlm_disk *d, const char *sub, const char *name, const void *data,
                        size_t len) {
  char tmp[3200], path[3200];
  snprintf(tmp, sizeof tmp, "%s/%s/.tmp-XXXXXX", d->dir, sub);
  snprintf(path, sizeof path, "%s/%s/%s", d->dir, sub, name);
  int fd = mkstemp(tmp); /* mode 0600 */
  if (fd < 0) {
    warn_once(d, W_IO, "cannot write to the cache directory %s", d->dir);
    return -1;
  }
  const char *p = data;
  size_t put = 0;
  while (put < len) {
    ssize_t w = write(fd, p + put, len - put);
    if (w <= 0) break;
    put += (size_t)w;
  }
  int ok = put == len && fsync(fd) == 0;
  ok &= close(fd) == 0;
  if (!ok || rename(tmp, path)) {
    unlink(tmp);
    warn_once(d, W_IO, "cannot write to the cache directory %s", d->dir);
    return -1;
  }
  return 0;
}

static void key_name(const tlm_key *k, const char *ext, char *buf, size_t cap) {
  char hex[33];
  snprintf(buf, cap, "%s%s", tlm_key_hex(k, hex), ext);
}

static char *key_blob_hex(const tlm_key *k) {
  char *s = malloc((size_t)k->len * 2 + 1);
  if (!s) return NULL;
  for (uint32_t i = 0; i < k->len; i++) snprintf(s + 2 * i, 3, "%02x", k->bytes[i]);
  return s;
}

/* metadata common checks: format, kind, full key */
static cJSON *parse_meta(tlm_disk *d, const char *path, const char *kind, const tlm_key *key) {
  char *text;
  size_t len;
  if (read_checked(d, path, &text, &len)) return NULL;
  cJSON *j = cJSON_Parse(text);
  free(text);
  const cJSON *f = j ? cJSON_GetObjectItem(j, "format") : NULL;
  const cJSON *k = j ? cJSON_GetObjectItem(j, "kind") : NULL;
  const cJSON *kb = j ? cJSON_GetObjectItem(j, "key") : NULL;
  char *want = key_blob_hex(key);
  int ok = j && cJSON_IsNumber(f) && f->valueint == TLM_DISK_FORMAT && cJSON_IsString(k) &&
           !strcmp(k->valuestring, kind) && cJSON_IsString(kb) && want &&
           !strcmp(kb->valuestring, want);
  free(want);
  if (!ok) {
    if (j && cJSON_IsNumber(f) && f->valueint != TLM_DISK_FORMAT)
      warn_once(d, W_STALE, "cache entry %s has another format version: ignored", path);
    else
      warn_once(d, W_CORRUPT, "cache entry %s does not match its key or is damaged: ignored", path);
    cJSON_Delete(j);
    return NULL;
  }
  return j;
}

/* The metadata <dir>/<sub>/<key>.json of a plan or kernel, verified
 * (parse_meta); NULL when absent or rejected. */
static cJSON *load_meta(tlm_disk *d, const char *sub, const char *kind, const tlm_key *key) {
  char name[64], path[3200];
  key_name(key, ".json", name, sizeof name);
  snprintf(path, sizeof path, "%s/%s/%s", d->dir, sub, name);
  if (access(path, F_OK)) return NULL;
  return parse_meta(d, path, kind, key);
}

static int store_meta(tlm_disk *d, const char *sub, const char *name, cJSON *j, int64_t *bytes) {
  char *text = cJSON_PrintUnformatted(j);
  int rc = text ? write_atomic(d, sub, name, text, strlen(text)) : -1;
  if (text) *bytes += (int64_t)strlen(text);
  free(text);
  return rc;
}

/* The metadata every entry starts with; NULL when any part of it could not
 * be allocated (a store then writes nothing rather than an entry its
 * loader would refuse). */
static cJSON *new_meta(const char *kind, const tlm_key *key, const char *problem) {
  cJSON *j = cJSON_CreateObject();
  char *kh = key_blob_hex(key);
  unsigned maj, min, pat;
  char llvm[32];
  LLVMGetVersion(&maj, &min, &pat);
  snprintf(llvm, sizeof llvm, "%u.%u.%u", maj, min, pat);
  int ok = j && kh && cJSON_AddNumberToObject(j, "format", TLM_DISK_FORMAT) &&
           cJSON_AddStringToObject(j, "kind", kind) && cJSON_AddStringToObject(j, "key", kh) &&
           cJSON_AddStringToObject(j, "tlm_version", TLM_VERSION_TEXT) &&
           cJSON_AddStringToObject(j, "llvm_version", llvm) &&
           cJSON_AddStringToObject(j, "problem", problem ? problem : "") &&
           cJSON_AddNumberToObject(j, "created_unix", (double)time(NULL));
  free(kh);
  if (!ok) {
    cJSON_Delete(j);
    return NULL;
  }
  return j;
}

/* ---- plans ------------------------------------------------------------------- */

int tlm_disk_load_plan(tlm_disk *d, const tlm_key *key, tlm_schedule *out, int *measured) {
  cJSON *j = load_meta(d, "plans", "plan", key);
  if (!j) return -1;
  const cJSON *dec = cJSON_GetObjectItem(j, "decisions");
  int ok = cJSON_IsArray(dec) && cJSON_GetArraySize(dec) <= TLM_MAX_POINTS;
  memset(out, 0, sizeof *out);
  for (const cJSON *x = ok ? dec->child : NULL; x; x = x->next) {
    if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > (1 << 20) ||
        x->valuedouble != (double)(int32_t)x->valuedouble)
      ok = 0;
    else out->v[out->n++] = (int32_t)x->valuedouble;
  }
  if (measured) *measured = ok && cJSON_IsTrue(cJSON_GetObjectItem(j, "measured"));
  cJSON_Delete(j);
  if (!ok) {
    char name[64];
    key_name(key, ".json", name, sizeof name);
    warn_once(d, W_CORRUPT, "cache entry plans/%s has bad decisions: ignored", name);
  }
  return ok ? 0 : -1;
}

int tlm_disk_store_plan(tlm_disk *d, const tlm_key *key, const tlm_schedule *s,
                        const char *problem, double measured_ns) {
  cJSON *j = new_meta("plan", key, problem);
  if (!j) return -1;
  cJSON *arr = cJSON_AddArrayToObject(j, "decisions");
  int ok = arr != NULL;
  for (int i = 0; ok && i < s->n; i++) {
    cJSON *x = cJSON_CreateNumber(s->v[i]);
    ok = x && cJSON_AddItemToArray(arr, x);
    if (!ok) cJSON_Delete(x);
  }
  if (ok && measured_ns > 0)
    ok = cJSON_AddBoolToObject(j, "measured", 1) && cJSON_AddNumberToObject(j, "kernel_ns", measured_ns);
  if (!ok) {
    cJSON_Delete(j);
    return -1;
  }
  char name[64];
  key_name(key, ".json", name, sizeof name);
  int64_t bytes = 0;
  int rc = store_meta(d, "plans", name, j, &bytes);
  cJSON_Delete(j);
  if (rc == 0) account_store(d, bytes);
  return rc;
}

/* ---- kernels ------------------------------------------------------------------ */

int tlm_disk_load_kernel(tlm_disk *d, const tlm_key *key, void **obj, size_t *len, char *symbol,
                         int symcap) {
  *obj = NULL;
  char name[64], path[3200];
  cJSON *j = load_meta(d, "kernels", "kernel", key);
  if (!j) return -1;
  const cJSON *sum = cJSON_GetObjectItem(j, "object_xxh3");
  const cJSON *bytes = cJSON_GetObjectItem(j, "object_bytes");
  const cJSON *sym = cJSON_GetObjectItem(j, "symbol");
  int ok = cJSON_IsString(sum) && cJSON_IsNumber(bytes) && cJSON_IsString(sym) &&
           strlen(sym->valuestring) < (size_t)symcap && !strncmp(sym->valuestring, "tlm_", 4);
  char *data = NULL;
  size_t n = 0;
  if (ok) {
    key_name(key, ".o", name, sizeof name);
    snprintf(path, sizeof path, "%s/kernels/%s", d->dir, name);
    ok = read_checked(d, path, &data, &n) == 0;
  }
  if (ok) {
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH3_64bits(data, n));
    ok = (double)n == bytes->valuedouble && !strcmp(hex, sum->valuestring);
    if (!ok) warn_once(d, W_CORRUPT, "cache object %s fails its checksum: ignored", path);
  }
  if (ok) {
    snprintf(symbol, (size_t)symcap, "%s", sym->valuestring);
    *obj = data;
    *len = n;
  } else {
    free(data);
  }
  cJSON_Delete(j);
  return ok ? 0 : -1;
}

int tlm_disk_store_kernel(tlm_disk *d, const tlm_key *key, const void *obj, size_t len,
                          const char *symbol, const char *problem, const char *decisions) {
  /* the metadata is complete before anything is written: the object
   * first, then its metadata, so a reader never finds metadata without
   * its object */
  cJSON *j = new_meta("kernel", key, problem);
  char hex[17];
  snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH3_64bits(obj, len));
  if (!j || !cJSON_AddStringToObject(j, "decisions", decisions ? decisions : "") ||
      !cJSON_AddStringToObject(j, "symbol", symbol) ||
      !cJSON_AddStringToObject(j, "object_xxh3", hex) ||
      !cJSON_AddNumberToObject(j, "object_bytes", (double)len)) {
    cJSON_Delete(j);
    return -1;
  }
  char name[64];
  key_name(key, ".o", name, sizeof name);
  if (write_atomic(d, "kernels", name, obj, len)) {
    cJSON_Delete(j);
    return -1;
  }
  key_name(key, ".json", name, sizeof name);
  int64_t bytes = (int64_t)len;
  int rc = store_meta(d, "kernels", name, j, &bytes);
  cJSON_Delete(j);
  if (rc == 0) account_store(d, bytes);
  return rc;
}

/* ---- accounting --------------------------------------------------------------- */

int tlm_disk_entry_name(const char *name) {
  size_t l = strspn(name, "0123456789abcdef");
  if (l == 32 && !strcmp(name + 32, ".o")) return TLM_DISK_NAME_OBJECT;
  if (l == 32 && !strcmp(name + 32, ".json")) return TLM_DISK_NAME_META;
  /* mkstemp's: ".tmp-" and six letters or digits */
  if (!strncmp(name, ".tmp-", 5) && strlen(name) == 11) {
    for (int i = 5; i < 11; i++)
      if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= 'A' && name[i] <= 'Z') ||
            (name[i] >= '0' && name[i] <= '9')))
        return 0;
    return TLM_DISK_NAME_TEMP;
  }
  return 0;
}

typedef struct file_info {
  char name[40]; /* 32 hex digits and ".json", or a temporary's name */
  int kind;      /* TLM_DISK_NAME_* */
  int64_t bytes;
  time_t mtime;
} file_info;

/* The cache's own regular files in `dir` (tlm_disk_entry_name); nothing
 * else is listed, so nothing else is ever counted or removed. */
static int list_dir(const char *dir, file_info **out, const atomic_int *stop) {
  *out = NULL;
  DIR *dp = opendir(dir);
  if (!dp) return 0;
  int n = 0, cap = 0;
  file_info *v = NULL;
  struct dirent *e;
  while ((e = readdir(dp)) && !(stop && atomic_load(stop))) {
    int kind = tlm_disk_entry_name(e->d_name);
    if (!kind) continue;
    char path[3200 + 2 + sizeof e->d_name]; /* the folder (< 3200) and a name */
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat st;
    if (lstat(path, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) continue;
    if (n == cap) {
      int ncap = cap ? cap * 2 : 64;
      file_info *nv = realloc(v, sizeof *v * (size_t)ncap);
      if (!nv) break; /* the entries listed so far */
      v = nv;
      cap = ncap;
    }
    memcpy(v[n].name, e->d_name, strlen(e->d_name) + 1); /* at most 37 bytes: a cache name */
    v[n].kind = kind;
    v[n].bytes = st.st_size;
    v[n].mtime = st.st_mtime;
    n++;
  }
  closedir(dp);
  *out = v;
  return n;
}

void tlm_disk_stat(tlm_disk *d, tlm_disk_stats *out) {
  memset(out, 0, sizeof *out);
  char sub[3200];
  file_info *v = NULL;
  snprintf(sub, sizeof sub, "%s/plans", d->dir);
  int n = list_dir(sub, &v, NULL);
  for (int i = 0; i < n; i++)
    if (v[i].kind == TLM_DISK_NAME_META) out->plans++, out->bytes += v[i].bytes;
  free(v);
  snprintf(sub, sizeof sub, "%s/kernels", d->dir);
  n = list_dir(sub, &v, NULL);
  for (int i = 0; i < n; i++) {
    if (v[i].kind == TLM_DISK_NAME_TEMP) continue;
    if (v[i].kind == TLM_DISK_NAME_OBJECT) out->kernels++;
    out->bytes += v[i].bytes;
  }
  free(v);
}

/* an entry of the trim: a kernel (object and metadata) or a plan */
typedef struct trim_entry {
  char hex[33];
  const char *sub;   /* "kernels" or "plans" */
  int64_t bytes;     /* its files together */
  time_t age;        /* metadata's mtime; 0: an object without metadata */
  int has_obj, has_meta;
} trim_entry;

static int by_name(const void *a, const void *b) {
  return strcmp(((const file_info *)a)->name, ((const file_info *)b)->name);
}
static int by_age(const void *a, const void *b) {
  const trim_entry *x = a, *y = b;
  if (x->age != y->age) return (x->age > y->age) - (x->age < y->age);
  return strcmp(x->hex, y->hex); /* the same order in every process */
}

/* One pass over both folders: stale temporaries of dead writers go; when
 * the total is over max_bytes, whole entries go oldest first (objects
 * without metadata first, then kernels and plans by age) down to the
 * low-water mark, so the next trims are a while away. Returns the bytes
 * left. */
static int64_t trim_pass(tlm_disk *d) {
  const char *subs[2] = {"kernels", "plans"};
  trim_entry *e = NULL;
  int ne = 0, cap = 0;
  int64_t total = 0;
  time_t now = time(NULL);
  for (int s = 0; s < 2; s++) {
    char dir[3200];
    snprintf(dir, sizeof dir, "%s/%s", d->dir, subs[s]);
    file_info *v = NULL;
    int n = list_dir(dir, &v, &d->stop);
    if (n > 1) qsort(v, (size_t)n, sizeof *v, by_name); /* "<hex>.json" just before "<hex>.o" */
    for (int i = 0; i < n; i++) {
      if (v[i].kind == TLM_DISK_NAME_TEMP) {
        /* a writer publishes within seconds; an hour-old one died */
        if (now - v[i].mtime > TLM_DISK_TEMP_STALE_S) {
          char path[3400];
          snprintf(path, sizeof path, "%s/%s", dir, v[i].name);
          unlink(path);
        } else {
          total += v[i].bytes;
        }
        continue;
      }
      total += v[i].bytes;
      if (ne > 0 && e[ne - 1].sub == subs[s] && !strncmp(e[ne - 1].hex, v[i].name, 32)) {
        trim_entry *t = &e[ne - 1];
        t->bytes += v[i].bytes;
        if (v[i].kind == TLM_DISK_NAME_OBJECT) t->has_obj = 1;
        continue;
      }
      if (ne == cap) {
        /* the capacity grows only with the array: a failed realloc leaves
         * both as they were (the next folder's entries are then skipped
         * too, and this pass trims from what it has) */
        int ncap = cap ? cap * 2 : 256;
        trim_entry *nv = realloc(e, sizeof *e * (size_t)ncap);
        if (!nv) break;
        e = nv;
        cap = ncap;
      }
      trim_entry *t = &e[ne++];
      memcpy(t->hex, v[i].name, 32);
      t->hex[32] = 0;
      t->sub = subs[s];
      t->bytes = v[i].bytes;
      t->has_meta = v[i].kind == TLM_DISK_NAME_META;
      t->has_obj = v[i].kind == TLM_DISK_NAME_OBJECT;
      t->age = t->has_meta ? v[i].mtime : 0;
      /* an object whose metadata is not written yet (a store in flight)
       * keeps its own age for a while */
      if (!t->has_meta && now - v[i].mtime <= TLM_DISK_TEMP_STALE_S) t->age = v[i].mtime;
    }
    free(v);
  }
  if (total > d->max_bytes && ne > 0) {
    int64_t low = d->max_bytes - d->max_bytes / TLM_DISK_TRIM_SLACK;
    if (ne > 1) qsort(e, (size_t)ne, sizeof *e, by_age);
    for (int i = 0; i < ne && total > low && !atomic_load(&d->stop); i++) {
      /* metadata first: a reader never finds metadata without its object */
      char path[3400];
      int gone = 1;
      if (e[i].has_meta) {
        snprintf(path, sizeof path, "%s/%s/%s.json", d->dir, e[i].sub, e[i].hex);
        gone &= unlink(path) == 0 || errno == ENOENT;
      }
      if (e[i].has_obj && gone) {
        snprintf(path, sizeof path, "%s/%s/%s.o", d->dir, e[i].sub, e[i].hex);
        gone &= unlink(path) == 0 || errno == ENOENT;
      }
      if (gone) total -= e[i].bytes;
    }
  }
  free(e);
  return total;
}

static void *trim_main(void *arg) {
  tlm_disk *d = arg;
  int64_t left = trim_pass(d);
  pthread_mutex_lock(&d->mu);
  /* what was stored while the pass ran is in `pending` */
  d->total = left + d->pending;
  d->pending = 0;
  d->scanned = 1;
  d->trim_running = 0;
  d->trims++;
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

/* The trim on its own thread runs at idle priority (SCHED_IDLE, Linux):
 * listing and unlinking thousands of files never takes a core from the
 * application or its compiles; where the policy is refused it runs at the
 * caller's priority. */
static void *trim_thread(void *arg) {
#ifdef SCHED_IDLE
  struct sched_param sp = {0};
  pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
#endif
  return trim_main(arg);
}

/* After a store of `bytes`: the running total grows; only when it passes
 * max_bytes (or was never counted) does a trim pass run, on a thread of its
 * own so that the store returns at once (inline when no thread can be
 * made). The pass is the only directory listing; stores below the cap cost
 * no system call beyond their own files. */
static void account_store(tlm_disk *d, int64_t bytes) {
  if (d->max_bytes <= 0) return;
  pthread_mutex_lock(&d->mu);
  if (d->trim_running) d->pending += bytes;
  else d->total += bytes;
  int need = !d->trim_running && (!d->scanned || d->total > d->max_bytes);
  int inline_pass = 0;
  if (need) {
    d->trim_running = 1;
    d->pending = 0;
    if (d->has_thread) pthread_join(d->thread, NULL); /* finished: trim_running was 0 */
    d->has_thread = pthread_create(&d->thread, NULL, trim_thread, d) == 0;
    inline_pass = !d->has_thread;
  }
  pthread_mutex_unlock(&d->mu);
  if (inline_pass) trim_main(d);
}

void tlm_disk_trim(tlm_disk *d) {
  if (d->max_bytes <= 0) return;
  pthread_mutex_lock(&d->mu);
  int busy = d->trim_running;
  if (!busy) d->trim_running = 1, d->pending = 0;
  pthread_mutex_unlock(&d->mu);
  if (!busy) trim_main(d);
  tlm_disk_wait_trim(d);
}

void tlm_disk_wait_trim(tlm_disk *d) {
  pthread_mutex_lock(&d->mu);
  int join = d->has_thread;
  d->has_thread = 0;
  pthread_t th = d->thread;
  pthread_mutex_unlock(&d->mu);
  if (join) pthread_join(th, NULL);
}

int64_t tlm_disk_trims(tlm_disk *d) {
  pthread_mutex_lock(&d->mu);
  int64_t n = d->trims;
  pthread_mutex_unlock(&d->mu);
  return n;
}

/* ---- lifetime counters -------------------------------------------------------- */

static const char *const k_usage_int[] = {"processes", "runs", "cache_hits", "cache_misses",
                                          "cache_waits", "compiles", "evictions",
                                          "disk_plan_hits", "disk_kernel_hits"};
static const char *const k_usage_dbl[] = {"compile_ms", "disk_load_ms"};

static int64_t *usage_int(tlm_disk_usage *u, int i) {
  int64_t *f[] = {&u->processes, &u->runs, &u->hits, &u->misses, &u->waits,
                  &u->compiles, &u->evictions, &u->disk_plan_hits, &u->disk_kernel_hits};
  return f[i];
}
static double *usage_dbl(tlm_disk_usage *u, int i) {
  double *f[] = {&u->compile_ms, &u->disk_load_ms};
  return f[i];
}

/* The counters in text (at most 64 KiB read); 0 ok, -1 not the counters. */
static int usage_parse(const char *text, tlm_disk_usage *u) {
  memset(u, 0, sizeof *u);
  cJSON *j = cJSON_Parse(text);
  int ok = cJSON_IsObject(j);
  for (int i = 0; ok && i < (int)(sizeof k_usage_int / sizeof *k_usage_int); i++) {
    const cJSON *x = cJSON_GetObjectItem(j, k_usage_int[i]);
    ok = cJSON_IsNumber(x) && x->valuedouble >= 0 && x->valuedouble < 9e18;
    if (ok) *usage_int(u, i) = (int64_t)x->valuedouble;
  }
  for (int i = 0; ok && i < (int)(sizeof k_usage_dbl / sizeof *k_usage_dbl); i++) {
    const cJSON *x = cJSON_GetObjectItem(j, k_usage_dbl[i]);
    ok = cJSON_IsNumber(x) && x->valuedouble >= 0 && x->valuedouble < 1e300;
    if (ok) *usage_dbl(u, i) = x->valuedouble;
  }
  cJSON_Delete(j);
  if (!ok) memset(u, 0, sizeof *u);
  return ok ? 0 : -1;
}

/* Opens <dir>/stats.json (created with `flags` & O_CREAT), checked as a
 * private regular file of this user, locked with `lock`; its text into
 * *text (NUL-terminated, "" when empty). Returns the fd, or -1. */
static int usage_open(const char *dir, int flags, int lock, char **text) {
  char path[3200];
  snprintf(path, sizeof path, "%s/stats.json", dir);
  *text = NULL;
  int fd = open(path, flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      (st.st_mode & (S_IWGRP | S_IWOTH)) || flock(fd, lock)) {
    close(fd);
    return -2;
  }
  char *buf = malloc(65536);
  ssize_t n = buf ? pread(fd, buf, 65535, 0) : -1;
  if (n < 0) {
    free(buf);
    close(fd);
    return -2;
  }
  buf[n] = 0;
  *text = buf;
  return fd;
}

int tlm_disk_add_usage(tlm_disk *d, const tlm_disk_usage *u) {
  char *text;
  int fd = usage_open(d->dir, O_RDWR | O_CREAT, LOCK_EX, &text);
  if (fd < 0) {
    warn_once(d, fd == -2 ? W_PERM : W_IO, "cannot update the statistics in %s", d->dir);
    return -1;
  }
  tlm_disk_usage sum;
  if (text[0] && usage_parse(text, &sum))
    warn_once(d, W_CORRUPT, "the statistics in %s were damaged: started afresh", d->dir);
  if (!text[0]) memset(&sum, 0, sizeof sum);
  free(text);
  tlm_disk_usage add = *u;
  for (int i = 0; i < (int)(sizeof k_usage_int / sizeof *k_usage_int); i++)
    *usage_int(&sum, i) += *usage_int(&add, i);
  for (int i = 0; i < (int)(sizeof k_usage_dbl / sizeof *k_usage_dbl); i++)
    *usage_dbl(&sum, i) += *usage_dbl(&add, i);
  cJSON *j = cJSON_CreateObject();
  int ok = j != NULL;
  for (int i = 0; ok && i < (int)(sizeof k_usage_int / sizeof *k_usage_int); i++)
    ok = cJSON_AddNumberToObject(j, k_usage_int[i], (double)*usage_int(&sum, i)) != NULL;
  for (int i = 0; ok && i < (int)(sizeof k_usage_dbl / sizeof *k_usage_dbl); i++)
    ok = cJSON_AddNumberToObject(j, k_usage_dbl[i], *usage_dbl(&sum, i)) != NULL;
  char *out = ok ? cJSON_PrintUnformatted(j) : NULL;
  cJSON_Delete(j);
  size_t len = out ? strlen(out) : 0;
  /* under the lock: readers (shared lock) never see a half-written file */
  ok = out && ftruncate(fd, 0) == 0 && pwrite(fd, out, len, 0) == (ssize_t)len;
  free(out);
  close(fd); /* releases the lock */
  if (!ok) warn_once(d, W_IO, "cannot update the statistics in %s", d->dir);
  return ok ? 0 : -1;
}

int tlm_disk_read_usage(const char *dir, tlm_disk_usage *out) {
  memset(out, 0, sizeof *out);
  char *text;
  int fd = usage_open(dir, O_RDONLY, LOCK_SH, &text);
  if (fd == -1) return 0;
  if (fd < 0) return -1;
  close(fd);
  int rc = text[0] ? (usage_parse(text, out) ? -1 : 1) : 0;
  free(text);
  return rc;
}
