// Building Q8_G128 / Q4_G128 weights from integer codes and scales that
// already exist (GPTQ and compressed-tensors checkpoints), so importing a
// quantized checkpoint never re-quantizes: the packed weight holds exactly
// the checkpoint's codes and scales, and dequantize_weight() returns
// float(code) * scale, the reference dequantization bit for bit.
#pragma once
#include <cstdint>
#include <functional>

#include "kernels/ops.h"
#include "tensor/quant_tensor.h"

namespace blockspec {

// Fills rows [r0, r1) of a [N, K] weight: codes [r1 - r0, K] (signed, the
// value the weight stands for is code * scale) and scales [r1 - r0, G] f32,
// G = ceil(K / 128) groups of 128 inputs (the last one may be shorter).
using CodeRowsFn = std::function<void(int64_t r0, int64_t r1, int8_t* codes, float* scales)>;

// Packs the codes into fmt's layout (kernels/quant_layout.h), chunk by chunk
// (chunks start on 64-row panel boundaries), with corr = 128 * sum of codes
// per (row, group). Q8 accepts every int8 code, -128 included; Q4 accepts
// [-8, 7]. Throws Error naming the row, input and code if one is out of range,
// or if a scale is not finite. The result has act_int8 = true (W8A8 / W4A8);
// importers of weight-only checkpoints set it to false (model/weight_loader.h).
QuantTensor make_weight_from_codes(const OpContext& ctx, int64_t N, int64_t K, WeightFormat fmt,
                                   const CodeRowsFn& rows, int64_t chunk_rows = 4096);

// The inverse: rows [r0, r1) of a Q8_G128 / Q4_G128 weight as codes
// [r1 - r0, K] and scales [r1 - r0, G] (tests, writers, fusing parts).
void weight_codes(const QuantTensor& w, int64_t r0, int64_t r1, int8_t* codes, float* scales);

}  // namespace blockspec
