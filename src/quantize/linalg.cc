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

bool cholesky_lower(std::vector<float>& A, int64_t K, ThreadPool& pool) {
  constexpr int64_t P = 32;  // panel width: a trailing row is updated by P columns while in cache
  std::vector<float> C;      // [P, K]: panel columns as contiguous rows, C[p][k] = L[k][j0 + p]
  for (int64_t j0 = 0; j0 < K; j0 += P) {
    const int64_t j1 = std::min(K, j0 + P), w = j1 - j0;
    // Panel: unblocked, updating only the panel's columns (rows j0..K).
    for (int64_t j = j0; j < j1; ++j) {
      const float d = A[j * K + j];
      if (!(d > 0.f) || !std::isfinite(d)) return false;
      const float ljj = std::sqrt(d), inv = 1.f / ljj;
      A[j * K + j] = ljj;
      for (int64_t i = j + 1; i < K; ++i) {
        float* Ai = A.data() + i * K;
        Ai[j] *= inv;
        const float aij = Ai[j];
        const int64_t kend = std::min(i, j1 - 1);
        for (int64_t k = j + 1; k <= kend; ++k) Ai[k] -= aij * A[k * K + j];
      }
    }
    if (j1 >= K) break;
    C.assign(w * K, 0.f);
    for (int64_t k = j1; k < K; ++k)
      for (int64_t p = 0; p < w; ++p) C[p * K + k] = A[k * K + j0 + p];
    // Trailing update: A[i][j1..i] -= sum_p L[i][j0+p] * L[j1..i][j0+p]. Rows have growing lengths: interleave.
    const int64_t n = K - j1;
    const int64_t nt = std::max<int64_t>(1, std::min<int64_t>(pool.n_threads(), n));
    pool.parallel_for(nt, [&](int64_t a, int64_t b) {
      for (int64_t t = a; t < b; ++t)
        for (int64_t i = j1 + t; i < K; i += nt) {
          float* Ai = A.data() + i * K;
          for (int64_t p = 0; p < w; ++p) axpy_sub(Ai + j1, C.data() + p * K + j1, Ai[j0 + p], i - j1 + 1);
        }
    });
  }
  return true;
}

void invert_lower_transposed(const std::vector<float>& L, int64_t K, std::vector<float>& Xt, ThreadPool& pool) {
  std::vector<float> Lt(K * K, 0.f);  // Lt[k][i] = L[i][k], i >= k: column k of L as a contiguous row
  for (int64_t i = 0; i < K; ++i)
    for (int64_t k = 0; k <= i; ++k) Lt[k * K + i] = L[i * K + k];
  Xt.assign(K * K, 0.f);
  constexpr int64_t B = 16;  // columns solved together: each row of Lt is read once for B of them
  const int64_t nb = (K + B - 1) / B;
  const int64_t nt = std::max<int64_t>(1, std::min<int64_t>(pool.n_threads(), nb));
  pool.parallel_for(nt, [&](int64_t a, int64_t b) {
    for (int64_t t = a; t < b; ++t)
      for (int64_t blk = t; blk < nb; blk += nt) {  // interleaved: early blocks cost more
        const int64_t c0 = blk * B, c1 = std::min(K, c0 + B);
        for (int64_t c = c0; c < c1; ++c) Xt[c * K + c] = 1.f;
        // Forward substitution by columns of L: x[k] /= L[k][k]; x[k+1..] -= x[k] * L[k+1..][k].
        for (int64_t k = c0; k < K; ++k) {
          const float inv = 1.f / Lt[k * K + k];
          for (int64_t c = c0; c < std::min(c1, k + 1); ++c) {
            float* x = Xt.data() + c * K;
            x[k] *= inv;
            if (k + 1 < K && x[k] != 0.f) axpy_sub(x + k + 1, Lt.data() + k * K + k + 1, x[k], K - k - 1);
          }
        }
      }
  });
}

void accumulate_xtx(const float* X, int64_t T, int64_t K, std::vector<double>& H, ThreadPool& pool) {
  if (H.empty()) H.assign(K * K, 0.0);
  constexpr int64_t R = 16;  // rows of H per task: one X row serves R of them from cache
  const int64_t nb = (K + R - 1) / R;
  const int64_t nt = std::max<int64_t>(1, std::min<int64_t>(pool.n_threads(), nb));
  pool.parallel_for(nt, [&](int64_t a, int64_t b) {
    std::vector<float> acc(R * K);
    for (int64_t t0 = a; t0 < b; ++t0)
      for (int64_t blk = nb - 1 - t0; blk >= 0; blk -= nt) {
        const int64_t i0 = blk * R, i1 = std::min(K, i0 + R);
        for (int64_t tb = 0; tb < T; tb += 256) {  // f32 partial sums over 256 tokens, then f64
          std::fill(acc.begin(), acc.end(), 0.f);
          const int64_t te = std::min(T, tb + 256);
          for (int64_t t = tb; t < te; ++t) {
            const float* x = X + t * K;
            for (int64_t i = i0; i < i1; ++i)
              if (x[i] != 0.f) axpy_sub(acc.data() + (i - i0) * K, x, -x[i], i + 1);
          }
          for (int64_t i = i0; i < i1; ++i) {
            double* h = H.data() + i * K;
            const float* s = acc.data() + (i - i0) * K;
            for (int64_t j = 0; j <= i; ++j) h[j] += s[j];
          }
        }
      }
  });
}

}  // namespace blockspec
