// AVX-512F variants: same blocking as basic_avx2.cc with 16 lanes and masked
// tails, so odd K needs no scalar loop.
// GCC 12 warns falsely inside its own avx512fintrin.h (_mm512_undefined_ps).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "kernels/kernel_table.h"

#define BS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

namespace blockspec {

namespace {

BS_AVX512 inline __m512 load16(const float* w, __mmask16 m) { return _mm512_maskz_loadu_ps(m, w); }
BS_AVX512 inline __m512 load16(const uint16_t* w, __mmask16 m) {
  __m256i h = _mm256_maskz_loadu_epi16(m, w);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// One output: x[K] . w[K] with two accumulators.
template <class W>
BS_AVX512 float row_dot(const float* xr, const W* wr, int64_t K) {
  const __mmask16 full = 0xffff;
  const int64_t K16 = K / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (K - K16)) - 1u);
  __m512 a0 = _mm512_setzero_ps(), a1 = a0;
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(xr + k), load16(wr + k, full), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(xr + k + 16), load16(wr + k + 16, full), a1);
  }
  for (; k < K; k += 16) {
    __mmask16 mk = k < K16 ? full : tail;
    a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, xr + k), load16(wr + k, mk), a0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

// Few activation rows (decode, M < 4): 4 weight rows per pass share each x
// load. Row by row, x (35 KB f32 at K = 8960) overflows the 32 KB L1 and is
// re-read from L2 for every weight row (measured on the 2-core EPYC).
template <class W>
BS_AVX512 void gemv_rows4(const float* xr, const W* w, float* yr, int64_t K, int64_t n) {
  const __mmask16 full = 0xffff;
  const int64_t K16 = K / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (K - K16)) - 1u);
  const W* w0 = w + n * K;
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t k = 0; k < K; k += 16) {
    const __mmask16 mk = k < K16 ? full : tail;
    const __m512 xv = _mm512_maskz_loadu_ps(mk, xr + k);
    a0 = _mm512_fmadd_ps(xv, load16(w0 + k, mk), a0);
    a1 = _mm512_fmadd_ps(xv, load16(w0 + K + k, mk), a1);
    a2 = _mm512_fmadd_ps(xv, load16(w0 + 2 * K + k, mk), a2);
    a3 = _mm512_fmadd_ps(xv, load16(w0 + 3 * K + k, mk), a3);
  }
  yr[n] = _mm512_reduce_add_ps(a0);
  yr[n + 1] = _mm512_reduce_add_ps(a1);
  yr[n + 2] = _mm512_reduce_add_ps(a2);
  yr[n + 3] = _mm512_reduce_add_ps(a3);
}

template <class W>
BS_AVX512 void matmul_avx512_impl(const float* x, const W* w, float* y, int64_t M, int64_t K, int64_t N,
                                  int64_t n0, int64_t n1) {
  const __mmask16 full = 0xffff;
  const int64_t K16 = K / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (K - K16)) - 1u);
  if (M < 4) {
    for (int64_t m = 0; m < M; ++m) {
      int64_t n = n0;
      for (; n + 4 <= n1; n += 4) gemv_rows4(x + m * K, w, y + m * N, K, n);
      for (; n < n1; ++n) y[m * N + n] = row_dot(x + m * K, w + n * K, K);
    }
    return;
  }
  for (int64_t n = n0; n < n1; ++n) {
    const W* wr = w + n * K;
    int64_t m = 0;
    for (; m + 4 <= M; m += 4) {
      const float* x0 = x + m * K;
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t k = 0; k < K; k += 16) {
        __mmask16 mk = k < K16 ? full : tail;
        __m512 wv = load16(wr + k, mk);
        a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, x0 + k), wv, a0);
        a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, x0 + K + k), wv, a1);
        a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, x0 + 2 * K + k), wv, a2);
        a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, x0 + 3 * K + k), wv, a3);
      }
      y[m * N + n] = _mm512_reduce_add_ps(a0);
      y[(m + 1) * N + n] = _mm512_reduce_add_ps(a1);
      y[(m + 2) * N + n] = _mm512_reduce_add_ps(a2);
      y[(m + 3) * N + n] = _mm512_reduce_add_ps(a3);
    }
    for (; m < M; ++m) y[m * N + n] = row_dot(x + m * K, wr, K);
  }
}

}  // namespace

BS_AVX512 void matmul_f32_avx512(const float* x, const float* w, float* y, int64_t M, int64_t K, int64_t N,
                                 int64_t n0, int64_t n1) {
  matmul_avx512_impl(x, w, y, M, K, N, n0, n1);
}

BS_AVX512 void matmul_bf16_avx512(const float* x, const uint16_t* w, float* y, int64_t M, int64_t K,
                                  int64_t N, int64_t n0, int64_t n1) {
  matmul_avx512_impl(x, w, y, M, K, N, n0, n1);
}

BS_AVX512 float dot_avx512(const float* a, const float* b, int64_t n) {
  const int64_t n16 = n / 16 * 16;
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n16; i += 16)
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
  if (n16 < n) {
    __mmask16 mk = static_cast<__mmask16>((1u << (n - n16)) - 1u);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, a + n16), _mm512_maskz_loadu_ps(mk, b + n16), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

}  // namespace blockspec
