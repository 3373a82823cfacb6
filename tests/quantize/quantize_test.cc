// blockspec quantize: every scheme and format written from the tiny fixtures loads back through the quantized
// loader (model/quant_checkpoint.h) to exactly the values our quantizer produced; every tensor not quantized is
// byte-identical; drafters pass check_drafter; GPTQ beats RTN on its calibration inputs.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "base/thread_pool.h"
#include "formats/quant_config.h"
#include "formats/safetensors.h"
#include "kernels/quant.h"
#include "model/dflash_check.h"
#include "model/transformer.h"
#include "model/weight_source.h"
#include "kernels/kernel_table.h"
#include "kernels/quant_layout.h"
#include "kernels/ops.h"
#include "quantize/calibration.h"
#include "quantize/gptq.h"
#include "quantize/quantize.h"
#include "runtime/generate.h"
#include "runtime/speculative.h"
#include "../spec_setup.h"

namespace blockspec {
namespace {

namespace fs = std::filesystem;
const std::string kSrc = BS_SOURCE_DIR;
const std::string kTiny = kSrc + "/tests/fixtures/golden/qwen3-tiny-f32";

std::string tmp_dir(const std::string& name) {
  const std::string d = (fs::temp_directory_path() / ("bs_quantize_test_" + std::to_string(getpid()) + "_" + name)).string();
  fs::remove_all(d);
  return d;
}

std::vector<float> f32_of(const Tensor& t) {
  std::vector<float> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i)
    v[i] = t.dtype() == DType::kF32 ? t.ptr<float>()[i]
           : t.dtype() == DType::kBF16 ? bf16_to_f32(t.ptr<uint16_t>()[i]) : f16_to_f32(t.ptr<uint16_t>()[i]);
  return v;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// The spec quantize_model uses for a module of dtype wdt (the same rules, restated).
QuantSpec spec_of(const QuantizeOptions& o, DType wdt, bool fc = false) {
  QuantSpec s;
  QScheme sch = o.scheme;
  if (fc && o.fc_bits == 4) sch = QScheme::kW4A16;
  s.scheme = sch;
  s.weight_dtype = wdt;
  s.scale_dtype = o.format == QFormat::kGptq ? DType::kF16 : wdt;
  s.bits = (sch == QScheme::kW4A16 || sch == QScheme::kNVFP4 || sch == QScheme::kMXFP4) ? 4 : 8;
  s.is_float = sch == QScheme::kFP8 || sch == QScheme::kNVFP4 || sch == QScheme::kMXFP4;
  s.sym = !o.asym;
  s.group = sch == QScheme::kFP8 ? (o.fp8_strategy == "tensor" ? 0 : -1) : sch == QScheme::kNVFP4 ? 16
            : sch == QScheme::kMXFP4 ? 32 : o.group;
  return s;
}

struct Case {
  QScheme scheme;
  QFormat format;
  std::string fp8 = "channel";
  int64_t group = 128;
  bool asym = false;  // --asym (w4a16 / w8a16): compressed-tensors weight_zero_point, GPTQ gptq_v2 zeros
};

// Round trip: out loads through open_weight_source (quantized loader), every quantized module's exact
// dequantization equals ours bit for bit, the rest is byte-identical.
void check_round_trip(const std::string& in, const std::string& out, const QuantizeOptions& o, bool drafter) {
  SafetensorsCheckpoint a(in), b(out);
  int n_quant = 0;
  std::unique_ptr<WeightSource> src;
  if (!drafter) src = open_weight_source(out);
  for (const std::string& n : a.names()) {
    const bool stored_quantized = b.has(n) && (b.entry(n).dtype == DType::kI8 || b.entry(n).dtype == DType::kF8_E4M3);
    if (b.has(n) && !stored_quantized) {
      EXPECT_TRUE(same_bytes(a.tensor(n), b.tensor(n))) << n << " changed";
      continue;
    }
    ASSERT_TRUE(n.size() > 7 && n.substr(n.size() - 7) == ".weight") << n << " missing from the output";
    if (stored_quantized) EXPECT_EQ(b.entry(n).shape, a.entry(n).shape) << n;
    const std::string m = n.substr(0, n.size() - 7);
    const Tensor w = a.tensor(n);
    const std::vector<float> wf = f32_of(w);
    QuantWeight qw = make_params(spec_of(o, w.dtype(), m == "fc"), wf.data(), w.dim(0), w.dim(1));
    quantize_rtn(qw, wf.data());
    const std::vector<float> mine = dequantize_all(qw);
    ++n_quant;
    if (!src) continue;
    const Tensor got = src->load(n);
    ASSERT_EQ(got.dtype(), DType::kF32) << n;
    ASSERT_EQ(got.numel(), static_cast<int64_t>(mine.size())) << n;
    EXPECT_EQ(std::memcmp(got.data(), mine.data(), mine.size() * 4), 0) << n << ": loaded values differ";
  }
  EXPECT_GT(n_quant, 0);
}

class RoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(RoundTrip, TinyQwen3LoadsBackExactly) {
  const Case c = GetParam();
  QuantizeOptions o;
  o.in = kTiny;
  o.out = tmp_dir(std::string(qscheme_name(c.scheme)) + (c.format == QFormat::kGptq ? "_gptq" : "_ct") + c.fp8 +
                  std::to_string(c.group) + (c.asym ? "_asym" : ""));
  o.scheme = c.scheme;
  o.format = c.format;
  o.fp8_strategy = c.fp8;
  o.group = c.group;
  o.asym = c.asym;
  o.progress = false;
  o.n_threads = 1;
  const QuantizeReport r = quantize_model(o);
  EXPECT_EQ(r.layers.size(), 21u);
  if (c.asym && c.format == QFormat::kCompressedTensors) {  // the zero points are stored as compressed-tensors does
    SafetensorsCheckpoint b(o.out);
    const std::string m = "model.layers.1.mlp.down_proj";
    const int64_t N = b.entry(m + ".weight_scale").shape[0], ng = b.entry(m + ".weight_scale").shape[1];
    const int bits = c.scheme == QScheme::kW4A16 ? 4 : 8;
    EXPECT_EQ(b.entry(m + ".weight_zero_point").dtype, DType::kI32);
    EXPECT_EQ(b.entry(m + ".weight_zero_point").shape, (Shape{(N * bits + 31) / 32, ng}));
  }
  check_round_trip(kTiny, o.out, o, false);
  // The engine runs it: the dequantized QuantTensor of a loaded layer equals our values too.
  ModelOptions mo;
  mo.n_threads = 1;
  auto t = Transformer::load(o.out, mo);
  SafetensorsCheckpoint a(kTiny);
  const std::vector<float> wf = f32_of(a.tensor("model.layers.1.mlp.down_proj.weight"));
  const Tensor w = a.tensor("model.layers.1.mlp.down_proj.weight");
  QuantWeight qw = make_params(spec_of(o, w.dtype()), wf.data(), w.dim(0), w.dim(1));
  quantize_rtn(qw, wf.data());
  const std::vector<float> mine = dequantize_all(qw);
  const Tensor got = dequantize_weight(t->weights().layers[1].ffn_down);
  if (c.asym) {
    EXPECT_EQ(t->weights().layers[1].ffn_down.format, WeightFormat::kF32) << "asym loads as exact f32";
  }
  ASSERT_EQ(got.numel(), static_cast<int64_t>(mine.size()));
  EXPECT_EQ(std::memcmp(got.ptr<float>(), mine.data(), mine.size() * 4), 0);
  fs::remove_all(o.out);
}

INSTANTIATE_TEST_SUITE_P(
    Schemes, RoundTrip,
    ::testing::Values(Case{QScheme::kW4A16, QFormat::kCompressedTensors}, Case{QScheme::kW8A16, QFormat::kCompressedTensors},
                      Case{QScheme::kW8A8, QFormat::kCompressedTensors}, Case{QScheme::kFP8, QFormat::kCompressedTensors},
                      Case{QScheme::kFP8, QFormat::kCompressedTensors, "tensor"},
                      Case{QScheme::kNVFP4, QFormat::kCompressedTensors}, Case{QScheme::kMXFP4, QFormat::kCompressedTensors},
                      Case{QScheme::kW4A16, QFormat::kGptq}, Case{QScheme::kW8A16, QFormat::kGptq},
                      Case{QScheme::kW4A16, QFormat::kCompressedTensors, "channel", -1},
                      Case{QScheme::kW8A16, QFormat::kGptq, "channel", -1},
                      // Asymmetric (--asym): compressed-tensors group 128 / per channel, int4 and int8, and GPTQ v2.
                      Case{QScheme::kW4A16, QFormat::kCompressedTensors, "channel", 128, true},
                      Case{QScheme::kW8A16, QFormat::kCompressedTensors, "channel", -1, true},
                      Case{QScheme::kW8A16, QFormat::kCompressedTensors, "channel", 128, true},
                      Case{QScheme::kW4A16, QFormat::kGptq, "channel", 128, true}));

// A hybrid Gated-DeltaNet target (tests/fixtures/hybrid/qwen35-text-a, and the multimodal wrapper qwen35-vl)
// quantized by blockspec loads back bit for bit in every format (integer, FP8, NVFP4, MXFP4), with Qwen3.5's module exceptions (hybrid.md §2.6, docs/quantize.md): the
// GDN in_proj_qkv / in_proj_z / out_proj and every attention and MLP projection quantized; in_proj_a / in_proj_b,
// conv1d, A_log, dt_bias and the norms dense; then speculation on the quantized model stays lossless.
TEST(Quantize, HybridTargetRoundTripsAndStaysLossless) {
  struct Run {
    std::string dir;
    Case c;
    size_t n_modules;  // text-a: 4 GDN layers x 6 + 1 attention layer x 7; vl (the multimodal wrapper): 3 x 6 + 7
  };
  const std::string text_a = kSrc + "/tests/fixtures/hybrid/qwen35-text-a", vl = kSrc + "/tests/fixtures/hybrid/qwen35-vl";
  for (const Run& run : {Run{text_a, {QScheme::kW4A16, QFormat::kCompressedTensors}, 31},
                         Run{text_a, {QScheme::kW8A8, QFormat::kCompressedTensors}, 31},
                         Run{text_a, {QScheme::kW8A16, QFormat::kGptq}, 31}, Run{text_a, {QScheme::kW4A16, QFormat::kGptq}, 31},
                         Run{text_a, {QScheme::kFP8, QFormat::kCompressedTensors}, 31},
                         Run{text_a, {QScheme::kNVFP4, QFormat::kCompressedTensors}, 31},
                         Run{text_a, {QScheme::kMXFP4, QFormat::kCompressedTensors}, 31},
                         Run{vl, {QScheme::kW8A8, QFormat::kCompressedTensors}, 25}}) {
    const Case& c = run.c;
    const std::string& hybrid = run.dir;
    SCOPED_TRACE(hybrid + " " + qscheme_name(c.scheme) + (c.format == QFormat::kGptq ? " gptq" : " compressed-tensors"));
    QuantizeOptions o;
    o.in = hybrid;
    o.out = tmp_dir(std::string("hybrid_") + (hybrid == vl ? "vl_" : "") + qscheme_name(c.scheme) +
                    (c.format == QFormat::kGptq ? "_gptq" : "_ct"));
    o.scheme = c.scheme, o.format = c.format, o.progress = false, o.n_threads = 1;
    const QuantizeReport r = quantize_model(o);
    // GDN layers x (in_proj_qkv, in_proj_z, out_proj, 3 MLP) + attention layers x (q, k, v, o, 3 MLP).
    EXPECT_EQ(r.layers.size(), run.n_modules);
    for (const auto& l : r.layers) {
      EXPECT_EQ(l.module.find("in_proj_a"), std::string::npos) << l.module;
      EXPECT_EQ(l.module.find("in_proj_b"), std::string::npos) << l.module;
    }
    check_round_trip(hybrid, o.out, o, false);
    SafetensorsCheckpoint b(o.out);
    const std::string pre = hybrid == vl ? "model.language_model.layers.0." : "model.layers.0.";
    EXPECT_EQ(b.entry(pre + "linear_attn.in_proj_a.weight").dtype, DType::kF32);
    EXPECT_EQ(b.entry(pre + "linear_attn.conv1d.weight").dtype, DType::kF32);
    ModelOptions mo;
    mo.n_threads = 1;
    auto t = Transformer::load(o.out, mo);
    ASSERT_TRUE(t->config().is_hybrid());
    std::vector<int32_t> prompt;
    for (int i = 0; i < 6; ++i) prompt.insert(prompt.end(), {17, 200, 3, 99});
    GenerateOptions go;
    go.max_new_tokens = 24, go.stop_at_eos = false;
    const std::vector<int32_t> plain = generate(*t, prompt, go).tokens;
    SpecConfig sc = test_spec("ngram", 3);
    auto prop = test_proposer(sc, *t, 256);
    EXPECT_EQ(generate_speculative(*t, *prop, 3, prompt, go).gen.tokens, plain);
    fs::remove_all(o.out);
  }
}

TEST(Quantize, ConfigKeepsEveryFieldAndListsDenseLinears) {
  QuantizeOptions o;
  o.in = kTiny;
  o.out = tmp_dir("cfg");
  o.scheme = QScheme::kW4A16;
  o.ignore = {"re:.*layers\\.0\\.mlp\\.", "*.o_proj"};
  o.progress = false;
  const QuantizeReport r = quantize_model(o);
  EXPECT_EQ(r.layers.size(), 21u - 3u - 3u);
  auto read = [](const std::string& p) {
    std::ifstream f(p);
    return nlohmann::json::parse(f);
  };
  nlohmann::json in = read(kTiny + "/config.json"), out = read(o.out + "/config.json");
  ASSERT_TRUE(out.contains("quantization_config"));
  const nlohmann::json qc = out["quantization_config"];
  out.erase("quantization_config");
  EXPECT_EQ(in, out);
  EXPECT_EQ(qc["quant_method"], "compressed-tensors");
  EXPECT_EQ(qc["format"], "pack-quantized");
  std::vector<std::string> ign = qc["ignore"];
  EXPECT_EQ(ign.size(), 7u);  // 3 MLP of layer 0, 3 o_proj, lm_head (tied)
  EXPECT_NE(std::find(ign.begin(), ign.end(), "lm_head"), ign.end());
  EXPECT_NE(std::find(ign.begin(), ign.end(), "model.layers.2.self_attn.o_proj"), ign.end());
  check_round_trip(kTiny, o.out, o, false);
  EXPECT_TRUE(fs::exists(o.out + "/tokenizer.json"));
  fs::remove_all(o.out);
}

TEST(Quantize, DrafterPassesCheckAndKeepsDenseBytes) {
  for (const char* d : {"dflash", "dflash2"})
    for (QScheme s : {QScheme::kW4A16, QScheme::kW8A8, QScheme::kNVFP4, QScheme::kFP8})
      for (int fc : {0, 16}) {
        QuantizeOptions o;
        o.in = kSrc + "/tests/fixtures/dflash/" + d;
        o.out = tmp_dir(std::string(d) + qscheme_name(s) + std::to_string(fc));
        o.scheme = s;
        o.fc_bits = fc;
        o.progress = false;
        const QuantizeReport r = quantize_model(o);
        SCOPED_TRACE(std::string(d) + " " + qscheme_name(s) + " fc " + std::to_string(fc));
        const auto problems = check_drafter(o.out, nullptr);
        for (const auto& p : problems) ADD_FAILURE() << p.name << ": " << p.message;
        check_round_trip(o.in, o.out, o, true);
        SafetensorsCheckpoint b(o.out);
        const bool fc_dense = b.has("fc.weight") && b.entry("fc.weight").dtype != DType::kI8 &&
                              b.entry("fc.weight").dtype != DType::kF8_E4M3;
        EXPECT_EQ(fc_dense, fc == 16);
        if (std::string(d) == "dflash2") {  // conv kernels, codebooks and the selector projection stay dense
          for (const std::string& n : b.names())
            if (n.find("kernel_projection") != std::string::npos || n.find("hidden_projection") != std::string::npos)
              EXPECT_TRUE(n.size() > 7 && n.substr(n.size() - 7) == ".weight") << n;
        }
        fs::remove_all(o.out);
      }
}

TEST(Quantize, DrafterFcAtAnotherWidth) {
  QuantizeOptions o;
  o.in = kSrc + "/tests/fixtures/dflash/dflash";
  o.out = tmp_dir("fc4");
  o.scheme = QScheme::kW8A8;
  o.fc_bits = 4;
  o.progress = false;
  quantize_model(o);
  EXPECT_TRUE(check_drafter(o.out, nullptr).empty());
  SafetensorsCheckpoint b(o.out);
  EXPECT_EQ(b.entry("fc.weight_packed").dtype, DType::kI32);
  EXPECT_EQ(b.entry("layers.0.mlp.down_proj.weight").dtype, DType::kI8);
  check_round_trip(o.in, o.out, o, true);
  fs::remove_all(o.out);
}

// GPTQ: on its own calibration inputs the layer output error is below RTN's, and the result loads back.
TEST(Quantize, GptqBeatsRtnOnCalibration) {
  std::mt19937 rng(7);
  std::vector<int32_t> ids(384);
  for (int32_t& t : ids) t = static_cast<int32_t>(rng() % 500);
  double err[2] = {0, 0};
  for (int g = 0; g < 2; ++g) {
    QuantizeOptions o;
    o.in = kTiny;
    o.out = tmp_dir(g ? "gptq" : "rtncal");
    o.scheme = QScheme::kW4A16;
    o.gptq = g == 1;
    o.calib_ids = ids;
    o.calib_window = 128;
    o.progress = false;
    const QuantizeReport r = quantize_model(o);
    EXPECT_EQ(r.calib_tokens, 384);
    for (const LayerReport& l : r.layers) {
      EXPECT_TRUE(l.on_calib) << l.module;
      err[g] += l.rel_err;
    }
    auto src = open_weight_source(o.out);  // loads
    EXPECT_TRUE(src->has_native("model.layers.0.mlp.down_proj.weight"));
    fs::remove_all(o.out);
  }
  EXPECT_LT(err[1], err[0] * 0.9) << "gptq " << err[1] << " vs rtn " << err[0];
}

// The solver itself: with H = I (no correlation) GPTQ is RTN; act-order keeps static groups (same scales).
TEST(Gptq, IdentityHessianIsRtn) {
  const int64_t N = 16, K = 256;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<float> w(N * K);
  for (float& v : w) v = nd(rng);
  std::vector<double> H(K * K, 0.0);
  for (int64_t i = 0; i < K; ++i) H[i * K + i] = 1.0 + (i % 7);  // diagonal: no error propagation
  QuantSpec s;
  for (bool ao : {false, true}) {
    QuantWeight a = make_params(s, w.data(), N, K), b = a;
    quantize_rtn(a, w.data());
    ThreadPool pool(1);
    const KernelTable kt = select_kernels("");
    const OpContext ctx{&kt, &pool};
    GptqOptions g;
    g.act_order = ao;
    ASSERT_TRUE(gptq_quantize(b, w.data(), H, g, ctx));
    EXPECT_EQ(a.q, b.q);
    EXPECT_EQ(a.scale, b.scale);
  }
}

}  // namespace
}  // namespace blockspec

namespace blockspec {
namespace {

// The calibration forward is the engine's: layer 1's attention-input Hessian equals the one built from the
// engine's hidden states after layer 0 (Transformer taps), for Qwen3 and for a Qwen2 GGUF (q/k/v biases).
// W8A8 calibration takes its Hessians over the int8-rounded inputs the W8A8 kernels multiply (quantize_acts_token,
// dequantized): layer 0's q_proj H equals X_q^T X_q of its own input norm, and differs from the f32 H.
TEST(Calibration, W8A8HessiansOverInt8RoundedInputs) {
  auto src = open_weight_source(kTiny);
  const ModelConfig& c = src->config();
  std::vector<int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back((i * 37 + 11) % 200);
  const int64_t H = c.hidden_size, n = static_cast<int64_t>(ids.size());
  std::vector<float> x(n * H), xn(n * H);
  embedding_lookup(src->load("model.embed_tokens.weight"), ids.data(), n, x.data());
  rmsnorm(x.data(), f32_of(src->load("model.layers.0.input_layernorm.weight")).data(),
          static_cast<float>(c.rms_norm_eps), n, H, xn.data());
  ThreadPool pool(1);
  const KernelTable kt = select_kernels("");
  const OpContext ctx{&kt, &pool};
  const int64_t Kp = q_padded_k(H), G = q_groups(H);
  std::vector<uint8_t> q(n * Kp);
  std::vector<float> sc(n * G), xq(n * H);
  kt.quantize_acts_token(xn.data(), n, H, q.data(), sc.data());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t k = 0; k < H; ++k) xq[t * H + k] = (static_cast<int>(q[t * Kp + k]) - 128) * sc[t * G + k / kQGroup];
  std::vector<double> want, plain;
  accumulate_hessian(ctx, xq.data(), n, H, want);
  finish_hessian(want, H);
  accumulate_hessian(ctx, xn.data(), n, H, plain);
  finish_hessian(plain, H);
  for (bool int8 : {false, true}) {
    bool seen = false;
    calibrate_layers(*src, ctx, {ids}, [&](int64_t li, const LayerHessians& hs, const LayerHessians&) -> std::map<std::string, std::vector<float>> {
      if (li != 0) return {};
      const std::vector<double>& got = *hs.at("model.layers.0.self_attn.q_proj");
      const std::vector<double>& ref = int8 ? want : plain;
      double err = 0, mag = 0, other = 0;
      for (int64_t i = 0; i < H * H; ++i) {
        err = std::max(err, std::fabs(got[i] - ref[i]));
        mag = std::max(mag, std::fabs(ref[i]));
        other = std::max(other, std::fabs(want[i] - plain[i]));
      }
      EXPECT_LE(err, 1e-5 * mag) << int8;
      EXPECT_GT(other, 1e-4 * mag);  // the rounding is visible in H
      seen = true;
      return {};
    }, [](const std::string&) { return true; }, nullptr, int8);
    EXPECT_TRUE(seen);
  }
}

// Hybrid targets calibrate through the serving Gated DeltaNet and gated attention layers: the Hessian of layer
// 1's in_proj group (a GDN layer, whose input depends on layer 0's recurrent state) and of layer 3's q_proj (the
// attention layer) equal X^T X of the engine's own forward; and GPTQ beats RTN on the calibration data.
TEST(Calibration, HybridMatchesEngineForwardAndGptqBeatsRtn) {
  const std::string path = kSrc + "/tests/fixtures/hybrid/qwen35-serve";  // layers L L L F
  auto src = open_weight_source(path);
  const ModelConfig& c = src->config();
  ModelOptions mo;
  mo.n_threads = 1;
  mo.weights = WeightFormat::kF32;
  auto t = Transformer::load(path, mo);
  t->set_tap_layers({0, 2});
  std::vector<int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back((i * 37 + 11) % 500);
  KvCache cache = t->new_cache(64);
  std::vector<float> logits, taps;
  t->prefill(ids.data(), static_cast<int64_t>(ids.size()), cache, logits, false, &taps);
  const int64_t H = c.hidden_size, n = static_cast<int64_t>(ids.size());
  ThreadPool pool(1);
  const KernelTable kt = select_kernels("");
  const OpContext ctx{&kt, &pool};
  auto want_h = [&](int64_t tap, int64_t layer) {  // X = the (1 + w) input norm of `layer` over the tapped rows
    const std::vector<float> w = f32_of(src->load("model.layers." + std::to_string(layer) + ".input_layernorm.weight"));
    std::vector<float> norm(H), x(n * H), xn(n * H);
    for (int64_t i = 0; i < H; ++i) norm[i] = 1.0f + w[i];
    for (int64_t r = 0; r < n; ++r) std::copy(&taps[(r * 2 + tap) * H], &taps[(r * 2 + tap + 1) * H], &x[r * H]);
    rmsnorm(x.data(), norm.data(), static_cast<float>(c.rms_norm_eps), n, H, xn.data());
    std::vector<double> h;
    accumulate_hessian(ctx, xn.data(), n, H, h);
    finish_hessian(h, H);
    return h;
  };
  const std::vector<double> want1 = want_h(0, 1), want3 = want_h(1, 3);
  int seen = 0;
  calibrate_layers(*src, ctx, {ids}, [&](int64_t li, const LayerHessians& hs, const LayerHessians&) -> std::map<std::string, std::vector<float>> {
    if (li != 1 && li != 3) return {};
    const std::string m = li == 1 ? "model.layers.1.linear_attn.in_proj_qkv" : "model.layers.3.self_attn.q_proj";
    const std::vector<double>& got = *hs.at(m);
    const std::vector<double>& want = li == 1 ? want1 : want3;
    EXPECT_EQ(hs.at(m), hs.at(li == 1 ? "model.layers.1.linear_attn.in_proj_a" : "model.layers.3.self_attn.v_proj"));
    double err = 0, ref = 0;
    for (int64_t i = 0; i < H * H; ++i) err = std::max(err, std::fabs(got[i] - want[i])), ref = std::max(ref, std::fabs(want[i]));
    EXPECT_LE(err, 1e-3 * ref) << m;
    EXPECT_TRUE(hs.count("model.layers." + std::to_string(li) + ".mlp.down_proj"));
    ++seen;
    return {};
  }, [](const std::string&) { return true; });
  EXPECT_EQ(seen, 2);

  std::mt19937 rng(7);
  std::vector<int32_t> calib(384);
  for (int32_t& id : calib) id = static_cast<int32_t>(rng() % 500);
  double err[2] = {0, 0};
  for (int g = 0; g < 2; ++g) {
    QuantizeOptions o;
    o.in = path;
    o.out = tmp_dir(g ? "hybrid_gptq" : "hybrid_rtncal");
    o.scheme = QScheme::kW4A16;
    o.gptq = g == 1;
    o.calib_ids = calib;
    o.calib_window = 128;
    o.progress = false;
    const QuantizeReport r = quantize_model(o);
    for (const LayerReport& l : r.layers) err[g] += l.rel_err;
    auto m = Transformer::load(o.out, mo);  // loads and runs
    EXPECT_TRUE(m->config().is_hybrid());
    fs::remove_all(o.out);
  }
  EXPECT_LT(err[1], err[0] * 0.9) << "gptq " << err[1] << " vs rtn " << err[0];
}

TEST(Calibration, MatchesEngineForward) {
  for (const std::string path : {kTiny, kSrc + "/tests/fixtures/gguf/tiny_qwen2.gguf"}) {
    SCOPED_TRACE(path);
    auto src = open_weight_source(path);
    const ModelConfig& c = src->config();
    ModelOptions mo;
    mo.n_threads = 1;
    mo.weights = WeightFormat::kF32;
    auto t = Transformer::load(path, mo);
    t->set_tap_layers({0});
    std::vector<int32_t> ids;
    for (int i = 0; i < 40; ++i) ids.push_back((i * 37 + 11) % static_cast<int>(std::min<int64_t>(c.vocab_size, 200)));
    KvCache cache = t->new_cache(64);
    std::vector<float> logits, taps;
    t->prefill(ids.data(), static_cast<int64_t>(ids.size()), cache, logits, false, &taps);
    const int64_t H = c.hidden_size, n = static_cast<int64_t>(ids.size());
    const Tensor nw = src->load("model.layers.1.input_layernorm.weight");
    std::vector<float> norm(H);
    for (int64_t i = 0; i < H; ++i) norm[i] = f32_of(nw)[i];
    std::vector<float> xn(n * H);
    rmsnorm(taps.data(), norm.data(), static_cast<float>(c.rms_norm_eps), n, H, xn.data());
    ThreadPool pool(1);
    const KernelTable kt = select_kernels("");
    const OpContext ctx{&kt, &pool};
    std::vector<double> want;
    accumulate_hessian(ctx, xn.data(), n, H, want);
    finish_hessian(want, H);
    bool seen = false;
    calibrate_layers(*src, ctx, {ids}, [&](int64_t li, const LayerHessians& hs, const LayerHessians&) -> std::map<std::string, std::vector<float>> {
      if (li != 1) return {};
      const std::vector<double>& got = *hs.at("model.layers.1.self_attn.q_proj");
      double err = 0, ref = 0;
      for (int64_t i = 0; i < H * H; ++i) err = std::max(err, std::fabs(got[i] - want[i])), ref = std::max(ref, std::fabs(want[i]));
      EXPECT_LE(err, 1e-3 * ref);
      seen = true;
      return {};
    }, [](const std::string&) { return true; });
    EXPECT_TRUE(seen);
  }
}

}  // namespace
}  // namespace blockspec
