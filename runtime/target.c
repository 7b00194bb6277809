/* target.c - host detection for the schedule space and code generator. */
#include "target.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int64_t sysconf_or(int name, int64_t fallback) {
  long v = sysconf(name);
  return v > 0 ? (int64_t)v : fallback;
}

void tlm_target_detect(tlm_target *t) {
  memset(t, 0, sizeof *t);
  t->isa = TLM_ISA_SCALAR;
  t->vec_lanes = 1;
  t->vec_regs = 16;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    t->isa = TLM_ISA_AVX512;
    t->vec_lanes = 16;
    t->vec_regs = 32;
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    t->isa = TLM_ISA_AVX2;
    t->vec_lanes = 8;
  } else if (__builtin_cpu_supports("sse2")) {
    t->isa = TLM_ISA_SSE;
    t->vec_lanes = 4;
  }
  t->avx512_vnni = __builtin_cpu_supports("avx512vnni") ? 1 : 0;
#endif
  t->cores = (int32_t)sysconf_or(_SC_NPROCESSORS_ONLN, 1);
#ifdef _SC_LEVEL1_DCACHE_SIZE
  t->l1d_bytes = sysconf_or(_SC_LEVEL1_DCACHE_SIZE, 32 * 1024);
  t->l2_bytes = sysconf_or(_SC_LEVEL2_CACHE_SIZE, 512 * 1024);
  t->l3_bytes = sysconf_or(_SC_LEVEL3_CACHE_SIZE, 0);
#else
  t->l1d_bytes = 32 * 1024;
  t->l2_bytes = 512 * 1024;
#endif
}

char *tlm_target_str(const tlm_target *t, char *buf, int cap) {
  static const char *isa_names[] = {"scalar", "sse", "avx2", "avx512"};
  const char *isa = (t->isa >= 0 && t->isa <= 3) ? isa_names[t->isa] : "?";
  snprintf(buf, (size_t)cap, "%s%s %d lanes, %d regs, %d cores, L1 %lldK L2 %lldK L3 %lldK",
           isa, t->avx512_vnni ? "+vnni" : "", t->vec_lanes, t->vec_regs, t->cores,
           (long long)(t->l1d_bytes / 1024), (long long)(t->l2_bytes / 1024),
           (long long)(t->l3_bytes / 1024));
  return buf;
}
