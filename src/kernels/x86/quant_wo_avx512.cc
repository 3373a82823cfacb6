// AVX-512 weight-only kernels for Q8_G128 (W8A16) and Q4_G128 (W4A16): the
// packed int codes are decoded to f32 in registers and FMA'd with f32
// activations, one zmm lane per weight row (the packed layout already puts 16
// rows of one input in one 64-byte line), so the arithmetic is exactly the
// scalar twin's (kernels/quant_layout.h) and results are bitwise equal.
//
// Decode: Q8: byte j of every 32-bit lane, sign-extended by a left then an
// arithmetic right shift, converted to f32. Q4: the nibble of input k is
// shifted to the bottom of its lane and looked up in a 16-entry f32 table
// (vpermps reads only the low 4 index bits), which also removes the +8 offset.
// Loop order: panel (T <= 4 tiles, one contiguous stream) outer, MB activation
// rows inner, so the panel's bytes are read from memory once per MB rows.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>

#include "kernels/kernel_table.h"

#define BS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

namespace blockspec {

namespace {

constexpr int kMB = 4;  // activation rows per block

// Codes of input k = step * q + s for the 16 rows of one line v.
template <bool Q4, int S>
BS_AVX512 inline __m512 decode(__m512i v, __m512 table) {
  if constexpr (Q4) {
    constexpr int sh = 8 * (S % 4) + 4 * (S / 4);
    return _mm512_permutexvar_ps(sh == 0 ? v : _mm512_srli_epi32(v, sh), table);
  } else {
    const __m512i c = S == 3 ? _mm512_srai_epi32(v, 24) : _mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * S), 24);
    return _mm512_cvtepi32_ps(c);
  }
}

template <bool Q4, int S, int T, int MB>
BS_AVX512 inline void step(const __m512i (&v)[T], __m512 table, const float* xk, int64_t K, __m512 (&acc)[T][MB]) {
  __m512 wv[T];
  #pragma GCC unroll 4
  for (int t = 0; t < T; ++t) wv[t] = decode<Q4, S>(v[t], table);
  #pragma GCC unroll 4
  for (int m = 0; m < MB; ++m) {
    const __m512 xb = _mm512_set1_ps(xk[m * K + S]);
    #pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[t][m] = _mm512_fmadd_ps(xb, wv[t], acc[t][m]);
  }
}

// T tiles of the panel starting at `tile`, activation rows [m0, m0 + MB).
template <bool Q4, int T, int MB>
BS_AVX512 void micro(const PackedWeights& w, const float* x, float* y, int64_t tile, int64_t m0) {
  constexpr int kStep = Q4 ? 8 : 4;  // inputs per 64-byte line
  const int64_t K = w.K, G = w.n_groups;
  const uint8_t* wt = w.panel_codes(tile);  // [Kp / kStep, T, 64]
  const float* xm = x + m0 * K;             // [MB, K]
  const __m512 table = _mm512_setr_ps(-8.f, -7.f, -6.f, -5.f, -4.f, -3.f, -2.f, -1.f, 0.f, 1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f);
  // Group-scaled sums live in L1, touched once per group (in registers they
  // would take 16 zmm next to the 16 group accumulators); the empty asm keeps
  // GCC from promoting them back.
  alignas(64) float facc[T][MB][kQTile] = {};
  asm volatile("" : : "r"(&facc[0][0][0]) : "memory");
  for (int64_t g = 0; g < G; ++g) {
    const int64_t k0 = g * kQGroup, k1 = std::min(k0 + kQGroup, K);
    __m512 acc[T][MB];
    #pragma GCC unroll 4
    for (int t = 0; t < T; ++t)
      #pragma GCC unroll 4
      for (int m = 0; m < MB; ++m) acc[t][m] = _mm512_setzero_ps();
    for (int64_t k = k0; k < k1; k += kStep) {
      __m512i v[T];
      #pragma GCC unroll 4
      for (int t = 0; t < T; ++t) v[t] = _mm512_loadu_si512(wt + (k / kStep) * T * 64 + t * 64);
      const float* xk = xm + k;
      if (k + kStep <= k1) {
        step<Q4, 0, T, MB>(v, table, xk, K, acc);
        step<Q4, 1, T, MB>(v, table, xk, K, acc);
        step<Q4, 2, T, MB>(v, table, xk, K, acc);
        step<Q4, 3, T, MB>(v, table, xk, K, acc);
        if constexpr (Q4) {
          step<Q4, 4, T, MB>(v, table, xk, K, acc);
          step<Q4, 5, T, MB>(v, table, xk, K, acc);
          step<Q4, 6, T, MB>(v, table, xk, K, acc);
          step<Q4, 7, T, MB>(v, table, xk, K, acc);
        }
      } else {  // the last, partial line of K: only inputs < K (x is not padded)
        const int64_t n = k1 - k;
        step<Q4, 0, T, MB>(v, table, xk, K, acc);
        if (n > 1) step<Q4, 1, T, MB>(v, table, xk, K, acc);
        if (n > 2) step<Q4, 2, T, MB>(v, table, xk, K, acc);
        if constexpr (Q4) {
          if (n > 3) step<Q4, 3, T, MB>(v, table, xk, K, acc);
          if (n > 4) step<Q4, 4, T, MB>(v, table, xk, K, acc);
          if (n > 5) step<Q4, 5, T, MB>(v, table, xk, K, acc);
          if (n > 6) step<Q4, 6, T, MB>(v, table, xk, K, acc);
        }
      }
    }
    #pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m512 sc = _mm512_loadu_ps(w.scales + ((tile + t) * G + g) * kQTile);
      #pragma GCC unroll 4
      for (int m = 0; m < MB; ++m)
        _mm512_store_ps(facc[t][m], _mm512_fmadd_ps(acc[t][m], sc, _mm512_load_ps(facc[t][m])));
    }
  }
  for (int t = 0; t < T; ++t) {
    const int64_t n0 = (tile + t) * kQTile, rows = std::min<int64_t>(kQTile, w.N - n0);
    const __mmask16 mask = static_cast<__mmask16>(rows >= 16 ? 0xFFFF : (1u << rows) - 1);
    for (int m = 0; m < MB; ++m) _mm512_mask_storeu_ps(y + (m0 + m) * w.N + n0, mask, _mm512_load_ps(facc[t][m]));
  }
}

template <bool Q4, int T>
BS_AVX512 void panel(const PackedWeights& w, const float* x, float* y, int64_t M, int64_t tile) {
  int64_t m = 0;
  for (; m + kMB <= M; m += kMB) micro<Q4, T, kMB>(w, x, y, tile, m);
  for (; m < M; ++m) micro<Q4, T, 1>(w, x, y, tile, m);
}

template <bool Q4>
BS_AVX512 void gemm(const PackedWeights& w, const float* x, float* y, int64_t M, int64_t tile0, int64_t tile1) {
  for (int64_t t = tile0; t < tile1; t += kQPanel) {
    switch (w.panel_tiles(t)) {
      case 4: panel<Q4, 4>(w, x, y, M, t); break;
      case 3: panel<Q4, 3>(w, x, y, M, t); break;
      case 2: panel<Q4, 2>(w, x, y, M, t); break;
      default: panel<Q4, 1>(w, x, y, M, t); break;
    }
  }
}

}  // namespace

BS_AVX512 void gemm_q8g128_wo_avx512(const PackedWeights& w, const float* x, float* y, int64_t M, int64_t tile0,
                                     int64_t tile1) {
  gemm<false>(w, x, y, M, tile0, tile1);
}

BS_AVX512 void gemm_q4g128_wo_avx512(const PackedWeights& w, const float* x, float* y, int64_t M, int64_t tile0,
                                     int64_t tile1) {
  gemm<true>(w, x, y, M, tile0, tile1);
}

}  // namespace blockspec
