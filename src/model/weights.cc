#include "model/weights.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "base/error.h"
#include "kernels/quant.h"
#include "kernels/quant_import.h"
#include "model/hf_names.h"
#include "model/hybrid_weights.h"
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

// A hybrid Qwen3.5 target (hybrid.md §1-2): its text model under
// c.weight_prefix; the vision tower and the MTP block are not used.
static ModelWeights load_hybrid_weights(WeightLoader& L, const ModelConfig& c) {
  const int64_t H = c.hidden_size, V = c.vocab_size;
  int64_t skipped = 0;
  for (const std::string& n : L.src.names())
    skipped += n.rfind("model.visual.", 0) == 0 || n.rfind("mtp.", 0) == 0 ? 1 : 0;
  if (skipped > 0)
    std::fprintf(stderr, "%s: skipping %lld vision / MTP tensors (model.visual.*, mtp.*): blockspec runs the text model\n",
                 L.src.path().c_str(), static_cast<long long>(skipped));
  L.total = 3;
  for (int64_t i = 0; i < c.n_layers; ++i) L.total += hybrid_layer_tensors(c, i);
  ModelWeights w;
  w.tok_embd = L.matrix(hf::under(c.weight_prefix, hf::weight("", hf::kEmbed)), {V, H});
  w.out_norm = load_offset_norm(L, hf::under(c.weight_prefix, hf::weight("", hf::kFinalNorm)), H);
  // Tied checkpoints may still lack lm_head; untied ones fall back to the embedding only when it is absent
  // (hybrid.md §1.3: published 4B configs omit the untie flag).
  if (c.tie_word_embeddings || !L.src.has(hf::weight("", hf::kLmHead))) {
    w.lm_head = w.tok_embd;
    L.tick();
  } else {
    w.lm_head = L.matrix(hf::weight("", hf::kLmHead), {V, H});
  }
  w.layers.resize(c.n_layers);
  for (int64_t i = 0; i < c.n_layers; ++i) w.layers[i] = load_hybrid_layer(L, c, i);
  return w;
}

ModelWeights load_weights(const WeightSource& src, const ModelConfig& c, const WeightOptions& opts,
                          const OpContext& ctx) {
  WeightLoader L{src, opts, ctx, {}, 0, 0, false};
  L.tty = opts.progress && ::isatty(2);
  auto finish = [&](ModelWeights& w) {
    for (const auto& [f, n] : L.formats_used)
      w.format_summary += (w.format_summary.empty() ? "" : ", ") + f + " (" + std::to_string(n) + ")";
  };
  if (c.is_hybrid()) {
    ModelWeights w = load_hybrid_weights(L, c);
    finish(w);
    return w;
  }
  const int64_t H = c.hidden_size, hd = c.head_dim, nq = c.n_heads * hd, nkv = c.n_kv_heads * hd;
  const int64_t I = c.intermediate_size, V = c.vocab_size;
  const LayerSpec spec{H, nq, nkv, hd, I, c.attention_bias, c.attention_out_bias, c.arch == Arch::kQwen3, c.mlp_bias};
  L.total = 3 + c.n_layers * spec.n_tensors();
  ModelWeights w;
  w.tok_embd = L.matrix(hf::weight("", hf::kEmbed), {V, H});
  w.out_norm = L.vec(hf::weight("", hf::kFinalNorm), H);
  if (c.tie_word_embeddings) {
    w.lm_head = w.tok_embd;  // shared buffers, never copied
    L.tick();
  } else {
    w.lm_head = L.matrix(hf::weight("", hf::kLmHead), {V, H});
  }
  w.layers.resize(c.n_layers);
  for (int64_t i = 0; i < c.n_layers; ++i) w.layers[i] = load_layer(L, hf::target_layer(i), spec);
  load_kv_scales(src, c, w);
  finish(w);
  return w;
}

size_t LayerWeights::nbytes() const {
  size_t n = gdn.nbytes() + attn_qkv.nbytes() + attn_o.nbytes() + ffn_gate_up.nbytes() + ffn_down.nbytes();
  for (const Tensor* t : {&attn_norm, &attn_q_norm, &attn_k_norm, &ffn_norm, &attn_o_bias, &ffn_down_bias})
    n += t->nbytes();
  return n;
}

LayerWeights load_layer(WeightLoader& L, const std::string& p, const LayerSpec& s) {
  using namespace hf;
  const int64_t H = s.hidden;
  LayerWeights l;
  l.attn_norm = L.vec(weight(p, kAttnNorm), H);
  std::vector<std::string> qkv_bias;
  if (s.qkv_bias) qkv_bias = {bias(p, kQ), bias(p, kK), bias(p, kV)};
  l.attn_qkv = L.group({{weight(p, kQ), {s.q_rows, H}}, {weight(p, kK), {s.kv_rows, H}}, {weight(p, kV), {s.kv_rows, H}}},
                       qkv_bias);
  l.attn_o = L.matrix(weight(p, kO), {H, s.q_rows});
  if (s.o_bias) l.attn_o_bias = L.vec(bias(p, kO), H);
  if (s.qk_norm) {
    l.attn_q_norm = L.vec(weight(p, kQNorm), s.head_dim);
    l.attn_k_norm = L.vec(weight(p, kKNorm), s.head_dim);
  }
  l.ffn_norm = L.vec(weight(p, kFfnNorm), H);
  std::vector<std::string> gu_bias;
  if (s.mlp_bias) gu_bias = {bias(p, kGate), bias(p, kUp)};
  l.ffn_gate_up = L.group({{weight(p, kGate), {s.intermediate, H}}, {weight(p, kUp), {s.intermediate, H}}}, gu_bias);
  l.ffn_down = L.matrix(weight(p, kDown), {H, s.intermediate});
  if (s.mlp_bias) l.ffn_down_bias = L.vec(bias(p, kDown), H);
  return l;
}

}  // namespace blockspec
