/* check.h - minimal assertion helpers for ctest executables: a failed CHECK
 * prints where and why, counts, and the test returns non-zero. */
#ifndef TLM_TESTS_CHECK_H
#define TLM_TESTS_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tlm.h"

static int g_failures;
static int g_checks;

#define CHECK(cond, ...)                                              \
  do {                                                                \
    g_checks++;                                                       \
    if (!(cond)) {                                                    \
      g_failures++;                                                   \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                   \
      fprintf(stderr, "\n");                                          \
    }                                                                 \
  } while (0)

static inline int check_report(const char *name) {
  printf("%s: %d passed, %d failed\n", name, g_checks - g_failures, g_failures);
  return g_failures ? 1 : 0;
}

/* The reference tests run once per ISA (tests/CMakeLists.txt sets TLM_ISA
 * for each variant). Returns 1, after saying so, when the host cannot run
 * the TLM_ISA asked for, or when it is the host's widest (the native run,
 * TLM_ISA unset, checks those kernels already): the test then exits with
 * CHECK_SKIP, which ctest reports as skipped. */
#define CHECK_SKIP 77
static inline int check_isa_unsupported(void) {
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.cache_dir = "none";
  cfg.model_path = "none";
  cfg.num_threads = 1;
  tlm_runtime *rt = NULL;
  tlm_status st = tlm_create(&cfg, &rt);
  tlm_destroy(rt);
  const char *isa = getenv("TLM_ISA");
  if (st == TLM_ERR_UNSUPPORTED) {
    printf("skipped: this host cannot run TLM_ISA=%s\n", isa ? isa : "");
    return 1;
  }
  /* the host's widest ISA: its variant builds the kernels the test's
   * native run (TLM_ISA unset) already builds and checks */
  static const char *const names[] = {"", "scalar", "sse", "avx2", "avx512"};
  int widest = 0;
  for (int w = TLM_CPU_ISA_AVX512; w >= TLM_CPU_ISA_SCALAR && !widest; w--) {
    cfg.isa = w;
    rt = NULL;
    if (tlm_create(&cfg, &rt) == TLM_OK) widest = w;
    tlm_destroy(rt);
  }
  if (st == TLM_OK && isa && widest && !strcmp(isa, names[widest])) {
    printf("skipped: TLM_ISA=%s is this host's widest ISA, which the native run covers\n", isa);
    return 1;
  }
  if (isa && *isa) printf("kernels for TLM_ISA=%s\n", isa);
  return 0;
}

/* Every how many-th shape a test over shape lists checks (TLM_TEST_STRIDE,
 * default 1: all). The sanitizer builds run the narrower-ISA variants on a
 * sample (tests/CMakeLists.txt): AddressSanitizer sees tlm's C code, which
 * each ISA takes through the same paths, not the JIT-compiled kernels. */
static inline int check_sample_stride(void) {
  const char *e = getenv("TLM_TEST_STRIDE");
  int n = e ? atoi(e) : 1;
  if (n > 1) printf("checking every %d-th shape of the shape lists (TLM_TEST_STRIDE)\n", n);
  return n > 1 ? n : 1;
}

#endif
