// See calibration.h. Each layer runs as the model runs it (model/decoder_layer.h, the one copy of the
// layer math) with f32 weights and an observer that takes the Hessians of each linear's input.
#include "quantize/calibration.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "formats/hf_config.h"
#include "kernels/quant.h"
#include "kernels/quant_layout.h"
#include "model/decoder_layer.h"
#include "model/hf_names.h"
#include "quantize/calibration_hybrid.h"
#include "quantize/linalg.h"

namespace blockspec {

void accumulate_hessian(const OpContext& ctx, const float* X, int64_t T, int64_t K, std::vector<double>& H) {
  accumulate_xtx(ctx, X, T, K, H);
}


void finish_hessian(std::vector<double>& H, int64_t K) {
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = i + 1; j < K; ++j) H[i * K + j] = H[j * K + i];
}

namespace {

std::vector<float> tensor_f32(const Tensor& t) {
  std::vector<float> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype() == DType::kF32) v[i] = t.ptr<float>()[i];
    else if (t.dtype() == DType::kBF16) v[i] = bf16_to_f32(t.ptr<uint16_t>()[i]);
    else if (t.dtype() == DType::kF16) v[i] = f16_to_f32(t.ptr<uint16_t>()[i]);
    else fail("calibration: tensor of dtype ", dtype_name(t.dtype()), " (expected F32, BF16 or F16)");
  }
  return v;
}

struct Lin {
  std::vector<float> w, b;  // [N, K], [N] or empty
  int64_t N = 0, K = 0;
};

Lin load_lin(const WeightSource& src, const std::string& m) {
  Lin l;
  const Shape s = src.shape(m + ".weight");
  l.N = s[0], l.K = s[1];
  l.w.resize(l.N * l.K);
  src.load_rows(m + ".weight", 0, l.N, l.w.data());
  if (src.has(m + ".bias")) l.b = tensor_f32(src.load(m + ".bias"));
  return l;
}

struct Norms {
  std::vector<float> attn, ffn, q, k;  // q, k: Qwen3's per-head norms, else empty
};

Tensor f32_view(const std::vector<float>& v) {
  return v.empty() ? Tensor() : Tensor::view(DType::kF32, {static_cast<int64_t>(v.size())}, v.data());
}

// The layer's f32 weights (views of lin's and norms' buffers) as the model's
// LayerWeights, so calibration runs the serving layer (model/decoder_layer.h).
LayerWeights layer_weights(const OpContext& ctx, const std::string& p, std::map<std::string, Lin>& lin,
                           const Norms& norms) {
  auto mat = [&](const char* m) {
    Lin& l = lin.at(p + m);
    return make_weight(ctx, Tensor::view(DType::kF32, {l.N, l.K}, l.w.data()), WeightFormat::kF32);
  };
  auto group = [&](std::initializer_list<const char*> mods) {
    LinearGroup g;
    bool any_bias = false;
    for (const char* m : mods) any_bias |= !lin.at(p + m).b.empty();
    std::vector<float> bias;
    for (const char* m : mods) {
      const Lin& l = lin.at(p + m);
      g.mats.push_back(mat(m));
      g.part_rows.push_back(l.N);
      g.rows += l.N;
      if (any_bias && l.b.empty()) bias.insert(bias.end(), l.N, 0.f);  // a part without bias adds 0
      if (any_bias && !l.b.empty()) bias.insert(bias.end(), l.b.begin(), l.b.end());
    }
    if (any_bias) {
      g.bias = Tensor(DType::kF32, {g.rows});
      std::copy(bias.begin(), bias.end(), g.bias.mutable_ptr<float>());
    }
    return g;
  };
  LayerWeights w;
  w.attn_norm = f32_view(norms.attn);
  w.ffn_norm = f32_view(norms.ffn);
  w.attn_q_norm = f32_view(norms.q);
  w.attn_k_norm = f32_view(norms.k);
  w.attn_qkv = group({hf::kQ, hf::kK, hf::kV});
  w.attn_o = mat(hf::kO);
  w.attn_o_bias = f32_view(lin.at(p + hf::kO).b);
  w.ffn_gate_up = group({hf::kGate, hf::kUp});
  w.ffn_down = mat(hf::kDown);
  w.ffn_down_bias = f32_view(lin.at(p + hf::kDown).b);
  return w;
}

}  // namespace

std::vector<float> embed_windows(const WeightSource& src, const std::vector<std::vector<int32_t>>& windows) {
  const ModelConfig& c = src.config();
  const int64_t H = c.hidden_size;
  int64_t n = 0;
  for (const auto& w : windows) n += static_cast<int64_t>(w.size());
  std::vector<float> x(n * H);
  const std::string name = hf::under(c.weight_prefix, hf::weight("", hf::kEmbed));
  const Tensor emb = src.load(name);
  int64_t row = 0;
  for (const auto& w : windows) {
    for (int32_t id : w)
      if (id < 0 || id >= emb.dim(0)) fail("calibration: token id ", id, " outside the embedding table");
    embedding_lookup(emb, w.data(), static_cast<int64_t>(w.size()), x.data() + row * H);
    row += static_cast<int64_t>(w.size());
  }
  src.release(name);
  return x;
}

void calibrate_layers(const WeightSource& src, const OpContext& ctx, const std::vector<std::vector<int32_t>>& windows,
                      const LayerCallback& on_layer, const std::function<bool(const std::string&)>& needs,
                      KvAbsmax* kv_absmax, bool act_int8_hessians, bool act_cross, const CalibrationTap* tap) {
  const ModelConfig& c = src.config();
  const int64_t H = c.hidden_size, hd = c.head_dim, nh = c.n_heads, nkv = c.n_kv_heads, I = c.intermediate_size;
  int64_t n = 0;
  for (const auto& w : windows) n += static_cast<int64_t>(w.size());
  if (n == 0) fail("calibration: no tokens");
  // h += X_q^T X_q (X_q = X without act_int8_hessians); with act_cross also d += (X - X_q)^T X_q.
  auto hessian = [&](const float* X, int64_t T, int64_t K, std::vector<double>& h, std::vector<double>& d) {
    if (!act_int8_hessians) return accumulate_hessian(ctx, X, T, K, h);
    std::vector<float> xq(T * K);  // as the W8A8 checkpoint quantize writes runs its inputs: per token
    round_acts_token(ctx, X, T, K, xq.data());
    accumulate_hessian(ctx, xq.data(), T, K, h);
    if (!act_cross) return;
    std::vector<float> e(T * K);  // [T, K] rounding error
    for (int64_t i = 0; i < T * K; ++i) e[i] = X[i] - xq[i];
    accumulate_atb(ctx, e.data(), xq.data(), T, K, d);
  };
  if (c.is_hybrid()) {
    if (kv_absmax) fail("calibration: FP8 KV cache scales for hybrid models are not supported yet");
    if (tap) fail("calibration: activation taps (SmoothQuant) for hybrid models are not supported yet");
    std::vector<std::vector<int32_t>> ws;
    for (const auto& w : windows)
      if (!w.empty()) ws.push_back(w);
    return calibrate_hybrid_layers(src, ctx, ws, on_layer, needs, hessian);
  }
  std::vector<float> x = embed_windows(src, windows);  // [n, H] residual stream of every window, back to back
  if (kv_absmax) kv_absmax->k.assign(c.n_layers, 0.f), kv_absmax->v.assign(c.n_layers, 0.f);
  auto absmax = [](const float* a, int64_t n_vals) {
    float m = 0.f;
    for (int64_t i = 0; i < n_vals; ++i) m = std::max(m, std::fabs(a[i]));
    return m;
  };
  // Each window is one sequence with a one-layer f32 KV cache; every layer
  // writes its K/V at positions 0.. of it (the size is never advanced).
  std::vector<KvCache> caches;
  std::vector<LayerSeq> seqs;
  std::vector<int64_t> pos;
  caches.reserve(windows.size());
  for (const auto& w : windows) {
    const int64_t t = static_cast<int64_t>(w.size());
    if (t == 0) continue;
    caches.emplace_back(1, t, nkv, hd, KvDType::kF32);
    seqs.push_back({&caches.back(), t});
    for (int64_t i = 0; i < t; ++i) pos.push_back(i);
  }
  const RopeTables rope = compute_rope(c);
  LayerScratch scratch;
  for (int64_t li = 0; li < c.n_layers; ++li) {
    const std::string p = hf::target_layer(li);
    std::map<std::string, Lin> lin;
    for (const char* m : {hf::kQ, hf::kK, hf::kV, hf::kO, hf::kGate, hf::kUp, hf::kDown}) lin[p + m] = load_lin(src, p + m);
    Norms norms{tensor_f32(src.load(hf::weight(p, hf::kAttnNorm))), tensor_f32(src.load(hf::weight(p, hf::kFfnNorm))),
                {}, {}};
    if (c.arch == Arch::kQwen3) {
      norms.q = tensor_f32(src.load(hf::weight(p, hf::kQNorm)));
      norms.k = tensor_f32(src.load(hf::weight(p, hf::kKNorm)));
    }
    auto want = [&](std::initializer_list<const char*> mods) {
      for (const char* m : mods)
        if (needs(p + m)) return true;
      return false;
    };
    const bool w_attn = want({hf::kQ, hf::kK, hf::kV}), w_o = want({hf::kO}), w_mlp = want({hf::kGate, hf::kUp}),
               w_down = want({hf::kDown});
    const std::vector<float> x_in = x;  // the layer input, for the second pass
    // pass 0: original weights, Hessians; pass 1: quantized weights, the next layer's input.
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<double> h_attn, h_o, h_mlp, h_down, d_attn, d_o, d_mlp, d_down;
      if (pass == 1) x = x_in;
      LayerObserver observe = [&](LayerTap t, const float* rows, int64_t rn, int64_t cols) {
        if (pass == 0 && tap) (*tap)(li, t, rows, rn, cols);
        switch (t) {
          case LayerTap::kKeys: if (kv_absmax) kv_absmax->k[li] = absmax(rows, rn * cols); break;  // the last pass wins
          case LayerTap::kValues: if (kv_absmax) kv_absmax->v[li] = absmax(rows, rn * cols); break;
          case LayerTap::kAttnIn: if (pass == 0 && w_attn) hessian(rows, rn, cols, h_attn, d_attn); break;
          case LayerTap::kOIn: if (pass == 0 && w_o) hessian(rows, rn, cols, h_o, d_o); break;
          case LayerTap::kMlpIn: if (pass == 0 && w_mlp) hessian(rows, rn, cols, h_mlp, d_mlp); break;
          case LayerTap::kDownIn: if (pass == 0 && w_down) hessian(rows, rn, cols, h_down, d_down); break;
        }
      };
      const LayerWeights lw = layer_weights(ctx, p, lin, norms);
      decoder_layer(ctx, c, rope, lw, 0, seqs, pos.data(), x.data(), scratch, false, &observe);
      if (pass == 1) break;
      LayerHessians hs, cross;
      auto share = [&](std::vector<double>& h, std::vector<double>& d, int64_t K, std::initializer_list<const char*> mods) {
        if (h.empty()) return;  // not needed
        finish_hessian(h, K);
        auto sp = std::make_shared<std::vector<double>>(std::move(h));
        auto sd = d.empty() ? nullptr : std::make_shared<std::vector<double>>(std::move(d));
        for (const char* m : mods) {
          hs[p + m] = sp;
          if (sd) cross[p + m] = sd;
        }
      };
      share(h_attn, d_attn, H, {hf::kQ, hf::kK, hf::kV});
      share(h_o, d_o, nh * hd, {hf::kO});
      share(h_mlp, d_mlp, H, {hf::kGate, hf::kUp});
      share(h_down, d_down, I, {hf::kDown});
      std::map<std::string, std::vector<float>> repl = on_layer(li, hs, cross);
      hs.clear();
      cross.clear();
      if (repl.empty()) break;  // unchanged weights: pass 0's output is the next input
      for (auto& [m, w] : repl) {
        auto it = lin.find(m);
        if (it == lin.end() || static_cast<int64_t>(w.size()) != it->second.N * it->second.K)
          fail("calibration: replacement weight for ", m, " does not match the layer");
        it->second.w = std::move(w);
      }
    }
  }
}

}  // namespace blockspec
