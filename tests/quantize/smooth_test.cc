// SmoothQuant (quantize/smooth.h) and quantize's tensor overrides (QuantizeOptions::overrides,
// model/weight_overlay.h): the scales follow llm-compressor's rule; smoothing leaves an f32 model's logits
// unchanged; quantizing with overrides writes exactly what quantizing the edited checkpoint writes; smoothing
// lowers the W8A8 (per-token int8 activations) error of a model with an outlier channel; bad uses fail in one line.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <unistd.h>

#include "base/error.h"
#include "base/thread_pool.h"
#include "formats/safetensors.h"
#include "kernels/kernel_table.h"
#include "model/transformer.h"
#include "model/weight_overlay.h"
#include "quantize/quantize.h"
#include "quantize/smooth.h"
#include "runtime/fidelity_run.h"
#include "smooth_helpers.h"

namespace blockspec {
namespace {

using namespace smooth_test;
const std::string kTiny = kGolden + "qwen3-tiny-f32";

// The message of the Error quantize_model throws ("" when it does not).
std::string error_of(const QuantizeOptions& o) {
  try {
    quantize_model(o);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// llm-compressor's rule (modifiers/smoothquant/base.py): s = r^a / (2 m)^(1 - a); r where m = 0; at least 1e-5.
TEST(Smooth, ScalesFollowLlmCompressor) {
  const std::vector<float> range = {4.f, 0.f, 1.f, 9.f, 2.f}, absmax = {0.5f, 2.f, 0.f, 0.125f, 0.f};
  const std::vector<float> half = smooth_scales(range, absmax, 0.5);
  EXPECT_FLOAT_EQ(half[0], 2.f);     // sqrt(4) / sqrt(2 * 0.5)
  EXPECT_FLOAT_EQ(half[1], 1e-5f);   // no activation range: 0, clamped
  EXPECT_FLOAT_EQ(half[2], 1.f);     // no weight: the activation range itself
  EXPECT_FLOAT_EQ(half[3], 6.f);     // 3 / sqrt(0.25)
  EXPECT_FLOAT_EQ(half[4], 2.f);
  const std::vector<float> one = smooth_scales(range, absmax, 1.0);
  EXPECT_FLOAT_EQ(one[0], 4.f);  // alpha 1: all of the range moves into the weights
  EXPECT_FLOAT_EQ(one[3], 9.f);
  EXPECT_FLOAT_EQ(smooth_scales({16.f}, {4.f}, 0.25)[0], static_cast<float>(std::pow(16.0, 0.25) / std::pow(8.0, 0.75)));
}

// The ranges are the norm outputs' min / max over every token (layer 0: rmsnorm of the embeddings, by hand), and
// smooth_model's tensors are norm / s and W * s with s from those ranges and the mapping's weights.
TEST(Smooth, RangesAndTensorsFollowTheDefinition) {
  auto src = open_weight_source(kTiny);
  const ModelConfig& c = src->config();
  const int64_t H = c.hidden_size;
  Ctx k;
  const std::vector<int32_t> ids = random_ids(96, 5);
  const auto windows = windows_of(ids, 40);
  const std::vector<LayerRanges> r = activation_ranges(*src, k.ctx, windows);
  ASSERT_EQ(static_cast<int64_t>(r.size()), c.n_layers);
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<float> x(n * H), xn(n * H);
  embedding_lookup(src->load("model.embed_tokens.weight"), ids.data(), n, x.data());
  const std::vector<float> norm0 = f32_of(src->load("model.layers.0.input_layernorm.weight"));
  rmsnorm(x.data(), norm0.data(), static_cast<float>(c.rms_norm_eps), n, H, xn.data());
  for (int64_t j = 0; j < H; ++j) {
    float lo = xn[j], hi = xn[j];
    for (int64_t t = 0; t < n; ++t) lo = std::min(lo, xn[t * H + j]), hi = std::max(hi, xn[t * H + j]);
    EXPECT_NEAR(r[0].attn_in.lo[j], lo, 1e-5f * std::fabs(lo) + 1e-6f) << j;
    EXPECT_NEAR(r[0].attn_in.hi[j], hi, 1e-5f * std::fabs(hi) + 1e-6f) << j;
  }

  const TensorOverrides ov = smooth_model(*src, k.ctx, windows, 0.5);
  EXPECT_EQ(static_cast<int64_t>(ov.size()), 7 * c.n_layers);  // 2 norms + q, k, v, gate, up per layer
  for (int64_t li = 0; li < c.n_layers; ++li) {
    const std::string p = "model.layers." + std::to_string(li) + ".";
    for (bool attn : {true, false}) {
      const ChannelRange& cr = attn ? r[li].attn_in : r[li].mlp_in;
      const std::vector<std::string> mods = attn ? std::vector<std::string>{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}
                                                 : std::vector<std::string>{"mlp.gate_proj", "mlp.up_proj"};
      std::vector<float> act(H), wmax(H, 0.f);
      for (int64_t j = 0; j < H; ++j) act[j] = cr.hi[j] - cr.lo[j];
      for (const std::string& m : mods) {
        const std::vector<float> w = f32_of(src->load(p + m + ".weight"));
        for (size_t i = 0; i < w.size(); ++i) wmax[i % H] = std::max(wmax[i % H], std::fabs(w[i]));
      }
      const std::vector<float> s = smooth_scales(act, wmax, 0.5);
      for (const std::string& m : mods) {
        const std::vector<float> w = f32_of(src->load(p + m + ".weight"));
        const std::vector<float>& got = ov.at(p + m + ".weight");
        for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(got[i], w[i] * s[i % H]) << p + m << " " << i;
      }
      const std::string nn = p + (attn ? "input_layernorm" : "post_attention_layernorm") + ".weight";
      const std::vector<float> nw = f32_of(src->load(nn)), &got = ov.at(nn);
      for (int64_t j = 0; j < H; ++j) ASSERT_EQ(got[j], nw[j] / s[j]) << nn << " " << j;
    }
  }
}

// The linear-to-linear mappings (SmoothMappings::kAll): up_proj -> down_proj per intermediate channel, and
// v_proj -> o_proj with one s per v row shared by the query heads of its group (Qwen2: 2 heads per kv head).
TEST(Smooth, LinearMappingsFollowTheDefinition) {
  auto src = open_weight_source(kGolden + "qwen2-tiny-f32");
  const ModelConfig& c = src->config();
  const int64_t H = c.hidden_size, I = c.intermediate_size, hd = c.head_dim, group = c.n_heads / c.n_kv_heads;
  Ctx k;
  const auto windows = windows_of(random_ids(96, 5), 48);
  const std::vector<LayerRanges> r = activation_ranges(*src, k.ctx, windows);
  const TensorOverrides norms = smooth_model(*src, k.ctx, windows, 0.5);
  const TensorOverrides all = smooth_model(*src, k.ctx, windows, 0.5, SmoothMappings::kAll);
  for (int64_t li = 0; li < c.n_layers; ++li) {
    const std::string p = "model.layers." + std::to_string(li) + ".";
    {  // up -> down
      const std::vector<float> wd = f32_of(src->load(p + "mlp.down_proj.weight"));
      std::vector<float> act(I), wmax(I, 0.f);
      for (int64_t j = 0; j < I; ++j) act[j] = r[li].down_in.hi[j] - r[li].down_in.lo[j];
      for (size_t i = 0; i < wd.size(); ++i) wmax[i % I] = std::max(wmax[i % I], std::fabs(wd[i]));
      const std::vector<float> s = smooth_scales(act, wmax, 0.5);
      const std::vector<float>&down = all.at(p + "mlp.down_proj.weight"), &up = all.at(p + "mlp.up_proj.weight"),
                 &up0 = norms.at(p + "mlp.up_proj.weight");
      for (size_t i = 0; i < wd.size(); ++i) ASSERT_EQ(down[i], wd[i] * s[i % I]) << p << i;
      for (size_t i = 0; i < up.size(); ++i) ASSERT_EQ(up[i], up0[i] / s[i / H]) << p << i;  // after the norm mapping
    }
    {  // v -> o
      const int64_t nkv = c.n_kv_heads, wo = c.n_heads * hd;
      const std::vector<float> wout = f32_of(src->load(p + "self_attn.o_proj.weight"));
      std::vector<float> act(nkv * hd, 0.f), wmax(nkv * hd, 0.f);
      auto row_of = [&](int64_t ch) { return (ch / hd) / group * hd + ch % hd; };
      for (int64_t ch = 0; ch < wo; ++ch) act[row_of(ch)] = std::max(act[row_of(ch)], r[li].o_in.hi[ch] - r[li].o_in.lo[ch]);
      for (size_t i = 0; i < wout.size(); ++i) wmax[row_of(i % wo)] = std::max(wmax[row_of(i % wo)], std::fabs(wout[i]));
      const std::vector<float> s = smooth_scales(act, wmax, 0.5);
      const std::vector<float>& o = all.at(p + "self_attn.o_proj.weight");
      for (size_t i = 0; i < wout.size(); ++i) ASSERT_EQ(o[i], wout[i] * s[row_of(i % wo)]) << p << i;
      const std::vector<float> vb = f32_of(src->load(p + "self_attn.v_proj.bias"));
      const std::vector<float>& vb1 = all.at(p + "self_attn.v_proj.bias");
      for (int64_t j = 0; j < nkv * hd; ++j) ASSERT_EQ(vb1[j], vb[j] / s[j]) << p << j;
    }
  }
  EXPECT_EQ(parse_smooth_mappings("all"), SmoothMappings::kAll);
  EXPECT_EQ(parse_smooth_mappings("norms"), SmoothMappings::kSmoothQuant);
  EXPECT_THROW(parse_smooth_mappings("awq"), Error);
}

// Per-mapping alphas (ptqr --smooth-search-mappings): each mapping's tensors are the ones a uniform alpha equal to
// its own gives -- the norms and o_proj / down_proj, which one mapping alone rescales -- so no alpha lands on another
// mapping; all four equal is smooth_model_from_ranges bit for bit.
TEST(Smooth, EachMappingTakesItsOwnAlpha) {
  auto src = open_weight_source(kGolden + "qwen2-tiny-f32");
  Ctx k;
  const std::vector<LayerRanges> r = activation_ranges(*src, k.ctx, windows_of(random_ids(96, 7), 48));
  const SmoothAlphas al{0.2, 0.4, 0.6, 0.9};
  const std::pair<const char*, double> owner[] = {{"input_layernorm.weight", al.attn_in},
                                                  {"post_attention_layernorm.weight", al.mlp_in},
                                                  {"self_attn.o_proj.weight", al.o_in},
                                                  {"mlp.down_proj.weight", al.down_in}};
  for (int64_t li = 0; li < src->config().n_layers; ++li) {
    const std::string p = "model.layers." + std::to_string(li) + ".";
    TensorOverrides mixed;
    smooth_layer_from_ranges(*src, li, r[li], al, SmoothMappings::kAll, mixed);
    for (const auto& [t, a] : owner) {
      TensorOverrides uni;
      smooth_layer_from_ranges(*src, li, r[li], SmoothAlphas::all(a), SmoothMappings::kAll, uni);
      EXPECT_EQ(mixed.at(p + t), uni.at(p + t)) << p << t << " alpha " << a;
    }
  }
  const TensorOverrides whole = smooth_model_from_ranges(*src, r, 0.6, SmoothMappings::kAll);
  TensorOverrides layers;
  for (int64_t li = 0; li < src->config().n_layers; ++li)
    smooth_layer_from_ranges(*src, li, r[li], SmoothAlphas::all(0.6), SmoothMappings::kAll, layers);
  EXPECT_EQ(whole, layers);
  EXPECT_EQ(al.describe(), "0.2/0.4/0.6/0.9");
  EXPECT_EQ(SmoothAlphas::all(0.8).describe(), "0.8");
  TensorOverrides bad;
  EXPECT_THROW(smooth_layer_from_ranges(*src, 0, r[0], SmoothAlphas{0.5, 0.5, 0.5, 1.5}, SmoothMappings::kAll, bad),
               Error);
}

// In f32 smoothing is an identity: the smoothed model's logits equal the original's (Qwen3 with q/k norms, Qwen2
// with q/k/v biases, Llama), although the norms and weights moved by large factors.
// With all mappings (v_proj -> o_proj, up_proj -> down_proj too) as well.
TEST(Smooth, IsAnIdentityInF32) {
  for (const char* name : {"qwen3-tiny-f32", "qwen2-tiny-f32", "llama-tiny-f32"})
  for (SmoothMappings maps : {SmoothMappings::kSmoothQuant, SmoothMappings::kAll}) {
    SCOPED_TRACE(std::string(name) + (maps == SmoothMappings::kAll ? " all mappings" : ""));
    const std::string in = kGolden + name, out = tmp_dir(std::string("identity_") + name);
    auto src = open_weight_source(in);
    Ctx k;
    const TensorOverrides ov = smooth_model(*src, k.ctx, windows_of(random_ids(128, 9), 64), 0.5, maps);
    const int64_t per_layer = maps == SmoothMappings::kAll ? 9 + src->has("model.layers.0.self_attn.v_proj.bias") : 7;
    EXPECT_EQ(static_cast<int64_t>(ov.size()), per_layer * src->config().n_layers);  // + o, down (and the v bias)
    float moved = 0;  // the largest factor by which a norm weight changed
    for (const auto& [n, v] : ov)
      if (n.find("layernorm") != std::string::npos) {
        const std::vector<float> w = f32_of(src->load(n));
        for (size_t j = 0; j < v.size(); ++j)
          if (w[j] != 0.f && v[j] != 0.f) moved = std::max(moved, std::max(v[j] / w[j], w[j] / v[j]));
      }
    EXPECT_GT(moved, 2.f);
    write_edited(in, out, ov);
    EXPECT_LE(f32_logit_gap(in, out, random_ids(24, 11)), 1e-4f);
    fs::remove_all(out);
  }
}

// Quantizing with overrides writes byte for byte what quantizing the checkpoint edited on disk writes: RTN,
// GPTQ (the Hessians run the replaced tensors, embeddings included) with FP8 KV scales, a replaced linear kept
// dense (--ignore), on f32 and bf16 inputs (bf16 edits exactly representable); the report lists them.
TEST(Overrides, EqualQuantizingTheEditedCheckpoint) {
  struct Run {
    std::string model;
    QScheme scheme;
    bool gptq;
  };
  for (const Run& run : {Run{"qwen3-tiny-f32", QScheme::kW4A16, false}, Run{"qwen3-tiny-f32", QScheme::kW8A8, true},
                         Run{"qwen2-tiny-bf16", QScheme::kW4A16, true}}) {
    SCOPED_TRACE(run.model + " " + qscheme_name(run.scheme) + (run.gptq ? " gptq" : " rtn"));
    const std::string in = kGolden + run.model;
    auto src = open_weight_source(in);
    const bool bf16 = src->storage_type("model.layers.0.self_attn.q_proj.weight") == "BF16";
    auto round = [&](float v) { return bf16 ? bf16_to_f32(f32_to_bf16(v)) : v; };
    TensorOverrides ov;
    std::mt19937 rng(21);
    std::normal_distribution<float> nd;
    for (const char* n : {"model.layers.1.self_attn.q_proj.weight", "model.layers.0.input_layernorm.weight",
                          "model.embed_tokens.weight", "model.layers.1.mlp.down_proj.weight"}) {
      std::vector<float> v = f32_of(src->load(n));
      for (float& x : v) x = round(x * (1.f + 0.2f * nd(rng)));
      ov[n] = std::move(v);
    }
    const std::string edited = tmp_dir("edited_" + run.model);
    write_edited(in, edited, ov);
    std::string bytes[2], cfg[2];
    for (int e = 0; e < 2; ++e) {
      QuantizeOptions o;
      o.in = e ? edited : in;
      o.out = tmp_dir(std::string("ov_out") + std::to_string(e));
      o.scheme = run.scheme;
      o.gptq = run.gptq;
      o.calib_ids = run.gptq ? random_ids(192, 4) : std::vector<int32_t>{};
      o.calib_window = 64;
      o.kv_fp8 = run.gptq;
      o.ignore = {"model.layers.1.mlp.down_proj"};
      o.progress = false;
      o.n_threads = 1;
      if (!e) o.overrides = ov;
      const QuantizeReport r = quantize_model(o);
      if (!e) {
        EXPECT_EQ(r.replaced, (std::vector<std::string>{"model.embed_tokens.weight", "model.layers.0.input_layernorm.weight",
                                                        "model.layers.1.mlp.down_proj.weight",
                                                        "model.layers.1.self_attn.q_proj.weight"}));
      } else {
        EXPECT_TRUE(r.replaced.empty());
      }
      bytes[e] = file_bytes(o.out + "/model.safetensors");
      cfg[e] = file_bytes(o.out + "/config.json");
      fs::remove_all(o.out);
    }
    EXPECT_FALSE(bytes[0].empty());
    EXPECT_TRUE(bytes[0] == bytes[1]) << "model.safetensors differs";
    EXPECT_EQ(cfg[0], cfg[1]);
    fs::remove_all(edited);
  }
}

// SmoothQuant then W8A8 RTN (per-token int8 activations) on a model with one outlier channel in every norm (x50):
// the KL divergence from that model, and the mean layer error on the calibration inputs, drop against plain RTN.
TEST(Smooth, LowersW8A8ErrorWithAnOutlierChannel) {
  const std::string outlier = tmp_dir("outlier");
  {
    auto src = open_weight_source(kTiny);
    TensorOverrides ov;
    for (int64_t li = 0; li < src->config().n_layers; ++li)
      for (const char* norm : {"input_layernorm", "post_attention_layernorm"}) {
        const std::string n = "model.layers." + std::to_string(li) + "." + norm + ".weight";
        std::vector<float> v = f32_of(src->load(n));
        v[5] *= 50.f, v[40] *= 20.f;
        ov[n] = std::move(v);
      }
    write_edited(kTiny, outlier, ov);
  }
  const std::vector<int32_t> calib = random_ids(256, 13), held = random_ids(256, 17);
  ModelOptions mo;
  mo.n_threads = 1;
  auto ref = Transformer::load(outlier, [&] { ModelOptions f = mo; f.weights = WeightFormat::kF32; return f; }());
  double kld[2], err[2];
  for (int sm = 0; sm < 2; ++sm) {
    QuantizeOptions o;
    o.in = outlier;
    o.out = tmp_dir(sm ? "w8a8_smooth" : "w8a8_plain");
    o.scheme = QScheme::kW8A8;
    o.calib_ids = calib;
    o.calib_window = 128;
    o.smooth = sm ? 0.5 : 0.0;
    o.progress = false;
    o.n_threads = 1;
    const QuantizeReport r = quantize_model(o);
    EXPECT_EQ(r.replaced.size(), sm ? 21u : 0u);  // 3 layers x (2 norms + 5 linears)
    err[sm] = 0;
    for (const LayerReport& l : r.layers) err[sm] += l.rel_err / static_cast<double>(r.layers.size());
    auto cand = Transformer::load(o.out, mo);
    const auto st = score_fidelity(*ref, {{cand.get(), KvDType::kF32}}, held, fidelity_windows(256, 128, 256))[0];
    kld[sm] = st.kld_mean();
    fs::remove_all(o.out);
  }
  std::printf("W8A8 RTN on the outlier model: KLD plain %.6g, smoothed %.6g; mean layer error plain %.5f, smoothed %.5f\n",
              kld[0], kld[1], err[0], err[1]);
  EXPECT_LT(kld[1], 0.5 * kld[0]);
  fs::remove_all(outlier);
}

// Refusals: one line naming --smooth (or the override) and the input, before anything is written.
TEST(Smooth, BadUsesFailInOneLine) {
  auto expect_error = [](QuantizeOptions o, const std::vector<std::string>& parts) {
    o.out = tmp_dir("refused");
    o.progress = false;
    o.n_threads = 1;
    const std::string e = error_of(o);
    EXPECT_FALSE(e.empty()) << o.in;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    for (const std::string& p : parts) EXPECT_NE(e.find(p), std::string::npos) << "\"" << p << "\" not in: " << e;
    EXPECT_FALSE(fs::exists(o.out)) << e;
  };
  QuantizeOptions o;
  o.in = kTiny;
  o.scheme = QScheme::kW8A8;
  o.calib_ids = random_ids(64, 1);
  for (double a : {1.5, -0.5, std::numeric_limits<double>::quiet_NaN()}) {
    o.smooth = a;
    expect_error(o, {"--smooth", "(0, 1]"});
  }
  o.smooth = 0.5;
  o.calib_ids.clear();
  expect_error(o, {"--smooth", kTiny, "--calib"});
  o.calib_ids = random_ids(64, 1);
  QuantizeOptions h = o;
  h.in = kSrc + "/tests/fixtures/hybrid/qwen35-text-a";
  expect_error(h, {"--smooth", h.in, "hybrid"});
  QuantizeOptions d = o;
  d.in = kSrc + "/tests/fixtures/dflash/dflash";
  d.target = kSrc + "/tests/fixtures/dflash/target";
  expect_error(d, {"--smooth", d.in, "drafter"});
  QuantizeOptions bad = o;
  bad.smooth = 0;
  bad.overrides["model.layers.9.self_attn.q_proj.weight"] = {1.f};
  expect_error(bad, {"model.layers.9.self_attn.q_proj.weight", kTiny});
  bad.overrides.clear();
  bad.overrides["model.layers.0.input_layernorm.weight"] = std::vector<float>(3, 1.f);
  expect_error(bad, {"model.layers.0.input_layernorm.weight", "3 values"});
  // The library entry points refuse too.
  auto src = open_weight_source(kTiny);
  Ctx k;
  EXPECT_THROW(smooth_model(*src, k.ctx, {o.calib_ids}, 0.0), Error);
  auto hy = open_weight_source(h.in);
  EXPECT_THROW(smooth_model(*hy, k.ctx, {o.calib_ids}, 0.5), Error);
}

}  // namespace
}  // namespace blockspec
