/* bench_tier0.c - single-thread speed of the tier-0 convolution kernels
 * (generic/conv.c), the kernels a new convolution shape runs on while its
 * scheduled kernel compiles (TLM_ASYNC=1; docs/design.md, "Background
 * builds"). Their correctness is tests/test_generic.c's; this only times.
 *
 *   bench_tier0 [--isa avx512|avx2|sse] KIND:C:H:S ...
 *
 * KIND dw (depthwise, C groups) or dense (C -> C channels); 3x3 window,
 * padding 1, stride S, an H x H NHWC input at minibatch 1, HWIO weights,
 * bias and ReLU. Prints the best of 50 calls over all output rows, ms and
 * GFLOPS (2 FLOP per multiply-add). Pin it (taskset) and run old and new
 * builds alternately: these VMs' noise is 10-20%. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generic/generic.h"
#include "runtime/clock.h"
#include "runtime/target.h"

static float *filled(size_t n, float scale) {
  float *p = malloc(n * sizeof *p);
  if (!p) return NULL;
  for (size_t i = 0; i < n; i++) p[i] = scale * (float)(i % 7) - scale;
  return p;
}

int main(int argc, char **argv) {
  tlm_target host;
  tlm_target_detect(&host);
  int isa = host.isa, first = 1;
  if (argc > 2 && !strcmp(argv[1], "--isa")) {
    isa = tlm_isa_parse(argv[2]);
    first = 3;
    if (isa < 0 || isa > host.isa) {
      fprintf(stderr, "bench_tier0: --isa %s: not an ISA this host runs\n", argv[2]);
      return 2;
    }
  }
  if (first >= argc) {
    fprintf(stderr, "usage: bench_tier0 [--isa avx512|avx2|sse] dw:C:H:S|dense:C:H:S ...\n");
    return 2;
  }
  tlm_generic_conv_fn fn = tlm_generic_conv(isa);
  printf("tier-0 convolution, isa %s, 1 thread, %s\n", tlm_isa_name(isa), host.brand);
  for (int i = first; i < argc; i++) {
    char kind[8];
    int C, H, S;
    if (sscanf(argv[i], "%7[a-z]:%d:%d:%d", kind, &C, &H, &S) != 4 || C < 1 || H < 1 || S < 1 ||
        C > 4096 || H > 1024 || S > 4 || (strcmp(kind, "dw") && strcmp(kind, "dense"))) {
      fprintf(stderr, "bench_tier0: %s: expected dw:C:H:S or dense:C:H:S\n", argv[i]);
      return 2;
    }
    int dw = !strcmp(kind, "dw");
    int64_t OH = (H + 2 - 3) / S + 1, IC = dw ? 1 : C; /* input channels per group */
    tlm_conv_task t;
    memset(&t, 0, sizeof t);
    t.G = dw ? C : 1, t.ICg = (int32_t)IC, t.OCg = dw ? 1 : C;
    t.KD = 1, t.KH = t.KW = 3, t.sd = 1, t.sh = t.sw = S, t.ph = t.pw = 1;
    t.dd = t.dh = t.dw = 1, t.act = TLM_ACT_RELU, t.has_bias = 1;
    float *src = filled((size_t)H * H * C, 0.1f), *dst = filled((size_t)OH * OH * C, 0.0f),
          *wei = filled((size_t)9 * IC * C, 0.01f), *bias = filled((size_t)C, 0.1f);
    if (!src || !dst || !wei || !bias) {
      fprintf(stderr, "bench_tier0: out of memory\n");
      return 1;
    }
    tlm_conv_args a;
    memset(&a, 0, sizeof a);
    a.dst = dst, a.src = src, a.wei = wei, a.bias = bias, a.sbias = 1;
    a.N = a.ID = a.OD = 1, a.IH = a.IW = H, a.OH = a.OW = OH;
    a.ss[0] = a.ss[2] = (int64_t)H * H * C, a.ss[1] = 1, a.ss[3] = (int64_t)H * C, a.ss[4] = C;
    a.sw[0] = 1, a.sw[1] = C, a.sw[4] = IC * C, a.sw[3] = 3 * IC * C, a.sw[2] = 9 * IC * C;
    a.sd[0] = a.sd[2] = OH * OH * C, a.sd[1] = 1, a.sd[3] = OH * C, a.sd[4] = C;
    double best = 1e30;
    for (int r = 0; r < 50; r++) {
      double t0 = tlm_clock_ms();
      fn(&t, &a, 0, OH);
      double dt = tlm_clock_ms() - t0;
      if (dt < best) best = dt;
    }
    double flop = 2.0 * 9 * (double)IC * C * (double)OH * OH;
    printf("%-20s %9.4f ms %8.1f GFLOPS\n", argv[i], best, flop / best * 1e-6);
    free(src), free(dst), free(wei), free(bias);
  }
  return 0;
}
