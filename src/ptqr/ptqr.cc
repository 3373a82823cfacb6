// See ptqr.h.
#include "ptqr/ptqr.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mapped_file.h"
#include "base/memory_bandwidth.h"
#include "formats/safetensors.h"
#include "kernels/quant.h"
#include "model/decoder_layer.h"
#include "model/hf_names.h"
#include "ptqr/ptqr_e2e.h"
#include "ptqr/ptqr_layer.h"
#include "quantize/calibration_hybrid.h"
#include "model/weight_overlay.h"
#include "quantize/quantize.h"
#include "quantize/smooth.h"
#include "quantize/smooth_attention.h"
#include "runtime/sampler.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace blockspec {

double dither_sigma(const PtqrOptions& o, int64_t t) {
  constexpr double kMin = 1e-3;
  if (o.dither_start <= 0) return 0.0;
  if (o.dither_decay > 0) {  // sigma_0 r^t until it falls below 1e-3
    const double s = o.dither_start * std::pow(o.dither_decay, static_cast<double>(t));
    return s < kMin ? 0.0 : s;
  }
  // Default: from sigma_0 down to 1e-3 at step T_d = round(0.8 steps), exactly 0 from T_d on.
  const int64_t td = std::llround(0.8 * static_cast<double>(o.steps));
  if (t >= td) return 0.0;
  return o.dither_start * std::pow(kMin / o.dither_start, static_cast<double>(t) / static_cast<double>(td));
}

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Tensor f32_tensor(const std::vector<float>& v, Shape shape) {
  Tensor t(DType::kF32, std::move(shape));
  std::copy(v.begin(), v.end(), t.mutable_ptr<float>());
  return t;
}

std::vector<float> f32_values(const Tensor& t) {
  if (t.dtype() != DType::kF32) fail("ptqr state: expected an F32 tensor");
  return std::vector<float>(t.ptr<float>(), t.ptr<float>() + t.numel());
}

// The state after `layers_done` layers: both residual streams and every finished layer's codes and scales.
struct State {
  int64_t layers_done = 0;
  std::vector<float> x_t, x_s;  // [n, H]
  std::map<std::string, QuantWeight> codes;
  TensorOverrides vectors;  // trained norms and biases (--train-vectors)
  json reports = json::array();
};

std::string state_dir(const PtqrOptions& o) { return o.out + ".ptqr-state"; }

// What must match for --resume to continue a run.
json fingerprint(const PtqrOptions& o) {
  json f = {{"in", o.in}, {"group", o.group}, {"kv", kv_dtype_name(o.kv)}, {"window", o.window},
          {"steps", o.steps}, {"lr", o.lr}, {"dither_start", o.dither_start}, {"dither_decay", o.dither_decay},
          {"seed", o.seed}, {"calib_tokens", o.calib_ids.size()}, {"max_layers", o.max_layers}, {"smooth", o.smooth},
          {"smooth_tokens", o.smooth_tokens}, {"holdout", o.holdout}, {"val_every", o.holdout > 0 ? o.val_every : 0},
          {"smooth_attention", o.smooth_attention}, {"smooth_all", o.smooth_mappings == SmoothMappings::kAll},
          {"train_vectors", o.train_vectors}, {"lr_vectors", o.train_vectors ? o.lr_vectors : 0.0}};
  if (o.scheme != QScheme::kW8A8) f["scheme"] = qscheme_name(o.scheme);  // (states without these predate them)
  if (!o.smooth_search.empty()) f["smooth_search"] = o.smooth_search;
  if (o.smooth_search_mappings) f["smooth_search_mappings"] = true;
  return f;
}

void save_state(const PtqrOptions& o, const State& st, int64_t H) {
  const std::string dir = state_dir(o), tmp = dir + "/tmp";
  fs::create_directories(dir);
  const int64_t n = static_cast<int64_t>(st.x_t.size()) / H;
  write_safetensors(tmp + ".streams", {{"x_t", f32_tensor(st.x_t, {n, H})}, {"x_s", f32_tensor(st.x_s, {n, H})}});
  fs::rename(tmp + ".streams", dir + "/streams.safetensors");
  // Layer files are written once, when the layer finishes.
  const int64_t li = st.layers_done - 1;
  if (li >= 0) {
    NamedTensors t;
    const std::string p = hf::target_layer(li);
    for (const auto& [m, qw] : st.codes) {
      if (m.rfind(p, 0) != 0) continue;
      Tensor c(DType::kI8, {qw.N, qw.K});
      std::copy(qw.q.begin(), qw.q.end(), c.mutable_ptr<int8_t>());
      t.emplace_back(m + ".codes", c);
      t.emplace_back(m + ".scales", f32_tensor(qw.scale, {qw.N, qw.n_groups}));
    }
    for (const auto& [n, v] : st.vectors)
      if (n.rfind(p, 0) == 0) t.emplace_back(n + ".trained", f32_tensor(v, {static_cast<int64_t>(v.size())}));
    write_safetensors(tmp + ".layer", t);
    fs::rename(tmp + ".layer", dir + "/layer" + std::to_string(li) + ".safetensors");
  }
  json meta = {{"fingerprint", fingerprint(o)}, {"layers_done", st.layers_done}, {"reports", st.reports}};
  {
    std::ofstream f(tmp + ".json", std::ios::binary | std::ios::trunc);
    f << meta.dump(1) << "\n";
    if (!f.flush()) fail("ptqr: cannot write ", tmp, ".json");
  }
  fs::rename(tmp + ".json", dir + "/meta.json");  // last: the layer above and the streams are complete
}

bool load_state(const PtqrOptions& o, const QuantSpec& spec, State& st) {
  const std::string dir = state_dir(o);
  if (!fs::exists(dir + "/meta.json")) return false;
  const json meta = json::parse(read_text_file(dir + "/meta.json"));
  if (meta.at("fingerprint") != fingerprint(o))
    fail("--resume: ", dir, " was made by another ptqr command (", meta.at("fingerprint").dump(),
         "); delete it or repeat that command");
  st.layers_done = meta.at("layers_done").get<int64_t>();
  st.reports = meta.at("reports");
  const SafetensorsCheckpoint s(dir + "/streams.safetensors");
  st.x_t = f32_values(s.tensor("x_t"));
  st.x_s = f32_values(s.tensor("x_s"));
  for (int64_t li = 0; li < st.layers_done; ++li) {
    const SafetensorsCheckpoint lf(dir + "/layer" + std::to_string(li) + ".safetensors");
    for (const std::string& name : lf.names()) {
      if (name.size() > 8 && name.substr(name.size() - 8) == ".trained") {
        st.vectors[name.substr(0, name.size() - 8)] = f32_values(lf.tensor(name));
        continue;
      }
      if (name.size() < 6 || name.substr(name.size() - 6) != ".codes") continue;
      const std::string m = name.substr(0, name.size() - 6);
      const Tensor c = lf.tensor(name), sc = lf.tensor(m + ".scales");
      QuantWeight qw;
      qw.spec = spec;
      qw.N = c.dim(0), qw.K = c.dim(1);
      qw.group_len = o.group, qw.n_groups = sc.dim(1);
      qw.q.assign(c.ptr<int8_t>(), c.ptr<int8_t>() + c.numel());
      qw.scale = f32_values(sc);
      st.codes.emplace(m, std::move(qw));
    }
  }
  return true;
}

// The end-to-end phase's checkpoint: e2e.safetensors (per module: multipliers, AdamW moments) and e2e.json.
json e2e_fingerprint(const PtqrOptions& o) { return {{"e2e_steps", o.e2e_steps}, {"e2e_lr", o.e2e_lr}}; }
// (--holdout and --val-every are in the block-wise fingerprint, which the state directory already matches.)

void save_e2e(const PtqrOptions& o, const E2eCheckpoint& ck) {
  const std::string dir = state_dir(o), tmp = dir + "/tmp";
  NamedTensors t;
  auto f64 = [](const std::vector<double>& v) {
    Tensor x(DType::kF64, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), x.mutable_ptr<double>());
    return x;
  };
  for (const auto& [m, v] : ck.mult) {
    t.emplace_back(m + ".mult", f32_tensor(v, {static_cast<int64_t>(v.size())}));
    t.emplace_back(m + ".adam_m", f64(ck.m.at(m)));
    t.emplace_back(m + ".adam_v", f64(ck.v.at(m)));
  }
  for (const auto& [m, v] : ck.best_mult) t.emplace_back(m + ".best", f32_tensor(v, {static_cast<int64_t>(v.size())}));
  write_safetensors(tmp + ".e2e", t);
  fs::rename(tmp + ".e2e", dir + "/e2e.safetensors");
  const json meta = {{"fingerprint", e2e_fingerprint(o)}, {"step", ck.step}, {"step_kl", ck.step_kl},
                     {"kl_before", ck.kl_before}, {"agree_before", ck.agree_before}, {"best_step", ck.best_step},
                     {"best_kl", ck.best_kl}};
  {
    std::ofstream f(tmp + ".e2e.json", std::ios::binary | std::ios::trunc);
    f << meta.dump(1) << "\n";
    if (!f.flush()) fail("ptqr: cannot write ", tmp, ".e2e.json");
  }
  fs::rename(tmp + ".e2e.json", dir + "/e2e.json");
}

bool load_e2e(const PtqrOptions& o, E2eCheckpoint& ck) {
  const std::string dir = state_dir(o);
  if (!fs::exists(dir + "/e2e.json")) return false;
  const json meta = json::parse(read_text_file(dir + "/e2e.json"));
  if (meta.at("fingerprint") != e2e_fingerprint(o))
    fail("--resume: ", dir, "/e2e.json was made with other end-to-end settings (", meta.at("fingerprint").dump(),
         "); delete it or repeat them");
  ck.step = meta.at("step").get<int64_t>();
  ck.step_kl = meta.at("step_kl").get<std::vector<double>>();
  ck.kl_before = meta.at("kl_before").get<double>();
  ck.agree_before = meta.at("agree_before").get<double>();
  ck.best_step = meta.value("best_step", int64_t{0});
  ck.best_kl = meta.value("best_kl", ck.kl_before);
  const SafetensorsCheckpoint s(dir + "/e2e.safetensors");
  auto f64 = [](const Tensor& x) {
    if (x.dtype() != DType::kF64) fail("ptqr e2e state: expected an F64 tensor");
    return std::vector<double>(x.ptr<double>(), x.ptr<double>() + x.numel());
  };
  for (const std::string& n : s.names()) {
    if (n.size() < 5 || n.substr(n.size() - 5) != ".mult") continue;
    const std::string m = n.substr(0, n.size() - 5);
    ck.mult[m] = f32_values(s.tensor(n));
    ck.m[m] = f64(s.tensor(m + ".adam_m"));
    ck.v[m] = f64(s.tensor(m + ".adam_v"));
    if (ck.best_step > 0) ck.best_mult[m] = f32_values(s.tensor(m + ".best"));
  }
  return true;
}

// A layer report's SmoothQuant alphas: [attn, mlp, o, down], or one number (states written before the per-mapping
// search).
SmoothAlphas alphas_of(const json& j) {
  return j.is_array() ? SmoothAlphas::of(j.get<std::array<double, 4>>()) : SmoothAlphas::all(j.get<double>());
}
SmoothAlphas report_alphas(const json& jr) {
  return jr.contains("smooth_alphas") ? alphas_of(jr.at("smooth_alphas")) : alphas_of(jr.value("smooth_alpha", 0.0));
}
json scores_json(const std::vector<std::pair<SmoothAlphas, double>>& scores) {
  json j = json::array();
  for (const auto& [al, l] : scores) j.push_back({al.values(), l});
  return j;
}

// SmoothQuant's activation ranges and SmoothAttention's key absmaxes (the forward passes of --smooth and
// --smooth-attention), kept in OUT.ptqr-state/smooth_stats.safetensors so that --resume does not measure them again.
struct SmoothStats {
  std::vector<LayerRanges> ranges;        // empty without --smooth
  std::vector<std::vector<float>> kabs;   // empty without --smooth-attention
};

// The four channel ranges of a layer, by the names the stats file uses.
std::array<std::pair<const char*, ChannelRange*>, 4> range_fields(LayerRanges& r) {
  return {{{"attn_in", &r.attn_in}, {"mlp_in", &r.mlp_in}, {"o_in", &r.o_in}, {"down_in", &r.down_in}}};
}

void save_smooth_stats(const PtqrOptions& o, SmoothStats& ss) {
  const std::string dir = state_dir(o), tmp = dir + "/tmp.smooth";
  fs::create_directories(dir);
  NamedTensors t;
  auto add = [&](const std::string& n, const std::vector<float>& v) {
    t.emplace_back(n, f32_tensor(v, {static_cast<int64_t>(v.size())}));
  };
  for (size_t l = 0; l < ss.ranges.size(); ++l) {
    const std::string p = "layer" + std::to_string(l) + ".";
    for (const auto& [n, cr] : range_fields(ss.ranges[l])) add(p + n + ".lo", cr->lo), add(p + n + ".hi", cr->hi);
  }
  for (size_t l = 0; l < ss.kabs.size(); ++l) add("layer" + std::to_string(l) + ".key_absmax", ss.kabs[l]);
  write_safetensors(tmp, t);
  fs::rename(tmp, dir + "/smooth_stats.safetensors");
}

// False when the state has none (a state written before they were kept): the caller measures them.
bool load_smooth_stats(const PtqrOptions& o, int64_t n_layers, SmoothStats& ss) {
  const std::string path = state_dir(o) + "/smooth_stats.safetensors";
  if (!fs::exists(path)) return false;
  const SafetensorsCheckpoint f(path);
  for (int64_t l = 0; l < n_layers && o.smooth > 0; ++l) {
    const std::string p = "layer" + std::to_string(l) + ".";
    LayerRanges r;
    for (const auto& [n, cr] : range_fields(r))
      cr->lo = f32_values(f.tensor(p + n + ".lo")), cr->hi = f32_values(f.tensor(p + n + ".hi"));
    ss.ranges.push_back(std::move(r));
  }
  for (int64_t l = 0; l < n_layers && o.smooth_attention > 0; ++l)
    ss.kabs.push_back(f32_values(f.tensor("layer" + std::to_string(l) + ".key_absmax")));
  return true;
}

}  // namespace

PtqrReport run_ptqr(const PtqrOptions& o) {
  const double t_start = now_s();
  reset_peak_rss();
  PtqrReport rep;
  if (o.group != 128) fail("--group ", o.group, ": ptqr trains the G128 grid (128)");
  if (o.steps < 1) fail("--steps ", o.steps, ": expected >= 1");
  if (o.window < 2) fail("--window ", o.window, ": expected >= 2");
  if (!(o.lr > 0)) fail("--lr ", o.lr, ": expected > 0");
  if (o.dither_start < 0 || o.dither_start > 4) fail("--dither-start ", o.dither_start, ": expected in [0, 4]");
  if (o.dither_decay < 0 || o.dither_decay >= 1) fail("--dither-decay ", o.dither_decay, ": expected in (0, 1) (or 0: automatic)");
  if (o.smooth < 0 || o.smooth > 1 || std::isnan(o.smooth)) fail("--smooth ", o.smooth, ": expected alpha in (0, 1] (0: off)");
  if (o.smooth_attention < 0 || o.smooth_attention > 1 || std::isnan(o.smooth_attention))
    fail("--smooth-attention ", o.smooth_attention, ": expected alpha in (0, 1] (0: off)");
  if (o.kv == KvDType::kFP8E4M3) fail("--kv-cache-dtype fp8_e4m3: needs calibrated scales; ptqr trains f32, bf16 and the int8 caches");
  if (o.e2e_steps < 0) fail("--e2e-steps ", o.e2e_steps, ": expected >= 0");
  if (o.e2e_steps > 0 && !(o.e2e_lr > 0)) fail("--e2e-lr ", o.e2e_lr, ": expected > 0");
  std::unique_ptr<WeightSource> src = open_weight_source(o.in);
  const ModelConfig& cfg = src->config();
  if (cfg.is_hybrid() || cfg.attn_output_gate)
    fail(o.in, ": ptqr retrains dense Qwen2 / Qwen3 / Llama targets (this model has Gated DeltaNet layers)");
  if (!fs::exists(fs::path(o.in) / "config.json") && gguf_path_of(o.in).empty())
    fail(o.in, ": not a model (expected an HF directory or a GGUF file)");
  std::vector<std::vector<int32_t>> windows;
  for (size_t i = 0; i + static_cast<size_t>(o.window) <= o.calib_ids.size(); i += o.window)
    windows.emplace_back(o.calib_ids.begin() + i, o.calib_ids.begin() + i + o.window);
  if (windows.empty())
    fail("--calib: ", o.calib_ids.size(), " tokens, fewer than one window of ", o.window, " (--window)");
  rep.n_windows = static_cast<int64_t>(windows.size());
  rep.window_tokens = o.window;
  if (o.holdout < 0 || o.holdout >= rep.n_windows)
    fail("--holdout ", o.holdout, ": expected 0 .. ", rep.n_windows - 1, " windows (", rep.n_windows,
         " calibration windows of ", o.window, " tokens; at least one must train)");
  if (o.holdout > 0 && o.val_every < 1) fail("--val-every ", o.val_every, ": expected >= 1");
  if (o.smooth_tokens == 0 || o.smooth_tokens < -1) fail("--smooth-tokens ", o.smooth_tokens, ": expected >= 1");
  if (!o.smooth_search.empty() && !(o.smooth > 0)) fail("--smooth-search needs --smooth ALPHA (the statistics' model)");
  if (o.smooth_search_mappings && o.smooth_search.size() < 2)
    fail("--smooth-search-mappings needs --smooth-search with at least two alphas (the grid each mapping searches)");
  for (double a : o.smooth_search)
    if (!(a > 0 && a <= 1)) fail("--smooth-search ", a, ": expected alphas in (0, 1]");
  const int64_t n_train = rep.n_windows - o.holdout;
  // SmoothQuant / SmoothAttention statistics: the first smooth_tokens tokens in whole windows (at least one).
  const std::vector<std::vector<int32_t>> smooth_windows(
      windows.begin(), windows.begin() + (o.smooth_tokens < 0 ? rep.n_windows
                                                               : std::clamp<int64_t>((o.smooth_tokens + o.window - 1) / o.window,
                                                                                     1, rep.n_windows)));

  {  // fewer layer-output values than codes: the block-wise phase can fit these windows' rounding (BENCHMARKS.md)
    const int64_t hq = cfg.n_heads * cfg.head_dim, hkv = cfg.n_kv_heads * cfg.head_dim;
    const int64_t codes = cfg.hidden_size * (hq + 2 * hkv) + hq * cfg.hidden_size + 3 * cfg.hidden_size * cfg.intermediate_size;
    const int64_t targets = n_train * o.window * cfg.hidden_size;
    if (targets < codes)
      rep.notes.push_back(str_cat("calibration: ", n_train * o.window, " training tokens give ", targets,
                                  " layer-output values per layer against ", codes,
                                  " codes; with fewer values than codes the block-wise phase can fit these windows' "
                                  "rounding instead of the text (measured on Qwen2.5-Coder-1.5B at 4096 tokens): "
                                  "raise --tokens", o.holdout > 0 ? "" : " or hold windows out (--holdout)"));
  }
  ThreadPool pool(o.n_threads);
  const KernelTable kt = select_kernels("");
  const OpContext ctx{&kt, &pool};
  const int64_t H = cfg.hidden_size, n_tok = rep.n_windows * o.window;
  const QuantSpec spec = ptqr_spec(*src, o.group, o.scheme);
  const int64_t L = o.max_layers < 0 ? cfg.n_layers : std::min<int64_t>(o.max_layers, cfg.n_layers);
  if (o.e2e_steps > 0 && L < cfg.n_layers)
    fail("--e2e-steps: the end-to-end phase trains every layer's scales; drop --max-layers (", o.max_layers, ")");

  State st;
  const bool resumed = o.resume && load_state(o, spec, st);
  if (resumed) {
    rep.resumed_from = st.layers_done;
    std::fprintf(stderr, "ptqr: resuming after layer %lld of %lld (%s)\n", static_cast<long long>(st.layers_done),
                 static_cast<long long>(L), state_dir(o).c_str());
  } else {
    st.x_t = embed_windows(*src, windows);
    st.x_s = st.x_t;
  }
  const RopeTables rope = compute_rope(cfg);
  // SmoothQuant first (--smooth): the student starts from the smoothed model, the teacher stays the original.
  // Its statistics (and SmoothAttention's) are measured once and kept in the state for --resume.
  TensorOverrides smoothed;
  SmoothStats ss;
  const bool stats_kept = (o.smooth > 0 || o.smooth_attention > 0) && resumed && load_smooth_stats(o, cfg.n_layers, ss);
  if (o.smooth > 0) {
    const double ts = now_s();
    if (!stats_kept) ss.ranges = activation_ranges(*src, ctx, smooth_windows);
    smoothed = smooth_model_from_ranges(*src, ss.ranges, o.smooth, o.smooth_mappings);
    if (o.progress)
      std::fprintf(stderr, "ptqr: SmoothQuant alpha %.3g over %lld windows%s: %zu tensors rescaled in %.0f s\n", o.smooth,
                   static_cast<long long>(smooth_windows.size()), stats_kept ? " (statistics kept in the state)" : "",
                   smoothed.size(), now_s() - ts);
  }
  if (o.smooth_attention > 0) {  // then SmoothAttention on what SmoothQuant left; its q/k tensors win
    const double ts = now_s();
    const OverlaySource sq(*src, smoothed);
    if (!stats_kept) ss.kabs = key_channel_absmax(sq, ctx, smooth_windows);
    TensorOverrides sa = smooth_attention_from_absmax(sq, ss.kabs, o.smooth_attention);
    if (o.progress)
      std::fprintf(stderr, "ptqr: SmoothAttention alpha %.3g: %zu q/k tensors rescaled in %.0f s\n", o.smooth_attention,
                   sa.size(), now_s() - ts);
    for (auto& [n, v] : sa) smoothed[n] = std::move(v);
  }
  if ((o.smooth > 0 || o.smooth_attention > 0) && !stats_kept) save_smooth_stats(o, ss);
  // --smooth-search: layer li's smoothed tensors at SmoothQuant alphas al (then SmoothAttention as above).
  auto layer_smoothing = [&](int64_t li, const SmoothAlphas& al) {
    TensorOverrides t;
    smooth_layer_from_ranges(*src, li, ss.ranges.at(li), al, o.smooth_mappings, t);
    if (o.smooth_attention > 0) {
      TensorOverrides sa;
      smooth_attention_layer(OverlaySource(*src, t), li, ss.kabs.at(li), o.smooth_attention, sa);
      for (auto& [n, v] : sa) t[n] = std::move(v);
    }
    return t;
  };
  for (const json& jr : st.reports)  // resumed: the finished layers' picks
    if (!o.smooth_search.empty())
      for (auto& [n, v] : layer_smoothing(jr.at("layer").get<int64_t>(), report_alphas(jr))) smoothed[n] = std::move(v);
  const OverlaySource student_src(*src, smoothed);
  double train_tokens = 0, train_seconds = 0;
  const int64_t stop = o.stop_after_layers >= 0 ? std::min<int64_t>(L, o.stop_after_layers) : L;
  for (int64_t li = st.layers_done; li < stop; ++li) {
    const double t0 = now_s();
    PtqrLayerReport lr;
    lr.layer = li;
    // Teacher: bf16 weights, f32 activations and KV, on the teacher's stream.
    std::vector<float> y_t = st.x_t;
    std::unique_ptr<PtqrLayer> layer_ptr;  // --smooth-search: the winning candidate, which then trains
    if (!o.smooth_search.empty()) {  // each candidate's RTN start on the first training windows; the best wins
      const int64_t n_score = std::min<int64_t>(n_train, 8) * o.window;
      double best = std::numeric_limits<double>::infinity();
      TensorOverrides best_t;
      auto score = [&](const SmoothAlphas& al) {
        TensorOverrides t = layer_smoothing(li, al);
        auto cand = std::make_unique<PtqrLayer>(ctx, cfg, rope, *src, OverlaySource(*src, t), li, spec, o.kv,
                                                o.train_vectors);
        if (lr.smooth_scores.empty()) cand->run_teacher(o.window, y_t.data(), n_tok);
        cand->requantize(0.0, 0);
        const double loss = cand->serving_loss(o.window, st.x_s.data(), y_t.data(), n_score, nullptr);
        lr.smooth_scores.push_back({al, loss});
        if (loss < best) best = loss, lr.smooth_alphas = al, best_t = std::move(t), layer_ptr = std::move(cand);
      };
      for (double a : o.smooth_search) score(SmoothAlphas::all(a));
      if (o.smooth_search_mappings) {  // then each mapping's alpha in turn, the others at their best so far
        const bool all = o.smooth_mappings == SmoothMappings::kAll;
        for (double SmoothAlphas::*m : {&SmoothAlphas::attn_in, &SmoothAlphas::mlp_in, &SmoothAlphas::o_in,
                                        &SmoothAlphas::down_in}) {
          if (!all && (m == &SmoothAlphas::o_in || m == &SmoothAlphas::down_in)) continue;
          const SmoothAlphas base = lr.smooth_alphas;
          for (double a : o.smooth_search) {
            SmoothAlphas al = base;
            al.*m = a;
            if (!(al == base)) score(al);
          }
        }
      }
      for (auto& [n, v] : best_t) smoothed[n] = std::move(v);  // the export's (and later phases') tensors
      if (o.progress) {
        std::string sc;
        for (const auto& [al, l] : lr.smooth_scores) sc += str_cat(" ", al.describe(), ":", l);
        std::fprintf(stderr, "ptqr: layer %lld/%lld SmoothQuant alphas %s picked (RTN loss per candidate:%s)\n",
                     static_cast<long long>(li + 1), static_cast<long long>(L), lr.smooth_alphas.describe().c_str(),
                     sc.c_str());
      }
    }
    if (!layer_ptr) {
      layer_ptr = std::make_unique<PtqrLayer>(ctx, cfg, rope, *src, student_src, li, spec, o.kv, o.train_vectors);
      layer_ptr->run_teacher(o.window, y_t.data(), n_tok);
    }
    PtqrLayer& layer = *layer_ptr;
    layer.requantize(0.0, 0);
    lr.loss_rtn = layer.serving_loss(o.window, st.x_s.data(), y_t.data(), n_tok, nullptr);
    // Held-out windows: the rows after the training windows'.
    const int64_t val_off = n_train * o.window * H, val_n = o.holdout * o.window;
    auto val_loss = [&] { return layer.serving_loss(o.window, st.x_s.data() + val_off, y_t.data() + val_off, val_n, nullptr); };
    std::vector<std::vector<float>> best;  // the masters of the best held-out score so far (holdout > 0)
    if (o.holdout > 0) lr.val_rtn = lr.val_final = val_loss(), lr.kept_step = 0, best = layer.masters();
    AdamWOptions ao;
    ao.weight_decay = o.weight_decay;
    Rng order(o.seed * 7919 + li);
    const int64_t warm = static_cast<int64_t>(o.warmup_frac * o.steps);
    double ema = lr.loss_rtn;
    for (int64_t t = 0; t < o.steps; ++t) {
      const double ts = now_s();
      const int64_t w = static_cast<int64_t>(order.next() % static_cast<uint64_t>(n_train));
      const double sigma = dither_sigma(o, t);
      layer.requantize(sigma, o.seed * 1000003 + li * 65537 + t);
      const float* xs = st.x_s.data() + w * o.window * H;
      const float* yt = y_t.data() + w * o.window * H;
      const double lr_t = lr_at(t, o.steps, warm, o.lr, o.lr_floor, true);
      const double loss = layer.train_step(o.window, xs, yt, lr_t, t + 1, ao, lr_t * o.lr_vectors / o.lr);
      ema = t == 0 ? loss : 0.9 * ema + 0.1 * loss;
      train_seconds += now_s() - ts;
      train_tokens += static_cast<double>(o.window);
      if (o.holdout > 0 && ((t + 1) % o.val_every == 0 || t + 1 == o.steps)) {
        layer.requantize(0.0, 0);  // the codes this step's masters would serve; the next step requantizes again
        const double v = val_loss();
        if (v < lr.val_final) lr.val_final = v, lr.kept_step = t + 1, best = layer.masters();
        if (o.progress)
          std::fprintf(stderr, "ptqr: layer %lld/%lld step %lld held-out %.6f (start %.6f, best %.6f at step %lld)\n",
                       static_cast<long long>(li + 1), static_cast<long long>(L), static_cast<long long>(t + 1), v,
                       lr.val_rtn, lr.val_final, static_cast<long long>(lr.kept_step));
      }
      if (o.progress && (t % 10 == 0 || t + 1 == o.steps)) {
        const double tps = train_tokens / std::max(1e-9, train_seconds);
        const double left = (static_cast<double>(L - li - 1) * o.steps + (o.steps - t - 1)) * o.window / tps;
        std::fprintf(stderr,
                     "ptqr: layer %lld/%lld step %lld/%lld loss %.6f (ema %.6f, rtn %.6f) sigma %.4g lr %.3g "
                     "%.0f tok/s ETA %.0f s\n",
                     static_cast<long long>(li + 1), static_cast<long long>(L), static_cast<long long>(t + 1),
                     static_cast<long long>(o.steps), loss, ema, lr.loss_rtn, sigma,
                     lr_at(t, o.steps, warm, o.lr, o.lr_floor, true), tps, left);
      }
    }
    if (o.holdout > 0) layer.set_masters(best);
    layer.requantize(0.0, 0);
    std::vector<float> y_s = st.x_s;
    lr.loss_final = layer.serving_loss(o.window, st.x_s.data(), y_t.data(), n_tok, y_s.data());
    for (auto& [n, v] : layer.export_vectors()) st.vectors[n] = std::move(v);
    for (auto& [m, qw, err] : layer.export_codes()) {
      lr.rel_err.emplace_back(m, err);
      st.codes[m] = std::move(qw);
    }
    lr.seconds = now_s() - t0;
    st.x_t.swap(y_t);
    st.x_s.swap(y_s);
    st.layers_done = li + 1;
    json jr = {{"layer", li}, {"loss_rtn", lr.loss_rtn}, {"loss_final", lr.loss_final}, {"seconds", lr.seconds},
               {"val_rtn", lr.val_rtn}, {"val_final", lr.val_final}, {"kept_step", lr.kept_step},
               {"smooth_alphas", lr.smooth_alphas.values()}, {"smooth_scores", scores_json(lr.smooth_scores)}};
    for (const auto& [m, e] : lr.rel_err) jr["rel_err"][m] = e;
    st.reports.push_back(jr);
    save_state(o, st, H);
    if (o.progress)
      std::fprintf(stderr, "ptqr: layer %lld/%lld done in %.0f s: loss %.6f -> %.6f (%.1f%% of RTN's)%s\n",
                   static_cast<long long>(li + 1), static_cast<long long>(L), lr.seconds, lr.loss_rtn, lr.loss_final,
                   100.0 * lr.loss_final / std::max(1e-30, lr.loss_rtn),
                   o.holdout > 0 ? str_cat(", held out ", lr.val_rtn, " -> ", lr.val_final, " (step ", lr.kept_step, ")").c_str() : "");
  }
  if (o.stop_after_layers >= 0 && st.layers_done >= std::min<int64_t>(L, o.stop_after_layers) && st.layers_done < L) {
    rep.notes.push_back(str_cat("stopped after layer ", st.layers_done, " (--stop-after): resume with --resume"));
    rep.stopped = true;
  }
  for (const json& jr : st.reports) {
    PtqrLayerReport lr;
    lr.layer = jr.at("layer").get<int64_t>();
    lr.loss_rtn = jr.at("loss_rtn").get<double>();
    lr.loss_final = jr.at("loss_final").get<double>();
    lr.seconds = jr.at("seconds").get<double>();
    lr.val_rtn = jr.value("val_rtn", 0.0), lr.val_final = jr.value("val_final", 0.0);
    lr.kept_step = jr.value("kept_step", int64_t{-1});
    lr.smooth_alphas = report_alphas(jr);
    if (jr.contains("smooth_scores"))
      for (const json& c : jr.at("smooth_scores")) lr.smooth_scores.emplace_back(alphas_of(c.at(0)), c.at(1).get<double>());
    for (const auto& [m, e] : jr.at("rel_err").items()) lr.rel_err.emplace_back(m, e.get<double>());
    rep.layers.push_back(lr);
  }
  if (L < cfg.n_layers)
    rep.notes.push_back(str_cat("layers ", L, "..", cfg.n_layers - 1, " not retrained (--max-layers): RTN"));

  if (!rep.stopped && o.e2e_steps > 0) {  // the end-to-end phase: the scales of the block-wise codes
    TensorOverrides vectors_over = smoothed;
    for (const auto& [n, v] : st.vectors) vectors_over[n] = v;
    const OverlaySource e2e_src(*src, vectors_over);
    PtqrE2eOptions eo;
    eo.steps = o.e2e_steps;
    eo.lr = o.e2e_lr;
    eo.window = o.window;
    eo.kv = o.kv;
    eo.holdout = o.holdout;
    eo.val_every = o.val_every;
    eo.seed = o.seed;
    eo.stop_after = o.e2e_stop_after;
    eo.progress = o.progress;
    E2eCheckpoint ck;
    const bool resumed = o.resume && load_e2e(o, ck);
    const PtqrE2eReport er = run_ptqr_e2e(ctx, cfg, rope, *src, e2e_src, windows, st.x_t, st.codes, eo,
                                          resumed ? &ck : nullptr, [&](const E2eCheckpoint& c) { save_e2e(o, c); });
    rep.e2e_steps = o.e2e_steps;
    rep.e2e_resumed_from = er.resumed_from;
    rep.e2e_kl_before = er.kl_before, rep.e2e_kl_after = er.kl_after;
    rep.e2e_agree_before = er.agree_before, rep.e2e_agree_after = er.agree_after;
    rep.e2e_seconds = er.seconds, rep.e2e_tokens_per_s = er.tokens_per_s;
    if (er.stopped) {
      rep.notes.push_back(str_cat("stopped after end-to-end step ", er.step_kl.size(), " (--e2e-stop-after): resume with --resume"));
      rep.stopped = true;
    }
    rep.e2e_max_scale_change = er.max_scale_change;
    rep.e2e_kept_step = er.kept_step, rep.e2e_kept_kl = er.kept_kl;
  }
  if (o.keep_outputs) rep.codes = st.codes, rep.stream = st.x_s;
  if (rep.stopped) {
    rep.total_seconds = now_s() - t_start;
    rep.peak_rss_mb = peak_rss_mb();
    return rep;
  }
  // ---- export: the sigma = 0 codes through quantize's writer ----
  QuantizeOptions qo;
  qo.in = o.in;
  qo.out = o.out;
  qo.scheme = o.scheme;
  qo.group = o.group;
  qo.n_threads = o.n_threads;
  qo.progress = false;
  qo.fixed = std::move(st.codes);
  qo.overrides = std::move(smoothed);  // the smoothed norms (and the smoothed weights of layers not retrained)
  for (auto& [n, v] : st.vectors) qo.overrides[n] = std::move(v);  // trained norms and biases win
  const QuantizeReport qr = quantize_model(qo);
  rep.n_copied = qr.n_copied;
  rep.replaced = qr.replaced;
  rep.out_bytes = qr.out_bytes;
  fs::remove_all(state_dir(o));
  rep.total_seconds = now_s() - t_start;
  rep.train_tokens_per_s = train_seconds > 0 ? train_tokens / train_seconds : 0;
  rep.peak_rss_mb = peak_rss_mb();
  return rep;
}

}  // namespace blockspec
