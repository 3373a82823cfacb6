// Every hand-written backward of train/grad_ops.h against central finite
// differences of an independent float64 forward written here (h = 1e-6),
// the check training.md §11 asks for besides the PyTorch goldens: it also
// catches a backward that agrees with a wrong reference. Masked elements
// must get exactly zero gradient.
#include "train/grad_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "base/error.h"
#include "formats/hf_config.h"
#include "kernels/kernel_table.h"
#include "kernels/ops.h"
#include "../kernels/randv.h"

namespace blockspec {
namespace {

// max |analytic - numeric| / max(1e-3, max |numeric|) over every element of
// `x`, where numeric = (L(x + h e_i) - L(x - h e_i)) / 2h of the f64 loss L.
double fd_error(std::vector<double>& x, const std::function<double(const std::vector<double>&)>& L,
                const std::vector<float>& analytic) {
  const double h = 1e-6;
  double err = 0, scale = 1e-3;
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = L(x);
    x[i] = keep - h;
    const double down = L(x);
    x[i] = keep;
    const double num = (up - down) / (2 * h);
    err = std::max(err, std::fabs(num - analytic[i]));
    scale = std::max(scale, std::fabs(num));
  }
  return err / scale;
}

std::vector<double> to_d(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

TEST(GradOps, LinearBackward) {
  const int64_t M = 3, K = 5, N = 4;
  auto x = randv(M * K, 1), w = randv(N * K, 2), b = randv(N, 3), dy = randv(M * N, 4);
  std::vector<float> dx(M * K), dw(N * K, 0.f), db(N, 0.f);
  ThreadPool pool(2);
  linear_backward(x.data(), w.data(), dy.data(), M, K, N, dx.data(), dw.data(), db.data(), pool);
  auto L = [&](const std::vector<double>& X, const std::vector<double>& W, const std::vector<double>& B) {
    double l = 0;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double y = B[n];
        for (int64_t j = 0; j < K; ++j) y += X[m * K + j] * W[n * K + j];
        l += dy[m * N + n] * y;
      }
    return l;
  };
  auto X = to_d(x), W = to_d(w), B = to_d(b);
  EXPECT_LT(fd_error(X, [&](const std::vector<double>& v) { return L(v, W, B); }, dx), 1e-6);
  EXPECT_LT(fd_error(W, [&](const std::vector<double>& v) { return L(X, v, B); }, dw), 1e-6);
  EXPECT_LT(fd_error(B, [&](const std::vector<double>& v) { return L(X, W, v); }, db), 1e-6);
}

TEST(GradOps, RmsnormBackward) {
  const int64_t R = 3, D = 7;
  const float eps = 1e-6f;
  auto x = randv(R * D, 5), w = randv(D, 6), dy = randv(R * D, 7);
  std::vector<float> dx(R * D), dw(D, 0.f);
  rmsnorm_backward(x.data(), w.data(), eps, dy.data(), R, D, dx.data(), dw.data());
  auto L = [&](const std::vector<double>& X, const std::vector<double>& W) {
    double l = 0;
    for (int64_t r = 0; r < R; ++r) {
      double ss = 0;
      for (int64_t j = 0; j < D; ++j) ss += X[r * D + j] * X[r * D + j];
      const double inv = 1 / std::sqrt(ss / D + eps);
      for (int64_t j = 0; j < D; ++j) l += dy[r * D + j] * X[r * D + j] * inv * W[j];
    }
    return l;
  };
  auto X = to_d(x), W = to_d(w);
  EXPECT_LT(fd_error(X, [&](const std::vector<double>& v) { return L(v, W); }, dx), 1e-6);
  EXPECT_LT(fd_error(W, [&](const std::vector<double>& v) { return L(X, v); }, dw), 1e-6);
}

TEST(GradOps, SwigluBackward) {
  const int64_t R = 2, I = 6;
  auto gu = randv(R * 2 * I, 8, 2.f), dout = randv(R * I, 9);
  std::vector<float> dgu(R * 2 * I);
  swiglu_backward(gu.data(), dout.data(), R, I, dgu.data());
  auto GU = to_d(gu);
  auto L = [&](const std::vector<double>& v) {
    double l = 0;
    for (int64_t r = 0; r < R; ++r)
      for (int64_t i = 0; i < I; ++i) {
        const double g = v[r * 2 * I + i], u = v[r * 2 * I + I + i];
        l += dout[r * I + i] * g / (1 + std::exp(-g)) * u;
      }
    return l;
  };
  EXPECT_LT(fd_error(GU, L, dgu), 1e-6);
}

// RoPE is linear in x: its backward must be its transpose, <dy, R x> = <R^T dy, x>.
TEST(GradOps, RopeBackwardIsTheTranspose) {
  ModelConfig c;
  c.head_dim = 16, c.rope.theta = 10000.0;
  const RopeTables rope = compute_rope(c);
  const int64_t T = 3, H = 2, D = 16;
  const std::vector<int64_t> pos = {0, 5, 77};
  auto x = randv(T * H * D, 10), dy = randv(T * H * D, 11);
  std::vector<float> rx = x, rtdy = dy;
  rope_neox(rx.data(), pos.data(), T, H, D, rope.inv_freq.data(), rope.rotary_dim, 1.3f);
  rope_neox_backward(rtdy.data(), pos.data(), T, H, D, rope.inv_freq.data(), rope.rotary_dim, 1.3f);
  double a = 0, b = 0;
  for (size_t i = 0; i < x.size(); ++i) a += static_cast<double>(dy[i]) * rx[i], b += static_cast<double>(rtdy[i]) * x[i];
  EXPECT_NEAR(a, b, 1e-5 * std::max(1.0, std::fabs(a)));
  // and it is not the identity: a rotated position differs
  EXPECT_GT(std::fabs(rtdy[2 * H * D] - dy[2 * H * D]), 1e-3);
}

TEST(GradOps, MaskedAttentionForwardAndBackward) {
  // 3 queries, 7 keys, GQA 4 heads over 2 KV heads; query 1 sees two spans,
  // key 6 is visible to nobody (its gradient must be exactly 0).
  const MaskedAttentionShape s{3, 7, 4, 2, 5, 0.4f};
  const std::vector<int32_t> spans = {0, 3, 3, 4, 0, 2, 4, 6, 2, 3, 5, 5};
  auto q = randv(3 * 4 * 5, 12), k = randv(7 * 2 * 5, 13), v = randv(7 * 2 * 5, 14), dout = randv(3 * 4 * 5, 15);
  ThreadPool pool(2);
  std::vector<float> out(3 * 4 * 5), probs, dq(q.size()), dk(k.size()), dv(v.size());
  masked_attention_forward(q.data(), k.data(), v.data(), spans.data(), s, out.data(), probs, pool);
  masked_attention_backward(q.data(), k.data(), v.data(), spans.data(), s, probs, dout.data(), dq.data(), dk.data(),
                            dv.data(), pool);
  auto fwd = [&](const std::vector<double>& Q, const std::vector<double>& Kk, const std::vector<double>& V,
                 std::vector<double>* o) {
    double l = 0;
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t h = 0; h < 4; ++h) {
        const int64_t g = h / 2;
        std::vector<std::pair<double, int64_t>> sc;
        for (int r = 0; r < 2; ++r)
          for (int32_t j = spans[4 * i + 2 * r]; j < spans[4 * i + 2 * r + 1]; ++j) {
            double d = 0;
            for (int64_t t = 0; t < 5; ++t) d += Q[(i * 4 + h) * 5 + t] * Kk[(j * 2 + g) * 5 + t];
            sc.push_back({d * 0.4, j});
          }
        double mx = -1e300, sum = 0;
        for (auto& [d, j] : sc) mx = std::max(mx, d);
        for (auto& [d, j] : sc) sum += std::exp(d - mx);
        for (int64_t t = 0; t < 5; ++t) {
          double ot = 0;
          for (auto& [d, j] : sc) ot += std::exp(d - mx) / sum * V[(j * 2 + g) * 5 + t];
          if (o) (*o)[(i * 4 + h) * 5 + t] = ot;
          l += dout[(i * 4 + h) * 5 + t] * ot;
        }
      }
    return l;
  };
  auto Q = to_d(q), Kk = to_d(k), V = to_d(v);
  std::vector<double> ref(out.size());
  fwd(Q, Kk, V, &ref);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], ref[i], 1e-6) << i;
  EXPECT_LT(fd_error(Q, [&](const std::vector<double>& x) { return fwd(x, Kk, V, nullptr); }, dq), 1e-6);
  EXPECT_LT(fd_error(Kk, [&](const std::vector<double>& x) { return fwd(Q, x, V, nullptr); }, dk), 1e-6);
  EXPECT_LT(fd_error(V, [&](const std::vector<double>& x) { return fwd(Q, Kk, x, nullptr); }, dv), 1e-6);
  for (int64_t t = 0; t < 2 * 5; ++t) {
    EXPECT_EQ(dk[6 * 10 + t], 0.f);
    EXPECT_EQ(dv[6 * 10 + t], 0.f);
  }
  // A query whose spans hold no key is a caller bug, named in one line.
  const std::vector<int32_t> empty = {0, 0, 0, 0, 0, 3, 0, 0, 0, 3, 0, 0};
  EXPECT_THROW(masked_attention_forward(q.data(), k.data(), v.data(), empty.data(), s, out.data(), probs, pool), Error);
}

TEST(GradOps, WeightedCrossEntropy) {
  const int64_t n = 4, V = 9;
  auto z = randv(n * V, 16, 2.f);
  const std::vector<int32_t> labels = {3, 0, 8, 5};
  const std::vector<float> w = {1.f, 0.5f, 0.f, 0.25f};  // row 2 masked
  const double denom = 3.0;
  std::vector<float> dz(n * V);
  const double loss = cross_entropy(z.data(), labels.data(), w.data(), n, V, denom, dz.data());
  auto L = [&](const std::vector<double>& Z) {
    double l = 0;
    for (int64_t i = 0; i < n; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < V; ++j) sum += std::exp(Z[i * V + j]);
      l += w[i] * (std::log(sum) - Z[i * V + labels[i]]) / denom;
    }
    return l;
  };
  auto Z = to_d(z);
  EXPECT_NEAR(loss, L(Z), 1e-9);
  EXPECT_LT(fd_error(Z, L, dz), 1e-6);
  for (int64_t j = 0; j < V; ++j) EXPECT_EQ(dz[2 * V + j], 0.f);
  const std::vector<int32_t> bad = {3, 0, 8, 9};
  EXPECT_THROW(cross_entropy(z.data(), bad.data(), w.data(), n, V, denom, dz.data()), Error);
}

}  // namespace
}  // namespace blockspec
