// Float weight formats kept compressed in memory (weight-only: activations
// stay f32) -- FP8 E4M3, NVFP4 and MXFP4 -- and their exact scalar
// conversions. Private to the kernels layer; the model sees QuantTensor.
//
// Layouts (row n = output feature, K inputs, all row-major, no padding rows):
//   kFP8_E4M3  data   U8 [N, K]            E4M3FN codes (bias 7, no inf, 0x7F/0xFF NaN)
//              scales F32 [N, ceil(K/128)] one scale per row and group of 128 inputs.
//              Per-tensor, per-channel and 128x128-block checkpoint scales all map
//              onto this exactly (the loader repeats them).
//   kMXFP4     data   U8 [N, ceil(K/2)]   E2M1 codes, input 2i in the LOW nibble, 2i+1 in
//                                         the HIGH nibble (compressed-tensors order)
//              scales U8 [N, ceil(K/32)]   E8M0 biased exponents: scale = 2^(e-127), 0xFF NaN
//   kNVFP4     data   as MXFP4
//              scales U8 [N, ceil(K/16)]   E4M3FN local scales
//              aux    F32 [1]              global scale, a DIVISOR (compressed-tensors
//                                         weight_global_scale): group scale = e4m3(s) / g
//
// The value of weight (n, k) is  w = e(code) * gs(n, group)  rounded once to
// f32, where e() is the exact element value and gs() the group scale above
// (for NVFP4 itself rounded once: float(e4m3(s)) / g). This is bit for bit
// compressed-tensors' dequantize computed in float32.
//
// linear(): per output (m, n), 16 f32 lanes, lane j = k mod 16:
//   acc[j] = 0; for k in 0..K-1 ascending: acc[k%16] = fmaf(x[m,k], w(n,k), acc[k%16])
//   then acc[j] += acc[j+8] (j<8); acc[j] += acc[j+4] (j<4); += acc[j+2] (j<2);
//   y = acc[0] + acc[1].
// Every ISA performs exactly these operations, so outputs are bitwise equal
// to the scalar twin and independent of M and of the thread split.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "tensor/quant_tensor.h"

namespace blockspec {

inline constexpr int64_t kFp8Group = 128;
inline constexpr int64_t kMxGroup = 32;
inline constexpr int64_t kNvGroup = 16;

inline bool is_fp_format(WeightFormat f) {
  return f == WeightFormat::kFP8_E4M3 || f == WeightFormat::kMXFP4 || f == WeightFormat::kNVFP4;
}
inline int64_t fp_group_size(WeightFormat f) {
  return f == WeightFormat::kFP8_E4M3 ? kFp8Group : f == WeightFormat::kMXFP4 ? kMxGroup : kNvGroup;
}

// ---- exact scalar conversions ------------------------------------------------------------

// E4M3FN: S EEEE MMM, bias 7; e=0 subnormal m * 2^-9; 0x7F / 0xFF NaN; max 448.
// Bit construction, no libm: the NVFP4 kernels call this once per 16 weights.
inline float e4m3_to_f32(uint8_t c) {
  const uint32_t e = (c >> 3) & 15, m = c & 7;
  if (e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  float v;
  if (e == 0) {
    v = static_cast<float>(m) * (1.f / 512.f);  // subnormal m * 2^-9 (exact)
  } else {
    const uint32_t bits = ((e + 120) << 23) | (m << 20);
    std::memcpy(&v, &bits, 4);
  }
  return (c & 0x80) ? -v : v;
}
// Round to nearest even, saturating to +-448 (inf too); NaN gives 0x7F.
inline uint8_t f32_to_e4m3(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t s = std::signbit(x) ? 0x80 : 0;
  const float a = std::fabs(x);
  if (a >= 448.f) return s | 0x7E;
  if (a < 0.015625f) return s | static_cast<uint8_t>(std::nearbyint(a * 512.f));  // subnormal (8 -> min normal)
  int E;
  std::frexp(a, &E);  // a = f * 2^E, f in [0.5, 1)
  int ue = E - 1;
  int q = static_cast<int>(std::nearbyint((std::ldexp(a, -ue) - 1.f) * 8.f));
  if (q == 8) {
    q = 0;
    ++ue;
  }
  return s | static_cast<uint8_t>(((ue + 7) << 3) | q);
}

// E2M1: S EE M, bias 1; magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6; no inf/NaN; 8 = -0.
inline float e2m1_to_f32(uint8_t c) {
  static constexpr float kMag[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  const float v = kMag[c & 7];
  return (c & 8) ? -v : v;
}
// Clamps to +-6, then RNE on the E2M1 grid (quant_formats.md 5.3); NaN gives 0.
inline uint8_t f32_to_e2m1(float x) {
  if (std::isnan(x)) return 0;
  const uint8_t s = std::signbit(x) ? 8 : 0;
  const float a = std::fabs(x);
  uint8_t i;
  if (a <= 0.25f) i = 0;
  else if (a < 0.75f) i = 1;
  else if (a <= 1.25f) i = 2;
  else if (a < 1.75f) i = 3;
  else if (a <= 2.5f) i = 4;
  else if (a < 3.5f) i = 5;
  else if (a <= 5.f) i = 6;
  else i = 7;
  return s | i;
}

// E8M0: 2^(e-127) for e in 0..254 (e = 0 is the f32 subnormal 2^-127); 0xFF NaN.
inline float e8m0_to_f32(uint8_t e) {
  if (e == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  uint32_t bits = e == 0 ? 0x00400000u : static_cast<uint32_t>(e) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// ---- views --------------------------------------------------------------------------------

// A kFP8_E4M3 / kMXFP4 / kNVFP4 weight (views into a QuantTensor's buffers).
struct FpWeights {
  WeightFormat format = WeightFormat::kFP8_E4M3;
  const uint8_t* codes = nullptr;  // [N, row_bytes]
  const void* scales = nullptr;    // [N, n_groups]: f32 (FP8) or u8 (E8M0 / E4M3)
  float global_div = 1.f;          // NVFP4 only
  int64_t N = 0, K = 0, row_bytes = 0, n_groups = 0, group = 0;

  // Scale of row n, group g (exactly as every kernel computes it).
  float group_scale(int64_t n, int64_t g) const {
    const int64_t i = n * n_groups + g;
    switch (format) {
      case WeightFormat::kFP8_E4M3: return static_cast<const float*>(scales)[i];
      case WeightFormat::kMXFP4: return e8m0_to_f32(static_cast<const uint8_t*>(scales)[i]);
      default: return e4m3_to_f32(static_cast<const uint8_t*>(scales)[i]) / global_div;
    }
  }
  // Element value (before scaling) of weight (n, k).
  float element(int64_t n, int64_t k) const {
    if (format == WeightFormat::kFP8_E4M3) return e4m3_to_f32(codes[n * row_bytes + k]);
    const uint8_t b = codes[n * row_bytes + k / 2];
    return e2m1_to_f32(k % 2 == 0 ? (b & 15) : (b >> 4));
  }
  float value(int64_t n, int64_t k) const { return element(n, k) * group_scale(n, k / group); }
};

FpWeights fp_weights(const QuantTensor& w);

// Row n of the weight in f32 (out[K]).
void fp_dequantize_row(const FpWeights& w, int64_t n, float* out);

}  // namespace blockspec
