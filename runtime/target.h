/* target.h - what the code generator and the schedule space know about the
 * machine (internal). Filled once per runtime by tlm_target_detect(). */
#ifndef TLM_RUNTIME_TARGET_H
#define TLM_RUNTIME_TARGET_H

#include <stdint.h>

typedef enum tlm_isa {
  TLM_ISA_SCALAR = 0,  /* no SIMD assumed */
  TLM_ISA_SSE = 1,     /* 128-bit: 4 f32 lanes */
  TLM_ISA_AVX2 = 2,    /* 256-bit + FMA: 8 lanes */
  TLM_ISA_AVX512 = 3   /* 512-bit (AVX-512F): 16 lanes */
} tlm_isa;

typedef struct tlm_target {
  int32_t isa;          /* tlm_isa */
  int32_t vec_lanes;    /* f32 lanes of the widest vector register */
  int32_t vec_regs;     /* architectural vector registers (16 or 32) */
  int32_t cores;        /* online CPUs */
  int32_t avx512_vnni;  /* 1 if AVX-512 VNNI is present */
  int32_t pad_;
  int64_t l1d_bytes;    /* per core, 0 if unknown */
  int64_t l2_bytes;     /* per core, 0 if unknown */
  int64_t l3_bytes;     /* shared, 0 if unknown */
} tlm_target;

/* Detects the host (CPUID through the compiler's builtins, cache sizes
 * through sysconf with fallbacks). Deterministic for one machine. */
void tlm_target_detect(tlm_target *t);

/* Short text such as "avx512 16 lanes, 32 regs, 2 cores, L1 48K L2 1024K". */
char *tlm_target_str(const tlm_target *t, char *buf, int cap);

#endif
