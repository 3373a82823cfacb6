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
  BS_AVX512 __m512 operator()(const void* c, const float*, int64_t i, __mmask16 m) const {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(c) + i);
  }
};
struct DeqBf16 {
  BS_AVX512 __m512 operator()(const void* c, const float*, int64_t i, __mmask16 m) const {
    __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(c) + i);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
};
struct DeqFp8 {
  BS_AVX512 __m512 operator()(const void* c, const float* s, int64_t i, __mmask16 m) const {
    __m128i b = _mm_maskz_loadu_epi8(m, static_cast<const uint8_t*>(c) + i);
    __m512 v = _mm512_i32gather_ps(_mm512_cvtepu8_epi32(b), kFp8E4M3Table.data(), 4);
    return _mm512_maskz_mul_ps(m, v, _mm512_set1_ps(s[0]));
  }
};
template <bool kGrouped>
struct DeqI8 {
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

// NB heads' outputs y [NB, d] over n_rows rows: per 16-value chunk the NB
// accumulators stay in registers across all rows (the FMA chain of axpy_t,
// row by row, without the load / store of y around every row).
template <class Deq, int NB>
BS_AVX512 void axpy_heads(const float* p, int64_t ps, const uint8_t* codes, int64_t cs, const float* scales,
                          int64_t ss, int64_t n_rows, float* y, int64_t d) {
  const Deq deq;
  for (int64_t k = 0; k < d; k += 16) {
    const __mmask16 mk = k + 16 <= d ? static_cast<__mmask16>(0xffff) : tail_mask(d - k);
    __m512 acc[NB];
    #pragma GCC unroll 8
    for (int i = 0; i < NB; ++i) acc[i] = _mm512_maskz_loadu_ps(mk, y + i * d + k);
    for (int64_t r = 0; r < n_rows; ++r) {
      const __m512 v = deq(codes + r * cs, scales + r * ss, k, mk);
      #pragma GCC unroll 8
      for (int i = 0; i < NB; ++i) acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(p[i * ps + r]), v, acc[i]);
    }
    #pragma GCC unroll 8
    for (int i = 0; i < NB; ++i) _mm512_mask_storeu_ps(y + i * d + k, mk, acc[i]);
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
  for (int64_t r = 0; r < n_rows; ++r) {
    const void* c = static_cast<const uint8_t*>(codes) + r * cs;
    for (int64_t i0 = 0; i0 < n_h; i0 += kMaxHeads)
      kFns[std::min<int64_t>(kMaxHeads, n_h - i0) - 1](q + i0 * d, d, c, scales + r * ss, out + i0 * os + r, os);
  }
}

template <class Deq>
BS_AVX512 void axpy_rows_t(const float* p, int64_t ps, int64_t n_h, const void* codes, int64_t cs,
                           const float* scales, int64_t ss, int64_t n_rows, float* y, int64_t d) {
  using Fn = void (*)(const float*, int64_t, const uint8_t*, int64_t, const float*, int64_t, int64_t, float*,
                      int64_t);
  static constexpr Fn kFns[kMaxHeads] = {axpy_heads<Deq, 1>, axpy_heads<Deq, 2>, axpy_heads<Deq, 3>,
                                         axpy_heads<Deq, 4>, axpy_heads<Deq, 5>, axpy_heads<Deq, 6>,
                                         axpy_heads<Deq, 7>, axpy_heads<Deq, 8>};
  for (int64_t i0 = 0; i0 < n_h; i0 += kMaxHeads)
    kFns[std::min<int64_t>(kMaxHeads, n_h - i0) - 1](p + i0 * ps, ps, static_cast<const uint8_t*>(codes), cs,
                                                      scales, ss, n_rows, y + i0 * d, d);
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
