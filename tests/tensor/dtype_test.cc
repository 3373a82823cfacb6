#include "tensor/dtype.h"

#include <gtest/gtest.h>

#include <cmath>

#include "base/error.h"
#include "tensor/tensor.h"

namespace blockspec {
namespace {

TEST(DType, NamesRoundTrip) {
  for (int i = 0; i < kNumDTypes; ++i) {
    DType t = static_cast<DType>(i);
    auto back = dtype_from_name(dtype_name(t));
    ASSERT_TRUE(back.has_value()) << dtype_name(t);
    EXPECT_EQ(*back, t);
  }
  EXPECT_FALSE(dtype_from_name("Q4_K").has_value());
  EXPECT_EQ(dtype_bits(DType::kF4), 4);
  EXPECT_EQ(dtype_bits(DType::kBF16), 16);
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3*2^-8 is halfway between 0x3f81 and 0x3f82: ties to even 0x3f82.
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(bf16_to_f32(0xc000), -2.0f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(DType, F16Conversions) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint16_t x = static_cast<uint16_t>(h);
    float f = f16_to_f32(x);
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), x) << std::hex << h;  // exact round trip for every half
  }
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
  EXPECT_EQ(f32_to_f16(70000.0f), 0x7c00);                     // overflow to inf
}

TEST(Tensor, OwnedAndView) {
  Tensor t(DType::kBF16, {2, 3});
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.nbytes(), 12u);
  t.mutable_ptr<uint16_t>()[4] = f32_to_bf16(2.5f);
  Tensor f = to_f32(t);
  EXPECT_EQ(f.ptr<float>()[4], 2.5f);
  Tensor v = Tensor::view(DType::kF32, {6}, f.data());
  EXPECT_THROW(v.mutable_data(), Error);
  EXPECT_EQ(shape_str({2, 3}), "[2, 3]");
  EXPECT_EQ(dtype_nbytes(DType::kF4, 3), 2u);
}

// Tensors of 4 MiB and more start on a 2 MiB boundary (so the kernel can back them with huge pages), zeroed like
// any other; smaller ones keep the 64-byte alignment.
TEST(Tensor, LargeTensorsAreHugePageAligned) {
  Tensor big(DType::kF32, {1024, 1025});  // 4.0 MiB + 4 KiB
  Tensor small(DType::kF32, {3, 5});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data()) % (size_t{2} << 20), 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % 64, 0u);
  const float* p = big.ptr<float>();
  EXPECT_EQ(p[0], 0.f);
  EXPECT_EQ(p[big.numel() - 1], 0.f);
}

}  // namespace
}  // namespace blockspec
