// quantize/linalg.h: the blocked Cholesky and triangular inverse against their definitions.
#include "quantize/linalg.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>

namespace blockspec {
namespace {

TEST(Linalg, CholeskyAndInverse) {
  for (int64_t K : {1, 31, 33, 100, 257}) {
    std::mt19937 rng(static_cast<unsigned>(K));
    std::normal_distribution<float> nd;
    const int64_t T = 2 * K + 5;
    std::vector<float> X(T * K);
    for (float& v : X) v = nd(rng);
    ThreadPool pool(2);
    std::vector<double> H;
    accumulate_xtx(X.data(), T, K, H, pool);
    for (int64_t i = 0; i < K; ++i)  // against the definition
      for (int64_t j = 0; j <= i; j += 7) {
        double s = 0;
        for (int64_t t = 0; t < T; ++t) s += double(X[t * K + i]) * X[t * K + j];
        ASSERT_NEAR(H[i * K + j], s, 1e-3 * (1 + std::fabs(s))) << K << " " << i << " " << j;
      }
    std::vector<float> A(K * K);
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j <= i; ++j) A[i * K + j] = static_cast<float>(H[i * K + j]);
    ASSERT_TRUE(cholesky_lower(A, K, pool));
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        double s = 0;
        for (int64_t k = 0; k <= j; ++k) s += double(A[i * K + k]) * A[j * K + k];
        ASSERT_NEAR(s, H[i * K + j], 1e-3 * std::sqrt(H[i * K + i] * H[j * K + j])) << K << " " << i << " " << j;
      }
    std::vector<float> Xt;
    invert_lower_transposed(A, K, Xt, pool);
    for (int64_t i = 0; i < K; ++i)
      for (int64_t c = 0; c < K; ++c) {  // (L X)[i][c] = delta
        double s = 0;
        for (int64_t k = c; k <= i; ++k) s += double(A[i * K + k]) * Xt[c * K + k];
        ASSERT_NEAR(s, i == c ? 1.0 : 0.0, 1e-3) << K << " " << i << " " << c;
      }
  }
  std::vector<float> bad = {1.f, 0.f, 2.f, -5.f};  // [[1, .], [2, -5]]: not positive definite
  ThreadPool pool(1);
  EXPECT_FALSE(cholesky_lower(bad, 2, pool));
}

}  // namespace
}  // namespace blockspec
