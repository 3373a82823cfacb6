// One Gated DeltaNet layer (hybrid.md §3) over the rows of several
// sequences, each carrying its own state (conv rows and recurrent state), then
// the layer's MLP:
//   x += out_proj(gated_rmsnorm(delta_rule(l2norm(conv_silu(qkv(xn))), gates(a, b)), z));  x += mlp(x)
// where xn = rmsnorm(x). By default the recurrence runs token by token (the
// recurrent form) for prefill, decode and verification alike, so the state
// after a sequence's tokens does not depend on how they were split into steps
// (a request's output does not depend on what it was batched with). With
// `chunked`, prefill chunks of 16 or more tokens (never a verify) run the
// chunked form instead: faster, and equal up to summation order.
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
  // Non-null while verifying drafts: gdn_layer records here (gdn_log_floats(c, n)
  // floats) what gdn_rollback needs to keep only a prefix of the n tokens.
  float* log = nullptr;
};

// Rolling back a verify (hybrid.md §7.3, replay): the log holds the state as
// it was before the n tokens (recurrent state and conv rows), their pre-conv
// rows and the recurrence's inputs (normalised q, k; v; decay; beta).
// gdn_rollback restores the state and runs the recurrence again over the
// first `keep` tokens with the same kernel and the same inputs, so the state
// is bit for bit the one a forward over only those tokens leaves: every
// input row is what that forward computes (the GEMMs give a row the same
// bits whatever the number of rows), and the recurrence runs token by token
// in both. The conv rows are the last K_c - 1 of (old rows ++ kept rows).
// Chosen over per-token state snapshots (vLLM, SGLang) because on a CPU
// writing n_v d_k d_v floats per draft token per layer costs more than
// replaying the accepted tokens' recurrence from the L2-resident state
// (7 n_v d_k d_v FLOPs per token), and nothing is replayed when all drafts
// are accepted. Measured (bench --verify-cost, docs/hybrid.md): cheaper from
// K = 3 drafts on (4B-like, K = 7: 18.7 ms against 41-47 ms of snapshot writes).
int64_t gdn_log_floats(const ModelConfig& c, int64_t n);
void gdn_rollback(const OpContext& ctx, const ModelConfig& c, const float* log, int64_t n, int64_t keep, float* state);

// x: [n, H] residual stream of all sequences' rows, in order (updated in place).
// observer (GPTQ calibration): LayerTap::kAttnIn = the input of the in_proj
// group [n, H], kOIn = the input of out_proj [n, value_dim], then the MLP's.
void gdn_layer(const OpContext& ctx, const ModelConfig& c, const LayerWeights& l, const std::vector<GdnSeq>& seqs,
               float* x, LayerScratch& s, const LayerObserver* observer = nullptr, bool chunked = false);

}  // namespace blockspec
