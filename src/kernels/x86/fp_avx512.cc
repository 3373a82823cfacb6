// AVX-512 weight-only FP8 E4M3 / NVFP4 / MXFP4 GEMM: codes are decoded to f32
// in registers, scaled, and FMA'd with f32 activations. The arithmetic is
// exactly the scalar twin's (kernels/fp_formats.h): one zmm lane per k mod 16,
// the same tree reduction, so results are bitwise equal to gemm_fp_ref.
//
// Decode costs more than the FMAs, so it is kept off the critical path:
// - a row's group scales are decoded once per row, 16 at a time (NVFP4's
//   E4M3 scale / global, MXFP4's E8M0), not once per 16 weights;
// - FP8 codes become bf16 bit patterns through a 128-entry table held in four
//   zmm (two vpermt2w per 32 codes; every E4M3 value, subnormals and NaN
//   included, is exact in bf16), then widen to f32 with a shift;
// - M > kMB: each block of 4 weight rows is decoded once into an f32 scratch
//   (L2) and all activation rows run 4 x 4 register-blocked FMAs over it.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "kernels/kernel_table.h"

#define BS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))

namespace blockspec {

namespace {

// bf16 bits of the E4M3 magnitude c (0..127), exact.
constexpr uint16_t e4m3_mag_bf16(int c) {
  const int e = c >> 3, m = c & 7;
  if (e == 15 && m == 7) return 0x7FC0;  // NaN
  if (e == 0) {
    if (m == 0) return 0;
    const int p = m >= 4 ? 2 : m >= 2 ? 1 : 0;  // m * 2^-9 = 2^(p-9) * (m / 2^p)
    return static_cast<uint16_t>(((p - 9 + 127) << 7) | ((m - (1 << p)) << (7 - p)));
  }
  return static_cast<uint16_t>(((e + 120) << 7) | (m << 4));
}
constexpr std::array<uint16_t, 128> make_e4m3_table() {
  std::array<uint16_t, 128> t{};
  for (int c = 0; c < 128; ++c) t[c] = e4m3_mag_bf16(c);
  return t;
}
alignas(64) constexpr std::array<uint16_t, 128> kE4M3Bf16 = make_e4m3_table();

// 16 E4M3 codes -> f32 (scales of NVFP4): bit construction, exact for all codes.
BS_AVX512 inline __m512 decode_fp8_16(const uint8_t* p, __mmask16 mask) {
  const __m512i c = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mask, p));
  const __m512i mag = _mm512_and_si512(c, _mm512_set1_epi32(0x7F));
  const __m512 norm = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23)));
  const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(mag), _mm512_set1_ps(1.f / 512.f));
  __m512 v = _mm512_mask_mov_ps(norm, _mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(8)), sub);
  v = _mm512_mask_mov_ps(v, _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7F)),
                         _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()));
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x80)), 24);
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign));
}

struct Fp8Table {
  __m512i t0, t1, t2, t3;  // entries 0-31, 32-63, 64-95, 96-127
  BS_AVX512 Fp8Table()
      : t0(_mm512_load_si512(kE4M3Bf16.data())), t1(_mm512_load_si512(kE4M3Bf16.data() + 32)),
        t2(_mm512_load_si512(kE4M3Bf16.data() + 64)), t3(_mm512_load_si512(kE4M3Bf16.data() + 96)) {}
};

// 32 E4M3 codes (n valid, 1..32) -> two f32 vectors (codes 0-15, 16-31), unscaled.
BS_AVX512 __attribute__((always_inline)) inline void decode_fp8_32(const Fp8Table& t, const uint8_t* p, int64_t n, __m512& lo, __m512& hi) {
  const __mmask32 m = n >= 32 ? 0xFFFFFFFFu : static_cast<__mmask32>((1u << n) - 1u);
  const __m512i c = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(m, p));
  const __m512i mag = _mm512_and_si512(c, _mm512_set1_epi16(0x7F));
  const __m512i a = _mm512_permutex2var_epi16(t.t0, mag, t.t1);  // index bit 5 picks t1
  const __m512i b = _mm512_permutex2var_epi16(t.t2, mag, t.t3);
  __m512i v = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(mag, _mm512_set1_epi16(64)), a, b);
  v = _mm512_or_si512(v, _mm512_slli_epi16(_mm512_and_si512(c, _mm512_set1_epi16(0x80)), 8));
  lo = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(v)), 16));
  hi = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(v, 1)), 16));
}

// 16 E2M1 codes (two per byte, low nibble first), rem of them valid, as f32.
BS_AVX512 __attribute__((always_inline)) inline __m512 decode_e2m1(const uint8_t* p, int64_t rem, __m512 table) {
  const int nb = static_cast<int>((rem + 1) / 2);
  const __m128i b = _mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << nb) - 1), p);
  const __m512i c = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, b));  // lane j = byte j/2
  const __m512i sh = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
  const __m512i idx = _mm512_and_si512(_mm512_srlv_epi32(c, sh), _mm512_set1_epi32(15));
  return _mm512_permutexvar_ps(idx, table);
}

// ---- full-block decoders of the main loop (no masks; the tail uses the masked ones above) ----

// 32 E4M3 codes -> e * 2^-8 as two f32 vectors, exact: the sign-extended code shifted left by 7 (bit 14
// cleared) is the f16 with the same sign, exponent field E (bias 15 instead of 7) and mantissa, so vcvtph2ps
// gives e * 2^-8 for normals and subnormals alike (E4M3 subnormals are f16 subnormals). NaN codes (0x7F,
// 0xFF; f16 0x3F80 | sign, a finite 1.875) are patched from a mask on the rare blocks that hold one. The
// 2^8 goes into the row's scales (row_scales_fp8x256), so w = (e 2^-8)(s 2^8) = e s, the same rounding.
BS_AVX512 __attribute__((always_inline)) inline void decode_fp8_32_fast(const uint8_t* p, __m512& lo, __m512& hi) {
  const __m512i c = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  const __m512i h = _mm512_and_si512(_mm512_slli_epi16(c, 7), _mm512_set1_epi16(static_cast<short>(0xBFFF)));
  lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
  hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
  const __mmask32 nan = _mm512_cmpeq_epi16_mask(_mm512_and_si512(h, _mm512_set1_epi16(0x3F80)),
                                                 _mm512_set1_epi16(0x3F80));
  if (__builtin_expect(nan != 0, 0)) {
    const __m512 q = _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN());
    lo = _mm512_mask_mov_ps(lo, static_cast<__mmask16>(nan), q);
    hi = _mm512_mask_mov_ps(hi, static_cast<__mmask16>(nan >> 16), q);
  }
}

// 16 E2M1 codes from 8 bytes (low nibble first) -> element values: byte j/2 in dword j, shifted right by 4
// on odd j; vpermps reads only an index's low 4 bits, so no mask is needed.
BS_AVX512 __attribute__((always_inline)) inline __m512 decode_e2m1_fast(const uint8_t* p, __m512 table) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m512i c = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, b));
  const __m512i sh = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
  return _mm512_permutexvar_ps(_mm512_srlv_epi32(c, sh), table);
}

// The group scales of row n, exactly FpWeights::group_scale: out[n_groups].
BS_AVX512 void row_scales(const FpWeights& w, int64_t n, float* out) {
  const int64_t G = w.n_groups;
  if (w.format == WeightFormat::kFP8_E4M3) {
    std::copy_n(static_cast<const float*>(w.scales) + n * G, G, out);
    return;
  }
  const uint8_t* s = static_cast<const uint8_t*>(w.scales) + n * G;
  for (int64_t g = 0; g < G; g += 16) {
    const __mmask16 mk = g + 16 <= G ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (G - g)) - 1);
    __m512 v;
    if (w.format == WeightFormat::kMXFP4) {  // E8M0: e << 23; 0 -> 2^-127 (0x00400000); 0xFF -> NaN
      const __m512i e = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mk, s + g));
      __m512i b = _mm512_slli_epi32(e, 23);
      b = _mm512_mask_mov_epi32(b, _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()), _mm512_set1_epi32(0x00400000));
      v = _mm512_mask_mov_ps(_mm512_castsi512_ps(b), _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(0xFF)),
                             _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()));
    } else {  // NVFP4: e4m3(s) / global
      v = _mm512_div_ps(decode_fp8_16(s + g, mk), _mm512_set1_ps(w.global_div));
    }
    _mm512_mask_storeu_ps(out + g, mk, v);
  }
}

// FP8 row scales times 2^8 (see decode_fp8_32_fast), exact; false when a finite scale is so large that
// s * 2^8 would overflow (the row then takes the masked decoder, which multiplies by s itself).
inline bool row_scales_fp8x256(const FpWeights& w, int64_t n, float* out) {
  const float* s = static_cast<const float*>(w.scales) + n * w.n_groups;
  bool ok = true;
  for (int64_t g = 0; g < w.n_groups; ++g) {
    ok = ok && !(std::fabs(s[g]) > 1e36f && std::isfinite(s[g]));
    out[g] = s[g] * 256.f;
  }
  return ok;
}

// Row n's weights k0 .. k0+31 (n_valid of them) scaled, as two f32 vectors.
struct RowDecoder {
  const FpWeights& w;
  const float* sc;  // row_scales of the row
  Fp8Table t8;
  __m512 t4;
  BS_AVX512 RowDecoder(const FpWeights& fw, const float* scales)
      : w(fw), sc(scales),
        t4(_mm512_setr_ps(0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, -0.f, -0.5f, -1.f, -1.5f, -2.f, -3.f, -4.f,
                          -6.f)) {}
  // sc_off: offset of this row's scales in sc (several rows decoded side by side).
  BS_AVX512 __attribute__((always_inline)) inline void decode32(const uint8_t* row, int64_t k0, __m512& lo,
                                                                __m512& hi, int64_t sc_off = 0) const {
    const int64_t n = std::min<int64_t>(32, w.K - k0);
    __m512 e0, e1;
    if (w.format == WeightFormat::kFP8_E4M3) {
      decode_fp8_32(t8, row + k0, n, e0, e1);
    } else {
      e0 = decode_e2m1(row + k0 / 2, std::min<int64_t>(16, n), t4);
      e1 = n > 16 ? decode_e2m1(row + k0 / 2 + 8, n - 16, t4) : _mm512_setzero_ps();
    }
    lo = _mm512_mul_ps(e0, _mm512_set1_ps(sc[sc_off + k0 / w.group]));
    hi = _mm512_mul_ps(e1, _mm512_set1_ps(sc[sc_off + (k0 + 16) / w.group]));
  }
};

BS_AVX512 inline __mmask16 lanes(int64_t rem) {
  return rem >= 16 ? static_cast<__mmask16>(0xFFFF) : rem <= 0 ? static_cast<__mmask16>(0)
                                                               : static_cast<__mmask16>((1u << rem) - 1);
}

BS_AVX512 inline float reduce16(__m512 a) {
  __m256 h = _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));         // j + 8
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));             // j + 4
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));                                                      // j + 2
  q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));                                                  // j + 1
  return _mm_cvtss_f32(q);
}

constexpr int kMB = 4;  // activation rows per pass

// Few activation rows: NB weight rows decoded in registers side by side (NB
// independent FMA chains hide the FMA latency that one output's single
// accumulator chain would expose), MB activation rows each. F fixes the format
// (group size a constant: no division, no mask in the main loop); the last
// partial block of 32 goes through the masked generic decoder.
template <WeightFormat F, int NB, int MB>
BS_AVX512 void rows_direct(const FpWeights& w, const float* x, float* y, int64_t m0, int64_t n, float* sc) {
  constexpr int64_t GS = F == WeightFormat::kFP8_E4M3 ? kFp8Group : F == WeightFormat::kMXFP4 ? kMxGroup : kNvGroup;
  const int64_t K = w.K, G = w.n_groups;
  const uint8_t* row[NB];
  bool fast = true;
  #pragma GCC unroll 4
  for (int r = 0; r < NB; ++r) {
    if constexpr (F == WeightFormat::kFP8_E4M3) fast = row_scales_fp8x256(w, n + r, sc + r * G) && fast;
    else row_scales(w, n + r, sc + r * G);
    row[r] = w.codes + (n + r) * w.row_bytes;
  }
  if (F == WeightFormat::kFP8_E4M3 && !fast)
    for (int r = 0; r < NB; ++r) row_scales(w, n + r, sc + r * G);
  __m512 acc[NB][MB];
  #pragma GCC unroll 4
  for (int r = 0; r < NB; ++r)
    #pragma GCC unroll 4
    for (int i = 0; i < MB; ++i) acc[r][i] = _mm512_setzero_ps();
  const __m512 t4 = _mm512_setr_ps(0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, -0.f, -0.5f, -1.f, -1.5f, -2.f, -3.f,
                                   -4.f, -6.f);
  const int64_t Kmain = fast ? K / 32 * 32 : 0;
  for (int64_t k0 = 0; k0 < Kmain; k0 += 32) {
    __m512 wv[NB][2];
    #pragma GCC unroll 4
    for (int r = 0; r < NB; ++r) {
      const float* s = sc + r * G;
      __m512 e0, e1;
      if constexpr (F == WeightFormat::kFP8_E4M3) {
        decode_fp8_32_fast(row[r] + k0, e0, e1);
      } else {
        e0 = decode_e2m1_fast(row[r] + k0 / 2, t4);
        e1 = decode_e2m1_fast(row[r] + k0 / 2 + 8, t4);
      }
      wv[r][0] = _mm512_mul_ps(e0, _mm512_set1_ps(s[k0 / GS]));
      wv[r][1] = _mm512_mul_ps(e1, _mm512_set1_ps(s[(k0 + 16) / GS]));
    }
    #pragma GCC unroll 4
    for (int h = 0; h < 2; ++h)
      #pragma GCC unroll 4
      for (int i = 0; i < MB; ++i) {
        const __m512 xv = _mm512_loadu_ps(x + (m0 + i) * K + k0 + 16 * h);
        #pragma GCC unroll 4
        for (int r = 0; r < NB; ++r) acc[r][i] = _mm512_fmadd_ps(xv, wv[r][h], acc[r][i]);
      }
  }
  if (Kmain < K) {
    if (F == WeightFormat::kFP8_E4M3 && fast)  // the masked decoder multiplies by the scales themselves
      for (int r = 0; r < NB; ++r) row_scales(w, n + r, sc + r * G);
    const RowDecoder dec(w, sc);
    for (int64_t k0 = Kmain; k0 < K; k0 += 32) {
      __m512 wv[NB][2];
      #pragma GCC unroll 4
      for (int r = 0; r < NB; ++r) dec.decode32(row[r], k0, wv[r][0], wv[r][1], r * G);
      #pragma GCC unroll 4
      for (int h = 0; h < 2; ++h) {
        const __mmask16 mk = lanes(K - k0 - 16 * h);
        if (mk == 0) break;
        #pragma GCC unroll 4
        for (int i = 0; i < MB; ++i) {
          const __m512 xv = _mm512_maskz_loadu_ps(mk, x + (m0 + i) * K + k0 + 16 * h);
          #pragma GCC unroll 4
          for (int r = 0; r < NB; ++r) acc[r][i] = _mm512_mask3_fmadd_ps(xv, wv[r][h], acc[r][i], mk);
        }
      }
    }
  }
  #pragma GCC unroll 4
  for (int r = 0; r < NB; ++r)
    #pragma GCC unroll 4
    for (int i = 0; i < MB; ++i) y[(m0 + i) * w.N + n + r] = reduce16(acc[r][i]);
}

template <WeightFormat F, int MB>
BS_AVX512 void rows_direct_all(const FpWeights& w, const float* x, float* y, int64_t n0, int64_t n1, float* sc) {
  constexpr int NB = MB == 1 ? 4 : 2;
  int64_t n = n0;
  for (; n + NB <= n1; n += NB) rows_direct<F, NB, MB>(w, x, y, 0, n, sc);
  for (; n < n1; ++n) rows_direct<F, 1, MB>(w, x, y, 0, n, sc);
}

template <WeightFormat F>
BS_AVX512 void rows_direct_m(const FpWeights& w, const float* x, float* y, int64_t M, int64_t n0, int64_t n1,
                             float* sc) {
  switch (M) {
    case 1: rows_direct_all<F, 1>(w, x, y, n0, n1, sc); break;
    case 2: rows_direct_all<F, 2>(w, x, y, n0, n1, sc); break;
    case 3: rows_direct_all<F, 3>(w, x, y, n0, n1, sc); break;
    default: rows_direct_all<F, 4>(w, x, y, n0, n1, sc); break;
  }
}

// Many activation rows: weight rows [n, n + NB) decoded into wd [NB, K16]
// (K16 = K rounded up to 16, zero-padded), then NB x MB register blocks.
template <int NB, int MB>
BS_AVX512 void block_fma(const float* wd, int64_t K16, const float* x, int64_t K, float* y, int64_t N, int64_t n,
                         int64_t m) {
  __m512 acc[NB][MB];
  #pragma GCC unroll 4
  for (int i = 0; i < NB; ++i)
    #pragma GCC unroll 4
    for (int j = 0; j < MB; ++j) acc[i][j] = _mm512_setzero_ps();
  const int64_t Kf = K / 16 * 16;
  for (int64_t k = 0; k < Kf; k += 16) {
    __m512 wv[NB];
    #pragma GCC unroll 4
    for (int i = 0; i < NB; ++i) wv[i] = _mm512_load_ps(wd + i * K16 + k);
    #pragma GCC unroll 4
    for (int j = 0; j < MB; ++j) {
      const __m512 xv = _mm512_loadu_ps(x + (m + j) * K + k);
      #pragma GCC unroll 4
      for (int i = 0; i < NB; ++i) acc[i][j] = _mm512_fmadd_ps(xv, wv[i], acc[i][j]);
    }
  }
  if (Kf < K) {  // masked lanes keep their sums untouched (no +0 added to a -0)
    const __mmask16 mk = lanes(K - Kf);
    __m512 wv[NB];
    #pragma GCC unroll 4
    for (int i = 0; i < NB; ++i) wv[i] = _mm512_load_ps(wd + i * K16 + Kf);
    #pragma GCC unroll 4
    for (int j = 0; j < MB; ++j) {
      const __m512 xv = _mm512_maskz_loadu_ps(mk, x + (m + j) * K + Kf);
      #pragma GCC unroll 4
      for (int i = 0; i < NB; ++i) acc[i][j] = _mm512_mask3_fmadd_ps(xv, wv[i], acc[i][j], mk);
    }
  }
  #pragma GCC unroll 4
  for (int i = 0; i < NB; ++i)
    #pragma GCC unroll 4
    for (int j = 0; j < MB; ++j) y[(m + j) * N + n + i] = reduce16(acc[i][j]);
}

template <int NB>
BS_AVX512 void rows_scratch(const FpWeights& w, const float* x, float* y, int64_t M, int64_t n, float* sc,
                            float* wd, int64_t K16) {
  const int64_t K = w.K;
  #pragma GCC unroll 4
  for (int i = 0; i < NB; ++i) {
    row_scales(w, n + i, sc);
    const RowDecoder dec(w, sc);
    const uint8_t* row = w.codes + (n + i) * w.row_bytes;
    for (int64_t k0 = 0; k0 < K; k0 += 32) {
      __m512 lo, hi;
      dec.decode32(row, k0, lo, hi);
      _mm512_store_ps(wd + i * K16 + k0, lo);
      if (k0 + 16 < K16) _mm512_store_ps(wd + i * K16 + k0 + 16, hi);
    }
  }
  int64_t m = 0;
  for (; m + kMB <= M; m += kMB) block_fma<NB, kMB>(wd, K16, x, K, y, w.N, n, m);
  for (; m < M; ++m) block_fma<NB, 1>(wd, K16, x, K, y, w.N, n, m);
}

}  // namespace

BS_AVX512 void gemm_fp_avx512(const FpWeights& w, const float* x, float* y, int64_t M, int64_t n0, int64_t n1) {
  std::vector<float> sc(static_cast<size_t>(4 * w.n_groups) + 16);  // group scales of up to 4 rows
  if (M <= kMB) {
    switch (w.format) {
      case WeightFormat::kFP8_E4M3: rows_direct_m<WeightFormat::kFP8_E4M3>(w, x, y, M, n0, n1, sc.data()); break;
      case WeightFormat::kMXFP4: rows_direct_m<WeightFormat::kMXFP4>(w, x, y, M, n0, n1, sc.data()); break;
      default: rows_direct_m<WeightFormat::kNVFP4>(w, x, y, M, n0, n1, sc.data()); break;
    }
    return;
  }
  const int64_t K16 = (w.K + 31) / 32 * 32;  // decode32 writes whole 32-value blocks
  std::vector<float, std::allocator<float>> buf(static_cast<size_t>(4 * K16 + 16));
  float* wd = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t{63});
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) rows_scratch<4>(w, x, y, M, n, sc.data(), wd, K16);
  for (; n < n1; ++n) rows_scratch<1>(w, x, y, M, n, sc.data(), wd, K16);
}

}  // namespace blockspec
