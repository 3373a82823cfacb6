// Dense f32 linear algebra for GPTQ (quantize/gptq.cc) on the CPU: a blocked
// Cholesky factorization, the inverse of a lower-triangular matrix, and the
// X^T X accumulation of calibration Hessians. Inner loops are axpy's compiled
// for AVX-512 / AVX2+FMA / baseline (GCC target_clones, picked at load time),
// and blocked so that a row stays in cache across a panel: a K = 8960
// factorization (down_proj of a 1.5B model) is otherwise bound by memory.
// f32 like the reference (torch.linalg.cholesky on f32 in GPTQ).
#pragma once
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"

namespace blockspec {

// y[0..n) -= a * x[0..n)
void axpy_sub(float* y, const float* x, float a, int64_t n);
void axpy_sub_f64(double* y, const double* x, double a, int64_t n);

// A [K, K] row-major, symmetric (lower triangle read) -> its lower Cholesky factor in the lower triangle.
// false if A is not positive definite.
bool cholesky_lower(std::vector<float>& A, int64_t K, ThreadPool& pool);

// L [K, K] lower-triangular (lower triangle read) -> Xt [K, K] with Xt[c][i] = (L^-1)[i][c] (columns of the
// inverse as contiguous rows; zero above... i.e. Xt[c][i] = 0 for i < c).
void invert_lower_transposed(const std::vector<float>& L, int64_t K, std::vector<float>& Xt, ThreadPool& pool);

// H [K, K] (f64, lower triangle) += X^T X for X [T, K].
void accumulate_xtx(const float* X, int64_t T, int64_t K, std::vector<double>& H, ThreadPool& pool);

}  // namespace blockspec
