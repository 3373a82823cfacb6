// AVX2 GEMM for the GGUF block formats (layout and exact arithmetic: kernels/block_layout.h), for CPUs without
// AVX-512 VNNI. It follows kernels/x86/block_avx512.cc: same steps, same panel driver, same per-sub-block
// fold, so its outputs equal the scalar twin's bit for bit.
//
// Micro-kernel: the T tiles of one panel, one after another, times MB activation rows. A tile is two ymm halves
// (rows 0-7 and 8-15 of its 64-byte lines; int32 lane r of half h is row 8h + r). Per block, tile, sub-block and
// input quad it builds each half's 8 x 4 unsigned codes (nibble split, plus the hi plane's bits for 5- and 6-bit
// codes) and multiplies them by the broadcast 4 int8 activation codes of each row with vpmaddubsw (u8 x s8 ->
// saturating int16 sums of pairs), widened to int32 lanes by vpmaddwd with 1. Nothing saturates:
//   - codes of <= 6 bits: a pair sums to at most 2 * 63 * 127 = 16002; the int16 results of G quads are added
//     (vpaddw) before one widening while G * 2 * 127 * umax <= 32767 (G = the whole sub-block for Q2_K, Q3_K and
//     the 4-bit formats, 4 quads for Q5, 2 for Q6_K), which saves the vpmaddwd + vpaddd of the others;
//   - Q8_0 (u up to 255: 2 * 255 * 127 would saturate): it multiplies |u - 128| (u8, <= 128) by
//     sign(u - 128) * x (s8: x is never -128), pair sums <= 2 * 128 * 127 = 32512. That sums (u - 128) * x =
//     u * x - 128 X, the twin's I, so no zero correction follows. (The other way round, |x| times
//     sign(x) * (u - 128), wraps at u = 0: -(-128) is -128 in int8.)
// At each sub-block end the int32 sum is corrected by zero * X, multiplied by sc (int32; for the formats without a
// zero, sc is the widening's multiplier instead of 1, which saves that vpmulld), converted and folded
// into the block's f32 sum with dx, and the min term into its own with float(mc) and c; at the block end both go
// into the output with d and dm, in the twin's order (nothing for GCC to contract, whatever -ffp-contract says:
// every float operation is an explicit FMA). The f32 sums live in L1, as in quant_avx2.cc, leaving the 16 ymm to the integer sums, codes and
// broadcasts. Within a sub-block the tiles run one after another (not side by side as in the VNNI kernel: one
// tile's sums already take 8 of the 16 ymm at MB = 4), so the step is still read front to back (block_layout.h);
// the block sums of all T tiles wait in L1. Kept whole tile by tile instead, q6_k at M = 1 streamed at 12 GB/s
// against 22 (kernels_bench avx2, 2 threads, Zen 4 EPYC).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "base/error.h"
#include "kernels/kernel_table.h"
#include "kernels/x86/block_fmt.h"
#include "kernels/x86/panel_gemm.h"

// block_avxvnni.cc compiles this file a second time with BS_BLOCK_AVXVNNI 1: the same kernel with AVX-VNNI's
// vpdpbusd on ymm (u8 x s8 quads summed straight into int32, Intel client cores from Alder Lake) in place of
// vpmaddubsw + vpaddw + vpmaddwd, exported as gemm_block_avxvnni(_prefetch).
#ifndef BS_BLOCK_AVXVNNI
#define BS_BLOCK_AVXVNNI 0
#endif
#if BS_BLOCK_AVXVNNI
#define BS_AVX2 __attribute__((target("avx2,fma,f16c,avxvnni")))
#else
#define BS_AVX2 __attribute__((target("avx2,fma,f16c")))
#endif

namespace blockspec {

namespace {

constexpr bool kVnni = BS_BLOCK_AVXVNNI;

constexpr int kMaxT = kQPanel;
// Activation rows per micro-kernel. Q5 / Q6_K hold int16 and int32 sums (4 ymm per row) and spill some at 4, yet
// run faster than at 2 (kernels_bench avx2, up M = 512, 2 threads, a 2-core Xeon with AVX-512 VNNI shared with
// other jobs: q5_k 124 -> 109 ms, q6_k 156 -> 130).
constexpr int kMaxMB = 4;

BS_AVX2 inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

BS_AVX2 inline __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
BS_AVX2 inline __m128i load16(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
BS_AVX2 inline __m128i load8(const uint8_t* p) { return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)); }

// A format (block_fmt.h) plus the AVX2 grouping.
template <class Base>
struct Fmt : Base {
  using Base::B, Base::BITS, Base::S, Base::Z;
  static constexpr int QPS = S / 4;  // quads per sub-block
  // Quads summed in int16 before widening (see the top): G * 2 * 127 * umax <= 32767. AVX-VNNI sums each quad
  // into int32 at once (G = 1, nothing to widen).
  static constexpr int G = BITS == 8 || kVnni ? 1 : std::min(QPS, 32767 / (2 * 127 * ((1 << BITS) - 1)));
  // Zero correction left after the sum (Q8_0's is inside it, except with AVX-VNNI, which multiplies u itself).
  static constexpr int ZC = BITS == 8 && !kVnni ? 0 : Z;
  static_assert(QPS % G == 0 && G * 2 * 127 * (BITS == 8 ? 128 : (1 << BITS) - 1) <= 32767);
};

// Half h (rows 8h..8h+7) of the codes of quad q (inputs 4q..4q+3 of a sub-block) of one tile: u, or for Q8_0
// without AVX-VNNI u - 128 as s8. The sub-block's lo lines are at lo + i * LS, its hi line at hi (LS = Tp * 64,
// the step's line stride, block_layout.h).
template <class F, int64_t LS>
BS_AVX2 inline __m256i codes(const uint8_t* lo, const uint8_t* hi, int q, int h) {
  if constexpr (F::BITS == 8 && !kVnni) {
    return _mm256_xor_si256(load32(lo + q * LS + h * 32), _mm256_set1_epi8(static_cast<char>(0x80)));
  } else if constexpr (F::BYTES) {  // Q8_0 with AVX-VNNI, Unpacked: quad q is line q
    return load32(lo + q * LS + h * 32);
  } else {
    const __m256i v = load32(lo + (q / 2) * LS + h * 32), low4 = _mm256_set1_epi8(0x0F);
    __m256i u = (q % 2) == 0 ? _mm256_and_si256(v, low4) : _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
    if constexpr (F::BITS == 5) {
      const __m256i hv = load32(hi + (q / 8) * LS + h * 32);
      const int c = q % 8;  // bit c of each byte -> bit 4
      const __m256i hb = c == 4 ? hv : c < 4 ? _mm256_slli_epi32(hv, 4 - c) : _mm256_srli_epi32(hv, c - 4);
      u = _mm256_or_si256(u, _mm256_and_si256(hb, _mm256_set1_epi8(0x10)));
    } else if constexpr (F::BITS == 6) {
      const __m256i hv = load32(hi + (q / 4) * LS + h * 32);
      const int c = 2 * (q % 4);  // bits c, c+1 of each byte -> bits 4, 5
      const __m256i hb = c == 4 ? hv : c < 4 ? _mm256_slli_epi32(hv, 4 - c) : _mm256_srli_epi32(hv, c - 4);
      u = _mm256_or_si256(u, _mm256_and_si256(hb, _mm256_set1_epi8(0x30)));
    }
    return u;
  }
}

// Half h of tile t's block scales d (and dm; zero without minimums), f16 in the step (block_layout.h): d [16] at
// the step's scale area + t * 32, dm T * 32 bytes on.
struct BlockScales {
  __m256 d, dm;
};
template <class F, int T>
BS_AVX2 inline BlockScales block_scales(const uint8_t* rec0, int t, int h) {
  const uint8_t* dp = rec0 + (F::LO + F::HI + F::SCB + F::MCB) * T + t * 32;
  return {_mm256_cvtph_ps(load16(dp + 16 * h)),
          F::MIN ? _mm256_cvtph_ps(load16(dp + T * 32 + 16 * h)) : _mm256_setzero_ps()};
}

// prefetch_small: prefetch the 256-blocks' steps at up to 4 rows too (gemm_block_avx2_prefetch). panel_in: the
// panel's steps in F's layout, or null for w's own (w.step(tile, 0)).
template <class F, int T, int MB>
BS_AVX2 void micro(const BlockActs& a, const BlockWeights& w, float* y, int64_t tile, int64_t m0,
                   bool prefetch_small, const uint8_t* panel_in) {
  constexpr int NS = F::B / F::S, QPS = F::QPS, G = F::G;
  const int64_t K = w.K, nb = w.n_blocks, KS = K / F::S, KA = K / kBlockActs;
  constexpr int64_t LS = T * 64;  // line stride of a step of T tiles (block_layout.h)
  const uint8_t* panel = panel_in ? panel_in : w.step(tile, 0);  // step s at panel + s * T * REC
  const __m256i ones = _mm256_set1_epi16(1);
  // f32 sums in L1, touched once per sub-block; the empty asm stops GCC promoting them to registers.
  alignas(32) float facc[T][2][MB][8] = {};
  asm volatile("" : : "r"(&facc[0][0][0][0]) : "memory");
  const int8_t* xq[MB];  // row m's codes, sums and scales, advanced block by block
  const int32_t* xs[MB];
  const float *xd[MB], *xc[MB];
  for (int m = 0; m < MB; ++m) {
    xq[m] = a.q + (m0 + m) * K;
    xs[m] = a.sums + (m0 + m) * KS;
    xc[m] = a.csums + (m0 + m) * KS;
    xd[m] = a.d + (m0 + m) * KA;
  }
  for (int64_t s = 0; s < nb; ++s) {
    const uint8_t* rec0 = panel + s * T * F::REC;
    // Software prefetch of the step, except for the 256-blocks at up to 4 rows, which read it faster with the
    // hardware prefetchers alone: kernels_bench avx2, up 1536 x 8960, 2 threads, weights from DRAM, Zen 4 EPYC,
    // 2 rounds, GB/s with -> without: M = 1 q4_k 19.6-19.7 -> 24-29, q6_k 15-16 -> 27-30, q4_0 27-30 -> 24-26;
    // M = 4 q4_k 12.5-12.9 -> 12.5-14.8, q6_k 10.8-10.9 -> 14-17, q4_0 17-18 -> 14-16. On an Intel Xeon the
    // opposite (prefetch_small; kernels/dispatch.cc): `BLOCKSPEC_ISA=avx2 kernels_bench`, family 6 model 207, 2
    // rounds, us, without -> with: M = 1 q4_k up 971-973 -> 646-649 (1 thread), 501-513 -> 331-332 (2), q6_k up
    // 1479-1482 -> 1041-1090 / 750-769 -> 521-529; M = 4 q4_k up 1253 -> 1096-1104, q6_k 1938-1953 -> 1771-1778.
    // The 256-blocks at up to 16 rows on Intel spread it over the step (block_avx512.cc says why): each (j, t)
    // prefetches its share, kLPI lines. `BLOCKSPEC_ISA=avx2 kernels_bench` (the AVX-VNNI variant), Xeon, 2 threads,
    // 2 rounds, us, burst -> spread: q4_k up M = 2 512-514 -> 339-380, M = 4 684-689 -> 508-527, M = 8 1085-1337
    // -> 933-963; q6_k up M = 1 626-645 -> 519-538, M = 4 946-983 -> 698-757, M = 8 1486-1698 -> 1163-1317.
    const bool spread = F::B == 256 && prefetch_small && a.M <= 16 && panel_in == nullptr;
    if (!spread && (F::B == 32 || a.M > 4 || prefetch_small)) prefetch_ahead(rec0, T * F::REC);
    constexpr int64_t kLPI = share_lines(T * F::REC, NS * T);  // step lines per (j, t)
    // The block's f32 sums of every tile (block_layout.h: blk, mblk), in L1 like facc.
    alignas(32) float blk[T][2][MB][8], mblk[T][2][MB][8];  // unused by the 32-blocks (NS == 1)
    // Zeroed by vector stores: a memset here compiled to `rep stos` (4% of the Q4_K kernel's decode samples, Zen 3).
    if constexpr (NS > 1) {
      #pragma GCC unroll 64
      for (int i = 0; i < T * 2 * MB; ++i) {
        _mm256_store_ps(&blk[0][0][0][0] + 8 * i, _mm256_setzero_ps());
        _mm256_store_ps(&mblk[0][0][0][0] + 8 * i, _mm256_setzero_ps());
      }
      asm volatile("" : : "r"(&blk[0][0][0][0]), "r"(&mblk[0][0][0][0]) : "memory");
    }
    // Sub-block by sub-block, the tiles in turn within each: the step's order (block_layout.h), read front to back.
    #pragma GCC unroll 16
    for (int j = 0; j < NS; ++j) {
      #pragma GCC unroll 1
      for (int t = 0; t < T; ++t) {
        // Sub-block j of tile t: lo lines (line i at + i * LS), hi line at + LOL * LS, sc at + (LOL + HIL) * LS,
        // mc T * 16 on.
        if (spread) prefetch_ahead(rec0 + (j * T + t) * kLPI * 64, kLPI * 64);  // this share of the step
        const uint8_t* lo = rec0 + j * F::SUB * T + t * 64, *hi = lo + F::LOL * LS;
        const uint8_t* sc = rec0 + j * F::SUB * T + (F::LOL + F::HIL) * LS + t * 16;
        // Formats without a zero correction that widen once per sub-block (Q2_K, Q4_K) widen with sc itself
        // instead of 1: sc in both int16 halves of each int32 lane makes vpmaddwd give sc * (p0 + p1), the twin's
        // sc * I exactly (|p| <= 32767, 0 <= sc < 64: no overflow), and saves the vpmulld per row and half after
        // the sum. kernels_bench avx2 up 1536 x 8960, 1 thread, Zen 4, 2 x 5 rounds interleaved, medians: q4_k
        // M = 1 352-356 -> 332-346 us, M = 4 878-885 -> 657-675 us. Q5_K (two widenings a sub-block, G = 4) lost
        // 11% at M = 1 with it (the sc lanes built twice): not used.
        constexpr bool kScInMadd = F::SC && F::ZC == 0 && G == QPS && !kVnni;
        __m256i acc[2][MB];  // int32 sums of sub-block j (times sc when kScInMadd)
        #pragma GCC unroll 16
        for (int h = 0; h < 2; ++h)
          #pragma GCC unroll 16
          for (int m = 0; m < MB; ++m)  // the zero-point term -zero * X starts the sum (block_avx512.cc)
            acc[h][m] = F::ZC != 0 ? _mm256_set1_epi32(-F::ZC * xs[m][j]) : _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int g0 = 0; g0 < QPS; g0 += G) {
          __m256i p16[2][MB];  // int16 pair sums of quads g0 .. g0 + G - 1
          #pragma GCC unroll 8
          for (int qq = 0; qq < G; ++qq) {
            const int q = j * QPS + g0 + qq;
            __m256i u[2], au[2];
            #pragma GCC unroll 2
            for (int h = 0; h < 2; ++h) {
              u[h] = codes<F, LS>(lo, hi, g0 + qq, h);
              au[h] = F::BITS == 8 && !kVnni ? _mm256_abs_epi8(u[h]) : u[h];
            }
            #pragma GCC unroll 16
            for (int m = 0; m < MB; ++m) {
              const __m256i b = bcast4(xq[m] + q * 4);
              #pragma GCC unroll 2
              for (int h = 0; h < 2 && kVnni; ++h) {
#if BS_BLOCK_AVXVNNI
                acc[h][m] = _mm256_dpbusd_avx_epi32(acc[h][m], u[h], b);
#endif
              }
              #pragma GCC unroll 2
              for (int h = 0; h < 2 && !kVnni; ++h) {
                const __m256i p = _mm256_maddubs_epi16(au[h], F::BITS == 8 ? _mm256_sign_epi8(b, u[h]) : b);
                p16[h][m] = qq == 0 ? p : _mm256_add_epi16(p16[h][m], p);
                // Keeps the sum a chain: GCC's reassociation otherwise makes it a tree over all G products at once,
                // which spills them (16 ymm only).
                asm("" : "+x"(p16[h][m]));
              }
            }
          }
          #pragma GCC unroll 2
          for (int h = 0; h < 2 && !kVnni; ++h) {
            __m256i wid = ones;  // built here, after the quads: before them it slowed q4_k at M = 1 by 30%
            if constexpr (kScInMadd) {
              // Rows 8h..8h+7's sc, each into both int16 halves of its lane: the 8 bytes in both 128-bit lanes,
              // then one byte shuffle (0x80: a zero byte). The formats without a zero (Q2_K, Q4_K) have unsigned
              // 4- and 6-bit scales, so zero-extending is their value. Two ops where widening, masking,
              // shifting and or-ing took four.
              int64_t sc8;
              std::memcpy(&sc8, sc + h * 8, 8);
              const __m256i ctl = _mm256_setr_epi8(0, -128, 0, -128, 1, -128, 1, -128, 2, -128, 2, -128, 3, -128, 3,
                                                   -128, 4, -128, 4, -128, 5, -128, 5, -128, 6, -128, 6, -128, 7,
                                                   -128, 7, -128);
              wid = _mm256_shuffle_epi8(_mm256_set1_epi64x(sc8), ctl);
            }
            #pragma GCC unroll 16
            for (int m = 0; m < MB; ++m) {
              acc[h][m] = _mm256_add_epi32(acc[h][m], _mm256_madd_epi16(p16[h][m], wid));
              asm("" : "+x"(acc[h][m]));  // a chain too
            }
          }
        }
        const int ja = j * F::S / kBlockActs;  // activation block of sub-block j, within the block
        #pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          __m256i sw = _mm256_set1_epi32(1);
          __m256 scf = _mm256_set1_ps(1.f), mcf = _mm256_set1_ps(1.f);  // sc as int32 or (AVX-VNNI) f32, float(mc)
          if constexpr (F::SC) {
            if constexpr (!kScInMadd && !kVnni) sw = _mm256_cvtepi8_epi32(load8(sc + h * 8));
            if constexpr (kVnni) scf = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load8(sc + h * 8)));
            if constexpr (F::MIN) mcf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(load8(sc + T * 16 + h * 8)));
          }
          if constexpr (NS == 1) {
            // A 32-block ends with its only sub-block: straight into facc, without the block sums' round trips
            // through L1. The twin's blk = fma(P, dx, 0) is the fma below; its mblk = fma(1, c, 0) is c, except
            // that a c of -0 becomes +0 there, which adds the same to a sum that is never -0 (it starts at +0 and
            // rounds to nearest). kernels_bench avx2 up 1536 x 8960, 1 thread, 3 rounds interleaved (a training
            // job beside it): M = 4 q4_0 790 -> 571 us, q4_1 882 -> 592, q8_0 1320 -> 1240; M = 1 level.
            const auto [d, dm] = block_scales<F, T>(rec0, t, h);
            #pragma GCC unroll 16
            for (int m = 0; m < MB; ++m) {
              const __m256i I = acc[h][m];
              const __m256 b = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I), _mm256_set1_ps(xd[m][ja]), _mm256_setzero_ps());
              float* f = facc[t][h][m];
              __m256 v = _mm256_fmadd_ps(b, d, _mm256_load_ps(f));
              if constexpr (F::MIN) v = _mm256_fmadd_ps(_mm256_set1_ps(xc[m][j]), dm, v);
              _mm256_store_ps(f, v);
            }
            continue;
          }
          #pragma GCC unroll 16
          for (int m = 0; m < MB; ++m) {
            __m256i I = acc[h][m];
            if constexpr (F::SC && !kScInMadd && !kVnni) I = _mm256_mullo_epi32(I, sw);
            __m256 P = _mm256_cvtepi32_ps(I);
            // AVX-VNNI (Intel client cores, where vpmulld is two uops of 10 cycles): float(I) * float(sc), the same
            // value (both factors and the product, |I * sc| < 2^24, are exact in f32; block_avx512.cc does this).
            if constexpr (F::SC && kVnni) P = _mm256_mul_ps(P, scf);
            float* b = blk[t][h][m];
            _mm256_store_ps(b, _mm256_fmadd_ps(P, _mm256_set1_ps(xd[m][ja]), _mm256_load_ps(b)));
            if constexpr (F::MIN) {
              float* mb = mblk[t][h][m];
              _mm256_store_ps(mb, _mm256_fmadd_ps(mcf, _mm256_set1_ps(xc[m][j]), _mm256_load_ps(mb)));
            }
          }
        }
      }
    }
    for (int t = 0; t < T && NS > 1; ++t) {  // the block end (32-blocks ended with their sub-block)
      #pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const auto [d, dm] = block_scales<F, T>(rec0, t, h);
        #pragma GCC unroll 16
        for (int m = 0; m < MB; ++m) {
          float* f = facc[t][h][m];
          __m256 v = _mm256_fmadd_ps(_mm256_load_ps(blk[t][h][m]), d, _mm256_load_ps(f));
          if constexpr (F::MIN) v = _mm256_fmadd_ps(_mm256_load_ps(mblk[t][h][m]), dm, v);
          _mm256_store_ps(f, v);
        }
      }
    }
    for (int m = 0; m < MB; ++m) {
      xq[m] += F::B;
      xs[m] += NS;
      xc[m] += NS;
      xd[m] += F::B / kBlockActs;
    }
  }
  for (int t = 0; t < T; ++t) {
    const int64_t n = (tile + t) * kQTile, valid = std::min<int64_t>(kQTile, w.N - n);
    for (int m = 0; m < MB; ++m) {
      std::memcpy(y + (m0 + m) * w.N + n, facc[t][0][m], std::min<int64_t>(valid, 8) * sizeof(float));
      if (valid > 8) std::memcpy(y + (m0 + m) * w.N + n + 8, facc[t][1][m], (valid - 8) * sizeof(float));
    }
  }
}

using MicroFn = void (*)(const BlockActs&, const BlockWeights&, float*, int64_t, int64_t, bool, const uint8_t*);

template <class F>
struct Micro {
  template <int T, int MB>
  static constexpr MicroFn fn = &micro<F, T, MB>;
};

// The T-tile panel starting at `tile` (F's packed steps) as Unpacked steps (U, bytes for scales) into out:
// codes by codes<> (the split and hi-bit merge the kernel would do), scales and d / dm copied.
template <class F, class U, int T>
BS_AVX2 void unpack_panel(const BlockWeights& w, int64_t tile, uint8_t* out) {
  constexpr int NS = F::B / F::S, QPS = F::S / 4;
  constexpr int64_t LS = T * 64, SCO = (F::LOL + F::HIL) * LS, DD = (F::LO + F::HI + F::SCB + F::MCB) * T;
  constexpr int64_t UDD = (U::LO + U::SCB + U::MCB) * T;
  const uint8_t* panel = w.step(tile, 0);
  for (int64_t s = 0; s < w.n_blocks; ++s) {
    const uint8_t* rec = panel + s * T * F::REC;
    prefetch_ahead(rec, T * F::REC);  // a DRAM stream with little work per byte
    uint8_t* o = out + s * T * U::REC;
    for (int j = 0; j < NS; ++j) {
      const uint8_t* sub = rec + j * F::SUB * T;
      uint8_t* os = o + j * U::SUB * T;
      #pragma GCC unroll 8
      for (int qq = 0; qq < QPS; ++qq)
        for (int t = 0; t < T; ++t)
          for (int h = 0; h < 2; ++h)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(os + qq * LS + t * 64 + h * 32),
                                codes<F, LS>(sub + t * 64, sub + F::LOL * LS + t * 64, qq, h));
      if constexpr (F::SC) std::copy(sub + SCO, sub + SCO + (F::MIN ? 32 : 16) * T, os + QPS * LS);  // sc, mc
    }
    std::copy(rec + DD, rec + DD + (F::MIN ? 64 : 32) * T, o + UDD);  // d, dm
  }
}

template <class F, class U, int... T>
constexpr std::array<void (*)(const BlockWeights&, int64_t, uint8_t*), sizeof...(T)> unpack_table(
    std::integer_sequence<int, T...>) {
  return {&unpack_panel<F, U, T + 1>...};
}

// From this many activation rows on (prefill) the 5- and 6-bit formats run each panel from an Unpacked copy made
// once per panel, as the VNNI kernel does (block_avx512.cc), instead of merging the high bits once per 4 rows.
// `BLOCKSPEC_ISA=avx2 kernels_bench`, up 1536 x 8960, 1 thread, Xeon, 2 rounds, ms, M = 512 / 64: q6_k 168.0-168.2
// -> 141.9-143.7 / 21.4-21.5 -> 18.4-18.8, q5_k 138.0-138.5 -> 120.8-122.6 / 17.3-17.5 -> 15.6-15.8. The nibble
// formats read from the copy (2x the bytes from L2 per 4 rows) lost: q4_k 101.2-102.6 -> 108.3, q4_0 94.6-95.1 ->
// 97.9-99.7 (M = 64 likewise), so they keep the packed steps.
constexpr int64_t kUnpackRows = 17;

template <class F>
BS_AVX2 void gemm_impl(const BlockActs& a, const BlockWeights& w, float* y, int64_t tile0, int64_t tile1, bool pf) {
  constexpr auto table = panel_table<MicroFn, Micro<F>, kMaxMB>(std::make_integer_sequence<int, kMaxT>());
  BS_ASSERT(F::REC == w.record_bytes(), "record size of ", weight_format_name(w.format));
  if constexpr (F::BITS == 5 || F::BITS == 6) {
    if (a.M >= kUnpackRows) {
      using U = Fmt<Unpacked<F, false>>;
      constexpr auto utable = panel_table<MicroFn, Micro<U>, kMaxMB>(std::make_integer_sequence<int, kMaxT>());
      constexpr auto unpack = unpack_table<F, U>(std::make_integer_sequence<int, kMaxT>());
      return run_unpacked_panels(utable, unpack, U::REC, a, w, y, tile0, tile1, pf);
    }
  }
  run_panels(table, a, w, y, tile0, tile1, pf, static_cast<const uint8_t*>(nullptr));
}

}  // namespace

// gemm_block_avx2(_prefetch), or gemm_block_avxvnni(_prefetch) from block_avxvnni.cc.
#if BS_BLOCK_AVXVNNI
#define BS_BLOCK_GEMM(suffix) gemm_block_avxvnni##suffix
#else
#define BS_BLOCK_GEMM(suffix) gemm_block_avx2##suffix
#endif

BS_AVX2 void BS_BLOCK_GEMM()(const BlockActs& a, const BlockWeights& w, float* y, int64_t tile0, int64_t tile1) {
  with_block_fmt(w.format, [&]<class F>() { gemm_impl<Fmt<F>>(a, w, y, tile0, tile1, false); });
}

BS_AVX2 void BS_BLOCK_GEMM(_prefetch)(const BlockActs& a, const BlockWeights& w, float* y, int64_t tile0,
                                      int64_t tile1) {
  with_block_fmt(w.format, [&]<class F>() { gemm_impl<Fmt<F>>(a, w, y, tile0, tile1, true); });
}

}  // namespace blockspec
