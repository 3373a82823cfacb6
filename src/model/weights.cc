#include "model/weights.h"

#include <unistd.h>

#include <cstdio>
#include <map>

#include "base/error.h"
#include "kernels/quant.h"

namespace blockspec {

namespace {

struct Loader {
  const WeightSource& src;
  const WeightOptions& opts;
  const OpContext& ctx;
  std::map<std::string, int> formats_used;
  int64_t done = 0, total = 0;
  bool tty = false;

  void check(const std::string& name, const Shape& shape) const {
    if (!src.has(name))
      fail(src.path(), ": missing tensor \"", name, "\" (expected shape ", shape_str(shape), ")");
    Shape s = src.shape(name);
    if (s != shape)
      fail(src.path(), ": tensor \"", name, "\" has shape ", shape_str(s), ", expected ", shape_str(shape),
           " from the model config");
  }
  void tick() {
    ++done;
    if (tty) {
      int w = 40, f = static_cast<int>(w * std::min(done, total) / std::max<int64_t>(total, 1));
      std::fprintf(stderr, "\rloading [%.*s%*s] %lld/%lld", f, "########################################", w - f, "",
                   static_cast<long long>(done), static_cast<long long>(total));
      if (done == total) std::fprintf(stderr, "\n");
    }
  }
  QuantTensor matrix(const std::string& name, const Shape& shape) {
    check(name, shape);
    WeightFormat f = opts.format.value_or(src.natural_format(name));
    // Large matrices (embeddings, lm_head, MLP) convert in row chunks so they
    // never exist whole in f32 next to their converted copy.
    constexpr int64_t kStreamElems = int64_t(4) << 20;
    QuantTensor q = shape[0] * shape[1] > kStreamElems
                        ? make_weight_streamed(ctx, shape[0], shape[1], f,
                                               [&](int64_t r0, int64_t r1, float* out) {
                                                 src.load_rows(name, r0, r1, out);
                                               })
                        : make_weight(ctx, src.load(name), f);
    src.release(name);
    formats_used[weight_format_name(f)]++;
    tick();
    return q;
  }
  Tensor vec(const std::string& name, int64_t n) {
    check(name, {n});
    Tensor t = to_f32(src.load(name));
    src.release(name);
    tick();
    return t;
  }
};

}  // namespace

ModelWeights load_weights(const WeightSource& src, const ModelConfig& c, const WeightOptions& opts,
                          const OpContext& ctx) {
  Loader L{src, opts, ctx};
  L.tty = opts.progress && ::isatty(2);
  const int64_t H = c.hidden_size, hd = c.head_dim, nq = c.n_heads * hd, nkv = c.n_kv_heads * hd;
  const int64_t I = c.intermediate_size, V = c.vocab_size;
  const int64_t per_layer = 9 + (c.attention_bias ? 3 : 0) + (c.attention_out_bias ? 1 : 0) +
                            (c.arch == Arch::kQwen3 ? 2 : 0) + (c.mlp_bias ? 3 : 0);
  L.total = 3 + c.n_layers * per_layer;
  ModelWeights w;
  w.tok_embd = L.matrix("model.embed_tokens.weight", {V, H});
  w.out_norm = L.vec("model.norm.weight", H);
  if (c.tie_word_embeddings) {
    w.lm_head = w.tok_embd;  // shared buffers, never copied
    L.tick();
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
  for (const auto& [f, n] : L.formats_used)
    w.format_summary += (w.format_summary.empty() ? "" : ", ") + f + " (" + std::to_string(n) + ")";
  return w;
}

}  // namespace blockspec
