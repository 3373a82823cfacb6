#include "model/weights.h"

#include "base/error.h"

namespace blockspec {

namespace {

struct Loader {
  const SafetensorsCheckpoint& ckpt;

  // A linear weight or embedding: kept in F32/BF16 (zero-copy), F16 widened.
  Tensor matrix(const std::string& name, const Shape& shape) const {
    Tensor t = fetch(name, shape);
    switch (t.dtype()) {
      case DType::kF32:
      case DType::kBF16: return t;
      case DType::kF16: return to_f32(t);
      default:
        fail(ckpt.path(), ": tensor \"", name, "\" has dtype ", dtype_name(t.dtype()),
             "; expected F32, BF16 or F16 (quantized formats load through their own loaders)");
    }
  }
  // Norm vectors and biases: always F32.
  Tensor vec(const std::string& name, int64_t n) const {
    Tensor t = fetch(name, {n});
    if (t.dtype() != DType::kF32 && t.dtype() != DType::kBF16 && t.dtype() != DType::kF16)
      fail(ckpt.path(), ": tensor \"", name, "\" has dtype ", dtype_name(t.dtype()), "; expected F32, BF16 or F16");
    return to_f32(t);
  }
  Tensor fetch(const std::string& name, const Shape& shape) const {
    if (!ckpt.has(name))
      fail(ckpt.path(), ": missing tensor \"", name, "\" (expected shape ", shape_str(shape), ")");
    Tensor t = ckpt.tensor(name);
    if (t.shape() != shape)
      fail(ckpt.path(), ": tensor \"", name, "\" has shape ", shape_str(t.shape()), ", expected ",
           shape_str(shape), " from config.json");
    return t;
  }
};

}  // namespace

ModelWeights load_weights(const SafetensorsCheckpoint& ckpt, const ModelConfig& c) {
  Loader L{ckpt};
  ModelWeights w;
  const int64_t H = c.hidden_size, hd = c.head_dim, nq = c.n_heads * hd, nkv = c.n_kv_heads * hd;
  const int64_t I = c.intermediate_size, V = c.vocab_size;
  w.tok_embd = L.matrix("model.embed_tokens.weight", {V, H});
  w.out_norm = L.vec("model.norm.weight", H);
  if (c.tie_word_embeddings) {
    w.lm_head = w.tok_embd;  // shared storage, never copied
  } else {
    w.lm_head = L.matrix("lm_head.weight", {V, H});
  }
  w.layers.resize(c.n_layers);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights& l = w.layers[i];
    l.attn_norm = L.vec(p + "input_layernorm.weight", H);
    l.attn_q = L.matrix(p + "self_attn.q_proj.weight", {nq, H});
    l.attn_k = L.matrix(p + "self_attn.k_proj.weight", {nkv, H});
    l.attn_v = L.matrix(p + "self_attn.v_proj.weight", {nkv, H});
    l.attn_o = L.matrix(p + "self_attn.o_proj.weight", {H, nq});
    if (c.attention_bias) {
      l.attn_q_bias = L.vec(p + "self_attn.q_proj.bias", nq);
      l.attn_k_bias = L.vec(p + "self_attn.k_proj.bias", nkv);
      l.attn_v_bias = L.vec(p + "self_attn.v_proj.bias", nkv);
    }
    if (c.attention_out_bias) l.attn_o_bias = L.vec(p + "self_attn.o_proj.bias", H);
    if (c.arch == Arch::kQwen3) {
      l.attn_q_norm = L.vec(p + "self_attn.q_norm.weight", hd);
      l.attn_k_norm = L.vec(p + "self_attn.k_norm.weight", hd);
    }
    l.ffn_norm = L.vec(p + "post_attention_layernorm.weight", H);
    l.ffn_gate = L.matrix(p + "mlp.gate_proj.weight", {I, H});
    l.ffn_up = L.matrix(p + "mlp.up_proj.weight", {I, H});
    l.ffn_down = L.matrix(p + "mlp.down_proj.weight", {H, I});
    if (c.mlp_bias) {
      l.ffn_gate_bias = L.vec(p + "mlp.gate_proj.bias", I);
      l.ffn_up_bias = L.vec(p + "mlp.up_proj.bias", I);
      l.ffn_down_bias = L.vec(p + "mlp.down_proj.bias", H);
    }
  }
  w.linear_dtype = w.layers.empty() ? w.lm_head.dtype() : w.layers[0].attn_q.dtype();
  return w;
}

}  // namespace blockspec
