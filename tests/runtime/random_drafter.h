// Test utility: writes a random DFlash / DFlash2 drafter checkpoint
// (config.json + model.safetensors, tensor names and shapes of
// dflash.md §1.2 of the team docs) sized for a given target, so the speculative
// loop can run real drafter forwards in tests without a trained checkpoint.
// Weights are N(0, weight_std) from a seeded mt19937_64 (deterministic for a
// seed); norm weights are 1 + N(0, norm_noise), the final norm scaled by
// final_norm_scale (a small scale flattens the draft distribution, which makes
// it overlap any target's).
#pragma once
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace blockspec::testing {

struct RandomDrafterOptions {
  bool dflash2 = false;  // architectures ["DFlash2DraftModel"] (else ["DFlashDraftModel"])
  int64_t n_layers = 2;
  int64_t n_heads = 2, n_kv_heads = 1, head_dim = 16;
  int64_t intermediate_size = 64;
  int64_t block_size = 16;
  std::vector<int64_t> target_layer_ids;  // empty: a few valid ids of the target
  int32_t mask_token_id = -1;             // < 0: target vocab - 1
  // Per layer "full_attention" / "sliding_attention"; empty: all full.
  std::vector<std::string> layer_types;
  int64_t sliding_window = 0;  // written when > 0
  int is_causal = -1;          // -1: key absent (causality from layer_types), 0 / 1: written
  // DFlash2
  int64_t conv_kernel_size = 2, conv_group_size = 16, selector_rank = 8, selector_top_k = 4;
  DType dtype = DType::kF32;  // kF32 or kBF16
  uint64_t seed = 1;
  float weight_std = 0.1f;
  float norm_noise = 0.05f;
  float final_norm_scale = 1.0f;
  double rope_theta = 1e6;
};

// Writes the drafter into DIR (created) and returns DIR.
inline std::string write_random_drafter(const std::string& dir, const ModelConfig& target,
                                        const RandomDrafterOptions& o) {
  using nlohmann::json;
  const int64_t H = target.hidden_size, V = target.vocab_size, L = o.n_layers, F = o.intermediate_size;
  const int64_t nh = o.n_heads, nkv = o.n_kv_heads, d = o.head_dim;
  std::vector<int64_t> taps = o.target_layer_ids;
  if (taps.empty()) {
    const int64_t N = target.n_layers;  // first, middle and last-but-one layers (deduplicated)
    for (int64_t t : {int64_t{0}, N / 2, std::max<int64_t>(0, N - 2)})
      if (taps.empty() || taps.back() < t) taps.push_back(t);
  }
  const int64_t T = static_cast<int64_t>(taps.size());
  const int32_t mask = o.mask_token_id >= 0 ? o.mask_token_id : static_cast<int32_t>(V - 1);
  if (o.dtype != DType::kF32 && o.dtype != DType::kBF16) fail("write_random_drafter: dtype must be F32 or BF16");
  if (o.dflash2 && (o.conv_group_size <= 0 || H % o.conv_group_size != 0))
    fail("write_random_drafter: conv_group_size ", o.conv_group_size, " must divide hidden ", H);
  if (!o.layer_types.empty() && static_cast<int64_t>(o.layer_types.size()) != L)
    fail("write_random_drafter: ", o.layer_types.size(), " layer_types for ", L, " layers");

  json dc = {{"block_size", o.block_size}, {"mask_token_id", mask}, {"target_layer_ids", taps}};
  if (o.dflash2)
    dc.update({{"conv_kernel_size", o.conv_kernel_size},
               {"conv_group_size", o.conv_group_size},
               {"selector_rank", o.selector_rank},
               {"selector_top_k", o.selector_top_k}});
  json cfg = {{"architectures", {o.dflash2 ? "DFlash2DraftModel" : "DFlashDraftModel"}},
              {"model_type", "qwen3"},
              {"hidden_size", H},
              {"intermediate_size", F},
              {"num_hidden_layers", L},
              {"num_attention_heads", nh},
              {"num_key_value_heads", nkv},
              {"head_dim", d},
              {"vocab_size", V},
              {"rms_norm_eps", 1e-6},
              {"rope_theta", o.rope_theta},
              {"max_position_embeddings", std::max<int64_t>(target.max_position_embeddings, 512)},
              {"hidden_act", "silu"},
              {"attention_bias", false},
              {"num_target_layers", target.n_layers},
              {"dtype", o.dtype == DType::kBF16 ? "bfloat16" : "float32"},
              {"dflash_config", dc}};
  if (!o.layer_types.empty()) cfg["layer_types"] = o.layer_types;
  if (o.sliding_window > 0) cfg["sliding_window"] = o.sliding_window;
  if (o.is_causal >= 0) cfg["is_causal"] = o.is_causal == 1;

  std::mt19937_64 gen(o.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::pair<std::string, Tensor>> tensors;
  // center + scale * N(0, 1) per element, stored in o.dtype.
  auto add = [&](const std::string& name, const Shape& shape, float center, float scale) {
    Tensor t(o.dtype, shape);
    const int64_t n = t.numel();
    if (o.dtype == DType::kF32) {
      float* p = t.mutable_ptr<float>();
      for (int64_t i = 0; i < n; ++i) p[i] = center + scale * normal(gen);
    } else {
      uint16_t* p = t.mutable_ptr<uint16_t>();
      for (int64_t i = 0; i < n; ++i) p[i] = f32_to_bf16(center + scale * normal(gen));
    }
    tensors.emplace_back(name, std::move(t));
  };
  auto weight = [&](const std::string& name, const Shape& shape) { add(name, shape, 0.0f, o.weight_std); };
  auto norm = [&](const std::string& name, int64_t n) { add(name, {n}, 1.0f, o.norm_noise); };

  weight("fc.weight", {H, T * H});
  norm("hidden_norm.weight", H);
  add("norm.weight", {H}, o.final_norm_scale, o.final_norm_scale * o.norm_noise);
  for (int64_t i = 0; i < L; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    norm(p + "input_layernorm.weight", H);
    norm(p + "post_attention_layernorm.weight", H);
    weight(p + "self_attn.q_proj.weight", {nh * d, H});
    weight(p + "self_attn.k_proj.weight", {nkv * d, H});
    weight(p + "self_attn.v_proj.weight", {nkv * d, H});
    weight(p + "self_attn.o_proj.weight", {H, nh * d});
    norm(p + "self_attn.q_norm.weight", d);
    norm(p + "self_attn.k_norm.weight", d);
    weight(p + "mlp.gate_proj.weight", {F, H});
    weight(p + "mlp.up_proj.weight", {F, H});
    weight(p + "mlp.down_proj.weight", {H, F});
    if (!o.dflash2) continue;
    const int64_t kt = o.conv_kernel_size, G = H / o.conv_group_size;
    for (const char* c : {"attention_conv", "mlp_conv"}) {
      // Near the identity init (tap 0 = 1, others 0) plus noise.
      Shape bs = {2, kt, H};
      add(p + c + ".base_kernel", bs, 0.0f, o.weight_std);
      Tensor& b = tensors.back().second;
      for (int64_t side = 0; side < 2; ++side)
        for (int64_t c2 = 0; c2 < H; ++c2) {
          const int64_t idx = side * kt * H + c2;  // tap 0
          if (o.dtype == DType::kF32) b.mutable_ptr<float>()[idx] += 1.0f;
          else b.mutable_ptr<uint16_t>()[idx] = f32_to_bf16(bf16_to_f32(b.ptr<uint16_t>()[idx]) + 1.0f);
        }
      weight(p + c + ".kernel_projection.weight", {2 * kt * G, H});
    }
  }
  if (o.dflash2) {
    weight("candidate_selector.predecessor_codebook", {V, o.selector_rank});
    weight("candidate_selector.successor_codebook", {V, o.selector_rank});
    weight("candidate_selector.hidden_projection.weight", {o.selector_rank, H});
  }
  std::filesystem::create_directories(dir);
  std::ofstream(std::filesystem::path(dir) / "config.json") << cfg.dump(2);
  write_safetensors((std::filesystem::path(dir) / "model.safetensors").string(), tensors);
  return dir;
}

}  // namespace blockspec::testing
