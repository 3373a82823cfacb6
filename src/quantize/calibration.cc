// See calibration.h. The layer mirrors Transformer::forward_batch (model/transformer.cc) without KV cache and
// bf16 emulation: rmsnorm -> q/k/v (+bias) -> [qwen3: per-head q/k RMSNorm] -> RoPE (NeoX) -> causal GQA
// attention -> o_proj -> residual; rmsnorm -> gate/up -> silu(gate) * up -> down -> residual.
#include "quantize/calibration.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "formats/hf_config.h"
#include "kernels/quant_layout.h"
#include "quantize/linalg.h"
#include "model/hf_names.h"

namespace blockspec {

void accumulate_hessian(const OpContext& ctx, const float* X, int64_t T, int64_t K, std::vector<double>& H) {
  accumulate_xtx(ctx, X, T, K, H);
}

namespace {
// x [T, K] -> its W8A8 activation rounding (codes * scales, exactly what the int8 GEMM multiplies for a
// checkpoint quantize writes: per token, QuantTensor::act_per_token).
std::vector<float> int8_rounded(const OpContext& ctx, const float* x, int64_t T, int64_t K) {
  const int64_t Kp = q_padded_k(K), G = q_groups(K);
  std::vector<uint8_t> q(T * Kp);
  std::vector<float> s(T * G), out(T * K);
  ctx.k->quantize_acts_token(x, T, K, q.data(), s.data());  // per token, as the written checkpoint declares
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; ++k)
      out[t * K + k] = static_cast<float>(static_cast<int>(q[t * Kp + k]) - 128) * s[t * G + k / kQGroup];
  return out;
}
}  // namespace

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

void run_lin(const OpContext& ctx, const Lin& l, const float* x, float* y, int64_t M) {
  const Tensor w = Tensor::view(DType::kF32, {l.N, l.K}, l.w.data());
  linear(ctx, x, w, l.b.empty() ? nullptr : l.b.data(), y, M);
}

}  // namespace

void calibrate_layers(const WeightSource& src, const OpContext& ctx, const std::vector<std::vector<int32_t>>& windows,
                      const LayerCallback& on_layer, const std::function<bool(const std::string&)>& needs,
                      KvAbsmax* kv_absmax, bool act_int8_hessians, bool act_cross) {
  const ModelConfig& c = src.config();
  const int64_t H = c.hidden_size, hd = c.head_dim, nh = c.n_heads, nkv = c.n_kv_heads, I = c.intermediate_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const RopeTables rope = compute_rope(c);
  int64_t n = 0;
  for (const auto& w : windows) n += static_cast<int64_t>(w.size());
  if (n == 0) fail("calibration: no tokens");
  std::vector<float> x(n * H);  // [n, H] residual stream of every window, back to back
  {
    const Tensor emb = src.load(hf::weight("", hf::kEmbed));
    int64_t row = 0;
    for (const auto& w : windows) {
      for (int32_t id : w)
        if (id < 0 || id >= emb.dim(0)) fail("calibration: token id ", id, " outside the embedding table");
      embedding_lookup(emb, w.data(), static_cast<int64_t>(w.size()), x.data() + row * H);
      row += static_cast<int64_t>(w.size());
    }
    src.release(hf::weight("", hf::kEmbed));
  }
  std::vector<float> xn(n * H), q(n * nh * hd), k(n * nkv * hd), v(n * nkv * hd), att(n * nh * hd), tmp(n * H);
  std::vector<float> gate(n * I), up(n * I);
  if (kv_absmax) kv_absmax->k.assign(c.n_layers, 0.f), kv_absmax->v.assign(c.n_layers, 0.f);
  // h += X_q^T X_q (X_q = X without act_int8_hessians); with act_cross also d += (X - X_q)^T X_q.
  auto hessian = [&](const float* X, int64_t T, int64_t K, std::vector<double>& h, std::vector<double>& d) {
    if (!act_int8_hessians) return accumulate_hessian(ctx, X, T, K, h);
    std::vector<float> xq = int8_rounded(ctx, X, T, K);
    accumulate_hessian(ctx, xq.data(), T, K, h);
    if (!act_cross) return;
    std::vector<float> e(T * K);  // [T, K] rounding error
    for (int64_t i = 0; i < T * K; ++i) e[i] = X[i] - xq[i];
    accumulate_atb(ctx, e.data(), xq.data(), T, K, d);
  };
  auto absmax = [](const std::vector<float>& a) {
    float m = 0.f;
    for (float t : a) m = std::max(m, std::fabs(t));
    return m;
  };
  for (int64_t li = 0; li < c.n_layers; ++li) {
    const std::string p = hf::target_layer(li);
    const std::vector<float> attn_norm = tensor_f32(src.load(hf::weight(p, hf::kAttnNorm)));
    const std::vector<float> ffn_norm = tensor_f32(src.load(hf::weight(p, hf::kFfnNorm)));
    std::vector<float> qn, kn;
    if (c.arch == Arch::kQwen3) {
      qn = tensor_f32(src.load(hf::weight(p, hf::kQNorm)));
      kn = tensor_f32(src.load(hf::weight(p, hf::kKNorm)));
    }
    std::map<std::string, Lin> lin;
    for (const char* m : {hf::kQ, hf::kK, hf::kV, hf::kO, hf::kGate, hf::kUp, hf::kDown})
      lin[p + m] = load_lin(src, p + m);
    auto L = [&](const char* m) -> Lin& { return lin[p + m]; };
    std::vector<float> x_in = x;  // the layer input, for the second pass
    auto want = [&](std::initializer_list<const char*> mods) {
      for (const char* m : mods)
        if (needs(p + m)) return true;
      return false;
    };
    const bool w_attn = want({hf::kQ, hf::kK, hf::kV}), w_o = want({hf::kO}), w_mlp = want({hf::kGate, hf::kUp}),
               w_down = want({hf::kDown});
    // pass 0: original weights, Hessians; pass 1: quantized weights, the next layer's input.
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<double> h_attn, h_o, h_mlp, h_down, d_attn, d_o, d_mlp, d_down;
      if (pass == 1) x = x_in;
      rmsnorm(x.data(), attn_norm.data(), eps, n, H, xn.data());
      if (pass == 0 && w_attn) hessian(xn.data(), n, H, h_attn, d_attn);
      run_lin(ctx, L(hf::kQ), xn.data(), q.data(), n);
      run_lin(ctx, L(hf::kK), xn.data(), k.data(), n);
      run_lin(ctx, L(hf::kV), xn.data(), v.data(), n);
      if (c.arch == Arch::kQwen3) {
        rmsnorm(q.data(), qn.data(), eps, n * nh, hd, q.data());
        rmsnorm(k.data(), kn.data(), eps, n * nkv, hd, k.data());
      }
      int64_t row = 0;
      for (const auto& w : windows) {
        const int64_t t = static_cast<int64_t>(w.size());
        std::vector<int64_t> pos(t);
        for (int64_t i = 0; i < t; ++i) pos[i] = i;
        rope_neox(q.data() + row * nh * hd, pos.data(), t, nh, hd, rope.inv_freq.data(), rope.rotary_dim,
                  rope.attention_scaling);
        rope_neox(k.data() + row * nkv * hd, pos.data(), t, nkv, hd, rope.inv_freq.data(), rope.rotary_dim,
                  rope.attention_scaling);
        AttentionShape as{t, 0, nh, nkv, hd, 1.0f / std::sqrt(static_cast<float>(hd))};
        attention_causal(ctx, q.data() + row * nh * hd, k.data() + row * nkv * hd, v.data() + row * nkv * hd, as,
                         att.data() + row * nh * hd);
        row += t;
      }
      if (kv_absmax) kv_absmax->k[li] = absmax(k), kv_absmax->v[li] = absmax(v);  // the last pass run wins
      if (pass == 0 && w_o) hessian(att.data(), n, nh * hd, h_o, d_o);
      run_lin(ctx, L(hf::kO), att.data(), tmp.data(), n);
      for (int64_t i = 0; i < n * H; ++i) x[i] += tmp[i];
      rmsnorm(x.data(), ffn_norm.data(), eps, n, H, xn.data());
      if (pass == 0 && w_mlp) hessian(xn.data(), n, H, h_mlp, d_mlp);
      run_lin(ctx, L(hf::kGate), xn.data(), gate.data(), n);
      run_lin(ctx, L(hf::kUp), xn.data(), up.data(), n);
      silu_mul(gate.data(), up.data(), n * I);
      if (pass == 0 && w_down) hessian(gate.data(), n, I, h_down, d_down);
      run_lin(ctx, L(hf::kDown), gate.data(), tmp.data(), n);
      for (int64_t i = 0; i < n * H; ++i) x[i] += tmp[i];
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
