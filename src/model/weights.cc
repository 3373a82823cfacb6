#include "model/weights.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "base/error.h"
#include "kernels/quant.h"
#include "kernels/quant_import.h"
#include "model/weight_loader.h"

namespace blockspec {


size_t LinearGroup::nbytes() const {
  size_t b = bias.nbytes();
  for (const auto& m : mats) b += m.nbytes();
  return b;
}

void linear_group(const OpContext& ctx, const float* x, const LinearGroup& g, float* y, int64_t M,
                  std::vector<float>& scratch) {
  if (g.mats.size() == 1) {
    linear(ctx, x, g.mats[0], g.bias.empty() ? nullptr : g.bias.ptr<float>(), y, M);
    return;
  }
  int64_t off = 0;
  for (const QuantTensor& w : g.mats) {
    scratch.resize(M * w.rows);
    linear(ctx, x, w, nullptr, scratch.data(), M);  // [M, w.rows]
    for (int64_t m = 0; m < M; ++m)
      std::copy(scratch.begin() + m * w.rows, scratch.begin() + (m + 1) * w.rows, y + m * g.rows + off);
    off += w.rows;
  }
  if (!g.bias.empty())
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < g.rows; ++n) y[m * g.rows + n] += g.bias.ptr<float>()[n];
}

namespace {

// FP8 KV cache scales as vLLM reads them (quant_formats.md §6): one f32 scalar per attention layer,
// self_attn.k_scale and self_attn.v_scale, or a legacy self_attn.kv_scale used for both. All layers or none;
// required when the config declares a kv_cache_scheme.
void load_kv_scales(const WeightSource& src, const ModelConfig& c, ModelWeights& w) {
  auto scalar = [&](const std::string& n) {
    const Tensor t = src.load(n);
    if (t.numel() != 1)
      fail(src.path(), ": ", n, " has shape ", shape_str(t.shape()), "; expected a scalar (one FP8 KV scale per layer)");
    if (t.dtype() != DType::kF32 && t.dtype() != DType::kBF16 && t.dtype() != DType::kF16)
      fail(src.path(), ": ", n, " is ", dtype_name(t.dtype()), "; expected an F32, BF16 or F16 KV cache scale");
    const float v = to_f32(t).ptr<float>()[0];
    if (!(v > 0.f) || !std::isfinite(v)) fail(src.path(), ": ", n, " = ", v, "; a KV cache scale must be finite and > 0");
    return v;
  };
  auto name = [](int64_t i, const char* s) { return "model.layers." + std::to_string(i) + ".self_attn." + s; };
  bool any = false;
  for (int64_t i = 0; i < c.n_layers && !any; ++i)
    any = src.has(name(i, "k_scale")) || src.has(name(i, "v_scale")) || src.has(name(i, "kv_scale"));
  if (!any && !src.requires_kv_scales()) return;
  const char* why = src.requires_kv_scales() ? " (config.json quantization_config.kv_cache_scheme declares FP8 KV scales)"
                                             : " (other layers store FP8 KV cache scales)";
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const bool k = src.has(name(i, "k_scale")), v = src.has(name(i, "v_scale"));
    if (k && v) {
      w.kv_k_scale.push_back(scalar(name(i, "k_scale")));
      w.kv_v_scale.push_back(scalar(name(i, "v_scale")));
    } else if (!k && !v && src.has(name(i, "kv_scale"))) {
      w.kv_k_scale.push_back(scalar(name(i, "kv_scale")));
      w.kv_v_scale.push_back(w.kv_k_scale.back());
    } else {
      fail(src.path(), ": ", name(i, k ? "v_scale" : "k_scale"), " is missing", why);
    }
  }
}

}  // namespace

ModelWeights load_weights(const WeightSource& src, const ModelConfig& c, const WeightOptions& opts,
                          const OpContext& ctx) {
  WeightLoader L{src, opts, ctx, {}, 0, 0, false};
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
    std::vector<std::string> qkv_bias;
    if (c.attention_bias)
      qkv_bias = {p + "self_attn.q_proj.bias", p + "self_attn.k_proj.bias", p + "self_attn.v_proj.bias"};
    l.attn_qkv = L.group({{p + "self_attn.q_proj.weight", {nq, H}},
                          {p + "self_attn.k_proj.weight", {nkv, H}},
                          {p + "self_attn.v_proj.weight", {nkv, H}}},
                         qkv_bias);
    l.attn_o = L.matrix(p + "self_attn.o_proj.weight", {H, nq});
    if (c.attention_out_bias) l.attn_o_bias = L.vec(p + "self_attn.o_proj.bias", H);
    if (c.arch == Arch::kQwen3) {
      l.attn_q_norm = L.vec(p + "self_attn.q_norm.weight", hd);
      l.attn_k_norm = L.vec(p + "self_attn.k_norm.weight", hd);
    }
    l.ffn_norm = L.vec(p + "post_attention_layernorm.weight", H);
    std::vector<std::string> gu_bias;
    if (c.mlp_bias) gu_bias = {p + "mlp.gate_proj.bias", p + "mlp.up_proj.bias"};
    l.ffn_gate_up = L.group({{p + "mlp.gate_proj.weight", {I, H}}, {p + "mlp.up_proj.weight", {I, H}}}, gu_bias);
    l.ffn_down = L.matrix(p + "mlp.down_proj.weight", {H, I});
    if (c.mlp_bias) l.ffn_down_bias = L.vec(p + "mlp.down_proj.bias", H);
  }
  load_kv_scales(src, c, w);
  for (const auto& [f, n] : L.formats_used)
    w.format_summary += (w.format_summary.empty() ? "" : ", ") + f + " (" + std::to_string(n) + ")";
  return w;
}

}  // namespace blockspec
