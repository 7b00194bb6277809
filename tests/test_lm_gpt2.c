/* GPT-2 trainer: the gradient of every parameter tensor against central
 * finite differences, and a tiny dataset overfit to near-zero loss. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "train/gpt2.h"
#include "runtime/space.h"

#define B 2
#define T 8

int main(void) {
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.cache_dir = "none"; /* measure compiles, never reuse them */
  cfg.num_threads = 1;
  tlm_runtime *rt;
  if (tlm_create(&cfg, &rt)) return 1;
  tlm_gpt2_config c = {.vocab = 37, .max_seq = 12, .layers = 2, .heads = 2, .width = 16};
  tlm_gpt2 m;
  CHECK(tlm_gpt2_init(&m, &c, 1) == 0, "init");
  CHECK(tlm_gpt2_train_init(&m, B, T, rt) == 0, "train_init");
  int32_t tokens[B * T], targets[B * T];
  uint64_t allowed[B * T][TLM_LM_MAX_VOCAB / 64];
  uint64_t rng = 99;
  memset(allowed, 0, sizeof allowed);
  for (int i = 0; i < B * T; i++) {
    tokens[i] = (int32_t)(tlm_rng_next(&rng) % (uint64_t)c.vocab);
    targets[i] = i % T < 3 ? -1 : (int32_t)(tlm_rng_next(&rng) % (uint64_t)c.vocab);
    if (targets[i] >= 0) {
      for (int v = 0; v < c.vocab; v++)
        if (tlm_rng_next(&rng) % 3 == 0 || v == targets[i]) allowed[i][v / 64] |= 1ull << (v % 64);
    }
  }
  /* make logits large enough that the gradients are not all tiny */
  for (size_t i = 0; i < m.nparams; i++) m.mem[i] *= 3.0f;
  float loss = tlm_gpt2_forward(&m, tokens, targets, (const uint64_t(*)[8])allowed);
  CHECK(loss > 0 && isfinite(loss), "loss %g", loss);
  tlm_gpt2_backward(&m);
  size_t sizes[TLM_GPT2_NTENSORS];
  tlm_gpt2_sizes(&c, sizes);
  size_t off = 0;
  double worst = 0;
  for (int t = 0; t < TLM_GPT2_NTENSORS; t++) {
    int bad = 0;
    for (int s = 0; s < 6; s++) {
      size_t i = off + (size_t)(tlm_rng_next(&rng) % sizes[t]);
      float keep = m.mem[i], h = 3e-3f;
      m.mem[i] = keep + h;
      double lp = tlm_gpt2_forward(&m, tokens, targets, (const uint64_t(*)[8])allowed);
      m.mem[i] = keep - h;
      double lm = tlm_gpt2_forward(&m, tokens, targets, (const uint64_t(*)[8])allowed);
      m.mem[i] = keep;
      double num = (lp - lm) / (2 * h), ana = m.grad_mem[i];
      double err = fabs(num - ana) / (fabs(num) + fabs(ana) + 1e-3);
      if (err > worst) worst = err;
      if (err > 0.05) {
        bad++;
        fprintf(stderr, "tensor %d index %zu: numeric %g analytic %g\n", t, i - off, num, ana);
      }
    }
    CHECK(bad == 0, "tensor %d: %d gradients off", t, bad);
    off += sizes[t];
  }
  printf("gradient check: worst relative error %.3g\n", worst);

  /* overfit 4 fixed sequences */
  tlm_gpt2 m2;
  tlm_gpt2_init(&m2, &c, 2);
  tlm_gpt2_train_init(&m2, B, T, rt);
  float last = 0;
  for (int step = 0; step < 300; step++) {
    last = tlm_gpt2_forward(&m2, tokens, targets, (const uint64_t(*)[8])allowed);
    tlm_gpt2_backward(&m2);
    tlm_gpt2_update(&m2, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f);
  }
  printf("overfit: loss after 300 steps %.4f\n", last);
  CHECK(last < 0.05f, "overfit loss %g", last);
  tlm_gpt2_free(&m);
  tlm_gpt2_free(&m2);
  tlm_destroy(rt);
  return check_report("test_lm_gpt2");
}
