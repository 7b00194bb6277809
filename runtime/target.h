/* target.h - what the code generator and the schedule space know about the
 * machine (internal). Filled once per runtime by tlm_target_detect() and,
 * when the caller asks for a narrower ISA (tlm_config.isa, TLM_ISA), cut
 * down by tlm_target_restrict(). The struct's bytes go into every cache key
 * (cache/key.c), so it has no padding holes and no pointers. */
#ifndef TLM_RUNTIME_TARGET_H
#define TLM_RUNTIME_TARGET_H

#include <stdint.h>

typedef enum tlm_isa {
  TLM_ISA_SCALAR = 0,  /* no SIMD assumed: one f32 lane */
  TLM_ISA_SSE = 1,     /* 128-bit SSE4.1: 4 f32 lanes, 16 registers, no FMA */
  TLM_ISA_AVX2 = 2,    /* 256-bit AVX2 + FMA: 8 lanes, 16 registers */
  TLM_ISA_AVX512 = 3   /* 512-bit AVX-512F/BW/DQ/VL: 16 lanes, 32 registers */
} tlm_isa;

typedef struct tlm_target {
  int32_t isa;          /* tlm_isa the kernels are generated for */
  int32_t host_isa;     /* the widest tlm_isa the host runs */
  int32_t vec_lanes;    /* f32 lanes of one vector register at `isa` */
  int32_t vec_regs;     /* architectural vector registers at `isa` (16 or 32) */
  int32_t cores;        /* online CPUs (the model's prompt word) */
  int32_t avx512_vnni;  /* 1 if AVX-512 VNNI is present and `isa` is avx512 */
  /* FMA datapath of one core (from the vendor/family table in target.c):
   * pipes that each start one FMA per cycle, their width in bits, and the
   * latency of one FMA in cycles. A vector wider than the datapath is
   * "double-pumped": it takes width / fma_bits issue slots. */
  int32_t fma_pipes, fma_bits, fma_latency;
  /* independent vector FMAs in flight needed to keep every pipe busy at
   * `isa`: fma_latency * vector FMAs issued per cycle (Little's law) */
  int32_t fma_chains;
  int64_t l1d_bytes;    /* L1 data cache per core */
  int64_t l2_bytes;     /* L2 per core */
  int64_t l3_bytes;     /* the L3 this core shares with its neighbours, 0 if none */
  int32_t l3_sharing;   /* logical CPUs sharing that L3 (1 when unknown) */
  int32_t family, model, stepping; /* CPUID display family, model, stepping */
  int32_t vendor;       /* 1 Intel, 2 AMD, 0 other */
  /* worker threads the kernels run on (tlm_config.num_threads; `cores`
   * until a runtime sets it): the space's parallel floor and the rule's
   * block counts read this, not `cores`, so one thread on a many-core
   * host gets single-thread blocking (one N block for GEMV, not a split
   * for workers that do not exist) */
  int32_t threads;
  /* the longest stride between a load's successive addresses that the
   * core's L1 stride prefetcher follows, in bytes; 0 when it follows any
   * stride within a page; TLM_PF_CROSS_PAGE when loads one or two cache
   * lines wide a few KiB apart (a new page every k step or two) stream as
   * well as contiguous ones (from the vendor table in target.c: Intel's
   * IP-based stride prefetcher detects strides of up to 2 KiB; AMD's
   * L1 stride prefetcher names no limit; Zen 5's crossing of pages is
   * measured, not documented). The matmul rule packs B whose rows lie
   * further apart than this (op_matmul.c, mm_rule_packs_b). */
  int32_t pf_stride_bytes;
  /* tlm_passes: the LLVM pass pipeline the kernels are optimized with
   * (tlm_config.passes; 0, "fast", until a runtime sets it). It changes
   * the object code, so it is in every cache key; also keeps cpu_id
   * 8-byte aligned without a padding hole. TLM_PASSES_CODEGEN_LSR is or'ed
   * in when LLVM's code generator still runs loop strength reduction
   * itself (TLM_LLVM_OPTIONS=0, jit/jit.h): other object code again. */
  int32_t passes;
  uint64_t cpu_id;      /* XXH3 of vendor, brand string, family, model, stepping */
  char brand[48];       /* CPUID brand string, NUL-padded */
} tlm_target;

#define TLM_PASSES_CODEGEN_LSR 0x100

/* tlm_target.pf_stride_bytes of a core whose strided loads stream across
 * pages (Zen 5: target.c, fma_table) */
#define TLM_PF_CROSS_PAGE (-1)

/* Detects the host: ISA and registers from CPUID, per-core cache sizes from
 * CPUID leaf 4 (Intel) or 0x8000001D (AMD), with sysfs and sysconf as
 * fallbacks, the FMA datapath from the table in target.c. An AMD L3 larger
 * than one core complex holds (a VM's view of the whole package) is taken
 * as the standard CCX's, shared by its cores (target.c, amd_ccx_l3).
 * Deterministic for one machine: no timing. */
void tlm_target_detect(tlm_target *t);

/* Completes a target described rather than detected (the machine a
 * training record was measured on): from vendor, family, model, host_isa,
 * isa, cores and the cache sizes set by the caller, fills the FMA datapath
 * from the vendor table (unless fma_pipes, fma_bits and fma_latency are
 * all set, as the description gave them), the prefetch reach, lanes,
 * vector registers and FMA chains, and an AMD package-wide L3 as detection
 * corrects it; threads defaults to cores. */
void tlm_target_complete(tlm_target *t);

/* Narrows a detected target to `isa` (at most t->host_isa): lanes, vector
 * registers, VNNI and FMA chains as that ISA has them, so the schedule space
 * and the code generator produce genuine `isa` kernels on a wider host.
 * Returns 0, or -1 when the host cannot run `isa`. */
int tlm_target_restrict(tlm_target *t, int isa);

/* The FMA datapath's width over the vector's: fma_bits / vector bits
 * where a vector of the target's ISA is wider than the pipes, so each
 * vector FMA takes its inverse in issue slots (0.5 for AVX-512 on Zen 4's
 * 256-bit pipes); 1 otherwise or when fma_bits is unset. */
double tlm_target_fma_width(const tlm_target *t);

/* 1 when tlm_target_fma_width is under 1 (the vectors double-pumped). */
int tlm_target_double_pumped(const tlm_target *t);

/* "avx2" for TLM_ISA_AVX2 and so on; "?" when out of range. */
const char *tlm_isa_name(int isa);

/* Parses "avx512", "avx2", "sse", "scalar" (and "native"/"" = -1, the
 * host). Returns the tlm_isa, -1 for the host, or -2 when not a name. */
int tlm_isa_parse(const char *s);

/* LLVM target-feature string for `isa` on a host whose features are
 * `host_features` (LLVMGetHostCPUFeatures): every feature the ISA does not
 * have is turned off ("-avx512f,..."), so LLVM cannot use it even through
 * the CPU name. Writes into buf (cap bytes); returns buf. */
char *tlm_isa_features(int isa, const char *host_features, char *buf, int cap);

/* One line: "avx2 8 lanes, 16 regs, FMA 2x256 lat 4 (8 chains), 2 cores,
 * L1 48K L2 1024K L3 32768K shared by 2, L1 prefetch stride any; host
 * avx512; AMD EPYC ... (family 26 model 2)". Training records carry it
 * (their "hw"), and the trainer rebuilds the target from it, so it names
 * everything the rule reads. */
char *tlm_target_str(const tlm_target *t, char *buf, int cap);

/* Bytes of memory this process may use: physical memory (sysconf), or the
 * memory limit of its control group where one is set and smaller (cgroup
 * v2 memory.max or v1 memory.limit_in_bytes, the process's own group, then
 * the root's), so a container's limit counts, not its host's memory. 0
 * when sysconf cannot say. */
uint64_t tlm_memory_bytes(void);

#endif
