// FP8 KV cache scales: quantize --kv-cache-scheme fp8 writes absmax / 448 per
// layer (compressed-tensors kv_cache_scheme + self_attn.k_scale / v_scale),
// the loader reads them and fp8_e4m3 caches use them, and a checkpoint whose
// scales disagree with its config is refused with one line.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <unistd.h>

#include "base/error.h"
#include "formats/safetensors.h"
#include "model/transformer.h"
#include "quantize/quantize.h"

namespace blockspec {
namespace {

namespace fs = std::filesystem;
const std::string kTiny = std::string(BS_SOURCE_DIR) + "/tests/fixtures/golden/qwen3-tiny-f32";

std::string tmp_dir(const std::string& name) {
  const std::string d = (fs::temp_directory_path() / ("bs_kv_scales_test_" + std::to_string(getpid()) + "_" + name)).string();
  fs::remove_all(d);
  return d;
}

std::vector<int32_t> calib_ids() {
  std::mt19937 rng(3);
  std::vector<int32_t> ids(256);
  for (int32_t& t : ids) t = static_cast<int32_t>(rng() % 500);
  return ids;
}

// The quantized tiny model with FP8 KV scales (made once per test binary run).
const std::string& quantized() {
  static const std::string dir = [] {
    QuantizeOptions o;
    o.in = kTiny;
    o.out = tmp_dir("w8a16");
    o.scheme = QScheme::kW8A16;
    o.calib_ids = calib_ids();
    o.calib_window = 128;
    o.kv_fp8 = true;
    o.progress = false;
    quantize_model(o);
    return o.out;
  }();
  return dir;
}

std::unique_ptr<Transformer> load(const std::string& dir, const std::string& kv = "fp8_e4m3") {
  ModelOptions mo;
  mo.n_threads = 1;
  mo.kv_cache_dtype = kv == "f32" ? KvDType::kF32 : KvDType::kFP8E4M3;
  return Transformer::load(dir, mo);
}

// A copy of dir with its safetensors rewritten by edit (name -> tensor map) and its config by edit_cfg.
std::string edited_copy(const std::string& dir, const std::string& name,
                        const std::function<void(std::map<std::string, Tensor>&)>& edit,
                        const std::function<void(nlohmann::json&)>& edit_cfg = {}) {
  const std::string out = tmp_dir(name);
  fs::create_directories(out);
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename() != "model.safetensors") fs::copy_file(e.path(), out + "/" + e.path().filename().string());
  SafetensorsCheckpoint ck(dir);
  std::map<std::string, Tensor> t;
  for (const std::string& n : ck.names()) t.emplace(n, ck.tensor(n));
  edit(t);
  write_safetensors(out + "/model.safetensors", std::vector<std::pair<std::string, Tensor>>(t.begin(), t.end()),
                    {{"format", "pt"}});
  if (edit_cfg) {
    std::ifstream f(out + "/config.json");
    nlohmann::json c = nlohmann::json::parse(f);
    edit_cfg(c);
    std::ofstream(out + "/config.json") << c.dump(2);
  }
  return out;
}

Tensor scalar(float v, Shape s = {1}) {
  Tensor t(DType::kF32, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_ptr<float>()[i] = v;
  return t;
}

TEST(KvScales, QuantizeWritesAbsmaxOver448AndTheLoaderReadsThem) {
  const std::string& dir = quantized();
  std::ifstream f(dir + "/config.json");
  const nlohmann::json cfg = nlohmann::json::parse(f);
  const nlohmann::json& kv = cfg["quantization_config"]["kv_cache_scheme"];
  EXPECT_EQ(kv["num_bits"], 8);
  EXPECT_EQ(kv["type"], "float");
  EXPECT_EQ(kv["strategy"], "tensor");
  EXPECT_EQ(kv["symmetric"], true);
  EXPECT_EQ(kv["dynamic"], false);

  auto m = load(dir, "f32");
  const int64_t L = m->config().n_layers, nkv = m->config().n_kv_heads, hd = m->config().head_dim;
  ASSERT_EQ(static_cast<int64_t>(m->kv_k_scales().size()), L);
  SafetensorsCheckpoint ck(dir);
  // scale * 448 = max |K| (after RoPE, as cached) over the calibration windows, from the quantized model itself.
  std::vector<float> kmax(L, 0.f), vmax(L, 0.f);
  const std::vector<int32_t> ids = calib_ids();
  for (size_t w0 = 0; w0 < ids.size(); w0 += 128) {
    KvCache c = m->new_cache(128);
    std::vector<float> logits;
    m->prefill(ids.data() + w0, 128, c, logits, false);
    for (int64_t l = 0; l < L; ++l)
      for (int64_t i = 0; i < 128 * nkv * hd; ++i) {
        kmax[l] = std::max(kmax[l], std::fabs(c.k(l)[i]));
        vmax[l] = std::max(vmax[l], std::fabs(c.v(l)[i]));
      }
  }
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    const Tensor k = ck.tensor(p + "k_scale"), v = ck.tensor(p + "v_scale");
    ASSERT_EQ(k.dtype(), DType::kF32);
    ASSERT_EQ(k.shape(), Shape({1}));
    EXPECT_EQ(k.ptr<float>()[0], m->kv_k_scales()[l]);
    EXPECT_EQ(v.ptr<float>()[0], m->kv_v_scales()[l]);
    EXPECT_NEAR(m->kv_k_scales()[l] * 448.f, kmax[l], 1e-3 * kmax[l]) << l;
    EXPECT_NEAR(m->kv_v_scales()[l] * 448.f, vmax[l], 1e-3 * vmax[l]) << l;
  }
}

// The fp8 cache runs with the checkpoint's scales: scaling them by 2^k changes nothing where no value
// saturates or underflows, a scale of 1e4 (values pushed into E4M3's subnormals) changes the logits; an f32
// cache ignores the scales.
TEST(KvScales, Fp8CacheUsesTheScales) {
  const std::string& dir = quantized();
  const std::string big = edited_copy(dir, "big", [](std::map<std::string, Tensor>& t) {
    for (auto& [n, v] : t)
      if (n.find("_scale") != std::string::npos && n.find("self_attn.") != std::string::npos &&
          n.find("weight") == std::string::npos)
        v = scalar(1e4f);
  });
  const std::vector<int32_t> ids = calib_ids();
  auto logits_of = [&](const std::string& d, const std::string& kv) {
    auto m = load(d, kv);
    KvCache c = m->new_cache(64);
    std::vector<float> out;
    m->prefill(ids.data(), 64, c, out, true);
    return out;
  };
  EXPECT_EQ(logits_of(dir, "f32"), logits_of(big, "f32"));
  const std::vector<float> a = logits_of(dir, "fp8_e4m3"), b = logits_of(big, "fp8_e4m3");
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
  EXPECT_GT(diff, 1e-3);
  auto m = load(big);
  EXPECT_EQ(m->kv_k_scales()[0], 1e4f);
  fs::remove_all(big);
}

TEST(KvScales, MismatchesAreOneLineErrors) {
  const std::string& dir = quantized();
  struct Case {
    std::string name, want;
    std::function<void(std::map<std::string, Tensor>&)> edit;
    std::function<void(nlohmann::json&)> cfg;
  };
  const std::vector<Case> cases = {
      {"missing", "model.layers.1.self_attn.v_scale is missing",
       [](auto& t) { t.erase("model.layers.1.self_attn.v_scale"); }, {}},
      {"negative", "model.layers.0.self_attn.k_scale = -1", [](auto& t) {
         t["model.layers.0.self_attn.k_scale"] = scalar(-1.f);
       }, {}},
      {"shape", "model.layers.0.self_attn.k_scale has shape [4]", [](auto& t) {
         t["model.layers.0.self_attn.k_scale"] = scalar(1.f, {4});
       }, {}},
      {"scheme", "kv_cache_scheme: only", [](auto&) {},
       [](nlohmann::json& c) { c["quantization_config"]["kv_cache_scheme"]["strategy"] = "channel"; }},
      {"bits", "kv_cache_scheme: only", [](auto&) {},
       [](nlohmann::json& c) { c["quantization_config"]["kv_cache_scheme"]["num_bits"] = 4; }},
      {"noscheme", "model.layers.1.self_attn.k_scale is missing (other layers", [](auto& t) {
         for (const char* s : {"k_scale", "v_scale"})
           for (int l = 1; l < 3; ++l) t.erase("model.layers." + std::to_string(l) + ".self_attn." + s);
       }, [](nlohmann::json& c) { c["quantization_config"].erase("kv_cache_scheme"); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string d = edited_copy(dir, c.name, c.edit, c.cfg);
    try {
      load(d);
      ADD_FAILURE() << "loaded";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(c.want), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
    fs::remove_all(d);
  }
  // A legacy single kv_scale serves K and V alike.
  const std::string legacy = edited_copy(dir, "legacy", [](std::map<std::string, Tensor>& t) {
    for (auto it = t.begin(); it != t.end();) {
      const std::string& n = it->first;
      const bool ks = n.size() > 8 && n.substr(n.size() - 8) == ".k_scale";
      if (ks) t["~" + n.substr(0, n.size() - 8) + ".kv_scale"] = scalar(0.5f);
      it = (ks || (n.size() > 8 && n.substr(n.size() - 8) == ".v_scale")) ? t.erase(it) : std::next(it);
    }
    std::map<std::string, Tensor> fixed;
    for (auto& [n, v] : t) fixed.emplace(n[0] == '~' ? n.substr(1) : n, v);
    t = fixed;
  });
  auto m = load(legacy);
  for (size_t l = 0; l < m->kv_k_scales().size(); ++l) {
    EXPECT_EQ(m->kv_k_scales()[l], 0.5f);
    EXPECT_EQ(m->kv_v_scales()[l], 0.5f);
  }
  fs::remove_all(legacy);
}

TEST(KvScales, QuantizeRefusesWithoutCalibrationOrInGptqFormat) {
  QuantizeOptions o;
  o.in = kTiny;
  o.out = tmp_dir("refused");
  o.scheme = QScheme::kW4A16;
  o.kv_fp8 = true;
  o.progress = false;
  EXPECT_THROW(quantize_model(o), Error);  // no calibration text
  o.calib_ids = calib_ids();
  o.format = QFormat::kGptq;
  EXPECT_THROW(quantize_model(o), Error);
  EXPECT_FALSE(fs::exists(o.out));
}

}  // namespace
}  // namespace blockspec
