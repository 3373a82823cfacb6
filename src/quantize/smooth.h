// SmoothQuant (Xiao et al. 2022, arXiv:2211.10438): migrates the activation
// outliers of the linears' inputs into their weights, as llm-compressor's
// SmoothQuantModifier does with its default mappings for dense Llama / Qwen2 /
// Qwen3 targets (llmcompressor/modifiers/smoothquant/utils.py,
// DEFAULT_SMOOTHQUANT_MAPPINGS), per decoder layer:
//   input_layernorm          -> self_attn.q_proj, k_proj, v_proj
//   post_attention_layernorm -> mlp.gate_proj, up_proj
// For each mapping and input channel j (llmcompressor/modifiers/smoothquant/
// base.py, _apply_smoothing and _calculate_smoothing_scales):
//   r_j = max_t x_tj - min_t x_tj   over every calibration token t of the
//         ORIGINAL model's forward (x = the norm's output = the linears' input);
//   w_j = 2 max over the rows of all the mapping's linears of |W[:, j]|;
//   s_j = r_j^alpha / w_j^(1 - alpha), or r_j where w_j = 0; then max(s_j, 1e-5);
//   norm[j] /= s_j and W[:, j] *= s_j for every linear of the mapping.
// In exact arithmetic the model's function is unchanged (Qwen3's q_norm /
// k_norm act after q / k_proj and the biases after the product, so neither
// moves). The "2 max |W|" matches the weight's dynamic range to the
// activation's max - min: for symmetric activations s_j is the paper's
// max|x_j|^alpha / max|W_j|^(1 - alpha).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "model/weight_overlay.h"
#include "model/weight_source.h"

namespace blockspec {

// llm-compressor's MINIMUM_SMOOTHING_SCALE.
inline constexpr float kMinSmoothScale = 1e-5f;

// s [K] from the activation ranges r [K] and the weight absmaxes m [K] (max |W[:, j]|, without the 2).
std::vector<float> smooth_scales(const std::vector<float>& act_range, const std::vector<float>& w_absmax, double alpha);

// Per-channel min / max of each smoothed input over the calibration tokens.
struct ChannelRange {
  std::vector<float> lo, hi;  // [H]
};
struct LayerRanges {
  ChannelRange attn_in, mlp_in;  // input of q/k/v_proj, input of gate/up_proj
  ChannelRange o_in, down_in;    // input of o_proj [n_heads * head_dim], of down_proj [intermediate]
};
// One forward of the model as src serves it over windows (each a fresh causal sequence; calibrate_layers' loop).
std::vector<LayerRanges> activation_ranges(const WeightSource& src, const OpContext& ctx,
                                           const std::vector<std::vector<int32_t>>& windows);

// Which mappings smooth_model applies: llm-compressor SmoothQuant's two (above), or those and the two of its AWQ
// mapping list (llmcompressor/modifiers/awq/mappings.py) whose "previous op" is a linear, not a norm:
//   v_proj -> o_proj     o_proj input channel c = g * hd + i (query head g) comes from v_proj row h * hd + i
//                        (h = g / (n_heads / n_kv_heads)); one s per v row: r = the largest range over its
//                        channels c, w = 2 max |W_o[:, c]| over them; v row (and bias) / s, W_o[:, c] * s;
//   up_proj -> down_proj act = silu(gate) * up is linear in up's row j: up row j / s_j, W_down[:, j] * s_j.
// Both are exact in f32 like the norm mappings; v / s also flattens the values an int8 KV cache stores.
enum class SmoothMappings { kSmoothQuant, kAll };
// "norms" (SmoothQuant's) or "all"; anything else fails naming --smooth-mappings.
SmoothMappings parse_smooth_mappings(const std::string& s);

// The smoothed tensors of every layer (SmoothQuant's: 2 norms and 5 linears per layer; kAll adds v/o and
// up/down), HF name -> f32 values, computed in f32 from src's tensors. alpha in (0, 1]. A hybrid (Gated
// DeltaNet) model fails: its (1 + w) norms need another rule.
TensorOverrides smooth_model(const WeightSource& src, const OpContext& ctx,
                             const std::vector<std::vector<int32_t>>& windows, double alpha,
                             SmoothMappings mappings = SmoothMappings::kSmoothQuant);
// One alpha per mapping of a layer (ptqr --smooth-search-mappings picks them): attn_in for input_layernorm ->
// q/k/v, mlp_in for post_attention_layernorm -> gate/up, o_in for v -> o, down_in for up -> down (the last two only
// with SmoothMappings::kAll).
struct SmoothAlphas {
  double attn_in = 0, mlp_in = 0, o_in = 0, down_in = 0;
  static SmoothAlphas all(double a) { return {a, a, a, a}; }
  static SmoothAlphas of(const std::array<double, 4>& v) { return {v[0], v[1], v[2], v[3]}; }
  std::array<double, 4> values() const { return {attn_in, mlp_in, o_in, down_in}; }
  std::string describe() const;  // "0.8" when all four are equal, else "0.65/0.8/0.8/0.95" (attn/mlp/o/down)
  bool operator==(const SmoothAlphas&) const = default;
};
// One layer of it into out (ptqr --smooth-search picks alpha per layer, or per mapping).
void smooth_layer_from_ranges(const WeightSource& src, int64_t layer, const LayerRanges& r, const SmoothAlphas& alphas,
                              SmoothMappings mappings, TensorOverrides& out);
// The same from ranges activation_ranges measured before (ptqr keeps them across a --resume).
TensorOverrides smooth_model_from_ranges(const WeightSource& src, const std::vector<LayerRanges>& ranges, double alpha,
                                         SmoothMappings mappings = SmoothMappings::kSmoothQuant);

}  // namespace blockspec
