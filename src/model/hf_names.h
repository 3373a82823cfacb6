// The HF module names of one dense decoder layer (Qwen3 / Qwen2 / Llama, and
// the DFlash drafters' Qwen3-style layers), relative to the layer's prefix:
// the one table the target and drafter loaders (weights.cc,
// dflash_weights.cc), the drafter checker (dflash_check.cc), the drafter's
// calibration observer (dflash.cc) and GPTQ calibration (quantize/) spell
// tensor names from. A tensor is "<prefix><module>.weight" (or ".bias").
#pragma once
#include <cstdint>
#include <string>

namespace blockspec::hf {

inline constexpr char kAttnNorm[] = "input_layernorm";
inline constexpr char kFfnNorm[] = "post_attention_layernorm";
inline constexpr char kQ[] = "self_attn.q_proj";
inline constexpr char kK[] = "self_attn.k_proj";
inline constexpr char kV[] = "self_attn.v_proj";
inline constexpr char kO[] = "self_attn.o_proj";
inline constexpr char kQNorm[] = "self_attn.q_norm";  // Qwen3 per-head RMSNorm
inline constexpr char kKNorm[] = "self_attn.k_norm";
inline constexpr char kGate[] = "mlp.gate_proj";
inline constexpr char kUp[] = "mlp.up_proj";
inline constexpr char kDown[] = "mlp.down_proj";
// Gated DeltaNet layers of hybrid targets (hybrid.md §2.1). A_log and
// dt_bias are bare parameters: "<prefix>linear_attn.A_log", no ".weight".
inline constexpr char kGdnQkv[] = "linear_attn.in_proj_qkv";
inline constexpr char kGdnZ[] = "linear_attn.in_proj_z";
inline constexpr char kGdnB[] = "linear_attn.in_proj_b";
inline constexpr char kGdnA[] = "linear_attn.in_proj_a";
inline constexpr char kGdnConv[] = "linear_attn.conv1d";
inline constexpr char kGdnNorm[] = "linear_attn.norm";
inline constexpr char kGdnOut[] = "linear_attn.out_proj";
inline constexpr char kGdnALog[] = "linear_attn.A_log";
inline constexpr char kGdnDtBias[] = "linear_attn.dt_bias";
// Model-level tensors of an HF causal LM.
inline constexpr char kEmbed[] = "model.embed_tokens";
inline constexpr char kFinalNorm[] = "model.norm";
inline constexpr char kLmHead[] = "lm_head";

// "model.layers.<i>." (a target) and "layers.<i>." (a DFlash drafter).
inline std::string target_layer(int64_t i) { return "model.layers." + std::to_string(i) + "."; }
// A target whose text model lives under another prefix (ModelConfig::weight_prefix,
// "model.language_model." in the Qwen3.5 multimodal wrapper): "model.X" -> "<prefix>X".
inline std::string under(const std::string& prefix, const std::string& name) {
  return name.rfind("model.", 0) == 0 ? prefix + name.substr(6) : name;
}
inline std::string draft_layer(int64_t i) { return "layers." + std::to_string(i) + "."; }
inline std::string weight(const std::string& prefix, const char* module) { return prefix + module + ".weight"; }
inline std::string bias(const std::string& prefix, const char* module) { return prefix + module + ".bias"; }

}  // namespace blockspec::hf
