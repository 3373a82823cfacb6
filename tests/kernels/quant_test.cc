// QuantTensor formats: quantization properties, bitwise parity of every ISA's
// integer kernels with the scalar twin over odd shapes, and linear() against
// double-precision references with stated bounds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "base/error.h"
#include "kernels/kernel_table.h"
#include "kernels/quant.h"
#include "tensor/dtype.h"
#include "randv.h"

namespace blockspec {
namespace {

Tensor tensor_of(const std::vector<float>& v, int64_t N, int64_t K) {
  Tensor t(DType::kF32, {N, K});
  std::memcpy(t.mutable_ptr<float>(), v.data(), v.size() * sizeof(float));
  return t;
}

struct Fixture {
  KernelTable ref = select_kernels("ref");
  ThreadPool pool{2};
  OpContext ref_ctx{&ref, &pool};
};

const WeightFormat kIntFormats[] = {WeightFormat::kQ8_G128, WeightFormat::kQ4_G128};

int64_t group_index(const PackedWeights& p, int64_t n, int64_t k) {
  return ((n / kQTile) * p.n_groups + k / kQGroup) * kQTile + n % kQTile;
}

// ---- quantization properties ----

TEST(QuantWeights, CodesInRangeErrorWithinHalfStepZeroAndOutlierGroups) {
  Fixture f;
  const int64_t N = 19, K = 200;  // groups of 128 and 72
  auto w = randv(N * K, 1, 0.05f);
  for (int64_t k = 0; k < 128; ++k) w[3 * K + k] = 0.f;  // row 3: all-zero group
  w[5 * K + 140] = 300.f;                                 // row 5: one huge outlier in group 1
  for (WeightFormat fmt : kIntFormats) {
    const int qmax = fmt == WeightFormat::kQ4_G128 ? 7 : 127;
    QuantTensor q = make_weight(f.ref_ctx, tensor_of(w, N, K), fmt);
    PackedWeights p = packed_weights(q);
    Tensor d = dequantize_weight(q);
    ASSERT_EQ(d.shape(), (Shape{N, K}));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const int c = packed_code(p, n, k);
        const float s = p.scales[group_index(p, n, k)];
        ASSERT_GE(c, -qmax) << weight_format_name(fmt);
        ASSERT_LE(c, qmax);
        const float e = std::fabs(d.ptr<float>()[n * K + k] - w[n * K + k]);
        ASSERT_LE(e, s * 0.5f * (1 + 1e-5f) + 1e-30f) << weight_format_name(fmt) << " n=" << n << " k=" << k;
      }
    EXPECT_EQ(p.scales[group_index(p, 3, 0)], 0.f);
    for (int64_t k = 0; k < 128; ++k) EXPECT_EQ(d.ptr<float>()[3 * K + k], 0.f);
    EXPECT_NEAR(d.ptr<float>()[5 * K + 140], 300.f, 300.f * 1e-6f);
    // The outlier crushes its group's small weights to 0 but leaves group 0 alone.
    for (int64_t k = 128; k < K; ++k) EXPECT_EQ(packed_code(p, 5, k), k == 140 ? qmax : 0) << k;
    EXPECT_LT(p.scales[group_index(p, 5, 0)], 0.05f);
    // Padding rows of the last tile and padding inputs are zero codes.
    for (int64_t n = N; n < p.n_tiles * kQTile; ++n)
      for (int64_t k = 0; k < p.Kp; ++k) ASSERT_EQ(packed_code(p, n, k), 0);
  }
}

TEST(QuantWeights, CorrectionIs128TimesCodeSum) {
  Fixture f;
  const int64_t N = 21, K = 300;
  auto w = randv(N * K, 2);
  for (WeightFormat fmt : kIntFormats) {
    QuantTensor q = make_weight(f.ref_ctx, tensor_of(w, N, K), fmt);
    PackedWeights p = packed_weights(q);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t g = 0; g < p.n_groups; ++g) {
        int32_t sum = 0;
        for (int64_t k = g * kQGroup; k < std::min(p.Kp, (g + 1) * kQGroup); ++k) sum += packed_code(p, n, k);
        ASSERT_EQ(p.corr[group_index(p, n, g * kQGroup)], 128 * sum);
      }
  }
}

TEST(QuantWeights, FloatFormatsWrapZeroCopy) {
  Fixture f;
  const int64_t N = 5, K = 9;
  Tensor w = tensor_of(randv(N * K, 3), N, K);
  QuantTensor a = make_weight(f.ref_ctx, w, WeightFormat::kF32);
  EXPECT_EQ(a.data.data(), w.data());
  QuantTensor b = make_weight(f.ref_ctx, w, WeightFormat::kBF16);
  EXPECT_EQ(b.data.dtype(), DType::kBF16);
  QuantTensor c = make_weight(f.ref_ctx, b.data, WeightFormat::kBF16);
  EXPECT_EQ(c.data.data(), b.data.data());
  Tensor d = dequantize_weight(b);
  for (int64_t i = 0; i < N * K; ++i)
    EXPECT_EQ(d.ptr<float>()[i], bf16_to_f32(f32_to_bf16(w.ptr<float>()[i])));
  EXPECT_THROW(make_weight(f.ref_ctx, Tensor(DType::kI32, {2, 2}), WeightFormat::kQ8_G128), Error);
}

TEST(QuantActs, CodesInRangeErrorWithinHalfStepPaddingIsZero) {
  const int64_t M = 3, K = 203, Kp = q_padded_k(K), G = q_groups(K);
  auto x = randv(M * K, 4);
  for (int64_t k = 128; k < K; ++k) x[K + k] = 0.f;  // row 1, group 1: all zero
  x[2 * K + 7] = -1000.f;                            // row 2, group 0: outlier
  std::vector<uint8_t> q(M * Kp);
  std::vector<float> s(M * G);
  quantize_acts_ref(x.data(), M, K, q.data(), s.data());
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t k = 0; k < K; ++k) {
      ASSERT_GE(q[m * Kp + k], 1);
      const float sc = s[m * G + k / kQGroup];
      const float e = std::fabs((q[m * Kp + k] - 128) * sc - x[m * K + k]);
      ASSERT_LE(e, sc * 0.5f * (1 + 1e-5f) + 1e-30f) << m << " " << k;
    }
    for (int64_t k = K; k < Kp; ++k) ASSERT_EQ(q[m * Kp + k], 128);
  }
  EXPECT_EQ(s[1 * G + 1], 0.f);
  EXPECT_EQ(q[2 * Kp + 7], 1);  // -127 + 128
}

// Per token (vLLM's dynamic_scaled_int8_quant): one absmax over the whole row, scale absmax / 127 in every group
// slot, code rni(x * (127 / absmax)). An outlier in group 0 coarsens the other groups too (unlike per group).
TEST(QuantActs, PerTokenIsVllmFormula) {
  const int64_t M = 3, K = 300, Kp = q_padded_k(K), G = q_groups(K);
  auto x = randv(M * K, 21);
  x[K + 5] = 90.f;                                     // row 1: outlier in group 0
  for (int64_t k = 0; k < K; ++k) x[2 * K + k] = 0.f;  // row 2: all zero
  std::vector<uint8_t> q(M * Kp, 7);
  std::vector<float> s(M * G, -1.f);
  quantize_acts_token_ref(x.data(), M, K, q.data(), s.data());
  for (int64_t m = 0; m < M; ++m) {
    float amax = 0.f;
    for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(x[m * K + k]));
    for (int64_t g = 0; g < G; ++g) ASSERT_EQ(s[m * G + g], amax / 127.0f) << m << " " << g;
    for (int64_t k = 0; k < K; ++k) {
      const float want = amax > 0.f ? std::nearbyint(x[m * K + k] * (127.0f / amax)) : 0.f;
      ASSERT_EQ(static_cast<int>(q[m * Kp + k]) - 128, static_cast<int>(want)) << m << " " << k;
    }
    for (int64_t k = K; k < Kp; ++k) ASSERT_EQ(q[m * Kp + k], 128);
  }
  EXPECT_EQ(q[Kp + 5], 255);  // the outlier is +127
  // Per group keeps a finer scale in row 1's groups 1 and 2.
  std::vector<uint8_t> qg(M * Kp);
  std::vector<float> sg(M * G);
  quantize_acts_ref(x.data(), M, K, qg.data(), sg.data());
  EXPECT_LT(sg[G + 1], s[G + 1] / 10.f);
}

// linear() with act_per_token runs the int8 GEMM on per-token codes: y equals the dequantized per-token
// activations times the dequantized weight (f32 summation-order noise), and differs from the per-group result
// on a row with an outlier.
TEST(QuantActs, LinearPerTokenMatchesDequantizedProduct) {
  Fixture f;
  const int64_t M = 2, K = 384, N = 40, Kp = q_padded_k(K), G = q_groups(K);
  auto x = randv(M * K, 31);
  x[3] = 60.f;  // row 0: outlier
  const auto w = randv(N * K, 32, 0.05f);
  QuantTensor qt = make_weight(f.ref_ctx, tensor_of(w, N, K), WeightFormat::kQ8_G128);
  const Tensor wd = dequantize_weight(qt);
  std::vector<uint8_t> q(M * Kp);
  std::vector<float> s(M * G), yt(M * N), yg(M * N);
  quantize_acts_token_ref(x.data(), M, K, q.data(), s.data());
  qt.act_per_token = true;
  linear(f.ref_ctx, x.data(), qt, nullptr, yt.data(), M);
  qt.act_per_token = false;
  linear(f.ref_ctx, x.data(), qt, nullptr, yg.data(), M);
  double max_diff_g = 0.0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double ref = 0.0;
      for (int64_t k = 0; k < K; ++k)
        ref += (static_cast<int>(q[m * Kp + k]) - 128) * static_cast<double>(s[m * G]) * wd.ptr<float>()[n * K + k];
      ASSERT_NEAR(yt[m * N + n], ref, 1e-4 * (1.0 + std::fabs(ref))) << m << " " << n;
      if (m == 0) max_diff_g = std::max(max_diff_g, std::fabs(yg[n] - ref));
    }
  EXPECT_GT(max_diff_g, 1e-3);
}

// ---- every ISA against the scalar twin, bit for bit ----

class QuantIsaTest : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantIsaTest, ActivationQuantizationMatchesRefExactly) {
  KernelTable kt = select_kernels(GetParam());
  for (int64_t K : {1, 7, 64, 128, 200, 576, 1600}) {
    const int64_t M = 5, Kp = q_padded_k(K), G = q_groups(K);
    auto x = randv(M * K, 5 + K, 3.f);
    x[K / 2] = 0.5f * 3.f;  // a few exact ties after scaling are likely with many values
    std::vector<uint8_t> q(M * Kp, 7), qr(M * Kp, 9);
    std::vector<float> s(M * G), sr(M * G);
    kt.quantize_acts(x.data(), M, K, q.data(), s.data());
    quantize_acts_ref(x.data(), M, K, qr.data(), sr.data());
    ASSERT_EQ(q, qr) << "K=" << K;
    ASSERT_EQ(0, std::memcmp(s.data(), sr.data(), s.size() * sizeof(float))) << "K=" << K;
  }
}

TEST_P(QuantIsaTest, GemmMatchesRefBitwiseOverOddShapes) {
  Fixture f;
  KernelTable kt = select_kernels(GetParam());
  for (WeightFormat fmt : kIntFormats)
    for (int64_t K : {64, 128, 200, 576, 1600})
      for (int64_t N : {13, 37, 83}) {
        auto w = randv(N * K, 10 + K + N);
        QuantTensor qw = make_weight(f.ref_ctx, tensor_of(w, N, K), fmt);
        if (fmt == WeightFormat::kQ4_G128) {
          // Code -8 is legal in the layout (imported checkpoints) though RTN never
          // makes it: plant some, fixing the correction, so the kernels see it.
          PackedWeights p = packed_weights(qw);
          uint8_t* codes = qw.data.mutable_ptr<uint8_t>();
          for (int64_t n = 0; n < N; n += 5) {
            const int64_t k = (n * 37) % K;
            const int old = packed_code(p, n, k);
            uint8_t& b = codes[p.code_offset(n, k)];
            b = (k % 8) < 4 ? (b & 0xF0) : (b & 0x0F);
            qw.aux.mutable_ptr<int32_t>()[group_index(p, n, k)] += 128 * (-8 - old);
            ASSERT_EQ(packed_code(p, n, k), -8);
          }
        }
        PackedWeights p = packed_weights(qw);
        for (int64_t M : {1, 2, 3, 5, 8, 17}) {
          auto x = randv(M * K, 20 + M);
          std::vector<uint8_t> xq(M * p.Kp);
          std::vector<float> xs(M * p.n_groups);
          quantize_acts_ref(x.data(), M, K, xq.data(), xs.data());
          QuantActs a{xq.data(), xs.data(), M};
          auto gemm = fmt == WeightFormat::kQ4_G128 ? kt.gemm_q4g128 : kt.gemm_q8g128;
          auto gemm_ref = fmt == WeightFormat::kQ4_G128 ? gemm_q4g128_ref : gemm_q8g128_ref;
          // Also a later range of whole panels: rows outside it must stay untouched.
          for (auto [t0, t1] : {std::pair<int64_t, int64_t>{0, p.n_tiles}, {kQPanel, p.n_tiles}}) {
            if (t0 >= t1) continue;
            std::vector<float> y(M * N, -7.f), yr(M * N, -7.f);
            gemm(a, p, y.data(), t0, t1);
            gemm_ref(a, p, yr.data(), t0, t1);
            ASSERT_EQ(0, std::memcmp(y.data(), yr.data(), y.size() * sizeof(float)))
                << weight_format_name(fmt) << " K=" << K << " N=" << N << " M=" << M << " tiles " << t0;
          }
        }
      }
}

// ---- linear() end to end ----

// y = x @ W^T computed in double from the dequantized weight and the
// dequantized activation codes: the quantized linear must equal it up to f32
// accumulation over groups.
TEST_P(QuantIsaTest, LinearMatchesDoubleReferenceOnDequantizedOperands) {
  KernelTable kt = select_kernels(GetParam());
  ThreadPool pool(2);
  OpContext ctx{&kt, &pool};
  for (WeightFormat fmt : kIntFormats)
    for (int64_t K : {200, 1600}) {
      const int64_t N = 83, M = 5, Kp = q_padded_k(K), G = q_groups(K);
      auto w = randv(N * K, 30), x = randv(M * K, 31), bias = randv(N, 32);
      QuantTensor qw = make_weight(ctx, tensor_of(w, N, K), fmt);
      Tensor dw = dequantize_weight(qw);
      std::vector<uint8_t> xq(M * Kp);
      std::vector<float> xs(M * G), y(M * N);
      quantize_acts_ref(x.data(), M, K, xq.data(), xs.data());
      linear(ctx, x.data(), qw, bias.data(), y.data(), M);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double acc = bias[n], mag = std::fabs(bias[n]);
          for (int64_t k = 0; k < K; ++k) {
            const double t = (xq[m * Kp + k] - 128) * static_cast<double>(xs[m * G + k / kQGroup]) *
                             dw.ptr<float>()[n * K + k];
            acc += t;
            mag += std::fabs(t);
          }
          // Per group: one rounding of wscale*xscale, of the fma, and of the sum.
          ASSERT_NEAR(y[m * N + n], acc, 4e-7 * G * mag + 1e-6) << weight_format_name(fmt) << " K=" << K;
        }
    }
}

// Against the unquantized float product: |error| is bounded by the quantization
// steps, sum_k |x_k| ew + |w_k| ex + ex ew with ew = wscale / 2, ex = xscale / 2.
// A broken activation quantization or a missing -128 correction (which adds
// 128 * sum(codes) * scales per group) blows far past this bound.
TEST_P(QuantIsaTest, LinearWithinQuantizationBoundOfFloatMatmul) {
  KernelTable kt = select_kernels(GetParam());
  ThreadPool pool(2);
  OpContext ctx{&kt, &pool};
  for (WeightFormat fmt : kIntFormats) {
    const int64_t N = 45, M = 3, K = 576, G = q_groups(K);
    auto w = randv(N * K, 40, 0.02f), x = randv(M * K, 41);
    for (auto& v : w) v += 0.01f;  // a non-zero mean makes sum(codes), hence the correction, large
    x[100] = 40.f;                 // activation outlier in one group
    QuantTensor qw = make_weight(ctx, tensor_of(w, N, K), fmt);
    PackedWeights p = packed_weights(qw);
    std::vector<uint8_t> xq(M * p.Kp);
    std::vector<float> xs(M * G), y(M * N);
    quantize_acts_ref(x.data(), M, K, xq.data(), xs.data());
    linear(ctx, x.data(), qw, nullptr, y.data(), M);
    double worst = 0;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double exact = 0, bound = 1e-5, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double ew = p.scales[group_index(p, n, k)] / 2, ex = xs[m * G + k / kQGroup] / 2;
          exact += static_cast<double>(x[m * K + k]) * w[n * K + k];
          bound += std::fabs(x[m * K + k]) * ew + std::fabs(w[n * K + k]) * ex + ex * ew;
          mag += std::fabs(x[m * K + k] * w[n * K + k]);
        }
        ASSERT_LE(std::fabs(y[m * N + n] - exact), bound) << weight_format_name(fmt) << " m=" << m << " n=" << n;
        ASSERT_LT(bound, 0.6 * mag);  // the bound is not vacuous
        worst = std::max(worst, std::fabs(y[m * N + n] - exact) / bound);
      }
    EXPECT_GT(worst, 0.0);
  }
}

// Rows of a quantized linear are bitwise independent of the batch and of the
// thread split (activations are quantized per row; integer sums are exact).
TEST_P(QuantIsaTest, LinearIsBatchInvariant) {
  KernelTable kt = select_kernels(GetParam());
  ThreadPool one(1), two(2);
  const int64_t N = 83, K = 200, M = 9;
  auto w = randv(N * K, 60), x = randv(M * K, 61);
  for (WeightFormat fmt : kIntFormats) {
    QuantTensor qw = make_weight(OpContext{&kt, &two}, tensor_of(w, N, K), fmt);
    std::vector<float> all(M * N), row(N);
    linear(OpContext{&kt, &two}, x.data(), qw, nullptr, all.data(), M);
    for (int64_t m = 0; m < M; ++m) {
      linear(OpContext{&kt, &one}, x.data() + m * K, qw, nullptr, row.data(), 1);
      for (int64_t n = 0; n < N; ++n) ASSERT_EQ(row[n], all[m * N + n]) << weight_format_name(fmt) << " m=" << m;
    }
  }
}

TEST_P(QuantIsaTest, FloatFormatsRouteToFloatMatmul) {
  KernelTable kt = select_kernels(GetParam());
  ThreadPool pool(2);
  OpContext ctx{&kt, &pool};
  const int64_t N = 29, K = 70, M = 3;
  Tensor w = tensor_of(randv(N * K, 50), N, K);
  auto x = randv(M * K, 51);
  for (WeightFormat fmt : {WeightFormat::kF32, WeightFormat::kBF16}) {
    QuantTensor qw = make_weight(ctx, w, fmt);
    std::vector<float> y(M * N), yr(M * N);
    linear(ctx, x.data(), qw, nullptr, y.data(), M);
    linear(ctx, x.data(), qw.data, nullptr, yr.data(), M);
    EXPECT_EQ(y, yr);
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, QuantIsaTest, ::testing::ValuesIn(available_isas()));

}  // namespace
}  // namespace blockspec
