// QuantTensor: a linear layer's weight in one of the engine's compute
// formats. The tag says how to read the buffers; the kernels layer owns the
// exact layout (kernels/quant.h documents it) and is the only code that
// creates or reads the buffers of quantized formats.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

#include "tensor/tensor.h"

namespace blockspec {

enum class WeightFormat : uint8_t {
  kF32,      // data: [N, K] f32
  kBF16,     // data: [N, K] bf16 bits
  kQ8_G128,  // int8 symmetric, one f32 scale per 128 inputs (last group may be shorter)
  kQ4_G128,  // int4 symmetric, one f32 scale per 128 inputs (last group may be shorter)
  // Weight-only float formats (activations stay f32; layouts in kernels/fp_formats.h):
  kFP8_E4M3,  // E4M3FN codes, one f32 scale per row and group of 128 inputs
  kNVFP4,     // E2M1 codes, one E4M3 scale per 16 inputs, one f32 global divisor
  kMXFP4,     // E2M1 codes, one E8M0 scale per 32 inputs
  // GGUF block formats kept as the file stores them (weights with activations quantized per block to int8;
  // value definitions in tensor/block_quant.h, packed layout in kernels/block_layout.h):
  kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ8_0,   // blocks of 32
  kQ2_K, kQ3_K, kQ4_K, kQ5_K, kQ6_K,   // super-blocks of 256
};
// "f32", "bf16", "q8", "q4", "fp8", "nvfp4", "mxfp4", and the GGUF block formats "q4_0" .. "q6_k"
// (which weight_format_from_name does not parse: a GGUF loads in them by default, nothing else can)
const char* weight_format_name(WeightFormat f);
std::optional<WeightFormat> weight_format_from_name(std::string_view name);

struct QuantTensor {
  WeightFormat format = WeightFormat::kF32;
  int64_t rows = 0;  // N: output features
  int64_t cols = 0;  // K: input features
  Tensor data;       // codes or values, layout per format
  Tensor scales;     // per-group scales (quantized formats), else empty
  Tensor aux;        // format-specific extra (e.g. per-group code sums), else empty
  // Q8_G128 / Q4_G128 only: how linear() treats the activations. true (the default, what --weights q8 / q4
  // conversions give): W8A8 / W4A8, activations quantized to int8 per row and group of 128. false: weight-only
  // W8A16 / W4A16, f32 activations times the codes dequantized in-register (kernels/quant_layout.h); what GPTQ
  // and weight-only compressed-tensors checkpoints load as.
  bool act_int8 = true;
  // act_int8 only: one activation scale per row instead of per row and group of 128 — vLLM's dynamic per-token
  // int8, what compressed-tensors W8A8 checkpoints declare (strategy "token") and load as. Our own q8 / q4
  // conversions keep the per-group scales (one outlier channel then costs precision only in its own group).
  bool act_per_token = false;

  bool empty() const { return rows == 0; }
  // Bytes a matmul reads: what the roofline counts per decode step.
  size_t nbytes() const { return data.nbytes() + scales.nbytes() + aux.nbytes(); }
};

}  // namespace blockspec
