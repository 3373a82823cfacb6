// AVX2+FMA variants. The matmul streams each weight row from memory once per
// call (decode, M = 1, is bound by weight bandwidth) and reuses it from cache
// across the activation rows (prefill).
#include <immintrin.h>

#include "kernels/x86/avx2_util.h"

#include <algorithm>
#include <array>
#include <utility>

#include "kernels/kernel_table.h"
#include "kernels/x86/exp_avx2.h"
#include "tensor/dtype.h"

#define BS_AVX2 __attribute__((target("avx2,fma")))

namespace blockspec {

namespace {


BS_AVX2 inline __m256 load_bf16x8(const uint16_t* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline float load1(const float* w) { return *w; }
inline float load1(const uint16_t* w) { return bf16_to_f32(*w); }
BS_AVX2 inline __m256 load8(const float* w) { return _mm256_loadu_ps(w); }
BS_AVX2 inline __m256 load8(const uint16_t* w) { return load_bf16x8(w); }

// Register block: NB weight rows x MB activation rows (4 x 2 fills 14 of the
// 16 ymm registers), one accumulator per output. Every output is computed the
// same way whatever the block, M or thread split: one accumulator over k in
// steps of 8, a horizontal sum, then the scalar tail in order; so a row of y
// does not depend on its batch (see basic_avx512.cc for why that matters).
template <int NB, int MB, class W>
BS_AVX2 void block(const float* x, const W* w, float* y, int64_t K, int64_t N, int64_t n, int64_t m) {
  const int64_t K8 = K / 8 * 8;
  __m256 acc[NB][MB];
#pragma GCC unroll 4
  for (int i = 0; i < NB; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < MB; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K8; k += 8) {
    __m256 wv[NB], xv[MB];
#pragma GCC unroll 4
    for (int i = 0; i < NB; ++i) wv[i] = load8(w + (n + i) * K + k);
#pragma GCC unroll 4
    for (int j = 0; j < MB; ++j) xv[j] = _mm256_loadu_ps(x + (m + j) * K + k);
#pragma GCC unroll 4
    for (int i = 0; i < NB; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < MB; ++j) acc[i][j] = _mm256_fmadd_ps(xv[j], wv[i], acc[i][j]);
  }
  for (int i = 0; i < NB; ++i)
    for (int j = 0; j < MB; ++j) {
      float s = hsum256(acc[i][j]);
      for (int64_t k = K8; k < K; ++k) s += x[(m + j) * K + k] * load1(w + (n + i) * K + k);
      y[(m + j) * N + n + i] = s;
    }
}

template <class W, int NB, int... MB>
constexpr auto block_row(std::integer_sequence<int, MB...>) {
  return std::array{&block<NB, MB + 1, W>...};
}

template <class W>
BS_AVX2 void matmul_avx2_impl(const float* x, const W* w, float* y, int64_t M, int64_t K, int64_t N,
                              int64_t n0, int64_t n1) {
  constexpr auto seq = std::make_integer_sequence<int, 2>();
  constexpr std::array table{block_row<W, 1>(seq), block_row<W, 2>(seq), block_row<W, 3>(seq),
                             block_row<W, 4>(seq)};  // [NB - 1][MB - 1]
  // Panels of 32 weight rows stay in L2 while x streams past in pairs of rows.
  constexpr int64_t kPanel = 32;
  for (int64_t p = n0; p < n1; p += kPanel) {
    const int64_t p1 = std::min(n1, p + kPanel);
    for (int64_t m = 0; m < M; m += 2) {
      const int64_t mb = std::min<int64_t>(2, M - m);
      for (int64_t n = p; n < p1; n += 4) table[std::min<int64_t>(4, p1 - n) - 1][mb - 1](x, w, y, K, N, n, m);
    }
  }
}

}  // namespace

BS_AVX2 void matmul_f32_avx2(const float* x, const float* w, float* y, int64_t M, int64_t K, int64_t N,
                             int64_t n0, int64_t n1) {
  matmul_avx2_impl(x, w, y, M, K, N, n0, n1);
}

BS_AVX2 void matmul_bf16_avx2(const float* x, const uint16_t* w, float* y, int64_t M, int64_t K, int64_t N,
                              int64_t n0, int64_t n1) {
  matmul_avx2_impl(x, w, y, M, K, N, n0, n1);
}

BS_AVX2 uint64_t read_stream_avx2(const uint8_t* p, int64_t n) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;  // four chains, 128 bytes per iteration
  int64_t i = 0;
  for (; i + 128 <= n; i += 128) {
    a = _mm256_add_epi64(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_add_epi64(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    c = _mm256_add_epi64(c, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    d = _mm256_add_epi64(d, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  for (; i + 32 <= n; i += 32) a = _mm256_add_epi64(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
  alignas(32) uint64_t o[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(o), _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d)));
  return o[0] + o[1] + o[2] + o[3];
}

BS_AVX2 float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), a1);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
  float s = hsum256(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

BS_AVX2 void axpy_avx2(float a, const float* x, float* y, int64_t n) {
  __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

namespace {

// f32 -> bf16 -> f32 (round half to even, NaN quieted) as f32_to_bf16 does.
BS_AVX2 inline __m256 round_bf16_8(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), odd);
  const __m256i nan = _mm256_or_si256(u, _mm256_set1_epi32(0x400000));
  const __m256 is_nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  const __m256i out = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(nan), is_nan));
  return _mm256_castsi256_ps(_mm256_and_si256(out, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}

}  // namespace

// exp_sub_sum_ref on 8 lanes, two vectors per 16-element chunk, into four vectors of double partial sums.
BS_AVX2 double exp_sub_sum_avx2(float* x, float m, int64_t n) {
  const __m256 mv = _mm256_set1_ps(m);
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  const int64_t n16 = n / 16 * 16;
  for (int64_t i = 0; i < n16; i += 16) {
    for (int h = 0; h < 2; ++h) {
      const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8 * h), mv));
      _mm256_storeu_ps(x + i + 8 * h, e);
      acc[2 * h] = _mm256_add_pd(acc[2 * h], _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
      acc[2 * h + 1] = _mm256_add_pd(acc[2 * h + 1], _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
  }
  alignas(32) double s[16];
  for (int j = 0; j < 4; ++j) _mm256_store_pd(s + 4 * j, acc[j]);
  exp_sub_sum_tail(x, m, n16, n, s);
  return sum16(s);
}

// swiglu_ref's operations on 8 lanes (exp8 mirrors exp_fixed); the last n % 8 go through swiglu_ref itself.
BS_AVX2 void swiglu_avx2(const float* gate, const float* up, float* out, int64_t n, bool round_bf16) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const int64_t n8 = n / 8 * 8;
  for (int64_t i = 0; i < n8; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 neg_g = _mm256_xor_ps(g, _mm256_set1_ps(-0.0f));
    __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, exp8(neg_g)));
    if (round_bf16) s = round_bf16_8(s);
    if (up == nullptr) {  // silu alone
      _mm256_storeu_ps(out + i, s);
      continue;
    }
    __m256 o = _mm256_mul_ps(s, _mm256_loadu_ps(up + i));
    if (round_bf16) o = round_bf16_8(o);
    _mm256_storeu_ps(out + i, o);
  }
  if (n8 < n) swiglu_ref(gate + n8, up == nullptr ? nullptr : up + n8, out + n8, n - n8, round_bf16);
}

}  // namespace blockspec
