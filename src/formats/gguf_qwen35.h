// llama.cpp's `qwen35` GGUF architecture (hybrid Qwen3.5, ../shared/docs/hybrid.md
// §2.7): the hybrid part of its config, and undoing what the converter did to
// the tensors so the model loads them as HF stores them. The converter
// (convert_hf_to_gguf.py: Qwen3NextModel.modify_tensors,
// _LinearAttentionVReorderBase, read for these rules) writes
//   - `ssm_a` = -exp(A_log), `ssm_dt.bias` = dt_bias, `ssm_conv1d` [conv_dim, K]
//     (HF [conv_dim, 1, K]);
//   - every `norm.weight` except the gated `ssm_norm` as 1 + w;
//   - value heads in tiled order j n_k + g instead of HF's grouped g r + j
//     (r = n_v / n_k) along in_proj_qkv's V rows, in_proj_z's rows,
//     in_proj_a / in_proj_b's rows, A_log / dt_bias, conv1d's V channels and
//     out_proj's columns (llama.cpp broadcasts k heads by tiling).
#pragma once
#include <string>

#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "tensor/tensor.h"

namespace blockspec {

// The qwen35 fields of c (arch, layer types from full_attention_interval, GDN
// shapes from `qwen35.ssm.*`), checked against the tensor list.
void qwen35_config_from_gguf(const GgufFile& f, ModelConfig& c);

// HF names of the qwen35-only GGUF tensors ("blk.N.ssm_a" -> "model.layers.N.linear_attn.A_log", ...).
std::optional<std::string> qwen35_hf_name(const std::string& layer, const std::string& rest);

// The HF shape of a tensor whose GGUF shape differs (conv1d); `shape` otherwise.
Shape qwen35_hf_shape(const std::string& hf_name, const Shape& shape);

// f32 values as HF stores the tensor, from the converter's (dequantized) values.
Tensor qwen35_to_hf(const ModelConfig& c, const std::string& hf_name, Tensor t);

// Whether qwen35_to_hf changes this tensor (its rows cannot be streamed as they are).
bool qwen35_transformed(const ModelConfig& c, const std::string& hf_name);

}  // namespace blockspec
