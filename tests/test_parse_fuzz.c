/* The descriptor parsers against random and mutated input: they must only
 * ever return their documented codes, fill a message on -1, and touch no
 * memory beyond their input (run under ASan in `make test`). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/space.h"
#include "train/conv_problem.h"
#include "train/problem.h"

static const char *k_seeds[] = {
    "1000x768:768x768", "12x128x64:12x64x128_n\"encoder:QK_matmul:12\"",
    "--dt=f32 --stag=abcd --wtag=abdc --dtag=abcd 24x16x1x256:24x16x256x2047_n\"gptj:bmm70*28\"",
    "2x3x4x5x6:2x3x4x6x7", "softmax:12x1000", "layernorm:1x1", "rmsnorm:7x4097", "# comment",
    "--reset", "",
    "mb1ic64ih56oc64oh56kh3ph1", "g32mb1ic32ih112iw112oc32oh112ow112kh3kw3sh1sw1ph1pw1n\"dw\"",
    "mb1_ic3oc32_ih512oh256kh3sh2dh0ph0_iw512ow256kw3sw2dw0pw0_n\"efficientdet:conv1\"",
    "mb1ic16id1ih1iw1oc16od2oh2ow1kd3kh3kw1dd1dh1ph1pd1", "ic19oc33_ih13oh13kh3ph1_n\"tails\"",
    "swiglu:7x11008", "gelu:1x3072"};

int main(void) {
  uint64_t rng = 2026;
  static const char alphabet[] = "0123456789x:_n\"-=abcdtgsw \t#*fl.moyrikhp";
  int codes[3] = {0}, conv_codes[3] = {0};
  char buf[600], err[256];
  for (int i = 0; i < 200000; i++) {
    size_t len;
    if (i % 2) { /* mutate a real descriptor */
      const char *seed = k_seeds[tlm_rng_next(&rng) % (sizeof k_seeds / sizeof k_seeds[0])];
      len = strlen(seed);
      memcpy(buf, seed, len + 1);
      int edits = 1 + (int)(tlm_rng_next(&rng) % 4);
      for (int e = 0; e < edits && len + 2 < sizeof buf; e++) {
        size_t at = len ? tlm_rng_next(&rng) % (len + 1) : 0;
        switch (tlm_rng_next(&rng) % 4) {
        case 0: buf[at < len ? at : 0] = alphabet[tlm_rng_next(&rng) % (sizeof alphabet - 1)]; break;
        case 1: /* insert */
          memmove(buf + at + 1, buf + at, len - at + 1);
          buf[at] = alphabet[tlm_rng_next(&rng) % (sizeof alphabet - 1)];
          len++;
          break;
        case 2: /* truncate */
          buf[at] = 0;
          len = at;
          break;
        default: /* a huge number */
          if (len + 25 < sizeof buf) {
            memmove(buf + at + 20, buf + at, len - at + 1);
            memcpy(buf + at, "99999999999999999999", 20);
            len += 20;
          }
        }
      }
    } else { /* random bytes, including non-ASCII */
      len = tlm_rng_next(&rng) % 80;
      for (size_t k = 0; k < len; k++)
        buf[k] = (tlm_rng_next(&rng) % 8) ? alphabet[tlm_rng_next(&rng) % (sizeof alphabet - 1)]
                                          : (char)(tlm_rng_next(&rng) % 255 + 1);
      buf[len] = 0;
    }
    tlm_mm_desc d;
    err[0] = 0;
    int r = tlm_mm_desc_parse(buf, &d, err, sizeof err);
    if (r < -1 || r > 1) CHECK(0, "matmul parser returned %d for '%s'", r, buf);
    else codes[r + 1]++;
    if (r == -1) CHECK(err[0] != 0, "no message for '%s'", buf);
    if (r == 1) CHECK(d.nda >= 2 && d.ndb >= 2 && d.nda <= TLM_MAX_DIMS && d.ndb <= TLM_MAX_DIMS,
                      "bad dims for '%s'", buf);
    tlm_op rop;
    int64_t rows, cols;
    err[0] = 0;
    r = tlm_row_desc_parse(buf, &rop, &rows, &cols, err, sizeof err);
    CHECK(r >= -1 && r <= 1, "row parser returned %d", r);
    if (r == -1) CHECK(err[0] != 0, "no row message for '%s'", buf);
    if (r == 1) CHECK(rows >= 1 && cols >= 1, "row extents %lld %lld", (long long)rows, (long long)cols);
    tlm_conv_prb cp;
    err[0] = 0;
    r = tlm_conv_prb_parse(buf, &cp, err, sizeof err);
    if (r < -1 || r > 1) CHECK(0, "conv parser returned %d for '%s'", r, buf);
    else conv_codes[r + 1]++;
    if (r == -1) CHECK(err[0] != 0, "no conv message for '%s'", buf);
    if (r == 1)
      CHECK(cp.mb >= 1 && cp.ic >= 1 && cp.oc >= 1 && cp.g >= 1 && cp.ic % cp.g == 0 &&
                cp.oc % cp.g == 0 && cp.ih >= 1 && cp.iw >= 1 && cp.id >= 1 && cp.oh >= 1 &&
                cp.ow >= 1 && cp.od >= 1 && cp.kh >= 1 && cp.kw >= 1 && cp.kd >= 1 &&
                cp.ndims >= 3 && cp.ndims <= 5,
            "conv descriptor '%s' parsed into an invalid problem", buf);
  }
  printf("conv parser: %d errors, %d empty, %d problems\n", conv_codes[0], conv_codes[1],
         conv_codes[2]);
  CHECK(conv_codes[0] > 0 && conv_codes[2] > 0, "conv fuzzing did not reach both outcomes");
  printf("matmul parser: %d errors, %d empty, %d problems\n", codes[0], codes[1], codes[2]);
  CHECK(codes[0] > 0 && codes[2] > 0, "fuzzing did not reach both outcomes");
  return check_report("test_parse_fuzz");
}
