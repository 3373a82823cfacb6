// SmoothAttention (quantize/smooth_attention.h): the key statistics follow the definition (RoPE pairs), alpha 1
// flattens every key channel of the smoothed model to 1, the f32 model's logits do not move (Qwen3 through its
// q/k norms, Qwen2 through q/k rows and biases, Llama), an int8 KV cache loses much less on a model with key
// outliers, quantize and ptqr take it, and bad uses fail in one line.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "base/error.h"
#include "formats/hf_config.h"
#include "kernels/kv_kernels.h"
#include "model/transformer.h"
#include "quantize/quantize.h"
#include "quantize/smooth_attention.h"
#include "runtime/fidelity_run.h"
#include "smooth_helpers.h"

namespace blockspec {
namespace {

using namespace smooth_test;

// Layer 0's keys by hand (rmsnorm, k_proj + bias, RoPE at positions 0.., one window) against the statistics.
TEST(SmoothAttention, KeyStatisticsAreRopePairNorms) {
  const std::string in = kGolden + "qwen2-tiny-f32";
  auto src = open_weight_source(in);
  const ModelConfig& c = src->config();
  const int64_t H = c.hidden_size, hd = c.head_dim, wk = c.n_kv_heads * hd, half = hd / 2;
  Ctx k;
  const std::vector<int32_t> ids = random_ids(40, 3);
  const auto m = key_channel_absmax(*src, k.ctx, {ids});
  ASSERT_EQ(static_cast<int64_t>(m.size()), c.n_layers);
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<float> x(n * H), xn(n * H), keys(n * wk);
  embedding_lookup(src->load("model.embed_tokens.weight"), ids.data(), n, x.data());
  rmsnorm(x.data(), f32_of(src->load("model.layers.0.input_layernorm.weight")).data(), static_cast<float>(c.rms_norm_eps),
          n, H, xn.data());
  const std::vector<float> w = f32_of(src->load("model.layers.0.self_attn.k_proj.weight")),
                           b = f32_of(src->load("model.layers.0.self_attn.k_proj.bias"));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < wk; ++r) {
      double acc = b[r];
      for (int64_t j = 0; j < H; ++j) acc += static_cast<double>(w[r * H + j]) * xn[t * H + j];
      keys[t * wk + r] = static_cast<float>(acc);
    }
  // Pre-RoPE: RoPE keeps a pair's norm up to the cos/sin scale (this fixture's YaRN attention scaling).
  const float scale = compute_rope(c).attention_scaling;
  for (int64_t h = 0; h < c.n_kv_heads; ++h)
    for (int64_t i = 0; i < hd; ++i) {
      const int64_t p = i < half ? i + half : i - half;
      float want = 0;
      for (int64_t t = 0; t < n; ++t) {
        const float a = keys[t * wk + h * hd + i], bb = keys[t * wk + h * hd + p];
        want = std::max(want, scale * std::sqrt(a * a + bb * bb));
      }
      EXPECT_NEAR(m[0][h * hd + i], want, 1e-4f * want) << "head " << h << " channel " << i;
      EXPECT_EQ(m[0][h * hd + i], m[0][h * hd + p]);  // a pair shares its statistic
    }
}

// alpha 1 divides each channel by its own max: the smoothed model's statistics are all 1 (Qwen2 / Llama per
// head and channel; Qwen3 per channel, the max over heads, as its shared norms allow), and the logits stay.
TEST(SmoothAttention, AlphaOneFlattensTheKeysAndKeepsTheLogits) {
  for (const char* name : {"qwen2-tiny-f32", "qwen3-tiny-f32", "llama-tiny-f32"}) {
    SCOPED_TRACE(name);
    const std::string in = kGolden + name;
    auto src = open_weight_source(in);
    const ModelConfig& c = src->config();
    const int64_t hd = c.head_dim;
    Ctx k;
    const auto windows = windows_of(random_ids(128, 7), 64);
    const auto before = key_channel_absmax(*src, k.ctx, windows);
    const TensorOverrides ov = smooth_attention(*src, k.ctx, windows, 1.0);
    const bool qwen3 = c.arch == Arch::kQwen3;
    const bool bias = src->has("model.layers.0.self_attn.k_proj.bias");
    EXPECT_EQ(static_cast<int64_t>(ov.size()), c.n_layers * (qwen3 ? 2 : bias ? 4 : 2));
    const OverlaySource smoothed(*src, ov);
    const auto after = key_channel_absmax(smoothed, k.ctx, windows);
    float spread = 0;  // the largest ratio between two channels' maxima before smoothing
    for (int64_t li = 0; li < c.n_layers; ++li)
      for (int64_t i = 0; i < hd; ++i) {
        float mb = 0, ma = 0, lo = std::numeric_limits<float>::infinity();
        for (int64_t h = 0; h < c.n_kv_heads; ++h) {
          const float a = after[li][h * hd + i];
          if (!qwen3) EXPECT_NEAR(a, 1.f, 1e-4f) << "layer " << li << " head " << h << " channel " << i;
          ma = std::max(ma, a), mb = std::max(mb, before[li][h * hd + i]), lo = std::min(lo, before[li][h * hd + i]);
        }
        EXPECT_NEAR(ma, 1.f, 1e-4f) << "layer " << li << " channel " << i;
        spread = std::max(spread, mb / lo);
      }
    EXPECT_GT(spread, 1.2f);  // the test has something to flatten
    const std::string out = tmp_dir(std::string("sa_identity_") + name);
    write_edited(in, out, ov);
    EXPECT_LE(f32_logit_gap(in, out, random_ids(24, 11)), 1e-4f);
    fs::remove_all(out);
  }
}

// A Qwen2 whose k_proj bias puts one RoPE pair of every head 40x above the rest (Qwen2.5's pattern): through an
// int8 KV cache (f32 weights) the KL divergence from the f32-KV model drops by more than 4x with SmoothAttention
// 0.5 applied by quantize's path (quantize W8A8 with and without it, both through the same int8 cache).
TEST(SmoothAttention, LowersTheInt8KvErrorOfKeyOutliers) {
  const std::string in = kGolden + "qwen2-tiny-f32", outlier = tmp_dir("key_outlier");
  auto src = open_weight_source(in);
  const ModelConfig& c = src->config();
  const int64_t hd = c.head_dim;
  {
    TensorOverrides ov;
    for (int64_t li = 0; li < c.n_layers; ++li) {
      const std::string n = "model.layers." + std::to_string(li) + ".self_attn.k_proj.bias";
      std::vector<float> v = f32_of(src->load(n));
      for (int64_t h = 0; h < c.n_kv_heads; ++h) v[h * hd + 3] = 40.f, v[h * hd + 3 + hd / 2] = -30.f;
      ov[n] = std::move(v);
    }
    write_edited(in, outlier, ov);
  }
  ModelOptions f32;
  f32.n_threads = 1;
  f32.weights = WeightFormat::kF32;
  auto ref = Transformer::load(outlier, f32);
  const std::vector<int32_t> calib = random_ids(256, 13), held = random_ids(256, 17);
  double kld[2];
  for (int sa = 0; sa < 2; ++sa) {
    QuantizeOptions o;
    o.in = outlier;
    o.out = tmp_dir(sa ? "sa_on" : "sa_off");
    o.scheme = QScheme::kW8A8;
    o.calib_ids = calib;
    o.calib_window = 128;
    o.smooth_attention = sa ? 0.5 : 0.0;
    o.progress = false;
    o.n_threads = 1;
    const QuantizeReport r = quantize_model(o);
    EXPECT_EQ(r.replaced.size(), sa ? 4u * c.n_layers : 0u);  // q/k_proj weight and bias per layer
    auto cand = Transformer::load(o.out, f32);  // f32 weights: the cache is the only rounding
    kld[sa] = score_fidelity(*ref, {{cand.get(), KvDType::kInt8PerTokenHead}}, held, fidelity_windows(256, 128, 256))[0]
                  .kld_mean();
    fs::remove_all(o.out);
  }
  std::printf("int8 KV on the key-outlier model: KLD %.6g plain, %.6g with SmoothAttention 0.5\n", kld[0], kld[1]);
  EXPECT_LT(kld[1], 0.25 * kld[0]);
  fs::remove_all(outlier);
}

// Refusals: one line naming --smooth-attention and the input, before anything is written.
TEST(SmoothAttention, BadUsesFailInOneLine) {
  auto expect_error = [](QuantizeOptions o, const std::vector<std::string>& parts) {
    o.out = tmp_dir("sa_refused");
    o.progress = false;
    o.n_threads = 1;
    std::string e;
    try {
      quantize_model(o);
    } catch (const std::exception& x) {
      e = x.what();
    }
    EXPECT_FALSE(e.empty()) << o.in;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    for (const std::string& p : parts) EXPECT_NE(e.find(p), std::string::npos) << "\"" << p << "\" not in: " << e;
    EXPECT_FALSE(fs::exists(o.out)) << e;
  };
  QuantizeOptions o;
  o.in = kGolden + "qwen2-tiny-f32";
  o.scheme = QScheme::kW8A8;
  o.calib_ids = random_ids(64, 1);
  for (double a : {1.5, -0.5, std::numeric_limits<double>::quiet_NaN()}) {
    o.smooth_attention = a;
    expect_error(o, {"--smooth-attention", "(0, 1]"});
  }
  o.smooth_attention = 0.5;
  QuantizeOptions nc = o;
  nc.calib_ids.clear();
  expect_error(nc, {"--smooth-attention", o.in, "--calib"});
  QuantizeOptions h = o;
  h.in = kSrc + "/tests/fixtures/hybrid/qwen35-text-a";
  expect_error(h, {"--smooth-attention", h.in, "dense"});
  QuantizeOptions d = o;
  d.in = kSrc + "/tests/fixtures/dflash/dflash";
  d.target = kSrc + "/tests/fixtures/dflash/target";
  expect_error(d, {"--smooth-attention", d.in, "dense"});
  auto src = open_weight_source(o.in);
  auto hy = open_weight_source(h.in);
  Ctx k;
  EXPECT_THROW(smooth_attention(*src, k.ctx, {o.calib_ids}, 0.0), Error);
  EXPECT_THROW(smooth_attention(*hy, k.ctx, {o.calib_ids}, 0.5), Error);
}

}  // namespace
}  // namespace blockspec
