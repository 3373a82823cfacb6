// Stored tensors and quantization_config of `blockspec quantize` output, bit
// for bit as ../shared/docs/quant_formats.md lays them out:
//   compressed-tensors (§3.3-3.6): pack-quantized (int4 / int8 weight-only,
//   weight_packed I32 [N, ceil(K*b/32)] packed along K, weight_scale
//   [N, n_groups], asym weight_zero_point I32 [ceil(N*b/32), n_groups] packed
//   along N, weight_shape I64 [2]), int-quantized (W8A8: weight I8 [N, K]),
//   float-quantized (FP8: weight F8_E4M3 [N, K], weight_scale [1] or [N, 1]),
//   nvfp4-pack-quantized and mxfp4-pack-quantized (weight_packed U8 [N, K/2],
//   even k in the low nibble; E4M3 / E8M0 scales; NVFP4 weight_global_scale).
//   GPTQ (§2): qweight I32 [K/pf, N] packed along K, qzeros I32 [ng, N/pf]
//   (v1 "gptq": z - 1 for sym; asym is written as "gptq_v2", z as is),
//   scales F16 [ng, N], g_idx I32 [K] = k / group (trivial: act-order uses
//   static groups).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "quantize/quantizer.h"
#include "tensor/tensor.h"

namespace blockspec {

enum class QFormat { kCompressedTensors, kGptq };

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// The compressed-tensors format name of a scheme ("pack-quantized", ...).
std::string ct_format_of(const QuantSpec& s);

// Appends the tensors of one quantized module ("model.layers.0.mlp.up_proj").
void append_ct_tensors(const std::string& module, const QuantWeight& qw, NamedTensors& out);
void append_gptq_tensors(const std::string& module, const QuantWeight& qw, NamedTensors& out);

// One config group: the modules it targets (exact names) and its spec.
struct ConfigGroup {
  QuantSpec spec;
  std::vector<std::string> targets;
};

// config.json "quantization_config" (compressed-tensors, §3.1; key order sorted as
// ModelCompressor.update_config writes it). actorder: "" or "static".
nlohmann::ordered_json ct_quant_config(const std::vector<ConfigGroup>& groups, const std::vector<std::string>& ignore,
                                       const std::string& actorder);
// GPTQ quantize_config.json / config.json "quantization_config" (§2.4).
nlohmann::ordered_json gptq_quant_config(const QuantSpec& s, bool desc_act, double damp);

}  // namespace blockspec
