// See smooth.h. The statistics come from calibrate_layers (quantize/calibration.h) with nothing to calibrate and
// a tap: the one copy of the layer-by-layer forward over calibration windows.
#include "quantize/smooth.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "base/error.h"
#include "model/hf_names.h"
#include "quantize/calibration.h"

namespace blockspec {

std::vector<float> smooth_scales(const std::vector<float>& act_range, const std::vector<float>& w_absmax, double alpha) {
  BS_ASSERT(act_range.size() == w_absmax.size());
  std::vector<float> s(act_range.size());
  for (size_t j = 0; j < s.size(); ++j) {
    // llm-compressor (modifiers/smoothquant/base.py): weight_scales = 2 * max |W[:, j]|;
    // scales = act^alpha / weight^(1 - alpha); where(weight_scales > 0, scales, act); max(scales, 1e-5).
    const double a = act_range[j], w = 2.0 * static_cast<double>(w_absmax[j]);
    const double v = w > 0.0 ? std::pow(a, alpha) / std::pow(w, 1.0 - alpha) : a;
    s[j] = std::max(static_cast<float>(v), kMinSmoothScale);
  }
  return s;
}

std::vector<LayerRanges> activation_ranges(const WeightSource& src, const OpContext& ctx,
                                           const std::vector<std::vector<int32_t>>& windows) {
  const ModelConfig& c = src.config();
  const int64_t H = c.hidden_size;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<LayerRanges> r(c.n_layers);
  for (LayerRanges& l : r)
    for (ChannelRange* cr : {&l.attn_in, &l.mlp_in}) cr->lo.assign(H, inf), cr->hi.assign(H, -inf);
  const CalibrationTap tap = [&](int64_t li, LayerTap t, const float* rows, int64_t n, int64_t cols) {
    if (t != LayerTap::kAttnIn && t != LayerTap::kMlpIn) return;
    BS_ASSERT(cols == H);
    ChannelRange& cr = t == LayerTap::kAttnIn ? r[li].attn_in : r[li].mlp_in;
    for (int64_t i = 0; i < n; ++i)  // rows [n, H]
      for (int64_t j = 0; j < H; ++j) {
        const float v = rows[i * H + j];
        cr.lo[j] = std::min(cr.lo[j], v), cr.hi[j] = std::max(cr.hi[j], v);
      }
  };
  calibrate_layers(
      src, ctx, windows, [](int64_t, const LayerHessians&, const LayerHessians&) { return std::map<std::string, std::vector<float>>{}; },
      [](const std::string&) { return false; }, nullptr, false, false, &tap);
  return r;
}

namespace {

// One mapping: norm[j] /= s_j, W[:, j] *= s_j for each linear of `mods`, into out (f32 throughout).
void smooth_mapping(const WeightSource& src, const std::string& p, const char* norm,
                    std::initializer_list<const char*> mods, const ChannelRange& range, double alpha,
                    TensorOverrides& out) {
  const int64_t H = static_cast<int64_t>(range.lo.size());
  std::vector<float> w_absmax(H, 0.f), act(H);
  for (const char* m : mods) {
    const std::string n = hf::weight(p, m);
    const Shape s = src.shape(n);
    if (s.size() != 2 || s[1] != H) fail(src.path(), ": ", n, " is not [N, ", H, "] (SmoothQuant mapping)");
    std::vector<float>& w = out[n];
    w.resize(s[0] * s[1]);  // [N, H]
    src.load_rows(n, 0, s[0], w.data());
    for (int64_t i = 0; i < s[0]; ++i)
      for (int64_t j = 0; j < H; ++j) w_absmax[j] = std::max(w_absmax[j], std::fabs(w[i * H + j]));
  }
  for (int64_t j = 0; j < H; ++j) act[j] = range.hi[j] - range.lo[j];
  const std::vector<float> sc = smooth_scales(act, w_absmax, alpha);
  for (const char* m : mods) {
    std::vector<float>& w = out[hf::weight(p, m)];
    for (size_t i = 0; i < w.size(); ++i) w[i] *= sc[i % H];
  }
  const std::string nn = hf::weight(p, norm);
  const Tensor t = src.load(nn);
  if (t.numel() != H) fail(src.path(), ": ", nn, " has ", t.numel(), " values, expected ", H);
  const Tensor f = to_f32(t);
  std::vector<float>& nv = out[nn];
  nv.assign(f.ptr<float>(), f.ptr<float>() + H);
  for (int64_t j = 0; j < H; ++j) nv[j] /= sc[j];
}

}  // namespace

TensorOverrides smooth_model(const WeightSource& src, const OpContext& ctx,
                             const std::vector<std::vector<int32_t>>& windows, double alpha) {
  if (!(alpha > 0.0 && alpha <= 1.0)) fail("smoothquant: alpha ", alpha, " outside (0, 1]");
  if (src.config().is_hybrid())
    fail(src.path(), ": SmoothQuant of hybrid (Gated DeltaNet) models is not supported yet");
  const std::vector<LayerRanges> ranges = activation_ranges(src, ctx, windows);
  TensorOverrides out;
  for (int64_t li = 0; li < static_cast<int64_t>(ranges.size()); ++li) {
    const std::string p = hf::target_layer(li);
    smooth_mapping(src, p, hf::kAttnNorm, {hf::kQ, hf::kK, hf::kV}, ranges[li].attn_in, alpha, out);
    smooth_mapping(src, p, hf::kFfnNorm, {hf::kGate, hf::kUp}, ranges[li].mlp_in, alpha, out);
  }
  return out;
}

}  // namespace blockspec
