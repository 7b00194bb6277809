/* key.h - canonical cache keys (internal).
 *
 * A key is a zero-padded byte blob of everything that changes the generated
 * code, hashed with XXH3-128 (xxHash). A lookup hit compares the full blob,
 * so a hash collision can never return another task's kernel. */
#ifndef TLM_CACHE_KEY_H
#define TLM_CACHE_KEY_H

#include <stddef.h>
#include <stdint.h>

#include "../runtime/space.h"
#include "../runtime/target.h"
#include "../runtime/task.h"

#define TLM_KEY_MAX 512

typedef struct tlm_key {
  uint64_t hash_lo, hash_hi; /* XXH3-128 of bytes[0..len) */
  uint32_t len;
  uint8_t bytes[TLM_KEY_MAX];
} tlm_key;

/* Shape key: key format version, tlm version, LLVM version, target, the
 * full task (M included) and the scheduler's identity (model checksum, 0
 * for the default rule). */
void tlm_key_shape(tlm_key *k, const tlm_task *task, const tlm_target *target,
                   uint64_t scheduler_id);

/* Schedule key: the same versions and target, the task with its dynamic
 * dimension (M) cleared, and the decisions. Kernels are shared by every
 * task with an equal schedule key. */
void tlm_key_schedule(tlm_key *k, const tlm_task *task, const tlm_target *target,
                      const tlm_schedule *sched);

int tlm_key_equal(const tlm_key *a, const tlm_key *b);

/* GPU keys (runtime/gpu.h): the same header with the GPU target in place
 * of the CPU's (compute capability, SM count, limits, driver version and
 * device name). Shape key: the full task. Kernel key: the task with its
 * run-time extents and strides cleared (unit class, epilogue and whether
 * it has batch dims stay) and the schedule: one module serves every shape
 * that shares both. */
struct tlm_gpu_target;
void tlm_key_gpu_shape(tlm_key *k, const tlm_task *task, const struct tlm_gpu_target *target);
void tlm_key_gpu_kernel(tlm_key *k, const tlm_task *task, const struct tlm_gpu_target *target,
                        const tlm_schedule *sched);

/* The task of a shape key made by tlm_key_shape with this target and
 * scheduler (a key read back from a cache entry's metadata: bytes and len
 * only). Returns 0 with *task, or -1 when the key is not such a key (other
 * versions, target, scheduler, or not a shape key at all); verified by
 * making the key again from the task and comparing every byte. */
int tlm_key_shape_task(const tlm_key *k, const tlm_target *target, uint64_t scheduler_id,
                       tlm_task *task);

/* 32 lowercase hex digits of the hash into buf (>= 33 bytes). */
char *tlm_key_hex(const tlm_key *k, char *buf);

#endif
