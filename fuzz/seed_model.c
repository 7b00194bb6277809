/* seed_model - writes the small int8 model of fuzz/corpus/model (one
 * layer, two heads, width 32, random weights from seed 1, the hardware
 * prompts of every ISA of the host that wrote it). Usage: fuzz_seed_model
 * OUT; the corpus file is OUT with a mode byte 0 in front, and a second
 * one with mode 1 and the checksum's 8 bytes removed (fuzz_model.c). */
#include <stdio.h>

#include "lm/gpt2.h"
#include "lm/model.h"
#include "lm/vocab.h"
#include "runtime/space.h"
#include "runtime/target.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: fuzz_seed_model OUT\n");
    return 2;
  }
  static tlm_vocab v;
  tlm_vocab_build(&v);
  tlm_gpt2_config c = {v.n, TLM_LM_MAX_SEQ, 1, 2, 32};
  tlm_gpt2 m;
  char err[256];
  tlm_gpt2_init(&m, &c, 1);
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
  int rc = tlm_lm_quantize(&m, &v, 1, argv[1], err, sizeof err) != TLM_OK;
  if (rc) fprintf(stderr, "fuzz_seed_model: %s\n", err);
  tlm_gpt2_free(&m);
  return rc;
}
