// AVX-512 BF16 GEMM for bf16 weights and bf16 activations (the
// --activations bf16 mode): VDPBF16PS multiplies 32 bf16 pairs per
// instruction into 16 f32 lanes, twice the MACs of an f32 FMA and no
// widening of the weights.
//
// Exact arithmetic (reproduced by matmul_bf16_dp_ref): per output, 16 lane
// accumulators; K is read in chunks of 32 (the tail zero-padded), and lane l
// of chunk c takes inputs k = 32c + 2l + 1, then k = 32c + 2l, each as one
// f32 FMA rounded to nearest even with denormal inputs read as zero and
// denormal results flushed to zero (Intel SDM, VDPBF16PS). The 16 lanes are
// then summed by _mm512_reduce_add_ps's tree. So an output does not depend on
// M, the register block or the thread split (batch invariance).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "kernels/kernel_table.h"

#define BS_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace blockspec {

namespace {

BS_BF16 inline __m512bh load32(const uint16_t* p, __mmask32 m) {
  return reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(m, p));
}

// NB weight rows x MB activation rows, one accumulator per output; per 32
// inputs NB + MB loads and NB * MB VDPBF16PS.
template <int NB, int MB>
BS_BF16 void block(const uint16_t* x, const uint16_t* w, float* y, int64_t K, int64_t N, int64_t n, int64_t m) {
  const int64_t K32 = K / 32 * 32;
  const __mmask32 tail = static_cast<__mmask32>((uint64_t{1} << (K - K32)) - 1u);
  __m512 acc[NB][MB];
#pragma GCC unroll 4
  for (int i = 0; i < NB; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < MB; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 32) {
    const __mmask32 mk = k < K32 ? static_cast<__mmask32>(0xffffffffu) : tail;
    __m512bh wv[NB], xv[MB];
#pragma GCC unroll 4
    for (int i = 0; i < NB; ++i) wv[i] = load32(w + (n + i) * K + k, mk);
#pragma GCC unroll 4
    for (int j = 0; j < MB; ++j) xv[j] = load32(x + (m + j) * K + k, mk);
#pragma GCC unroll 4
    for (int i = 0; i < NB; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < MB; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv[j], wv[i]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < NB; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < MB; ++j) y[(m + j) * N + n + i] = _mm512_reduce_add_ps(acc[i][j]);
}

template <int NB, int... MB>
constexpr auto block_row(std::integer_sequence<int, MB...>) {
  return std::array{&block<NB, MB + 1>...};
}

}  // namespace

BS_BF16 void matmul_bf16_dp_avx512bf16(const uint16_t* x, const uint16_t* w, float* y, int64_t M, int64_t K,
                                       int64_t N, int64_t n0, int64_t n1) {
  constexpr auto seq = std::make_integer_sequence<int, 4>();
  constexpr std::array table{block_row<1>(seq), block_row<2>(seq), block_row<3>(seq), block_row<4>(seq)};
  // Panels of 32 weight rows stay in L2 while x streams past in blocks of 4 rows.
  constexpr int64_t kPanel = 32;
  for (int64_t p = n0; p < n1; p += kPanel) {
    const int64_t p1 = std::min(n1, p + kPanel);
    for (int64_t m = 0; m < M; m += 4) {
      const int64_t mb = std::min<int64_t>(4, M - m);
      for (int64_t n = p; n < p1; n += 4) table[std::min<int64_t>(4, p1 - n) - 1][mb - 1](x, w, y, K, N, n, m);
    }
  }
}

}  // namespace blockspec
