// Dense f32 linear algebra for GPTQ (quantize/gptq.cc) on the CPU: a blocked
// Cholesky factorization, the inverse of a lower-triangular matrix, and the
// X^T X accumulation of calibration Hessians. All three put their O(K^3) work
// in the f32 GEMM kernel (linear() of kernels/ops.h, threaded on ctx.pool) on
// contiguous copies of 512-column panels; only 512 x 512 diagonal blocks are
// done unblocked, with axpy's compiled for AVX-512 / AVX2+FMA / baseline (GCC
// target_clones). f32 like the reference (torch.linalg.cholesky on f32 in GPTQ).
#pragma once
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/ops.h"

namespace blockspec {

// y[0..n) -= a * x[0..n)
void axpy_sub(float* y, const float* x, float a, int64_t n);
void axpy_sub_f64(double* y, const double* x, double a, int64_t n);

// A [K, K] row-major, symmetric (lower triangle read) -> its lower Cholesky factor in the lower triangle; the
// upper triangle is not touched. false if A is not positive definite (a non-positive or non-finite pivot).
// Right-looking by blocks J of 512 columns: L_JJ unblocked, the rows below as one GEMM with L_JJ^-1, the
// trailing lower triangle minus Lp Lp^T by row panels of 512 (K^3/6 multiply-adds in the GEMM, plus ~K^2 * 256
// for the zeros of L_JJ^-1 and ~K^2 * 128 for the diagonal 512 x 512 corners of the row panels).
bool cholesky_lower(std::vector<float>& A, int64_t K, const OpContext& ctx);

// L [K, K] lower-triangular (lower triangle read) -> Xt [K, K] with Xt[c][i] = (L^-1)[i][c] (columns of the
// inverse as contiguous rows), Xt[c][i] = 0 for i < c.
// Block forward substitution of L X = I (K^3/6 multiply-adds in the GEMM, plus ~K^2 * 128 for the zeros of the
// diagonal blocks' inverses).
void invert_lower_transposed(const std::vector<float>& L, int64_t K, std::vector<float>& Xt, const OpContext& ctx);

// H [K, K] (f64, lower triangle) += X^T X for X [T, K]: f32 GEMMs (ctx's kernels) over chunks of 256 tokens,
// each chunk's sums added to H in f64.
void accumulate_xtx(const OpContext& ctx, const float* X, int64_t T, int64_t K, std::vector<double>& H);

// D [K, K] (f64, full) += A^T B for A, B [T, K] (D[i][j] += sum_t A[t][i] B[t][j]): the same chunked f32 GEMMs.
void accumulate_atb(const OpContext& ctx, const float* A, const float* B, int64_t T, int64_t K, std::vector<double>& D);

}  // namespace blockspec
