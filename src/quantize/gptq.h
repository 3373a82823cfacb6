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

}  // namespace blockspec
