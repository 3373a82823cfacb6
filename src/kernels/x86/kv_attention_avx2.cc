// AVX2 KV row kernels: 8 codes widened to f32 and multiplied by their scale
// (the scalar dequantization's f32 product), then the loop shape of
// dot_avx2 (two accumulators over 16, one step of 8, scalar tail) and
// axpy_avx2 (FMA per 8, scalar tail); hsum as dot_avx2's.
#include <immintrin.h>

#include "kernels/x86/avx2_util.h"

#include "kernels/kv_attention.h"
#include "tensor/dtype.h"

#define BS_AVX2 __attribute__((target("avx2,fma")))

namespace blockspec {

namespace {


struct DeqF32 {
  BS_AVX2 __m256 operator()(const void* c, const float*, int64_t i) const {
    return _mm256_loadu_ps(static_cast<const float*>(c) + i);
  }
  float one(const void* c, const float*, int64_t i) const { return static_cast<const float*>(c)[i]; }
};
struct DeqBf16 {
  BS_AVX2 __m256 operator()(const void* c, const float*, int64_t i) const {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(c) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  float one(const void* c, const float*, int64_t i) const { return bf16_to_f32(static_cast<const uint16_t*>(c)[i]); }
};
struct DeqFp8 {
  BS_AVX2 __m256 operator()(const void* c, const float* s, int64_t i) const {
    __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(c) + i));
    __m256 v = _mm256_i32gather_ps(kFp8E4M3Table.data(), _mm256_cvtepu8_epi32(b), 4);
    return _mm256_mul_ps(v, _mm256_set1_ps(s[0]));
  }
  float one(const void* c, const float* s, int64_t i) const {
    return kFp8E4M3Table[static_cast<const uint8_t*>(c)[i]] * s[0];
  }
};
template <bool kGrouped>
struct DeqI8 {
  BS_AVX2 __m256 operator()(const void* c, const float* s, int64_t i) const {
    __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const int8_t*>(c) + i));
    const float sc = kGrouped ? s[i / kKvGroup] : s[0];  // 8 | 128: no straddling
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), _mm256_set1_ps(sc));
  }
  float one(const void* c, const float* s, int64_t i) const {
    return static_cast<float>(static_cast<const int8_t*>(c)[i]) * (kGrouped ? s[i / kKvGroup] : s[0]);
  }
};

template <class Deq>
BS_AVX2 float dot_t(const float* q, const void* c, const float* s, int64_t n) {
  const Deq deq;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), deq(c, s, i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), deq(c, s, i + 8), a1);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), deq(c, s, i), a0);
  float r = hsum256(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) r += q[i] * deq.one(c, s, i);
  return r;
}

template <class Deq>
BS_AVX2 void axpy_t(float a, const void* c, const float* s, float* y, int64_t n) {
  const Deq deq;
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, deq(c, s, i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * deq.one(c, s, i);
}

}  // namespace

#define BS_KV_ROW_AVX2(name, DEQ)                                                                   \
  BS_AVX2 float kv_dot_##name##_avx2(const float* q, const void* c, const float* s, int64_t d) {    \
    return dot_t<DEQ>(q, c, s, d);                                                                  \
  }                                                                                                 \
  BS_AVX2 void kv_axpy_##name##_avx2(float a, const void* c, const float* s, float* y, int64_t d) { \
    axpy_t<DEQ>(a, c, s, y, d);                                                                     \
  }
BS_KV_ROW_AVX2(f32, DeqF32)
BS_KV_ROW_AVX2(bf16, DeqBf16)
BS_KV_ROW_AVX2(fp8, DeqFp8)
BS_KV_ROW_AVX2(i8pth, DeqI8<false>)
BS_KV_ROW_AVX2(i8g128, DeqI8<true>)
#undef BS_KV_ROW_AVX2

}  // namespace blockspec
