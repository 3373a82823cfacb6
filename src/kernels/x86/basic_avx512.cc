// AVX-512F variants with 16 lanes and masked tails, so odd K needs no scalar
// loop.
// GCC 12 warns falsely inside its own avx512fintrin.h (_mm512_undefined_ps).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <array>
#include <utility>

#include "kernels/kernel_table.h"
#include "kernels/silu_exp.h"
#include "kernels/x86/exp_avx512.h"

#define BS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

namespace blockspec {

namespace {

BS_AVX512 inline __m512 load16(const float* w, __mmask16 m) { return _mm512_maskz_loadu_ps(m, w); }
BS_AVX512 inline __m512 load16(const uint16_t* w, __mmask16 m) {
  __m256i h = _mm256_maskz_loadu_epi16(m, w);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// Register block: NB weight rows x MB activation rows, one zmm accumulator per
// output. Per 16 inputs: NB weight loads (bf16 widened once), MB x loads and
// NB * MB FMAs, so at 4 x 4 loads are half the FMAs (the old 1 x 4 blocking
// streamed all of x past every weight row: ~40% of FMA peak at M = 64 on the
// 2-core EPYC).
//
// Every output, whatever the block, M or thread split, is computed the same
// way: one accumulator, k ascending in steps of 16 (masked tail), then
// _mm512_reduce_add_ps. So a row of y does not depend on the batch it was
// computed in, which lossless speculative decoding relies on (verifying k
// tokens at once must give the logits of decoding them one by one).
template <int NB, int MB, class W>
BS_AVX512 void block(const float* x, const W* w, float* y, int64_t K, int64_t N, int64_t n, int64_t m) {
  const int64_t K16 = K / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (K - K16)) - 1u);
  __m512 acc[NB][MB];
#pragma GCC unroll 4
  for (int i = 0; i < NB; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < MB; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 16) {
    const __mmask16 mk = k < K16 ? static_cast<__mmask16>(0xffff) : tail;
    __m512 wv[NB], xv[MB];
#pragma GCC unroll 4
    for (int i = 0; i < NB; ++i) wv[i] = load16(w + (n + i) * K + k, mk);
#pragma GCC unroll 4
    for (int j = 0; j < MB; ++j) xv[j] = _mm512_maskz_loadu_ps(mk, x + (m + j) * K + k);
#pragma GCC unroll 4
    for (int i = 0; i < NB; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < MB; ++j) acc[i][j] = _mm512_fmadd_ps(xv[j], wv[i], acc[i][j]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < NB; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < MB; ++j) y[(m + j) * N + n + i] = _mm512_reduce_add_ps(acc[i][j]);
}

template <class W, int NB, int... MB>
constexpr auto block_row(std::integer_sequence<int, MB...>) {
  return std::array{&block<NB, MB + 1, W>...};
}

template <class W>
BS_AVX512 void matmul_avx512_impl(const float* x, const W* w, float* y, int64_t M, int64_t K, int64_t N,
                                  int64_t n0, int64_t n1) {
  constexpr auto seq = std::make_integer_sequence<int, 4>();
  constexpr std::array table{block_row<W, 1>(seq), block_row<W, 2>(seq), block_row<W, 3>(seq),
                             block_row<W, 4>(seq)};  // [NB - 1][MB - 1]
  // Panels of 32 weight rows (96 KB of bf16 at K = 1536) stay in L2 while all
  // of x streams past them in blocks of 4 rows.
  constexpr int64_t kPanel = 32;
  for (int64_t p = n0; p < n1; p += kPanel) {
    const int64_t p1 = std::min(n1, p + kPanel);
    for (int64_t m = 0; m < M; m += 4) {
      const int64_t mb = std::min<int64_t>(4, M - m);
      for (int64_t n = p; n < p1; n += 4) table[std::min<int64_t>(4, p1 - n) - 1][mb - 1](x, w, y, K, N, n, m);
    }
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

BS_AVX512 uint64_t read_stream_avx512(const uint8_t* p, int64_t n) {
  __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;  // four chains, 256 bytes per iteration
  int64_t i = 0;
  for (; i + 256 <= n; i += 256) {
    a = _mm512_add_epi64(a, _mm512_load_si512(p + i));
    b = _mm512_add_epi64(b, _mm512_load_si512(p + i + 64));
    c = _mm512_add_epi64(c, _mm512_load_si512(p + i + 128));
    d = _mm512_add_epi64(d, _mm512_load_si512(p + i + 192));
  }
  for (; i + 64 <= n; i += 64) a = _mm512_add_epi64(a, _mm512_load_si512(p + i));
  return static_cast<uint64_t>(_mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a, b), _mm512_add_epi64(c, d))));
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

namespace {

// f32 -> bf16 -> f32 (round half to even, NaN quieted) as f32_to_bf16 does.
BS_AVX512 inline __m512 round_bf16_16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd);
  const __m512i nan = _mm512_or_si512(u, _mm512_set1_epi32(0x400000));
  const __mmask16 is_nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  const __m512i out = _mm512_mask_blend_epi32(is_nan, r, nan);
  return _mm512_castsi512_ps(_mm512_and_si512(out, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}

}  // namespace

// exp_sub_sum_ref on 16 lanes: lanes 0-7 and 8-15 of each chunk into two vectors of double partial sums.
BS_AVX512 double exp_sub_sum_avx512(float* x, float m, int64_t n) {
  const __m512 mv = _mm512_set1_ps(m);
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
  const int64_t n16 = n / 16 * 16;
  for (int64_t i = 0; i < n16; i += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), mv));
    _mm512_storeu_ps(x + i, e);
    lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
  }
  alignas(64) double s[16];
  _mm512_store_pd(s, lo);
  _mm512_store_pd(s + 8, hi);
  exp_sub_sum_tail(x, m, n16, n, s);
  return sum16(s);
}

BS_AVX512 void swiglu_avx512(const float* gate, const float* up, float* out, int64_t n, bool round_bf16) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mk = i + 16 <= n ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m512 g = _mm512_maskz_loadu_ps(mk, gate + i);
    const __m512 neg_g = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), _mm512_set1_epi32(INT32_MIN)));
    const __m512 e = exp16(neg_g);
    __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, e));
    if (round_bf16) s = round_bf16_16(s);
    if (up == nullptr) {  // silu alone
      _mm512_mask_storeu_ps(out + i, mk, s);
      continue;
    }
    __m512 o = _mm512_mul_ps(s, _mm512_maskz_loadu_ps(mk, up + i));
    if (round_bf16) o = round_bf16_16(o);
    _mm512_mask_storeu_ps(out + i, mk, o);
  }
}

}  // namespace blockspec
