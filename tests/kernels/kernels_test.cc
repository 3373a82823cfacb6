// Every optimised kernel against its scalar twin, over odd shapes, on every
// ISA this machine has.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "kernels/kernel_table.h"
#include "base/error.h"
#include "kernels/ops.h"
#include "randv.h"
#include "kernels/silu_exp.h"
#include "tensor/dtype.h"

namespace blockspec {
namespace {

class IsaTest : public ::testing::TestWithParam<std::string> {};

TEST_P(IsaTest, MatmulF32MatchesRef) {
  KernelTable kt = select_kernels(GetParam());
  for (int64_t M : {1, 2, 3, 4, 5, 9}) {
    for (int64_t K : {1, 7, 8, 15, 16, 17, 33, 64, 129}) {
      const int64_t N = 11;
      auto x = randv(M * K, 1), w = randv(N * K, 2);
      std::vector<float> y(M * N, -7.f), yr(M * N, -7.f);
      kt.matmul_f32(x.data(), w.data(), y.data(), M, K, N, 2, 9);
      matmul_f32_ref(x.data(), w.data(), yr.data(), M, K, N, 2, 9);
      for (int64_t i = 0; i < M * N; ++i)
        ASSERT_NEAR(y[i], yr[i], 1e-4f * std::sqrt(static_cast<float>(K))) << "M=" << M << " K=" << K << " i=" << i;
    }
  }
}

TEST_P(IsaTest, MatmulBf16MatchesRef) {
  KernelTable kt = select_kernels(GetParam());
  for (int64_t M : {1, 3, 4, 6}) {
    for (int64_t K : {1, 5, 16, 31, 48, 100}) {
      const int64_t N = 7;
      auto x = randv(M * K, 3), wf = randv(N * K, 4);
      std::vector<uint16_t> w(N * K);
      for (size_t i = 0; i < w.size(); ++i) w[i] = f32_to_bf16(wf[i]);
      std::vector<float> y(M * N, 0.f), yr(M * N, 0.f);
      kt.matmul_bf16(x.data(), w.data(), y.data(), M, K, N, 0, N);
      matmul_bf16_ref(x.data(), w.data(), yr.data(), M, K, N, 0, N);
      for (int64_t i = 0; i < M * N; ++i)
        ASSERT_NEAR(y[i], yr[i], 1e-4f * std::sqrt(static_cast<float>(K))) << "M=" << M << " K=" << K;
    }
  }
}

// VDPBF16PS GEMM (bf16 activations x bf16 weights): bit for bit the scalar
// twin's lanes, pair order, DAZ/FTZ and reduction tree, on odd shapes and
// tails; plus denormal inputs and products, which the twin must flush alike.
TEST_P(IsaTest, MatmulBf16DpMatchesRefBitwise) {
  KernelTable kt = select_kernels(GetParam());
  if (kt.matmul_bf16_dp == nullptr) GTEST_SKIP() << GetParam() << " has no bf16 dot-product kernel on this CPU";
  std::mt19937 g(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t M : {1, 2, 3, 4, 5, 9}) {
    for (int64_t K : {1, 2, 15, 31, 32, 33, 64, 100, 1537}) {
      const int64_t N = 13;
      std::vector<uint16_t> x(M * K), w(N * K);
      for (auto& v : x) v = f32_to_bf16(nd(g));
      for (auto& v : w) v = f32_to_bf16(nd(g) * 0.05f);
      // A few denormal inputs and tiny products (their f32 product or sum is denormal).
      if (K > 3) {
        x[1] = f32_to_bf16(1e-39f);                   // denormal activation: read as zero
        w[2] = f32_to_bf16(-3e-39f);                   // denormal weight
        x[2] = f32_to_bf16(1e-20f), x[3] = f32_to_bf16(1e-19f);
        w[K + 3] = f32_to_bf16(1e-20f);  // row 1: the first FMA of lane 1 yields 1e-39, flushed to zero
      }
      std::vector<float> y(M * N, -7.f), yr(M * N, -7.f);
      kt.matmul_bf16_dp(x.data(), w.data(), y.data(), M, K, N, 1, 12);
      matmul_bf16_dp_ref(x.data(), w.data(), yr.data(), M, K, N, 1, 12);
      for (int64_t i = 0; i < M * N; ++i)
        ASSERT_EQ(y[i], yr[i]) << GetParam() << " M=" << M << " K=" << K << " i=" << i;
      // And close to the exact dot product (double) of the same bf16 values.
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 1; n < 12; ++n) {
          double acc = 0, mag = 0;
          for (int64_t k = 0; k < K; ++k) {
            const double p = static_cast<double>(bf16_to_f32(x[m * K + k])) * bf16_to_f32(w[n * K + k]);
            acc += p, mag += std::fabs(p);
          }
          ASSERT_NEAR(y[m * N + n], acc, 1e-6 * mag * std::sqrt(static_cast<double>(K)) + 1e-30) << M << " " << K;
        }
    }
  }
}

// The denormal rules made visible: one lane whose only product is denormal
// (flushed to +-0), and a denormal input times a large weight (read as 0).
TEST_P(IsaTest, MatmulBf16DpFlushesDenormals) {
  KernelTable kt = select_kernels(GetParam());
  if (kt.matmul_bf16_dp == nullptr) GTEST_SKIP() << GetParam() << " has no bf16 dot-product kernel on this CPU";
  const float cases[][4] = {{0, 1e-19f, 0, 1e-20f},   // x0 x1 w0 w1: 1e-39 product -> 0
                            {1e-39f, 0, 1e30f, 0},    // denormal x times 1e30 -> 0, not 1e-9
                            {0, 3.0f, 0, 2.0f}};      // control: 6
  const float want[] = {0.0f, 0.0f, 6.0f};
  for (int c = 0; c < 3; ++c) {
    const uint16_t x[2] = {f32_to_bf16(cases[c][0]), f32_to_bf16(cases[c][1])};
    const uint16_t w[2] = {f32_to_bf16(cases[c][2]), f32_to_bf16(cases[c][3])};
    float y = -7.f, yr = -7.f;
    kt.matmul_bf16_dp(x, w, &y, 1, 2, 1, 0, 1);
    matmul_bf16_dp_ref(x, w, &yr, 1, 2, 1, 0, 1);
    EXPECT_EQ(y, want[c]) << GetParam() << " case " << c;
    EXPECT_EQ(yr, want[c]) << "ref, case " << c;
  }
}

// --activations bf16 through linear(): the same rows whatever M (batch
// invariance), so verifying k tokens at once equals decoding them one by one.
TEST_P(IsaTest, Bf16ActivationLinearIsBatchInvariant) {
  KernelTable kt = select_kernels(GetParam());
  ThreadPool pool(2);
  OpContext ctx{&kt, &pool, true};
  const int64_t K = 67, N = 45, M = 7;
  auto xf = randv(M * K, 8), wf = randv(N * K, 9);
  Tensor w(DType::kBF16, {N, K});
  for (int64_t i = 0; i < N * K; ++i) w.mutable_ptr<uint16_t>()[i] = f32_to_bf16(wf[i]);
  std::vector<float> all(M * N), one(N);
  linear(ctx, xf.data(), w, nullptr, all.data(), M);
  for (int64_t m = 0; m < M; ++m) {
    linear(ctx, xf.data() + m * K, w, nullptr, one.data(), 1);
    for (int64_t n = 0; n < N; ++n) ASSERT_EQ(one[n], all[m * N + n]) << GetParam() << " m=" << m << " n=" << n;
  }
}

// SwiGLU: every ISA bit for bit the scalar twin (exp_fixed spelled out the
// same way), odd lengths, extremes and NaN, both precisions.
TEST_P(IsaTest, SwigluMatchesRefBitwise) {
  KernelTable kt = select_kernels(GetParam());
  for (int64_t n : {1, 15, 16, 17, 100, 2049}) {
    auto g = randv(n, 40 + static_cast<uint32_t>(n)), u = randv(n, 41);
    for (auto& v : g) v *= 6.f;
    if (n > 8) {
      g[0] = 0.f, g[1] = -0.f, g[2] = 100.f, g[3] = -100.f, g[4] = 87.5f, g[5] = -88.5f;
      g[6] = std::numeric_limits<float>::quiet_NaN(), g[7] = std::numeric_limits<float>::infinity();
    }
    for (bool bf : {false, true}) {
      std::vector<float> y(n, -7.f), yr(n, -7.f);
      kt.swiglu(g.data(), u.data(), y.data(), n, bf);
      swiglu_ref(g.data(), u.data(), yr.data(), n, bf);
      for (int64_t i = 0; i < n; ++i) {
        uint32_t a, b;
        std::memcpy(&a, &y[i], 4), std::memcpy(&b, &yr[i], 4);
        ASSERT_EQ(a, b) << GetParam() << " n=" << n << " i=" << i << " g=" << g[i] << " bf16=" << bf;
      }
    }
  }
}

// Softmax's exponentials and their sum: every ISA bit for bit the scalar twin (16 partial sums), lengths around
// the 16-element chunks, and close to the libm exponentials summed in double.
TEST_P(IsaTest, ExpSubSumMatchesRefBitwise) {
  KernelTable kt = select_kernels(GetParam());
  for (int64_t n : {1, 7, 15, 16, 17, 31, 33, 100, 1029}) {
    auto x = randv(n, 50 + static_cast<uint32_t>(n));
    for (auto& v : x) v *= 20.f;
    const float m = *std::max_element(x.begin(), x.end());
    std::vector<float> y = x, yr = x;
    const double s = kt.exp_sub_sum(y.data(), m, n), sr = exp_sub_sum_ref(yr.data(), m, n);
    ASSERT_EQ(s, sr) << GetParam() << " n=" << n;
    double want = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(y[i], yr[i]) << GetParam() << " n=" << n << " i=" << i;
      const double e = std::exp(static_cast<double>(x[i] - m));
      ASSERT_NEAR(y[i], e, 2.4e-7 * e + 1e-37) << "n=" << n << " i=" << i;
      want += e;
    }
    ASSERT_NEAR(s, want, 2.4e-7 * want) << GetParam() << " n=" << n;
  }
}

// exp_fixed against the libm exp: < 2 ulp relative on its range.
TEST(Ops, ExpFixedIsAccurate) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f) {
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(exp_fixed(x) - want) / want);
  }
  EXPECT_LT(worst, 2.4e-7);  // 2 ulp of float
  std::printf("exp_fixed max relative error %.3g\n", worst);
  EXPECT_EQ(exp_fixed(0.0f), 1.0f);
  EXPECT_EQ(exp_fixed(-1000.0f), exp_fixed(-87.0f));  // clamped, no underflow to a denormal
}

TEST_P(IsaTest, DotAndAxpyMatchRef) {
  KernelTable kt = select_kernels(GetParam());
  for (int64_t n : {0, 1, 3, 8, 15, 16, 17, 31, 32, 33, 100}) {
    auto a = randv(n, 5), b = randv(n, 6);
    EXPECT_NEAR(kt.dot(a.data(), b.data(), n), dot_ref(a.data(), b.data(), n), 1e-4f * (1 + n)) << n;
    auto y1 = b, y2 = b;
    kt.axpy(0.37f, a.data(), y1.data(), n);
    axpy_ref(0.37f, a.data(), y2.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y1[i], y2[i], 1e-6f) << n;
  }
}

TEST_P(IsaTest, ReadStreamFoldsEveryByte) {
  KernelTable kt = select_kernels(GetParam());
  alignas(64) static uint8_t buf[64 * 37];
  for (size_t i = 0; i < sizeof buf; ++i) buf[i] = static_cast<uint8_t>(i * 131 + 7);
  for (int64_t n : {int64_t{0}, int64_t{64}, int64_t{128}, int64_t{256}, int64_t{64 * 37}}) {
    const uint64_t want = read_stream_ref(buf, n);
    EXPECT_EQ(kt.read_stream(buf, n), want) << n;
    buf[n == 0 ? 0 : n - 1] ^= 1;  // every byte counts: flipping the last one changes the fold
    if (n > 0) {
      EXPECT_NE(kt.read_stream(buf, n), want) << n;
    }
    buf[n == 0 ? 0 : n - 1] ^= 1;
  }
}

TEST_P(IsaTest, ThreadedLinearWithBiasMatchesRef) {
  KernelTable kt = select_kernels(GetParam());
  ThreadPool pool(2);
  OpContext ctx{&kt, &pool};
  const int64_t M = 5, K = 37, N = 53;
  auto x = randv(M * K, 7), wf = randv(N * K, 8), bias = randv(N, 9);
  Tensor w(DType::kF32, {N, K});
  std::copy(wf.begin(), wf.end(), w.mutable_ptr<float>());
  std::vector<float> y(M * N), yr(M * N);
  linear(ctx, x.data(), w, bias.data(), y.data(), M);
  matmul_f32_ref(x.data(), wf.data(), yr.data(), M, K, N, 0, N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) ASSERT_NEAR(y[m * N + n], yr[m * N + n] + bias[n], 1e-4f);
}

TEST_P(IsaTest, AttentionMatchesNaiveSoftmax) {
  KernelTable kt = select_kernels(GetParam());
  ThreadPool pool(2);
  OpContext ctx{&kt, &pool};
  const int64_t T = 3, start = 4, H = 4, KVH = 2, D = 12;
  auto q = randv(T * H * D, 10), k = randv((start + T) * KVH * D, 11), v = randv((start + T) * KVH * D, 12);
  std::vector<float> out(T * H * D);
  AttentionShape s{T, start, H, KVH, D, 0.3f};
  attention_causal(ctx, q.data(), k.data(), v.data(), s, out.data());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kvh = h / (H / KVH), n = start + t + 1;
      std::vector<double> p(n);
      double mx = -1e30, sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        double d = 0;
        for (int64_t i = 0; i < D; ++i) d += q[(t * H + h) * D + i] * k[(j * KVH + kvh) * D + i];
        p[j] = d * 0.3;
        mx = std::max(mx, p[j]);
      }
      for (auto& e : p) sum += (e = std::exp(e - mx));
      for (int64_t i = 0; i < D; ++i) {
        double o = 0;
        for (int64_t j = 0; j < n; ++j) o += p[j] / sum * v[(j * KVH + kvh) * D + i];
        ASSERT_NEAR(out[(t * H + h) * D + i], o, 1e-5) << t << " " << h << " " << i;
      }
    }
}

// A row of y must not depend on how many rows were computed with it, nor on
// how the output columns were split between threads: verifying k drafted
// tokens in one batch must give the logits of decoding them one at a time.
TEST_P(IsaTest, MatmulIsBatchInvariant) {
  KernelTable kt = select_kernels(GetParam());
  for (int64_t K : {5, 37, 100}) {
    const int64_t M = 7, N = 13;
    auto x = randv(M * K, 16), wf = randv(N * K, 17);
    std::vector<uint16_t> wb(N * K);
    for (size_t i = 0; i < wb.size(); ++i) wb[i] = f32_to_bf16(wf[i]);
    for (bool bf16 : {false, true}) {
      auto mm = [&](const float* xp, float* yp, int64_t m, int64_t n0, int64_t n1) {
        if (bf16) kt.matmul_bf16(xp, wb.data(), yp, m, K, N, n0, n1);
        else kt.matmul_f32(xp, wf.data(), yp, m, K, N, n0, n1);
      };
      std::vector<float> all(M * N), one(N), split(N);
      mm(x.data(), all.data(), M, 0, N);
      for (int64_t m = 0; m < M; ++m) {
        mm(x.data() + m * K, one.data(), 1, 0, N);
        mm(x.data() + m * K, split.data(), 1, 0, 6);
        mm(x.data() + m * K, split.data(), 1, 6, N);
        for (int64_t n = 0; n < N; ++n) {
          ASSERT_EQ(one[n], all[m * N + n]) << "bf16=" << bf16 << " K=" << K << " m=" << m << " n=" << n;
          ASSERT_EQ(split[n], all[m * N + n]) << "bf16=" << bf16 << " K=" << K << " m=" << m << " n=" << n;
        }
      }
    }
  }
}

// Decode with few KV heads groups query heads by KV head (one pass over K/V)
// on a 1-thread pool and splits them by query head on a wide pool: the
// per-head arithmetic is the same, so the outputs must be bitwise equal.
TEST_P(IsaTest, AttentionGroupingDoesNotChangeResults) {
  KernelTable kt = select_kernels(GetParam());
  ThreadPool one(1), wide(8);
  const int64_t T = 1, start = 37, H = 6, KVH = 2, D = 20;
  auto q = randv(T * H * D, 13), k = randv((start + T) * KVH * D, 14), v = randv((start + T) * KVH * D, 15);
  for (bool round : {false, true}) {
    AttentionShape s{T, start, H, KVH, D, 0.2f, round};
    std::vector<float> a(T * H * D), b(T * H * D);
    attention_causal(OpContext{&kt, &one}, q.data(), k.data(), v.data(), s, a.data());
    attention_causal(OpContext{&kt, &wide}, q.data(), k.data(), v.data(), s, b.data());
    EXPECT_EQ(a, b) << "round_bf16=" << round;
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, IsaTest, ::testing::ValuesIn(available_isas()));

TEST(Dispatch, UnknownIsaIsAnError) {
  EXPECT_THROW(select_kernels("sse9"), Error);
  EXPECT_STREQ(select_kernels("ref").isa, "ref");
}

TEST(Ops, RmsnormAndSilu) {
  std::vector<float> x = {1, -2, 3, 4}, w = {1, 0.5f, 2, 1}, o(4);
  rmsnorm(x.data(), w.data(), 1e-6f, 1, 4, o.data());
  float r = 1.0f / std::sqrt((1 + 4 + 9 + 16) / 4.0f + 1e-6f);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(o[i], x[i] * r * w[i], 1e-6f);
  std::vector<float> g = {0.f, 1.f, -3.f}, u = {2.f, 2.f, 1.f};
  silu_mul(g.data(), u.data(), 3);
  EXPECT_NEAR(g[0], 0.f, 1e-7f);
  EXPECT_NEAR(g[1], 2.f / (1 + std::exp(-1.f)), 1e-6f);
  EXPECT_NEAR(g[2], -3.f / (1 + std::exp(3.f)), 1e-6f);
}

TEST(Ops, RopeRotatesPairsHalfApart) {
  // head_dim 4, one head: pairs (0,2) and (1,3) rotate by pos*inv_freq[i].
  std::vector<float> x = {1, 2, 3, 4};
  int64_t pos = 3;
  float inv[2] = {1.0f, 0.1f};
  rope_neox(x.data(), &pos, 1, 1, 4, inv, 4, 1.0f);
  EXPECT_NEAR(x[0], 1 * std::cos(3.f) - 3 * std::sin(3.f), 1e-6f);
  EXPECT_NEAR(x[2], 3 * std::cos(3.f) + 1 * std::sin(3.f), 1e-6f);
  EXPECT_NEAR(x[1], 2 * std::cos(.3f) - 4 * std::sin(.3f), 1e-6f);
  EXPECT_NEAR(x[3], 4 * std::cos(.3f) + 2 * std::sin(.3f), 1e-6f);
}

}  // namespace
}  // namespace blockspec
