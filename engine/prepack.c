/* prepack.c - constant weights packed once (internal; see tlm_constant_add).
 *
 * A kernel whose nest packs B (LN_PACK_B) copies each (batch, K, N) block
 * of B into per-thread scratch every time it reaches the block: for a
 * product with few rows (ResNet's 7x7 layers as matmuls, M = 49) that copy
 * is a large part of the call. When B lies inside memory the caller has
 * declared constant, the engine packs all of it once, in the layout of
 * ln_prepack_b for the kernel's pack geometry, keeps the copy, and passes
 * it as tlm_mm_args.bpk: the kernel then skips its copies. This is the
 * weight reorder oneDNN and inference engines do ahead of time.
 *
 * Everything here runs under the runtime's exec_lock: every kernel call
 * holds it, so a copy is never freed while a kernel reads it. */
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "engine.h"

struct tlm_const_range {
  uintptr_t lo, hi; /* bytes [lo, hi) */
  size_t packed;    /* bytes of packed Bs made from it (written under both locks; not plain aligned copies) */
};

/* a copy is reused for exactly the same B view and pack geometry */
typedef struct prepack_key {
  const float *b;
  int64_t sb[6];
  int64_t N, K;
  int64_t nbatch, batch[TLM_MAX_BATCH];
  int64_t kblock, width; /* the layout's; the N block (panels) does not matter */
} prepack_key;

struct tlm_prepacked {
  uint64_t hash; /* of key: the lookup compares it first */
  prepack_key key;
  uintptr_t range_lo; /* the declared range it was read from */
  float *data;
  size_t bytes;
};

static int range_index(const tlm_runtime *rt, uintptr_t lo, uintptr_t hi) {
  for (size_t i = 0; i < rt->nconsts; i++)
    if (rt->consts[i].lo <= lo && hi <= rt->consts[i].hi) return (int)i;
  return -1;
}

int tlm_prepack_add_locked(tlm_runtime *rt, const void *data, size_t bytes) {
  uintptr_t lo = (uintptr_t)data, hi = lo + bytes;
  for (size_t i = 0; i < rt->nconsts; i++)
    if (lo < rt->consts[i].hi && rt->consts[i].lo < hi) return 1; /* overlaps */
  pthread_rwlock_wrlock(&rt->const_lock);
  int rc = 0;
  if (rt->nconsts == rt->capconsts) {
    size_t cap = rt->capconsts ? 2 * rt->capconsts : 16;
    struct tlm_const_range *p = realloc(rt->consts, cap * sizeof *p);
    if (p) {
      rt->consts = p;
      rt->capconsts = cap;
    } else {
      rc = -1;
    }
  }
  if (!rc) {
    rt->consts[rt->nconsts].lo = lo;
    rt->consts[rt->nconsts].hi = hi;
    rt->consts[rt->nconsts].packed = 0;
    atomic_store_explicit(&rt->nconsts_pub, ++rt->nconsts, memory_order_relaxed);
  }
  pthread_rwlock_unlock(&rt->const_lock);
  return rc;
}

int tlm_prepack_remove_locked(tlm_runtime *rt, const void *data) {
  uintptr_t lo = (uintptr_t)data;
  size_t r = 0;
  while (r < rt->nconsts && rt->consts[r].lo != lo) r++;
  if (r == rt->nconsts) return 1;
  pthread_rwlock_wrlock(&rt->const_lock);
  rt->consts[r] = rt->consts[--rt->nconsts];
  atomic_store_explicit(&rt->nconsts_pub, rt->nconsts, memory_order_relaxed);
  pthread_rwlock_unlock(&rt->const_lock);
  size_t j = 0;
  for (size_t i = 0; i < rt->nprepacked; i++) {
    struct tlm_prepacked *p = &rt->prepacked[i];
    if (p->range_lo == lo) {
      rt->prepacked_bytes -= p->bytes;
      free(p->data);
    } else {
      rt->prepacked[j++] = *p;
    }
  }
  rt->nprepacked = j;
  atomic_store_explicit(&rt->prepacked_bytes_pub, rt->prepacked_bytes, memory_order_relaxed);
  return 0;
}

void tlm_prepack_free_all(tlm_runtime *rt) {
  for (size_t i = 0; i < rt->nprepacked; i++) free(rt->prepacked[i].data);
  free(rt->prepacked);
  free(rt->consts);
  rt->prepacked = NULL;
  rt->consts = NULL;
  rt->nprepacked = rt->capprepacked = rt->nconsts = rt->capconsts = 0;
  rt->prepacked_bytes = 0;
}

/* bytes [lo, hi) that B's view reaches */
static void b_span(const tlm_matmul_task *mm, const tlm_mm_args *a, uintptr_t *lo, uintptr_t *hi) {
  int64_t last = (mm->K - 1) * a->sb[4] + (mm->N - 1) * a->sb[5];
  for (int d = 0; d < mm->nbatch; d++) last += (mm->batch[d] - 1) * a->sb[d];
  *lo = (uintptr_t)a->b;
  *hi = *lo + ((uintptr_t)last + 1) * sizeof(float);
}

int tlm_prepack_b_constant(tlm_runtime *rt, const tlm_task *task, const tlm_mm_args *a) {
  if (!atomic_load_explicit(&rt->nconsts_pub, memory_order_relaxed) || !a->b || !rt->prepack_limit)
    return 0;
  uintptr_t lo, hi;
  b_span(&task->u.mm, a, &lo, &hi);
  pthread_rwlock_rdlock(&rt->const_lock);
  int r = range_index(rt, lo, hi);
  size_t from_range = r >= 0 ? rt->consts[r].packed : 0;
  pthread_rwlock_unlock(&rt->const_lock);
  if (r < 0) return 0;
  /* Constant B makes the schedule pack it, which pays only if the copy is
   * made: when the range has none yet and B would not fit the limit, the
   * task stays a plain one (else every call would pack B) */
  size_t used = atomic_load_explicit(&rt->prepacked_bytes_pub, memory_order_relaxed);
  size_t need = hi - lo;
  return from_range > 0 || (need <= rt->prepack_limit && used <= rt->prepack_limit - need);
}

typedef struct pack_ctx {
  const ln_pack_layout *lay;
  const tlm_task *task;
  const tlm_mm_args *a;
  float *dst;
  int64_t units, nparts; /* panels to pack, parts they are split into */
} pack_ctx;

/* parts [begin, end) of nparts equal shares of the panels */
static void pack_chunk(void *ctx, int64_t begin, int64_t end, int tid) {
  (void)tid;
  pack_ctx *c = ctx;
  for (int64_t i = begin; i < end; i++)
    ln_prepack_b(c->lay, c->task, c->a->b, c->a->sb, c->dst, c->units * i / c->nparts,
                 c->units * (i + 1) / c->nparts);
}

/* The copy of B (read through a->b, a->sb) in layout lay for a key, made
 * when there is none and it fits the limit; NULL otherwise. r: the
 * declared range B lies in. lay NULL: a plain copy of the key->N floats
 * from key->b (an aligned copy; task and a unused). */
static const float *copy_of(tlm_runtime *rt, const prepack_key *key, const ln_pack_layout *lay,
                            const tlm_task *task, const tlm_mm_args *a, int r) {
  uint64_t hash = XXH3_64bits(key, sizeof *key); /* no padding holes: all 8-byte fields */
  for (size_t i = 0; i < rt->nprepacked; i++)
    if (rt->prepacked[i].hash == hash && !memcmp(&rt->prepacked[i].key, key, sizeof *key))
      return rt->prepacked[i].data;
  /* a new copy, within the limit; past it the kernel packs per block */
  int64_t floats = lay ? lay->floats : key->N;
  if (floats < 1 || floats > (int64_t)(SIZE_MAX / 8)) return NULL;
  size_t bytes = (size_t)floats * sizeof(float);
  if (rt->nprepacked == rt->capprepacked) {
    size_t cap = rt->capprepacked ? 2 * rt->capprepacked : 16;
    struct tlm_prepacked *p = realloc(rt->prepacked, cap * sizeof *p);
    if (!p) return NULL;
    rt->prepacked = p;
    rt->capprepacked = cap;
  }
  /* large copies in transparent huge pages where the kernel offers them
   * (madvise mode): 512x fewer page faults while packing, fewer TLB misses
   * in every kernel that streams the copy */
  size_t align = bytes >= ((size_t)4 << 20) ? (size_t)2 << 20 : 64;
  bytes = (bytes + align - 1) & ~(align - 1);
  if (bytes > rt->prepack_limit || rt->prepacked_bytes > rt->prepack_limit - bytes) return NULL;
  float *data = aligned_alloc(align, bytes);
  if (!data) return NULL; /* not an error: the kernel packs per block */
#ifdef MADV_HUGEPAGE
  if (align > 64) madvise(data, bytes, MADV_HUGEPAGE); /* advice only: failure is harmless */
#endif
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (lay) {
    /* over the worker threads, which are idle: exec_lock is held */
    pack_ctx pc = {lay, task, a, data, lay->npanels * lay->kblocks * lay->batches, rt->nthreads};
    tlm_pool_run(rt->pool, pc.nparts, pack_chunk, &pc);
  } else {
    memcpy(data, key->b, (size_t)floats * sizeof(float));
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
  if (lay)
    tlm_log(rt, TLM_LOG_DEBUG, "packed B (%lld x %lld, %zu bytes in panels of k%lld x n%lld) in %.3f ms",
            (long long)task->u.mm.K, (long long)task->u.mm.N, bytes, (long long)lay->kblock,
            (long long)lay->width, ms);
  else
    tlm_log(rt, TLM_LOG_DEBUG, "copied weights at %p (%zu bytes) to a 64-byte boundary in %.3f ms",
            (const void *)key->b, bytes, ms);
  struct tlm_prepacked *p = &rt->prepacked[rt->nprepacked++];
  p->hash = hash;
  p->key = *key;
  p->range_lo = rt->consts[r].lo;
  if (lay) { /* a packed B: what tlm_prepack_b_constant asks about (not a plain copy) */
    pthread_rwlock_wrlock(&rt->const_lock);
    rt->consts[r].packed += bytes;
    pthread_rwlock_unlock(&rt->const_lock);
  }
  p->data = data;
  p->bytes = bytes;
  rt->prepacked_bytes += bytes;
  atomic_fetch_add_explicit(&rt->prepacks, 1, memory_order_relaxed);
  atomic_store_explicit(&rt->prepacked_bytes_pub, rt->prepacked_bytes, memory_order_relaxed);
  return data;
}

const float *tlm_prepack_lookup_locked(tlm_runtime *rt, const tlm_kernel *k, const tlm_task *task,
                                       const tlm_mm_args *a) {
  if (!rt->nconsts || !a->b) return NULL;
  ln_pack_layout lay;
  if (ln_pack_layout_of(&k->nest, task, &lay) != 1) return NULL;
  const tlm_matmul_task *mm = &task->u.mm;
  uintptr_t lo, hi;
  b_span(mm, a, &lo, &hi);
  int r = range_index(rt, lo, hi);
  if (r < 0) return NULL;
  prepack_key key;
  memset(&key, 0, sizeof key);
  key.b = a->b;
  memcpy(key.sb, a->sb, sizeof key.sb);
  key.N = mm->N;
  key.K = mm->K;
  key.nbatch = mm->nbatch;
  for (int d = 0; d < mm->nbatch && d < TLM_MAX_BATCH; d++) key.batch[d] = mm->batch[d];
  key.kblock = lay.kblock;
  key.width = lay.width;
  return copy_of(rt, &key, &lay, task, a, r);
}

/* A channel-blocked convolution's weights (dense HWIO, OCg * oc_blocks
 * output channels) as the matrix B of a product: K = KD KH KW ICg rows of
 * OC, read one block of OCg channels at a time; the copy is that matrix in
 * panels of all K rows by OCg columns, i.e. [block][kd][kh][kw][icg][OCg]. */
static void conv_as_b(const tlm_conv_task *t, const float *wei, tlm_task *mt, tlm_mm_args *ma,
                      ln_pack_layout *lay) {
  int64_t OC = (int64_t)t->OCg * t->oc_blocks, K = (int64_t)t->KD * t->KH * t->KW * t->ICg;
  memset(mt, 0, sizeof *mt);
  memset(ma, 0, sizeof *ma);
  mt->kind = TLM_OP_MATMUL;
  mt->dtype = TLM_F32;
  mt->u.mm.K = K;
  mt->u.mm.N = OC;
  ma->b = wei;
  ma->sb[4] = OC;
  ma->sb[5] = 1;
  memset(lay, 0, sizeof *lay);
  lay->kblock = K;
  lay->width = t->OCg;
  lay->npanels = t->oc_blocks;
  lay->kblocks = lay->batches = 1;
  lay->panel_floats = K * t->OCg;
  lay->floats = K * OC;
}

int tlm_prepack_conv_constant(tlm_runtime *rt, const tlm_conv_task *t, const float *wei) {
  if (!atomic_load_explicit(&rt->nconsts_pub, memory_order_relaxed) || !wei || !rt->prepack_limit)
    return 0;
  int64_t n = (int64_t)t->KD * t->KH * t->KW * t->ICg * t->OCg * (t->G > 0 ? t->G : 1);
  uintptr_t lo = (uintptr_t)wei, hi = lo + (uintptr_t)n * sizeof(float);
  pthread_rwlock_rdlock(&rt->const_lock);
  int r = range_index(rt, lo, hi);
  pthread_rwlock_unlock(&rt->const_lock);
  return r >= 0;
}

const float *tlm_prepack_conv_lookup_locked(tlm_runtime *rt, const tlm_task *task,
                                            const float *wei) {
  const tlm_conv_task *t = &task->u.conv;
  if (!rt->nconsts || !wei || t->oc_blocks < 1) return NULL;
  tlm_task mt;
  tlm_mm_args ma;
  ln_pack_layout lay;
  conv_as_b(t, wei, &mt, &ma, &lay);
  uintptr_t lo, hi;
  b_span(&mt.u.mm, &ma, &lo, &hi);
  int r = range_index(rt, lo, hi);
  if (r < 0) return NULL;
  prepack_key key;
  memset(&key, 0, sizeof key);
  key.b = wei;
  memcpy(key.sb, ma.sb, sizeof key.sb);
  key.N = mt.u.mm.N;
  key.K = mt.u.mm.K;
  key.kblock = lay.kblock;
  key.width = lay.width;
  return copy_of(rt, &key, &lay, &mt, &ma, r);
}

/* A direct convolution's weights read through vector loads (along the
 * output channels, or the groups of a depthwise one) from a view whose
 * first float is off a 64-byte line: every such load whose vector crosses
 * a line costs a second access. malloc() gives 16-byte alignment (and
 * glibc's large blocks start 16 bytes into a page), so this is where an
 * application's weights usually are. Measured on an AMD EPYC Zen 3
 * (family 25 model 1, AVX2, session 52): ResNet-50's 3x3 128-channel
 * layers in samples/vision at 1 thread, 0.64-0.68x of oneDNN with the
 * sample's malloc'd weights 16 or 48 bytes past a line, 0.89x where
 * malloc happened to return a line start, 0.90-0.93x for all four
 * with the weights 64-byte aligned; the whole network 0.95 -> 1.00x. */
const float *tlm_prepack_conv_aligned_locked(tlm_runtime *rt, const tlm_conv_task *t,
                                             const float *wei, const int64_t sw[5]) {
  if (!rt->nconsts || !wei || !((uintptr_t)wei & 63) || !rt->prepack_limit) return NULL;
  int64_t floats = tlm_conv_weight_span(t, sw);
  if (floats < 1) return NULL;
  uintptr_t lo = (uintptr_t)wei, hi = lo + (uintptr_t)floats * sizeof(float);
  int r = range_index(rt, lo, hi);
  if (r < 0) return NULL;
  prepack_key key;
  memset(&key, 0, sizeof key);
  key.b = wei;
  key.N = floats;
  key.kblock = -1; /* a plain copy: no packed layout has a negative block */
  return copy_of(rt, &key, NULL, NULL, NULL, r);
}

int64_t tlm_conv_weight_span(const tlm_conv_task *t, const int64_t sw[5]) {
  const int64_t ext[5] = {(int64_t)t->OCg * (t->G > 0 ? t->G : 1), t->ICg, t->KD, t->KH, t->KW};
  int64_t last = 0, count = 1;
  for (int d = 0; d < 5; d++) {
    if (ext[d] < 1 || sw[d] < 0) return 0;
    int64_t step;
    if (__builtin_mul_overflow(ext[d] - 1, sw[d], &step) || __builtin_add_overflow(last, step, &last) ||
        __builtin_mul_overflow(count, ext[d], &count) || last >= INT64_MAX / (int64_t)sizeof(float) - 1)
      return 0;
  }
  /* only a span the weights fill (a dense layout, in any order of dims):
   * one with gaps would copy bytes that are no part of the tensor, which
   * may be unreadable, written by another thread, or far larger */
  return last + 1 == count ? count : 0;
}
