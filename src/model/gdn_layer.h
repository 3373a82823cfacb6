// One Gated DeltaNet layer (hybrid.md §3) over the rows of several
// sequences, each carrying its own state (conv rows and recurrent state), then
// the layer's MLP:
//   x += out_proj(gated_rmsnorm(delta_rule(l2norm(conv_silu(qkv(xn))), gates(a, b)), z));  x += mlp(x)
// where xn = rmsnorm(x). The recurrence runs token by token (the recurrent
// form) for prefill, decode and verification alike, so the state after a
// sequence's tokens does not depend on how they were split into steps.
#pragma once
#include <cstdint>
#include <vector>

#include "formats/hf_config.h"
#include "kernels/ops.h"
#include "model/decoder_layer.h"
#include "model/weights.h"

namespace blockspec {

// A sequence's rows and its state for this layer: [K_c - 1, conv_dim] conv
// rows, then [n_v, d_k, d_v] recurrent state (GdnConfig::state_floats()).
struct GdnSeq {
  float* state;
  int64_t n;
};

// x: [n, H] residual stream of all sequences' rows, in order (updated in place).
void gdn_layer(const OpContext& ctx, const ModelConfig& c, const LayerWeights& l, const std::vector<GdnSeq>& seqs,
               float* x, LayerScratch& s);

}  // namespace blockspec
