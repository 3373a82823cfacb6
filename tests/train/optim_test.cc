// AdamW, clipping and the schedule against their definitions, worked by hand
// in double (torch.optim.AdamW's documented algorithm; clip_grad_norm_).
#include "train/optim.h"

#include <gtest/gtest.h>

#include <cmath>

#include "base/error.h"

namespace blockspec {
namespace {

TEST(AdamW, TwoStepsFollowTheTorchAlgorithm) {
  AdamWOptions o;
  o.beta1 = 0.9, o.beta2 = 0.95, o.eps = 1e-8, o.weight_decay = 0.1;
  std::vector<float> p = {1.0f, -2.0f}, g1 = {0.5f, -0.25f}, g2 = {-1.0f, 0.125f};
  AdamW opt(2);
  opt.step(p.data(), g1.data(), 1, 1e-2, o);
  opt.step(p.data(), g2.data(), 2, 5e-3, o);
  for (int i = 0; i < 2; ++i) {
    double P = i == 0 ? 1.0 : -2.0, m = 0, v = 0;
    const double gs[2] = {i == 0 ? 0.5 : -0.25, i == 0 ? -1.0 : 0.125}, lrs[2] = {1e-2, 5e-3};
    for (int t = 1; t <= 2; ++t) {
      const double g = gs[t - 1], lr = lrs[t - 1];
      P *= 1 - lr * 0.1;
      m = 0.9 * m + 0.1 * g;
      v = 0.95 * v + 0.05 * g * g;
      P -= lr * (m / (1 - std::pow(0.9, t))) / (std::sqrt(v / (1 - std::pow(0.95, t))) + 1e-8);
    }
    EXPECT_NEAR(p[i], P, 1e-7) << i;
  }
  // The first step of Adam moves each weight by about lr against its gradient's sign.
  std::vector<float> q = {0.f};
  const float g = 3.f;
  AdamW(1).step(q.data(), &g, 1, 1e-3, AdamWOptions{1e-3, 0.9, 0.999, 1e-8, 0.0});
  EXPECT_NEAR(q[0], -1e-3, 1e-9);
  EXPECT_THROW(opt.step(p.data(), g1.data(), 0, 1e-3, o), Error);
}

TEST(AdamW, ThreadedStepIsTheSerialOne) {
  const int64_t n = 10007;
  std::vector<float> p(n), g(n);
  for (int64_t i = 0; i < n; ++i) p[i] = std::sin(0.1 * i), g[i] = std::cos(0.37 * i);
  std::vector<float> q = p;
  AdamW a(n), b(n);
  ThreadPool pool(2);
  const AdamWOptions o;
  for (int64_t t = 1; t <= 3; ++t) {
    a.step(p.data(), g.data(), t, 1e-3, o);
    b.step(q.data(), g.data(), t, 1e-3, o, pool);
  }
  EXPECT_EQ(p, q);
  EXPECT_EQ(a.m(), b.m());
  EXPECT_EQ(a.v(), b.v());
}

TEST(ClipGradNorm, ScalesAllTogetherOnlyAboveTheLimit) {
  std::vector<float> a = {3.f, 0.f}, b = {4.f};  // norm 5
  EXPECT_NEAR(clip_grad_norm({{a.data(), 2}, {b.data(), 1}}, 10.0), 5.0, 1e-12);
  EXPECT_EQ(a[0], 3.f);
  EXPECT_NEAR(clip_grad_norm({{a.data(), 2}, {b.data(), 1}}, 1.0), 5.0, 1e-12);
  EXPECT_NEAR(a[0], 0.6f, 1e-6);
  EXPECT_NEAR(b[0], 0.8f, 1e-6);
}

TEST(LrSchedule, WarmupThenCosineOrLinearToTheFloor) {
  // 100 steps, 10 warm-up, peak 1e-3, floor 0.1x.
  EXPECT_NEAR(lr_at(0, 100, 10, 1e-3, 0.1, true), 1e-4, 1e-15);
  EXPECT_NEAR(lr_at(9, 100, 10, 1e-3, 0.1, true), 1e-3, 1e-15);
  EXPECT_NEAR(lr_at(10, 100, 10, 1e-3, 0.1, true), 1e-3, 1e-15);
  EXPECT_NEAR(lr_at(99, 100, 10, 1e-3, 0.1, true), 1e-4, 1e-15);
  const int64_t mid = 10 + 89 / 2;  // f = 44/89: cosine just above half way
  const double f = 44.0 / 89.0;
  EXPECT_NEAR(lr_at(mid, 100, 10, 1e-3, 0.1, true), 1e-3 * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * f))), 1e-15);
  EXPECT_NEAR(lr_at(mid, 100, 10, 1e-3, 0.1, false), 1e-3 * (0.1 + 0.9 * (1 - f)), 1e-15);
  EXPECT_NEAR(lr_at(5, 10, 0, 2e-3, 0.0, false), 2e-3 * (1 - 5.0 / 9.0), 1e-15);
  EXPECT_THROW(lr_at(0, 0, 0, 1e-3, 0.1, true), Error);
}

}  // namespace
}  // namespace blockspec
