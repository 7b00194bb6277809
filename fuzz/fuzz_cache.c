/* fuzz_cache - the disk cache's metadata and object loaders (issue #20).
 *
 * Input: a mode byte, a 16-bit length L, L bytes of metadata text, then
 * object bytes. Mode bit 0: a kernel entry (kernels/<hex>.json and .o)
 * rather than a plan (plans/<hex>.json). Mode bit 1: the metadata is
 * merged into a genuine entry's (its key, format, kind, and for a kernel
 * the object's size and XXH3, kept right; every other field the fuzzer's),
 * so that the fuzzer reaches the fields behind the checks a damaged file
 * fails. The loaders must return 0 or -1, never read outside their
 * buffers, and accept only what they would run: a plan of at most
 * TLM_MAX_POINTS decisions in range; an object whose bytes match the
 * metadata's size and XXH3 and a symbol starting with "tlm_". Then a
 * statistics pass and a trim run over the directory. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "cache/disk.h"
#include "cache/key.h"

#define REQUIRE(c) \
  do {             \
    if (!(c)) __builtin_trap(); \
  } while (0)

static char g_dir[256];
static tlm_disk *g_disk;
static tlm_key g_key;
static char g_plan_path[512], g_meta_path[512], g_obj_path[512];
static cJSON *g_plan_meta, *g_kernel_meta; /* the genuine entries */

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = calloc(1, 1 << 16);
  if (buf) fread(buf, 1, (1 << 16) - 1, f);
  fclose(f);
  return buf;
}

static void put(const char *path, const void *data, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(n == 0 || write(fd, data, n) == (ssize_t)n);
  close(fd);
}

static void init(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/tlm_fuzz_cache_%d", (int)getpid());
  char err[256];
  REQUIRE(tlm_disk_open(g_dir, 1 << 20, NULL, NULL, &g_disk, err, sizeof err) == 0);
  memset(&g_key, 0, sizeof g_key);
  g_key.len = 24;
  for (int i = 0; i < 24; i++) g_key.bytes[i] = (uint8_t)(i * 7 + 1);
  g_key.hash_lo = 0x0123456789abcdefull;
  g_key.hash_hi = 0xfedcba9876543210ull;
  char hex[33];
  tlm_key_hex(&g_key, hex);
  snprintf(g_plan_path, sizeof g_plan_path, "%s/plans/%s.json", g_dir, hex);
  snprintf(g_meta_path, sizeof g_meta_path, "%s/kernels/%s.json", g_dir, hex);
  snprintf(g_obj_path, sizeof g_obj_path, "%s/kernels/%s.o", g_dir, hex);
  tlm_schedule s;
  memset(&s, 0, sizeof s);
  s.n = 3;
  s.v[0] = 16, s.v[1] = 4, s.v[2] = 1;
  static const char obj[] = "\x7f" "ELF not really an object";
  REQUIRE(tlm_disk_store_plan(g_disk, &g_key, &s, "8x8:8x8", 0) == 0);
  REQUIRE(tlm_disk_store_kernel(g_disk, &g_key, obj, sizeof obj, "tlm_k_0", "8x8:8x8",
                                "vec=16") == 0);
  char *t = slurp(g_plan_path);
  g_plan_meta = t ? cJSON_Parse(t) : NULL;
  free(t);
  t = slurp(g_meta_path);
  g_kernel_meta = t ? cJSON_Parse(t) : NULL;
  free(t);
  REQUIRE(g_plan_meta && g_kernel_meta);
}

/* the genuine metadata with the fuzzer's fields over it (but the ones the
 * checks before the parse of the rest need) */
static char *merged(const cJSON *genuine, const char *fuzz, const uint8_t *obj, size_t objlen,
                    int kernel) {
  cJSON *g = cJSON_Duplicate(genuine, 1);
  cJSON *f = cJSON_Parse(fuzz);
  if (!g) {
    cJSON_Delete(f);
    return NULL;
  }
  for (cJSON *x = f ? f->child : NULL; x; x = x->next) {
    if (!x->string || !strcmp(x->string, "key") || !strcmp(x->string, "format") ||
        !strcmp(x->string, "kind"))
      continue;
    if (kernel && (!strcmp(x->string, "object_xxh3") || !strcmp(x->string, "object_bytes")))
      continue;
    cJSON *c = cJSON_Duplicate(x, 1);
    if (c && !cJSON_ReplaceItemInObject(g, x->string, c)) cJSON_AddItemToObject(g, x->string, c);
  }
  cJSON_Delete(f);
  if (kernel) {
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH3_64bits(obj, objlen));
    cJSON_ReplaceItemInObject(g, "object_xxh3", cJSON_CreateString(hex));
    cJSON_ReplaceItemInObject(g, "object_bytes", cJSON_CreateNumber((double)objlen));
  }
  char *text = cJSON_PrintUnformatted(g);
  cJSON_Delete(g);
  return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_disk) init();
  if (size < 3 || size > (1 << 20)) return 0;
  int mode = data[0];
  size_t mlen = (size_t)data[1] << 8 | data[2];
  if (mlen > size - 3) mlen = size - 3;
  char *meta = malloc(mlen + 1);
  REQUIRE(meta);
  memcpy(meta, data + 3, mlen);
  meta[mlen] = 0;
  const uint8_t *obj = data + 3 + mlen;
  size_t objlen = size - 3 - mlen;
  int kernel = mode & 1;
  char *text = (mode & 2) ? merged(kernel ? g_kernel_meta : g_plan_meta, meta, obj, objlen, kernel)
                          : NULL;
  const char *m = text ? text : meta;
  unlink(g_plan_path);
  unlink(g_meta_path);
  unlink(g_obj_path);
  put(kernel ? g_meta_path : g_plan_path, m, (mode & 2) && text ? strlen(m) : mlen);
  if (kernel) put(g_obj_path, obj, objlen);

  if (!kernel) {
    tlm_schedule s;
    int r = tlm_disk_load_plan(g_disk, &g_key, &s, NULL);
    REQUIRE(r == 0 || r == -1);
    if (getenv("TLM_FUZZ_VERBOSE")) fprintf(stderr, "fuzz_cache: mode %d plan: %d\n", mode, r);
    if (r == 0) {
      REQUIRE(s.n >= 0 && s.n <= TLM_MAX_POINTS);
      for (int i = 0; i < s.n; i++) REQUIRE(s.v[i] >= 0);
    }
  } else {
    void *o = NULL;
    size_t len = 0;
    char sym[64];
    int r = tlm_disk_load_kernel(g_disk, &g_key, &o, &len, sym, sizeof sym);
    REQUIRE(r == 0 || r == -1);
    if (getenv("TLM_FUZZ_VERBOSE")) fprintf(stderr, "fuzz_cache: mode %d kernel: %d\n", mode, r);
    if (r == 0) {
      REQUIRE(o && len == objlen && !memcmp(o, obj, len) && !strncmp(sym, "tlm_", 4) &&
              memchr(sym, 0, sizeof sym));
      free(o);
    } else {
      REQUIRE(o == NULL);
    }
  }
  tlm_disk_stats st;
  tlm_disk_stat(g_disk, &st);
  REQUIRE(st.bytes >= 0);
  free(text);
  free(meta);
  return 0;
}
