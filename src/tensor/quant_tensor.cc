#include "tensor/quant_tensor.h"

namespace blockspec {

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32: return "f32";
    case WeightFormat::kBF16: return "bf16";
    case WeightFormat::kQ8_G128: return "q8";
    case WeightFormat::kQ4_G128: return "q4";
    case WeightFormat::kFP8_E4M3: return "fp8";
    case WeightFormat::kNVFP4: return "nvfp4";
    case WeightFormat::kMXFP4: return "mxfp4";
    case WeightFormat::kQ4_0: return "q4_0";
    case WeightFormat::kQ4_1: return "q4_1";
    case WeightFormat::kQ5_0: return "q5_0";
    case WeightFormat::kQ5_1: return "q5_1";
    case WeightFormat::kQ8_0: return "q8_0";
    case WeightFormat::kQ2_K: return "q2_k";
    case WeightFormat::kQ3_K: return "q3_k";
    case WeightFormat::kQ4_K: return "q4_k";
    case WeightFormat::kQ5_K: return "q5_k";
    case WeightFormat::kQ6_K: return "q6_k";
  }
  return "?";
}

std::optional<WeightFormat> weight_format_from_name(std::string_view name) {
  for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kQ8_G128, WeightFormat::kQ4_G128,
                         WeightFormat::kFP8_E4M3, WeightFormat::kNVFP4, WeightFormat::kMXFP4})
    if (name == weight_format_name(f)) return f;
  return std::nullopt;
}

}  // namespace blockspec
