// AVX-512 VNNI kernels for Q8_G128 (W8A8) and Q4_G128 (W4A8) weights.
//
// Micro-kernel: T weight tiles (16 rows each, one zmm of int32 lanes) times MB
// activation rows. Per input quad k..k+3 it loads T 64-byte weight lines, and
// for each activation row broadcasts its 4 u8 codes and issues T vpdpbusd.
// At each group end (128 inputs) the int32 sums are corrected for the +128
// activation offset, converted and folded into f32 accumulators with
// wscale * xscale (the exact sequence of kernels/quant_layout.h). Loop order:
// panel (4 tiles, interleaved, so T = 4 reads one contiguous stream) outer,
// MB-row block inner, so a panel (64 x K bytes, <= 573 KB for K = 8960) is
// read from memory once and reused from L2 by later blocks.
//
// GCC 12 warns falsely inside its own avx512fintrin.h (_mm512_undefined_ps).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "base/error.h"
#include "kernels/kernel_table.h"
#include "kernels/x86/panel_gemm.h"

#define BS_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma")))

namespace blockspec {

namespace {

constexpr int kMaxT = kQPanel;  // tiles per panel (64 rows)
constexpr int kMaxMB = 4;  // activation rows per block

BS_VNNI inline __m512i bcast4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// vpdpbusd through inline asm: with the intrinsic, GCC 12 copies every
// accumulator to another register and back around each instruction.
BS_VNNI inline __m512i dpbusd(__m512i acc, __m512i a_u8, __m512i w_s8) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a_u8), "v"(w_s8));
  return acc;
}

template <bool Q4, int T, int MB>
BS_VNNI void micro(const QuantActs& a, const PackedWeights& w, float* y, int64_t tile, int64_t m0) {
  const int64_t Kp = w.Kp, G = w.n_groups;
  const uint8_t* wt = w.panel_codes(tile);  // [Kp / 4 or Kp / 8, T, 64] interleaved panel
  const uint8_t* xq = a.q + m0 * Kp;        // [MB, Kp]
  const __m512i low4 = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
  // f32 sums live in memory (L1), touched once per group: kept in registers
  // they took 16 of the 32 zmm and pushed the int32 accumulators of the hot
  // loop onto the stack. The empty asm makes the buffer escape, so GCC cannot
  // promote it back into registers across the group loop.
  alignas(64) float facc[T][MB][kQTile] = {};
  asm volatile("" : : "r"(&facc[0][0][0]) : "memory");
  for (int64_t g = 0; g < G; ++g) {
    const int64_t k0 = g * kQGroup, k1 = std::min(k0 + kQGroup, Kp);
    // Q4 reads its group's codes faster with them prefetched (kernels_bench, 2 threads, weights from DRAM,
    // Xeon: up M = 1 337 -> 310 us, M = 8 582 -> 499); Q8 slower (up M = 1 512 -> 551), so it does not.
    if constexpr (Q4) prefetch_ahead(wt + k0 * 8 * T, (k1 - k0) * 8 * T);
    __m512i acc[T][MB];
    #pragma GCC unroll 16
    for (int t = 0; t < T; ++t)
      #pragma GCC unroll 16
      for (int m = 0; m < MB; ++m) acc[t][m] = _mm512_setzero_si512();
    if constexpr (!Q4) {
      for (int64_t k = k0; k < k1; k += 4) {
        __m512i wv[T];
        #pragma GCC unroll 16
        for (int t = 0; t < T; ++t) wv[t] = _mm512_loadu_si512(wt + k * 16 * T + t * 64);
        #pragma GCC unroll 16
        for (int m = 0; m < MB; ++m) {
          const __m512i b = bcast4(xq + m * Kp + k);
          #pragma GCC unroll 16
          for (int t = 0; t < T; ++t) acc[t][m] = dpbusd(acc[t][m], b, wv[t]);
        }
      }
    } else if constexpr (MB == 1) {
      // One row (decode): the codes u stay unsigned (no - 8 per byte), the high nibbles are masked in place as
      // 16 u (no shift), and the activations become signed x = xq - 128 (one xor per broadcast, shared by the
      // T tiles): acc = sum u x (low quads), acc16 = sum 16 u x (high quads), ax = sum x (a dot product with
      // ones). The group's sum sum (xq)(u - 8) - corr = sum x (u - 8) is then acc + acc16 / 16 - 8 ax, the same
      // integer as the general path below (corr = 128 sum (u - 8), quant_layout.h), so the output is bitwise
      // the same; 2 instead of 5 byte operations per tile and 8 inputs.
      const __m512i high4 = _mm512_set1_epi8(static_cast<char>(0xF0)), flip = _mm512_set1_epi8(static_cast<char>(0x80)),
                    ones = _mm512_set1_epi8(1);
      __m512i acc16[T], ax = _mm512_setzero_si512();
      #pragma GCC unroll 16
      for (int t = 0; t < T; ++t) acc16[t] = _mm512_setzero_si512();
      for (int64_t k = k0; k < k1; k += 8) {
        const __m512i b0 = _mm512_xor_si512(bcast4(xq + k), flip), b1 = _mm512_xor_si512(bcast4(xq + k + 4), flip);
        ax = dpbusd(ax, ones, b0);
        ax = dpbusd(ax, ones, b1);
        #pragma GCC unroll 16
        for (int t = 0; t < T; ++t) {
          const __m512i v = _mm512_loadu_si512(wt + k * 8 * T + t * 64);
          acc[t][0] = dpbusd(acc[t][0], _mm512_and_si512(v, low4), b0);
          acc16[t] = dpbusd(acc16[t], _mm512_and_si512(v, high4), b1);
        }
      }
      // ax is the same in all 16 lanes; back to the general path's form acc - corr with corr added back.
      const __m512i ax8 = _mm512_slli_epi32(ax, 3);
      #pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        const int64_t gi = ((tile + t) * G + g) * kQTile;
        acc[t][0] = _mm512_add_epi32(_mm512_sub_epi32(_mm512_add_epi32(acc[t][0], _mm512_srai_epi32(acc16[t], 4)), ax8),
                                     _mm512_loadu_si512(w.corr + gi));
      }
    } else {
      for (int64_t k = k0; k < k1; k += 8) {
        __m512i lo[T], hi[T];
        #pragma GCC unroll 16
        for (int t = 0; t < T; ++t) {
          const __m512i v = _mm512_loadu_si512(wt + k * 8 * T + t * 64);
          lo[t] = _mm512_sub_epi8(_mm512_and_si512(v, low4), eight);
          hi[t] = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), low4), eight);
        }
        #pragma GCC unroll 16
        for (int m = 0; m < MB; ++m) {
          const __m512i b0 = bcast4(xq + m * Kp + k), b1 = bcast4(xq + m * Kp + k + 4);
          #pragma GCC unroll 16
          for (int t = 0; t < T; ++t) {
            acc[t][m] = dpbusd(acc[t][m], b0, lo[t]);
            acc[t][m] = dpbusd(acc[t][m], b1, hi[t]);
          }
        }
      }
    }
    #pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const int64_t gi = ((tile + t) * G + g) * kQTile;
      const __m512 sw = _mm512_loadu_ps(w.scales + gi);
      const __m512i corr = _mm512_loadu_si512(w.corr + gi);
      #pragma GCC unroll 16
      for (int m = 0; m < MB; ++m) {
        const __m512 s = _mm512_mul_ps(sw, _mm512_set1_ps(a.scales[(m0 + m) * G + g]));
        const __m512 d = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[t][m], corr));
        _mm512_store_ps(facc[t][m], _mm512_fmadd_ps(d, s, _mm512_load_ps(facc[t][m])));
      }
    }
  }
  #pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
    const int64_t n = (tile + t) * kQTile;
    const int64_t valid = std::min<int64_t>(kQTile, w.N - n);
    const __mmask16 mk = static_cast<__mmask16>((1u << valid) - 1u);
    #pragma GCC unroll 16
    for (int m = 0; m < MB; ++m) _mm512_mask_storeu_ps(y + (m0 + m) * w.N + n, mk, _mm512_load_ps(facc[t][m]));
  }
}

using MicroFn = void (*)(const QuantActs&, const PackedWeights&, float*, int64_t, int64_t);

template <bool Q4>
struct Micro {
  template <int T, int MB>
  static constexpr MicroFn fn = &micro<Q4, T, MB>;
};

template <bool Q4>
BS_VNNI void gemm_impl(const QuantActs& a, const PackedWeights& w, float* y, int64_t tile0, int64_t tile1) {
  constexpr auto table = panel_table<MicroFn, Micro<Q4>, kMaxMB>(std::make_integer_sequence<int, kMaxT>());
  run_panels(table, a, w, y, tile0, tile1);
}

}  // namespace

BS_VNNI void gemm_q8g128_avx512vnni(const QuantActs& a, const PackedWeights& w, float* y, int64_t tile0,
                                    int64_t tile1) {
  gemm_impl<false>(a, w, y, tile0, tile1);
}

BS_VNNI void gemm_q4g128_avx512vnni(const QuantActs& a, const PackedWeights& w, float* y, int64_t tile0,
                                    int64_t tile1) {
  gemm_impl<true>(a, w, y, tile0, tile1);
}

}  // namespace blockspec
