// Loading the layers of a hybrid Qwen3.5 target (hybrid.md §2): Gated
// DeltaNet layers and gated full-attention layers, under the config's
// weight prefix. Matrices load through the WeightLoader like any target's
// (every stored format, quantized checkpoints' codes kept); conv1d, A_log,
// dt_bias and norms are read as stored and widened to f32.
#include "model/hybrid_weights.h"

#include <cmath>

#include "base/error.h"
#include "model/hf_names.h"

namespace blockspec {

namespace {

// (1 + w), computed in f32 as Qwen3_5RMSNorm does (hybrid.md §2.5).
Tensor offset(Tensor t) {
  float* p = t.mutable_ptr<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = 1.0f + p[i];
  return t;
}

}  // namespace

size_t GdnWeights::nbytes() const {
  return in.nbytes() + conv.nbytes() + neg_a.nbytes() + dt_bias.nbytes() + norm.nbytes() + out.nbytes();
}

int64_t hybrid_layer_tensors(const ModelConfig& c, int64_t layer) { return c.is_linear(layer) ? 14 : 11; }

LayerWeights load_hybrid_layer(WeightLoader& L, const ModelConfig& c, int64_t layer) {
  using namespace hf;
  const std::string p = under(c.weight_prefix, target_layer(layer));
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  LayerWeights l;
  l.attn_norm = offset(L.vec(weight(p, kAttnNorm), H));
  if (c.is_linear(layer)) {
    const GdnConfig& g = c.gdn;
    const int64_t C = g.conv_dim(), K = g.conv_kernel, nv = g.n_value_heads;
    l.linear = true;
    l.gdn.in = L.group({{weight(p, kGdnQkv), {C, H}}, {weight(p, kGdnZ), {g.value_dim(), H}},
                        {weight(p, kGdnB), {nv, H}}, {weight(p, kGdnA), {nv, H}}},
                       {});
    const Tensor conv = L.dense(weight(p, kGdnConv), {C, 1, K});  // [C, 1, K]
    l.gdn.conv = Tensor(DType::kF32, {K, C});
    for (int64_t ch = 0; ch < C; ++ch)
      for (int64_t j = 0; j < K; ++j) l.gdn.conv.mutable_ptr<float>()[j * C + ch] = conv.ptr<float>()[ch * K + j];
    l.gdn.neg_a = L.vec(p + kGdnALog, nv);
    for (int64_t h = 0; h < nv; ++h) {
      float& a = l.gdn.neg_a.mutable_ptr<float>()[h];
      a = -std::exp(a);
    }
    l.gdn.dt_bias = L.vec(p + kGdnDtBias, nv);
    l.gdn.norm = L.vec(weight(p, kGdnNorm), g.value_head_dim);
    l.gdn.out = L.matrix(weight(p, kGdnOut), {H, g.value_dim()});
  } else {
    const int64_t hd = c.head_dim, nq = c.n_heads * hd, nkv = c.n_kv_heads * hd;
    l.attn_qkv = L.group({{weight(p, kQ), {2 * nq, H}}, {weight(p, kK), {nkv, H}}, {weight(p, kV), {nkv, H}}}, {});
    l.attn_o = L.matrix(weight(p, kO), {H, nq});
    l.attn_q_norm = offset(L.vec(weight(p, kQNorm), hd));
    l.attn_k_norm = offset(L.vec(weight(p, kKNorm), hd));
  }
  l.ffn_norm = offset(L.vec(weight(p, kFfnNorm), H));
  l.ffn_gate_up = L.group({{weight(p, kGate), {I, H}}, {weight(p, kUp), {I, H}}}, {});
  l.ffn_down = L.matrix(weight(p, kDown), {H, I});
  return l;
}

Tensor load_offset_norm(WeightLoader& L, const std::string& name, int64_t n) { return offset(L.vec(name, n)); }

}  // namespace blockspec
