// WeightSource for quantized HF safetensors checkpoints whose integer codes
// map exactly onto Q8_G128 / Q4_G128 (no re-quantization): GPTQ "gptq" (v1)
// and "gptq_v2", and compressed-tensors pack-quantized / int-quantized /
// naive-quantized, symmetric int4 / int8, groups of 128 or per channel.
// Layouts: ../shared/docs/quant_formats.md §2 and §3.
//
// Per quantized module the source serves a virtual "<module>.weight" of shape
// [N, K]: has_native()/load_native() give its codes and f32 scales (a
// per-channel scale is repeated in every group of 128), load()/load_rows()
// its exact dequantization float(code) * scale (an f32 product of an f16/bf16
// scale and a <= 8-bit code is exact). Everything else (embeddings, norms,
// biases, modules left dense by "ignore") is served as stored.
//
// Every module is validated when the source opens; what is malformed or not
// supported yet (asymmetric, desc_act / act-order, FP8, NVFP4, MXFP4, marlin,
// other bit widths or group sizes) fails with one line naming the module.
#pragma once
#include <memory>
#include <string>

#include "formats/quant_config.h"
#include "model/weight_source.h"

namespace blockspec {

std::unique_ptr<WeightSource> open_quant_checkpoint(const std::string& dir, const QuantConfig& qc);

}  // namespace blockspec
