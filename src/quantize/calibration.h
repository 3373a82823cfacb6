// GPTQ calibration of a dense target (Qwen3 / Qwen2 / Llama): runs the
// calibration windows through the model one decoder layer at a time -- the
// model's own layer (model/decoder_layer.h, what Transformer::forward_batch
// runs), f32 weights and activations, each window one causal sequence with
// its own f32 KV cache -- observing each linear's input rows, and
// accumulates per linear input H = sum x x^T (the Hessian of §4.2 up to a
// positive scale). Layer i's inputs come from layers < i already quantized
// (AutoGPTQ's order with true_sequential off): for each layer the callback
// gets the Hessians computed with the original weights and returns the
// dequantized weights that the layer then runs with to feed the next one.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "model/decoder_layer.h"
#include "model/weight_source.h"

namespace blockspec {

using Hessian = std::shared_ptr<std::vector<double>>;  // [K, K], symmetric, sum over tokens of x x^T

// module ("model.layers.3.mlp.down_proj") -> H of its input. Modules of one input share the same H.
using LayerHessians = std::map<std::string, Hessian>;
// Returns module -> dequantized [N, K] weight to use from now on (modules absent keep their original weight).
// cross: with act_cross, module -> D = sum over tokens of (x - x_q) x_q^T [K, K] (x_q: x rounded as the W8A8
// kernels round it), for the asymmetric GPTQ target of gptq.h; empty otherwise.
using LayerCallback = std::function<std::map<std::string, std::vector<float>>(int64_t layer, const LayerHessians&,
                                                                              const LayerHessians& cross)>;

// windows: token ids, each a fresh causal sequence.
// needs(module): whether a module wants its Hessian (an input none of whose modules does is not accumulated).
// kv_absmax (optional): per layer, max |K| (after k_norm and RoPE, as the KV cache stores it) and max |V| over
// every calibration token, from the layer's final weights (quantized ones when the callback replaced them).
// act_int8_hessians (W8A8): every Hessian is taken over the inputs as the W8A8 kernels see them, rounded to
// int8 by the runtime's own dynamic activation quantization of W8A8 checkpoints (kernel quantize_acts_token: per row,
// absmax / 127, half to even). E[x_q x_q^T] = H + the rounding noise's (near diagonal) covariance, so GPTQ no
// longer moves error into input channels whose rounding noise the int8 activations add anyway.
// tap (optional; dense models only, a hybrid one fails): sees every observer call of each layer's first pass
// (the layer's weights as src serves them, before the callback's replacements) with the layer index, e.g.
// SmoothQuant's per-channel activation ranges (quantize/smooth.h). With needs() false everywhere and a
// callback that returns {}, calibrate_layers is one plain forward of the model, layer by layer.
struct KvAbsmax {
  std::vector<float> k, v;  // [n_layers]
};
using CalibrationTap = std::function<void(int64_t layer, LayerTap tap, const float* rows, int64_t n, int64_t cols)>;
void calibrate_layers(const WeightSource& src, const OpContext& ctx, const std::vector<std::vector<int32_t>>& windows,
                      const LayerCallback& on_layer, const std::function<bool(const std::string&)>& needs,
                      KvAbsmax* kv_absmax = nullptr, bool act_int8_hessians = false, bool act_cross = false,
                      const CalibrationTap* tap = nullptr);

// H [K, K] += X^T X for X [T, K] (lower triangle accumulated, then mirrored by finish_hessian).
void accumulate_hessian(const OpContext& ctx, const float* X, int64_t T, int64_t K, std::vector<double>& H);
void finish_hessian(std::vector<double>& H, int64_t K);

}  // namespace blockspec
