/* check.h - minimal assertion helpers for ctest executables: a failed CHECK
 * prints where and why, counts, and the test returns non-zero. */
#ifndef TLM_TESTS_CHECK_H
#define TLM_TESTS_CHECK_H

#include <stdio.h>

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

#endif
