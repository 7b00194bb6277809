/* fixtures.h - helpers shared by the tests and the fuzz targets' seed
 * writer: a small random int8 model, the resident set size. */
#ifndef TLM_TESTS_FIXTURES_H
#define TLM_TESTS_FIXTURES_H

#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "train/gpt2.h"
#include "lm/model.h"
#include "train/checkpoint.h"
#include "lm/vocab.h"
#include "runtime/space.h"
#include "runtime/target.h"

/* Writes a small random int8 model (1 layer, 2 heads, width 32, weights
 * from `seed` scaled by `scale`: large gives strong, prompt-dependent
 * preferences) to path, marked as trained at every ISA this host runs
 * (hardware prompts included), so that a runtime here schedules with it.
 * Returns 0, or -1 with a message in err. */
static inline int fixture_write_model(const char *path, uint64_t seed, float scale, char *err,
                                      int errcap) {
  static tlm_vocab v;
  tlm_vocab_build(&v);
  tlm_gpt2_config c = {v.n, TLM_LM_MAX_SEQ, 1, 2, 32};
  tlm_gpt2 m;
  tlm_gpt2_init(&m, &c, seed);
  for (size_t w = 0; w < m.nparams; w++) m.mem[w] *= scale;
  m.isa_seen = ~0u;
  m.rule_version = TLM_RULE_VERSION;
  tlm_target host;
  tlm_target_detect(&host);
  for (int isa = TLM_ISA_SCALAR; isa <= host.host_isa; isa++) {
    tlm_target tg = host;
    int32_t words[TLM_LM_HW_WORDS];
    if (tlm_target_restrict(&tg, isa) == 0)
      tlm_lm_hw_add(&m.hw_seen, (tlm_lm_hw_words(&v, &tg, words), words));
  }
  int rc = tlm_lm_quantize(&m, &v, seed, path, err, errcap) == TLM_OK ? 0 : -1;
  tlm_gpt2_free(&m);
  return rc;
}

/* Resident set size of this process, KiB (/proc/self/statm). */
static inline long fixture_rss_kib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, res = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
    fclose(f);
  }
  return res * (sysconf(_SC_PAGESIZE) / 1024);
}

#endif
