// AVX-512 weight-only FP8 E4M3 / NVFP4 / MXFP4 GEMM: codes are decoded to f32
// in registers, scaled, and FMA'd with f32 activations. The arithmetic is
// exactly the scalar twin's (kernels/fp_formats.h): one zmm lane per k mod 16,
// the same tree reduction, so results are bitwise equal to gemm_fp_ref.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>

#include "kernels/kernel_table.h"

#define BS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

namespace blockspec {

namespace {

// 16 weights of row n starting at k0 (a multiple of 16), `rem` of them valid (1..16), as f32 elements.
BS_AVX512 inline __m512 decode_fp8(const uint8_t* p, __mmask16 mask) {
  const __m512i c = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mask, p));
  const __m512i mag = _mm512_and_si512(c, _mm512_set1_epi32(0x7F));
  // Normal: exponent rebias 7 -> 127; subnormal (e = 0): m * 2^-9.
  const __m512 norm = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23)));
  const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(mag), _mm512_set1_ps(1.f / 512.f));
  __m512 v = _mm512_mask_mov_ps(norm, _mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(8)), sub);
  v = _mm512_mask_mov_ps(v, _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7F)),
                         _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()));
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x80)), 24);
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign));
}

BS_AVX512 inline __m512 decode_e2m1(const uint8_t* p, int64_t rem, __m512 table) {
  const int nb = static_cast<int>((rem + 1) / 2);
  const __m128i b = _mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << nb) - 1), p);
  const __m512i c = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, b));  // lane j = byte j/2
  const __m512i sh = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
  const __m512i idx = _mm512_and_si512(_mm512_srlv_epi32(c, sh), _mm512_set1_epi32(15));
  return _mm512_permutexvar_ps(idx, table);
}

BS_AVX512 inline float reduce16(__m512 a) {
  __m256 h = _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));         // j + 8
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));             // j + 4
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));                                                      // j + 2
  q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));                                                  // j + 1
  return _mm_cvtss_f32(q);
}

constexpr int kMB = 4;  // activation rows per pass (one decode feeds kMB FMAs)

template <int MB>
BS_AVX512 void rows_block(const FpWeights& w, const float* x, float* y, int64_t m0, int64_t n0, int64_t n1) {
  const int64_t K = w.K;
  const __m512 table = _mm512_setr_ps(0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, -0.f, -0.5f, -1.f, -1.5f, -2.f, -3.f,
                                      -4.f, -6.f);
  const bool fp8 = w.format == WeightFormat::kFP8_E4M3;
  for (int64_t n = n0; n < n1; ++n) {
    __m512 acc[MB];
    for (int i = 0; i < MB; ++i) acc[i] = _mm512_setzero_ps();
    const uint8_t* row = w.codes + n * w.row_bytes;
    float s = 0.f;
    int64_t g_cur = -1;
    for (int64_t k0 = 0; k0 < K; k0 += 16) {
      const int64_t rem = std::min<int64_t>(16, K - k0);
      const __mmask16 mask = static_cast<__mmask16>(rem == 16 ? 0xFFFF : (1u << rem) - 1);
      const int64_t g = k0 / w.group;
      if (g != g_cur) {
        s = w.group_scale(n, g);
        g_cur = g;
      }
      const __m512 e = fp8 ? decode_fp8(row + k0, mask) : decode_e2m1(row + k0 / 2, rem, table);
      const __m512 wv = _mm512_mul_ps(e, _mm512_set1_ps(s));
      for (int i = 0; i < MB; ++i) {
        const __m512 xv = _mm512_maskz_loadu_ps(mask, x + (m0 + i) * K + k0);
        acc[i] = _mm512_mask3_fmadd_ps(xv, wv, acc[i], mask);
      }
    }
    for (int i = 0; i < MB; ++i) y[(m0 + i) * w.N + n] = reduce16(acc[i]);
  }
}

}  // namespace

BS_AVX512 void gemm_fp_avx512(const FpWeights& w, const float* x, float* y, int64_t M, int64_t n0, int64_t n1) {
  // Column blocks of 64 rows keep a block's codes in L1/L2 while all activation rows pass over it.
  for (int64_t nb = n0; nb < n1; nb += 64) {
    const int64_t ne = std::min(n1, nb + 64);
    int64_t m = 0;
    for (; m + kMB <= M; m += kMB) rows_block<kMB>(w, x, y, m, nb, ne);
    for (; m < M; ++m) rows_block<1>(w, x, y, m, nb, ne);
  }
}

}  // namespace blockspec
