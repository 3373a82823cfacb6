#include "train/gemm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/error.h"

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

void gemm_nt_bf16(const OpContext& c, const float* x, const uint16_t* w, int64_t M, int64_t K, int64_t N, float* y) {
  if (M == 0 || N == 0) return;
  std::vector<uint16_t> xb(M * K);
  std::vector<float> xr;
  c.pool->parallel_for(M * K, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) xb[i] = f32_to_bf16(x[i]);
  });
  if (c.k->matmul_bf16_dp == nullptr) {
    xr.resize(M * K);
    for (int64_t i = 0; i < M * K; ++i) xr[i] = bf16_to_f32(xb[i]);
  }
  c.pool->parallel_for_grain(N, 16, [&](int64_t n0, int64_t n1) {
    if (c.k->matmul_bf16_dp != nullptr) c.k->matmul_bf16_dp(xb.data(), w, y, M, K, N, n0, n1);
    else c.k->matmul_bf16(xr.data(), w, y, M, K, N, n0, n1);
  });
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

double cross_entropy_rows(const OpContext& c, const float* logits, const int32_t* labels, const float* weight,
                          int64_t n, int64_t V, double denom, float* dlogits, uint8_t* correct) {
  if (denom <= 0) fail("cross_entropy: the denominator must be > 0, found ", denom);
  for (int64_t i = 0; i < n; ++i)
    if (weight[i] != 0 && (labels[i] < 0 || labels[i] >= V))
      fail("cross_entropy: label ", labels[i], " of row ", i, " outside [0, ", V, ")");
  std::vector<double> row_loss(n, 0.0);
  c.pool->parallel_for(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float* z = logits + i * V;
      const int64_t am = std::max_element(z, z + V) - z;
      correct[i] = am == labels[i];
      float* dz = dlogits ? dlogits + i * V : nullptr;
      if (weight[i] == 0) {
        if (dz) std::fill(dz, dz + V, 0.f);
        continue;
      }
      const float mx = z[am];
      double sum = 0;
      for (int64_t j = 0; j < V; ++j) sum += std::exp(z[j] - mx);
      const double lse = mx + std::log(sum), cw = weight[i] / denom;
      row_loss[i] = cw * (lse - z[labels[i]]);
      if (dz) {
        const float lse_f = static_cast<float>(lse), cf = static_cast<float>(cw);
        const float zl = z[labels[i]];
        for (int64_t j = 0; j < V; ++j) dz[j] = cf * std::exp(z[j] - lse_f);
        dz[labels[i]] = cf * std::exp(zl - lse_f) - cf;
      }
    }
  });
  double loss = 0;
  for (double l : row_loss) loss += l;
  return loss;
}

}  // namespace blockspec
