/* seed_model - writes the small int8 model of fuzz/corpus/model (one
 * layer, two heads, width 32, random weights from seed 1, the hardware
 * prompts of every ISA of the host that wrote it). Usage: fuzz_seed_model
 * OUT; the corpus file is OUT with a mode byte 0 in front, and a second
 * one with mode 1 and the checksum's 8 bytes removed (fuzz_model.c). */
#include <stdio.h>

#include "../tests/fixtures.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: fuzz_seed_model OUT\n");
    return 2;
  }
  char err[256];
  if (fixture_write_model(argv[1], 1, 1.0f, err, sizeof err)) {
    fprintf(stderr, "fuzz_seed_model: %s\n", err);
    return 1;
  }
  return 0;
}
