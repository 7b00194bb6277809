/* fuzz_model - the int8 model loader (issue #20).
 *
 * Input: one byte of mode, then a model file. Mode even: the file as
 * given (the loader must refuse damaged files by size, magic, version,
 * kind, config, vocabulary and checksum). Mode odd: the fuzz target
 * appends the file's correct XXH3-64, so that the fuzzer reaches past the
 * checksum into what a checksum cannot catch: a file written by a buggy
 * or hostile tool, with any config and payload. The loader must return
 * TLM_OK or TLM_ERR_IO / TLM_ERR_FORMAT with a message; a model it accepts
 * must pack and decode a schedule of a small matmul (TLM_OK, or
 * TLM_ERR_INTERNAL when its context is too short for the prompt) within
 * its buffers, and free everything. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include "lm/model.h"
#include "runtime/space.h"
#include "runtime/target.h"
#include "train/tasks.h"

#define REQUIRE(c) \
  do {             \
    if (!(c)) __builtin_trap(); \
  } while (0)

static int g_fd = -1;
static tlm_space g_space;
static int g_have_space;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (g_fd < 0) {
    g_fd = memfd_create("tlm_fuzz_model", 0);
    REQUIRE(g_fd >= 0);
    /* the space every accepted model decodes in */
    static tlm_task_spec spec;
    tlm_task task;
    tlm_target tg;
    tlm_target_detect(&tg);
    g_have_space = tlm_task_spec_parse("13x40:40x24 tA0 tB0 bias0 act0 res0", &spec) == 0 &&
                   tlm_task_spec_task(&spec, &task) == 0 && tlm_space_init(&g_space, &task, &tg) == 0;
    REQUIRE(g_have_space);
  }
  if (size < 1 || size > (8u << 20)) return 0;
  int fix = data[0] & 1;
  REQUIRE(ftruncate(g_fd, 0) == 0);
  REQUIRE(pwrite(g_fd, data + 1, size - 1, 0) == (ssize_t)(size - 1));
  if (fix) {
    uint64_t h = XXH3_64bits(data + 1, size - 1);
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)(h >> (8 * i));
    REQUIRE(pwrite(g_fd, le, 8, (off_t)(size - 1)) == 8);
  }
  char path[64], err[512];
  snprintf(path, sizeof path, "/proc/self/fd/%d", g_fd);
  tlm_lm_model m;
  memset(&m, 0, sizeof m);
  err[0] = 0;
  tlm_status st = tlm_lm_load(&m, path, err, sizeof err);
  REQUIRE(st == TLM_OK || st == TLM_ERR_IO || st == TLM_ERR_FORMAT ||
          st == TLM_ERR_OUT_OF_MEMORY);
  if (getenv("TLM_FUZZ_VERBOSE")) /* for corpus upkeep: what each input reached */
    fprintf(stderr, "fuzz_model: mode %d, %zu bytes: %s%s%s\n", fix, size - 1, tlm_status_str(st),
            err[0] ? ": " : "", err);
  if (st != TLM_OK) {
    REQUIRE(err[0]);
    return 0;
  }
  if (tlm_lm_pack(&m) == 0 && g_have_space) {
    tlm_schedule s;
    st = tlm_lm_decode(&m, &g_space, &s, NULL);
    REQUIRE(st == TLM_OK || st == TLM_ERR_INTERNAL);
    if (getenv("TLM_FUZZ_VERBOSE")) fprintf(stderr, "fuzz_model: decode: %s\n", tlm_status_str(st));
    if (st == TLM_OK) REQUIRE(tlm_space_accepts(&g_space, &s));
  }
  tlm_lm_free(&m);
  return 0;
}
