// Weights of a dense decoder (Qwen3 / Qwen2 / Llama), as tensors viewing the
// mmapped checkpoint (F32, BF16) or owned converted copies (F16 -> F32,
// every norm vector -> F32). Field names follow design.md; kHfNames maps them.
#pragma once
#include <string>
#include <vector>

#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "tensor/tensor.h"

namespace blockspec {

struct LayerWeights {
  Tensor attn_norm;                          // [hidden] f32
  Tensor attn_q, attn_k, attn_v, attn_o;     // [n_heads*hd, hidden] [n_kv*hd, hidden] x2, [hidden, n_heads*hd]
  Tensor attn_q_bias, attn_k_bias, attn_v_bias, attn_o_bias;  // f32, empty when absent
  Tensor attn_q_norm, attn_k_norm;           // [head_dim] f32, qwen3 only
  Tensor ffn_norm;                           // [hidden] f32
  Tensor ffn_gate, ffn_up;                   // [inter, hidden]
  Tensor ffn_down;                           // [hidden, inter]
  Tensor ffn_gate_bias, ffn_up_bias, ffn_down_bias;  // llama mlp_bias only
};

struct ModelWeights {
  Tensor tok_embd;  // [vocab, hidden]
  Tensor out_norm;  // [hidden] f32
  Tensor lm_head;   // [vocab, hidden]; shares tok_embd's storage when tied
  std::vector<LayerWeights> layers;
  DType linear_dtype = DType::kF32;  // dtype the linear weights are computed in
};

// Loads and validates every tensor the config implies: presence, shape and
// dtype, each error naming the checkpoint path, HF tensor name, expected vs
// found. Tensors the model does not use (e.g. rotary inv_freq) are ignored.
ModelWeights load_weights(const SafetensorsCheckpoint& ckpt, const ModelConfig& cfg);

}  // namespace blockspec
