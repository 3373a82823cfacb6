#include "kernels/quant_rows.h"

#include <cstring>

#include "base/error.h"
#include "kernels/block_quant.h"
#include "kernels/fp_formats.h"
#include "kernels/quant_layout.h"

namespace blockspec {

void dequantize_rows(const QuantTensor& w, const int32_t* rows, int64_t n, float* out) {
  const int64_t K = w.cols;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = rows[i];
    if (r < 0 || r >= w.rows) fail("token id ", r, " is out of range for a vocabulary of ", w.rows);
    float* o = out + i * K;
    switch (w.format) {
      case WeightFormat::kF32:
        if (w.data.dtype() == DType::kF32) {
          std::memcpy(o, w.data.ptr<float>() + r * K, K * sizeof(float));
          break;
        }
        [[fallthrough]];
      case WeightFormat::kBF16: {
        const uint16_t* s = w.data.ptr<uint16_t>() + r * K;
        if (w.data.dtype() == DType::kBF16) {
          for (int64_t k = 0; k < K; ++k) o[k] = bf16_to_f32(s[k]);
        } else if (w.data.dtype() == DType::kF16) {
          for (int64_t k = 0; k < K; ++k) o[k] = f16_to_f32(s[k]);
        } else {
          fail("dequantize_rows: unexpected storage dtype ", dtype_name(w.data.dtype()));
        }
        break;
      }
      case WeightFormat::kFP8_E4M3:
      case WeightFormat::kNVFP4:
      case WeightFormat::kMXFP4:
        fp_dequantize_row(fp_weights(w), r, o);
        break;
      case WeightFormat::kQ8_G128:
      case WeightFormat::kQ4_G128: {
        const PackedWeights p = packed_weights(w);
        const float* sc = p.scales + (r / kQTile) * p.n_groups * kQTile + r % kQTile;  // stride kQTile per group
        for (int64_t k = 0; k < K; ++k)
          o[k] = static_cast<float>(packed_code(p, r, k)) * sc[(k / kQGroup) * kQTile];
        break;
      }
      default:  // the GGUF block formats
        block_dequantize_row(w, r, o);
        break;
    }
  }
}

}  // namespace blockspec
