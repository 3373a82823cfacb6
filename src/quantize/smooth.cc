// See smooth.h. The statistics come from calibrate_layers (quantize/calibration.h) with nothing to calibrate and
// a tap: the one copy of the layer-by-layer forward over calibration windows.
#include "quantize/smooth.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <functional>
#include <string>

#include "base/error.h"
#include "model/hf_names.h"
#include "quantize/calibration.h"

namespace blockspec {

SmoothMappings parse_smooth_mappings(const std::string& s) {
  if (s == "norms") return SmoothMappings::kSmoothQuant;
  if (s == "all") return SmoothMappings::kAll;
  fail("--smooth-mappings \"", s, "\": expected norms (SmoothQuant's: input_layernorm -> q/k/v, post_attention_layernorm "
       "-> gate/up) or all (also v_proj -> o_proj, up_proj -> down_proj)");
}

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
    for (ChannelRange* cr : {&l.attn_in, &l.mlp_in, &l.o_in, &l.down_in}) cr->lo.clear(), cr->hi.clear();
  const CalibrationTap tap = [&](int64_t li, LayerTap t, const float* rows, int64_t n, int64_t cols) {
    ChannelRange* cr = t == LayerTap::kAttnIn ? &r[li].attn_in : t == LayerTap::kMlpIn ? &r[li].mlp_in
                       : t == LayerTap::kOIn  ? &r[li].o_in    : t == LayerTap::kDownIn ? &r[li].down_in : nullptr;
    if (!cr) return;
    BS_ASSERT((t != LayerTap::kAttnIn && t != LayerTap::kMlpIn) || cols == H);
    if (cr->lo.empty()) cr->lo.assign(cols, inf), cr->hi.assign(cols, -inf);
    for (int64_t i = 0; i < n; ++i)  // rows [n, cols]
      for (int64_t j = 0; j < cols; ++j) {
        const float v = rows[i * cols + j];
        cr->lo[j] = std::min(cr->lo[j], v), cr->hi[j] = std::max(cr->hi[j], v);
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

// out[n], loaded from src first when no earlier mapping wrote it.
std::vector<float>& tensor_of(const WeightSource& src, const std::string& n, TensorOverrides& out) {
  auto it = out.find(n);
  if (it != out.end()) return it->second;
  const Shape s = src.shape(n);
  std::vector<float>& v = out[n];
  if (s.size() == 2) {
    v.resize(s[0] * s[1]);
    src.load_rows(n, 0, s[0], v.data());
  } else {  // a bias
    const Tensor f = to_f32(src.load(n));
    v.assign(f.ptr<float>(), f.ptr<float>() + f.numel());
  }
  return v;
}

// A mapping whose previous op is a linear (smooth.h, SmoothMappings::kAll): next input channel c comes from
// previous row row_of(c); one s per previous row.
void smooth_linear_pair(const WeightSource& src, const std::string& p, const char* prev, const char* next,
                        const ChannelRange& range, const std::function<int64_t(int64_t)>& row_of, int64_t prev_rows,
                        double alpha, TensorOverrides& out) {
  const std::string nn = hf::weight(p, next), pn = hf::weight(p, prev);
  const Shape ns = src.shape(nn), ps = src.shape(pn);
  const int64_t N = ns[0], Kn = ns[1], Kp = ps[1];
  if (ps[0] != prev_rows || static_cast<int64_t>(range.lo.size()) != Kn)
    fail(src.path(), ": ", pn, " / ", nn, " do not chain (SmoothQuant mapping ", prev, " -> ", next, ")");
  std::vector<float>& wn = tensor_of(src, nn, out);  // [N, Kn]
  std::vector<float> act(prev_rows, 0.f), w_absmax(prev_rows, 0.f);
  for (int64_t c = 0; c < Kn; ++c) act[row_of(c)] = std::max(act[row_of(c)], range.hi[c] - range.lo[c]);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < Kn; ++c) w_absmax[row_of(c)] = std::max(w_absmax[row_of(c)], std::fabs(wn[i * Kn + c]));
  const std::vector<float> sc = smooth_scales(act, w_absmax, alpha);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < Kn; ++c) wn[i * Kn + c] *= sc[row_of(c)];
  std::vector<float>& wp = tensor_of(src, pn, out);  // [prev_rows, Kp]
  for (int64_t r = 0; r < prev_rows; ++r)
    for (int64_t j = 0; j < Kp; ++j) wp[r * Kp + j] /= sc[r];
  if (src.has(hf::bias(p, prev))) {
    std::vector<float>& b = tensor_of(src, hf::bias(p, prev), out);
    for (int64_t r = 0; r < prev_rows; ++r) b[r] /= sc[r];
  }
}

}  // namespace

namespace {
// Fails before any work on what SmoothQuant cannot do.
void check_smooth(const WeightSource& src, double alpha) {
  if (!(alpha > 0.0 && alpha <= 1.0)) fail("smoothquant: alpha ", alpha, " outside (0, 1]");
  if (src.config().is_hybrid())
    fail(src.path(), ": SmoothQuant of hybrid (Gated DeltaNet) models is not supported yet");
}
}  // namespace

std::string SmoothAlphas::describe() const {
  if (attn_in == mlp_in && mlp_in == o_in && o_in == down_in) return str_cat(attn_in);
  return str_cat(attn_in, "/", mlp_in, "/", o_in, "/", down_in);
}

TensorOverrides smooth_model(const WeightSource& src, const OpContext& ctx,
                             const std::vector<std::vector<int32_t>>& windows, double alpha, SmoothMappings mappings) {
  check_smooth(src, alpha);
  return smooth_model_from_ranges(src, activation_ranges(src, ctx, windows), alpha, mappings);
}

TensorOverrides smooth_model_from_ranges(const WeightSource& src, const std::vector<LayerRanges>& ranges, double alpha,
                                         SmoothMappings mappings) {
  check_smooth(src, alpha);
  if (static_cast<int64_t>(ranges.size()) != src.config().n_layers)
    fail("smoothquant: ranges of ", ranges.size(), " layers for a model of ", src.config().n_layers);
  TensorOverrides out;
  for (int64_t li = 0; li < static_cast<int64_t>(ranges.size()); ++li)
    smooth_layer_from_ranges(src, li, ranges[li], SmoothAlphas::all(alpha), mappings, out);
  return out;
}

void smooth_layer_from_ranges(const WeightSource& src, int64_t layer, const LayerRanges& r, const SmoothAlphas& alphas,
                              SmoothMappings mappings, TensorOverrides& out) {
  check_smooth(src, alphas.attn_in);
  check_smooth(src, alphas.mlp_in);
  if (mappings == SmoothMappings::kAll) check_smooth(src, alphas.o_in), check_smooth(src, alphas.down_in);
  const std::string p = hf::target_layer(layer);
  smooth_mapping(src, p, hf::kAttnNorm, {hf::kQ, hf::kK, hf::kV}, r.attn_in, alphas.attn_in, out);
  smooth_mapping(src, p, hf::kFfnNorm, {hf::kGate, hf::kUp}, r.mlp_in, alphas.mlp_in, out);
  if (mappings != SmoothMappings::kAll) return;
  const ModelConfig& c = src.config();
  const int64_t hd = c.head_dim, group = c.n_heads / c.n_kv_heads;
  smooth_linear_pair(src, p, hf::kV, hf::kO, r.o_in, [&](int64_t ch) { return (ch / hd) / group * hd + ch % hd; },
                     c.n_kv_heads * hd, alphas.o_in, out);
  smooth_linear_pair(src, p, hf::kUp, hf::kDown, r.down_in, [](int64_t ch) { return ch; }, c.intermediate_size,
                     alphas.down_in, out);
}

}  // namespace blockspec
