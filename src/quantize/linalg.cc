// See linalg.h.
#include "quantize/linalg.h"

#include <algorithm>
#include <cmath>

namespace blockspec {

__attribute__((target_clones("avx512f", "avx2,fma", "default")))
void axpy_sub(float* __restrict y, const float* __restrict x, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] -= a * x[i];
}

__attribute__((target_clones("avx512f", "avx2,fma", "default")))
void axpy_sub_f64(double* __restrict y, const double* __restrict x, double a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] -= a * x[i];
}

namespace {

// Measured at K = 8960 on the 2-core EPYC (block, rows -> Cholesky s): 256, 256 -> 5.5; 384, 256 -> 4.9;
// 512, 256 -> 4.8; 512, 512 -> 4.4; 768, 256 -> 5.1; 512, 128 -> 5.7 (the inverse within 5% of each).
constexpr int64_t kBlock = 512;  // columns per block step: the inner dimension of the GEMMs
constexpr int64_t kRows = 512;   // rows of x per GEMM call: x [kRows, kBlock] (1 MB) stays in L2

// D [n, n] (row stride n, lower triangle) -> its lower Cholesky factor, unblocked (right-looking, a column of
// L copied to a contiguous vector so every update is an axpy). false on a non-positive or non-finite pivot.
bool cholesky_small(float* D, int64_t n) {
  std::vector<float> col(n);  // [n]: col[i] = L[i][j]
  for (int64_t j = 0; j < n; ++j) {
    const float d = D[j * n + j];
    if (!(d > 0.f) || !std::isfinite(d)) return false;
    const float ljj = std::sqrt(d), inv = 1.f / ljj;
    D[j * n + j] = ljj;
    for (int64_t i = j + 1; i < n; ++i) col[i] = D[i * n + j] *= inv;
    for (int64_t i = j + 1; i < n; ++i) axpy_sub(D + i * n + j + 1, col.data() + j + 1, col[i], i - j);
  }
  return true;
}

// X [n, n] = L^-1 for L [n, n] lower (row stride n): row i of X from rows 0..i-1 (axpy's), zero above.
void invert_small(const float* L, int64_t n, float* X) {
  std::fill(X, X + n * n, 0.f);
  for (int64_t i = 0; i < n; ++i) {
    float* xi = X + i * n;
    for (int64_t k = 0; k < i; ++k) axpy_sub(xi, X + k * n, L[i * n + k], k + 1);
    const float inv = 1.f / L[i * n + i];
    for (int64_t c = 0; c < i; ++c) xi[c] *= inv;
    xi[i] = inv;
  }
}

// dst[r * w + b] = src[r * ld + b] for r < rows, b < w (a panel of a [*, ld] matrix to a contiguous [rows, w]).
void copy_panel(ThreadPool& pool, const float* src, int64_t ld, int64_t rows, int64_t w, float* dst) {
  pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) std::copy(src + r * ld, src + r * ld + w, dst + r * w);
  });
}

// y [M, N] = x [M, Kin] . w [N, Kin]^T in calls of kRows rows of x (w: contiguous rows).
void gemm_nt(const OpContext& ctx, const float* x, int64_t M, const float* w, int64_t N, int64_t Kin, float* y) {
  const Tensor wt = Tensor::view(DType::kF32, {N, Kin}, w);
  for (int64_t m0 = 0; m0 < M; m0 += kRows) linear(ctx, x + m0 * Kin, wt, nullptr, y + m0 * N, std::min(kRows, M - m0));
}

}  // namespace

bool cholesky_lower(std::vector<float>& A, int64_t K, const OpContext& ctx) {
  ThreadPool& pool = *ctx.pool;
  std::vector<float> D(kBlock * kBlock), Di(kBlock * kBlock);  // [w, w]: L_JJ, then its inverse
  std::vector<float> B, Lp;  // [R, w]: A[j1..K)[J] before and after the solve (L's panel below the block)
  std::vector<float> C;      // [kRows, R]: one row panel of Lp Lp^T
  for (int64_t j0 = 0; j0 < K; j0 += kBlock) {
    const int64_t j1 = std::min(K, j0 + kBlock), w = j1 - j0, R = K - j1;
    // Diagonal block J = [j0, j1): unblocked, on a contiguous copy.
    std::fill(D.begin(), D.end(), 0.f);
    for (int64_t a = 0; a < w; ++a) std::copy(&A[(j0 + a) * K + j0], &A[(j0 + a) * K + j0 + a + 1], &D[a * w]);
    if (!cholesky_small(D.data(), w)) return false;
    for (int64_t a = 0; a < w; ++a) std::copy(&D[a * w], &D[a * w + a + 1], &A[(j0 + a) * K + j0]);
    if (R == 0) break;
    // Panel: L[j1..K)[J] = A[j1..K)[J] L_JJ^-T, one GEMM (y = x w^T with w = L_JJ^-1).
    invert_small(D.data(), w, Di.data());
    B.resize(R * w);
    Lp.resize(R * w);
    copy_panel(pool, &A[j1 * K + j0], K, R, w, B.data());
    gemm_nt(ctx, B.data(), R, Di.data(), w, w, Lp.data());
    pool.parallel_for(R, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) std::copy(&Lp[r * w], &Lp[r * w + w], &A[(j1 + r) * K + j0]);
    });
    // Trailing update, lower triangle only: A[j1 + i][j1 + q] -= (Lp Lp^T)[i][q] for q <= i, by row panels
    // [i0, i1) whose product stops at column i1 (the panel's last row).
    C.resize(std::min(kRows, R) * R);
    for (int64_t i0 = 0; i0 < R; i0 += kRows) {
      const int64_t i1 = std::min(R, i0 + kRows), m = i1 - i0;
      gemm_nt(ctx, &Lp[i0 * w], m, Lp.data(), i1, w, C.data());
      pool.parallel_for(m, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) axpy_sub(&A[(j1 + i0 + r) * K + j1], &C[r * i1], 1.f, i0 + r + 1);
      });
    }
  }
  return true;
}

void invert_lower_transposed(const std::vector<float>& L, int64_t K, std::vector<float>& Xt, const OpContext& ctx) {
  // Block forward substitution of L X = I, right-looking, with B (= I minus the updates so far) kept
  // transposed in Xt: block J gives X[J][0..j1) = L_JJ^-1 B[J][0..j1) (B[J][J] = I), then
  // B[j1..K)[0..j1) -= L[j1..K)[J] X[J][0..j1). Both are GEMMs with inner dimension w; no product
  // multiplies the zeros above the diagonal except inside L_JJ^-1.
  ThreadPool& pool = *ctx.pool;
  Xt.assign(K * K, 0.f);
  std::vector<float> D(kBlock * kBlock), Di(kBlock * kBlock);  // [w, w]: L_JJ, L_JJ^-1
  std::vector<float> G;   // [j0, w]: G[c][k] = B[j0 + k][c] = Xt[c][j0 + k]
  std::vector<float> W;   // [j1, w]: W[c][k] = X[j0 + k][c]
  std::vector<float> Lp;  // [R, w]: L[j1..K)[J]
  std::vector<float> C;   // [kRows, R]: a row panel of W Lp^T
  for (int64_t j0 = 0; j0 < K; j0 += kBlock) {
    const int64_t j1 = std::min(K, j0 + kBlock), w = j1 - j0, R = K - j1;
    std::fill(D.begin(), D.end(), 0.f);
    for (int64_t a = 0; a < w; ++a) std::copy(&L[(j0 + a) * K + j0], &L[(j0 + a) * K + j0 + a + 1], &D[a * w]);
    invert_small(D.data(), w, Di.data());
    // W[0..j0) = G Di^T: W[c][r] = sum_k B[j0 + k][c] Di[r][k] = X[j0 + r][c]; W[j0 + a][b] = Di[b][a].
    G.resize(j0 * w);
    W.resize(j1 * w);
    copy_panel(pool, &Xt[j0], K, j0, w, G.data());
    gemm_nt(ctx, G.data(), j0, Di.data(), w, w, W.data());
    for (int64_t a = 0; a < w; ++a)
      for (int64_t b = 0; b < w; ++b) W[(j0 + a) * w + b] = Di[b * w + a];
    pool.parallel_for(j1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) std::copy(&W[c * w], &W[c * w + w], &Xt[c * K + j0]);
    });
    if (R == 0) break;
    // Xt[c][j1 + r] -= (W Lp^T)[c][r], by row panels of W.
    Lp.resize(R * w);
    copy_panel(pool, &L[j1 * K + j0], K, R, w, Lp.data());
    C.resize(std::min(kRows, j1) * R);
    for (int64_t c0 = 0; c0 < j1; c0 += kRows) {
      const int64_t m = std::min(kRows, j1 - c0);
      gemm_nt(ctx, &W[c0 * w], m, Lp.data(), R, w, C.data());
      pool.parallel_for(m, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) axpy_sub(&Xt[(c0 + r) * K + j1], &C[r * R], 1.f, R);
      });
    }
  }
}

namespace {
// XT [K, tc] = X [tc, K]^T: a chunk of token rows as contiguous per-column rows.
void transpose_chunk(ThreadPool& pool, const float* X, int64_t tc, int64_t K, float* XT) {
  pool.parallel_for(K, [&](int64_t k0, int64_t k1) {
    for (int64_t t = 0; t < tc; ++t)
      for (int64_t k = k0; k < k1; ++k) XT[k * tc + t] = X[t * K + k];
  });
}
}  // namespace

void accumulate_xtx(const OpContext& ctx, const float* X, int64_t T, int64_t K, std::vector<double>& H) {
  if (H.empty()) H.assign(K * K, 0.0);
  ThreadPool& pool = *ctx.pool;
  constexpr int64_t Tc = 256;  // tokens per f32 partial sum, then added to the f64 H
  constexpr int64_t P = 512;   // rows of H per product: C [P, i1] stays a few MB
  std::vector<float> XT(K * Tc);  // [K, tc]: the chunk's columns as contiguous rows
  std::vector<float> C(P * K);    // [P, i1]
  for (int64_t t0 = 0; t0 < T; t0 += Tc) {
    const int64_t tc = std::min(Tc, T - t0);
    transpose_chunk(pool, X + t0 * K, tc, K, XT.data());
    // Lower triangle by row panels: H[i0..i1)[0..i1) += XT[i0..i1) . XT[0..i1)^T, one f32 GEMM each (y = x w^T
    // with x = the panel's rows, w = all rows up to i1, inner dimension = the chunk's tokens).
    for (int64_t i0 = 0; i0 < K; i0 += P) {
      const int64_t i1 = std::min(K, i0 + P), m = i1 - i0;
      const Tensor w = Tensor::view(DType::kF32, {i1, tc}, XT.data());
      linear(ctx, XT.data() + i0 * tc, w, nullptr, C.data(), m);
      pool.parallel_for(m, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          double* h = H.data() + (i0 + r) * K;
          const float* c = C.data() + r * i1;
          for (int64_t j = 0; j <= i0 + r; ++j) h[j] += c[j];
        }
      });
    }
  }
}

void accumulate_atb(const OpContext& ctx, const float* A, const float* B, int64_t T, int64_t K, std::vector<double>& D) {
  if (D.empty()) D.assign(K * K, 0.0);
  ThreadPool& pool = *ctx.pool;
  constexpr int64_t Tc = 256;  // tokens per f32 partial sum, then added to the f64 D
  constexpr int64_t P = 512;   // rows of D per product
  std::vector<float> AT(K * Tc), BT(K * Tc);  // [K, tc]: the chunk's columns as contiguous rows
  std::vector<float> C(P * K);                // [P, K]
  for (int64_t t0 = 0; t0 < T; t0 += Tc) {
    const int64_t tc = std::min(Tc, T - t0);
    transpose_chunk(pool, A + t0 * K, tc, K, AT.data());
    transpose_chunk(pool, B + t0 * K, tc, K, BT.data());
    const Tensor w = Tensor::view(DType::kF32, {K, tc}, BT.data());
    for (int64_t i0 = 0; i0 < K; i0 += P) {
      const int64_t i1 = std::min(K, i0 + P), m = i1 - i0;
      linear(ctx, AT.data() + i0 * tc, w, nullptr, C.data(), m);  // C[r][j] = sum_t A[t][i0 + r] B[t][j]
      pool.parallel_for(m, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          double* d = D.data() + (i0 + r) * K;
          const float* c = C.data() + r * K;
          for (int64_t j = 0; j < K; ++j) d[j] += c[j];
        }
      });
    }
  }
}

}  // namespace blockspec
