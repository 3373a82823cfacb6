// Gated DeltaNet pieces below the model layer (hybrid.md §3): the causal
// depthwise conv with its carried state, and the delta-rule recurrence of
// many heads at once on the pool (the per-head kernel is KernelTable::
// gdn_recurrent, kernels/gdn_kernel.h, with its scalar twin).
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/gdn_kernel.h"
#include "kernels/ops.h"

namespace blockspec {

// One sequence's T rows of C channels through the causal depthwise conv and
// SiLU (hybrid.md §3 step 2):
//   out[t][c] = silu(sum_{j<K} w[j][c] * x_{t-K+1+j}[c]),  x_{-K+1..-1} = state rows
// then state <- the last K-1 input rows (oldest first). Sums in j order;
// silu(a) = a / (1 + exp_fixed(-a)) by the SwiGLU kernel (bitwise equal on every ISA).
//   x: row t at x + t * x_stride   w: [K, C]   state: [K-1, C]   out: [T, C]
void gdn_conv_silu(const OpContext& ctx, const float* x, int64_t T, int64_t x_stride, const float* w, int64_t K,
                   int64_t C, float* state, float* out);

// Runs every head (in any order, on ctx's pool); heads must not share S or o.
// A head with its log decay g set runs the chunked form (KernelTable::
// gdn_chunked), the others the recurrent one.
void gdn_recurrent_heads(const OpContext& ctx, const std::vector<GdnHead>& heads);

}  // namespace blockspec
