// FidelityStats against hand-computed tiny distributions.
#include "runtime/fidelity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/error.h"

namespace blockspec {
namespace {

TEST(Fidelity, LogSoftmaxMatchesHandComputation) {
  const float x[3] = {0.0f, std::log(2.0f), std::log(5.0f)};  // softmax = 1/8, 2/8, 5/8
  std::vector<double> lp;
  log_softmax(x, 3, lp);
  ASSERT_EQ(lp.size(), 3u);
  EXPECT_NEAR(lp[0], std::log(1.0 / 8), 1e-7);
  EXPECT_NEAR(lp[1], std::log(2.0 / 8), 1e-7);
  EXPECT_NEAR(lp[2], std::log(5.0 / 8), 1e-7);
}

TEST(Fidelity, IdenticalInputsGiveZeroKlEqualPplFullAgreement) {
  const float rows[3][4] = {{1.0f, 2.0f, 3.0f, 4.0f}, {-3.0f, 0.5f, 0.25f, 7.0f}, {0, 0, 0, 0}};
  const int32_t targets[3] = {2, 1, 3};
  FidelityStats s;
  for (int i = 0; i < 3; ++i) s.add(rows[i], rows[i], 4, targets[i]);
  EXPECT_EQ(s.n_tokens(), 3);
  EXPECT_EQ(s.kld_mean(), 0.0);  // exactly: the same arithmetic on the same floats
  EXPECT_EQ(s.kld_p99(), 0.0);
  EXPECT_EQ(s.ppl(), s.ppl_reference());
  EXPECT_EQ(s.top1_agreement(), 1.0);
  // Uniform row, target 3: nll = log 4.
  FidelityStats u;
  u.add(rows[2], rows[2], 4, 3);
  EXPECT_NEAR(u.ppl(), 4.0, 1e-12);
}

TEST(Fidelity, KnownTwoTokenCase) {
  // Vocab of 2. Position 1: A = softmax(0, 0) = (1/2, 1/2), B = softmax(0, log 3) = (1/4, 3/4),
  // target 1. Position 2: A = (1/4, 3/4), B = (1/2, 1/2), target 0.
  const float half[2] = {0.0f, 0.0f};
  const float quarter[2] = {0.0f, std::log(3.0f)};
  FidelityStats s;
  s.add(half, quarter, 2, 1);
  s.add(quarter, half, 2, 0);
  ASSERT_EQ(s.n_tokens(), 2);
  // NLL_A = (-log 1/2 - log 1/4) / 2, NLL_B = (-log 3/4 - log 1/2) / 2.
  EXPECT_NEAR(s.ppl(), std::exp((std::log(2.0) + std::log(4.0)) / 2), 1e-6);
  EXPECT_NEAR(s.ppl_reference(), std::exp((std::log(4.0 / 3) + std::log(2.0)) / 2), 1e-6);
  // KL(B || A): position 1: 1/4 log(1/2) + 3/4 log(3/2); position 2: 1/2 log 2 + 1/2 log(2/3).
  const double kl1 = 0.25 * std::log(0.5) + 0.75 * std::log(1.5);
  const double kl2 = 0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3);
  EXPECT_NEAR(s.kld_values()[0], kl1, 1e-7);
  EXPECT_NEAR(s.kld_values()[1], kl2, 1e-7);
  EXPECT_NEAR(s.kld_mean(), (kl1 + kl2) / 2, 1e-7);
  EXPECT_NEAR(s.kld_p99(), std::max(kl1, kl2), 1e-7);
  EXPECT_NEAR(s.kld_max(), std::max(kl1, kl2), 1e-7);
  // Argmax: position 1 A ties -> index 0, B -> 1 (disagree); position 2 A -> 1, B ties -> 0.
  EXPECT_EQ(s.top1_agreement(), 0.0);
}

TEST(Fidelity, TopOneAgreementCountsFirstIndexOfMax) {
  const float a[3] = {1.0f, 5.0f, 5.0f};  // argmax 1 (first of the tie)
  const float b[3] = {0.0f, 9.0f, 1.0f};  // argmax 1
  const float c[3] = {0.0f, 1.0f, 9.0f};  // argmax 2
  FidelityStats s;
  s.add(a, b, 3, 0);
  s.add(a, c, 3, 0);
  EXPECT_EQ(s.top1_agreement(), 0.5);
}

TEST(Fidelity, StableWithHugeLogits) {
  // exp(1e4) overflows double; a stable log-softmax must not care.
  const float a[3] = {1e4f, -1e4f, 0.0f};
  const float b[3] = {1e4f - 1.0f, 1e4f, -1e4f};
  FidelityStats s;
  s.add(a, b, 3, 0);
  EXPECT_TRUE(std::isfinite(s.ppl()));
  EXPECT_TRUE(std::isfinite(s.ppl_reference()));
  EXPECT_TRUE(std::isfinite(s.kld_mean()));
  EXPECT_NEAR(s.ppl(), 1.0, 1e-12);  // A puts all mass on token 0
  // B = (1/(1+e), e/(1+e), 0); target 0: nll_B = log(1 + e).
  EXPECT_NEAR(s.nll_mean_reference(), std::log(1.0 + std::exp(1.0)), 1e-9);
  // KL(B || A) is dominated by pB(1) (log pB(1) - log pA(1)) with log pA(1) = -2e4.
  const double pb1 = std::exp(1.0) / (1.0 + std::exp(1.0));
  EXPECT_NEAR(s.kld_mean(), pb1 * 2e4, 1.0);
  EXPECT_GT(s.kld_mean(), 0.0);
  // Identical huge rows: still exactly zero.
  FidelityStats z;
  z.add(a, a, 3, 2);
  EXPECT_EQ(z.kld_mean(), 0.0);
  EXPECT_NEAR(z.nll_mean(), 1e4, 1e-6);  // finite NLL (its ppl, e^1e4, is not a double)
}

TEST(Fidelity, PercentileNearestRank) {
  // Wikipedia's example: {15, 20, 35, 40, 50}: p30 -> 20, p40 -> 20, p50 -> 35, p100 -> 50.
  const std::vector<double> v = {50, 15, 40, 20, 35};
  EXPECT_EQ(percentile_nearest_rank(v, 30), 20);
  EXPECT_EQ(percentile_nearest_rank(v, 40), 20);
  EXPECT_EQ(percentile_nearest_rank(v, 50), 35);
  EXPECT_EQ(percentile_nearest_rank(v, 100), 50);
  EXPECT_EQ(percentile_nearest_rank(v, 0), 15);
  // 1..200: p99 -> rank ceil(198) = 198; 1..100: p99 -> 99.
  std::vector<double> w, h;
  for (int i = 200; i >= 1; --i) w.push_back(i);
  for (int i = 1; i <= 100; ++i) h.push_back(i);
  EXPECT_EQ(percentile_nearest_rank(w, 99), 198);
  EXPECT_EQ(percentile_nearest_rank(h, 99), 99);
  EXPECT_EQ(percentile_nearest_rank({}, 99), 0);
}

TEST(Fidelity, BadInputThrows) {
  const float nan_row[2] = {0.0f, std::nanf("")};
  const float ok[2] = {0.0f, 1.0f};
  FidelityStats s;
  EXPECT_THROW(s.add(nan_row, ok, 2, 0), Error);
  EXPECT_THROW(s.add(ok, nan_row, 2, 0), Error);
  EXPECT_THROW(s.add(ok, ok, 2, 2), Error);
  EXPECT_THROW(s.add(ok, ok, 2, -1), Error);
  EXPECT_EQ(s.n_tokens(), 0);
  EXPECT_EQ(s.kld_mean(), 0.0);
}

}  // namespace
}  // namespace blockspec
