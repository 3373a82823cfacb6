// quantize/gptq.h asymmetric_target and linalg.h accumulate_atb: the W8A8 GPTQ target that accounts for the
// int8 rounding of the inputs (x vs x_q), against its definition and on a synthetic layer with outlier inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/kernel_table.h"
#include "kernels/ops.h"
#include "kernels/quant_layout.h"
#include "quantize/gptq.h"
#include "quantize/linalg.h"
#include "quantize/quantizer.h"

namespace blockspec {
namespace {

struct Ctx {
  ThreadPool pool{2};
  KernelTable kt = select_kernels("");
  OpContext ctx{&kt, &pool};
};

TEST(AccumulateAtb, MatchesDefinition) {
  Ctx c;
  // 600 columns: two 512-row panels; 300 tokens: two chunks of 256.
  const int64_t T = 300, K = 600;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  std::vector<float> A(T * K), B(T * K);
  for (float& v : A) v = nd(rng);
  for (float& v : B) v = nd(rng);
  std::vector<double> D;
  accumulate_atb(c.ctx, A.data(), B.data(), T, K, D);
  accumulate_atb(c.ctx, A.data(), B.data(), T, K, D);  // accumulates
  for (int64_t i = 0; i < K; i += 13)
    for (int64_t j = 0; j < K; j += 7) {
      double s = 0;
      for (int64_t t = 0; t < T; ++t) s += double(A[t * K + i]) * B[t * K + j];
      ASSERT_NEAR(D[i * K + j], 2 * s, 1e-3 * (1 + std::fabs(s))) << i << " " << j;
    }
}

// x [T, K] with two outlier channels (large on every token, larger on a few) and structure shared between
// channels, so per-token int8 rounding is coarse and its error is partly predictable from x_q.
struct Layer {
  int64_t T = 1024, K = 256, N = 32;
  std::vector<float> x, xq, w;
  std::vector<double> H, D;
  explicit Layer(const OpContext& ctx) {
    std::mt19937 rng(11);
    std::normal_distribution<float> nd;
    x.resize(T * K);
    for (int64_t t = 0; t < T; ++t) {
      const float f = nd(rng);  // a factor shared by every channel of the token
      for (int64_t k = 0; k < K; ++k) x[t * K + k] = 0.6f * f * (1.f + 0.01f * k) + 0.4f * nd(rng);
      x[t * K + 3] = 40.f + 5.f * f;
      x[t * K + 130] = (t % 50 == 0 ? 300.f : 20.f) * (1.f + 0.1f * nd(rng));
    }
    std::vector<uint8_t> q(T * q_padded_k(K));
    std::vector<float> s(T * q_groups(K));
    quantize_acts_token_ref(x.data(), T, K, q.data(), s.data());
    xq.resize(T * K);
    std::vector<float> e(T * K);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < K; ++k) {
        xq[t * K + k] = (static_cast<int>(q[t * q_padded_k(K) + k]) - 128) * s[t * q_groups(K)];
        e[t * K + k] = x[t * K + k] - xq[t * K + k];
      }
    accumulate_xtx(ctx, xq.data(), T, K, H);
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < i; ++j) H[j * K + i] = H[i * K + j];
    accumulate_atb(ctx, e.data(), xq.data(), T, K, D);
    w.resize(N * K);
    for (float& v : w) v = 0.05f * nd(rng);
  }
  // sum_t |W x_t - Wq x_q,t|^2
  double error(const std::vector<float>& wq) const {
    double s = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n) {
        double d = 0;
        for (int64_t k = 0; k < K; ++k) d += double(w[n * K + k]) * x[t * K + k] - double(wq[n * K + k]) * xq[t * K + k];
        s += d * d;
      }
    return s;
  }
};

TEST(AsymmetricTarget, SolvesTheDampedNormalEquations) {
  Ctx c;
  const Layer l(c.ctx);
  const double damp = 0.01;
  const std::vector<float> wt = asymmetric_target(l.w.data(), l.N, l.K, l.H, l.D, damp, c.ctx);
  ASSERT_EQ(wt.size(), l.w.size());
  double mean = 0;
  for (int64_t i = 0; i < l.K; ++i) mean += l.H[i * l.K + i];
  mean /= l.K;
  // W' (H + lambda I) = W (H + lambda I) + W D, row by row.
  for (int64_t n = 0; n < l.N; n += 5)
    for (int64_t j = 0; j < l.K; j += 3) {
      double lhs = 0, rhs = 0, scale = 0;
      for (int64_t i = 0; i < l.K; ++i) {
        const double h = l.H[i * l.K + j] + (i == j ? damp * mean : 0.0);
        lhs += double(wt[n * l.K + i]) * h;
        rhs += double(l.w[n * l.K + i]) * (h + l.D[i * l.K + j]);
        scale += std::fabs(double(l.w[n * l.K + i]) * h);
      }
      ASSERT_NEAR(lhs, rhs, 2e-3 * scale) << n << " " << j;
    }
}

// On the layer's own inputs, GPTQ on the target has a lower real W8A8 error sum |W x - Q x_q|^2 than GPTQ on W
// (which minimises |(W - Q) x_q|^2 only) and than RTN; without D (D = 0) the target is W itself.
TEST(AsymmetricTarget, LowersTheW8A8ErrorOfGptq) {
  Ctx c;
  const Layer l(c.ctx);
  QuantSpec s;
  s.bits = 8;
  const QuantWeight base = make_params(s, l.w.data(), l.N, l.K);
  QuantWeight rtn = base, plain = base, asym = base;
  quantize_rtn(rtn, l.w.data());
  GptqOptions g;
  ASSERT_TRUE(gptq_quantize(plain, l.w.data(), l.H, g, c.ctx));
  const std::vector<float> wt = asymmetric_target(l.w.data(), l.N, l.K, l.H, l.D, g.percdamp, c.ctx);
  ASSERT_TRUE(gptq_quantize(asym, wt.data(), l.H, g, c.ctx));
  const double e_rtn = l.error(dequantize_all(rtn)), e_plain = l.error(dequantize_all(plain)),
               e_asym = l.error(dequantize_all(asym));
  std::printf("W8A8 error: rtn %.4g gptq %.4g gptq asym-target %.4g\n", e_rtn, e_plain, e_asym);
  EXPECT_LT(e_asym, 0.8 * e_plain) << "rtn " << e_rtn << " gptq " << e_plain << " asym " << e_asym;
  EXPECT_LT(e_asym, 0.8 * e_rtn) << "rtn " << e_rtn << " gptq " << e_plain << " asym " << e_asym;
  const std::vector<double> zero(l.K * l.K, 0.0);
  const std::vector<float> same = asymmetric_target(l.w.data(), l.N, l.K, l.H, zero, g.percdamp, c.ctx);
  for (size_t i = 0; i < same.size(); ++i) ASSERT_EQ(same[i], l.w[i]);
}

}  // namespace
}  // namespace blockspec
