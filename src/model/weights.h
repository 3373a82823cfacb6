// Weights of a decoder (dense Qwen3 / Qwen2 / Llama, hybrid Qwen3.5). Every matrix (linear
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

// Several weight matrices applied to the same input, outputs concatenated:
// q/k/v, and gate/up. Stored as ONE matrix when their formats agree, so a
// decode step streams one weight and synchronises threads once instead of
// three times (each output row is computed exactly as it would be alone).
struct LinearGroup {
  std::vector<QuantTensor> mats;  // one fused matrix, or the parts in order
  std::vector<int64_t> part_rows; // rows of each logical part (q, k, v)
  Tensor bias;                    // [rows] f32, empty when no part has a bias
  int64_t rows = 0;               // total outputs
  size_t nbytes() const;
};

// A Gated DeltaNet layer's own tensors (hybrid.md §2.1), model/gdn_layer.h.
struct GdnWeights {
  LinearGroup in;   // [conv_dim + value_dim + 2 n_v, H]: in_proj_qkv | in_proj_z | in_proj_b | in_proj_a
  Tensor conv;      // [K_c, conv_dim] f32: conv1d.weight [conv_dim, 1, K_c] transposed, tap-major
  Tensor neg_a;     // [n_v] f32: -exp(A_log)
  Tensor dt_bias;   // [n_v] f32
  Tensor norm;      // [d_v] f32: the gated RMSNorm's weight (plain w, shared by every head)
  QuantTensor out;  // [H, value_dim]
  size_t nbytes() const;
};

struct LayerWeights {
  bool linear = false;    // a Gated DeltaNet layer: gdn instead of the attention tensors
  GdnWeights gdn;
  Tensor attn_norm;       // [hidden] f32
  LinearGroup attn_qkv;   // [nh*hd + 2*nkv*hd, H]: q, k, v
  QuantTensor attn_o;     // [H, nh*hd]
  Tensor attn_o_bias;     // f32, empty when absent
  Tensor attn_q_norm, attn_k_norm;  // [head_dim] f32, qwen3 and qwen3_5
  // qwen3_5 (ModelConfig::attn_output_gate): attn_qkv's q part is [2 nh hd, H], per head [query hd | gate hd].
  // Norms of qwen3_5 hold 1 + w (ModelConfig::offset_norms), added once at load as HF adds it in f32.
  Tensor ffn_norm;        // [hidden] f32
  LinearGroup ffn_gate_up;  // [2*inter, hidden]: gate, up
  QuantTensor ffn_down;   // [hidden, inter]
  Tensor ffn_down_bias;   // llama mlp_bias only
  size_t nbytes() const;  // every tensor's bytes
};

// y[M, g.rows] = x[M, K] @ [W_parts]^T + bias.  scratch: reused buffer.
void linear_group(const OpContext& ctx, const float* x, const LinearGroup& g, float* y, int64_t M,
                  std::vector<float>& scratch);

struct ModelWeights {
  QuantTensor tok_embd;  // [vocab, hidden]
  Tensor out_norm;       // [hidden] f32
  QuantTensor lm_head;   // [vocab, hidden]; shares tok_embd's buffers when tied
  std::vector<LayerWeights> layers;
  // FP8 KV cache scales per layer from the checkpoint (self_attn.k_scale / v_scale); empty when it has none.
  std::vector<float> kv_k_scale, kv_v_scale;
  std::string format_summary;  // e.g. "q4 (197), q8 (1)": formats in use with counts
};

struct WeightOptions {
  // Compute format of every matrix; nullopt keeps each tensor's stored
  // precision class (WeightSource::natural_format). On a quantized
  // checkpoint (GPTQ, compressed-tensors) a format equal to the module's own
  // keeps its stored codes and scales; any other format converts the exactly
  // dequantized weights like a dense tensor.
  std::optional<WeightFormat> format;
  bool progress = false;  // a progress bar on stderr (only when it is a TTY)
};

// Loads and validates every tensor the config implies (presence, shape,
// dtype), each error naming the file, tensor, expected vs found; tensors the
// model does not use are ignored. Conversions run on ctx's threads.
ModelWeights load_weights(const WeightSource& src, const ModelConfig& cfg, const WeightOptions& opts,
                          const OpContext& ctx);

}  // namespace blockspec
