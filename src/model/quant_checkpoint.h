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
// native_act_int8() is true only for compressed-tensors modules with dynamic
// int8 per-token input_activations (W8A8, run per token like vLLM: QuantTensor::act_per_token);
// GPTQ and the rest run weight-only (W4A16 /
// W8A16: QuantTensor::act_int8 = false).
// GPTQ modules whose codes do not map onto those symmetric groups of 128 --
// asymmetric (sym=false; v1 zeros restored by whole-word addition, as
// GPTQModel does), act-order (desc_act with a non-trivial g_idx) or another
// group_size -- and compressed-tensors asymmetric int4 / int8 modules
// (symmetric: false with weight_zero_point; pack-quantized, int-quantized or
// naive-quantized; strategy group of any group_size, or channel; layout in
// quant_checkpoint_zp.h) are served as their exact dequantization s * (q - z)
// (exact in f32, bit for bit compressed-tensors' dequantize in f32), natural
// format f32, weight-only, with one note on stderr per checkpoint.
//
// Every module is validated when the source opens; what is malformed or not
// supported yet (zero points that disagree with "symmetric" or have the wrong
// dtype / shape / range, compressed-tensors actorder group, MXFP8, marlin,
// other bit widths or symmetric group sizes) fails with one line naming the
// module.
#pragma once
#include <memory>
#include <string>

#include "formats/quant_config.h"
#include "model/weight_source.h"

namespace blockspec {

// The modules that are nn.Linear in the families blockspec loads, i.e. what
// compressed-tensors' class target "Linear" selects: "*_proj" and "lm_head"
// (dense families; the Gated DeltaNet out_proj), the GDN input projections
// in_proj_qkv / in_proj_z / in_proj_a / in_proj_b (hybrid.md §2.1), and a
// DFlash / DFlash2 drafter's "fc", conv "kernel_projection" and selector
// "hidden_projection" (dflash.md §1.2). The one copy of this rule: the loader
// and `blockspec quantize` both ask it.
bool is_linear_module(const std::string& module);

std::unique_ptr<WeightSource> open_quant_checkpoint(const std::string& dir, const QuantConfig& qc);

// compressed-tensors float formats (float-quantized FP8 E4M3 with per-tensor, per-channel or [128, 128]
// block scales; nvfp4-pack-quantized; mxfp4-pack-quantized) are validated like the integer ones; their
// natural_format is kFP8_E4M3 / kNVFP4 / kMXFP4 and fp_native() / load_fp_native give the stored codes and
// scales as a QuantTensor of it (kernels/fp_formats.h) without re-quantizing, so they load compressed;
// load()/load_rows() give the exact dequantization (bit for bit compressed-tensors' dequantize in f32).
// load_fp_native throws if hf_name ("<module>.weight") is not such a module.
QuantTensor load_fp_native(const WeightSource& src, const std::string& hf_name);

}  // namespace blockspec
