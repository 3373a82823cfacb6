#include "quantize/calibration_hybrid.h"

#include <map>

#include "base/error.h"
#include "kernels/ops.h"
#include "model/decoder_layer.h"
#include "model/gdn_layer.h"
#include "model/hf_names.h"
#include "model/hybrid_weights.h"

namespace blockspec {

namespace {

// The source with some matrices replaced by f32 values (the dequantized weights GPTQ chose).
class OverlaySource : public WeightSource {
 public:
  explicit OverlaySource(const WeightSource& base) : base_(base) {}
  std::map<std::string, std::vector<float>> over;  // tensor name -> [N, K] f32
  const std::string& path() const override { return base_.path(); }
  const ModelConfig& config() const override { return base_.config(); }
  bool has(const std::string& n) const override { return base_.has(n); }
  Shape shape(const std::string& n) const override { return base_.shape(n); }
  std::string storage_type(const std::string& n) const override { return base_.storage_type(n); }
  WeightFormat natural_format(const std::string&) const override { return WeightFormat::kF32; }
  Tensor load(const std::string& n) const override {
    const auto it = over.find(n);
    if (it == over.end()) return base_.load(n);
    Tensor t(DType::kF32, base_.shape(n));
    std::copy(it->second.begin(), it->second.end(), t.mutable_ptr<float>());
    return t;
  }

 private:
  const WeightSource& base_;
};

}  // namespace

void calibrate_hybrid_layers(const WeightSource& src, const OpContext& ctx,
                             const std::vector<std::vector<int32_t>>& windows, const LayerCallback& on_layer,
                             const std::function<bool(const std::string&)>& needs, const HessianFn& hessian) {
  const ModelConfig& c = src.config();
  const int64_t H = c.hidden_size, hd = c.head_dim, nkv = c.n_kv_heads;
  OverlaySource layers(src);
  const WeightOptions f32{WeightFormat::kF32, false};
  std::vector<float> x = embed_windows(src, windows);  // [n, H] residual stream of every window, back to back
  // Per window: a one-layer KV cache for the attention layers and a GDN state for one layer, reset per pass.
  std::vector<KvCache> caches;
  std::vector<LayerSeq> seqs;
  std::vector<int64_t> pos;
  caches.reserve(windows.size());
  for (const auto& w : windows) {
    const int64_t t = static_cast<int64_t>(w.size());
    caches.emplace_back(1, t, nkv, hd, KvDType::kF32);
    seqs.push_back({&caches.back(), t});
    for (int64_t i = 0; i < t; ++i) pos.push_back(i);
  }
  std::vector<std::vector<float>> states(windows.size());
  const RopeTables rope = compute_rope(c);
  LayerScratch scratch;
  for (int64_t li = 0; li < c.n_layers; ++li) {
    const std::string p = hf::under(c.weight_prefix, hf::target_layer(li));
    const bool linear = c.is_linear(li);
    // The modules reading each observed input, in the layer's order.
    const std::vector<std::string> in_mods =
        linear ? std::vector<std::string>{hf::kGdnQkv, hf::kGdnZ, hf::kGdnB, hf::kGdnA}
               : std::vector<std::string>{hf::kQ, hf::kK, hf::kV};
    const std::vector<std::string> o_mods = {linear ? hf::kGdnOut : hf::kO};
    const std::vector<std::string> mlp_mods = {hf::kGate, hf::kUp}, down_mods = {hf::kDown};
    auto want = [&](const std::vector<std::string>& mods) {
      for (const std::string& m : mods)
        if (needs(p + m)) return true;
      return false;
    };
    const bool w_in = want(in_mods), w_o = want(o_mods), w_mlp = want(mlp_mods), w_down = want(down_mods);
    const std::vector<float> x_in = x;
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<double> h_in, h_o, h_mlp, h_down, d_in, d_o, d_mlp, d_down;
      if (pass == 1) x = x_in;
      LayerObserver observe = [&](LayerTap tap, const float* rows, int64_t rn, int64_t cols) {
        if (pass != 0) return;
        switch (tap) {
          case LayerTap::kAttnIn: if (w_in) hessian(rows, rn, cols, h_in, d_in); break;
          case LayerTap::kOIn: if (w_o) hessian(rows, rn, cols, h_o, d_o); break;
          case LayerTap::kMlpIn: if (w_mlp) hessian(rows, rn, cols, h_mlp, d_mlp); break;
          case LayerTap::kDownIn: if (w_down) hessian(rows, rn, cols, h_down, d_down); break;
          default: break;
        }
      };
      WeightLoader L{layers, f32, ctx, {}, 0, 0, false};
      const LayerWeights lw = load_hybrid_layer(L, c, li);
      if (linear) {
        std::vector<GdnSeq> gseqs;
        for (size_t i = 0; i < windows.size(); ++i) {
          states[i].assign(c.gdn.state_floats(), 0.f);  // each window starts from zero state
          gseqs.push_back({states[i].data(), seqs[i].n});
        }
        gdn_layer(ctx, c, lw, gseqs, x.data(), scratch, &observe);
      } else {
        decoder_layer(ctx, c, rope, lw, 0, seqs, pos.data(), x.data(), scratch, false, &observe);
      }
      if (pass == 1) break;
      LayerHessians hs, cross;
      auto share = [&](std::vector<double>& h, std::vector<double>& d, int64_t K, const std::vector<std::string>& mods) {
        if (h.empty()) return;
        finish_hessian(h, K);
        auto sp = std::make_shared<std::vector<double>>(std::move(h));
        auto sd = d.empty() ? nullptr : std::make_shared<std::vector<double>>(std::move(d));
        for (const std::string& m : mods) {
          hs[p + m] = sp;
          if (sd) cross[p + m] = sd;
        }
      };
      share(h_in, d_in, H, in_mods);
      share(h_o, d_o, linear ? c.gdn.value_dim() : c.n_heads * hd, o_mods);
      share(h_mlp, d_mlp, H, mlp_mods);
      share(h_down, d_down, c.intermediate_size, down_mods);
      std::map<std::string, std::vector<float>> repl = on_layer(li, hs, cross);
      if (repl.empty()) break;  // unchanged weights: pass 0's output is the next input
      for (auto& [m, w] : repl) {
        const Shape s = src.shape(m + ".weight");
        if (static_cast<int64_t>(w.size()) != s[0] * s[1])
          fail("calibration: replacement weight for ", m, " does not match the layer");
        layers.over[m + ".weight"] = std::move(w);
      }
    }
  }
}

}  // namespace blockspec
