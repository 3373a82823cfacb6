// See gptq.h.
#include "quantize/gptq.h"

#include "quantize/linalg.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace blockspec {


bool gptq_quantize(QuantWeight& qw, const float* w, const std::vector<double>& H0, const GptqOptions& opts,
                   const OpContext& ctx) {
  ThreadPool& pool = *ctx.pool;
  const int64_t N = qw.N, K = qw.K;
  quantize_rtn(qw, w);  // the fallback
  std::vector<double> H = H0;
  std::vector<int64_t> perm(K);
  std::iota(perm.begin(), perm.end(), 0);
  std::vector<bool> dead(K, false);
  for (int64_t i = 0; i < K; ++i)
    if (H[i * K + i] == 0.0) H[i * K + i] = 1.0, dead[i] = true;
  if (opts.act_order)
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return H[a * K + a] > H[b * K + b]; });
  double mean = 0.0;
  for (int64_t i = 0; i < K; ++i) mean += H[i * K + i];
  mean /= static_cast<double>(K);
  // Hr = J P^T H P J (permuted, then reversed) so that its lower Cholesky factor L gives H_perm = U' U'^T with
  // U' = J L J upper, and U = U'^-1 = J L^-1 J.
  std::vector<float> A(K * K, 0.f);
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = 0; j <= i; ++j) A[i * K + j] = static_cast<float>(H[perm[K - 1 - i] * K + perm[K - 1 - j]]);
  for (int64_t i = 0; i < K; ++i) A[i * K + i] += static_cast<float>(opts.percdamp * mean);
  if (!cholesky_lower(A, K, ctx)) return false;
  std::vector<float> Xt;  // Xt[c][i] = (L^-1)[i][c]
  invert_lower_transposed(A, K, Xt, ctx);
  A.clear();
  A.shrink_to_fit();
  // U[i][j] = X[K-1-i][K-1-j] = Xt[K-1-j][K-1-i], upper (j >= i).
  std::vector<float> U(K * K, 0.f);
  constexpr int64_t T = 64;  // transposed in T x T tiles: Xt is read a cache line at a time
  const int64_t nt = (K + T - 1) / T;
  pool.parallel_for(nt, [&](int64_t a, int64_t b) {
    for (int64_t ti = a; ti < b; ++ti)
      for (int64_t tj = ti; tj < nt; ++tj)
        for (int64_t j = tj * T; j < std::min(K, tj * T + T); ++j)
          for (int64_t i = ti * T; i < std::min(j + 1, ti * T + T); ++i)
            U[i * K + j] = Xt[(K - 1 - j) * K + (K - 1 - i)];
  });
  Xt.clear();
  Xt.shrink_to_fit();

  std::vector<float> Wt(K * N);  // [K, N]: permuted column c of W as a contiguous row
  for (int64_t c = 0; c < K; ++c)
    for (int64_t n = 0; n < N; ++n) Wt[c * N + n] = dead[perm[c]] ? 0.f : w[n * K + perm[c]];
  const int64_t B = opts.block;
  std::vector<float> Err(B * N), ErrT(N * B), At, Y;
  for (int64_t i1 = 0; i1 < K; i1 += B) {
    const int64_t i2 = std::min(K, i1 + B);
    for (int64_t c = i1; c < i2; ++c) {
      const int64_t kc = perm[c];
      const float d = U[c * K + c];
      float* wc = Wt.data() + c * N;
      float* e = Err.data() + (c - i1) * N;
      for (int64_t n = 0; n < N; ++n) {
        const int8_t q = qw.quantize(n, kc, wc[n]);
        qw.q[n * K + kc] = q;
        e[n] = (wc[n] - qw.dequantize_code(n, kc, q)) / d;
      }
      for (int64_t j = c + 1; j < i2; ++j) axpy_sub(Wt.data() + j * N, e, U[c * K + j], N);
    }
    // Lazy batch update of the columns after the block, one f32 GEMM (GPTQ's W[:, i2:] -= Err U[i1:i2, i2:]):
    // Y [R, N] = At [R, Bp] . ErrT [N, Bp]^T with At[j][c] = U[i1 + c][i2 + j], then Wt[i2 + j] -= Y[j].
    const int64_t R = K - i2, Bp = i2 - i1;
    if (R == 0) break;
    for (int64_t c = 0; c < Bp; ++c)
      for (int64_t n = 0; n < N; ++n) ErrT[n * Bp + c] = Err[c * N + n];
    At.resize(R * Bp);
    Y.resize(R * N);
    pool.parallel_for(R, [&](int64_t a, int64_t b) {
      for (int64_t j = a; j < b; ++j)
        for (int64_t c = 0; c < Bp; ++c) At[j * Bp + c] = U[(i1 + c) * K + i2 + j];
    });
    linear(ctx, At.data(), Tensor::view(DType::kF32, {N, Bp}, ErrT.data()), nullptr, Y.data(), R);
    pool.parallel_for(R, [&](int64_t a, int64_t b) {
      for (int64_t j = a; j < b; ++j) {
        float* wj = Wt.data() + (i2 + j) * N;
        const float* yj = Y.data() + j * N;
        for (int64_t n = 0; n < N; ++n) wj[n] -= yj[n];
      }
    });
  }
  return true;
}

std::vector<float> asymmetric_target(const float* w, int64_t N, int64_t K, const std::vector<double>& H,
                                     const std::vector<double>& D, double percdamp, const OpContext& ctx) {
  ThreadPool& pool = *ctx.pool;
  std::vector<float> A(K * K, 0.f);  // lower triangle: H + damping, then its Cholesky factor L
  double mean = 0.0;
  for (int64_t i = 0; i < K; ++i) mean += H[i * K + i] == 0.0 ? 1.0 : H[i * K + i];
  mean /= static_cast<double>(K);
  for (int64_t i = 0; i < K; ++i) {
    for (int64_t j = 0; j < i; ++j) A[i * K + j] = static_cast<float>(H[i * K + j]);
    A[i * K + i] = static_cast<float>((H[i * K + i] == 0.0 ? 1.0 : H[i * K + i]) + percdamp * mean);
  }
  if (!cholesky_lower(A, K, ctx)) return {};
  std::vector<float> Xt;  // Xt = L^-T
  invert_lower_transposed(A, K, Xt, ctx);
  // linear(x, w) is y = x w^T, so: P = W D takes w = D^T; Z = P L^-T takes w = L^-1 (Xt transposed);
  // Y = Z L^-1 takes w = Xt. Then W' = W + Y = W + W D (L L^T)^-1.
  std::vector<float>& M = A;  // reused [K, K]
  pool.parallel_for(K, [&](int64_t a, int64_t b) {
    for (int64_t j = a; j < b; ++j)
      for (int64_t i = 0; i < K; ++i) M[j * K + i] = static_cast<float>(D[i * K + j]);
  });
  std::vector<float> P(N * K), Z(N * K);
  linear(ctx, w, Tensor::view(DType::kF32, {K, K}, M.data()), nullptr, P.data(), N);
  pool.parallel_for(K, [&](int64_t a, int64_t b) {
    for (int64_t j = a; j < b; ++j)
      for (int64_t i = 0; i < K; ++i) M[j * K + i] = Xt[i * K + j];
  });
  linear(ctx, P.data(), Tensor::view(DType::kF32, {K, K}, M.data()), nullptr, Z.data(), N);
  linear(ctx, Z.data(), Tensor::view(DType::kF32, {K, K}, Xt.data()), nullptr, P.data(), N);
  for (int64_t i = 0; i < N * K; ++i) P[i] += w[i];
  return P;
}

}  // namespace blockspec
