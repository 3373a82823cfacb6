// AVX-512 VNNI GEMM for the GGUF block formats (layout and exact arithmetic: kernels/block_layout.h).
//
// Micro-kernel: T tiles of one panel (16 rows each, one zmm of int32 lanes: lane r is row r) times MB
// activation rows. Per input quad it builds each tile's 16 x 4 unsigned codes (one 64-byte lo line, nibble
// split, plus the hi plane's bits for 5- and 6-bit codes) and issues vpdpbusd against the broadcast 4 int8
// activation codes of each row: codes unsigned, activations signed, so no offset correction. Each sub-block's
// int32 sum starts at -zero * X; at its end the sum is converted, multiplied by float(sc) (the twin's int32
// product I * sc, bit for bit: both factors and the product, |I * sc| < 2^24, are exact in f32; vmulps is one
// uop where vpmulld is two on Intel cores) and folded into the block's f32 sum with dx, and the min term into
// its own with float(mc) and c; at the block end both go into the output with d and dm. Every lane visits its
// inputs in order, so each output follows the scalar twin's sequence exactly. Rows per micro-kernel: up to 8
// (kBlockVnniRows), one tile per pass at 8 rows: kernels_bench, 1 thread, 2-core Zen 4
// EPYC, up 1536 x 8960, against 4 rows by two tiles (b391a58), M = 512: q4_k 49.7 -> 45.7 ms, q5_k 58.3 -> 46.8,
// q6_k 64.1 -> 56.1, q4_0 42.7 -> 40.6, q4_1 and q8_0 level; M = 8 level or faster. From 17 rows on (prefill)
// the sub-byte formats unpack each panel once into bytes and f32 scales (Unpacked<F, true>, block_fmt.h) and run
// the same kernel on that copy: kernels_bench, 1 thread, Xeon, up 1536 x 8960, M = 512, 2 rounds: q4_k
// 39.6-39.9 -> 35.2-36.0 ms, q5_k 45.1-45.2 -> 35.8-38.8, q6_k 55.2-55.5 -> 47.4-47.5, q4_0 38.4-38.9 -> 34.5-35.4;
// M = 64 -11 to -18%.
//
// GCC 12 warns falsely inside its own avx512fintrin.h (_mm512_undefined_ps).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "base/error.h"
#include "kernels/kernel_table.h"
#include "kernels/x86/block_fmt.h"
#include "kernels/x86/panel_gemm.h"

#define BS_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")))

namespace blockspec {

namespace {

constexpr int kMaxT = kQPanel;
constexpr int kMaxMB = kBlockVnniRows;

// acc += u8(a) . s8(the 4 bytes at p, broadcast), the broadcast folded into the instruction ({1to16}); inline
// asm: see quant_avx512.cc for why.
using AliasI32 = int32_t __attribute__((may_alias));
BS_VNNI inline __m512i dpbusd_b(__m512i acc, __m512i a_u8, const int8_t* p) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(a_u8), "m"(*reinterpret_cast<const AliasI32*>(p)));
  return acc;
}

// The 16 x 4 unsigned codes of quad q (inputs 4q..4q+3 of a sub-block) of one tile: the sub-block's lo lines at
// lo + i * LS, its hi line at hi (LS = Tp * 64, the step's line stride, block_layout.h).
template <class F, int64_t LS>
BS_VNNI inline __m512i codes(const uint8_t* lo, const uint8_t* hi, int q) {
  if constexpr (F::BYTES) {
    return _mm512_loadu_si512(lo + q * LS);
  } else {
    const __m512i v = _mm512_loadu_si512(lo + (q / 2) * LS), low4 = _mm512_set1_epi8(0x0F);
    __m512i u = (q % 2) == 0 ? _mm512_and_si512(v, low4) : _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
    // u | (hb & mask) in one vpternlogd (0xF8: a | (b & c)).
    if constexpr (F::BITS == 5) {
      const __m512i h = _mm512_loadu_si512(hi + (q / 8) * LS);
      const int c = q % 8;  // bit c of each byte -> bit 4
      const __m512i hb = c == 4 ? h : c < 4 ? _mm512_slli_epi32(h, 4 - c) : _mm512_srli_epi32(h, c - 4);
      u = _mm512_ternarylogic_epi32(u, hb, _mm512_set1_epi8(0x10), 0xF8);
    } else if constexpr (F::BITS == 6) {
      const __m512i h = _mm512_loadu_si512(hi + (q / 4) * LS);
      const int c = 2 * (q % 4);  // bits c, c+1 of each byte -> bits 4, 5
      const __m512i hb = c == 4 ? h : c < 4 ? _mm512_slli_epi32(h, 4 - c) : _mm512_srli_epi32(h, c - 4);
      u = _mm512_ternarylogic_epi32(u, hb, _mm512_set1_epi8(0x30), 0xF8);
    }
    return u;
  }
}

// The nibble formats (Q4_0 / Q4_1 / Q4_K, and Q2_K / Q3_K stored as nibbles) at one activation row: an odd quad
// (the high nibbles of a line) is masked with 0xF0 instead of shifted down, and summed in its own accumulator as
// 16 u x; the sub-block's integer sum is then acc + (acc16 >> 4), exact (a multiple of 16; |acc16| < 2^23). One
// shift fewer per odd quad for one shift and one add per sub-block, and the registers allow it at MB = 1.
template <class F, int MB>
inline constexpr bool kSplitNibbles = F::BITS <= 4 && !F::BYTES && MB == 1;

// Tiles one pass keeps in registers: the int32 sums (two with kSplitNibbles), the block sums blk and mblk of
// every tile and row, at most 24 of the 32 zmm from 5 rows on. A panel of more tiles runs in several passes over
// the same activation rows (each weight is still read once). Up to 4 rows (decode, verification of up to 3 drafts)
// a pass takes the whole panel, registers spilling as they may: a second pass re-reads the panel from L2 with no
// DRAM stream meanwhile, and 3- and 4-row verification paid for it. kernels_bench, 2 threads, weights from DRAM,
// 2-core Zen 4 EPYC, 3 rounds interleaved, medians, up 1536 x 8960 / down 8960 x 1536, us, multi-pass -> one pass:
// M = 3 q4_k 360 -> 228 / 356 -> 251, q4_1 456 -> 251 / 568 -> 271, q5_k 433 -> 352 / 413 -> 341, q8_0 475 -> 412
// / 462 -> 430; M = 4 q4_k 325 -> 242 / 370 -> 274, q6_k 562 -> 391 / 528 -> 406, q4_0 285 -> 237 / 314 -> 260,
// q8_0 558 -> 424 / 654 -> 461, q5_k level. (Two tiles a pass from 5 rows on, spilling likewise, was 1.1-1.3x
// slower at M = 8 and 64.) The 32-blocks (no sub-block scales, no block sums across sub-blocks) keep one pass up
// to 7 rows (verification of up to 6 drafts): the same bench, 2 rounds, us, up / down, several passes -> one:
// M = 5 q4_0 387-480 -> 258-273 / 428-447 -> 276-288, q4_1 378-552 -> 263-378 / 375-384 -> 294-306, q8_0 506-540 ->
// 381-405 / 604-619 -> 416-456; M = 6 q4_0 497-499 -> 323-336, q4_1 427-442 -> 338-345, q8_0 541-592 -> 394-405 (up);
// M = 7 q4_0 418-419 -> 359-393, q4_1 408-430 -> 361-369, q8_0 551-590 -> 433-441 (up). At 8 rows it measured
// level to slower (q4_0 up 474-489 -> 473-587), at 64 1.2-1.3x slower; q4_k at 5 rows 1.1x slower, q6_k level.
template <class F, int MB>
inline constexpr int kTilesPerPass =
    MB <= 4 || (F::B == 32 && MB <= 7) ? kMaxT
            : std::max(1, std::min(kMaxT, 24 / (MB * ((F::MIN ? 3 : 2) + (kSplitNibbles<F, MB> ? 1 : 0)))));

// One row's 16 outputs of tile `tile` into y_row (that row of y, [w.N]), masked past the weight's last row.
BS_VNNI inline void store_tile(const BlockWeights& w, int64_t tile, float* y_row, __m512 v) {
  const int64_t n = tile * kQTile;
  const int64_t valid = std::min<int64_t>(kQTile, w.N - n);
  _mm512_mask_storeu_ps(y_row + n, static_cast<__mmask16>((1u << valid) - 1u), v);
}

// Constants of format F's steps of Tp tiles (block_layout.h).
template <class F, int Tp>
struct StepGeom {
  static constexpr int NS = F::B / F::S, QPS = F::S / 4;  // sub-blocks per block, quads per sub-block
  static constexpr int64_t LS = Tp * 64;  // line stride of a step
  // Sub-block j of a step at j * SJ: its lo lines, then hi lines at HO, sc at SC, mc at SC + Tp * 16; d at DD.
  static constexpr int64_t SJ = F::SUB * Tp, HO = F::LOL * LS, SC = (F::LOL + F::HIL) * LS;
  static constexpr int64_t DD = (F::LO + F::HI + F::SCB + F::MCB) * Tp;
  static constexpr int64_t SCW = F::FSC ? 64 : 16;  // bytes of one tile's sc (and mc)
  static constexpr int64_t kQuads = NS * QPS;
};

// One step (block) of tiles t0 .. t0 + T - 1 of a Tp-tile panel against MB rows: facc[t][m] += the block's sums
// times d (and the min term times dm). rec0: the step; xq, xs, xc, xd: the rows' codes, sums, csums and scales of
// this block (interleaved, [F::B / 4][MB][4], [NS][MB], [NS][MB], [F::B / 32][MB]). pf: when not null, quad q of
// the step prefetches LPQ lines from pf + q * LPQ * 64 (its share of the stream; tiles() says why).
template <class F, int T, int MB, int Tp, int64_t LPQ, bool Rolled = false>
BS_VNNI __attribute__((always_inline)) inline void step(const uint8_t* rec0, int64_t t0, const int8_t* xq,
                                                        const int32_t* xs, const float* xc, const float* xd,
                                                        __m512 (&facc)[T][MB], const uint8_t* pf) {
  using G = StepGeom<F, Tp>;
  constexpr int NS = G::NS, QPS = G::QPS;
  constexpr int64_t LS = G::LS, SJ = G::SJ, HO = G::HO, SC = G::SC, DD = G::DD, SCW = G::SCW;
  constexpr bool split = kSplitNibbles<F, MB>;
  const __m512i high4 = _mm512_set1_epi8(static_cast<char>(0xF0));
  __m512 blk[T][MB], mblk[T][MB];
  #pragma GCC unroll 16
  for (int t = 0; t < T; ++t)
    #pragma GCC unroll 16
    for (int m = 0; m < MB; ++m) blk[t][m] = _mm512_setzero_ps(), mblk[t][m] = _mm512_setzero_ps();
  // Sub-blocks fully unrolled, except the 16-input ones (q6_k, q3_k, q2_k) at 4 rows or more, one per
  // iteration: kernels_bench, 1 thread, Zen 4 EPYC, q6_k M = 512 59.5 -> 55.6 ms rolled (M = 8 level); q4_k
  // rolled is slower at M = 8 (1.42 against 1.25-1.30 ms) and level at M = 512, q5_k level.
  constexpr int JU = Rolled || (MB >= 4 && F::S == 16) ? 1 : NS;
  #pragma GCC unroll 1
  for (int jo = 0; jo < NS; jo += JU) {
  #pragma GCC unroll 16
  for (int j = jo; j < jo + JU; ++j) {
    const uint8_t* sub = rec0 + j * SJ;  // sub-block j of the step
    __m512i acc[T][MB], acc16[T][MB];
    #pragma GCC unroll 16
    for (int t = 0; t < T; ++t)
      #pragma GCC unroll 16
      for (int m = 0; m < MB; ++m) {
        // The zero-point term -zero * X starts the sum (the same int32 as subtracting it at the end, one
        // vector op fewer per tile, row and sub-block).
        acc[t][m] = F::Z != 0 ? _mm512_set1_epi32(-F::Z * xs[j * MB + m]) : _mm512_setzero_si512();
        acc16[t][m] = _mm512_setzero_si512();
      }
    #pragma GCC unroll 8
    for (int qq = 0; qq < QPS; ++qq) {
      const int q = j * QPS + qq;
      if (pf != nullptr) prefetch_ahead(pf + q * LPQ * 64, LPQ * 64);  // this quad's share of the stream
      const bool hi16 = split && q % 2 == 1;  // this quad's codes are 16 u (kSplitNibbles)
      __m512i u[T];
      #pragma GCC unroll 16
      for (int t = 0; t < T; ++t)
        u[t] = hi16 ? _mm512_and_si512(_mm512_loadu_si512(sub + (t0 + t) * 64 + (qq / 2) * LS), high4)
                    : codes<F, LS>(sub + (t0 + t) * 64, sub + HO + (t0 + t) * 64, qq);
      #pragma GCC unroll 16
      for (int m = 0; m < MB; ++m) {
        const int8_t* b = xq + (q * MB + m) * 4;
        #pragma GCC unroll 16
        for (int t = 0; t < T; ++t) {
          if (hi16) acc16[t][m] = dpbusd_b(acc16[t][m], u[t], b);
          else acc[t][m] = dpbusd_b(acc[t][m], u[t], b);
        }
      }
    }
    const int ja = j * F::S / kBlockActs;  // activation block of sub-block j, within the block
    #pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const uint8_t* r = sub + SC + (t0 + t) * SCW;  // sc; mc Tp * SCW on
      __m512 scf = _mm512_set1_ps(1.f);
      __m512 mcf = _mm512_set1_ps(1.f);
      if constexpr (F::SC && F::FSC) {
        scf = _mm512_loadu_ps(r);
        if constexpr (F::MIN) mcf = _mm512_loadu_ps(r + Tp * SCW);
      } else if constexpr (F::SC) {
        scf = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r))));
        if constexpr (F::MIN)
          mcf = _mm512_cvtepi32_ps(
              _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + Tp * 16))));
      }
      #pragma GCC unroll 16
      for (int m = 0; m < MB; ++m) {
        __m512i I = acc[t][m];
        if constexpr (split) I = _mm512_add_epi32(I, _mm512_srai_epi32(acc16[t][m], 4));
        __m512 P = _mm512_cvtepi32_ps(I);
        if constexpr (F::SC) P = _mm512_mul_ps(P, scf);  // == float(I * sc): both exact, |I * sc| < 2^24
        blk[t][m] = _mm512_fmadd_ps(P, _mm512_set1_ps(xd[ja * MB + m]), blk[t][m]);
        if constexpr (F::MIN) mblk[t][m] = _mm512_fmadd_ps(mcf, _mm512_set1_ps(xc[j * MB + m]), mblk[t][m]);
      }
    }
  }
  }
  #pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
    const uint8_t* r = rec0 + DD + (t0 + t) * 32;  // d; dm Tp * 32 bytes on
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r)));
    const __m512 dm = F::MIN ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r + Tp * 32)))
                             : _mm512_setzero_ps();
    #pragma GCC unroll 16
    for (int m = 0; m < MB; ++m) {
      facc[t][m] = _mm512_fmadd_ps(blk[t][m], d, facc[t][m]);
      if constexpr (F::MIN) facc[t][m] = _mm512_fmadd_ps(mblk[t][m], dm, facc[t][m]);
    }
  }
}

// Tiles t0 .. t0 + T - 1 of the panel starting at tile `tile` (Tp tiles) times activation rows m0 .. m0 + MB - 1,
// all the panel's steps in one pass with the output sums in registers.
// prefetch_small: prefetch the steps up to 4 rows too (gemm_block_avx512vnni_prefetch).
// panel: the panel's steps in F's layout (w.step(tile, 0), or an Unpacked copy).
template <class F, int T, int MB, int Tp>
BS_VNNI void tiles(const BlockActs& a, const BlockWeights& w, const uint8_t* panel, float* y, int64_t tile, int64_t t0,
                   int64_t m0, bool prefetch_small) {
  using G = StepGeom<F, Tp>;
  const int64_t K = w.K, nb = w.n_blocks, KS = K / F::S, KA = K / kBlockActs;
  __m512 facc[T][MB];
  #pragma GCC unroll 16
  for (int t = 0; t < T; ++t)
    #pragma GCC unroll 16
    for (int m = 0; m < MB; ++m) facc[t][m] = _mm512_setzero_ps();
  // Rows m0 .. m0 + MB - 1 interleaved (interleave_rows): one pointer per array, compile-time offsets per row,
  // each advanced block by block.
  const int8_t* xq = a.q + m0 * K;      // [K / 4][MB][4]
  const int32_t* xs = a.sums + m0 * KS;  // [K / S][MB]
  const float* xc = a.csums + m0 * KS;   // [K / S][MB]
  const float* xd = a.d + m0 * KA;       // [K / 32][MB]
  for (int64_t s = 0; s < nb; ++s) {
    const uint8_t* rec0 = panel + s * Tp * F::REC;  // the step
    // Prefetch history: with the tiles kept whole (before the steps interleaved them, block_layout.h) a step was
    // read as Tp streams, which the hardware prefetchers followed poorly; prefetching it took decode of
    // Qwen2.5-Coder-1.5B Q4_K_M from 16.7 to 23.7 tok/s on a Xeon with AVX-512 VNNI.
    // Software prefetch once per step (by its first pass), for the 256-blocks at 5 to 16 activation rows. Up to
    // 4 rows (decode, short verification) read the step front to back faster with the hardware prefetchers
    // alone, and a prefill batch is compute-bound and runs faster without too. kernels_bench, weights from DRAM,
    // 2-core Zen 4 EPYC, 2 rounds, GB/s at 1 / 2 threads, with -> without: up 1536 x 8960, M = 1 q4_k 13-15 /
    // 22-24 -> 22-27 / 28-30, q5_k 13-14 / 21-26 -> 17-18 / 25, q6_k 13-15 / 21-27 -> 19 / 26-27; M = 4 (2
    // threads, up / down) q4_k 17-18 / 15-17 -> 23-24 / 18, q6_k 17 / 16-17 -> 20-22 / 21-22; M = 8 q4_k 6.6-7.3
    // / 10-13 -> 5.3-6.2 / 9.5-13, q5_k 5.6-6.8 / 10-13 -> 3.8-3.9 / 7, q6_k 2 threads 13-14 -> 11-14; M = 512
    // GMAC/s (2 threads, the layout before this one) q4_k 262-266 -> 285-288, q6_k 217-236 -> 255-258. The
    // 32-blocks (q4_0, q8_0) ran faster without at M = 1 (29-31 / 32-51 against 22 / 31-39 GB/s).
    // On Intel Xeons the hardware prefetchers alone leave the small-M stream latency-bound, and the prefetch pays
    // there at every M up to 16, the 32-blocks included (prefetch_small; dispatch.cc has the measurements).
    // There the 256-blocks spread it over the step: each quad prefetches its share (kLPQ lines, the same
    // distances) instead of the whole step at its start. A burst of ~300 prefetches fills the line-fill buffers and
    // stalls the vpdpbusd behind it; spread, the stream overlaps the compute, which from 2 rows on takes as long
    // as the stream itself (kernels_bench, weights in L3 against from DRAM: q4_k up M = 4, 2 threads, 300 / 406 us).
    // kernels_bench, Xeon, 2 threads, weights from DRAM, 3 rounds, us, burst -> spread: q4_k up M = 2 314-349 ->
    // 279-300, M = 3 327-355 -> 280-303, M = 4 387-402 -> 298-351, M = 8 518-547 -> 501-525; q6_k up M = 3 446-459
    // -> 395-406, M = 4 566-596 -> 418-501, M = 1 (1 thread) 725-783 -> 664-691. The 32-blocks measured level to
    // slower spread (q4_0 up M = 4 305-331 -> 331-376, M = 8 512-516 -> 535-577) and keep the burst.
    const bool pf_step = t0 == 0 && a.M <= 16 && (prefetch_small || (F::B == 256 && a.M > 4));
    const bool spread = F::B == 256 && pf_step && prefetch_small;
    if (pf_step && !spread) prefetch_ahead(rec0, Tp * F::REC);
    constexpr int64_t kLPQ = share_lines(Tp * F::REC, G::kQuads);  // lines a quad
    step<F, T, MB, Tp, kLPQ>(rec0, t0, xq, xs, xc, xd, facc, spread ? rec0 : nullptr);
    xq += F::B * MB;
    xs += G::NS * MB;
    xc += G::NS * MB;
    xd += F::B / kBlockActs * MB;
  }
  #pragma GCC unroll 16
  for (int t = 0; t < T; ++t)
    #pragma GCC unroll 16
    for (int m = 0; m < MB; ++m) store_tile(w, tile + t0 + t, y + (m0 + m) * w.N, facc[t][m]);
}

// Tiles T0 .. T0 + n - 1 of one step (step()) with their output sums kept in fm ([Tp][MB][16] f32) between steps.
// pf: the start of this group's share of the step's stream (LPQ lines a quad), or null.
template <class F, int n, int MB, int Tp, int64_t LPQ>
BS_VNNI __attribute__((always_inline)) inline void step_group(const uint8_t* rec0, int64_t T0, const int8_t* xq,
                                                              const int32_t* xs, const float* xc, const float* xd,
                                                              float* fm, const uint8_t* pf) {
  __m512 f[n][MB];
  #pragma GCC unroll 16
  for (int t = 0; t < n; ++t)
    #pragma GCC unroll 16
    for (int m = 0; m < MB; ++m) f[t][m] = _mm512_load_ps(fm + ((T0 + t) * MB + m) * 16);
  step<F, n, MB, Tp, LPQ, true>(rec0, T0, xq, xs, xc, xd, f, pf);
  #pragma GCC unroll 16
  for (int t = 0; t < n; ++t)
    #pragma GCC unroll 16
    for (int m = 0; m < MB; ++m) _mm512_store_ps(fm + ((T0 + t) * MB + m) * 16, f[t][m]);
}

// The Tp-tile panel starting at `tile` times rows m0 .. m0 + MB - 1, step by step (step_groups): the order for 5 to
// 16 rows on Intel (micro). In passes (tiles()), the first pass streams the panel from DRAM with a quarter of the
// compute to hide it behind, and the other passes compute from L2 with no stream at all; by steps, every group's
// compute overlaps the stream. Each output lane still takes its steps in order with the same operations. The
// step's sub-blocks run rolled here (q4_k and q5_k unrolled them in passes): a step's code is one copy for every
// group, and q4_k's unrolled step measured slower by steps than in passes. kernels_bench, Xeon (family 6 model
// 207), 2 threads, weights from DRAM, 2 rounds, us, passes (with the spread prefetch) -> by steps: up M = 5 q4_k
// 471-509 -> 408-425, M = 8 q4_k 579-617 -> 410-509, q5_k 666-687 -> 455-594, q6_k 702-857 -> 574-749, M = 6
// q4_k 535-588 -> 416-445; down M = 8 q4_k 658-678 -> 511-532, q6_k 790-943 -> 623-663; M = 16 mixed (q4_k up
// 839-1010 -> 738-1186, q6_k 1155-1501 -> 1092-1390). Measured on Intel only (session 35 found a step-major order
// no faster on AMD, before the spread prefetch): AMD keeps the passes.
template <class F, int MB, int Tp>
BS_VNNI void panel_by_steps(const BlockActs& a, const BlockWeights& w, float* y, int64_t tile, int64_t m0) {
  using G = StepGeom<F, Tp>;
  const int64_t K = w.K, KS = K / F::S, KA = K / kBlockActs;
  alignas(64) float fm[Tp * MB * 16];
  std::fill(fm, fm + Tp * MB * 16, 0.f);
  const uint8_t* panel = w.step(tile, 0);
  // Groups of TP tiles (kTilesPerPass), the last one shorter where TP does not divide Tp; group g prefetches the
  // g-th share of the step's stream over its quads, so the stream is spread over the whole step's compute. The
  // groups of a step run in a loop, one copy of the step's code: inlined per group, q4_k's fully unrolled
  // sub-blocks overflowed the instruction cache (kernels_bench q4_k up M = 8, 2 threads: 509-594 -> 607-643 us).
  constexpr int TP = kTilesPerPass<F, MB>, kFull = Tp / TP, kRest = Tp % TP, kGroups = kFull + (kRest ? 1 : 0);
  constexpr int64_t LPQ = share_lines(Tp * F::REC, kGroups * G::kQuads);
  constexpr int64_t kShare = G::kQuads * LPQ * 64;  // bytes of one group's share
  for (int64_t s = 0; s < w.n_blocks; ++s) {
    const uint8_t* rec0 = panel + s * Tp * F::REC;
    const int8_t* xq = a.q + m0 * K + s * F::B * MB;
    const int32_t* xs = a.sums + m0 * KS + s * G::NS * MB;
    const float* xc = a.csums + m0 * KS + s * G::NS * MB;
    const float* xd = a.d + m0 * KA + s * (F::B / kBlockActs) * MB;
    #pragma GCC unroll 1
    for (int g = 0; g < kFull; ++g)
      step_group<F, TP, MB, Tp, LPQ>(rec0, g * TP, xq, xs, xc, xd, fm, rec0 + g * kShare);
    if constexpr (kRest != 0)
      step_group<F, kRest, MB, Tp, LPQ>(rec0, kFull * TP, xq, xs, xc, xd, fm, rec0 + kFull * kShare);
  }
  for (int t = 0; t < Tp; ++t)
    for (int m = 0; m < MB; ++m) store_tile(w, tile + t, y + (m0 + m) * w.N, _mm512_load_ps(fm + (t * MB + m) * 16));
}

// T tiles (one panel) times MB rows: passes of kTilesPerPass tiles, each weight read once per MB rows.
// (kernels_bench, 1 thread, cache-resident weights, up M = 512: one tile at a time with 8 rows measured no faster
// for q4_k / q6_k and slower for q4_1 / q8_0 under the earlier per-sub-block fold.)
// panel: null for w's own steps.
template <class F, int T, int MB, int T0 = 0>
BS_VNNI void micro(const BlockActs& a, const BlockWeights& w, float* y, int64_t tile, int64_t m0, bool pf,
                   const uint8_t* panel) {
  if constexpr (T0 == 0 && F::B == 256 && kTilesPerPass<F, MB> < T) {
    if (pf && panel == nullptr && a.M <= 16) return panel_by_steps<F, MB, T>(a, w, y, tile, m0);
  }
  constexpr int n = std::min(kTilesPerPass<F, MB>, T - T0);
  tiles<F, n, MB, T>(a, w, panel ? panel : w.step(tile, 0), y, tile, T0, m0, pf);
  if constexpr (T0 + n < T) micro<F, T, MB, T0 + n>(a, w, y, tile, m0, pf, panel);
}

using MicroFn = void (*)(const BlockActs&, const BlockWeights&, float*, int64_t, int64_t, bool, const uint8_t*);

template <class F>
struct Micro {
  template <int T, int MB>
  static constexpr MicroFn fn = &micro<F, T, MB>;
};

// The Tp-tile panel starting at `tile` as Unpacked<F, true> steps into out (n_blocks * Tp * its REC bytes):
// codes by codes<> (the split and hi-bit merge the kernel would do), scales by the conversion it would do.
template <class F, int Tp>
BS_VNNI void unpack_panel(const BlockWeights& w, int64_t tile, uint8_t* out) {
  using U = Unpacked<F, true>;
  using G = StepGeom<F, Tp>;
  constexpr int NS = G::NS, QPS = G::QPS;
  constexpr int64_t LS = G::LS, HO = G::HO, SC = G::SC, DD = G::DD, UDD = StepGeom<U, Tp>::DD;
  const uint8_t* panel = w.step(tile, 0);
  for (int64_t s = 0; s < w.n_blocks; ++s) {
    const uint8_t* rec = panel + s * Tp * F::REC;
    prefetch_ahead(rec, Tp * F::REC);  // a DRAM stream with little work per byte
    uint8_t* o = out + s * Tp * U::REC;
    for (int j = 0; j < NS; ++j) {
      const uint8_t* sub = rec + j * G::SJ;
      uint8_t* os = o + j * U::SUB * Tp;
      #pragma GCC unroll 8
      for (int qq = 0; qq < QPS; ++qq)
        for (int t = 0; t < Tp; ++t)
          _mm512_storeu_si512(os + qq * LS + t * 64, codes<F, LS>(sub + t * 64, sub + HO + t * 64, qq));
      if constexpr (F::SC) {
        for (int t = 0; t < Tp; ++t) {
          const __m128i r = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sub + SC + t * 16));
          _mm512_storeu_ps(os + QPS * LS + t * 64, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(r)));
          if constexpr (F::MIN) {
            const __m128i m = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sub + SC + Tp * 16 + t * 16));
            _mm512_storeu_ps(os + QPS * LS + Tp * 64 + t * 64, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(m)));
          }
        }
      }
    }
    std::copy(rec + DD, rec + DD + (F::MIN ? 64 : 32) * Tp, o + UDD);  // d, dm
  }
}

using UnpackFn = void (*)(const BlockWeights&, int64_t, uint8_t*);
template <class F, int... T>
constexpr std::array<UnpackFn, sizeof...(T)> unpack_table(std::integer_sequence<int, T...>) {
  return {&unpack_panel<F, T + 1>...};
}

// From this many activation rows on, the sub-byte formats run each panel from an Unpacked copy (made once per
// panel, L2-resident: 4 tiles x K bytes of codes plus their scales) rather than from the file's blocks, whose
// nibble split and hi-bit merge the 8-row kernel otherwise repeats for every 8 rows. At 8 rows the split was 96
// of the ~370 ops per 512 vpdpbusd of a Q4_K step and the scale conversions 32, on the two ports vpdpbusd issues
// on (perf annotate, Xeon, prefill of Qwen2.5-Coder-1.5B Q4_K_M). At 9-16 rows (two row blocks) unpacking was
// slower (kernels_bench, Xeon, 2 threads, M = 16, us: q4_k up 848-876 -> 1199-1212, q6_k up 1249-1348 -> 1410-1472):
// the unpack streams the panel from DRAM with nothing to overlap it, where the packed kernel's first pass computes
// as it streams. Its prefetch (unpack_panel) helps from 17 rows: M = 64 q4_k up 2661-3091 -> 2535-2537.
constexpr int64_t kUnpackRows = 17;

template <class F>
BS_VNNI void gemm_rows(const BlockActs& a, const BlockWeights& w, float* y, int64_t tile0, int64_t tile1, bool pf) {
  constexpr auto table = panel_table<MicroFn, Micro<F>, kMaxMB>(std::make_integer_sequence<int, kMaxT>());
  if constexpr (!F::BYTES) {
    if (a.M >= kUnpackRows) {
      using U = Unpacked<F, true>;
      constexpr auto utable = panel_table<MicroFn, Micro<U>, kMaxMB>(std::make_integer_sequence<int, kMaxT>());
      constexpr auto unpack = unpack_table<F>(std::make_integer_sequence<int, kMaxT>());
      return run_unpacked_panels(utable, unpack, U::REC, a, w, y, tile0, tile1, pf);
    }
  }
  run_panels(table, a, w, y, tile0, tile1, pf, static_cast<const uint8_t*>(nullptr));
}

template <class F>
BS_VNNI void gemm_impl(const BlockActs& a, const BlockWeights& w, float* y, int64_t tile0, int64_t tile1, bool pf) {
  BS_ASSERT(F::REC == w.record_bytes(), "record size of ", weight_format_name(w.format));
  // One row is its own interleave; block_linear hands over several rows interleaved (block_acts_interleave).
  if (a.M == 1 || a.interleave == kMaxMB) return gemm_rows<F>(a, w, y, tile0, tile1, pf);
  BS_ASSERT(a.interleave == 0, "activations interleaved by ", a.interleave, " rows, the kernel reads ", kMaxMB);
  const int64_t K = w.K, KS = K / F::S, KA = K / kBlockActs;
  std::vector<int8_t> q(a.M * K);
  std::vector<int32_t> sums(a.M * KS);
  std::vector<float> csums(a.M * KS), d(a.M * KA);
  interleave_block_acts(a, K, F::S, kMaxMB, 0, a.M, q.data(), d.data(), sums.data(), csums.data());
  gemm_rows<F>(BlockActs{q.data(), d.data(), sums.data(), csums.data(), a.M, kMaxMB}, w, y, tile0, tile1, pf);
}

}  // namespace

BS_VNNI void gemm_block_avx512vnni(const BlockActs& a, const BlockWeights& w, float* y, int64_t tile0, int64_t tile1) {
  with_block_fmt(w.format, [&]<class F>() { gemm_impl<F>(a, w, y, tile0, tile1, false); });
}

BS_VNNI void gemm_block_avx512vnni_prefetch(const BlockActs& a, const BlockWeights& w, float* y, int64_t tile0,
                                            int64_t tile1) {
  with_block_fmt(w.format, [&]<class F>() { gemm_impl<F>(a, w, y, tile0, tile1, true); });
}

}  // namespace blockspec
