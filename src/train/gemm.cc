#include "train/gemm.h"

#include <algorithm>
#include <vector>

namespace blockspec {

void transpose(const OpContext& c, const float* in, int64_t R, int64_t C, float* out) {
  constexpr int64_t kT = 32;  // tiles of 32 x 32 keep both sides in L1
  c.pool->parallel_for((C + kT - 1) / kT, [&](int64_t b0, int64_t b1) {
    for (int64_t c0 = b0 * kT; c0 < std::min(C, b1 * kT); c0 += kT)
      for (int64_t r0 = 0; r0 < R; r0 += kT)
        for (int64_t j = c0; j < std::min(C, c0 + kT); ++j)
          for (int64_t i = r0; i < std::min(R, r0 + kT); ++i) out[j * R + i] = in[i * C + j];
  });
}

void gemm_nt(const OpContext& c, const float* x, const float* w, int64_t M, int64_t K, int64_t N, float* y) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    std::fill(y, y + M * N, 0.f);
    return;
  }
  c.pool->parallel_for_grain(N, 16, [&](int64_t n0, int64_t n1) { c.k->matmul_f32(x, w, y, M, K, N, n0, n1); });
}

void gemm_backward(const OpContext& c, const float* x, const float* w, const float* w_t, const float* dy, int64_t M,
                   int64_t K, int64_t N, float* dx, float* dw) {
  if (dx != nullptr) {
    std::vector<float> own;
    if (w_t == nullptr) {
      own.resize(K * N);
      transpose(c, w, N, K, own.data());
      w_t = own.data();
    }
    gemm_nt(c, dy, w_t, M, N, K, dx);  // dx[M, K] = dy[M, N] . (w^T)[K, N]^T
  }
  if (dw != nullptr && M > 0) {
    std::vector<float> dy_t(N * M), x_t(K * M), g(N * K);
    transpose(c, dy, M, N, dy_t.data());
    transpose(c, x, M, K, x_t.data());
    gemm_nt(c, dy_t.data(), x_t.data(), N, M, K, g.data());  // g[N, K] = (dy^T)[N, M] . (x^T)[K, M]^T
    c.pool->parallel_for(N * K, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) dw[i] += g[i];
    });
  }
}

}  // namespace blockspec
