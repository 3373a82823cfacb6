// Compile-time descriptions of the GGUF block formats for the x86 block GEMMs (block_avx512.cc, block_avx2.cc):
// the record layout of kernels/block_layout.h as constants, and the one switch from a WeightFormat to them.
// Private to kernels/x86.
#pragma once
#include <cstdint>

#include "base/error.h"
#include "tensor/quant_tensor.h"

namespace blockspec {

// One format (tensor/block_quant.h): B inputs per block, S per sub-block, BITS per code, Z the code's zero, SC
// per-sub-block scales, MIN per-(sub-)block minimums. The byte sizes of one record's parts (block_layout.h).
template <int B_, int S_, int BITS_, int Z_, bool SC_, bool MIN_>
struct BlockFmt {
  static constexpr int B = B_, S = S_, BITS = BITS_, Z = Z_;
  static constexpr bool SC = SC_, MIN = MIN_;
  static constexpr bool BYTES = BITS == 8;  // one code per byte (Unpacked: every format)
  static constexpr bool FSC = false;        // sc and mc as bytes (Unpacked<F, true>: as f32)
  static constexpr int64_t LO = BITS == 8 ? B * 16 : B * 8;
  static constexpr int64_t HI = BITS == 5 ? B * 2 : BITS == 6 ? B * 4 : 0;
  static constexpr int64_t SCB = SC ? B / S * 16 : 0;
  static constexpr int64_t MCB = SC && MIN ? B / S * 16 : 0;
  static constexpr int64_t REC = LO + HI + SCB + MCB + (MIN ? 64 : 32);  // one tile's share of a step
  // Per tile and sub-block (block_layout.h): LOL lo lines, HIL hi lines, then 16 bytes of sc and of mc; SUB bytes.
  static constexpr int64_t LOL = BITS == 8 ? S / 4 : S / 8, HIL = BITS == 5 || BITS == 6 ? 1 : 0;
  static constexpr int64_t SUB = (LOL + HIL) * 64 + (SCB + MCB) / (B / S);
  static_assert(HI == HIL * 64 * (B / S) && LO == LOL * 64 * (B / S), "a sub-block's codes are whole lines");
};

// A format F's steps with every code unpacked to a byte (bits == 8's line order of block_layout.h, so quad q of a
// sub-block is its line q) and, with FloatScales, the sub-block scales sc and mc converted to f32 (16 lanes, 64
// bytes per tile; else bytes as packed); d and dm as packed. BITS stays F's (the codes' range, which bounds the
// AVX2 kernel's int16 sums). The same values, so a kernel that reads it performs the same arithmetic. Made once
// per panel for a prefill GEMM (block_avx512.cc, block_avx2.cc) instead of splitting nibbles and merging high
// bits once per block of rows.
template <class F, bool FloatScales>
struct Unpacked {
  static constexpr int B = F::B, S = F::S, BITS = F::BITS, Z = F::Z;
  static constexpr bool SC = F::SC, MIN = F::MIN, BYTES = true, FSC = FloatScales;
  static constexpr int64_t LO = B * 16, HI = 0;
  static constexpr int64_t SCB = SC ? B / S * (FSC ? 64 : 16) : 0;
  static constexpr int64_t MCB = SC && MIN ? B / S * (FSC ? 64 : 16) : 0;
  static constexpr int64_t REC = LO + HI + SCB + MCB + (MIN ? 64 : 32);
  static constexpr int64_t LOL = S / 4, HIL = 0;
  static constexpr int64_t SUB = LOL * 64 + (SCB + MCB) / (B / S);
};

// fn.template operator()<F>() with F the BlockFmt of `format`.
template <class Fn>
inline void with_block_fmt(WeightFormat format, Fn&& fn) {
  //                                                         B    S  bits zero  sc     min
  switch (format) {
    case WeightFormat::kQ4_0: return fn.template operator()<BlockFmt<32, 32, 4, 8, false, false>>();
    case WeightFormat::kQ4_1: return fn.template operator()<BlockFmt<32, 32, 4, 0, false, true>>();
    case WeightFormat::kQ5_0: return fn.template operator()<BlockFmt<32, 32, 5, 16, false, false>>();
    case WeightFormat::kQ5_1: return fn.template operator()<BlockFmt<32, 32, 5, 0, false, true>>();
    case WeightFormat::kQ8_0: return fn.template operator()<BlockFmt<32, 32, 8, 128, false, false>>();
    case WeightFormat::kQ2_K: return fn.template operator()<BlockFmt<256, 16, 2, 0, true, true>>();
    case WeightFormat::kQ3_K: return fn.template operator()<BlockFmt<256, 16, 3, 4, true, false>>();
    case WeightFormat::kQ4_K: return fn.template operator()<BlockFmt<256, 32, 4, 0, true, true>>();
    case WeightFormat::kQ5_K: return fn.template operator()<BlockFmt<256, 32, 5, 0, true, true>>();
    case WeightFormat::kQ6_K: return fn.template operator()<BlockFmt<256, 16, 6, 32, true, false>>();
    default: BS_ASSERT(false, "block GEMM of ", weight_format_name(format));
  }
}

}  // namespace blockspec
