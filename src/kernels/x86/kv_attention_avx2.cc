// AVX2 KV row kernels: 8 codes widened to f32 and multiplied by their scale
// (the scalar dequantization's f32 product), then the loop shape of
// dot_avx2 (two accumulators over 16, one step of 8, scalar tail) and
// axpy_avx2 (FMA per 8, scalar tail); hsum as dot_avx2's.
#include <immintrin.h>

#include <algorithm>

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

// 4 rows' dot products (d a multiple of 8, one head): each row's two accumulators as in dot_t, their sums
// a0 + a1 reduced together by shuffles that add the pairs hsum256 adds (lane i + i+4, then i + i+2, then i + i+1),
// so each output keeps dot_t's bits.
template <class Deq>
BS_AVX2 void dot_4rows(const float* q, int64_t d, const uint8_t* codes, int64_t cs, const float* scales, int64_t ss,
                       float* out) {
  const Deq deq;
  __m256 a0[4], a1[4];
  for (int r = 0; r < 4; ++r) a0[r] = _mm256_setzero_ps(), a1[r] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= d; i += 16) {
    const __m256 q0 = _mm256_loadu_ps(q + i), q1 = _mm256_loadu_ps(q + i + 8);
    for (int r = 0; r < 4; ++r) {
      a0[r] = _mm256_fmadd_ps(q0, deq(codes + r * cs, scales + r * ss, i), a0[r]);
      a1[r] = _mm256_fmadd_ps(q1, deq(codes + r * cs, scales + r * ss, i + 8), a1[r]);
    }
  }
  if (i < d) {  // d % 16 == 8
    const __m256 q0 = _mm256_loadu_ps(q + i);
    for (int r = 0; r < 4; ++r) a0[r] = _mm256_fmadd_ps(q0, deq(codes + r * cs, scales + r * ss, i), a0[r]);
  }
  __m256 v[4];
  for (int r = 0; r < 4; ++r) v[r] = _mm256_add_ps(a0[r], a1[r]);
  // [row 0 | row 1] and [row 2 | row 3], each 128-bit half lo + hi of its row.
  const __m256 x01 = _mm256_add_ps(_mm256_permute2f128_ps(v[0], v[1], 0x20), _mm256_permute2f128_ps(v[0], v[1], 0x31));
  const __m256 x23 = _mm256_add_ps(_mm256_permute2f128_ps(v[2], v[3], 0x20), _mm256_permute2f128_ps(v[2], v[3], 0x31));
  // Half 0: row 0's l0 + l2, l1 + l3, then row 2's; half 1: rows 1 and 3.
  const __m256 y = _mm256_add_ps(_mm256_shuffle_ps(x01, x23, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm256_shuffle_ps(x01, x23, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 z = _mm256_add_ps(_mm256_shuffle_ps(y, y, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(y, y, _MM_SHUFFLE(3, 1, 3, 1)));
  alignas(32) float t[8];
  _mm256_store_ps(t, z);  // rows 0, 2 in lanes 0, 1; rows 1, 3 in lanes 4, 5
  out[0] = t[0], out[1] = t[4], out[2] = t[1], out[3] = t[5];
}

template <class Deq>
BS_AVX2 void dot_rows_t(const float* q, int64_t n_h, const void* codes, int64_t cs, const float* scales, int64_t ss,
                        int64_t n_rows, int64_t d, float* out, int64_t os) {
  const uint8_t* c8 = static_cast<const uint8_t*>(codes);
  int64_t r = 0;
  if (d % 8 == 0)
    for (; r + 4 <= n_rows; r += 4)
      for (int64_t i = 0; i < n_h; ++i) {
        alignas(16) float o[4];
        dot_4rows<Deq>(q + i * d, d, c8 + r * cs, cs, scales + r * ss, ss, o);
        for (int k = 0; k < 4; ++k) out[i * os + r + k] = o[k];
      }
  for (; r < n_rows; ++r)
    for (int64_t i = 0; i < n_h; ++i) out[i * os + r] = dot_t<Deq>(q + i * d, c8 + r * cs, scales + r * ss, d);
}

// y [d] (d a multiple of 8) += p[r] * row r for r in order, chunks k0 .. k0 + CG - 1 of 8 values: CG
// sums in registers across all rows (axpy_t's FMA per value, row by row), CG independent chains.
template <class Deq, int CG>
BS_AVX2 void axpy_chunks(const float* p, const uint8_t* codes, int64_t cs, const float* scales,
                         int64_t ss, int64_t n_rows, float* y, int64_t k0) {
  const Deq deq;
  __m256 acc[CG];
  for (int c = 0; c < CG; ++c) acc[c] = _mm256_loadu_ps(y + k0 + 8 * c);
  for (int64_t r = 0; r < n_rows; ++r) {
    const __m256 pb = _mm256_set1_ps(p[r]);
    for (int c = 0; c < CG; ++c)
      acc[c] = _mm256_fmadd_ps(pb, deq(codes + r * cs, scales + r * ss, k0 + 8 * c), acc[c]);
  }
  for (int c = 0; c < CG; ++c) _mm256_storeu_ps(y + k0 + 8 * c, acc[c]);
}

// One head at a time with 4 chunks side by side, in blocks of 32 rows as the AVX-512 kernel.
template <class Deq>
BS_AVX2 void axpy_rows_t(const float* p, int64_t ps, int64_t n_h, const void* codes, int64_t cs,
                         const float* scales, int64_t ss, int64_t n_rows, float* y, int64_t d) {
  const uint8_t* c8 = static_cast<const uint8_t*>(codes);
  if (d % 8 != 0) {
    for (int64_t r = 0; r < n_rows; ++r)
      for (int64_t i = 0; i < n_h; ++i) axpy_t<Deq>(p[i * ps + r], c8 + r * cs, scales + r * ss, y + i * d, d);
    return;
  }
  for (int64_t r0 = 0; r0 < n_rows; r0 += 32) {
    const int64_t n = std::min<int64_t>(32, n_rows - r0);
    for (int64_t i = 0; i < n_h; ++i) {
      int64_t k = 0;
      for (; k + 32 <= d; k += 32)
        axpy_chunks<Deq, 4>(p + i * ps + r0, c8 + r0 * cs, cs, scales + r0 * ss, ss, n, y + i * d, k);
      for (; k < d; k += 8)
        axpy_chunks<Deq, 1>(p + i * ps + r0, c8 + r0 * cs, cs, scales + r0 * ss, ss, n, y + i * d, k);
    }
  }
}

}  // namespace

#define BS_KV_ROW_AVX2(name, DEQ)                                                                   \
  BS_AVX2 float kv_dot_##name##_avx2(const float* q, const void* c, const float* s, int64_t d) {    \
    return dot_t<DEQ>(q, c, s, d);                                                                  \
  }                                                                                                 \
  BS_AVX2 void kv_axpy_##name##_avx2(float a, const void* c, const float* s, float* y, int64_t d) { \
    axpy_t<DEQ>(a, c, s, y, d);                                                                     \
  }                                                                                                 \
  BS_AVX2 void kv_dot_rows_##name##_avx2(const float* q, int64_t n_h, const void* c, int64_t cs,    \
                                         const float* s, int64_t ss, int64_t n_rows, int64_t d,     \
                                         float* out, int64_t os) {                                  \
    dot_rows_t<DEQ>(q, n_h, c, cs, s, ss, n_rows, d, out, os);                                      \
  }                                                                                                 \
  BS_AVX2 void kv_axpy_rows_##name##_avx2(const float* p, int64_t ps, int64_t n_h, const void* c,   \
                                          int64_t cs, const float* s, int64_t ss, int64_t n_rows,   \
                                          float* y, int64_t d) {                                    \
    axpy_rows_t<DEQ>(p, ps, n_h, c, cs, s, ss, n_rows, y, d);                                       \
  }
BS_KV_ROW_AVX2(f32, DeqF32)
BS_KV_ROW_AVX2(bf16, DeqBf16)
BS_KV_ROW_AVX2(fp8, DeqFp8)
BS_KV_ROW_AVX2(i8pth, DeqI8<false>)
BS_KV_ROW_AVX2(i8g128, DeqI8<true>)
#undef BS_KV_ROW_AVX2

}  // namespace blockspec
