// AVX2+FMA variants. The matmul walks weight rows once and, for each row,
// computes up to 4 activation rows at a time so a weight row (a few KB,
// L1-resident) is streamed from memory once per call: decode (M=1) is bound
// by weight bandwidth, and prefill reuses each row across M.
#include <immintrin.h>

#include "kernels/kernel_table.h"
#include "tensor/dtype.h"

#define BS_AVX2 __attribute__((target("avx2,fma")))

namespace blockspec {

namespace {

BS_AVX2 inline float hsum256(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

BS_AVX2 inline __m256 load_bf16x8(const uint16_t* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline float load1(const float* w) { return *w; }
inline float load1(const uint16_t* w) { return bf16_to_f32(*w); }
BS_AVX2 inline __m256 load8(const float* w) { return _mm256_loadu_ps(w); }
BS_AVX2 inline __m256 load8(const uint16_t* w) { return load_bf16x8(w); }

template <class W>
BS_AVX2 void matmul_avx2_impl(const float* x, const W* w, float* y, int64_t M, int64_t K, int64_t N,
                              int64_t n0, int64_t n1) {
  const int64_t K8 = K / 8 * 8;
  for (int64_t n = n0; n < n1; ++n) {
    const W* wr = w + n * K;
    int64_t m = 0;
    for (; m + 4 <= M; m += 4) {
      const float* x0 = x + m * K;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t k = 0; k < K8; k += 8) {
        __m256 wv = load8(wr + k);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x0 + k), wv, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x0 + K + k), wv, a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x0 + 2 * K + k), wv, a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x0 + 3 * K + k), wv, a3);
      }
      float s[4] = {hsum256(a0), hsum256(a1), hsum256(a2), hsum256(a3)};
      for (int64_t k = K8; k < K; ++k) {
        float wk = load1(wr + k);
        for (int j = 0; j < 4; ++j) s[j] += x0[j * K + k] * wk;
      }
      for (int j = 0; j < 4; ++j) y[(m + j) * N + n] = s[j];
    }
    for (; m < M; ++m) {
      const float* xr = x + m * K;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0;
      int64_t k = 0;
      for (; k + 16 <= K; k += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xr + k), load8(wr + k), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(xr + k + 8), load8(wr + k + 8), a1);
      }
      for (; k + 8 <= K; k += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xr + k), load8(wr + k), a0);
      float s = hsum256(_mm256_add_ps(a0, a1));
      for (; k < K; ++k) s += xr[k] * load1(wr + k);
      y[m * N + n] = s;
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

}  // namespace blockspec
