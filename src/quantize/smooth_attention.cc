// See smooth_attention.h. The key statistics come from calibrate_layers (quantize/calibration.h) with nothing to
// calibrate and a tap on the keys: the one copy of the layer-by-layer forward over calibration windows.
#include "quantize/smooth_attention.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/error.h"
#include "formats/hf_config.h"
#include "model/hf_names.h"
#include "quantize/calibration.h"

namespace blockspec {

namespace {

// QServe's lambda never divides by 0: the same floor as SmoothQuant's scales (quantize/smooth.h).
constexpr float kMinKeyAbsmax = 1e-5f;

// The tensor n through src, in f32, checked to have `numel` values.
std::vector<float> load_f32(const WeightSource& src, const std::string& n, int64_t numel) {
  const Tensor t = to_f32(src.load(n));
  if (t.numel() != numel) fail(src.path(), ": ", n, " has ", t.numel(), " values, expected ", numel, " (SmoothAttention)");
  return std::vector<float>(t.ptr<float>(), t.ptr<float>() + numel);
}

// Multiplies rows [r * hd, r * hd + hd) of the [rows, cols] tensor n (weight or bias, cols = 1) by f[i] for
// head r = heads[k], into out[n].
void scale_head_rows(const WeightSource& src, const std::string& n, int64_t hd, const std::vector<int64_t>& heads,
                     const std::vector<std::vector<float>>& f, TensorOverrides& out) {
  if (!src.has(n)) return;  // no bias
  const Shape s = src.shape(n);
  const int64_t rows = s[0], cols = s.size() == 2 ? s[1] : 1;
  std::vector<float>& v = out[n];
  v = load_f32(src, n, rows * cols);
  for (size_t k = 0; k < heads.size(); ++k)
    for (int64_t i = 0; i < hd; ++i)
      for (int64_t j = 0; j < cols; ++j) v[(heads[k] * hd + i) * cols + j] *= f[k][i];
}

}  // namespace

std::vector<std::vector<float>> key_channel_absmax(const WeightSource& src, const OpContext& ctx,
                                                   const std::vector<std::vector<int32_t>>& windows) {
  const ModelConfig& c = src.config();
  const int64_t hd = c.head_dim, wk = c.n_kv_heads * hd, half = compute_rope(c).rotary_dim / 2;
  std::vector<std::vector<float>> m(c.n_layers, std::vector<float>(wk, 0.f));
  const CalibrationTap tap = [&](int64_t li, LayerTap t, const float* rows, int64_t n, int64_t cols) {
    if (t != LayerTap::kKeys) return;
    BS_ASSERT(cols == wk);
    std::vector<float>& ml = m[li];
    for (int64_t r = 0; r < n; ++r)  // rows [n, n_kv_heads * hd]
      for (int64_t h0 = 0; h0 < wk; h0 += hd) {
        const float* k = rows + r * wk + h0;
        for (int64_t i = 0; i < hd; ++i) {
          const int64_t p = i < half ? i + half : i < 2 * half ? i - half : i;  // RoPE partner (itself: unrotated)
          ml[h0 + i] = std::max(ml[h0 + i], std::sqrt(k[i] * k[i] + (p == i ? 0.f : k[p] * k[p])));
        }
      }
  };
  calibrate_layers(
      src, ctx, windows, [](int64_t, const LayerHessians&, const LayerHessians&) { return std::map<std::string, std::vector<float>>{}; },
      [](const std::string&) { return false; }, nullptr, false, false, &tap);
  return m;
}

namespace {
// Fails before any work on what SmoothAttention cannot do.
void check_smooth_attention(const WeightSource& src, double alpha) {
  if (!(alpha > 0.0 && alpha <= 1.0)) fail("SmoothAttention: alpha ", alpha, " outside (0, 1]");
  const ModelConfig& c = src.config();
  if (c.is_hybrid() || c.attn_output_gate)
    fail(src.path(), ": SmoothAttention of hybrid (Gated DeltaNet, gated attention) models is not supported yet");
}
}  // namespace

TensorOverrides smooth_attention(const WeightSource& src, const OpContext& ctx,
                                 const std::vector<std::vector<int32_t>>& windows, double alpha) {
  check_smooth_attention(src, alpha);
  return smooth_attention_from_absmax(src, key_channel_absmax(src, ctx, windows), alpha);
}

TensorOverrides smooth_attention_from_absmax(const WeightSource& src, const std::vector<std::vector<float>>& m,
                                             double alpha) {
  check_smooth_attention(src, alpha);
  const ModelConfig& c = src.config();
  if (static_cast<int64_t>(m.size()) != c.n_layers)
    fail("SmoothAttention: key absmaxes of ", m.size(), " layers for a model of ", c.n_layers);
  TensorOverrides out;
  for (int64_t li = 0; li < c.n_layers; ++li) smooth_attention_layer(src, li, m[li], alpha, out);
  return out;
}

void smooth_attention_layer(const WeightSource& src, int64_t layer, const std::vector<float>& m, double alpha,
                            TensorOverrides& out) {
  check_smooth_attention(src, alpha);
  const ModelConfig& c = src.config();
  const int64_t hd = c.head_dim, nkv = c.n_kv_heads, group = c.n_heads / c.n_kv_heads;
  if (static_cast<int64_t>(m.size()) != nkv * hd)
    fail("SmoothAttention: key absmaxes of ", m.size(), " channels, expected ", nkv * hd);
  auto lambda = [alpha](float v) { return static_cast<float>(std::pow(std::max(v, kMinKeyAbsmax), alpha)); };
  const std::string p = hf::target_layer(layer);
  if (c.arch == Arch::kQwen3) {  // one lambda per channel, shared by the heads as the norms are
    std::vector<float> up(hd), down(hd);
    for (int64_t i = 0; i < hd; ++i) {
      float mi = 0;
      for (int64_t h = 0; h < nkv; ++h) mi = std::max(mi, m[h * hd + i]);
      up[i] = lambda(mi), down[i] = 1.f / up[i];
    }
    scale_head_rows(src, hf::weight(p, hf::kKNorm), hd, {0}, {down}, out);
    scale_head_rows(src, hf::weight(p, hf::kQNorm), hd, {0}, {up}, out);
    return;
  }
  std::vector<int64_t> kheads(nkv), qheads(nkv * group);
  std::vector<std::vector<float>> down(nkv, std::vector<float>(hd)), up(nkv * group);
  for (int64_t h = 0; h < nkv; ++h) {
    kheads[h] = h;
    std::vector<float> l(hd);
    for (int64_t i = 0; i < hd; ++i) l[i] = lambda(m[h * hd + i]), down[h][i] = 1.f / l[i];
    for (int64_t g = 0; g < group; ++g) qheads[h * group + g] = h * group + g, up[h * group + g] = l;
  }
  for (auto fn : {hf::weight, hf::bias}) {
    scale_head_rows(src, fn(p, hf::kK), hd, kheads, down, out);
    scale_head_rows(src, fn(p, hf::kQ), hd, qheads, up, out);
  }
}

}  // namespace blockspec
