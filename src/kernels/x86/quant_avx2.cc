// AVX2 kernels for the integer formats: activation quantization (used by the
// avx512 level too, it is M x K work against the GEMM's M x K x N) and the
// int8 fallback GEMM for CPUs without AVX-512 VNNI.
//
// The GEMM has no vpdpbusd, so it uses pmaddubsw. With u8 activations (up to
// 255) times s8 weights (up to 127) a pair sum reaches 64770 and pmaddubsw
// would saturate int16; instead it multiplies |w| (u8) by sign(w) * (q - 128)
// (s8 in [-127, 127]), whose pair sums stay <= 2 * 127 * 127 = 32258. That
// sums (q - 128) * w directly, which is exactly the ref's sum q * w - corr, so
// the integer part matches the ref bit for bit without reading corr.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/kernel_table.h"

#define BS_AVX2 __attribute__((target("avx2,fma")))

namespace blockspec {

namespace {

BS_AVX2 inline float hmax256(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

constexpr int kMaxMB = 4;  // activation rows per block; 2 half-tiles x 4 rows = 8 ymm accumulators

template <bool Q4, int MB>
BS_AVX2 void micro(const QuantActs& a, const PackedWeights& w, float* y, int64_t tile, int64_t m0) {
  const int64_t Kp = w.Kp, G = w.n_groups, T = w.panel_tiles(tile);
  // This tile's 64-byte lines within its interleaved panel, T * 64 bytes apart.
  const uint8_t* wt = w.panel_codes(tile) + (tile % kQPanel) * 64;
  const uint8_t* xq = a.q + m0 * Kp;                    // [MB, Kp]
  const __m256i ones = _mm256_set1_epi16(1), low4 = _mm256_set1_epi8(0x0F), eight = _mm256_set1_epi8(8);
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  // f32 sums in L1, touched once per group, leave the 16 ymm registers to the
  // int32 accumulators (as in quant_avx512.cc; the asm stops GCC promoting them).
  alignas(32) float facc[2][MB][8] = {};
  asm volatile("" : : "r"(&facc[0][0][0]) : "memory");
  // acc[h][m] += sum over the 4 inputs of quad (q - 128) * w for rows 8h..8h+7.
  auto quad = [&](__m256i (&acc)[2][MB], const __m256i (&wv)[2], int64_t k) BS_AVX2 {
    const __m256i aw[2] = {_mm256_sign_epi8(wv[0], wv[0]), _mm256_sign_epi8(wv[1], wv[1])};
    #pragma GCC unroll 16
    for (int m = 0; m < MB; ++m) {
      int32_t v;
      std::memcpy(&v, xq + m * Kp + k, 4);
      const __m256i b = _mm256_xor_si256(_mm256_set1_epi32(v), flip);  // q - 128 as s8
      #pragma GCC unroll 16
      for (int h = 0; h < 2; ++h) {
        const __m256i p = _mm256_maddubs_epi16(aw[h], _mm256_sign_epi8(b, wv[h]));
        acc[h][m] = _mm256_add_epi32(acc[h][m], _mm256_madd_epi16(p, ones));
      }
    }
  };
  for (int64_t g = 0; g < G; ++g) {
    const int64_t k0 = g * kQGroup, k1 = std::min(k0 + kQGroup, Kp);
    __m256i acc[2][MB];
    #pragma GCC unroll 16
    for (int h = 0; h < 2; ++h)
      #pragma GCC unroll 16
      for (int m = 0; m < MB; ++m) acc[h][m] = _mm256_setzero_si256();
    if constexpr (!Q4) {
      for (int64_t k = k0; k < k1; k += 4) {
        const __m256i wv[2] = {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wt + k * 16 * T)),
                               _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wt + k * 16 * T + 32))};
        quad(acc, wv, k);
      }
    } else {
      for (int64_t k = k0; k < k1; k += 8) {
        __m256i lo[2], hi[2];
        #pragma GCC unroll 16
        for (int h = 0; h < 2; ++h) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wt + k * 8 * T + h * 32));
          lo[h] = _mm256_sub_epi8(_mm256_and_si256(v, low4), eight);
          hi[h] = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(v, 4), low4), eight);
        }
        quad(acc, lo, k);
        quad(acc, hi, k + 4);
      }
    }
    // acc already holds sum (q - 128) * w = sum q * w - corr: no correction.
    #pragma GCC unroll 16
    for (int h = 0; h < 2; ++h) {
      const __m256 sw = _mm256_loadu_ps(w.scales + (tile * G + g) * kQTile + h * 8);
      #pragma GCC unroll 16
      for (int m = 0; m < MB; ++m) {
        const __m256 s = _mm256_mul_ps(sw, _mm256_set1_ps(a.scales[(m0 + m) * G + g]));
        _mm256_store_ps(facc[h][m], _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[h][m]), s, _mm256_load_ps(facc[h][m])));
      }
    }
  }
  const int64_t n = tile * kQTile, valid = std::min<int64_t>(kQTile, w.N - n);
  #pragma GCC unroll 16
  for (int m = 0; m < MB; ++m) {
    std::memcpy(y + (m0 + m) * w.N + n, facc[0][m], std::min<int64_t>(valid, 8) * sizeof(float));
    if (valid > 8) std::memcpy(y + (m0 + m) * w.N + n + 8, facc[1][m], (valid - 8) * sizeof(float));
  }
}

template <bool Q4>
BS_AVX2 void gemm_impl(const QuantActs& a, const PackedWeights& w, float* y, int64_t tile0, int64_t tile1) {
  for (int64_t tile = tile0; tile < tile1; ++tile)
    for (int64_t m0 = 0; m0 < a.M; m0 += kMaxMB) {
      switch (std::min<int64_t>(kMaxMB, a.M - m0)) {
        case 1: micro<Q4, 1>(a, w, y, tile, m0); break;
        case 2: micro<Q4, 2>(a, w, y, tile, m0); break;
        case 3: micro<Q4, 3>(a, w, y, tile, m0); break;
        default: micro<Q4, 4>(a, w, y, tile, m0); break;
      }
    }
}

}  // namespace

BS_AVX2 void quantize_acts_avx2(const float* x, int64_t M, int64_t K, uint8_t* q, float* scales) {
  const int64_t Kp = q_padded_k(K), G = q_groups(K);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 lim = _mm256_set1_ps(127.f);
  const __m256i off = _mm256_set1_epi32(128);
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * K;  // [K]
    uint8_t* qr = q + m * Kp;      // [Kp]
    for (int64_t g = 0; g < G; ++g) {
      const int64_t k0 = g * kQGroup, k1 = std::min(k0 + kQGroup, K);
      __m256 vmax = _mm256_setzero_ps();
      int64_t k = k0;
      for (; k + 8 <= k1; k += 8) vmax = _mm256_max_ps(vmax, _mm256_and_ps(_mm256_loadu_ps(xr + k), abs_mask));
      float amax = hmax256(vmax);
      for (; k < k1; ++k) amax = std::max(amax, std::fabs(xr[k]));
      const float inv = amax > 0.f ? 127.0f / amax : 0.f;
      scales[m * G + g] = amax / 127.0f;
      const __m256 vinv = _mm256_set1_ps(inv);
      for (k = k0; k + 8 <= k1; k += 8) {
        __m256 c = _mm256_mul_ps(_mm256_loadu_ps(xr + k), vinv);
        c = _mm256_max_ps(_mm256_min_ps(c, lim), _mm256_sub_ps(_mm256_setzero_ps(), lim));
        // cvtps2dq rounds half to even (MXCSR default), as nearbyint in the ref.
        const __m256i i = _mm256_add_epi32(_mm256_cvtps_epi32(c), off);
        const __m128i p16 = _mm_packus_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(qr + k), _mm_packus_epi16(p16, p16));
      }
      for (; k < k1; ++k) {
        float c = std::nearbyint(xr[k] * inv);
        c = std::min(127.f, std::max(-127.f, c));
        qr[k] = static_cast<uint8_t>(static_cast<int>(c) + 128);
      }
    }
    for (int64_t k = K; k < Kp; ++k) qr[k] = 128;
  }
}

BS_AVX2 void gemm_q8g128_avx2(const QuantActs& a, const PackedWeights& w, float* y, int64_t tile0, int64_t tile1) {
  gemm_impl<false>(a, w, y, tile0, tile1);
}

BS_AVX2 void gemm_q4g128_avx2(const QuantActs& a, const PackedWeights& w, float* y, int64_t tile0, int64_t tile1) {
  gemm_impl<true>(a, w, y, tile0, tile1);
}

}  // namespace blockspec
