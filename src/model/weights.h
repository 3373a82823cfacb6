// Weights of a dense decoder (Qwen3 / Qwen2 / Llama). Every matrix (linear
// layers, embedding, lm_head) is a QuantTensor in the compute format chosen
// at load time; norm vectors and biases are f32. Field names follow
// design.md; the HF names they load from are spelled in weights.cc.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "model/weight_source.h"
#include "tensor/quant_tensor.h"

namespace blockspec {

struct LayerWeights {
  Tensor attn_norm;                              // [hidden] f32
  QuantTensor attn_q, attn_k, attn_v, attn_o;    // [nh*hd, H] [nkv*hd, H] x2, [H, nh*hd]
  Tensor attn_q_bias, attn_k_bias, attn_v_bias, attn_o_bias;  // f32, empty when absent
  Tensor attn_q_norm, attn_k_norm;               // [head_dim] f32, qwen3 only
  Tensor ffn_norm;                               // [hidden] f32
  QuantTensor ffn_gate, ffn_up;                  // [inter, hidden]
  QuantTensor ffn_down;                          // [hidden, inter]
  Tensor ffn_gate_bias, ffn_up_bias, ffn_down_bias;  // llama mlp_bias only
};

struct ModelWeights {
  QuantTensor tok_embd;  // [vocab, hidden]
  Tensor out_norm;       // [hidden] f32
  QuantTensor lm_head;   // [vocab, hidden]; shares tok_embd's buffers when tied
  std::vector<LayerWeights> layers;
  std::string format_summary;  // e.g. "q4 (197), q8 (1)": formats in use with counts
};

struct WeightOptions {
  // Compute format of every matrix; nullopt keeps each tensor's stored
  // precision class (WeightSource::natural_format).
  std::optional<WeightFormat> format;
  bool progress = false;  // a progress bar on stderr (only when it is a TTY)
};

// Loads and validates every tensor the config implies (presence, shape,
// dtype), each error naming the file, tensor, expected vs found; tensors the
// model does not use are ignored. Conversions run on ctx's threads.
ModelWeights load_weights(const WeightSource& src, const ModelConfig& cfg, const WeightOptions& opts,
                          const OpContext& ctx);

}  // namespace blockspec
