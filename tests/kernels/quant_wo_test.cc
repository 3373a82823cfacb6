// Weight-only Q8_G128 / Q4_G128 (W8A16 / W4A16, QuantTensor::act_int8 =
// false): every ISA's kernel equals the scalar twin bit for bit over odd
// shapes (K not a multiple of 8, partial tiles and panels, code -8), the twin
// equals a double-precision product with the dequantized weight to f32
// summation order, and linear() is batch invariant.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernels/kernel_table.h"
#include "kernels/quant.h"
#include "kernels/quant_import.h"
#include "randv.h"

namespace blockspec {
namespace {

// A weight with every code of the format (q4: -8..7, q8: -128..127), random
// f16-like scales, imported as codes and marked weight-only.
QuantTensor wo_weight(const OpContext& ctx, WeightFormat fmt, int64_t N, int64_t K, uint32_t seed) {
  std::mt19937 g(seed);
  const int lo = fmt == WeightFormat::kQ4_G128 ? -8 : -128, hi = -lo - 1;
  std::uniform_int_distribution<int> code(lo, hi);
  std::uniform_real_distribution<float> sc(0.001f, 0.05f);
  const int64_t G = q_groups(K);
  QuantTensor q = make_weight_from_codes(ctx, N, K, fmt, [&](int64_t r0, int64_t r1, int8_t* c, float* s) {
    for (int64_t i = 0; i < (r1 - r0) * K; ++i) c[i] = static_cast<int8_t>(code(g));
    for (int64_t i = 0; i < (r1 - r0) * G; ++i) s[i] = sc(g);
  });
  q.act_int8 = false;
  return q;
}

const WeightFormat kIntFormats[] = {WeightFormat::kQ8_G128, WeightFormat::kQ4_G128};

class QuantWoTest : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantWoTest, GemmMatchesRefBitwiseOverOddShapes) {
  KernelTable kt = select_kernels(GetParam()), ref = select_kernels("ref");
  ThreadPool pool(1);
  OpContext ctx{&ref, &pool};
  for (WeightFormat fmt : kIntFormats)
    for (int64_t K : {3, 13, 64, 200, 261, 1600})
      for (int64_t N : {1, 13, 37, 83, 130}) {
        QuantTensor qw = wo_weight(ctx, fmt, N, K, static_cast<uint32_t>(K * 1000 + N));
        PackedWeights p = packed_weights(qw);
        auto gemm = fmt == WeightFormat::kQ4_G128 ? kt.gemm_q4g128_wo : kt.gemm_q8g128_wo;
        auto gemm_ref = fmt == WeightFormat::kQ4_G128 ? gemm_q4g128_wo_ref : gemm_q8g128_wo_ref;
        for (int64_t M : {1, 2, 3, 4, 5, 9}) {
          auto x = randv(M * K, static_cast<uint32_t>(20 + M + K));
          // Also a later range of whole panels: rows outside it must stay untouched.
          for (auto [t0, t1] : {std::pair<int64_t, int64_t>{0, p.n_tiles}, {kQPanel, p.n_tiles}}) {
            if (t0 >= t1) continue;
            std::vector<float> y(M * N, -7.f), yr(M * N, -7.f);
            gemm(p, x.data(), y.data(), M, t0, t1);
            gemm_ref(p, x.data(), yr.data(), M, t0, t1);
            ASSERT_EQ(0, std::memcmp(y.data(), yr.data(), y.size() * sizeof(float)))
                << GetParam() << " " << weight_format_name(fmt) << " K=" << K << " N=" << N << " M=" << M << " t0=" << t0;
          }
        }
      }
}

TEST_P(QuantWoTest, LinearIsTheDequantizedProductAndBatchInvariant) {
  KernelTable kt = select_kernels(GetParam());
  ThreadPool pool(2);
  OpContext ctx{&kt, &pool};
  for (WeightFormat fmt : kIntFormats)
    for (int64_t K : {200, 1600}) {
      const int64_t N = 83, M = 6;
      QuantTensor qw = wo_weight(ctx, fmt, N, K, 7);
      Tensor dw = dequantize_weight(qw);
      auto x = randv(M * K, 31), bias = randv(N, 32);
      std::vector<float> y(M * N), y1(N);
      linear(ctx, x.data(), qw, bias.data(), y.data(), M);
      for (int64_t m = 0; m < M; ++m) {
        linear(ctx, x.data() + m * K, qw, bias.data(), y1.data(), 1);
        ASSERT_EQ(0, std::memcmp(y1.data(), y.data() + m * N, N * sizeof(float))) << "batch invariance, m=" << m;
        for (int64_t n = 0; n < N; ++n) {
          double acc = bias[n], mag = std::fabs(bias[n]);
          for (int64_t k = 0; k < K; ++k) {
            const double t = static_cast<double>(x[m * K + k]) * dw.ptr<float>()[n * K + k];
            acc += t;
            mag += std::fabs(t);
          }
          // f32 summation: at most K + G + 1 roundings of partial sums bounded by mag.
          ASSERT_NEAR(y[m * N + n], acc, 6e-8 * (K + 16) * mag) << weight_format_name(fmt) << " K=" << K;
        }
      }
      // The same codes run as W8A8 / W4A8 differ (activation rounding): the flag is what selects the path.
      QuantTensor a8 = qw;
      a8.act_int8 = true;
      std::vector<float> ya(M * N);
      linear(ctx, x.data(), a8, bias.data(), ya.data(), M);
      EXPECT_NE(0, std::memcmp(ya.data(), y.data(), y.size() * sizeof(float)));
    }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, QuantWoTest, ::testing::ValuesIn(available_isas()));

}  // namespace
}  // namespace blockspec
