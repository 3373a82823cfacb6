// The trainer's GEMMs on the engine's f32 kernel against their scalar
// reference twin (grad_ops.h linear_backward, double accumulation), at
// shapes with ragged tails, with and without a kept transpose.
#include "train/gemm.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>

#include "train/grad_ops.h"
#include "../kernels/randv.h"

namespace blockspec {
namespace {

double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return worst / scale;
}

TEST(TrainGemm, ForwardAndBackwardMatchTheReference) {
  ThreadPool pool(2);
  const KernelTable kt = select_kernels("");
  const OpContext c{&kt, &pool};
  for (auto [M, K, N] : {std::array<int64_t, 3>{1, 1, 1}, {5, 33, 7}, {37, 70, 19}, {64, 96, 130}}) {
    const std::vector<float> x = randv(M * K, 1), w = randv(N * K, 2), dy = randv(M * N, 3);
    std::vector<float> y(M * N), y_ref(M * N);
    gemm_nt(c, x.data(), w.data(), M, K, N, y.data());
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double a = 0;
        for (int64_t k = 0; k < K; ++k) a += static_cast<double>(x[m * K + k]) * w[n * K + k];
        y_ref[m * N + n] = static_cast<float>(a);
      }
    EXPECT_LT(max_rel(y, y_ref), 1e-5) << M << "x" << K << "x" << N;
    std::vector<float> w_t(K * N);
    transpose(c, w.data(), N, K, w_t.data());
    EXPECT_EQ(w_t[(K - 1) * N + (N - 1)], w[(N - 1) * K + (K - 1)]);
    std::vector<float> dx_ref(M * K), dw_ref(N * K, 0.5f);
    linear_backward(x.data(), w.data(), dy.data(), M, K, N, dx_ref.data(), dw_ref.data(), nullptr, pool);
    for (const float* kept : {static_cast<const float*>(nullptr), static_cast<const float*>(w_t.data())}) {
      std::vector<float> dx(M * K), dw(N * K, 0.5f);  // dw accumulates onto what is there
      gemm_backward(c, x.data(), w.data(), kept, dy.data(), M, K, N, dx.data(), dw.data());
      EXPECT_LT(max_rel(dx, dx_ref), 1e-5) << M << "x" << K << "x" << N;
      EXPECT_LT(max_rel(dw, dw_ref), 1e-5) << M << "x" << K << "x" << N;
    }
  }
}

}  // namespace
}  // namespace blockspec
