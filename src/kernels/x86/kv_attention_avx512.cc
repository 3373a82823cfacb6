// AVX-512 KV row kernels: 16 codes widened to f32 and multiplied by their
// scale (the same f32 product as the scalar dequantization), then the exact
// loop shape of dot_avx512 (one accumulator, masked tail, reduce_add) or an
// FMA per value for axpy. So a compressed row gives the bits dot_avx512 /
// an FMA axpy give on its dequantized f32 row.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

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

}  // namespace

#define BS_KV_ROW_AVX512(name, DEQ)                                                                   \
  BS_AVX512 float kv_dot_##name##_avx512(const float* q, const void* c, const float* s, int64_t d) {  \
    return dot_t<DEQ>(q, c, s, d);                                                                    \
  }                                                                                                   \
  BS_AVX512 void kv_axpy_##name##_avx512(float a, const void* c, const float* s, float* y, int64_t d) { \
    axpy_t<DEQ>(a, c, s, y, d);                                                                       \
  }
BS_KV_ROW_AVX512(f32, DeqF32)
BS_KV_ROW_AVX512(bf16, DeqBf16)
BS_KV_ROW_AVX512(fp8, DeqFp8)
BS_KV_ROW_AVX512(i8pth, DeqI8<false>)
BS_KV_ROW_AVX512(i8g128, DeqI8<true>)
#undef BS_KV_ROW_AVX512

}  // namespace blockspec
