/* target.c - host detection for the schedule space and code generator. */
#include "target.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define TLM_X86 1
#else
#define TLM_X86 0
#endif

static const char *const k_isa_names[] = {"scalar", "sse", "avx2", "avx512"};

const char *tlm_isa_name(int isa) {
  return isa >= 0 && isa <= TLM_ISA_AVX512 ? k_isa_names[isa] : "?";
}

int tlm_isa_parse(const char *s) {
  if (!s || !*s || !strcmp(s, "native") || !strcmp(s, "host")) return -1;
  for (int i = 0; i <= TLM_ISA_AVX512; i++)
    if (!strcmp(s, k_isa_names[i])) return i;
  if (!strcmp(s, "avx512f") || !strcmp(s, "avx512_core")) return TLM_ISA_AVX512;
  return -2;
}

/* ---- CPUID ------------------------------------------------------------------ */

#if TLM_X86
static int cpuid(unsigned leaf, unsigned sub, unsigned r[4]) {
  return __get_cpuid_count(leaf, sub, &r[0], &r[1], &r[2], &r[3]);
}

/* Deterministic cache parameters (Intel SDM vol. 2, CPUID leaf 4; AMD APM
 * vol. 3, leaf 0x8000001D, same layout): per level the data or unified
 * cache's size and the logical CPUs sharing it. */
static void cpuid_caches(unsigned leaf, tlm_target *t) {
  unsigned r[4];
  for (unsigned sub = 0; sub < 16; sub++) {
    if (!cpuid(leaf, sub, r)) return;
    unsigned type = r[0] & 0x1f, level = (r[0] >> 5) & 7;
    if (type == 0) return;      /* no more caches */
    if (type == 2) continue;    /* instruction cache */
    int64_t ways = ((r[1] >> 22) & 0x3ff) + 1, parts = ((r[1] >> 12) & 0x3ff) + 1;
    int64_t line = (r[1] & 0xfff) + 1, sets = (int64_t)r[2] + 1;
    int64_t bytes = ways * parts * line * sets;
    int32_t sharing = (int32_t)((r[0] >> 14) & 0xfff) + 1;
    if (level == 1) t->l1d_bytes = bytes;
    else if (level == 2) t->l2_bytes = bytes;
    else if (level == 3) t->l3_bytes = bytes, t->l3_sharing = sharing;
  }
}

/* The older fixed-layout leaves, for hosts (some hypervisors) that report
 * no deterministic cache leaf: AMD APM vol. 3, CPUID 0x80000005 ECX[31:24]
 * (L1 data, KiB) and 0x80000006 ECX[31:16] (L2, KiB; Intel reports it
 * there too) and EDX[31:18] (L3 in 512 KiB units, AMD). That L3 is the
 * package's as the (virtual) CPU sees it, so it is taken as shared by
 * every logical CPU of the package, 0x80000008 ECX[7:0] + 1, as Linux
 * does for such CPUs, and at least by every CPU online (a hypervisor may
 * leave that field 0). Only sizes still unknown are filled. */
static void cpuid_legacy_caches(tlm_target *t) {
  unsigned r[4];
  if (!cpuid(0x80000000u, 0, r)) return;
  unsigned max = r[0];
  if (t->vendor == 2 && max >= 0x80000005u && cpuid(0x80000005u, 0, r) && !t->l1d_bytes)
    t->l1d_bytes = (int64_t)(r[2] >> 24) * 1024;
  if (max < 0x80000006u || !cpuid(0x80000006u, 0, r)) return;
  if (!t->l2_bytes) t->l2_bytes = (int64_t)(r[2] >> 16) * 1024;
  if (t->vendor == 2 && !t->l3_bytes && (r[3] >> 18)) {
    t->l3_bytes = (int64_t)(r[3] >> 18) * 512 * 1024;
    unsigned n[4];
    if (max >= 0x80000008u && cpuid(0x80000008u, 0, n)) t->l3_sharing = (int32_t)(n[2] & 0xff) + 1;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (online > t->l3_sharing) t->l3_sharing = (int32_t)online;
  }
}
#endif

/* sysfs: /sys/devices/system/cpu/cpu0/cache/indexN/{level,type,size} */
static void sysfs_caches(tlm_target *t) {
  for (int i = 0; i < 8; i++) {
    char path[96], buf[32];
    int64_t v[3] = {0, 0, 0}; /* level, is-data-or-unified, size */
    static const char *const files[] = {"level", "type", "size"};
    int ok = 1;
    for (int f = 0; f < 3 && ok; f++) {
      snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/%s", i, files[f]);
      FILE *fp = fopen(path, "r");
      if (!fp || !fgets(buf, sizeof buf, fp)) ok = 0;
      if (fp) fclose(fp);
      if (!ok) break;
      if (f == 1) v[1] = strncmp(buf, "Instruction", 11) != 0;
      else {
        char *end;
        v[f] = strtoll(buf, &end, 10);
        if (f == 2 && (*end == 'K' || *end == 'k')) v[f] *= 1024;
        else if (f == 2 && *end == 'M') v[f] *= 1024 * 1024;
      }
    }
    if (!ok) return;
    if (!v[1] || v[2] <= 0) continue;
    if (v[0] == 1 && !t->l1d_bytes) t->l1d_bytes = v[2];
    if (v[0] == 2 && !t->l2_bytes) t->l2_bytes = v[2];
    if (v[0] == 3 && !t->l3_bytes) t->l3_bytes = v[2];
  }
}

/* The FMA datapath by vendor and family, from the vendors' optimization
 * guides (AMD Software Optimization Guides for families 17h, 19h and 1Ah;
 * Intel 64 and IA-32 Optimization Reference Manual) and Agner Fog's
 * instruction tables. CPUID does not report it. */
static void fma_table(tlm_target *t) {
  int avx512 = t->host_isa == TLM_ISA_AVX512;
  t->fma_pipes = 2;
  t->fma_bits = avx512 ? 512 : t->host_isa == TLM_ISA_AVX2 ? 256 : 128;
  t->fma_latency = 4;
  t->pf_stride_bytes = 0;
  if (t->vendor == 2) {
    if (t->family == 0x17) { /* Zen, Zen+: 128-bit pipes; Zen 2: 256 */
      t->fma_bits = t->model >= 0x30 ? 256 : 128;
      t->fma_latency = 5;
    } else if (t->family == 0x19) { /* Zen 3 and Zen 4: 256-bit pipes, AVX-512 double-pumped */
      t->fma_bits = 256;
    } else if (t->family == 0x1a) { /* Zen 5: 512-bit pipes, but the mobile parts are 256 */
      int mobile = (t->model >= 0x20 && t->model <= 0x2f) || (t->model >= 0x60 && t->model <= 0x7f);
      t->fma_bits = mobile ? 256 : 512;
      /* Measured, as no guide states it (EPYC Zen 5 VM, family 1Ah model 2,
       * AVX2 tiles, tlm run --vs, unpacked over packed B time at 32 rows):
       * 4 x 24 tiles (96-byte rows) 3, 6 and 9 KiB apart 0.78-0.91, 6 x 16
       * (one line a row) 3 KiB apart 0.80; a Zen 3 (family 19h) read
       * 1.22-1.35x the other way for those 6 x 16 rows. So Zen 5 streams
       * such rows across pages and Zen 3 does not
       * (bench/results/ab_packb_*_zen5oxide_avx2_s4*.txt). */
      t->pf_stride_bytes = TLM_PF_CROSS_PAGE;
    }
  } else if (t->vendor == 1 && t->family == 6) {
    /* Intel 64 and IA-32 Optimization Reference Manual, data prefetch to
     * the L1: the IP-based stride prefetcher detects forward or backward
     * strides of up to 2 KiB (every Intel core since Sandy Bridge) */
    t->pf_stride_bytes = 2048;
    /* Haswell and Broadwell: latency 5; later cores 4. AVX-512 parts are
     * taken to have two 512-bit FMA pipes (server cores; CPUID does not
     * tell the one-pipe parts apart). */
    static const int hsw_bdw[] = {0x3c, 0x3f, 0x45, 0x46, 0x3d, 0x47, 0x4f, 0x56};
    for (size_t i = 0; i < sizeof hsw_bdw / sizeof hsw_bdw[0]; i++)
      if (t->model == hsw_bdw[i]) t->fma_latency = 5;
  }
}

static void set_isa_shape(tlm_target *t) {
  static const int lanes[] = {1, 4, 8, 16}, regs[] = {16, 16, 16, 32};
  t->vec_lanes = lanes[t->isa];
  t->vec_regs = regs[t->isa];
  if (t->isa != TLM_ISA_AVX512) t->avx512_vnni = 0;
  /* vector FMAs issued per cycle: every pipe, unless the vector is wider
   * than the pipe (then it takes width / fma_bits slots) */
  int bits = 32 * t->vec_lanes;
  int per_cycle_x2 = 2 * t->fma_pipes * (bits > t->fma_bits ? t->fma_bits : bits) / bits;
  int chains = (t->fma_latency * per_cycle_x2 + 1) / 2;
  t->fma_chains = chains < 1 ? 1 : chains;
}

/* AMD's L3 is one per core complex (CCX): Zen and Zen+ 8 MiB and Zen 2
 * 16 MiB, each shared by 4 cores; Zen 3, Zen 4 and Zen 5 32 MiB shared by 8
 * (96 MiB with 3D V-Cache); AMD's product specifications and Software
 * Optimization Guides for families 17h, 19h and 1Ah. An L3 larger than any
 * one CCX holds is a virtual CPU's view of the whole package (the Zen 5 VM
 * of sessions 19-42 reports 520192K, shared by its 2 vCPUs: 254 MiB a core,
 * 60 times what a Turin core gets): then the core's share is the standard
 * CCX's, its L3 over its cores. Idempotent, so that a description read
 * back from records gets the same value (tlm_target_complete). */
static void amd_ccx_l3(tlm_target *t) {
  if (t->vendor != 2 || t->family < 0x17 || t->family > 0x1a) return;
  int zen12 = t->family == 0x17;
  int64_t mib = 1024 * 1024, most = zen12 ? 16 * mib : 96 * mib;
  if (t->l3_bytes <= most) return;
  t->l3_bytes = zen12 ? (t->model >= 0x30 ? 16 : 8) * mib : 32 * mib;
  t->l3_sharing = zen12 ? 4 : 8;
}

void tlm_target_detect(tlm_target *t) {
  memset(t, 0, sizeof *t);
  t->host_isa = TLM_ISA_SCALAR;
  t->l3_sharing = 1;
#if TLM_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    t->host_isa = TLM_ISA_AVX512;
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    t->host_isa = TLM_ISA_AVX2;
  else if (__builtin_cpu_supports("sse4.1"))
    t->host_isa = TLM_ISA_SSE;
  t->avx512_vnni = __builtin_cpu_supports("avx512vnni") ? 1 : 0;
  unsigned r[4];
  char vendor[13] = {0};
  if (cpuid(0, 0, r)) {
    memcpy(vendor, &r[1], 4), memcpy(vendor + 4, &r[3], 4), memcpy(vendor + 8, &r[2], 4);
    t->vendor = !strcmp(vendor, "GenuineIntel") ? 1 : !strcmp(vendor, "AuthenticAMD") ? 2 : 0;
  }
  if (cpuid(1, 0, r)) {
    int fam = (r[0] >> 8) & 0xf, mod = (r[0] >> 4) & 0xf;
    if (fam == 0xf) fam += (r[0] >> 20) & 0xff;
    if (fam == 6 || fam >= 0xf) mod |= ((r[0] >> 16) & 0xf) << 4;
    t->family = fam, t->model = mod, t->stepping = (int32_t)(r[0] & 0xf);
  }
  if (cpuid(0x80000000u, 0, r) && r[0] >= 0x80000004u) {
    unsigned b[12];
    for (unsigned i = 0; i < 3; i++) cpuid(0x80000002u + i, 0, b + 4 * i);
    memcpy(t->brand, b, 48);
    t->brand[47] = 0;
    /* trim the leading and trailing blanks some CPUs pad with */
    size_t s = 0, e = strlen(t->brand);
    while (t->brand[s] == ' ') s++;
    while (e > s && t->brand[e - 1] == ' ') e--;
    memmove(t->brand, t->brand + s, e - s);
    memset(t->brand + (e - s), 0, sizeof t->brand - (e - s));
  }
  if (t->vendor == 2) {
    unsigned ext[4];
    /* leaf 0x8000001D needs TOPOEXT (CPUID 0x80000001 ECX bit 22) */
    if (cpuid(0x80000001u, 0, ext) && (ext[2] & (1u << 22))) cpuid_caches(0x8000001Du, t);
  } else if (t->vendor == 1) {
    cpuid_caches(4, t);
  }
  char idbuf[80];
  int n = snprintf(idbuf, sizeof idbuf, "%s/%d/%d/%d/", vendor, t->family, t->model, t->stepping);
  XXH3_state_t *st = XXH3_createState();
  if (st) {
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, idbuf, (size_t)n);
    XXH3_64bits_update(st, t->brand, sizeof t->brand);
    t->cpu_id = XXH3_64bits_digest(st);
    XXH3_freeState(st);
  }
#endif
  sysfs_caches(t);
#if TLM_X86
  cpuid_legacy_caches(t);
#endif
  amd_ccx_l3(t);
  long c = sysconf(_SC_NPROCESSORS_ONLN);
  t->cores = c > 0 ? (int32_t)c : 1;
  t->threads = t->cores;
  /* unknown sizes: the smallest common x86-64 ones */
  if (t->l1d_bytes <= 0) t->l1d_bytes = 32 * 1024;
  if (t->l2_bytes <= 0) t->l2_bytes = 256 * 1024;
  if (t->l3_bytes < 0) t->l3_bytes = 0;
  fma_table(t);
  t->isa = t->host_isa;
  set_isa_shape(t);
}

void tlm_target_complete(tlm_target *t) {
  if (t->host_isa < t->isa) t->host_isa = t->isa;
  if (t->l3_sharing <= 0) t->l3_sharing = 1;
  amd_ccx_l3(t);
  if (t->cores <= 0) t->cores = 1;
  if (t->threads <= 0) t->threads = t->cores;
  int pipes = t->fma_pipes, bits = t->fma_bits, lat = t->fma_latency;
  fma_table(t);
  if (pipes > 0 && bits > 0 && lat > 0) /* as the description gave it */
    t->fma_pipes = pipes, t->fma_bits = bits, t->fma_latency = lat;
  set_isa_shape(t);
}

double tlm_target_fma_width(const tlm_target *t) {
  int bits = 32 * (t->vec_lanes > 0 ? t->vec_lanes : 1);
  return t->fma_bits > 0 && t->fma_bits < bits ? (double)t->fma_bits / bits : 1.0;
}

int tlm_target_double_pumped(const tlm_target *t) { return tlm_target_fma_width(t) < 1.0; }

int tlm_target_restrict(tlm_target *t, int isa) {
  if (isa < 0) return 0;
  if (isa > t->host_isa) return -1;
  t->isa = isa;
  set_isa_shape(t);
  return 0;
}

/* 1 when the LLVM feature `name` (without its sign) needs more than `isa` */
static int feature_above(const char *name, size_t len, int isa) {
  static const char *const avx512_words[] = {"avx512", "avx10", "amx", "evex512"};
  static const char *const avx_words[] = {"avx", "fma", "f16c", "xop", "vaes", "vpclmulqdq"};
  if (isa < TLM_ISA_AVX512)
    for (size_t i = 0; i < sizeof avx512_words / sizeof avx512_words[0]; i++)
      if (len >= strlen(avx512_words[i]) && !strncmp(name, avx512_words[i], strlen(avx512_words[i])))
        return 1;
  if (isa < TLM_ISA_AVX2)
    for (size_t i = 0; i < sizeof avx_words / sizeof avx_words[0]; i++)
      if (len >= strlen(avx_words[i]) && !strncmp(name, avx_words[i], strlen(avx_words[i])))
        return 1;
  return 0;
}

char *tlm_isa_features(int isa, const char *host, char *buf, int cap) {
  int len = 0;
  buf[0] = 0;
  const char *p = host ? host : "";
  while (*p && len < cap - 1) {
    const char *q = strchr(p, ',');
    size_t n = q ? (size_t)(q - p) : strlen(p);
    if (n > 1 && (p[0] == '+' || p[0] == '-')) {
      char sign = p[0] == '+' && feature_above(p + 1, n - 1, isa) ? '-' : p[0];
      len += snprintf(buf + len, (size_t)(cap - len), "%s%c%.*s", len ? "," : "", sign,
                      (int)(n - 1), p + 1);
    }
    p += n;
    if (*p == ',') p++;
  }
  if (len >= cap) buf[cap - 1] = 0;
  return buf;
}

char *tlm_target_str(const tlm_target *t, char *buf, int cap) {
  char pf[16] = "";
  if (t->pf_stride_bytes > 0) snprintf(pf, sizeof pf, "%dK", t->pf_stride_bytes / 1024);
  else if (t->pf_stride_bytes == TLM_PF_CROSS_PAGE) snprintf(pf, sizeof pf, " across pages");
  snprintf(buf, (size_t)cap,
           "%s%s %d lanes, %d regs, FMA %dx%d lat %d (%d chains), %d cores, L1 %lldK L2 %lldK "
           "L3 %lldK shared by %d, L1 prefetch stride %s%s; host %s; %s (family %d model %d)",
           tlm_isa_name(t->isa), t->avx512_vnni ? "+vnni" : "", t->vec_lanes, t->vec_regs,
           t->fma_pipes, t->fma_bits, t->fma_latency, t->fma_chains, t->cores,
           (long long)(t->l1d_bytes / 1024), (long long)(t->l2_bytes / 1024),
           (long long)(t->l3_bytes / 1024), t->l3_sharing > 0 ? t->l3_sharing : 1,
           t->pf_stride_bytes > 0 ? "<= " : "any", pf,
           tlm_isa_name(t->host_isa),
           t->brand[0] ? t->brand : "unknown CPU", t->family, t->model);
  return buf;
}

/* ---- memory -------------------------------------------------------------------------- */

/* the number in a cgroup limit file; 0 for "max", unreadable or absent */
static uint64_t limit_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char buf[64] = {0};
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *end;
  unsigned long long v = strtoull(buf, &end, 10);
  return end != buf ? (uint64_t)v : 0;
}

static uint64_t smaller(uint64_t limit, uint64_t v) { return v && (!limit || v < limit) ? v : limit; }

uint64_t tlm_memory_bytes(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  uint64_t total = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
  uint64_t limit = 0;
  /* the process's groups: "0::PATH" (v2), "N:memory:PATH" (v1) */
  FILE *f = fopen("/proc/self/cgroup", "r");
  char line[512], path[640];
  while (f && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    const char *p = NULL, *fmt = NULL;
    if (!strncmp(line, "0::", 3)) {
      p = line + 3;
      fmt = "/sys/fs/cgroup%s/memory.max";
    } else if (strstr(line, ":memory:")) {
      p = strstr(line, ":memory:") + 8;
      fmt = "/sys/fs/cgroup/memory%s/memory.limit_in_bytes";
    }
    if (!p || strstr(p, "..")) continue;
    snprintf(path, sizeof path, fmt, strcmp(p, "/") ? p : "");
    limit = smaller(limit, limit_file(path));
  }
  if (f) fclose(f);
  limit = smaller(limit, limit_file("/sys/fs/cgroup/memory.max"));
  limit = smaller(limit, limit_file("/sys/fs/cgroup/memory/memory.limit_in_bytes"));
  return smaller(total, limit);
}
