// Packed layouts of the integer weight formats (Q8_G128, Q4_G128) and of the
// quantized activations, shared by make_weight (kernels/quant.cc), the scalar
// twins (ref/quant_ref.cc) and the x86 kernels. Private to the kernels layer.
//
// Weights W [N, K] (row n = output feature) are cut into tiles of 16 rows; N
// is padded with zero rows to n_tiles * 16 and K with zero inputs to
// Kp = round_up(K, 8). Group g covers inputs [128 g, min(128 g + 128, Kp)), so
// K = 576 has 4 groups of 128 and one of 64; G = ceil(Kp / 128).
//
// Tiles are grouped in panels of 4 (64 rows; the last panel has Tp = 1..4
// tiles) and a panel's codes are interleaved so that one panel, and so one
// thread's share of the matrix, is a single contiguous stream:
//   Q8 codes   [n_panels][Kp/4][Tp][16][4] int8: byte (q, i, r, j) of panel P =
//     code(64P + 16i + r, 4q + j). One 64-byte line holds 4 consecutive inputs
//     of 16 rows, which is exactly one vpdpbusd operand: lane r of the zmm
//     accumulates row r, so 16 outputs build up with no horizontal sum.
//   Q4 codes   [n_panels][Kp/8][Tp][16][4] bytes: byte (p, i, r, j) holds
//     low nibble = code(64P + 16i + r, 8p + j) + 8,
//     high nibble = code(64P + 16i + r, 8p + 4 + j) + 8.
//     One AND (low) or shift+AND (high), minus 8, gives the vpdpbusd operand
//     of input quad 2p or 2p + 1, the same lane order as Q8.
//   Why panels: with one stream per tile, the "up" shape (K = 1536, 12 KB per
//   q4 tile) restarted 4 short streams every panel; q4 decode read 17 GB/s
//   there against 23 GB/s with panels (medians of 5 interleaved A/B runs, 1
//   thread, 2-core EPYC); q8 and K = 8960 were unchanged.
//   scales     [n_tiles, G, 16] f32: scale of row 16t + r in group g (one zmm per tile).
//   corr       [n_tiles, G, 16] i32: 128 * sum of the row's codes in group g, the
//     correction for the +128 offset of the u8 activations (see below).
//
// Activations x [M, K] f32 are quantized per row and per group of 128 (the same
// groups as the weights, so one outlier channel costs precision only in its own
// group): scale = max|x| / 127, code = round_half_even(x * (127 / max|x|))
// clamped to [-127, 127], stored as u8 code + 128 in q [M, Kp] (padding = 128,
// i.e. code 0), with scales [M, G] f32. An all-zero group has scale 0, codes 0.
// Compressed-tensors W8A8 checkpoints declare per-token activations and run
// them so (QuantTensor::act_per_token, kernel quantize_acts_token: vLLM's one
// absmax per row, its scale repeated in the row's G slots); the GEMM is the same.
//
// Per output: acc = 0; for each group g in order:
//   d   = sum_k q[m, k] * code(n, k) - corr[n, g]        (exact, int32)
//   acc = fmaf(float(d), wscale[n, g] * xscale[m, g], acc)
// Every ISA performs exactly these float operations in this order, so outputs
// are bitwise equal to the scalar twin, and a row's output does not depend on
// M, the register blocking or the thread split (batch invariance, which
// lossless speculative verification needs).
//
// Weight-only (QuantTensor::act_int8 = false, W8A16 / W4A16): activations stay
// f32 and the same packed codes are read. Per output (m, n):
//   acc = 0; for each group g in order (inputs [k0, k1), k1 = min(k0 + 128, K)):
//     s = 0; for k = k0 .. k1 - 1 ascending: s = fmaf(x[m, k], float(code(n, k)), s)
//     acc = fmaf(s, wscale[n, g], acc)
// i.e. the dot product with the dequantized weight code * scale up to f32
// summation order. Every ISA performs exactly these operations (one SIMD lane
// per weight row), so outputs are bitwise equal to the scalar twin and
// independent of M and of the thread split.
#pragma once
#include <algorithm>
#include <cstdint>

namespace blockspec {

inline constexpr int64_t kQGroup = 128;  // inputs per scale group
inline constexpr int64_t kQTile = 16;    // weight rows per tile (one zmm of int32 lanes)
inline constexpr int64_t kQPanel = 4;    // tiles per panel (interleaved codes)

inline int64_t q_padded_k(int64_t K) { return (K + 7) / 8 * 8; }
inline int64_t q_groups(int64_t K) { return (q_padded_k(K) + kQGroup - 1) / kQGroup; }
inline int64_t q_tiles(int64_t N) { return (N + kQTile - 1) / kQTile; }

// Quantized activations: q [M, Kp] u8 (code + 128), scales [M, G] f32.
struct QuantActs {
  const uint8_t* q = nullptr;
  const float* scales = nullptr;
  int64_t M = 0;
};

// A packed Q8_G128 or Q4_G128 weight (views into a QuantTensor's buffers).
struct PackedWeights {
  const uint8_t* codes = nullptr;  // [n_tiles, tile_bytes]
  const float* scales = nullptr;   // [n_tiles, G, 16]
  const int32_t* corr = nullptr;   // [n_tiles, G, 16]
  int64_t N = 0, K = 0, Kp = 0, n_groups = 0, n_tiles = 0;
  bool q4 = false;
  int64_t tile_bytes() const { return q4 ? Kp * 8 : Kp * 16; }
  // Tiles in the panel that holds tile t, and where that panel's codes start.
  int64_t panel_tiles(int64_t t) const { return std::min(kQPanel, n_tiles - t / kQPanel * kQPanel); }
  const uint8_t* panel_codes(int64_t t) const { return codes + t / kQPanel * kQPanel * tile_bytes(); }
  // Byte offset of weight (n, k), n < 16 * n_tiles, k < Kp, in codes: the one
  // definition of the byte layout above.
  int64_t code_offset(int64_t n, int64_t k) const {
    const int64_t t = n / kQTile, r = n % kQTile, tp = panel_tiles(t);
    const int64_t step = q4 ? 8 : 4;  // inputs per 64-byte line of a tile
    return t / kQPanel * kQPanel * tile_bytes() + (k / step) * tp * 64 + (t % kQPanel) * 64 + r * 4 + k % 4;
  }
};

// The code of weight (n, k), n < 16 * n_tiles, k < Kp (scalar twin, dequantize).
inline int packed_code(const PackedWeights& w, int64_t n, int64_t k) {
  const uint8_t b = w.codes[w.code_offset(n, k)];
  if (!w.q4) return static_cast<int8_t>(b);
  return ((k % 8) < 4 ? (b & 15) : (b >> 4)) - 8;
}

// The scale of weight (n, k): scales[n / 16, k / 128, n % 16].
inline float packed_scale(const PackedWeights& w, int64_t n, int64_t k) {
  return w.scales[((n / kQTile) * w.n_groups + k / kQGroup) * kQTile + n % kQTile];
}

struct QuantTensor;
// Views a Q8_G128 / Q4_G128 QuantTensor's buffers (kernels/quant.cc).
PackedWeights packed_weights(const QuantTensor& w);

}  // namespace blockspec
