// Element types and their traits, plus scalar conversions for the 16-bit
// float formats. The order of DType follows safetensors' enum order
// (increasing alignment), which its writer sorts by.
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace blockspec {

enum class DType : uint8_t {
  kBool, kF4, kF6_E2M3, kF6_E3M2, kU8, kI8, kF8_E5M2, kF8_E4M3, kF8_E8M0,
  kF8_E4M3FNUZ, kF8_E5M2FNUZ, kI16, kU16, kF16, kBF16, kI32, kU32, kF32,
  kC64, kF64, kI64, kU64,
};
inline constexpr int kNumDTypes = static_cast<int>(DType::kU64) + 1;

struct DTypeTraits {
  DType dtype;
  const char* name;  // safetensors spelling, e.g. "BF16"
  int bits;          // storage bits per element
  int alignment;     // natural alignment in bytes (bits/8 rounded up, >= 1)
};

const DTypeTraits& dtype_traits(DType t);
inline const char* dtype_name(DType t) { return dtype_traits(t).name; }
inline int dtype_bits(DType t) { return dtype_traits(t).bits; }
// Parses the safetensors spelling; nullopt if unknown.
std::optional<DType> dtype_from_name(std::string_view name);

// ---- bf16 / f16 scalar conversions (round to nearest even) ----
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

}  // namespace blockspec
