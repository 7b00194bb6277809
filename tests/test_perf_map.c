/* test_perf_map.c - TLM_PERF_MAP=1 (jit/jit.c): each kernel loaded gets a
 * line "START SIZE NAME" (hex) in /tmp/perf-PID.map, the file `perf
 * report` reads for JIT code.
 * Two runtimes in turn (the variable is read once per process, at the
 * first load: this process sets it before any). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "tlm.h"

/* C (m, n) = A (m, k) x B (k, n) through tlm_run on a new runtime */
static void run_matmul(int64_t m, int64_t k, int64_t n) {
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.cache_dir = "none";
  cfg.model_path = "none";
  cfg.num_threads = 1;
  cfg.async_compile = 0;
  tlm_runtime *rt = NULL;
  CHECK(tlm_create(&cfg, &rt) == TLM_OK, "tlm_create: %s", tlm_last_error(NULL));
  if (!rt) return;
  float *a = calloc((size_t)(m * k), sizeof(float)), *b = calloc((size_t)(k * n), sizeof(float)),
        *c = calloc((size_t)(m * n), sizeof(float));
  tlm_tensor in[2], out;
  tlm_tensor_dense(&in[0], TLM_F32, 2, (int64_t[]){m, k}, a);
  tlm_tensor_dense(&in[1], TLM_F32, 2, (int64_t[]){k, n}, b);
  tlm_tensor_dense(&out, TLM_F32, 2, (int64_t[]){m, n}, c);
  tlm_op op = tlm_op_matmul();
  CHECK(tlm_run(rt, &op, in, 2, &out, 1) == TLM_OK, "tlm_run: %s", tlm_last_error(rt));
  tlm_destroy(rt);
  free(a), free(b), free(c);
}

int main(void) {
  char path[64];
  snprintf(path, sizeof path, "/tmp/perf-%ld.map", (long)getpid());
  remove(path);
  setenv("TLM_PERF_MAP", "1", 1);
  run_matmul(7, 33, 19);
  run_matmul(64, 128, 96);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL, "no %s after two kernels loaded with TLM_PERF_MAP=1", path);
  int lines = 0, good = 0;
  char line[512];
  while (f && fgets(line, sizeof line, f)) {
    unsigned long start = 0, size = 0;
    char name[300];
    lines++;
    if (sscanf(line, "%lx %lx %299s", &start, &size, name) == 3 && start && size > 16 &&
        size < (1ul << 24) && !strncmp(name, "tlm_", 4))
      good++;
    else
      fprintf(stderr, "unexpected line: %s", line);
  }
  if (f) fclose(f);
  CHECK(lines == 2 && good == 2, "%d lines, %d well formed (want 2 and 2)", lines, good);
  remove(path);
  return check_report("test_perf_map");
}
