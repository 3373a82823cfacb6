// AVX2 weight-only kernels for Q8_G128 (W8A16) and Q4_G128 (W4A16): codes
// decoded to f32 in registers, one ymm lane per weight row (a tile's 64-byte
// line = rows 0-7 in its low half, rows 8-15 in its high half), FMA'd with
// f32 activations in exactly the scalar twin's order (kernels/quant_layout.h),
// so results are bitwise equal to it.
//
// Decode: Q8: byte j of every 32-bit lane by a left then an arithmetic right
// shift. Q4: nibbles hold code + 8; XOR 0x8 turns that into the two's
// complement nibble, which the same shift pair sign-extends. Blocks of 4
// activation rows walk one tile at a time (2 halves x 4 rows = 8 ymm
// accumulators); the remaining rows (decode: M = 1) walk two tiles at once
// (2 tiles x 2 halves = 4 independent FMA chains).
#include <immintrin.h>

#include <algorithm>

#include "kernels/kernel_table.h"

#define BS_AVX2 __attribute__((target("avx2,fma")))

namespace blockspec {

namespace {

constexpr int kMB = 4;

template <bool Q4, int S>
BS_AVX2 inline __m256 decode(__m256i v) {
  constexpr int top = Q4 ? 28 : 24;                              // sign bit of the field moved to bit 31
  constexpr int sh = Q4 ? 8 * (S % 4) + 4 * (S / 4) : 8 * S;    // field position in the lane
  const __m256i hi = top - sh == 0 ? v : _mm256_slli_epi32(v, top - sh);
  return _mm256_cvtepi32_ps(_mm256_srai_epi32(hi, top));
}

template <bool Q4, int S, int T, int MB>
BS_AVX2 inline void step(const __m256i (&v)[T][2], const float* xk, int64_t K, __m256 (&acc)[T][2][MB]) {
  #pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
    const __m256 w0 = decode<Q4, S>(v[t][0]), w1 = decode<Q4, S>(v[t][1]);
    #pragma GCC unroll 4
    for (int m = 0; m < MB; ++m) {
      const __m256 xb = _mm256_set1_ps(xk[m * K + S]);
      acc[t][0][m] = _mm256_fmadd_ps(xb, w0, acc[t][0][m]);
      acc[t][1][m] = _mm256_fmadd_ps(xb, w1, acc[t][1][m]);
    }
  }
}

// T consecutive tiles of one panel starting at `tile`, activation rows [m0, m0 + MB); T * 2 * MB <= 8
// accumulators (decode: T = 2, MB = 1; prefill: T = 1, MB = 4).
template <bool Q4, int T, int MB>
BS_AVX2 void micro(const PackedWeights& w, const float* x, float* y, int64_t tile, int64_t m0) {
  constexpr int kStep = Q4 ? 8 : 4;  // inputs per 64-byte line
  const int64_t K = w.K, G = w.n_groups, tp = w.panel_tiles(tile);
  const uint8_t* wt = w.panel_codes(tile) + (tile % kQPanel) * 64;  // this tile's lines, tp * 64 bytes apart
  const float* xm = x + m0 * K;                                      // [MB, K]
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(Q4 ? 0x88 : 0));
  __m256 facc[T][2][MB];
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < 2; ++h)
      for (int m = 0; m < MB; ++m) facc[t][h][m] = _mm256_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    const int64_t k0 = g * kQGroup, k1 = std::min(k0 + kQGroup, K);
    __m256 acc[T][2][MB];
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < 2; ++h)
        for (int m = 0; m < MB; ++m) acc[t][h][m] = _mm256_setzero_ps();
    for (int64_t k = k0; k < k1; k += kStep) {
      __m256i v[T][2];
      for (int t = 0; t < T; ++t) {
        const uint8_t* line = wt + (k / kStep) * tp * 64 + t * 64;
        v[t][0] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(line));
        v[t][1] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(line + 32));
        if constexpr (Q4) v[t][0] = _mm256_xor_si256(v[t][0], flip), v[t][1] = _mm256_xor_si256(v[t][1], flip);
      }
      const float* xk = xm + k;
      const int64_t n = std::min<int64_t>(kStep, k1 - k);  // < kStep only on the last line of K
      step<Q4, 0, T, MB>(v, xk, K, acc);
      if (n > 1) step<Q4, 1, T, MB>(v, xk, K, acc);
      if (n > 2) step<Q4, 2, T, MB>(v, xk, K, acc);
      if (n > 3) step<Q4, 3, T, MB>(v, xk, K, acc);
      if constexpr (Q4) {
        if (n > 4) step<Q4, 4, T, MB>(v, xk, K, acc);
        if (n > 5) step<Q4, 5, T, MB>(v, xk, K, acc);
        if (n > 6) step<Q4, 6, T, MB>(v, xk, K, acc);
        if (n > 7) step<Q4, 7, T, MB>(v, xk, K, acc);
      }
    }
    for (int t = 0; t < T; ++t) {
      const float* sc = w.scales + ((tile + t) * G + g) * kQTile;
      for (int h = 0; h < 2; ++h) {
        const __m256 s = _mm256_loadu_ps(sc + 8 * h);
        for (int m = 0; m < MB; ++m) facc[t][h][m] = _mm256_fmadd_ps(acc[t][h][m], s, facc[t][h][m]);
      }
    }
  }
  alignas(32) float out[kQTile];
  for (int t = 0; t < T; ++t) {
    const int64_t n0 = (tile + t) * kQTile, rows = std::min<int64_t>(kQTile, w.N - n0);
    for (int m = 0; m < MB; ++m) {
      _mm256_store_ps(out, facc[t][0][m]);
      _mm256_store_ps(out + 8, facc[t][1][m]);
      std::copy(out, out + rows, y + (m0 + m) * w.N + n0);
    }
  }
}

template <bool Q4, int T>
BS_AVX2 void rest_rows(const PackedWeights& w, const float* x, float* y, int64_t tile, int64_t m0, int64_t M) {
  for (int64_t m = m0; m < M; ++m) micro<Q4, T, 1>(w, x, y, tile, m);
}

template <bool Q4>
BS_AVX2 void gemm(const PackedWeights& w, const float* x, float* y, int64_t M, int64_t tile0, int64_t tile1) {
  for (int64_t p = tile0; p < tile1; p += kQPanel) {  // whole panels (tile0 is a multiple of kQPanel)
    const int64_t tp = w.panel_tiles(p);
    int64_t m = 0;
    for (; m + kMB <= M; m += kMB)
      for (int64_t t = p; t < p + tp; ++t) micro<Q4, 1, kMB>(w, x, y, t, m);
    if (m == M) continue;
    // The remaining rows one at a time, two tiles at once (4 FMA chains; 4 tiles would spill).
    int64_t t = p;
    for (; t + 2 <= p + tp; t += 2) rest_rows<Q4, 2>(w, x, y, t, m, M);
    if (t < p + tp) rest_rows<Q4, 1>(w, x, y, t, m, M);
  }
}

}  // namespace

BS_AVX2 void gemm_q8g128_wo_avx2(const PackedWeights& w, const float* x, float* y, int64_t M, int64_t tile0,
                                 int64_t tile1) {
  gemm<false>(w, x, y, M, tile0, tile1);
}

BS_AVX2 void gemm_q4g128_wo_avx2(const PackedWeights& w, const float* x, float* y, int64_t M, int64_t tile0,
                                 int64_t tile1) {
  gemm<true>(w, x, y, M, tile0, tile1);
}

}  // namespace blockspec
