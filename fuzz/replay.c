/* replay.c - runs a fuzz target's LLVMFuzzerTestOneInput over files and
 * directories of inputs (its corpus and the regression inputs of crashes
 * it once found), for builds without libFuzzer: `ctest` runs every target
 * this way, under ASan + UBSan in `make test-asan`. Usage:
 *   fuzz_X_replay PATH...   (a file is one input; a directory, its files) */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: cannot open %s\n", path);
    return -1;
  }
  size_t cap = 1 << 16, n = 0;
  uint8_t *buf = malloc(cap);
  size_t r;
  while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
    n += r;
    if (n == cap) {
      uint8_t *nb = realloc(buf, cap *= 2);
      if (!nb) {
        free(buf);
        buf = NULL;
      }
      buf = nb;
    }
  }
  fclose(f);
  if (!buf) return -1;
  /* an exact-size copy, so that ASan sees a read past the input's end */
  uint8_t *in = malloc(n ? n : 1);
  if (!in) {
    free(buf);
    return -1;
  }
  memcpy(in, buf, n);
  free(buf);
  LLVMFuzzerTestOneInput(in, n);
  free(in);
  return 0;
}

int main(int argc, char **argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  int files = 0, bad = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st)) {
      fprintf(stderr, "replay: no such path %s\n", argv[i]);
      bad++;
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      bad += run_file(argv[i]) != 0;
      files++;
      continue;
    }
    struct dirent **names;
    int n = scandir(argv[i], &names, NULL, alphasort);
    for (int k = 0; k < n; k++) {
      if (names[k]->d_name[0] != '.') {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[i], names[k]->d_name);
        bad += run_file(path) != 0;
        files++;
      }
      free(names[k]);
    }
    if (n >= 0) free(names);
  }
  printf("replay: %d inputs, %d unreadable\n", files, bad);
  return bad || files == 0;
}
