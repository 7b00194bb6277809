/* fdp.h - reads typed values from a fuzzer's input bytes (in the manner of
 * LLVM's FuzzedDataProvider): each read takes the next bytes, and reads
 * past the end give zeros, so every input is a complete test case. Values
 * are drawn mostly from small ranges that reach deep into the code, and
 * sometimes whole (negative, huge, NaN) to test the checks. */
#ifndef TLM_FUZZ_FDP_H
#define TLM_FUZZ_FDP_H

#include <stdint.h>
#include <string.h>

typedef struct fdp {
  const uint8_t *p;
  size_t n;
} fdp;

static inline uint64_t fdp_bytes(fdp *f, int k) {
  uint64_t v = 0;
  for (int i = 0; i < k; i++) {
    v = v << 8 | (f->n ? *f->p : 0);
    if (f->n) f->p++, f->n--;
  }
  return v;
}

static inline unsigned fdp_u8(fdp *f) { return (unsigned)fdp_bytes(f, 1); }

/* an int: 0..3 mostly, else a small range, else any 32-bit value */
static inline int fdp_int(fdp *f) {
  unsigned sel = fdp_u8(f);
  if (sel < 160) return (int)(sel % 4);
  if (sel < 240) return (int)(sel % 20) - 2;
  return (int)(uint32_t)fdp_bytes(f, 4);
}

/* a tensor extent: small (tails and primes), medium, or any int64 */
static inline int64_t fdp_extent(fdp *f) {
  unsigned sel = fdp_u8(f);
  if (sel < 176) return 1 + (int64_t)(sel % 19);
  if (sel < 240) return (int64_t)fdp_bytes(f, 2);
  return (int64_t)fdp_bytes(f, 8);
}

static inline float fdp_float(fdp *f) {
  static const float k[] = {0.0f, 1e-5f, 1.0f, -1.0f, 0.125f, 1e30f, -0.0f};
  unsigned sel = fdp_u8(f);
  if (sel < 200) return k[sel % (sizeof k / sizeof k[0])];
  uint32_t bits = (uint32_t)fdp_bytes(f, 4);
  float x;
  memcpy(&x, &bits, sizeof x);
  return x; /* NaN and infinities included */
}

#endif
