#include "tensor/dtype.h"

#include <cmath>
#include <cstring>

namespace blockspec {

namespace {
constexpr DTypeTraits kTraits[kNumDTypes] = {
    {DType::kBool, "BOOL", 8, 1},          {DType::kF4, "F4", 4, 1},
    {DType::kF6_E2M3, "F6_E2M3", 6, 1},    {DType::kF6_E3M2, "F6_E3M2", 6, 1},
    {DType::kU8, "U8", 8, 1},              {DType::kI8, "I8", 8, 1},
    {DType::kF8_E5M2, "F8_E5M2", 8, 1},    {DType::kF8_E4M3, "F8_E4M3", 8, 1},
    {DType::kF8_E8M0, "F8_E8M0", 8, 1},    {DType::kF8_E4M3FNUZ, "F8_E4M3FNUZ", 8, 1},
    {DType::kF8_E5M2FNUZ, "F8_E5M2FNUZ", 8, 1},
    {DType::kI16, "I16", 16, 2},           {DType::kU16, "U16", 16, 2},
    {DType::kF16, "F16", 16, 2},           {DType::kBF16, "BF16", 16, 2},
    {DType::kI32, "I32", 32, 4},           {DType::kU32, "U32", 32, 4},
    {DType::kF32, "F32", 32, 4},           {DType::kC64, "C64", 64, 8},
    {DType::kF64, "F64", 64, 8},           {DType::kI64, "I64", 64, 8},
    {DType::kU64, "U64", 64, 8},
};
}  // namespace

const DTypeTraits& dtype_traits(DType t) { return kTraits[static_cast<int>(t)]; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& t : kTraits)
    if (name == t.name) return t.dtype;
  return std::nullopt;
}

// By bits, like numpy's npy_halfbits_to_floatbits: exact for every finite value and keeps a NaN's sign and
// payload (gguf-py dequantizes through numpy, and the GGUF dequantizers are bit-exact against it).
float f16_to_f32(uint16_t h) {
  const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: shift the mantissa up until its leading one is the implicit bit
    uint32_t e = 113, m = man;
    while ((m & 0x400u) == 0) {
      m <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((m & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (a < 0x38800000u) {
    // Subnormal half: value = m * 2^-24, round to nearest even.
    float af;
    std::memcpy(&af, &a, 4);
    float m = std::nearbyint(af * 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(m));
  }
  uint32_t e = ((a >> 23) - 112) << 10;
  uint32_t m = (a >> 13) & 0x3ffu;
  uint32_t rest = a & 0x1fffu;
  uint32_t h = e | m;
  if (rest > 0x1000u || (rest == 0x1000u && (m & 1u))) ++h;  // may carry into exponent: correct
  return static_cast<uint16_t>(sign | h);
}

}  // namespace blockspec
