// GPTQ (../shared/docs/quant_formats.md §4.3) with the parameters of
// quantize/quantizer.h fixed from the original weight before the solve
// (llm-compressor's variant; with act-order these are AutoGPTQ's static
// groups), so groups stay in the original column order and the written
// checkpoint has a trivial g_idx.
//
//   dead inputs (H[i,i] == 0): H[i,i] = 1, W[:, i] = 0
//   act-order: columns sorted by diag(H) descending (stable)
//   H[i,i] += percdamp * mean(diag(H))
//   U upper with U^T U = H^-1 (the reference's cholesky(cholesky_inverse(cholesky(H)), upper)), computed as the
//   inverse of the "upper" Cholesky factor of H (H = U' U'^T): one factorization and one triangular inverse, in
//   double precision
//   blocks of 128 columns: q = quant(w); err = (w - deq(q)) / U[c,c]; the block's later columns -= err U[c, :],
//   then the columns after the block -= Err U[block, after] (the lazy batch update).
#pragma once
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/ops.h"
#include "quantize/quantizer.h"

namespace blockspec {

struct GptqOptions {
  double percdamp = 0.01;
  int64_t block = 128;
  bool act_order = false;
};

// w: [N, K] original weight; H: [K, K] sum of x x^T over the calibration inputs (any positive scale).
// Fills qw.q (qw from make_params(spec, w, ...)). Returns false, leaving RTN codes, when H + damping is not
// positive definite.
// ctx: kernels for the lazy batch updates (f32 GEMMs) and the thread pool.
bool gptq_quantize(QuantWeight& qw, const float* w, const std::vector<double>& H, const GptqOptions& opts,
                   const OpContext& ctx);

// The asymmetric target of W8A8 GPTQ. The int8 kernels multiply the rounded input x_q, not x, so the error that
// matters is sum_t |W x_t - Q x_q,t|^2, not sum_t |(W - Q) x_q,t|^2. Its unconstrained minimiser is
//   W' = W (sum x x_q^T)(sum x_q x_q^T)^-1 = W + W D H^-1,   D = sum (x - x_q) x_q^T,  H = sum x_q x_q^T,
// and sum |W x - Q x_q|^2 = sum |(W' - Q) x_q|^2 + const, so GPTQ run on the target W' with H minimises the
// real error (the asymmetric calibration of GPTAQ, Li et al. 2025, arXiv:2504.02692, here for the activation
// rounding). H gets GPTQ's dead-input rule and damping (percdamp * mean diag H) before the solve.
// w [N, K]; H, D [K, K] (H symmetric). Returns W' [N, K], or empty when H + damping is not positive definite.
std::vector<float> asymmetric_target(const float* w, int64_t N, int64_t K, const std::vector<double>& H,
                                     const std::vector<double>& D, double percdamp, const OpContext& ctx);

}  // namespace blockspec
