/* key.c - canonical key blobs and their XXH3-128 hashes. */
#include "key.h"

#include <llvm-c/Core.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "tlm.h"
#include "../runtime/gpu.h"
#include "../runtime/space.h"

#define KEY_FORMAT 2

/* What of the target the key holds: the ISA kernels are built for, the
 * figures the space and the rule read that CPUID does not fix (cores, the
 * runtime's worker threads, cache sizes as the OS and hypervisor report
 * them), and the CPU's identity (cpu_id hashes vendor, brand, family,
 * model and stepping, which fix the host's LLVM features and the FMA
 * table). Lanes, registers and FMA chains follow from these, so the brand
 * string and derived fields stay out of the key, which every call that
 * misses the per-thread memo hashes. */
typedef struct key_target {
  int32_t isa, cores, threads, passes;
  int64_t l1d_bytes, l2_bytes, l3_bytes;
  uint64_t cpu_id;
} key_target;

/* the longest key: header, target, then the task and the larger of the
 * scheduler id (shape keys) and the schedule (schedule keys) */
#define KEY_HEADER_BYTES (6 * sizeof(uint32_t))
_Static_assert(KEY_HEADER_BYTES + sizeof(key_target) + sizeof(tlm_task) +
                       (sizeof(tlm_schedule) > sizeof(uint64_t) ? sizeof(tlm_schedule)
                                                                : sizeof(uint64_t)) <=
                   TLM_KEY_MAX,
               "TLM_KEY_MAX is too small for the largest key: raise it");

static void put(tlm_key *k, const void *p, size_t n) {
  memcpy(k->bytes + k->len, p, n); /* fits: the assertion above */
  k->len += (uint32_t)n;
}

static void put_u32(tlm_key *k, uint32_t v) { put(k, &v, sizeof v); }

/* format, kind, library, code generator and rule versions, LLVM's */
static void versions(tlm_key *k, uint32_t kind, uint32_t codegen, uint32_t rule) {
  k->len = 0; /* only bytes[0..len) are hashed, compared and stored */
  unsigned maj = 0, min = 0, pat = 0;
  LLVMGetVersion(&maj, &min, &pat);
  put_u32(k, KEY_FORMAT);
  put_u32(k, kind);
  put_u32(k, TLM_VERSION_NUMBER);
  put_u32(k, codegen);
  put_u32(k, rule); /* plans the rule made are the rule's version's */
  put_u32(k, maj * 10000 + min * 100 + pat);
}

static void header(tlm_key *k, uint32_t kind, const tlm_target *target) {
  versions(k, kind, TLM_CODEGEN_VERSION, TLM_RULE_VERSION);
  /* passes 0 ("fast", the default) gives the bytes keys had before the
   * pipeline was part of them: existing caches stay valid */
  key_target kt = {target->isa,      target->cores,    target->threads, target->passes,
                   target->l1d_bytes, target->l2_bytes, target->l3_bytes, target->cpu_id};
  put(k, &kt, sizeof kt); /* no padding holes: 4 x 4 + 4 x 8 bytes */
}

static void finish(tlm_key *k) {
  XXH128_hash_t h = XXH3_128bits(k->bytes, k->len);
  k->hash_lo = h.low64;
  k->hash_hi = h.high64;
}

void tlm_key_shape(tlm_key *k, const tlm_task *task, const tlm_target *target,
                   uint64_t scheduler_id) {
  header(k, 1, target);
  put(k, &scheduler_id, sizeof scheduler_id);
  put(k, task, sizeof *task); /* zero-initialized by validation: no garbage */
  finish(k);
}

void tlm_key_schedule(tlm_key *k, const tlm_task *task, const tlm_target *target,
                      const tlm_schedule *sched) {
  header(k, 2, target);
  tlm_task t = *task;
  tlm_task_clear_runtime(&t);
  put(k, &t, sizeof t);
  put(k, sched, sizeof *sched);
  finish(k);
}

int tlm_key_equal(const tlm_key *a, const tlm_key *b) {
  return a->hash_lo == b->hash_lo && a->hash_hi == b->hash_hi && a->len == b->len &&
         memcmp(a->bytes, b->bytes, a->len) == 0;
}

char *tlm_key_hex(const tlm_key *k, char *buf) {
  snprintf(buf, 33, "%016llx%016llx", (unsigned long long)k->hash_hi,
           (unsigned long long)k->hash_lo);
  return buf;
}

int tlm_key_shape_task(const tlm_key *k, const tlm_target *target, uint64_t scheduler_id,
                       tlm_task *task) {
  tlm_key h;
  header(&h, 1, target);
  put(&h, &scheduler_id, sizeof scheduler_id);
  if (k->len != h.len + sizeof *task || memcmp(k->bytes, h.bytes, h.len)) return -1;
  memcpy(task, k->bytes + h.len, sizeof *task);
  tlm_key again;
  tlm_key_shape(&again, task, target, scheduler_id);
  return again.len == k->len && !memcmp(again.bytes, k->bytes, k->len) ? 0 : -1;
}

/* ---- GPU keys -------------------------------------------------------------- */

/* what of a GPU target a key holds: every figure the space and the rule
 * read, the driver that loads the PTX, the device's name hashed */
typedef struct key_gpu_target {
  int32_t sm, sm_count, max_threads_block, regs_per_sm, regs_per_thread, smem_per_block,
      smem_per_sm, warp, driver_version, pad_;
  uint64_t name_hash;
} key_gpu_target;

_Static_assert(KEY_HEADER_BYTES + sizeof(key_gpu_target) + sizeof(tlm_task) + sizeof(tlm_schedule) <=
                   TLM_KEY_MAX,
               "TLM_KEY_MAX is too small for GPU keys: raise it");

static void gpu_header(tlm_key *k, uint32_t kind, const tlm_gpu_target *target) {
  versions(k, kind, TLM_GPU_CODEGEN_VERSION, TLM_GPU_RULE_VERSION);
  key_gpu_target kt = {target->sm,
                       target->sm_count,
                       target->max_threads_block,
                       target->regs_per_sm,
                       target->regs_per_thread,
                       target->smem_per_block,
                       target->smem_per_sm,
                       target->warp,
                       target->driver_version,
                       0,
                       XXH3_64bits(target->name, strnlen(target->name, sizeof target->name))};
  put(k, &kt, sizeof kt); /* no padding holes: 10 x 4 + 8 bytes */
}

void tlm_key_gpu_shape(tlm_key *k, const tlm_task *task, const tlm_gpu_target *target) {
  gpu_header(k, 11, target);
  put(k, task, sizeof *task);
  finish(k);
}

void tlm_key_gpu_kernel(tlm_key *k, const tlm_task *task, const tlm_gpu_target *target,
                        const tlm_schedule *sched) {
  gpu_header(k, 12, target);
  tlm_task t = *task;
  if (t.kind == TLM_OP_MATMUL) { /* every extent and stride is an argument */
    tlm_matmul_task *m = &t.u.mm;
    int32_t nbatch = m->nbatch > 0, unit = m->unit, act = m->act, bias = m->has_bias,
            res = m->has_residual;
    memset(m, 0, sizeof *m);
    m->nbatch = nbatch, m->unit = unit, m->act = act, m->has_bias = bias, m->has_residual = res;
  } else { /* row operators: rows, columns, heights and strides are arguments */
    tlm_row_task *r = &t.u.row;
    r->rows = r->cols = r->mrows = 0;
    memset(r->sx, 0, sizeof r->sx), memset(r->sy, 0, sizeof r->sy);
    memset(r->sz, 0, sizeof r->sz);
    r->sg = r->sb = r->sxh = r->syh = 0;
  }
  put(k, &t, sizeof t);
  put(k, sched, sizeof *sched);
  finish(k);
}
