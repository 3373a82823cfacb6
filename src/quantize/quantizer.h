// Weight quantizers of `blockspec quantize`: the schemes it writes and their
// per-group parameters (scales, zero points, NVFP4 global scale) computed from
// the original weight, then element quantization / dequantization with those
// parameters. RTN quantizes every element with them; GPTQ (quantize/gptq.h)
// quantizes column by column with error feedback but the SAME parameters
// (llm-compressor's variant: parameters from the original W, static groups),
// so act-order never needs a g_idx.
//
// Formulas: ../shared/docs/quant_formats.md §3.2 (compressed-tensors
// quantizer: int sym absmax / (bit_range / 2), asym min/max with zero point,
// FP8 absmax / 448), §3.5 (NVFP4), §3.6 (MXFP4), §5 (encodings). Rounding is
// round-half-even everywhere.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace blockspec {

enum class QScheme { kW8A8, kW4A16, kW8A16, kFP8, kNVFP4, kMXFP4 };
const char* qscheme_name(QScheme s);  // "w8a8", "w4a16", ...
QScheme qscheme_from_name(const std::string& s);  // throws naming the valid ones

struct QuantSpec {
  QScheme scheme = QScheme::kW4A16;
  int bits = 4;
  bool is_float = false;  // FP8 / NVFP4 / MXFP4
  bool sym = true;        // int only
  // int: 128 (group) or -1 (per channel); FP8: 0 (per tensor) or -1 (per channel); NVFP4 16; MXFP4 32.
  int64_t group = 128;
  // Storage dtype of int / FP8 scales: the weight's dtype (compressed-tensors: bf16 / f16 / f32) or F16
  // (GPTQ). NVFP4 (E4M3) and MXFP4 (E8M0) fix their own.
  DType scale_dtype = DType::kBF16;
  // The observed weight dtype (MXFP4 takes amax in it; only matters for f16 inputs).
  DType weight_dtype = DType::kBF16;
  std::string describe() const;  // "int4 sym g128", "fp8 per-channel", ...
};

// Parameters (and, once quantized, codes) of one [N, K] weight.
struct QuantWeight {
  QuantSpec spec;
  int64_t N = 0, K = 0, n_groups = 0;  // n_groups per row (1 for channel and tensor)
  int64_t group_len = 0;               // inputs per group (K for channel / tensor)
  // Effective scale of (row, group) as an f32 value already rounded to the storage dtype:
  // [N, n_groups] (FP8 per tensor: [1]). NVFP4: float(e4m3 local scale) (the divisor is `global`).
  std::vector<float> scale;
  std::vector<uint8_t> scale_code;  // NVFP4: E4M3 byte, MXFP4: E8M0 byte  [N, n_groups]
  std::vector<int32_t> zero;        // int asym: signed zero point in [qmin, qmax]  [N, n_groups]
  float global = 1.f;               // NVFP4 weight_global_scale (a divisor)
  // Codes [N, K]: int: signed q in [-2^(b-1), 2^(b-1)-1]; FP8: E4M3 byte; FP4: E2M1 nibble 0..15.
  std::vector<int8_t> q;

  int64_t group_of(int64_t k) const { return k / group_len; }
  float group_scale(int64_t n, int64_t g) const;  // the multiplier of element codes
  int8_t quantize(int64_t n, int64_t k, float x) const;
  float dequantize_code(int64_t n, int64_t k, int8_t code) const;
  float value(int64_t n, int64_t k) const { return dequantize_code(n, k, q[n * K + k]); }
};

// Parameters from the original weight w [N, K] (f32 values of the stored weight).
QuantWeight make_params(const QuantSpec& spec, const float* w, int64_t N, int64_t K);
// RTN: q = quantize(w) for every element.
void quantize_rtn(QuantWeight& qw, const float* w);
// Dequantized weight [N, K].
std::vector<float> dequantize_all(const QuantWeight& qw);

float round_to_dtype(float x, DType dt);  // through bf16 / f16 (RNE), identity for f32

}  // namespace blockspec
