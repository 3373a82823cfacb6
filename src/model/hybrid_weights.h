// The layers of a hybrid Gated-DeltaNet target (Qwen3.5, hybrid.md §2),
// loaded into LayerWeights: GDN layers fill LayerWeights::gdn, gated
// full-attention layers the attention tensors (q_proj twice as tall: query
// and gate per head). Every (1 + w) norm is stored as 1 + w.
#pragma once
#include <cstdint>
#include <string>

#include "formats/hf_config.h"
#include "model/weight_loader.h"

namespace blockspec {

// Tensors of layer `layer` (for the progress count).
int64_t hybrid_layer_tensors(const ModelConfig& c, int64_t layer);
LayerWeights load_hybrid_layer(WeightLoader& L, const ModelConfig& c, int64_t layer);
// A (1 + w) norm vector (the final norm).
Tensor load_offset_norm(WeightLoader& L, const std::string& name, int64_t n);

}  // namespace blockspec
