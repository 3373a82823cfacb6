// FP8 E4M3 / NVFP4 / MXFP4 weight-only formats: exact conversions for every
// code, RTN quantization properties, dequantize_rows / dequantize_weight
// agreement, and bitwise parity of every ISA's kernel with the scalar twin
// over odd shapes (plus batch invariance and a double-precision bound).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernels/fp_formats.h"
#include "kernels/kernel_table.h"
#include "kernels/quant.h"
#include "kernels/quant_rows.h"
#include "randv.h"

namespace blockspec {
namespace {

constexpr WeightFormat kFormats[] = {WeightFormat::kFP8_E4M3, WeightFormat::kMXFP4, WeightFormat::kNVFP4};

Tensor tensor_of(const std::vector<float>& v, int64_t N, int64_t K) {
  Tensor t(DType::kF32, {N, K});
  std::memcpy(t.mutable_ptr<float>(), v.data(), v.size() * sizeof(float));
  return t;
}

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST(FpConvert, E4M3EveryCode) {
  int nan = 0;
  for (int c = 0; c < 256; ++c) {
    const float v = e4m3_to_f32(static_cast<uint8_t>(c));
    const int e = (c >> 3) & 15, m = c & 7;
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << c;
      ++nan;
      continue;
    }
    const double want = (c & 0x80 ? -1.0 : 1.0) * (e == 0 ? m / 512.0 : std::ldexp(1.0 + m / 8.0, e - 7));
    EXPECT_EQ(static_cast<double>(v), want) << c;
    EXPECT_EQ(std::signbit(v), (c & 0x80) != 0) << c;
    // Round trip: every finite code converts back to itself (RNE of an exact value).
    EXPECT_EQ(f32_to_e4m3(v), c) << c;
    EXPECT_FALSE(std::isinf(v));
  }
  EXPECT_EQ(nan, 2);
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.f, -9));
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.f, -6));
}

TEST(FpConvert, E4M3RoundingSaturatesAndTiesToEven) {
  EXPECT_EQ(f32_to_e4m3(1e9f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(-INFINITY), 0xFE);
  EXPECT_EQ(f32_to_e4m3(470.f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(NAN), 0x7F);
  // Midpoints between consecutive finite codes go to the even code.
  for (int c = 0; c < 0x7E; ++c) {
    const float a = e4m3_to_f32(c), b = e4m3_to_f32(c + 1);
    const float mid = (a + b) / 2;  // exact in f32
    EXPECT_EQ(f32_to_e4m3(mid), (c % 2 == 0) ? c : c + 1) << c;
    EXPECT_EQ(f32_to_e4m3(std::nextafter(mid, 0.f)), c) << c;
    EXPECT_EQ(f32_to_e4m3(std::nextafter(mid, 1e9f)), c + 1) << c;
    EXPECT_EQ(f32_to_e4m3(-std::nextafter(mid, 0.f)), c | 0x80) << c;
  }
}

TEST(FpConvert, E2M1EveryCodeAndRounding) {
  const float want[16] = {0, .5f, 1, 1.5f, 2, 3, 4, 6, -0.f, -.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(bits(e2m1_to_f32(c)), bits(want[c])) << c;
    EXPECT_EQ(f32_to_e2m1(want[c]), c) << c;
  }
  for (int c = 0; c < 7; ++c) {
    const float mid = (want[c] + want[c + 1]) / 2;
    EXPECT_EQ(f32_to_e2m1(mid), c % 2 == 0 ? c : c + 1) << c;
    EXPECT_EQ(f32_to_e2m1(std::nextafter(mid, 0.f)), c) << c;
    EXPECT_EQ(f32_to_e2m1(std::nextafter(mid, 10.f)), c + 1) << c;
  }
  EXPECT_EQ(f32_to_e2m1(100.f), 7);
  EXPECT_EQ(f32_to_e2m1(-100.f), 15);
}

TEST(FpConvert, E8M0EveryCode) {
  for (int e = 0; e < 255; ++e) EXPECT_EQ(e8m0_to_f32(e), std::ldexp(1.f, e - 127)) << e;
  EXPECT_TRUE(std::isnan(e8m0_to_f32(255)));
}

TEST(FpFormats, NamesRoundTrip) {
  EXPECT_STREQ(weight_format_name(WeightFormat::kFP8_E4M3), "fp8");
  EXPECT_STREQ(weight_format_name(WeightFormat::kNVFP4), "nvfp4");
  EXPECT_STREQ(weight_format_name(WeightFormat::kMXFP4), "mxfp4");
  for (WeightFormat f : kFormats) EXPECT_EQ(weight_format_from_name(weight_format_name(f)), f);
}

struct Ctx {
  KernelTable kt;
  ThreadPool pool{2};
  OpContext ctx{&kt, &pool};
  explicit Ctx(const std::string& isa) : kt(select_kernels(isa)) {}
};

TEST(FpFormats, RtnQuantizationProperties) {
  Ctx c("ref");
  const int64_t N = 37, K = 301;
  auto w = randv(N * K, 5, 0.05f);
  w[3] = 0.9f;  // an outlier
  for (int64_t k = 0; k < K; ++k) w[5 * K + k] = 0.f;  // an all-zero row
  for (WeightFormat f : kFormats) {
    SCOPED_TRACE(weight_format_name(f));
    const QuantTensor q = make_weight(c.ctx, tensor_of(w, N, K), f);
    const Tensor d = dequantize_weight(q);
    const FpWeights fw = fp_weights(q);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const float x = w[n * K + k], y = d.ptr<float>()[n * K + k];
        const float s = fw.group_scale(n, k / fw.group);
        if (n == 5) {
          ASSERT_EQ(y, 0.f);
          continue;
        }
        ASSERT_TRUE(std::isfinite(y));
        if (f == WeightFormat::kFP8_E4M3) {
          // Half an E4M3 step: relative 2^-4 in the normal range, s * 2^-10 in the subnormal range.
          ASSERT_LE(std::fabs(x - y), std::max(std::fabs(x) * 0.0625f, s * std::ldexp(1.f, -10)) * 1.0001f)
              << n << "," << k;
        } else {
          // The element x / s lies in [-6, 6] (MX: clamped when the power-of-two scale rounds down); the E2M1
          // grid's half step is at most 1 (between 4 and 6) and 0.25 below 2.
          const float e = x / s;
          const float half = std::fabs(e) <= 2.f ? 0.25f : std::fabs(e) <= 4.f ? 0.5f : 1.f;
          const float err = std::fabs(std::clamp(e, -6.f, 6.f) - y / s);
          ASSERT_LE(err, half * 1.0001f) << n << "," << k << " e=" << e;
        }
        // Quantization picks the nearest code: no other code in the same scale is closer.
        ASSERT_EQ(std::signbit(y) && y != 0.f, x < 0 && y != 0.f);
      }
    // dequantize_rows gives the same values as dequantize_weight.
    std::vector<int32_t> ids = {0, 5, 36, 17};
    std::vector<float> rows(ids.size() * K);
    dequantize_rows(q, ids.data(), ids.size(), rows.data());
    for (size_t i = 0; i < ids.size(); ++i)
      for (int64_t k = 0; k < K; ++k) ASSERT_EQ(bits(rows[i * K + k]), bits(d.ptr<float>()[ids[i] * K + k]));
  }
}

TEST(FpFormats, NvFp4GlobalScaleAndSpecExample) {
  // quant_formats.md 3.5: absmax 10 gives gs = 268.8; a group with absmax 3.0 gets local fp8 128 and
  // 3.0 decodes to 6 * 128 / 268.8.
  Ctx c("ref");
  std::vector<float> w(32, 0.f);
  w[0] = 10.f;
  w[16] = 3.f;
  const QuantTensor q = make_weight(c.ctx, tensor_of(w, 1, 32), WeightFormat::kNVFP4);
  EXPECT_EQ(q.aux.ptr<float>()[0], 448.f * 6.f / 10.f);
  EXPECT_EQ(e4m3_to_f32(q.scales.ptr<uint8_t>()[1]), 128.f);
  const Tensor d = dequantize_weight(q);
  EXPECT_EQ(d.ptr<float>()[16], 6.f * (128.f / (448.f * 6.f / 10.f)));
  // MX example: amax 3.3 -> e = 126 (scale 0.5), 3.3 clamps to 6 * 0.5; amax 3.6 -> e = 127.
  std::vector<float> m(64, 0.f);
  m[0] = 3.3f;
  m[32] = 3.6f;
  const QuantTensor mx = make_weight(c.ctx, tensor_of(m, 1, 64), WeightFormat::kMXFP4);
  EXPECT_EQ(mx.scales.ptr<uint8_t>()[0], 126);
  EXPECT_EQ(mx.scales.ptr<uint8_t>()[1], 127);
  EXPECT_EQ(dequantize_weight(mx).ptr<float>()[0], 3.f);
}

TEST(FpFormats, StreamedEqualsWhole) {
  Ctx c("ref");
  const int64_t N = 300, K = 96;
  auto w = randv(N * K, 9);
  for (WeightFormat f : kFormats) {
    const QuantTensor a = make_weight(c.ctx, tensor_of(w, N, K), f);
    const QuantTensor b = make_weight_streamed(
        c.ctx, N, K, f, [&](int64_t r0, int64_t r1, float* o) { std::memcpy(o, w.data() + r0 * K, (r1 - r0) * K * 4); },
        64);
    ASSERT_EQ(std::memcmp(a.data.data(), b.data.data(), a.data.nbytes()), 0);
    ASSERT_EQ(std::memcmp(a.scales.data(), b.scales.data(), a.scales.nbytes()), 0);
    ASSERT_EQ(a.aux.nbytes(), b.aux.nbytes());
    if (a.aux.nbytes()) {
      ASSERT_EQ(a.aux.ptr<float>()[0], b.aux.ptr<float>()[0]);
    }
  }
}

class FpIsaTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FpIsaTest, ParityWithScalarTwinOverOddShapes) {
  Ctx ref("ref"), isa(GetParam());
  const int64_t shapes[][3] = {{1, 1, 1}, {1, 17, 15}, {3, 33, 129}, {5, 64, 256}, {7, 70, 200}, {1, 130, 543},
                               {9, 19, 48},  {2, 1, 1000}};
  for (auto [M, N, K] : shapes)
    for (WeightFormat f : kFormats) {
      SCOPED_TRACE(std::string(weight_format_name(f)) + " M=" + std::to_string(M) + " N=" + std::to_string(N) +
                   " K=" + std::to_string(K));
      auto w = randv(N * K, static_cast<uint32_t>(N * 7 + K), 0.1f);
      auto x = randv(M * K, static_cast<uint32_t>(M + K));
      auto bias = randv(N, 3);
      const QuantTensor q = make_weight(ref.ctx, tensor_of(w, N, K), f);
      std::vector<float> y0(M * N), y1(M * N);
      linear(ref.ctx, x.data(), q, bias.data(), y0.data(), M);
      linear(isa.ctx, x.data(), q, bias.data(), y1.data(), M);
      for (int64_t i = 0; i < M * N; ++i) ASSERT_EQ(bits(y0[i]), bits(y1[i])) << i;
      // Batch invariance: each row alone gives the same bits.
      for (int64_t m = 0; m < M; ++m) {
        std::vector<float> y2(N);
        linear(isa.ctx, x.data() + m * K, q, bias.data(), y2.data(), 1);
        for (int64_t n = 0; n < N; ++n) ASSERT_EQ(bits(y2[n]), bits(y1[m * N + n]));
      }
      // Against a double-precision product with the dequantized weight.
      const Tensor d = dequantize_weight(q);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double acc = bias[n], mag = std::fabs(bias[n]);
          for (int64_t k = 0; k < K; ++k) {
            acc += static_cast<double>(x[m * K + k]) * d.ptr<float>()[n * K + k];
            mag += std::fabs(static_cast<double>(x[m * K + k]) * d.ptr<float>()[n * K + k]);
          }
          ASSERT_NEAR(y1[m * N + n], acc, 1e-6 * mag + 1e-30);
        }
    }
}

TEST_P(FpIsaTest, SpecialCodesPropagate) {
  // A NaN weight code (E4M3 0x7F) poisons only its own output; zero activations against it give NaN too
  // (IEEE 0 * NaN), so masked tails must never read past K.
  Ctx isa(GetParam());
  const int64_t N = 2, K = 20;
  QuantTensor q = make_weight(isa.ctx, tensor_of(randv(N * K, 1), N, K), WeightFormat::kFP8_E4M3);
  q.data.mutable_ptr<uint8_t>()[K + 19] = 0x7F;
  auto x = randv(K, 2);
  std::vector<float> y(N);
  linear(isa.ctx, x.data(), q, nullptr, y.data(), 1);
  EXPECT_TRUE(std::isfinite(y[0]));
  EXPECT_TRUE(std::isnan(y[1]));
}

TEST_P(FpIsaTest, KernelDecodesEveryCode) {
  // Identity activations read single weights back through the kernel: every element code (and for the
  // 4-bit formats every scale code) must decode as the scalar conversions say.
  Ctx ref("ref"), isa(GetParam());
  for (WeightFormat f : kFormats) {
    SCOPED_TRACE(weight_format_name(f));
    const int64_t N = 3, K = f == WeightFormat::kFP8_E4M3 ? 254 : 510;
    QuantTensor q = make_weight(ref.ctx, tensor_of(randv(N * K, 4), N, K), f);
    uint8_t* c = q.data.mutable_ptr<uint8_t>();
    for (int64_t i = 0; i < static_cast<int64_t>(q.data.nbytes()); ++i) {
      const int v = static_cast<int>(i % (f == WeightFormat::kFP8_E4M3 ? 254 : 256));
      c[i] = static_cast<uint8_t>(v < 0x7F ? v : v + 1);  // E4M3: skip the NaN codes
    }
    if (f != WeightFormat::kFP8_E4M3) {
      uint8_t* s = q.scales.mutable_ptr<uint8_t>();
      for (int64_t i = 0; i < static_cast<int64_t>(q.scales.nbytes()); ++i) {
        const int v = static_cast<int>((i * 37) % 254);
        s[i] = static_cast<uint8_t>(f == WeightFormat::kMXFP4 ? v : (v < 0x7F ? v : v + 1));
      }
    }
    const FpWeights fw = fp_weights(q);
    std::vector<float> x(K * K, 0.f), y(K * N);
    for (int64_t k = 0; k < K; ++k) x[k * K + k] = 1.f;
    linear(isa.ctx, x.data(), q, nullptr, y.data(), K);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) ASSERT_EQ(y[k * N + n], fw.value(n, k) + 0.f) << n << "," << k;
  }
}

TEST_P(FpIsaTest, DecodeRowsEveryCodeNaNAndHugeScales) {
  // The few-row path (M <= 4) decodes whole blocks of 32 without masks and the tail with them: every code,
  // NaN codes inside full blocks included, must give the scalar twin's bits at M = 1..4; an FP8 scale too
  // large to take the decoder's 2^8 factor sends its row through the exact fallback.
  Ctx ref("ref"), isa(GetParam());
  for (WeightFormat f : kFormats)
    for (int64_t M = 1; M <= 4; ++M) {
      SCOPED_TRACE(std::string(weight_format_name(f)) + " M=" + std::to_string(M));
      const int64_t N = 5, K = 300;
      QuantTensor q = make_weight(ref.ctx, tensor_of(randv(N * K, 11), N, K), f);
      uint8_t* c = q.data.mutable_ptr<uint8_t>();
      for (int64_t i = 0; i < static_cast<int64_t>(q.data.nbytes()); ++i) c[i] = static_cast<uint8_t>((i * 7) % 256);
      if (f == WeightFormat::kFP8_E4M3) {
        c[2 * K + 40] = 0x7F;  // rows 2 and 3: one NaN code each in a full block; rows 0, 1, 4 none
        c[3 * K + 290] = 0xFF;
        for (int64_t i = 0; i < 2 * K; ++i) c[i] = (c[i] & 0x7F) == 0x7F ? 0 : c[i];
        for (int64_t i = 4 * K; i < 5 * K; ++i) c[i] = static_cast<uint8_t>((i * 7) % 0x50);  // |e| <= 7.5
        float* s = q.scales.mutable_ptr<float>();
        s[4 * q.scales.dim(1) + 1] = 3e37f;  // row 4: s * 2^8 overflows, e * s <= 2.25e38 does not
      }
      auto x = randv(M * K, 12, 1e-3f);
      std::vector<float> y0(M * N), y1(M * N);
      linear(ref.ctx, x.data(), q, nullptr, y0.data(), M);
      linear(isa.ctx, x.data(), q, nullptr, y1.data(), M);
      for (int64_t i = 0; i < M * N; ++i) {
        if (std::isnan(y0[i])) EXPECT_TRUE(std::isnan(y1[i])) << i;  // IEEE leaves a NaN's sign and payload open
        else ASSERT_EQ(bits(y0[i]), bits(y1[i])) << i;
      }
      if (f == WeightFormat::kFP8_E4M3)
        for (int64_t m = 0; m < M; ++m) {
          EXPECT_FALSE(std::isnan(y1[m * N + 0]));
          EXPECT_TRUE(std::isnan(y1[m * N + 2]));
          EXPECT_TRUE(std::isnan(y1[m * N + 3]));
          EXPECT_TRUE(std::isfinite(y1[m * N + 4]));
        }
      // Identity rows read single weights back through the M = 1 path (rows without a NaN code: 0 * NaN is NaN).
      const FpWeights fw = fp_weights(q);
      std::vector<float> e(K, 0.f), y(N);
      for (int64_t k = 0; k < K; k += 7) {
        e[k] = 1.f;
        linear(isa.ctx, e.data(), q, nullptr, y.data(), 1);
        e[k] = 0.f;
        for (int64_t n = 0; n < N; ++n)
          if (f != WeightFormat::kFP8_E4M3 || (n != 2 && n != 3)) ASSERT_EQ(y[n], fw.value(n, k) + 0.f) << n << "," << k;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, FpIsaTest, ::testing::ValuesIn(available_isas()));

}  // namespace
}  // namespace blockspec
