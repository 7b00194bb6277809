/* infer.c - the int8 decoder: one token at a time with a KV cache, int8
 * weight x int8 activation dot products (AVX-512 VNNI, AVX2, or the scalar
 * reference, chosen at run time), and constrained decoding. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "model.h"

/* ---- int8 dot products ------------------------------------------------------- */

/* sum over blocks of dw * dx * (qw . qx) */
typedef float (*dot_fn)(const tlm_q8_block *w, const int8_t *xq, const float *xd, int nb);

static float dot_scalar(const tlm_q8_block *w, const int8_t *xq, const float *xd, int nb) {
  float sum = 0;
  for (int b = 0; b < nb; b++) {
    int32_t acc = 0;
    for (int i = 0; i < TLM_Q8_BLOCK; i++) acc += (int32_t)w[b].q[i] * xq[b * TLM_Q8_BLOCK + i];
    sum += w[b].d * xd[b] * (float)acc;
  }
  return sum;
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* |x| (unsigned) times w with x's sign: u8 x s8 products equal w * x */
__attribute__((target("avx2,fma,avx512f,avx512vl,avx512vnni"))) static float dot_vnni(
    const tlm_q8_block *w, const int8_t *xq, const float *xd, int nb) {
  __m256 acc = _mm256_setzero_ps();
  for (int b = 0; b < nb; b++) {
    __m256i x = _mm256_loadu_si256((const __m256i *)(xq + b * TLM_Q8_BLOCK));
    __m256i q = _mm256_loadu_si256((const __m256i *)w[b].q);
    __m256i ax = _mm256_sign_epi8(x, x), sq = _mm256_sign_epi8(q, x);
    __m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, sq);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(w[b].d * xd[b]), acc);
  }
  return hsum256(acc);
}

__attribute__((target("avx2,fma"))) static float dot_avx2(const tlm_q8_block *w,
                                                           const int8_t *xq, const float *xd,
                                                           int nb) {
  __m256 acc = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int b = 0; b < nb; b++) {
    __m256i x = _mm256_loadu_si256((const __m256i *)(xq + b * TLM_Q8_BLOCK));
    __m256i q = _mm256_loadu_si256((const __m256i *)w[b].q);
    __m256i ax = _mm256_sign_epi8(x, x), sq = _mm256_sign_epi8(q, x);
    /* pairs of u8 x s8 products fit int16: 2 * 127 * 127 < 32767 */
    __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sq), ones);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(w[b].d * xd[b]), acc);
  }
  return hsum256(acc);
}
#endif

/* the widest tlm_isa the decoder may use (process-wide; -1 = the host's) */
static _Atomic int g_isa_cap = -1;
void tlm_lm_force_scalar(int on) { g_isa_cap = on ? TLM_ISA_SCALAR : -1; }
void tlm_lm_force_isa(int isa) { g_isa_cap = isa; }

static dot_fn pick_dot(void) {
  int cap = g_isa_cap;
  if (cap >= 0 && cap < TLM_ISA_AVX2) return dot_scalar;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if ((cap < 0 || cap >= TLM_ISA_AVX512) && __builtin_cpu_supports("avx512vnni") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma"))
    return dot_vnni;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return dot_avx2;
#endif
  return dot_scalar;
}

const char *tlm_lm_isa(void) {
  dot_fn f = pick_dot();
#if defined(__x86_64__)
  if (f == dot_vnni) return "avx512-vnni";
  if (f == dot_avx2) return "avx2";
#endif
  (void)f;
  return "scalar";
}

#if defined(__x86_64__)
/* quantize_act with AVX2: the same scales and the same integers (vcvtps2dq
 * rounds to nearest even, as rintf does in the default rounding mode) */
__attribute__((target("avx2"))) static void quantize_act_avx2(const float *x, int n, int8_t *q,
                                                             float *d) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int b = 0; b < n / TLM_Q8_BLOCK; b++) {
    const float *xb = x + b * TLM_Q8_BLOCK;
    __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8);
    __m256 v2 = _mm256_loadu_ps(xb + 16), v3 = _mm256_loadu_ps(xb + 24);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v0, absmask), _mm256_and_ps(v1, absmask)),
                             _mm256_max_ps(_mm256_and_ps(v2, absmask), _mm256_and_ps(v3, absmask)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    d[b] = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
    __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, id)), i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, id));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, id)), i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, id));
    /* packs work per 128-bit lane: put the 32 bytes back in order */
    __m256i w = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    w = _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)(q + b * TLM_Q8_BLOCK), w);
  }
}
#endif

/* x (n) -> int8 blocks with one scale each (the activations' Q8) */
static inline void quantize_act_ref(const float *x, int n, int8_t *q, float *d) {
  for (int b = 0; b < n / TLM_Q8_BLOCK; b++) {
    float amax = 0;
    for (int i = 0; i < TLM_Q8_BLOCK; i++) {
      float a = fabsf(x[b * TLM_Q8_BLOCK + i]);
      if (a > amax) amax = a;
    }
    d[b] = amax / 127.0f;
    float id = amax > 0 ? 127.0f / amax : 0.0f;
    for (int i = 0; i < TLM_Q8_BLOCK; i++)
      q[b * TLM_Q8_BLOCK + i] = (int8_t)__builtin_rintf(x[b * TLM_Q8_BLOCK + i] * id);
  }
}

/* simd: the host runs AVX2 (the decoder's int8 path is not the scalar one) */
static inline void quantize_act(int simd, const float *x, int n, int8_t *q, float *d) {
#if defined(__x86_64__)
  if (simd) {
    quantize_act_avx2(x, n, q, d);
    return;
  }
#endif
  (void)simd;
  quantize_act_ref(x, n, q, d);
}

/* ---- packed layout for VNNI ------------------------------------------------------ */

static int pack_matrix(tlm_q8_packed *p, const tlm_q8_block *w, int rows, int nb) {
  int groups = (rows + 15) / 16;
  p->rows = rows;
  p->nb = nb;
  p->q = calloc((size_t)groups * nb * 8 * 16 * 4, 1);
  p->d = calloc((size_t)groups * nb * 16, sizeof(float));
  p->comp = calloc((size_t)groups * nb * 16, sizeof(int32_t));
  if (!p->q || !p->d || !p->comp) return -1;
  for (int r = 0; r < rows; r++) {
    int g = r / 16, lane = r % 16;
    for (int b = 0; b < nb; b++) {
      const tlm_q8_block *blk = w + (size_t)r * nb + b;
      size_t gb = (size_t)g * nb + b;
      int32_t sum = 0;
      for (int i = 0; i < TLM_Q8_BLOCK; i++) {
        int chunk = i / 4, byte = i % 4;
        p->q[((gb * 8 + chunk) * 16 + lane) * 4 + byte] = blk->q[i];
        sum += blk->q[i];
      }
      p->d[gb * 16 + lane] = blk->d;
      p->comp[gb * 16 + lane] = 128 * sum;
    }
  }
  if (rows % 16) return 0; /* the AVX2 kernel takes whole 16-row tiles */
  p->q8 = malloc((size_t)rows * nb * TLM_Q8_BLOCK);
  p->d8 = malloc(sizeof(float) * (size_t)rows * nb);
  if (!p->q8 || !p->d8) return -1;
  for (int r = 0; r < rows; r++)
    for (int b = 0; b < nb; b++) {
      const tlm_q8_block *blk = w + (size_t)r * nb + b;
      size_t gb = (size_t)(r / 8) * nb + b;
      for (int i = 0; i < TLM_Q8_BLOCK; i++) /* pair i / 2, row r % 8, element i % 2 */
        p->q8[gb * 256 + (size_t)(i / 2) * 16 + (size_t)(r % 8) * 2 + i % 2] = blk->q[i];
      p->d8[gb * 8 + r % 8] = blk->d;
    }
  return 0;
}

int tlm_lm_pack(tlm_lm_model *m) {
  if (m->packed) return 0; /* packed at load already */
  const int C = m->cfg.width, L = m->cfg.layers, nbc = C / TLM_Q8_BLOCK;
  m->packed = calloc((size_t)(1 + 4 * L), sizeof *m->packed);
  if (!m->packed) return -1;
  if (pack_matrix(&m->packed[0], m->wte, m->cfg.vocab, nbc)) return -1;
  for (int l = 0; l < L; l++) {
    tlm_q8_packed *p = &m->packed[1 + 4 * l];
    if (pack_matrix(&p[0], m->qkvw + (size_t)l * 3 * C * nbc, 3 * C, nbc) ||
        pack_matrix(&p[1], m->projw + (size_t)l * C * nbc, C, nbc) ||
        pack_matrix(&p[2], m->fcw + (size_t)l * 4 * C * nbc, 4 * C, nbc) ||
        pack_matrix(&p[3], m->fcprojw + (size_t)l * C * 4 * nbc, C, 4 * nbc))
      return -1;
  }
  return 0;
}

#if defined(__x86_64__)
/* out = W x (+ bias) over the packed layout, 16 rows per vpdpbusd */
__attribute__((target("avx512f,avx512vnni"))) static void matvec_vnni_packed(
    float *out, const tlm_q8_packed *p, const float *bias, const int8_t *xq, const float *xd) {
  const int nb = p->nb, groups = (p->rows + 15) / 16;
  for (int g = 0; g < groups; g++) {
    __m512 acc = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
      size_t gb = (size_t)g * nb + b;
      const int8_t *q = p->q + gb * 8 * 64;
      const uint8_t *x = (const uint8_t *)xq + (size_t)b * TLM_Q8_BLOCK;
      __m512i isum = _mm512_setzero_si512();
      for (int c = 0; c < 8; c++) {
        uint32_t chunk;
        memcpy(&chunk, x + 4 * c, 4);
        chunk ^= 0x80808080u; /* x + 128 as unsigned bytes */
        isum = _mm512_dpbusd_epi32(isum, _mm512_set1_epi32((int)chunk),
                                   _mm512_loadu_si512((const void *)(q + 64 * c)));
      }
      isum = _mm512_sub_epi32(isum, _mm512_loadu_si512((const void *)(p->comp + gb * 16)));
      __m512 scale = _mm512_mul_ps(_mm512_loadu_ps(p->d + gb * 16), _mm512_set1_ps(xd[b]));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, acc);
    }
    int n = p->rows - 16 * g < 16 ? p->rows - 16 * g : 16;
    float tmp[16];
    _mm512_storeu_ps(tmp, acc);
    for (int i = 0; i < n; i++) out[16 * g + i] = tmp[i] + (bias ? bias[16 * g + i] : 0.0f);
  }
}
#endif

#if defined(__x86_64__)
#if defined(__x86_64__)
/* Tiles of the AVX2 int8 GEMM: out[t][16 rows from 8-row group g] += the
 * block-scaled int8 products of those rows with 5 tokens (gemm_avx2_5) or
 * one (gemm_avx2_1), block by block. Per block each (token, 8 rows) keeps
 * an exact int32 sum: the weights widened to int16 (vpmovsxbw), times a
 * broadcast pair of the token's int16 activations (vpmaddwd: 8 rows x 2 k
 * per instruction, no saturation, unlike vpmaddubsw), then one FMA with the
 * row scales times the token's block scale. The 5 tokens share each weight
 * load; 10 int32 accumulators + 2 weights + 1 broadcast + 1 product fit
 * AVX2's 16 registers (named, so that GCC keeps them there: an array of
 * them, or 6 tokens, made it spill every accumulator). x16: the
 * tokens' activations as int16 pairs (one int32 per pair, xs32 per token);
 * xd: their block scales (xds per token). Both tiles do the same
 * arithmetic per token. */
/* M(t, acc0, acc1) for each of the 5 tokens of a tile and their two
 * accumulators */
#define TLM_GEMM_5_TOKENS(M) \
  M(0, a00, a01);            \
  M(1, a10, a11);            \
  M(2, a20, a21);            \
  M(3, a30, a31);            \
  M(4, a40, a41)
#define TLM_GEMM_SCALE(acc, d, o)                                                                 \
  _mm256_storeu_ps((o), _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), _mm256_mul_ps((d), xs),           \
                                        _mm256_loadu_ps(o)))
__attribute__((target("avx2,fma"), noinline)) static void gemm_avx2_5(float *out, int ostride,
                                                             const tlm_q8_packed *p, int g,
                                                             const int32_t *x16, int xs32,
                                                             const float *xd, int xds) {
  const int nb = p->nb;
  for (int b = 0; b < nb; b++) {
    __m256i a00 = _mm256_setzero_si256(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00;
    __m256i a30 = a00, a31 = a00, a40 = a00, a41 = a00;
    const int8_t *q0 = p->q8 + ((size_t)g * nb + b) * 256, *q1 = q0 + (size_t)nb * 256;
    const int32_t *x = x16 + b * (TLM_Q8_BLOCK / 2);
    for (int j = 0; j < TLM_Q8_BLOCK / 2; j++) {
#if defined(__GNUC__)
      /* The same instructions as the intrinsics below, in assembly: with
       * the intrinsics GCC 12 kept a00 in memory (a store and a reload in
       * its chain every step: store-forwarding latency, about 7 cycles on
       * Zen 3, on the critical path) and spilled four more copies per step,
       * although the 15 registers named here fit AVX2's 16. */
      __m256i w0, w1, xb, p0, p1;
      __asm__("vpmovsxbw %[q0], %[w0]\n\t"
              "vpmovsxbw %[q1], %[w1]\n\t"
              "vpbroadcastd (%[x0]), %[xb]\n\t"
              "vpmaddwd %[xb], %[w0], %[p0]\n\t"
              "vpmaddwd %[xb], %[w1], %[p1]\n\t"
              "vpaddd %[p0], %[a00], %[a00]\n\t"
              "vpaddd %[p1], %[a01], %[a01]\n\t"
              "vpbroadcastd (%[x0],%[xs]), %[xb]\n\t"
              "vpmaddwd %[xb], %[w0], %[p0]\n\t"
              "vpmaddwd %[xb], %[w1], %[p1]\n\t"
              "vpaddd %[p0], %[a10], %[a10]\n\t"
              "vpaddd %[p1], %[a11], %[a11]\n\t"
              "vpbroadcastd (%[x0],%[xs],2), %[xb]\n\t"
              "vpmaddwd %[xb], %[w0], %[p0]\n\t"
              "vpmaddwd %[xb], %[w1], %[p1]\n\t"
              "vpaddd %[p0], %[a20], %[a20]\n\t"
              "vpaddd %[p1], %[a21], %[a21]\n\t"
              "vpbroadcastd (%[x3]), %[xb]\n\t"
              "vpmaddwd %[xb], %[w0], %[p0]\n\t"
              "vpmaddwd %[xb], %[w1], %[p1]\n\t"
              "vpaddd %[p0], %[a30], %[a30]\n\t"
              "vpaddd %[p1], %[a31], %[a31]\n\t"
              "vpbroadcastd (%[x3],%[xs]), %[xb]\n\t"
              "vpmaddwd %[xb], %[w0], %[p0]\n\t"
              "vpmaddwd %[xb], %[w1], %[p1]\n\t"
              "vpaddd %[p0], %[a40], %[a40]\n\t"
              "vpaddd %[p1], %[a41], %[a41]"
              : [a00] "+x"(a00), [a01] "+x"(a01), [a10] "+x"(a10), [a11] "+x"(a11),
                [a20] "+x"(a20), [a21] "+x"(a21), [a30] "+x"(a30), [a31] "+x"(a31),
                [a40] "+x"(a40), [a41] "+x"(a41), [w0] "=&x"(w0), [w1] "=&x"(w1),
                [xb] "=&x"(xb), [p0] "=&x"(p0), [p1] "=&x"(p1)
              : [q0] "m"(*(const int8_t(*)[16])(q0 + 16 * j)),
                [q1] "m"(*(const int8_t(*)[16])(q1 + 16 * j)), [x0] "r"(x + j),
                [x3] "r"(x + 3 * (size_t)xs32 + j), [xs] "r"((size_t)xs32 * 4)
              : "memory"); /* the tokens' words, read through x0, x3 and xs */
#else
      const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(q0 + 16 * j)));
      const __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(q1 + 16 * j)));
      __m256i xb;
#define TLM_GEMM_TOKEN(t, acc0, acc1)                                                             \
  xb = _mm256_set1_epi32(x[(size_t)(t) * xs32 + j]);                                              \
  acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(w0, xb));                                       \
  acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(w1, xb))
      TLM_GEMM_5_TOKENS(TLM_GEMM_TOKEN);
#undef TLM_GEMM_TOKEN
#endif
    }
    const __m256 d0 = _mm256_loadu_ps(p->d8 + ((size_t)g * nb + b) * 8);
    const __m256 d1 = _mm256_loadu_ps(p->d8 + ((size_t)(g + 1) * nb + b) * 8);
    __m256 xs;
    float *o = out + 8 * g;
#define TLM_GEMM_OUT(t, acc0, acc1)                                                               \
  xs = _mm256_set1_ps(xd[(size_t)(t) * xds + b]);                                                 \
  TLM_GEMM_SCALE(acc0, d0, o + (size_t)(t) * ostride);                                            \
  TLM_GEMM_SCALE(acc1, d1, o + (size_t)(t) * ostride + 8)
    TLM_GEMM_5_TOKENS(TLM_GEMM_OUT);
#undef TLM_GEMM_OUT
  }
}

/* one token, 32 rows (groups g .. g + 3) a tile: 4 independent chains */
__attribute__((target("avx2,fma"))) static void gemm_avx2_1(float *out, const tlm_q8_packed *p,
                                                             int g, const int32_t *x16,
                                                             const float *xd, int ng) {
  const int nb = p->nb;
  for (int b = 0; b < nb; b++) {
    const int8_t *q = p->q8 + ((size_t)g * nb + b) * 256;
    const size_t gs = (size_t)nb * 256; /* next group */
    const int32_t *x = x16 + b * (TLM_Q8_BLOCK / 2);
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (int j = 0; j < TLM_Q8_BLOCK / 2; j++) {
      const __m256i xb = _mm256_set1_epi32(x[j]);
#define TLM_GEMM_ROWS(acc, i)                                                                     \
  acc = _mm256_add_epi32(                                                                         \
      acc, _mm256_madd_epi16(                                                                     \
               _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(q + (i) * gs + 16 * j))), \
               xb))
      TLM_GEMM_ROWS(a0, 0);
      TLM_GEMM_ROWS(a1, 1);
      if (ng == 4) {
        TLM_GEMM_ROWS(a2, 2);
        TLM_GEMM_ROWS(a3, 3);
      }
#undef TLM_GEMM_ROWS
    }
    const __m256 xs = _mm256_set1_ps(xd[b]);
    const float *d = p->d8 + ((size_t)g * nb + b) * 8;
    float *o = out + 8 * g;
    TLM_GEMM_SCALE(a0, _mm256_loadu_ps(d), o);
    TLM_GEMM_SCALE(a1, _mm256_loadu_ps(d + gs / 32), o + 8);
    if (ng == 4) {
      TLM_GEMM_SCALE(a2, _mm256_loadu_ps(d + 2 * gs / 32), o + 16);
      TLM_GEMM_SCALE(a3, _mm256_loadu_ps(d + 3 * gs / 32), o + 24);
    }
  }
}
#undef TLM_GEMM_SCALE
#undef TLM_GEMM_5_TOKENS

/* out[t] = W x[t] (+ bias) for P tokens over p's AVX2 layout (rows a
 * multiple of 16): tiles of 16 rows x 5 tokens, a tail of 2 to 4 tokens
 * through the same tile with zero tokens added (their outputs go to a
 * scratch row), one token alone as 32 rows x 1; tokens taken in chunks of
 * a multiple of 5 whose int16 copy fits a 16 KiB stack buffer (L1-resident
 * with the tile's weights). Each row's sum is bias + sum over blocks, in
 * block order, of scale x exact block sum: the same arithmetic for every P
 * and tile. */
__attribute__((target("avx2,fma"))) static void gemm_avx2(float *out, const tlm_q8_packed *p,
                                                           const float *bias, const int8_t *xq,
                                                           const float *xd, int P, int xstride,
                                                           int ostride) {
  enum { X16_WORDS = 4096, OUT_MAX = 4 * 1024, NB_MAX = 64 };
  int32_t x16[X16_WORDS];
  const int nb = p->nb, ic = nb * TLM_Q8_BLOCK, oc = p->rows, xs32 = ic / 2;
  int chunk = X16_WORDS / xs32 < 1 ? 1 : X16_WORDS / xs32;
  if (chunk >= 5) chunk -= chunk % 5;
  for (int t = 0; t < P; t++)
    for (int o = 0; o < oc; o++) out[(size_t)t * ostride + o] = bias ? bias[o] : 0.0f;
  const int xds = xstride / TLM_Q8_BLOCK;
  for (int t0 = 0; t0 < P; t0 += chunk) {
    const int n = P - t0 < chunk ? P - t0 : chunk;
    for (int t = 0; t < n; t++) {
      const int8_t *x = xq + (size_t)(t0 + t) * xstride;
      for (int k = 0; k < ic; k += 16) /* int16 pairs (x[2j], x[2j + 1]) as words j */
        _mm256_storeu_si256((__m256i *)&x16[(size_t)t * xs32 + k / 2],
                            _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(x + k))));
    }
    const float *d = xd + (size_t)t0 * xds;
    float *o0 = out + (size_t)t0 * ostride;
    int t = 0;
    for (; t + 5 <= n; t += 5)
      for (int g = 0; g < oc / 8; g += 2)
        gemm_avx2_5(o0 + (size_t)t * ostride, ostride, p, g, x16 + (size_t)t * xs32, xs32,
                    d + (size_t)t * xds, xds);
    const int r = n - t;
    if (r >= 2 && chunk >= 5 && oc <= OUT_MAX / 5 && nb <= NB_MAX) {
      /* the tail's r tokens and 5 - r zero tokens (in x16 past the chunk's
       * tokens: n <= chunk - 1 here, so t + 5 <= chunk rows fit), into a
       * 5-row scratch output started from each row's bias */
      float ob[OUT_MAX], db[5 * NB_MAX];
      memset(&x16[(size_t)n * xs32], 0, sizeof(int32_t) * (size_t)(t + 5 - n) * xs32);
      for (int u = 0; u < 5; u++) {
        for (int o = 0; o < oc; o++)
          ob[(size_t)u * oc + o] = u < r ? o0[(size_t)(t + u) * ostride + o] : 0.0f;
        for (int b = 0; b < nb; b++) db[(size_t)u * nb + b] = u < r ? d[(size_t)(t + u) * xds + b] : 0.0f;
      }
      for (int g = 0; g < oc / 8; g += 2)
        gemm_avx2_5(ob, oc, p, g, x16 + (size_t)t * xs32, xs32, db, nb);
      for (int u = 0; u < r; u++)
        memcpy(o0 + (size_t)(t + u) * ostride, ob + (size_t)u * oc, sizeof(float) * (size_t)oc);
      t = n;
    }
    for (; t < n; t++)
      for (int g = 0; g < oc / 8; g += 4)
        gemm_avx2_1(o0 + (size_t)t * ostride, p, g, x16 + (size_t)t * xs32, d + (size_t)t * xds,
                    oc / 8 - g >= 4 ? 4 : 2);
  }
}
#endif

/* out[t] = W x[t] (+ bias) for P token rows with AVX2: rows of W 4 at a time
 * interleaved block by block (4 independent FMA chains, 4 weight loads in
 * flight), reduced together by a tree of horizontal adds; every token of
 * the batch runs on a group of rows while its weights are in L1, so the
 * prompt (P tokens at once) streams W from memory once, not P times. x[t]
 * is xq + t * xstride (ic bytes used), its scales xd + t * xstride / 32;
 * out[t] is out + t * ostride. The same products, in the same order, for
 * every P. */
__attribute__((target("avx2,fma"))) static void matvec_avx2(float *out, const tlm_q8_block *w,
                                                             const float *bias, const int8_t *xq,
                                                             const float *xd, int nb, int oc,
                                                             int P, int xstride, int ostride) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int o = 0; o < oc; o += 4) {
    /* rows past the end repeat the last one; their sums are not stored */
    const tlm_q8_block *w0 = w + (size_t)o * nb;
    const tlm_q8_block *w1 = w + (size_t)(o + 1 < oc ? o + 1 : oc - 1) * nb;
    const tlm_q8_block *w2 = w + (size_t)(o + 2 < oc ? o + 2 : oc - 1) * nb;
    const tlm_q8_block *w3 = w + (size_t)(o + 3 < oc ? o + 3 : oc - 1) * nb;
    for (int t = 0; t < P; t++) {
      const int8_t *xt = xq + (size_t)t * xstride;
      const float *dt = xd + (size_t)t * xstride / TLM_Q8_BLOCK;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int b = 0; b < nb; b++) {
        const __m256i x = _mm256_loadu_si256((const __m256i *)(xt + b * TLM_Q8_BLOCK));
        const __m256i ax = _mm256_sign_epi8(x, x);
        const float xb = dt[b];
#define TLM_ROW(acc, wr)                                                                          \
  do {                                                                                            \
    __m256i q = _mm256_loadu_si256((const __m256i *)(wr)[b].q);                                   \
    __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(q, x)), ones);      \
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps((wr)[b].d * xb), acc);          \
  } while (0)
        TLM_ROW(a0, w0);
        TLM_ROW(a1, w1);
        TLM_ROW(a2, w2);
        TLM_ROW(a3, w3);
#undef TLM_ROW
      }
      __m256 tsum = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
      __m128 sums = _mm_add_ps(_mm256_castps256_ps128(tsum), _mm256_extractf128_ps(tsum, 1));
      float tmp[4];
      _mm_storeu_ps(tmp, sums);
      int n = oc - o < 4 ? oc - o : 4;
      float *ot = out + (size_t)t * ostride;
      for (int r = 0; r < n; r++) ot[o + r] = tmp[r] + (bias ? bias[o + r] : 0.0f);
    }
  }
}
#endif

/* out (oc) = W (oc, ic) x + b for P quantized token rows (x[t] at xq + t *
 * xstride, out[t] at out + t * ostride): the 4-row AVX2 kernel over the
 * batch, else per token the packed VNNI kernel or a dot product per row */
static void matvec_batch(dot_fn dot, float *out, const tlm_q8_block *w,
                         const tlm_q8_packed *packed, const float *bias, const int8_t *xq,
                         const float *xd, int ic, int oc, int P, int xstride, int ostride) {
#if defined(__x86_64__)
  if (dot == dot_avx2 && packed && packed->q8) {
    gemm_avx2(out, packed, bias, xq, xd, P, xstride, ostride);
    return;
  }
  if (dot == dot_avx2) {
    matvec_avx2(out, w, bias, xq, xd, ic / TLM_Q8_BLOCK, oc, P, xstride, ostride);
    return;
  }
#endif
  int nb = ic / TLM_Q8_BLOCK;
  for (int t = 0; t < P; t++) {
    const int8_t *xt = xq + (size_t)t * xstride;
    const float *dt = xd + (size_t)t * xstride / TLM_Q8_BLOCK;
    float *ot = out + (size_t)t * ostride;
#if defined(__x86_64__)
    if (dot == dot_vnni && packed) {
      matvec_vnni_packed(ot, packed, bias, xt, dt);
      continue;
    }
#endif
    for (int o = 0; o < oc; o++)
      ot[o] = dot(w + (size_t)o * nb, xt, dt, nb) + (bias ? bias[o] : 0.0f);
  }
  (void)packed;
}

static void matvec(dot_fn dot, float *out, const tlm_q8_block *w, const tlm_q8_packed *packed,
                   const float *bias, const int8_t *xq, const float *xd, int ic, int oc) {
  matvec_batch(dot, out, w, packed, bias, xq, xd, ic, oc, 1, 0, 0);
}

static inline void layernorm(float *out, const float *x, const float *w, const float *b, int C) {
  double mu = 0, var = 0;
  for (int c = 0; c < C; c++) mu += x[c];
  mu /= C;
  for (int c = 0; c < C; c++) var += (x[c] - mu) * (x[c] - mu);
  var /= C;
  float rs = (float)(1.0 / sqrt(var + 1e-5));
  for (int c = 0; c < C; c++) out[c] = (float)(x[c] - mu) * rs * w[c] + b[c];
}

/* exp(x) for the decoder's GELU and softmax: 2^(x log2 e) split into an
 * integer power (exponent bits) and a degree-6 polynomial of 2^f on
 * [-0.5, 0.5] (Taylor coefficients of e^(f ln 2)); relative error < 2e-7,
 * plain C that the compiler vectorizes. */
static inline float fast_exp(float x) {
  /* written so that NaN (every comparison false) becomes -87: a NaN
   * reaching the integer conversion below would be undefined */
  x = x > -87.0f ? (x < 88.0f ? x : 88.0f) : -87.0f;
  float t = x * 1.4426950408889634f;
  float n = __builtin_rintf(t);
  float f = (t - n) * 0.6931471805599453f;
  float p = 1.0f + f * (1.0f + f * (0.5f + f * (0.16666667f + f * (0.041666668f +
            f * (0.0083333338f + f * 0.0013888889f)))));
  union { float f; uint32_t i; } u = {p};
  u.i += (uint32_t)(int32_t)n << 23; /* add n to the exponent (mod 2^32) */
  return u.f;
}

static inline void gelu_inplace(float *x, int n) {
  for (int i = 0; i < n; i++) {
    float u = x[i];
    float y = 0.7978845608028654f * (u + 0.044715f * u * u * u);
    float th = 1.0f - 2.0f / (fast_exp(2.0f * y) + 1.0f);
    x[i] = 0.5f * u * (1.0f + th);
  }
}

void tlm_lm_matvec(const tlm_lm_model *m, int which, const int8_t *xq, const float *xd,
                   float *out) {
  const int C = m->cfg.width, nbc = C / TLM_Q8_BLOCK;
  int l = (which - 1) / 4, j = (which - 1) % 4;
  const tlm_q8_block *w = which == 0 ? m->wte
                          : j == 0   ? m->qkvw + (size_t)l * 3 * C * nbc
                          : j == 1   ? m->projw + (size_t)l * C * nbc
                          : j == 2   ? m->fcw + (size_t)l * 4 * C * nbc
                                     : m->fcprojw + (size_t)l * C * 4 * nbc;
  int ic = which && j == 3 ? 4 * C : C;
  int oc = which == 0 ? m->cfg.vocab : j == 0 ? 3 * C : j == 2 ? 4 * C : C;
  matvec(pick_dot(), out, w, m->packed ? &m->packed[which] : NULL, NULL, xq, xd, ic, oc);
}

/* ---- state ------------------------------------------------------------------- */

int tlm_lm_state_init(tlm_lm_state *s, const tlm_lm_model *m) {
  memset(s, 0, sizeof *s);
  s->m = m;
  size_t C = (size_t)m->cfg.width, T = (size_t)m->cfg.max_seq, L = (size_t)m->cfg.layers;
  s->k = calloc(L * T * C, sizeof(float));
  s->v = calloc(L * T * C, sizeof(float));
  s->x = calloc(C, sizeof(float));
  s->buf = calloc(4 * C, sizeof(float));
  s->qkv = calloc(3 * C, sizeof(float));
  s->att = calloc(T, sizeof(float));
  s->fch = calloc(4 * C, sizeof(float));
  s->logits = calloc((size_t)m->cfg.vocab, sizeof(float));
  s->xq = calloc(4 * C, 1);
  s->xd = calloc(4 * C / TLM_Q8_BLOCK, sizeof(float));
  if (!s->k || !s->v || !s->x || !s->buf || !s->qkv || !s->att || !s->fch || !s->logits ||
      !s->xq || !s->xd) {
    tlm_lm_state_free(s);
    return -1;
  }
  return 0;
}

void tlm_lm_state_free(tlm_lm_state *s) {
  free(s->k);
  free(s->v);
  free(s->x);
  free(s->buf);
  free(s->qkv);
  free(s->att);
  free(s->fch);
  free(s->logits);
  free(s->xq);
  free(s->xd);
  memset(s, 0, sizeof *s);
}

int tlm_lm_state_copy(tlm_lm_state *dst, const tlm_lm_state *src) {
  if (!dst->k && tlm_lm_state_init(dst, src->m)) return -1;
  size_t C = (size_t)src->m->cfg.width, T = (size_t)src->m->cfg.max_seq;
  size_t L = (size_t)src->m->cfg.layers;
  memcpy(dst->k, src->k, L * T * C * sizeof(float));
  memcpy(dst->v, src->v, L * T * C * sizeof(float));
  memcpy(dst->logits, src->logits, (size_t)src->m->cfg.vocab * sizeof(float));
  dst->pos = src->pos;
  return 0;
}

/* 8 floats as one value (GCC and clang vector extension): one AVX
 * register in the AVX2 and AVX-512 builds of run_body, two SSE ones in the
 * baseline build; the arithmetic per lane is that of the scalar tails */
typedef float tlm_v8f __attribute__((vector_size(32)));

/* out[j] = sum over r < rows of (w[r] c) m[r ld + j], for j < n: attention's
 * scores (w the query, m the head's transposed keys) and outputs (w the
 * probabilities, m the values). 8 columns at a time, summed over r in a
 * register; 32 a pass first (four independent chains, so that the FMA
 * latency is covered: one chain ran at a quarter of the FMA rate). Every
 * column's terms are added in the order of r, in each of the three loops.
 * Inlined into each ISA's build of run_body. */
static inline __attribute__((always_inline)) void weighted_rows(float *restrict out,
                                                              const float *w, float c,
                                                              const float *m, size_t ld, int rows,
                                                              int n) {
  int j = 0;
  for (; j + 32 <= n; j += 32) {
    tlm_v8f a0 = {0, 0, 0, 0, 0, 0, 0, 0}, a1 = a0, a2 = a0, a3 = a0;
    for (int r = 0; r < rows; r++) {
      tlm_v8f m0, m1, m2, m3;
      const float *mr = m + (size_t)r * ld + j;
      memcpy(&m0, mr, sizeof m0);
      memcpy(&m1, mr + 8, sizeof m1);
      memcpy(&m2, mr + 16, sizeof m2);
      memcpy(&m3, mr + 24, sizeof m3);
      a0 += w[r] * c * m0;
      a1 += w[r] * c * m1;
      a2 += w[r] * c * m2;
      a3 += w[r] * c * m3;
    }
    memcpy(out + j, &a0, sizeof a0);
    memcpy(out + j + 8, &a1, sizeof a1);
    memcpy(out + j + 16, &a2, sizeof a2);
    memcpy(out + j + 24, &a3, sizeof a3);
  }
  for (; j + 8 <= n; j += 8) {
    tlm_v8f a8 = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int r = 0; r < rows; r++) {
      tlm_v8f m8;
      memcpy(&m8, m + (size_t)r * ld + j, sizeof m8);
      a8 += w[r] * c * m8;
    }
    memcpy(out + j, &a8, sizeof a8);
  }
  for (; j < n; j++) {
    float a = 0;
    for (int r = 0; r < rows; r++) a += w[r] * c * m[(size_t)r * ld + j];
    out[j] = a;
  }
}

/* Feeds P tokens at positions pos .. pos + P - 1 (P = 1: one decode step;
 * the prompt all at once, so each weight matrix is read from memory once
 * for the whole prompt, not once per token) and returns the logits of the
 * token after the last (owned by the state), or NULL when the context is
 * full or a token is out of range. The scratch rows: x, buf (C floats
 * each), qkv (3C), fch (4C), xq (4C bytes) and xd (4C / 32) per token.
 * Every token's arithmetic is the same for every P. Compiled below once
 * per x86-64 level (v4, v3, baseline) and chosen per call, so the
 * attention, normalization and activation loops are vectorized for the
 * machine and follow the same ISA cap as the int8 path. */
static inline __attribute__((always_inline)) const float *run_body(
    tlm_lm_state *s, const int32_t *tokens, int P, const int *want, int nwant, float *xs, float *bufs,
    float *qkvs, float *fchs, int8_t *xqs, float *xds) {
  const tlm_lm_model *m = s->m;
  const int C = m->cfg.width, NH = m->cfg.heads, hs = C / NH, T = m->cfg.max_seq;
  const int V = m->cfg.vocab, nbc = C / TLM_Q8_BLOCK;
  const int C3 = 3 * C, C4 = 4 * C;
  if (P < 1 || s->pos + P > T) return NULL;
  for (int p = 0; p < P; p++)
    if (tokens[p] < 0 || tokens[p] >= V) return NULL;
  dot_fn dot = pick_dot();
  const int simd = dot != dot_scalar;
  for (int p = 0; p < P; p++) {
    float *x = xs + (size_t)p * C;
    const tlm_q8_block *e = m->wte + (size_t)tokens[p] * nbc;
    int t = s->pos + p;
    for (int b = 0; b < nbc; b++)
      for (int i = 0; i < TLM_Q8_BLOCK; i++)
        x[b * TLM_Q8_BLOCK + i] = e[b].d * e[b].q[i] + m->wpe[(size_t)t * C + b * TLM_Q8_BLOCK + i];
  }
  float scale = 1.0f / sqrtf((float)hs);
  for (int l = 0; l < m->cfg.layers; l++) {
    /* the last layer's attention output, projection and MLP matter only
     * for the last token (whose logits are returned; the others' keys and
     * values are all later steps read): rows p0 .. P - 1 from there on */
    const int p0 = l == m->cfg.layers - 1 ? P - 1 : 0, Pn = P - p0;
    for (int p = 0; p < P; p++) {
      layernorm(bufs + (size_t)p * C, xs + (size_t)p * C, m->ln1w + l * C, m->ln1b + l * C, C);
      quantize_act(simd, bufs + (size_t)p * C, C, xqs + (size_t)p * C4, xds + (size_t)p * C4 / TLM_Q8_BLOCK);
    }
    const tlm_q8_packed *pk = m->packed ? &m->packed[1 + 4 * l] : NULL;
    matvec_batch(dot, qkvs, m->qkvw + (size_t)l * 3 * C * nbc, pk ? &pk[0] : NULL,
                 m->qkvb + l * 3 * C, xqs, xds, C, 3 * C, P, C4, C3);
    /* keys transposed per head, (hs, T) each, so that a query's scores
     * over every earlier position are one contiguous multiply-add per
     * element of the head (vectorized over positions, no horizontal sums) */
    float *kc = s->k + (size_t)l * T * C, *vc = s->v + ((size_t)l * T) * C;
    for (int p = 0; p < P; p++) {
      int t = s->pos + p;
      const float *kp = qkvs + (size_t)p * C3 + C;
      for (int c = 0; c < C; c++) kc[(size_t)c * T + t] = kp[c];
      memcpy(vc + (size_t)t * C, qkvs + (size_t)p * C3 + 2 * C, sizeof(float) * (size_t)C);
    }
    for (int p = p0; p < P; p++) { /* causal: token p sees positions <= its own */
      int t = s->pos + p;
      float *restrict att = s->att;
      for (int h = 0; h < NH; h++) {
        const float *q = qkvs + (size_t)p * C3 + h * hs;
        const float *kh = kc + (size_t)h * hs * T;
        /* scores: att[t2] = sum_i q[i] scale K[i][t2] over the head */
        weighted_rows(att, q, scale, kh, (size_t)T, hs, t + 1);
        float mx = -INFINITY;
        for (int t2 = 0; t2 <= t; t2++) mx = att[t2] > mx ? att[t2] : mx;
        float sum = 0;
        for (int t2 = 0; t2 <= t; t2++) sum += (att[t2] = fast_exp(att[t2] - mx));
        float *restrict o = bufs + (size_t)p * C + h * hs;
        const float inv = 1.0f / sum;
        /* o[i] = sum_t3 att[t3] inv V[t3][i] over the positions */
        weighted_rows(o, att, inv, vc + h * hs, (size_t)C, t + 1, hs);
      }
      quantize_act(simd, bufs + (size_t)p * C, C, xqs + (size_t)p * C4, xds + (size_t)p * C4 / TLM_Q8_BLOCK);
    }
    matvec_batch(dot, fchs + (size_t)p0 * C4, m->projw + (size_t)l * C * nbc, pk ? &pk[1] : NULL,
                 m->projb + l * C, xqs + (size_t)p0 * C4, xds + (size_t)p0 * C4 / TLM_Q8_BLOCK, C, C,
                 Pn, C4, C4);
    for (int p = p0; p < P; p++) {
      float *x = xs + (size_t)p * C;
      const float *f = fchs + (size_t)p * C4;
      for (int c = 0; c < C; c++) x[c] += f[c];
      layernorm(bufs + (size_t)p * C, x, m->ln2w + l * C, m->ln2b + l * C, C);
      quantize_act(simd, bufs + (size_t)p * C, C, xqs + (size_t)p * C4, xds + (size_t)p * C4 / TLM_Q8_BLOCK);
    }
    matvec_batch(dot, fchs + (size_t)p0 * C4, m->fcw + (size_t)l * 4 * C * nbc, pk ? &pk[2] : NULL,
                 m->fcb + l * 4 * C, xqs + (size_t)p0 * C4, xds + (size_t)p0 * C4 / TLM_Q8_BLOCK, C,
                 4 * C, Pn, C4, C4);
    for (int p = p0; p < P; p++) {
      gelu_inplace(fchs + (size_t)p * C4, 4 * C);
      quantize_act(simd, fchs + (size_t)p * C4, 4 * C, xqs + (size_t)p * C4,
                   xds + (size_t)p * C4 / TLM_Q8_BLOCK);
    }
    matvec_batch(dot, bufs + (size_t)p0 * C, m->fcprojw + (size_t)l * C * 4 * nbc,
                 pk ? &pk[3] : NULL, m->fcprojb + l * C, xqs + (size_t)p0 * C4,
                 xds + (size_t)p0 * C4 / TLM_Q8_BLOCK, 4 * C, C, Pn, C4, C);
    for (int p = p0; p < P; p++) {
      float *x = xs + (size_t)p * C;
      const float *f = bufs + (size_t)p * C;
      for (int c = 0; c < C; c++) x[c] += f[c];
    }
  }
  s->pos += P;
  if (!nwant) return s->logits;
  const float *x = xs + (size_t)(P - 1) * C;
  float *buf = bufs; /* row 0 is free again */
  layernorm(buf, x, m->lnfw, m->lnfb, C);
  /* the logits decide every choice: keep the final activations in f32
   * (int8 weights, dequantized on the fly), which costs V * C multiply-adds
   * per step and keeps greedy decisions closest to the fp32 model's */
  for (int j = 0; j < (nwant < 0 ? V : nwant); j++) {
    const int v = nwant < 0 ? j : want[j]; /* every token, or only the wanted */
    if (v < 0 || v >= V) continue;
    const tlm_q8_block *w = m->wte + (size_t)v * nbc;
    float acc = 0;
    for (int b = 0; b < nbc; b++) {
      float part = 0;
      for (int i = 0; i < TLM_Q8_BLOCK; i++) part += (float)w[b].q[i] * buf[b * TLM_Q8_BLOCK + i];
      acc += w[b].d * part;
    }
    s->logits[v] = acc;
  }
  return s->logits;
}

static inline __attribute__((always_inline)) const float *step_body(tlm_lm_state *s,
                                                                    const int32_t *tokens, int P,
                                                                    const int *want, int nwant) {
  if (P == 1)
    return run_body(s, tokens, 1, want, nwant, s->x, s->buf, s->qkv, s->fch, s->xq, s->xd);
  const int C = s->m->cfg.width;
  size_t rows = (size_t)P;
  float *f = malloc(sizeof(float) * rows * (size_t)(C + C + 3 * C + 4 * C + 4 * C / TLM_Q8_BLOCK));
  int8_t *q = malloc(rows * (size_t)(4 * C));
  const float *lg = NULL;
  if (f && q) {
    float *x = f, *buf = x + rows * C, *qkv = buf + rows * C, *fch = qkv + rows * 3 * C;
    float *xd = fch + rows * 4 * C;
    lg = run_body(s, tokens, P, want, nwant, x, buf, qkv, fch, q, xd);
  }
  free(f);
  free(q);
  return lg;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define TLM_STEP_LEVELS 1
__attribute__((target("arch=x86-64-v4"))) static const float *step_v4(tlm_lm_state *s,
                                                                      const int32_t *tokens,
                                                                      int P, const int *want,
                                                                      int nwant) {
  return step_body(s, tokens, P, want, nwant);
}
__attribute__((target("arch=x86-64-v3"))) static const float *step_v3(tlm_lm_state *s,
                                                                      const int32_t *tokens,
                                                                      int P, const int *want,
                                                                      int nwant) {
  return step_body(s, tokens, P, want, nwant);
}
#endif
static const float *step_base(tlm_lm_state *s, const int32_t *tokens, int P, const int *want,
                              int nwant) {
  return step_body(s, tokens, P, want, nwant);
}

/* the widest level the host runs and the decoder's ISA cap allows; the
 * logits of the nwant token ids in want (nwant < 0: of every token, 0: none;
 * the others keep stale values) */
static const float *step(tlm_lm_state *s, const int32_t *tokens, int P, const int *want,
                         int nwant) {
#ifdef TLM_STEP_LEVELS
  int cap = g_isa_cap;
  __builtin_cpu_init();
  if ((cap < 0 || cap >= TLM_ISA_AVX512) && __builtin_cpu_supports("x86-64-v4"))
    return step_v4(s, tokens, P, want, nwant);
  if ((cap < 0 || cap >= TLM_ISA_AVX2) && __builtin_cpu_supports("x86-64-v3"))
    return step_v3(s, tokens, P, want, nwant);
#endif
  return step_base(s, tokens, P, want, nwant);
}

const float *tlm_lm_step(tlm_lm_state *s, int32_t token) { return step(s, &token, 1, NULL, -1); }

const float *tlm_lm_feed(tlm_lm_state *s, const int32_t *tokens, int n) {
  return step(s, tokens, n, NULL, -1);
}

/* ---- constrained decoding ------------------------------------------------------ */

/* masked log-softmax of the candidates' tokens; the candidate equal to
 * the rule's value (rule_value, -1: none) gets `bonus` added */
static void candidate_logp(const float *logits, const int *toks, const int32_t *cands, int n,
                           int32_t rule_value, double bonus, double *logp) {
  double mx = -INFINITY, sum = 0;
  for (int i = 0; i < n; i++)
    if (logits[toks[i]] > mx) mx = logits[toks[i]];
  for (int i = 0; i < n; i++) sum += exp(logits[toks[i]] - mx);
  for (int i = 0; i < n; i++)
    logp[i] = logits[toks[i]] - mx - log(sum) + (cands[i] == rule_value ? bonus : 0.0);
}

static const float *feed_prompt(tlm_lm_state *st, const tlm_space *s) {
  int32_t prompt[TLM_LM_PROMPT_LEN];
  tlm_lm_prompt(&st->m->vocab, &s->task, &s->target, prompt);
  return step(st, prompt, TLM_LM_PROMPT_LEN, NULL, -1); /* all at once */
}

/* the candidates of point p after the decisions v (their tokens in toks):
 * how many, or -1 (none, or a candidate without a token) */
static int point_tokens(const tlm_lm_model *m, const tlm_space *s, int p, const int32_t *v,
                        int32_t *cands, int *toks) {
  int n = tlm_space_candidates(s, p, v, cands);
  for (int i = 0; i < n; i++)
    if ((toks[i] = tlm_lm_decision_token(&m->vocab, s, p, cands[i])) < 0) return -1;
  return n >= 1 ? n : -1;
}

/* plain log-probabilities pl of the n candidates of the next point: the
 * pending tokens fed first (all at once, then none pending); a point of
 * one candidate needs no logits. 0, or -1 (context full) */
static int point_logp(tlm_lm_state *st, int32_t *pend, int *npend, const int32_t *cands,
                      const int *toks, int n, double *pl) {
  if (n == 1) {
    pl[0] = 0.0;
    return 0;
  }
  const float *lg = step(st, pend, *npend, toks, n);
  *npend = 0;
  if (!lg) return -1;
  candidate_logp(lg, toks, cands, n, -1, 0.0, pl);
  return 0;
}

tlm_status tlm_lm_decode(const tlm_lm_model *m, const tlm_space *s, tlm_schedule *out,
                         float *prob) {
  return tlm_lm_decode_anchored(m, s, NULL, 0, out, prob);
}

/* Greedy decoding. Tokens are fed lazily: the prompt and each decision's
 * token wait in `pend` until a point with more than one candidate needs
 * logits, and are then fed as one batch (one pass over the weights for all
 * of them), with the logits of those candidates' tokens only. A point with
 * one candidate is decided without logits (probability 1). The batch
 * computes what one token at a time would (run_body's arithmetic per token
 * does not depend on the batch), so the decisions and probabilities are
 * those of feeding every token alone. */
tlm_status tlm_lm_decode_anchored(const tlm_lm_model *m, const tlm_space *s,
                                  const tlm_schedule *anchor, double anchor_bonus,
                                  tlm_schedule *out, float *prob) {
  int follow = anchor && anchor->n == s->npoints; /* prefix equal to the anchor's so far */
  tlm_lm_state st, rst = {0}; /* rst: the rule's sentence, forked where greedy leaves it */
  if (tlm_lm_state_init(&st, m)) return TLM_ERR_OUT_OF_MEMORY;
  memset(out, 0, sizeof *out);
  out->n = s->npoints;
  tlm_status status = TLM_OK;
  int32_t pend[TLM_LM_PROMPT_LEN + TLM_MAX_POINTS];
  int npend = TLM_LM_PROMPT_LEN;
  tlm_lm_prompt(&m->vocab, &s->task, &s->target, pend);
  tlm_schedule rule;
  tlm_space_default(s, &rule);
  int32_t cands[TLM_MAX_CANDIDATES];
  int toks[TLM_MAX_CANDIDATES];
  double lp[TLM_MAX_CANDIDATES], pl[TLM_MAX_CANDIDATES];
  /* plain (no bonus) log-probabilities: the greedy sentence's sum, the
   * rule's per decision and sum; fork: where greedy left the rule (-1) */
  double sentence = 0, lp_rule[TLM_MAX_POINTS], rule_sentence = 0;
  int fork = -1, fork_tok = -1, selective = m->sentence_margin > 0;
  for (int p = 0; p < s->npoints && status == TLM_OK; p++) {
    int n = point_tokens(m, s, p, out->v, cands, toks);
    if (n < 1 || point_logp(&st, pend, &npend, cands, toks, n, pl)) {
      status = TLM_ERR_INTERNAL;
      break;
    }
    int best = 0, at_rule = -1;
    for (int i = 0; i < n; i++) {
      lp[i] = pl[i] + (cands[i] == rule.v[p] ? m->rule_bonus : 0.0);
      if (follow && cands[i] == anchor->v[p]) lp[i] += anchor_bonus;
      if (cands[i] == rule.v[p]) at_rule = i;
      if (i && lp[i] > lp[best]) best = i;
    }
    out->v[p] = cands[best];
    follow = follow && cands[best] == anchor->v[p];
    if (fork < 0) { /* the prefix so far is the rule's */
      lp_rule[p] = at_rule >= 0 ? pl[at_rule] : -INFINITY;
      rule_sentence += lp_rule[p];
      if (best != at_rule) {
        fork = p;
        fork_tok = at_rule >= 0 ? toks[at_rule] : -1;
        /* st has consumed everything before point p's token */
        if (selective && fork_tok >= 0 && tlm_lm_state_copy(&rst, &st))
          status = TLM_ERR_OUT_OF_MEMORY;
      }
    }
    sentence += pl[best];
    if (prob) prob[p] = (float)exp(pl[best]);
    pend[npend++] = toks[best];
  }
  tlm_lm_state_free(&st);
  /* selective decoding (model.h): the rule's schedule unless the model is
   * sure enough of its own; a result equal to the anchor is kept. The
   * rule's sentence goes on from the fork, its tokens fed lazily as above */
  if (status == TLM_OK && selective && !follow && fork >= 0) {
    int32_t rpend[TLM_MAX_POINTS];
    int nr = 0;
    if (fork_tok < 0) status = TLM_ERR_INTERNAL; /* the rule is not a point of s */
    else rpend[nr++] = fork_tok;
    /* the rule's sum only falls as it goes on: stop once greedy is sure */
    for (int p = fork + 1; p < s->npoints && status == TLM_OK &&
                           sentence - rule_sentence < m->sentence_margin;
         p++) {
      int n = point_tokens(m, s, p, rule.v, cands, toks), at = -1;
      for (int i = 0; i < n; i++)
        if (cands[i] == rule.v[p]) at = i;
      if (at < 0 || point_logp(&rst, rpend, &nr, cands, toks, n, pl)) {
        status = TLM_ERR_INTERNAL;
        break;
      }
      lp_rule[p] = pl[at];
      rule_sentence += lp_rule[p];
      rpend[nr++] = toks[at];
    }
    if (status == TLM_OK && sentence - rule_sentence < m->sentence_margin) {
      *out = rule;
      if (prob)
        for (int p = 0; p < s->npoints; p++) prob[p] = (float)exp(lp_rule[p]);
    }
  }
  if (rst.k) tlm_lm_state_free(&rst);
  return status;
}

tlm_status tlm_lm_score(const tlm_lm_model *m, const tlm_space *s, const tlm_schedule *sched,
                        double *logp) {
  *logp = -INFINITY;
  if (sched->n != s->npoints) return TLM_ERR_INVALID_ARGUMENT;
  tlm_lm_state st;
  if (tlm_lm_state_init(&st, m)) return TLM_ERR_OUT_OF_MEMORY;
  tlm_status status = TLM_OK;
  const float *lg = feed_prompt(&st, s);
  int32_t cands[TLM_MAX_CANDIDATES];
  int toks[TLM_MAX_CANDIDATES];
  double lp[TLM_MAX_CANDIDATES], sum = 0;
  for (int p = 0; p < s->npoints && status == TLM_OK; p++) {
    if (!lg) {
      status = TLM_ERR_INTERNAL;
      break;
    }
    int n = tlm_space_candidates(s, p, sched->v, cands), at = -1;
    for (int i = 0; i < n; i++) {
      toks[i] = tlm_lm_decision_token(&m->vocab, s, p, cands[i]);
      if (toks[i] < 0) status = TLM_ERR_INTERNAL;
      if (cands[i] == sched->v[p]) at = i;
    }
    if (status) break;
    if (at < 0) {
      status = TLM_ERR_INVALID_ARGUMENT; /* not a point of this space */
      break;
    }
    candidate_logp(lg, toks, cands, n, -1, 0.0, lp);
    sum += lp[at];
    if (p + 1 < s->npoints) lg = tlm_lm_step(&st, toks[at]);
  }
  tlm_lm_state_free(&st);
  if (status == TLM_OK) *logp = sum;
  return status;
}

typedef struct beam {
  tlm_lm_state st;
  tlm_schedule sched;
  double logp;
  int alive;
} beam;

int tlm_lm_decode_topk(const tlm_lm_model *m, const tlm_space *s, int k, tlm_schedule *out,
                       double *logp_out) {
  if (k < 1) return -1;
  beam *cur = calloc((size_t)k, sizeof *cur), *next = calloc((size_t)k, sizeof *next);
  typedef struct cand {
    double logp;
    int from, tok;
    int32_t value;
  } cand;
  cand *pool = malloc(sizeof(cand) * (size_t)k * TLM_MAX_CANDIDATES);
  int found = -1;
  if (!cur || !next || !pool || tlm_lm_state_init(&cur[0].st, m)) goto done;
  cur[0].alive = 1;
  cur[0].sched.n = s->npoints;
  tlm_schedule rule;
  tlm_space_default(s, &rule);
  feed_prompt(&cur[0].st, s);
  int alive = 1;
  for (int p = 0; p < s->npoints; p++) {
    int np = 0;
    for (int b = 0; b < alive; b++) {
      int32_t cands[TLM_MAX_CANDIDATES];
      int toks[TLM_MAX_CANDIDATES];
      double lp[TLM_MAX_CANDIDATES];
      int n = tlm_space_candidates(s, p, cur[b].sched.v, cands);
      for (int i = 0; i < n; i++) {
        toks[i] = tlm_lm_decision_token(&m->vocab, s, p, cands[i]);
        if (toks[i] < 0) goto done;
      }
      candidate_logp(cur[b].st.logits, toks, cands, n, rule.v[p], m->rule_bonus, lp);
      for (int i = 0; i < n; i++)
        pool[np++] = (cand){cur[b].logp + lp[i], b, toks[i], cands[i]};
    }
    /* keep the k best: stable selection (ties to the earlier entry) */
    int keep = np < k ? np : k;
    for (int i = 0; i < keep; i++) {
      int best = i;
      for (int j = i + 1; j < np; j++)
        if (pool[j].logp > pool[best].logp) best = j;
      cand tmp = pool[best];
      memmove(&pool[i + 1], &pool[i], sizeof(cand) * (size_t)(best - i));
      pool[i] = tmp;
    }
    for (int i = 0; i < keep; i++) {
      const beam *src = &cur[pool[i].from];
      if (tlm_lm_state_copy(&next[i].st, &src->st)) goto done;
      next[i].sched = src->sched;
      next[i].sched.v[p] = pool[i].value;
      next[i].logp = pool[i].logp;
      next[i].alive = 1;
      if (p + 1 < s->npoints && !tlm_lm_step(&next[i].st, pool[i].tok)) goto done;
    }
    beam *t = cur;
    cur = next;
    next = t;
    alive = keep;
  }
  for (int i = 0; i < alive; i++) {
    out[i] = cur[i].sched;
    if (logp_out) logp_out[i] = cur[i].logp;
  }
  found = alive;
done:
  for (int i = 0; i < k && cur; i++) tlm_lm_state_free(&cur[i].st);
  for (int i = 0; i < k && next; i++) tlm_lm_state_free(&next[i].st);
  free(cur);
  free(next);
  free(pool);
  return found;
}
