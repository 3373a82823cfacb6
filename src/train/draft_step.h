// One DFlash / DFlash2 training step over a packed row, forward and
// hand-written backward (training.md §2-§3): context features from the
// target's taps, anchor blocks [anchor, MASK x (B-1)] embedded with the
// frozen target table, every draft layer attending from the blocks to the
// context and to their own block by the spans of train/blocks.h, the frozen
// target lm_head, and the weighted cross-entropy against the target's
// predictions. DFlash2 (dflash.md §5.1, training.md §6) adds a grouped
// dynamic convolution before and after both sublayers of every layer (block
// rows only, never across a block) and the candidate selector's loss
// (train/selector_loss.h). Parameters are f32 masters in checkpoint order;
// gradients are accumulated into a second DraftParams of the same shapes.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "formats/hf_config.h"

namespace blockspec {

struct DraftShape {
  int64_t H = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, F = 0, n_layers = 0;
  int64_t tap_width = 0;  // n_taps * target hidden
  int64_t V = 0;          // vocabulary of the frozen lm_head
  float eps = 1e-6f;
  RopeTables rope;
  // DFlash2: conv_kernel > 0 (taps of the block convolutions), channel
  // groups of conv_group, the selector's rank, top-k and loss weight alpha.
  int64_t conv_kernel = 0, conv_group = 16, selector_rank = 0, selector_top_k = 16;
  double selector_alpha = 1.0;
  // W8A8 student (ptqr/ptqr_drafter.h): the input of every quantized linear
  // (fc, q/k/v, o, gate/up, down) is rounded per token to int8 as the serving
  // kernels round it (kernels/quant.h round_acts_token); the gradient passes
  // the rounding straight through, the weights' gradients see the rounded input.
  bool act_int8 = false;
  bool dflash2() const { return conv_kernel > 0; }
};

struct DraftParams {
  struct Layer {
    std::vector<float> attn_norm, q, k, v, o, q_norm, k_norm, ffn_norm, gate_up, down;
    // DFlash2: base kernels [2, kt, H], kernel projections [2 * kt * G, H]; empty for DFlash.
    std::vector<float> attn_conv_base, attn_conv_proj, mlp_conv_base, mlp_conv_proj;
  };
  std::vector<float> fc, hidden_norm, norm;
  std::vector<Layer> layers;
  // DFlash2 selector: hidden_projection [r, H], codebooks [V, r]; empty for DFlash.
  std::vector<float> hidden_projection, predecessor, successor;
  // Zero tensors of `s`'s shapes (gradients), or a random init: N(0, init_std)
  // matrices, unit norms; DFlash2's modules start as identity (training.md
  // §6: base kernel tap 0 = 1, projections 0, successor codebook 0 so the
  // selector scores are the unary logits; predecessor and hidden_projection
  // N(0, 0.02)).
  static DraftParams zeros(const DraftShape& s);
  static DraftParams init(const DraftShape& s, uint64_t seed, float init_std);
  // Every tensor with its checkpoint name ("fc.weight", "layers.0.self_attn.q_proj.weight", ...).
  void each(const std::function<void(const std::string&, std::vector<float>&)>& f);
};

// The frozen target pieces: f32 rows of its embedding, and its lm_head [V, H].
struct FrozenTarget {
  std::function<void(const int32_t* ids, int64_t n, float* out)> embed;  // out: [n, H]
  const float* lm_head = nullptr;                                         // [V, H]
  const float* lm_head_t = nullptr;  // [H, V] its transpose when the caller keeps one; nullptr: made per step
  // bf16 copies of both: when set, the head's two products run in bf16
  // (gemm_nt_bf16), the cost that dominates a step at a large vocabulary.
  const uint16_t* lm_head_bf16 = nullptr;    // [V, H]
  const uint16_t* lm_head_t_bf16 = nullptr;  // [H, V]
};

struct DraftRow {
  int64_t S = 0;                  // context tokens
  const float* taps = nullptr;    // [S, tap_width]
  std::vector<int64_t> pos;       // [S] position ids (restarting per document)
  std::vector<int64_t> anchors;   // [nA]
  std::vector<int32_t> block_ids; // [nA * B] anchor token then mask_token_id
  std::vector<int32_t> spans;     // [nA * B, 4] keys [S context | nA * B block] (block_key_spans)
  // Per layer when layers differ in causality or window (DraftConfig::layer_causal / layer_window):
  // [n_layers][nA * B, 4]; empty: `spans` for every layer.
  std::vector<std::vector<int32_t>> layer_spans;
  std::vector<int32_t> labels;    // [nA * B]
  std::vector<float> weight;      // [nA * B] mask * position weight (with dpace_alpha > 0: the mask alone)
  std::vector<int32_t> prev_ids;  // [nA * B] DFlash2: each slot's selector predecessor (the data token before it)
  double denom = 1;               // the loss's denominator (sum of the mask, training.md §3)
  // Distillation (drafter PTQR): when set, the unary loss is the weighted KL(teacher || draft) per slot against
  // these teacher logits [nA * B, V] instead of the cross-entropy against `labels` (which still score `correct`).
  const float* teacher_logits = nullptr;
  int64_t B = 0;
  // > 0: D-PACE position weights (training.md §3) with this alpha, made by the step from its own per-slot
  // cross-entropies (detached: dpace_weights, train/blocks.h) and multiplied into `weight`; DFlash, CE only.
  double dpace_alpha = 0;
};

struct DraftStepResult {
  double loss = 0;                    // unary + selector
  double unary_loss = 0, selector_loss = 0;
  std::vector<uint8_t> correct;  // [nA * B] what serving drafts == label: argmax(draft), or DFlash2's selector pick
  std::vector<float> logits;     // [nA * B, V] draft logits of every block slot (forward-only calls; empty when training)
};

// Forward, loss and backward; grads accumulate into *grad (same shapes as
// p). grad nullptr: forward and loss only (validation).
DraftStepResult draft_step(const DraftShape& s, const DraftParams& p, const FrozenTarget& t, const DraftRow& row,
                           DraftParams* grad, const OpContext& ctx);

}  // namespace blockspec
