// Quantization configs of quantized HF checkpoints (../shared/docs/
// quant_formats.md §2.4 GPTQ, §3.1 compressed-tensors) and the int32 bit
// packing both formats share (§2.2). This layer only parses and describes;
// model/quant_checkpoint.cc decides per module what is supported.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace blockspec {

enum class QuantMethod { kGptq, kCompressedTensors };

// GPTQ (AutoGPTQ / GPTQModel), from config.json "quantization_config" or
// quantize_config.json. Aliases: w_bit/wbits -> bits, q_group_size ->
// group_size; is_marlin_format / quant_method "marlin" -> checkpoint_format
// "marlin". A missing sym means true; a missing checkpoint_format means "gptq" (v1).
struct GptqConfig {
  int bits = 4;
  int64_t group_size = 128;  // -1: one group over all inputs (per channel)
  bool desc_act = false;
  bool sym = true;
  bool static_groups = false;
  std::string checkpoint_format = "gptq";  // "gptq" (v1: stored zero = z - 1) | "gptq_v2" | "marlin" | "gptq_p" ...
  bool has_dynamic = false;                // GPTQModel per-module "dynamic" overrides present
};

// compressed-tensors QuantizationArgs (the fields the loader needs; the
// rest are read for validation only).
struct CtQuantArgs {
  int num_bits = 8;
  std::string type = "int";  // "int" | "float"
  bool symmetric = true;
  std::string strategy;      // "tensor" | "channel" | "group" | "block" | "token" | "tensor_group" | ... (inferred when absent)
  int64_t group_size = 0;    // 0 when absent
  std::string dynamic = "false";  // "false" | "true" | "local"
  std::string actorder;      // "" | "group" | "weight"
  std::vector<int64_t> block_structure;  // strategy "block": [rows, cols] (e.g. [128, 128]); empty when absent
};

struct CtGroup {
  std::string name;                  // "group_0"
  std::vector<std::string> targets;  // "Linear", exact module names, "re:" regexes
  std::string format;                // per-group format, "" when null
  std::optional<CtQuantArgs> weights, input_activations, output_activations;
};

struct CtConfig {
  std::string format;  // top-level: "pack-quantized", "int-quantized", "mixed-precision", ...
  std::string quantization_status;  // "compressed" | "frozen" | ...
  std::vector<CtGroup> groups;      // in config order
  std::vector<std::string> ignore;
  bool has_kv_cache_scheme = false, has_transform = false, has_sparsity = false;
  std::optional<CtQuantArgs> kv_cache_scheme;  // when has_kv_cache_scheme: FP8 per-tensor k_scale / v_scale
};

struct QuantConfig {
  QuantMethod method = QuantMethod::kGptq;
  std::string what;  // where it came from, for messages ("DIR/config.json: quantization_config")
  GptqConfig gptq;
  CtConfig ct;
};

// Parses the quantization config object (the value of "quantization_config",
// or the whole of quantize_config.json). Throws Error naming `what`, the
// field, expected vs found; an unknown quant_method is an error.
QuantConfig parse_quant_config(const std::string& json_text, const std::string& what);

// The quantization config of the HF directory: config.json's
// "quantization_config", else quantize_config.json, else nullopt (dense).
std::optional<QuantConfig> load_quant_config(const std::string& model_dir);

// compressed-tensors target / ignore matching: "re:<regex>" matches when the
// regex matches at the start of the module name (Python re.match); any
// other entry matches the exact module name, or the class name "Linear"
// when the module is a linear layer.
bool ct_target_matches(const std::string& target, const std::string& module, bool is_linear);

// Field j (0-based, element 0 in the least significant bits) of b-bit codes
// packed into an int32 word, b in {2, 4, 8} (quant_formats.md §2.2).
inline uint32_t packed_field(uint32_t word, int bits, int64_t j) {
  return (word >> (bits * j)) & ((1u << bits) - 1u);
}

}  // namespace blockspec
