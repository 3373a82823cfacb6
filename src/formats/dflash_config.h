// Config of a DFlash / DFlash2 block-diffusion drafter (`config.json` of a
// DFlashDraftModel or DFlash2DraftModel checkpoint), with every fallback of
// ../shared/docs/dflash.md §1.1 and §7: block size in dflash_config or at the
// top level, target layer ids or their default from num_target_layers, the
// drafter's own RoPE, per-layer causality and sliding windows, DFlash2's
// convolution and selector parameters, and the optional logit/embedding
// scales. Keys of variants blockspec does not implement are refused by name.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/hf_config.h"

namespace blockspec {

enum class DraftMethod { kDFlash, kDFlash2 };
const char* draft_method_name(DraftMethod m);  // "dflash" / "dflash2"

struct DraftConfig {
  DraftMethod method = DraftMethod::kDFlash;
  ModelConfig base;  // Qwen3-shaped hyper-parameters and the drafter's own RoPE
  int64_t block_size = 16;
  std::vector<int64_t> target_layer_ids;  // taps, 0-based target layers (output of layer t)
  bool target_layer_ids_defaulted = false;  // built from num_target_layers
  std::optional<int64_t> num_target_layers;
  int32_t mask_token_id = 0;
  std::vector<bool> layer_causal;      // [n_layers] causal inside the block
  std::vector<int64_t> layer_window;   // [n_layers] sliding window W (keys with pq - pk < W), 0 = none
  // DFlash2 (0 for DFlash1)
  int64_t conv_kernel_size = 0, conv_group_size = 0, selector_rank = 0, selector_top_k = 0;
  // Optional scales (dflash.md §1.1): draft logits *= output_multiplier, then
  // cap * tanh(z / cap) when final_logit_softcapping > 0; block embeddings *=
  // input_embedding_scale.
  double output_multiplier = 1.0, final_logit_softcapping = 0.0, input_embedding_scale = 1.0;
  std::string dtype;  // "bfloat16", "float16", ... from dtype / torch_dtype ("" if absent)
  // Reduced draft vocabulary (training.md §5; DFlash1 only): the drafter
  // carries its own frozen lm_head.weight [draft_vocab_size, H] and d2t
  // [draft_vocab_size] (target id = i + d2t[i]); 0 = the target's head.
  int64_t draft_vocab_size = 0;

  int64_t n_taps() const { return static_cast<int64_t>(target_layer_ids.size()); }
};

// round(1 + i * (N - 4) / (L - 1)) with Python's half-to-even rounding;
// [N / 2] when L == 1 (dflash.md §1.3).
std::vector<int64_t> default_target_layer_ids(int64_t n_target_layers, int64_t n_draft_layers);

// `what` names the source in messages. Throws Error naming the key.
DraftConfig parse_draft_config(const std::string& json_text, const std::string& what);
DraftConfig load_draft_config(const std::string& dir);  // DIR/config.json

// True when DIR/config.json exists and names a drafter architecture.
bool is_draft_checkpoint(const std::string& dir);

}  // namespace blockspec
