// AVX-512 KV row kernels: 16 codes widened to f32 and multiplied by their
// scale (the same f32 product as the scalar dequantization), then the exact
// loop shape of dot_avx512 (one accumulator, masked tail, reduce_add) or an
// FMA per value for axpy. So a compressed row gives the bits dot_avx512 /
// an FMA axpy give on its dequantized f32 row.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>

#include "kernels/kv_attention.h"

#define BS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

namespace blockspec {

namespace {

BS_AVX512 inline __mmask16 tail_mask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

struct DeqF32 {
  static constexpr int64_t kBytes = 4;  // per code
  BS_AVX512 __m512 operator()(const void* c, const float*, int64_t i, __mmask16 m) const {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(c) + i);
  }
};
struct DeqBf16 {
  static constexpr int64_t kBytes = 2;  // per code
  BS_AVX512 __m512 operator()(const void* c, const float*, int64_t i, __mmask16 m) const {
    __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(c) + i);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
};
struct DeqFp8 {
  static constexpr int64_t kBytes = 1;  // per code
  BS_AVX512 __m512 operator()(const void* c, const float* s, int64_t i, __mmask16 m) const {
    __m128i b = _mm_maskz_loadu_epi8(m, static_cast<const uint8_t*>(c) + i);
    __m512 v = _mm512_i32gather_ps(_mm512_cvtepu8_epi32(b), kFp8E4M3Table.data(), 4);
    return _mm512_maskz_mul_ps(m, v, _mm512_set1_ps(s[0]));
  }
};
template <bool kGrouped>
struct DeqI8 {
  static constexpr int64_t kBytes = 1;  // per code
  BS_AVX512 __m512 operator()(const void* c, const float* s, int64_t i, __mmask16 m) const {
    __m128i b = _mm_maskz_loadu_epi8(m, static_cast<const int8_t*>(c) + i);
    // 16 | 128, so a chunk of 16 never straddles two groups.
    const float sc = kGrouped ? s[i / kKvGroup] : s[0];
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), _mm512_set1_ps(sc));
  }
};

template <class Deq>
BS_AVX512 float dot_t(const float* q, const void* c, const float* s, int64_t d) {
  const Deq deq;
  const int64_t d16 = d / 16 * 16;
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < d16; i += 16)
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), deq(c, s, i, 0xffff), acc);
  if (d16 < d) {
    const __mmask16 mk = tail_mask(d - d16);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, q + d16), deq(c, s, d16, mk), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

template <class Deq>
BS_AVX512 void axpy_t(float a, const void* c, const float* s, float* y, int64_t d) {
  const Deq deq;
  const __m512 av = _mm512_set1_ps(a);
  const int64_t d16 = d / 16 * 16;
  for (int64_t i = 0; i < d16; i += 16)
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, deq(c, s, i, 0xffff), _mm512_loadu_ps(y + i)));
  if (d16 < d) {
    const __mmask16 mk = tail_mask(d - d16);
    _mm512_mask_storeu_ps(y + d16, mk,
                          _mm512_fmadd_ps(av, deq(c, s, d16, mk), _mm512_maskz_loadu_ps(mk, y + d16)));
  }
}

// NB heads against one row: the row's 16-value chunks are dequantized once
// and FMA'd into NB accumulators, each the exact chain of dot_t.
template <class Deq, int NB>
BS_AVX512 void dot_heads(const float* q, int64_t d, const void* c, const float* s, float* out, int64_t os) {
  const Deq deq;
  __m512 acc[NB];
  #pragma GCC unroll 8
  for (int i = 0; i < NB; ++i) acc[i] = _mm512_setzero_ps();
  const int64_t d16 = d / 16 * 16;
  for (int64_t k = 0; k < d16; k += 16) {
    const __m512 kv = deq(c, s, k, 0xffff);
    #pragma GCC unroll 8
    for (int i = 0; i < NB; ++i) acc[i] = _mm512_fmadd_ps(_mm512_loadu_ps(q + i * d + k), kv, acc[i]);
  }
  if (d16 < d) {
    const __mmask16 mk = tail_mask(d - d16);
    const __m512 kv = deq(c, s, d16, mk);
    #pragma GCC unroll 8
    for (int i = 0; i < NB; ++i) acc[i] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, q + i * d + d16), kv, acc[i]);
  }
  #pragma GCC unroll 8
  for (int i = 0; i < NB; ++i) out[i * os] = _mm512_reduce_add_ps(acc[i]);
}

// The horizontal sums of 16 vectors at once, lane r = the sum of a[r]: the pairs GCC's _mm512_reduce_add_ps
// adds (lane i + lane i + 8, then i + i + 4 of those, then i + i + 2, then i + i + 1), each level over all 16
// vectors with shuffles. IEEE addition commutes, so every lane is the bits of its vector's reduce_add.
BS_AVX512 inline __m512 reduce_add16(const __m512* a) {
  __m512 w[8], z[4], u[2];
  #pragma GCC unroll 8
  for (int p = 0; p < 8; ++p)  // [a_2p: lanes i + i+8 (8), a_2p+1: the same (8)]
    w[p] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  #pragma GCC unroll 4
  for (int p = 0; p < 4; ++p)  // quarter j: vector 4p + j's 4 sums i + i+4
    z[p] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * p], w[2 * p + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(w[2 * p], w[2 * p + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  #pragma GCC unroll 2
  for (int p = 0; p < 2; ++p)  // quarter j: vector 8p + j's 2 sums i + i+2, then vector 8p + 4 + j's
    u[p] = _mm512_add_ps(_mm512_shuffle_ps(z[2 * p], z[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(z[2 * p], z[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  // Quarter j: the sums of vectors j, j + 4, j + 8, j + 12; lane 4j + k -> lane j + 4k.
  const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(idx, r);
}

// One head against 16 rows (row r at codes + r * cs): 16 independent accumulators, each the exact chain of
// dot_t, reduced together (reduce_add16) and stored as 16 consecutive outputs. Per row the scalar tail of
// dot_heads (a horizontal sum per row and head) was the kernel's cost: SmolLM2-135M decode at 900 tokens of
// context spent more time in attention than in its weights.
template <class Deq>
BS_AVX512 void dot_16rows(const float* q, int64_t d, const uint8_t* codes, int64_t cs, const float* scales,
                          int64_t ss, float* out) {
  const Deq deq;
  __m512 acc[16];
  #pragma GCC unroll 16
  for (int r = 0; r < 16; ++r) acc[r] = _mm512_setzero_ps();
  const int64_t d16 = d / 16 * 16;
  for (int64_t k = 0; k < d16; k += 16) {
    const __m512 qv = _mm512_loadu_ps(q + k);
    #pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) acc[r] = _mm512_fmadd_ps(qv, deq(codes + r * cs, scales + r * ss, k, 0xffff), acc[r]);
  }
  if (d16 < d) {
    const __mmask16 mk = tail_mask(d - d16);
    const __m512 qv = _mm512_maskz_loadu_ps(mk, q + d16);
    #pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) acc[r] = _mm512_fmadd_ps(qv, deq(codes + r * cs, scales + r * ss, d16, mk), acc[r]);
  }
  _mm512_storeu_ps(out, reduce_add16(acc));
}

// NB heads' outputs y [NB, d], chunks k0 .. k0 + CG - 1 of 16 values, over n_rows rows: the NB x CG
// accumulators stay in registers across all rows (the FMA chain of axpy_t per value, row by row), CG chunks
// side by side so that NB x CG independent chains hide the FMA latency (one chunk at a time with NB = 3 ran
// three chains).
template <class Deq, int NB, int CG>
BS_AVX512 void axpy_chunks(const float* p, int64_t ps, const uint8_t* codes, int64_t cs, const float* scales,
                           int64_t ss, int64_t n_rows, float* y, int64_t d, int64_t k0) {
  const Deq deq;
  __mmask16 mk[CG];
  __m512 acc[NB][CG];
  #pragma GCC unroll 8
  for (int c = 0; c < CG; ++c) {
    const int64_t k = k0 + 16 * c;
    mk[c] = k + 16 <= d ? static_cast<__mmask16>(0xffff) : tail_mask(d - k);
    #pragma GCC unroll 8
    for (int i = 0; i < NB; ++i) acc[i][c] = _mm512_maskz_loadu_ps(mk[c], y + i * d + k);
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    __m512 v[CG];
    #pragma GCC unroll 8
    for (int c = 0; c < CG; ++c) v[c] = deq(codes + r * cs, scales + r * ss, k0 + 16 * c, mk[c]);
    #pragma GCC unroll 8
    for (int i = 0; i < NB; ++i) {
      const __m512 pb = _mm512_set1_ps(p[i * ps + r]);
      #pragma GCC unroll 8
      for (int c = 0; c < CG; ++c) acc[i][c] = _mm512_fmadd_ps(pb, v[c], acc[i][c]);
    }
  }
  #pragma GCC unroll 8
  for (int c = 0; c < CG; ++c)
    #pragma GCC unroll 8
    for (int i = 0; i < NB; ++i) _mm512_mask_storeu_ps(y + i * d + k0 + 16 * c, mk[c], acc[i][c]);
}

// Software prefetch of rows [r0, r1) (row r at codes + r * cs, bytes_per_row of codes each): rows of one KV head
// are pieces n_kv_heads rows apart, which the hardware prefetchers follow poorly.
inline void prefetch_rows(const uint8_t* codes, int64_t cs, int64_t r0, int64_t r1, int64_t bytes_per_row) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t off = 0; off < bytes_per_row; off += 64) __builtin_prefetch(codes + r * cs + off, 0, 3);
}

constexpr int64_t kRowBlock = 32;  // rows of one axpy pass: their codes stay in L1 across the chunk groups

// NB heads' outputs over n_rows rows, in blocks of kRowBlock rows (the chunk groups of a block read it from L1;
// one group over all rows after another re-read each row from beyond L2 at long contexts), each block's chunks
// in groups of 4 (NB <= 6: at most 24 accumulators), then 2, then 1. y holds the sums between blocks: the same
// chain per value.
template <class Deq, int NB>
BS_AVX512 void axpy_heads(const float* p, int64_t ps, const uint8_t* codes, int64_t cs, const float* scales,
                          int64_t ss, int64_t n_rows, float* y, int64_t d, int64_t row_bytes) {
  const int64_t chunks = (d + 15) / 16;
  for (int64_t r0 = 0; r0 < n_rows; r0 += kRowBlock) {
    const int64_t n = std::min(kRowBlock, n_rows - r0);
    prefetch_rows(codes, cs, r0 + kRowBlock, std::min(n_rows, r0 + 2 * kRowBlock), row_bytes);
    const float* pr = p + r0;
    const uint8_t* cr = codes + r0 * cs;
    const float* sr = scales + r0 * ss;
    int64_t c = 0;
    if constexpr (NB <= 6)
      for (; c + 4 <= chunks; c += 4) axpy_chunks<Deq, NB, 4>(pr, ps, cr, cs, sr, ss, n, y, d, 16 * c);
    for (; c + 2 <= chunks; c += 2) axpy_chunks<Deq, NB, 2>(pr, ps, cr, cs, sr, ss, n, y, d, 16 * c);
    for (; c < chunks; ++c) axpy_chunks<Deq, NB, 1>(pr, ps, cr, cs, sr, ss, n, y, d, 16 * c);
  }
}

constexpr int kMaxHeads = 8;  // heads per register pass

template <class Deq>
BS_AVX512 void dot_rows_t(const float* q, int64_t n_h, const void* codes, int64_t cs, const float* scales,
                          int64_t ss, int64_t n_rows, int64_t d, float* out, int64_t os) {
  using Fn = void (*)(const float*, int64_t, const void*, const float*, float*, int64_t);
  static constexpr Fn kFns[kMaxHeads] = {dot_heads<Deq, 1>, dot_heads<Deq, 2>, dot_heads<Deq, 3>,
                                         dot_heads<Deq, 4>, dot_heads<Deq, 5>, dot_heads<Deq, 6>,
                                         dot_heads<Deq, 7>, dot_heads<Deq, 8>};
  const uint8_t* c8 = static_cast<const uint8_t*>(codes);
  int64_t r = 0;
  for (; r + 16 <= n_rows; r += 16) {
    prefetch_rows(c8, cs, r + 32, std::min(n_rows, r + 48), d * Deq::kBytes);  // two blocks ahead
    for (int64_t i = 0; i < n_h; ++i)
      dot_16rows<Deq>(q + i * d, d, c8 + r * cs, cs, scales + r * ss, ss, out + i * os + r);
  }
  for (; r < n_rows; ++r) {
    const void* c = c8 + r * cs;
    for (int64_t i0 = 0; i0 < n_h; i0 += kMaxHeads)
      kFns[std::min<int64_t>(kMaxHeads, n_h - i0) - 1](q + i0 * d, d, c, scales + r * ss, out + i0 * os + r, os);
  }
}

template <class Deq>
BS_AVX512 void axpy_rows_t(const float* p, int64_t ps, int64_t n_h, const void* codes, int64_t cs,
                           const float* scales, int64_t ss, int64_t n_rows, float* y, int64_t d) {
  using Fn = void (*)(const float*, int64_t, const uint8_t*, int64_t, const float*, int64_t, int64_t, float*,
                      int64_t, int64_t);
  static constexpr Fn kFns[kMaxHeads] = {axpy_heads<Deq, 1>, axpy_heads<Deq, 2>, axpy_heads<Deq, 3>,
                                         axpy_heads<Deq, 4>, axpy_heads<Deq, 5>, axpy_heads<Deq, 6>,
                                         axpy_heads<Deq, 7>, axpy_heads<Deq, 8>};
  for (int64_t i0 = 0; i0 < n_h; i0 += kMaxHeads)
    kFns[std::min<int64_t>(kMaxHeads, n_h - i0) - 1](p + i0 * ps, ps, static_cast<const uint8_t*>(codes), cs,
                                                      scales, ss, n_rows, y + i0 * d, d, d * Deq::kBytes);
}

}  // namespace

#define BS_KV_ROW_AVX512(name, DEQ)                                                                   \
  BS_AVX512 float kv_dot_##name##_avx512(const float* q, const void* c, const float* s, int64_t d) {  \
    return dot_t<DEQ>(q, c, s, d);                                                                    \
  }                                                                                                   \
  BS_AVX512 void kv_axpy_##name##_avx512(float a, const void* c, const float* s, float* y, int64_t d) { \
    axpy_t<DEQ>(a, c, s, y, d);                                                                       \
  }                                                                                                   \
  BS_AVX512 void kv_dot_rows_##name##_avx512(const float* q, int64_t n_h, const void* c, int64_t cs,  \
                                             const float* s, int64_t ss, int64_t n_rows, int64_t d,   \
                                             float* out, int64_t os) {                                \
    dot_rows_t<DEQ>(q, n_h, c, cs, s, ss, n_rows, d, out, os);                                        \
  }                                                                                                   \
  BS_AVX512 void kv_axpy_rows_##name##_avx512(const float* p, int64_t ps, int64_t n_h, const void* c, \
                                              int64_t cs, const float* s, int64_t ss, int64_t n_rows, \
                                              float* y, int64_t d) {                                  \
    axpy_rows_t<DEQ>(p, ps, n_h, c, cs, s, ss, n_rows, y, d);                                         \
  }
BS_KV_ROW_AVX512(f32, DeqF32)
BS_KV_ROW_AVX512(bf16, DeqBf16)
BS_KV_ROW_AVX512(fp8, DeqFp8)
BS_KV_ROW_AVX512(i8pth, DeqI8<false>)
BS_KV_ROW_AVX512(i8g128, DeqI8<true>)
#undef BS_KV_ROW_AVX512

}  // namespace blockspec
