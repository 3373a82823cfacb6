// HF `config.json` for the families blockspec runs: dense qwen3, qwen2, llama,
// and the hybrid Gated-DeltaNet qwen3_5 (text-only `qwen3_5_text` and the
// multimodal wrapper `qwen3_5` with its `text_config`; ../shared/docs/hybrid.md §1).
// Reads both the legacy layout (top-level rope_theta + rope_scaling,
// torch_dtype) that hub checkpoints carry and the transformers-5 layout
// (rope_parameters with rope_theta inside, dtype).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace blockspec {

enum class Arch { kQwen3, kQwen2, kLlama, kQwen35 };
const char* arch_name(Arch a);
// "dflash" / "dflash2" for a drafter architecture name, else nullptr.
const char* draft_method_of_architecture(const std::string& architecture);

enum class RopeType { kDefault, kLinear, kYarn, kLlama3 };
const char* rope_type_name(RopeType t);

struct RopeConfig {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  // llama3
  double low_freq_factor = 1.0, high_freq_factor = 4.0;
  // yarn
  double beta_fast = 32.0, beta_slow = 1.0;
  std::optional<double> attention_factor, mscale, mscale_all_dim;
  bool truncate = true;
  double partial_rotary_factor = 1.0;
};

// Gated DeltaNet (linear attention) layers of a hybrid target (hybrid.md §1.2).
struct GdnConfig {
  int64_t conv_kernel = 0;                     // K_c (linear_conv_kernel_dim)
  int64_t key_head_dim = 0, value_head_dim = 0;  // d_k, d_v
  int64_t n_key_heads = 0, n_value_heads = 0;    // n_k, n_v (n_v % n_k == 0)
  int64_t key_dim() const { return n_key_heads * key_head_dim; }
  int64_t value_dim() const { return n_value_heads * value_head_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }  // q | k | v channels
  // f32 state one sequence carries per GDN layer: the last K_c - 1 pre-conv
  // rows [K_c - 1, conv_dim], then the recurrent state [n_v, d_k, d_v].
  int64_t conv_state_floats() const { return (conv_kernel - 1) * conv_dim(); }
  int64_t state_floats() const { return conv_state_floats() + n_value_heads * key_head_dim * value_head_dim; }
};

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string model_type;
  std::string architecture;  // architectures[0]
  bool is_draft = false;     // a DFlash / DFlash2 drafter (formats/dflash_config.h)
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;  // decoupled for qwen3; hidden/heads when absent
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q,k,v (+o for llama) biases
  bool attention_out_bias = false;
  bool mlp_bias = false;
  std::vector<int32_t> eos_token_ids;
  std::optional<int32_t> bos_token_id;
  std::string torch_dtype;  // "float32", "bfloat16", ... ("" if absent)
  // ---- hybrid (qwen3_5) ----
  // Per layer: true = Gated DeltaNet, false = (gated) full attention. Empty
  // for dense models (every layer full attention).
  std::vector<bool> linear_layers;
  GdnConfig gdn;
  bool attn_output_gate = false;  // q_proj rows per head: [query d | gate d]; o = attn * sigmoid(gate)
  bool offset_norms = false;      // RMSNorm weights stored as w, applied as (1 + w) (hybrid.md §2.5)
  // Where the text model's tensors live: "model." or, in the multimodal
  // wrapper, "model.language_model." (lm_head stays at the top level).
  std::string weight_prefix = "model.";
  bool is_hybrid() const { return !linear_layers.empty(); }
  bool is_linear(int64_t layer) const { return is_hybrid() && linear_layers[layer]; }
  int64_t n_attention_layers() const;  // layers holding KV
  int64_t n_linear_layers() const { return n_layers - n_attention_layers(); }
  // KV cache layer of attention layer `layer` (its rank among attention layers).
  int64_t kv_layer(int64_t layer) const;
};

// `what` names the source (a path) in error messages.
ModelConfig parse_hf_config(const std::string& json_text, const std::string& what);
// Reads DIR/config.json.
ModelConfig load_hf_config(const std::string& model_dir);

// RoPE inverse frequencies [rotary_dim/2] and the cos/sin scale, computed as
// transformers' modeling_rope_utils does (float32 arithmetic where it uses it).
struct RopeTables {
  std::vector<float> inv_freq;  // [rotary_dim / 2]
  float attention_scaling = 1.0f;
  int64_t rotary_dim = 0;
};
RopeTables compute_rope(const ModelConfig& cfg);

}  // namespace blockspec
