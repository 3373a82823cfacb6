// quantize/linalg.h: the blocked Cholesky and triangular inverse against their definitions.
#include "quantize/linalg.h"
#include "kernels/kernel_table.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace blockspec {
namespace {

TEST(Linalg, CholeskyAndInverse) {
  // 600: two row panels of the Hessian product. 511..1100: around the 512-column blocks of the Cholesky and
  // the inverse (one block, a one-column second block, a partial second block) and their 512-row GEMM calls
  // (1100: 588 rows below the first block, two calls).
  for (int64_t K : {1, 31, 33, 100, 257, 511, 512, 513, 600, 1100}) {
    std::mt19937 rng(static_cast<unsigned>(K));
    std::normal_distribution<float> nd;
    const int64_t T = 2 * K + 5;
    std::vector<float> X(T * K);
    for (float& v : X) v = nd(rng);
    ThreadPool pool(2);
    const KernelTable kt = select_kernels("");
    const OpContext ctx{&kt, &pool};
    std::vector<double> H;
    accumulate_xtx(ctx, X.data(), T, K, H);
    for (int64_t i = 0; i < K; ++i)  // against the definition
      for (int64_t j = 0; j <= i; j += 7) {
        double s = 0;
        for (int64_t t = 0; t < T; ++t) s += double(X[t * K + i]) * X[t * K + j];
        ASSERT_NEAR(H[i * K + j], s, 1e-3 * (1 + std::fabs(s))) << K << " " << i << " " << j;
      }
    std::vector<float> A(K * K);
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j <= i; ++j) A[i * K + j] = static_cast<float>(H[i * K + j]);
    ASSERT_TRUE(cholesky_lower(A, K, ctx));
    for (int64_t i = 0; i < K; ++i) {
      for (int64_t j = i + 1; j < K; ++j) ASSERT_EQ(A[i * K + j], 0.f) << K << " " << i << " " << j;
      for (int64_t j = 0; j <= i; ++j) {
        double s = 0;
        for (int64_t k = 0; k <= j; ++k) s += double(A[i * K + k]) * A[j * K + k];
        ASSERT_NEAR(s, H[i * K + j], 1e-3 * std::sqrt(H[i * K + i] * H[j * K + j])) << K << " " << i << " " << j;
      }
    }
    std::vector<float> Xt;
    invert_lower_transposed(A, K, Xt, ctx);
    for (int64_t i = 0; i < K; ++i)
      for (int64_t c = 0; c < K; ++c) {  // (L X)[i][c] = delta, X zero above the diagonal
        if (i < c) ASSERT_EQ(Xt[c * K + i], 0.f) << K << " " << i << " " << c;
        double s = 0;
        for (int64_t k = c; k <= i; ++k) s += double(A[i * K + k]) * Xt[c * K + k];
        ASSERT_NEAR(s, i == c ? 1.0 : 0.0, 1e-3) << K << " " << i << " " << c;
      }
  }
}

TEST(Linalg, CholeskyRejectsNotPositiveDefinite) {
  ThreadPool pool(2);
  const KernelTable kt = select_kernels("");
  const OpContext ctx{&kt, &pool};
  std::vector<float> bad = {1.f, 0.f, 2.f, -5.f};  // [[1, .], [2, -5]]: not positive definite
  EXPECT_FALSE(cholesky_lower(bad, 2, ctx));
  // K = 600: identity except the 2 x 2 block at rows 520, 530 (in the second 512-column block) is
  // [[1, 2], [2, 1]], eigenvalue -1: the first block factors, the pivot of row 530 is 1 - 4 < 0.
  const int64_t K = 600;
  std::vector<float> A(K * K, 0.f);
  for (int64_t i = 0; i < K; ++i) A[i * K + i] = 1.f;
  A[530 * K + 520] = 2.f;
  EXPECT_FALSE(cholesky_lower(A, K, ctx));
  // The same with a coupling to the first block: row 530 also leans on column 10 (2 and 1.5: 1 - 4 - 2.25 < 0).
  std::fill(A.begin(), A.end(), 0.f);
  for (int64_t i = 0; i < K; ++i) A[i * K + i] = 1.f;
  A[530 * K + 520] = 2.f;
  A[530 * K + 10] = 1.5f;
  EXPECT_FALSE(cholesky_lower(A, K, ctx));
  // A NaN below the diagonal reaches the pivots of later blocks through the trailing update.
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = 0; j <= i; ++j) A[i * K + j] = i == j ? 2.f : 0.f;
  A[590 * K + 5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(cholesky_lower(A, K, ctx));
  A.assign(K * K, 0.f);  // an infinite pivot
  for (int64_t i = 0; i < K; ++i) A[i * K + i] = i == 599 ? std::numeric_limits<float>::infinity() : 1.f;
  EXPECT_FALSE(cholesky_lower(A, K, ctx));
}

}  // namespace
}  // namespace blockspec
