/* cachecmd.c - `tlm cache list|stats|verify|clear [--dir DIR]`. */
#include "cachecmd.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "cache/disk.h"

static char *slurp(const char *path, size_t *len) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct stat st;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size > (64 << 20)) {
    close(fd);
    return NULL;
  }
  char *b = malloc((size_t)st.st_size + 1);
  ssize_t r = b ? read(fd, b, (size_t)st.st_size) : -1;
  close(fd);
  if (r != st.st_size) {
    free(b);
    return NULL;
  }
  b[r] = 0;
  *len = (size_t)r;
  return b;
}

/* problems of one kernel entry; NULL if it is sound */
static const char *check_kernel(const char *dir, const char *base, cJSON **meta) {
  char path[4096];
  struct stat st;
  snprintf(path, sizeof path, "%s/kernels/%s.json", dir, base);
  if (lstat(path, &st) || !S_ISREG(st.st_mode)) return "metadata is not a regular file";
  if (st.st_uid != geteuid() || (st.st_mode & 022)) return "metadata not private to this user";
  size_t n;
  char *text = slurp(path, &n);
  cJSON *j = text ? cJSON_Parse(text) : NULL;
  free(text);
  *meta = j;
  const cJSON *f = cJSON_GetObjectItem(j, "format"), *sum = cJSON_GetObjectItem(j, "object_xxh3");
  const cJSON *bytes = cJSON_GetObjectItem(j, "object_bytes");
  if (!j) return "metadata does not parse";
  if (!cJSON_IsNumber(f) || f->valueint != TLM_DISK_FORMAT) return "other format version";
  if (!cJSON_IsString(sum) || !cJSON_IsNumber(bytes)) return "metadata incomplete";
  snprintf(path, sizeof path, "%s/kernels/%s.o", dir, base);
  if (lstat(path, &st) || !S_ISREG(st.st_mode)) return "object is missing or not a regular file";
  if (st.st_uid != geteuid() || (st.st_mode & 022)) return "object not private to this user";
  char *obj = slurp(path, &n);
  if (!obj) return "object unreadable";
  char hex[17];
  snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH3_64bits(obj, n));
  free(obj);
  if ((double)n != bytes->valuedouble || strcmp(hex, sum->valuestring))
    return "object fails its checksum";
  return NULL;
}

/* s with every byte outside printable ASCII as '?', cut to cap */
static void printable(const char *s, char *out, size_t cap) {
  size_t i = 0;
  for (; s[i] && i + 1 < cap; i++) out[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
  out[i] = 0;
}

int tlm_cmd_cache(int argc, char **argv) {
  const char *sub = argc > 0 ? argv[0] : "", *dirarg = NULL;
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--dir") && i + 1 < argc) dirarg = argv[++i];
  if (strcmp(sub, "list") && strcmp(sub, "stats") && strcmp(sub, "verify") && strcmp(sub, "clear")) {
    fprintf(stderr,
            "usage: tlm cache list|stats|verify|clear [--dir DIR]\n"
            "  The disk kernel cache ($TLM_CACHE_DIR, $XDG_CACHE_HOME/tlm or ~/.cache/tlm).\n"
            "  verify exits 1 when an entry is damaged or unsafe (the runtime ignores such\n"
            "  entries); clear deletes every entry; stats adds the lifetime counters of the\n"
            "  runtimes that used the directory (runs, hits, misses, waits, compiles).\n");
    return !strcmp(sub, "--help") ? 0 : 2;
  }
  char dir[3072];
  if (!tlm_disk_default_dir(dirarg, dir, sizeof dir)) {
    fprintf(stderr, "tlm cache: no cache directory (set TLM_CACHE_DIR or HOME)\n");
    return 1;
  }
  char kdir[3200], pdir[3200];
  snprintf(kdir, sizeof kdir, "%s/kernels", dir);
  snprintf(pdir, sizeof pdir, "%s/plans", dir);
  if (!strcmp(sub, "clear")) {
    int removed = 0;
    const char *dirs[2] = {kdir, pdir};
    for (int d = 0; d < 2; d++) {
      /* only a real directory of ours, and only names the cache writes */
      struct stat st;
      if (lstat(dirs[d], &st) || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
        fprintf(stderr, "tlm cache: %s is not a cache directory of this user: left alone\n",
                dirs[d]);
        continue;
      }
      DIR *dp = opendir(dirs[d]);
      struct dirent *e;
      while (dp && (e = readdir(dp))) {
        if (!tlm_disk_entry_name(e->d_name)) continue; /* not the cache's */
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dirs[d], e->d_name);
        removed += unlink(path) == 0;
      }
      if (dp) closedir(dp);
    }
    char stats[3200];
    struct stat st;
    snprintf(stats, sizeof stats, "%s/stats.json", dir);
    if (!lstat(stats, &st) && S_ISREG(st.st_mode) && st.st_uid == geteuid())
      removed += unlink(stats) == 0;
    printf("removed %d files from %s\n", removed, dir);
    return 0;
  }
  int kernels = 0, bad = 0, plans = 0;
  long long bytes = 0;
  DIR *dp = opendir(kdir);
  struct dirent *e;
  while (dp && (e = readdir(dp))) {
    size_t l = strlen(e->d_name);
    if (tlm_disk_entry_name(e->d_name) != TLM_DISK_NAME_META) continue; /* not a kernel's */
    char base[256];
    snprintf(base, sizeof base, "%.*s", (int)(l - 5), e->d_name);
    cJSON *meta = NULL;
    const char *why = check_kernel(dir, base, &meta);
    kernels++;
    const cJSON *ob = cJSON_GetObjectItem(meta, "object_bytes");
    if (cJSON_IsNumber(ob)) bytes += (long long)ob->valuedouble;
    if (why) bad++;
    if (!strcmp(sub, "list") || (why && !strcmp(sub, "verify"))) {
      const cJSON *pr = cJSON_GetObjectItem(meta, "problem"), *de = cJSON_GetObjectItem(meta, "decisions");
      const cJSON *cr = cJSON_GetObjectItem(meta, "created_unix");
      char when[32] = "?";
      if (cJSON_IsNumber(cr) && cr->valuedouble >= 0 && cr->valuedouble < 1e11) {
        time_t t = (time_t)cr->valuedouble;
        struct tm tmv;
        if (gmtime_r(&t, &tmv)) strftime(when, sizeof when, "%Y-%m-%d %H:%M", &tmv);
      }
      /* metadata strings are data from disk: no control bytes reach the terminal */
      char prs[128], des[512];
      printable(cJSON_IsString(pr) ? pr->valuestring : "?", prs, sizeof prs);
      printable(cJSON_IsString(de) ? de->valuestring : "", des, sizeof des);
      printf("%s  %-28s %7.0f B  %s  %s%s%s\n", base, prs,
             cJSON_IsNumber(ob) ? ob->valuedouble : 0.0, when, des, why ? "  BAD: " : "", why ? why : "");
    }
    cJSON_Delete(meta);
  }
  if (dp) closedir(dp);
  dp = opendir(pdir);
  while (dp && (e = readdir(dp)))
    if (strstr(e->d_name, ".json") && e->d_name[0] != '.') plans++;
  if (dp) closedir(dp);
  printf("cache %s: %d kernels (%lld bytes of object code), %d plans, %d bad\n", dir, kernels,
         bytes, plans, bad);
  if (!strcmp(sub, "stats")) {
    /* what the runtimes that used this directory counted (tlm_disk_usage) */
    tlm_disk_usage u;
    int rc = tlm_disk_read_usage(dir, &u);
    if (rc < 0)
      printf("lifetime: stats.json is damaged or not a private file of this user\n");
    else if (rc == 0)
      printf("lifetime: no runtime has finished with this directory yet\n");
    else
      printf("lifetime: %lld runtimes, %lld runs = %lld hits + %lld misses + %lld waits; "
             "%lld compiles (%.1f ms), %lld kernels and %lld plans loaded from disk (%.1f ms), "
             "%lld evictions\n",
             (long long)u.processes, (long long)u.runs, (long long)u.hits, (long long)u.misses,
             (long long)u.waits, (long long)u.compiles, u.compile_ms,
             (long long)u.disk_kernel_hits, (long long)u.disk_plan_hits, u.disk_load_ms,
             (long long)u.evictions);
  }
  return !strcmp(sub, "verify") && bad ? 1 : 0;
}
