// GPTQ calibration of a hybrid Gated-DeltaNet target (Qwen3.5), called by
// calibrate_layers (calibration.h) for such a model: the same two passes per
// layer, through the serving layers (model/gdn_layer.h for Gated DeltaNet
// layers, model/decoder_layer.h for the gated attention ones) loaded by the
// model's own loader (model/hybrid_weights.h) from the source with the
// replaced weights laid over it. Private to the quantize layer.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "quantize/calibration.h"

namespace blockspec {

// h += X^T X over T rows of K (and the cross term for W8A8 targets): calibrate_layers' accumulation.
using HessianFn = std::function<void(const float* X, int64_t T, int64_t K, std::vector<double>& h, std::vector<double>& d)>;

// The windows' embeddings back to back, [total tokens, H] (the text model's embed_tokens, under its prefix).
std::vector<float> embed_windows(const WeightSource& src, const std::vector<std::vector<int32_t>>& windows);

void calibrate_hybrid_layers(const WeightSource& src, const OpContext& ctx,
                             const std::vector<std::vector<int32_t>>& windows, const LayerCallback& on_layer,
                             const std::function<bool(const std::string&)>& needs, const HessianFn& hessian);

}  // namespace blockspec
