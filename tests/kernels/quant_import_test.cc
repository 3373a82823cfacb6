// make_weight_from_codes: the packed layout filled from given codes equals
// make_weight's own packing for the same codes, extreme codes (q8 -128, q4 -8,
// which RTN never produces but GPTQ / compressed-tensors checkpoints do) are
// multiplied exactly by every ISA (bitwise equal to the scalar twin, and the
// twin equal to the integer formula of quant_layout.h), and bad input is refused.
#include "kernels/quant_import.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "base/error.h"
#include "kernels/kernel_table.h"
#include "kernels/quant.h"
#include "kernels/quant_layout.h"

namespace blockspec {
namespace {

const WeightFormat kIntFormats[] = {WeightFormat::kQ8_G128, WeightFormat::kQ4_G128};

Tensor randt(int64_t N, int64_t K, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  Tensor t(DType::kF32, {N, K});
  for (int64_t i = 0; i < N * K; ++i) t.mutable_ptr<float>()[i] = d(g);
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

TEST(QuantImport, EqualsMakeWeightPackingForItsOwnCodes) {
  KernelTable kt = select_kernels("ref");
  ThreadPool pool(2);
  OpContext ctx{&kt, &pool};
  for (auto [N, K] : {std::pair<int64_t, int64_t>{83, 200}, {150, 576}, {16, 128}, {5, 7}}) {
    for (WeightFormat fmt : kIntFormats) {
      SCOPED_TRACE(std::string(weight_format_name(fmt)) + " N=" + std::to_string(N) + " K=" + std::to_string(K));
      QuantTensor a = make_weight(ctx, randt(N, K, static_cast<uint32_t>(N * K)), fmt);
      const int64_t G = q_groups(K);
      QuantTensor b = make_weight_from_codes(
          ctx, N, K, fmt, [&](int64_t r0, int64_t r1, int8_t* c, float* s) { weight_codes(a, r0, r1, c, s); },
          /*chunk_rows=*/64);  // several chunks
      EXPECT_EQ(b.rows, N);
      EXPECT_EQ(b.cols, K);
      EXPECT_EQ(b.scales.numel(), q_tiles(N) * G * kQTile);
      EXPECT_TRUE(same_bytes(a.data, b.data));
      EXPECT_TRUE(same_bytes(a.scales, b.scales));
      EXPECT_TRUE(same_bytes(a.aux, b.aux));
    }
  }
}

// Codes cycling through the whole range, with whole groups at the minimum
// (q8 -128: corr = 128 * 128 * -128) and at the maximum.
QuantTensor extreme_weight(const OpContext& ctx, int64_t N, int64_t K, WeightFormat fmt, std::vector<int8_t>& codes,
                           std::vector<float>& scales) {
  const int lo = fmt == WeightFormat::kQ8_G128 ? -128 : -8, hi = fmt == WeightFormat::kQ8_G128 ? 127 : 7;
  const int64_t G = q_groups(K);
  codes.resize(N * K);
  scales.resize(N * G);
  std::mt19937 g(7);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < K; ++k) {
      int c = lo + static_cast<int>(g() % (hi - lo + 1));
      if (n % 3 == 0 && k < 128) c = lo;
      if (n % 3 == 1 && k < 128) c = hi;
      codes[n * K + k] = static_cast<int8_t>(c);
    }
    for (int64_t j = 0; j < G; ++j) scales[n * G + j] = std::ldexp(1.f + static_cast<float>(g() % 1024) / 1024.f, -7);
  }
  return make_weight_from_codes(ctx, N, K, fmt, [&](int64_t r0, int64_t r1, int8_t* c, float* s) {
    std::memcpy(c, codes.data() + r0 * K, (r1 - r0) * K);
    std::memcpy(s, scales.data() + r0 * G, (r1 - r0) * G * sizeof(float));
  });
}

TEST(QuantImport, ExtremeCodesRoundTripAndDequantizeExactly) {
  KernelTable kt = select_kernels("ref");
  ThreadPool pool(2);
  OpContext ctx{&kt, &pool};
  const int64_t N = 37, K = 328, G = q_groups(K);
  for (WeightFormat fmt : kIntFormats) {
    std::vector<int8_t> codes;
    std::vector<float> scales;
    QuantTensor w = extreme_weight(ctx, N, K, fmt, codes, scales);
    std::vector<int8_t> c2(N * K);
    std::vector<float> s2(N * G);
    weight_codes(w, 0, N, c2.data(), s2.data());
    EXPECT_EQ(codes, c2);
    EXPECT_EQ(scales, s2);
    Tensor d = dequantize_weight(w);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k)
        ASSERT_EQ(d.ptr<float>()[n * K + k], static_cast<float>(codes[n * K + k]) * scales[n * G + k / 128]);
  }
}

TEST(QuantImport, ExtremeCodesMultiplyExactlyOnEveryIsa) {
  const int64_t N = 70, K = 328, M = 5, G = q_groups(K), Kp = q_padded_k(K);
  std::mt19937 g(11);
  std::normal_distribution<float> nd(0.f, 2.f);
  std::vector<float> x(M * K);
  for (auto& v : x) v = nd(g);
  for (int64_t k = 0; k < K; ++k) x[k] = (k % 2 ? 1.f : -1.f);  // row 0: codes +-127, the largest products
  for (WeightFormat fmt : kIntFormats) {
    KernelTable ref = select_kernels("ref");
    ThreadPool pool(2);
    OpContext rctx{&ref, &pool};
    std::vector<int8_t> codes;
    std::vector<float> scales;
    QuantTensor w = extreme_weight(rctx, N, K, fmt, codes, scales);
    // The formula of quant_layout.h, spelled out on the unpacked codes.
    std::vector<uint8_t> xq(M * Kp);
    std::vector<float> xs(M * G);
    quantize_acts_ref(x.data(), M, K, xq.data(), xs.data());
    std::vector<float> want(M * N);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        float acc = 0.f;
        for (int64_t j = 0; j < G; ++j) {
          int32_t d = 0;
          for (int64_t k = j * 128; k < std::min(K, j * 128 + 128); ++k)
            d += (static_cast<int32_t>(xq[m * Kp + k]) - 128) * codes[n * K + k];
          acc = std::fmaf(static_cast<float>(d), scales[n * G + j] * xs[m * G + j], acc);
        }
        want[m * N + n] = acc;
      }
    for (const std::string& isa : available_isas()) {
      KernelTable kt = select_kernels(isa);
      OpContext ctx{&kt, &pool};
      std::vector<float> y(M * N);
      linear(ctx, x.data(), w, nullptr, y.data(), M);
      for (int64_t i = 0; i < M * N; ++i)
        ASSERT_EQ(y[i], want[i]) << weight_format_name(fmt) << " isa=" << isa << " i=" << i;
    }
  }
}

TEST(QuantImport, RefusesOutOfRangeQ4CodesAndBadScales) {
  KernelTable kt = select_kernels("ref");
  ThreadPool pool(1);
  OpContext ctx{&kt, &pool};
  auto fill = [](int8_t c, float s) {
    return [=](int64_t r0, int64_t r1, int8_t* codes, float* scales) {
      std::fill(codes, codes + (r1 - r0) * 130, c);
      std::fill(scales, scales + (r1 - r0) * 2, s);
    };
  };
  EXPECT_THROW(make_weight_from_codes(ctx, 3, 130, WeightFormat::kQ4_G128, fill(8, 1.f)), Error);
  EXPECT_THROW(make_weight_from_codes(ctx, 3, 130, WeightFormat::kQ4_G128, fill(-9, 1.f)), Error);
  EXPECT_NO_THROW(make_weight_from_codes(ctx, 3, 130, WeightFormat::kQ4_G128, fill(-8, 1.f)));
  EXPECT_NO_THROW(make_weight_from_codes(ctx, 3, 130, WeightFormat::kQ8_G128, fill(-128, 1.f)));
  EXPECT_THROW(make_weight_from_codes(ctx, 3, 130, WeightFormat::kQ8_G128, fill(1, NAN)), Error);
  EXPECT_THROW(make_weight_from_codes(ctx, 3, 130, WeightFormat::kBF16, fill(1, 1.f)), Error);
}

}  // namespace
}  // namespace blockspec
