// Packed layout of the GGUF block formats (tensor/block_quant.h) for the integer GEMM, made once at load with
// no change to any value, and of the activations that multiply them. Private to the kernels layer.
//
// Weights W [N, K] (K a multiple of the format's block B) are cut into tiles of 16 rows (N padded with zero
// rows), tiles grouped in panels of 4 (the last panel has Tp = 1..4 tiles), as Q8_G128 / Q4_G128 are
// (kernels/quant_layout.h). A panel is one contiguous stream of steps, one per block s = 0 .. K/B - 1; step s
// holds block s of the panel's 16 * Tp rows in the order the GEMM reads it: sub-block by sub-block (S inputs
// each; a 32-block is one sub-block), each part with the Tp tiles side by side (tile t of Tp, row r):
//   for each sub-block j:
//     lo  bits != 8: S/8 lines [Tp][16][4] bytes: byte (t, r, i) of line l = (u(r, 8L+i) & 15) | (u(r, 8L+4+i) & 15)
//                    << 4, L = j*S/8 + l the block's line
//         bits == 8: S/4 lines [Tp][16][4]: byte (t, r, i) of line l = u(r, 4L+i), L = j*S/4 + l
//         (one 64-byte line of one tile is one vpdpbusd operand: lane r holds 4 consecutive inputs of row r)
//     hi  bits 5 (S = 32): 1 line [Tp][16][4]: bit q of byte (t, r, i) = bit 4 of u(r, 32j + 4q + i), q < 8
//         bits 6 (S = 16): 1 line [Tp][16][4]: bits 2q, 2q+1 of byte (t, r, i) = bits 4, 5 of u(r, 16j + 4q + i), q < 4
//     sc  has_scale: [Tp][16] int8 (sc of row r, sub-block j);   mc  has_scale and has_min: [Tp][16] u8
//   d [Tp][16] f16 bits;   dm  has_min: [Tp][16] f16 bits
// so a step is as large as the file's 16 * Tp blocks, or for Q4_K / Q5_K 4 bytes per row more (the 6-bit
// scale/min pairs unpacked to bytes), and Q2_K / Q3_K codes take a nibble (2.6 -> 4.6 bits per weight). A GEMM
// that reads each sub-block's lines of every tile, then its scales, reads the step front to back: one stream,
// which the hardware prefetchers follow. (Tiles kept whole, one record after another, were read by the tiles-side-
// by-side VNNI kernel as Tp streams, and scale planes after the code planes as 2 more: 1-thread reads of those
// access orders from DRAM ran at 12-15 GB/s against 27-29 front to back, 2-core Zen 4 EPYC, /tmp microbenchmark
// of session 24; decode of the K-quants ran at half of q8_0's bandwidth.)
//
// Activations x [M, K] f32 are quantized per row and block of 32 inputs (kBlockActs; llama.cpp's Q8_0 / Q8_1
// for the 32-blocks; for the K-quants its Q8_K uses one scale per 256, which Qwen2.5's outlier channels make too
// coarse: KL against the f32-decoded file on Qwen2.5-Coder-1.5B Q4_K_M over 1,024 tokens of tinyshakespeare,
// `blockspec eval`, 0.0196 at 256, 0.0074 at 128, 0.0014 at 32): dx = amax / 127, code = round_half_even(x *
// (127 / amax)) in [-127, 127] as int8 (an all-zero block has dx 0, codes 0); per weight sub-block j of S inputs
// (S = 16 or 32) X_j = the sum of its codes and c_j = float(X_j) * dx of its activation block.
//
// Per output (m, n), exact sequence (every ISA performs exactly these operations, so outputs are bitwise equal
// to the scalar twin and independent of M, register blocking and thread split):
//   acc = 0
//   for each weight block s in input order:
//     blk = 0, mblk = 0
//     for each sub-block j of the block in order (activation block a):
//       I = sum_k u(n, k) * xq(m, k) - zero * X(m, j)        (int32, exact)
//       P = I * sc(n, j)                                      (sc = 1 without has_scale; int32, exact: |P| < 2^24
//                                                              for every format -- Q6_K 16 * 32 * 127 * 128 -- so
//                                                              float(P) is exact)
//       blk = fmaf(float(P), dx(m, a), blk)
//       has_min: mblk = fmaf(float(mc(n, j)), c(m, j), mblk)   (mc = 1 without has_scale)
//     acc = fmaf(blk, f32(d(n, s)), acc)
//     has_min: acc = fmaf(mblk, f32(dm(n, s)), acc)
//   y(m, n) = acc
// This is the dot product of the dequantized weights (d * sc * u - dm * mc, gguf-py's values) with the
// dequantized activations up to f32 rounding of the per-sub-block and per-block terms; the only approximation is
// the activations' int8 rounding. The scale multiplies the integer sum and d the block's float sum, so a
// sub-block costs an integer multiply, one conversion and one FMA (and for the min one conversion and one FMA)
// per output; llama.cpp's Q8_K dot products do the integer part the same way over 256 inputs, which its one
// activation scale per 256 allows.
#pragma once
#include <algorithm>
#include <cstdint>

#include "kernels/quant_layout.h"
#include "tensor/block_quant.h"

namespace blockspec {

inline constexpr int64_t kBlockActs = 32;  // inputs per activation scale

// Quantized activations of a block-format GEMM: q [M, K] int8, d [M, K / 32] f32, sums [M, K / S] int32 (X),
// csums [M, K / S] f32 (c). interleave > 1: the same values with the rows in blocks of `interleave` (the last
// block may be shorter) and, within a block of mb rows starting at m0, row m's element i at (i * mb + m - m0)
// after the block's offset m0 * (row length): q in 4-code units [K / 4][mb][4], d [K / 32][mb], sums and csums
// [K / S][mb]. The layout a kernel that reads several rows per weight load wants (KernelTable::
// block_acts_interleave); made once per linear rather than once per tile range.
struct BlockActs {
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const int32_t* sums = nullptr;
  const float* csums = nullptr;
  int64_t M = 0;
  int interleave = 0;
};

// Writes a's row-major activations (rows [m0, m1), m0 and m1 multiples of mb or m1 = M) interleaved in blocks
// of mb rows into q, d, sums, csums (arrays of a's sizes), as BlockActs::interleave = mb lays them out.
void interleave_block_acts(const BlockActs& a, int64_t K, int64_t S, int mb, int64_t m0, int64_t m1, int8_t* q,
                           float* d, int32_t* sums, float* csums);

// A packed block-format weight (a view into a QuantTensor's data).
struct BlockWeights {
  WeightFormat format = WeightFormat::kQ4_0;
  BlockQuantSpec spec{};
  const uint8_t* data = nullptr;
  int64_t N = 0, K = 0, n_blocks = 0, n_tiles = 0;

  int64_t lo_bytes() const { return spec.bits == 8 ? spec.block * 16 : spec.block * 8; }  // per tile
  int64_t hi_bytes() const { return spec.bits == 5 ? spec.block * 2 : spec.bits == 6 ? spec.block * 4 : 0; }
  int64_t sc_bytes() const { return spec.has_scale ? spec.subs() * 16 : 0; }
  int64_t mc_bytes() const { return spec.has_scale && spec.has_min ? spec.subs() * 16 : 0; }
  int64_t record_bytes() const { return lo_bytes() + hi_bytes() + sc_bytes() + mc_bytes() + (spec.has_min ? 64 : 32); }
  int64_t tile_bytes() const { return n_blocks * record_bytes(); }
  int64_t panel_tiles(int64_t t) const { return std::min(kQPanel, n_tiles - t / kQPanel * kQPanel); }
  // Step s of tile t's panel (Tp = panel_tiles(t) records' worth of bytes).
  const uint8_t* step(int64_t t, int64_t s) const {
    const int64_t p0 = t / kQPanel * kQPanel;
    return data + p0 * tile_bytes() + s * panel_tiles(t) * record_bytes();
  }
};

// Byte offsets inside a step of tile t's panel (tile t % 4 of Tp): the one definition of the step layout, used
// by the packer, the scalar twin and dequantize (the x86 kernels spell the same offsets with compile-time part
// sizes, kernels/x86/block_fmt.h). Per tile and sub-block: lo_lines() + hi_lines() lines, then sc and mc bytes.
inline int64_t bq_lo_lines(const BlockWeights& w) { return w.spec.bits == 8 ? w.spec.sub / 4 : w.spec.sub / 8; }
inline int64_t bq_hi_lines(const BlockWeights& w) { return w.spec.bits == 5 || w.spec.bits == 6 ? 1 : 0; }
inline int64_t bq_sub_bytes(const BlockWeights& w) {  // one tile's share of a sub-block's part of the step
  return (bq_lo_lines(w) + bq_hi_lines(w)) * 64 + (w.sc_bytes() + w.mc_bytes()) / w.spec.subs();
}
inline int64_t bq_lo_offset(const BlockWeights& w, int64_t t, int64_t r, int64_t k) {  // k < B
  const int64_t Tp = w.panel_tiles(t), line = w.spec.bits == 8 ? k / 4 : k / 8, L = bq_lo_lines(w);
  return line / L * bq_sub_bytes(w) * Tp + (line % L * Tp + t % kQPanel) * 64 + r * 4 + k % 4;
}
inline int64_t bq_hi_offset(const BlockWeights& w, int64_t t, int64_t r, int64_t k) {
  const int64_t Tp = w.panel_tiles(t), j = k / w.spec.sub;
  return j * bq_sub_bytes(w) * Tp + (bq_lo_lines(w) * Tp + t % kQPanel) * 64 + r * 4 + k % 4;
}
inline int bq_hi_shift(const BlockWeights& w, int64_t k) {
  return w.spec.bits == 5 ? static_cast<int>((k % 32) / 4) : static_cast<int>(2 * ((k % 16) / 4));
}
inline int64_t bq_sc_offset(const BlockWeights& w, int64_t t, int64_t r, int64_t j) {
  const int64_t Tp = w.panel_tiles(t);
  return j * bq_sub_bytes(w) * Tp + (bq_lo_lines(w) + bq_hi_lines(w)) * 64 * Tp + (t % kQPanel) * 16 + r;
}
inline int64_t bq_mc_offset(const BlockWeights& w, int64_t t, int64_t r, int64_t j) {
  return bq_sc_offset(w, t, r, j) + 16 * w.panel_tiles(t);
}
inline int64_t bq_d_offset(const BlockWeights& w, int64_t t, int64_t r) {
  const int64_t Tp = w.panel_tiles(t);
  return (w.lo_bytes() + w.hi_bytes() + w.sc_bytes() + w.mc_bytes()) * Tp + (t % kQPanel) * 32 + 2 * r;
}
inline int64_t bq_dm_offset(const BlockWeights& w, int64_t t, int64_t r) {
  return bq_d_offset(w, t, r) + 32 * w.panel_tiles(t);
}

// The code u of weight (n, k), n < 16 * n_tiles, k < K.
inline int bq_code(const BlockWeights& w, int64_t n, int64_t k) {
  const int64_t B = w.spec.block, r = n % kQTile, t = n / kQTile;
  const uint8_t* st = w.step(t, k / B);
  const int64_t kb = k % B;
  const uint8_t lo = st[bq_lo_offset(w, t, r, kb)];
  if (w.spec.bits == 8) return lo;
  int u = (kb % 8) < 4 ? (lo & 15) : (lo >> 4);
  if (w.spec.bits == 5) u |= ((st[bq_hi_offset(w, t, r, kb)] >> bq_hi_shift(w, kb)) & 1) << 4;
  if (w.spec.bits == 6) u |= ((st[bq_hi_offset(w, t, r, kb)] >> bq_hi_shift(w, kb)) & 3) << 4;
  return u;
}

// The QBlock of row n, block s (every field as packed).
QBlock bq_block(const BlockWeights& w, int64_t n, int64_t s);

struct QuantTensor;
// Views a block-format QuantTensor's buffer (kernels/block_quant_pack.cc).
BlockWeights block_weights(const QuantTensor& w);

}  // namespace blockspec
