/* disk.c - verified, atomically published disk cache entries. */
#define _GNU_SOURCE
#include "disk.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <llvm-c/Core.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "tlm.h"

#define MAX_FILE_BYTES (64 << 20)

struct tlm_disk {
  char dir[3072];
  int64_t max_bytes;
  tlm_disk_warn_fn warn;
  void *user;
  pthread_mutex_t mu;
  unsigned warned; /* bit per warning kind */
};

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
  /* create missing parents (e.g. ~/.cache) with 0700 */
  char tmp[3072];
  snprintf(tmp, sizeof tmp, "%s", dir);
  for (char *p = tmp + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      mkdir(tmp, 0700);
      *p = '/';
    }
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

static int store_meta(tlm_disk *d, const char *sub, const char *name, cJSON *j) {
  char *text = cJSON_PrintUnformatted(j);
  int rc = text ? write_atomic(d, sub, name, text, strlen(text)) : -1;
  free(text);
  return rc;
}

static cJSON *new_meta(const char *kind, const tlm_key *key, const char *problem) {
  cJSON *j = cJSON_CreateObject();
  char *kh = key_blob_hex(key);
  unsigned maj, min, pat;
  char llvm[32];
  LLVMGetVersion(&maj, &min, &pat);
  snprintf(llvm, sizeof llvm, "%u.%u.%u", maj, min, pat);
  cJSON_AddNumberToObject(j, "format", TLM_DISK_FORMAT);
  cJSON_AddStringToObject(j, "kind", kind);
  cJSON_AddStringToObject(j, "key", kh ? kh : "");
  cJSON_AddStringToObject(j, "tlm_version", tlm_version());
  cJSON_AddStringToObject(j, "llvm_version", llvm);
  cJSON_AddStringToObject(j, "problem", problem ? problem : "");
  cJSON_AddNumberToObject(j, "created_unix", (double)time(NULL));
  free(kh);
  return j;
}

/* ---- plans ------------------------------------------------------------------- */

int tlm_disk_load_plan(tlm_disk *d, const tlm_key *key, tlm_schedule *out) {
  char name[64], path[3200];
  key_name(key, ".json", name, sizeof name);
  snprintf(path, sizeof path, "%s/plans/%s", d->dir, name);
  if (access(path, F_OK)) return -1;
  cJSON *j = parse_meta(d, path, "plan", key);
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
  cJSON_Delete(j);
  if (!ok) warn_once(d, W_CORRUPT, "cache entry %s has bad decisions: ignored", path);
  return ok ? 0 : -1;
}

int tlm_disk_store_plan(tlm_disk *d, const tlm_key *key, const tlm_schedule *s,
                        const char *problem) {
  cJSON *j = new_meta("plan", key, problem);
  cJSON *arr = cJSON_AddArrayToObject(j, "decisions");
  for (int i = 0; i < s->n; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(s->v[i]));
  char name[64];
  key_name(key, ".json", name, sizeof name);
  int rc = store_meta(d, "plans", name, j);
  cJSON_Delete(j);
  if (rc == 0) tlm_disk_trim(d);
  return rc;
}

/* ---- kernels ------------------------------------------------------------------ */

int tlm_disk_load_kernel(tlm_disk *d, const tlm_key *key, void **obj, size_t *len, char *symbol,
                         int symcap) {
  *obj = NULL;
  char name[64], path[3200];
  key_name(key, ".json", name, sizeof name);
  snprintf(path, sizeof path, "%s/kernels/%s", d->dir, name);
  if (access(path, F_OK)) return -1;
  cJSON *j = parse_meta(d, path, "kernel", key);
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
  char name[64];
  key_name(key, ".o", name, sizeof name);
  if (write_atomic(d, "kernels", name, obj, len)) return -1;
  cJSON *j = new_meta("kernel", key, problem);
  char hex[17];
  snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH3_64bits(obj, len));
  cJSON_AddStringToObject(j, "decisions", decisions ? decisions : "");
  cJSON_AddStringToObject(j, "symbol", symbol);
  cJSON_AddStringToObject(j, "object_xxh3", hex);
  cJSON_AddNumberToObject(j, "object_bytes", (double)len);
  key_name(key, ".json", name, sizeof name);
  int rc = store_meta(d, "kernels", name, j);
  cJSON_Delete(j);
  if (rc == 0) tlm_disk_trim(d);
  return rc;
}

/* ---- accounting --------------------------------------------------------------- */

typedef struct file_info {
  char name[80];
  int64_t bytes;
  time_t mtime;
} file_info;

static int list_dir(const char *dir, file_info **out) {
  DIR *dp = opendir(dir);
  if (!dp) return 0;
  int n = 0, cap = 0;
  file_info *v = NULL;
  struct dirent *e;
  while ((e = readdir(dp))) {
    if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof v[0].name) continue;
    char path[3400];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat st;
    if (lstat(path, &st) || !S_ISREG(st.st_mode)) continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      file_info *nv = realloc(v, sizeof *v * (size_t)cap);
      if (!nv) break;
      v = nv;
    }
    memcpy(v[n].name, e->d_name, strlen(e->d_name) + 1); /* length checked above */
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
  int n = list_dir(sub, &v);
  for (int i = 0; i < n; i++) out->plans++, out->bytes += v[i].bytes;
  free(v);
  v = NULL;
  snprintf(sub, sizeof sub, "%s/kernels", d->dir);
  n = list_dir(sub, &v);
  for (int i = 0; i < n; i++) {
    if (strstr(v[i].name, ".o")) out->kernels++;
    out->bytes += v[i].bytes;
  }
  free(v);
}

static int by_mtime(const void *a, const void *b) {
  const file_info *x = a, *y = b;
  return (x->mtime > y->mtime) - (x->mtime < y->mtime);
}

/* Removes whole entries (metadata first, then object) oldest first until
 * the directory is under max_bytes; objects without metadata go first.
 * Plans are small and count towards the total; when only plans remain over
 * the cap, the oldest plans go too. */
void tlm_disk_trim(tlm_disk *d) {
  if (d->max_bytes <= 0) return;
  char kdir[3200], pdir[3200];
  snprintf(kdir, sizeof kdir, "%s/kernels", d->dir);
  snprintf(pdir, sizeof pdir, "%s/plans", d->dir);
  file_info *k = NULL, *p = NULL;
  int nk = list_dir(kdir, &k), np = list_dir(pdir, &p);
  int64_t total = 0;
  for (int i = 0; i < nk; i++) total += k[i].bytes;
  for (int i = 0; i < np; i++) total += p[i].bytes;
  if (total > d->max_bytes) {
    /* entry age: its metadata's mtime; objects without metadata sort first */
    for (int i = 0; i < nk; i++) {
      size_t l = strlen(k[i].name);
      if (l > 2 && !strcmp(k[i].name + l - 2, ".o")) {
        char meta[96];
        snprintf(meta, sizeof meta, "%.*s.json", (int)(l - 2), k[i].name);
        time_t age = 0;
        for (int j = 0; j < nk; j++)
          if (!strcmp(k[j].name, meta)) age = k[j].mtime;
        k[i].mtime = age;
      }
    }
    qsort(k, (size_t)nk, sizeof *k, by_mtime);
    for (int i = 0; i < nk && total > d->max_bytes; i++) {
      size_t l = strlen(k[i].name);
      if (l < 3 || strcmp(k[i].name + l - 2, ".o")) continue;
      char base[96], path[3400];
      snprintf(base, sizeof base, "%.*s", (int)(l - 2), k[i].name);
      snprintf(path, sizeof path, "%s/%s.json", kdir, base);
      for (int j = 0; j < nk; j++)
        if (!strncmp(k[j].name, base, strlen(base)) && !strcmp(k[j].name + strlen(base), ".json") &&
            unlink(path) == 0)
          total -= k[j].bytes;
      snprintf(path, sizeof path, "%s/%s", kdir, k[i].name);
      if (unlink(path) == 0) total -= k[i].bytes;
    }
    qsort(p, (size_t)np, sizeof *p, by_mtime);
    for (int i = 0; i < np && total > d->max_bytes; i++) {
      char path[3400];
      snprintf(path, sizeof path, "%s/%s", pdir, p[i].name);
      if (unlink(path) == 0) total -= p[i].bytes;
    }
  }
  free(k);
  free(p);
}
