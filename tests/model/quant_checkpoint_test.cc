// Quantized checkpoints that are malformed, or use a feature not supported
// yet, fail to load with one error line naming the module and the mismatch;
// never load silently. Starts from the fixtures of tests/fixtures/quant and
// breaks one thing at a time.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "formats/safetensors.h"
#include "kernels/quant.h"
#include "model/transformer.h"
#include "model/weight_source.h"

namespace blockspec {
namespace {

namespace fs = std::filesystem;

class QuantBroken : public ::testing::Test {
 protected:
  void use(const std::string& fixture) {
    const fs::path src = fs::path(BS_SOURCE_DIR) / "tests/fixtures/quant" / fixture;
    dir_ = fs::temp_directory_path() / ("bs_quant_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    tensors_.clear();
    for (const char* f : {"config.json", "quantize_config.json"})
      if (fs::exists(src / f)) fs::copy_file(src / f, dir_ / f);
    SafetensorsFile f((src / "model.safetensors").string());
    for (const auto& e : f.entries()) tensors_.emplace_back(e.name, f.tensor(e.name));
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string load_error(const ModelOptions& mo = {}) {
    write_safetensors((dir_ / "model.safetensors").string(), tensors_);
    try {
      Transformer::load(dir_.string(), mo);
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
      return m;
    }
    return "";
  }
  // Replaces the first occurrence of `from` in a config file.
  void edit(const std::string& file, const std::string& from, const std::string& to) {
    std::string text;
    {
      std::ifstream f(dir_ / file);
      text.assign(std::istreambuf_iterator<char>(f), {});
    }
    const auto pos = text.find(from);
    ASSERT_NE(pos, std::string::npos) << from;
    text.replace(pos, from.size(), to);
    std::ofstream(dir_ / file) << text;
  }
  void erase(const std::string& name) {
    const size_t n = tensors_.size();
    std::erase_if(tensors_, [&](const auto& p) { return p.first == name; });
    ASSERT_EQ(tensors_.size(), n - 1) << name;
  }
  // An owned, writable copy of a tensor (the loaded ones view the mmapped file).
  Tensor& writable(const std::string& name) {
    for (auto& [n, t] : tensors_)
      if (n == name) {
        Tensor c(t.dtype(), t.shape());
        std::memcpy(c.mutable_data(), t.data(), t.nbytes());
        t = c;
        return t;
      }
    ADD_FAILURE() << "no tensor " << name;
    return tensors_[0].second;
  }
  void expect_error(std::initializer_list<std::string> parts, const ModelOptions& mo = {}) {
    const std::string e = load_error(mo);
    ASSERT_FALSE(e.empty()) << "loaded silently";
    if (std::getenv("BS_SHOW_ERRORS") != nullptr) std::printf("  %s\n", e.c_str());
    for (const std::string& p : parts) EXPECT_NE(e.find(p), std::string::npos) << "\"" << p << "\" not in: " << e;
  }

  fs::path dir_;
  std::vector<std::pair<std::string, Tensor>> tensors_;
};

const std::string kDown1 = "model.layers.1.mlp.down_proj";
const std::string kK0 = "model.layers.0.self_attn.k_proj";
const std::string kFirst = "module model.layers.0.";  // config-level refusals name the first quantized module

// ---- GPTQ ----

TEST_F(QuantBroken, GptqIntactLoads) {
  use("qwen3-gptq-w4g128");
  EXPECT_EQ(load_error(), "");
}

TEST_F(QuantBroken, GptqMissingTensors) {
  for (const char* t : {"qzeros", "scales"}) {
    use("qwen3-gptq-w4g128");
    erase(kDown1 + "." + t);
    expect_error({kDown1, "missing tensor", t});
  }
  use("qwen3-gptq-w4g128");
  erase(kDown1 + ".qweight");  // scales etc. alone: the module has no weight at all
  expect_error({kDown1 + ".weight", "missing"});
}

TEST_F(QuantBroken, GptqScalesShapeForGroupSize) {
  use("qwen3-gptq-w4g128");
  writable(kK0 + ".scales") = Tensor(DType::kF16, {2, 64});
  expect_error({kK0, "scales has shape [2, 64], expected [1, 64]", "group_size 128"});
}

TEST_F(QuantBroken, GptqNonTrivialGIdx) {
  use("qwen3-gptq-w4g128");
  int32_t* g = writable(kDown1 + ".g_idx").mutable_ptr<int32_t>();  // K = 256: [0 x 128, 1 x 128]
  std::swap(g[0], g[200]);
  expect_error({kDown1, "g_idx[0] = 1, expected 0", "desc_act=false"});
}

TEST_F(QuantBroken, GptqGIdxOutOfRange) {
  use("qwen3-gptq-w4g128");
  writable(kDown1 + ".g_idx").mutable_ptr<int32_t>()[5] = 7;
  expect_error({kDown1, "g_idx[5] = 7 is out of range [0, 2)"});
}

TEST_F(QuantBroken, GptqSymZeroPointMismatch) {
  use("qwen3-gptq-w4g128");
  writable(kK0 + ".qzeros").mutable_ptr<int32_t>()[0] = 0x77777778;  // column 0: stored 8 -> z = 9
  expect_error({kK0, "zero point of group 0 column 0 is 9", "expected 8"});
}

TEST_F(QuantBroken, GptqV1ZerosReadAsV2) {
  use("qwen3-gptq-w4g128");
  edit("config.json", "\"checkpoint_format\": \"gptq\"", "\"checkpoint_format\": \"gptq_v2\"");
  expect_error({kFirst, "is 7", "gptq_v2", "expected 8"});
}

// Asymmetric / act-order GPTQ (served as exact f32): bad g_idx and missing g_idx name the module.
const std::string kAct = "tiny-gptqv2-asym-actorder-w8g64";
const std::string kTinyDown = "model.layers.0.mlp.down_proj";  // K = 256, group 64: 4 groups

TEST_F(QuantBroken, GptqActOrderIntactLoads) {
  use(kAct);
  EXPECT_EQ(load_error(), "");
  use("tiny-gptq-asym-w4g32");
  EXPECT_EQ(load_error(), "");
}

TEST_F(QuantBroken, GptqActOrderGIdxOutOfRange) {
  use(kAct);
  writable(kTinyDown + ".g_idx").mutable_ptr<int32_t>()[17] = 4;
  expect_error({kTinyDown, "g_idx[17] = 4 is out of range [0, 4)"});
  use(kAct);
  writable(kTinyDown + ".g_idx").mutable_ptr<int32_t>()[3] = -1;
  expect_error({kTinyDown, "g_idx[3] = -1 is out of range"});
}

TEST_F(QuantBroken, GptqActOrderGIdxWrongLength) {
  use(kAct);
  writable(kTinyDown + ".g_idx") = Tensor(DType::kI32, {255});
  expect_error({kTinyDown, "g_idx has shape [255], expected [256]"});
}

TEST_F(QuantBroken, GptqActOrderGIdxMissing) {
  use(kAct);
  erase(kTinyDown + ".g_idx");
  expect_error({kTinyDown, "desc_act=true but g_idx is missing"});
}

TEST_F(QuantBroken, GptqActOrderGIdxWithoutDescAct) {
  use(kAct);
  edit("config.json", "\"desc_act\": true", "\"desc_act\": false");
  expect_error({"desc_act=false", "g_idx["});
}

TEST_F(QuantBroken, GptqUnsupportedFeatures) {
  const std::pair<std::string, std::string> cases[][2] = {
      {{"\"bits\": 4", "\"bits\": 3"}, {"bits=3", ""}},
      {{"\"group_size\": 128", "\"group_size\": 64"}, {"group_size 64", ""}},
      {{"\"checkpoint_format\": \"gptq\"", "\"checkpoint_format\": \"marlin\""}, {"marlin", ""}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c[0].second);
    use("qwen3-gptq-w4g128");
    edit("config.json", c[0].first, c[0].second);
    expect_error({kFirst, c[1].first});
  }
  use("qwen3-gptq-w4g128");
  edit("config.json", "\"quant_method\": \"gptq\"", "\"quant_method\": \"awq\"");
  expect_error({"quantization_config", "awq", "not supported"});
}

TEST_F(QuantBroken, GptqFormatOverrideDequantizesExactlyThenConverts) {
  use("qwen3-gptq-w4g128");
  ModelOptions mo;
  mo.weights = WeightFormat::kQ8_G128;  // not the native q4: exact dequantization, then RTN q8
  write_safetensors((dir_ / "model.safetensors").string(), tensors_);
  auto q8 = Transformer::load(dir_.string(), mo);
  auto native = Transformer::load(dir_.string(), ModelOptions{});
  const QuantTensor& a = q8->weights().layers[0].ffn_down;
  EXPECT_EQ(a.format, WeightFormat::kQ8_G128);
  Tensor da = dequantize_weight(a), dn = dequantize_weight(native->weights().layers[0].ffn_down);
  double worst = 0, amax = 0;
  for (int64_t i = 0; i < da.numel(); ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(da.ptr<float>()[i] - dn.ptr<float>()[i])));
    amax = std::max(amax, static_cast<double>(std::fabs(dn.ptr<float>()[i])));
  }
  EXPECT_LE(worst, amax / 127 / 2 * 1.0001);  // within half a q8 step of the group's max
}

// ---- compressed-tensors ----

TEST_F(QuantBroken, CtIntactLoads) {
  use("qwen3-ct-w4g128");
  EXPECT_EQ(load_error(), "");
  use("llama-ct-mixed");
  EXPECT_EQ(load_error(), "");
}

TEST_F(QuantBroken, CtMissingTensors) {
  use("qwen3-ct-w4g128");
  erase(kDown1 + ".weight_scale");
  expect_error({kDown1, "missing tensor", "weight_scale"});
  use("qwen3-ct-w4g128");
  erase(kDown1 + ".weight_shape");
  expect_error({kDown1, "missing tensor", "weight_shape"});
}

TEST_F(QuantBroken, CtPackedShapeDisagreesWithWeightShape) {
  use("qwen3-ct-w4g128");
  writable(kK0 + ".weight_shape").mutable_ptr<int64_t>()[1] = 192;
  expect_error({kK0, "weight_packed has shape [64, 16], expected [64, 24]", "weight_shape [64, 192]"});
}

TEST_F(QuantBroken, CtScaleShapeForStrategy) {
  use("qwen3-ct-w4g128");
  writable(kDown1 + ".weight_scale") = Tensor(DType::kBF16, {128, 1});
  expect_error({kDown1, "weight_scale has shape [128, 1], expected [128, 2]"});
}

// ---- compressed-tensors asymmetric (weight_zero_point; quant_checkpoint_zp.h) ----

const std::string kAsym4 = "tiny-ct-asym-w4", kAsym8 = "tiny-ct-asym-w8-mixed";
const std::string kAsymDown = "model.layers.0.mlp.down_proj", kAsymUp = "model.layers.0.mlp.up_proj";

TEST_F(QuantBroken, CtAsymIntactLoads) {
  use(kAsym4);
  EXPECT_EQ(load_error(), "");
  use(kAsym8);
  EXPECT_EQ(load_error(), "");
}

TEST_F(QuantBroken, CtZeroPointWhileSymmetric) {
  use("qwen3-ct-w4g128");  // symmetric config, zero points added
  tensors_.emplace_back(kK0 + ".weight_zero_point", Tensor(DType::kI32, {8, 1}));
  expect_error({kK0, "weight_zero_point present but the config says symmetric: true"});
  use(kAsym4);  // asymmetric checkpoint, config flipped to symmetric
  edit("config.json", "\"symmetric\": false", "\"symmetric\": true");
  expect_error({"module model.layers.0.self_attn.", "weight_zero_point present but the config says symmetric: true"});
}

TEST_F(QuantBroken, CtZeroPointMissingWhileAsymmetric) {
  use(kAsym4);
  erase(kK0 + ".weight_zero_point");
  expect_error({kK0, "symmetric: false but weight_zero_point is missing"});
  use(kAsym8);  // unpacked (int-quantized)
  erase(kAsymDown + ".weight_zero_point");
  expect_error({kAsymDown, "symmetric: false but weight_zero_point is missing"});
}

TEST_F(QuantBroken, CtZeroPointWrongDtype) {
  use(kAsym4);  // pack-quantized: I32 words; an unpacked I8 [N, ng] is not what compressed-tensors writes
  writable(kK0 + ".weight_zero_point") = Tensor(DType::kI8, {32, 2});
  expect_error({kK0, "weight_zero_point has dtype I8, expected I32"});
  use(kAsym8);  // int-quantized: integers, not floats
  writable(kAsymDown + ".weight_zero_point") = Tensor(DType::kF32, {64, 2});
  expect_error({kAsymDown, "weight_zero_point has dtype F32, expected I8"});
}

TEST_F(QuantBroken, CtZeroPointWrongShape) {
  use(kAsym4);  // k_proj [32, 64] int4 g32: [32*4/32, 2] = [4, 2]
  writable(kK0 + ".weight_zero_point") = Tensor(DType::kI32, {2, 4});
  expect_error({kK0, "weight_zero_point has shape [2, 4], expected [4, 2]", "packed along N"});
  use(kAsym4);  // per channel: one column
  writable(kAsymUp + ".weight_zero_point") = Tensor(DType::kI32, {32, 2});
  expect_error({kAsymUp, "weight_zero_point has shape [32, 2], expected [32, 1]"});
  use(kAsym8);  // unpacked [N, ng]
  writable(kAsymDown + ".weight_zero_point") = Tensor(DType::kI8, {64, 1});
  expect_error({kAsymDown, "weight_zero_point has shape [64, 1], expected [64, 2]"});
}

// A wider zp_dtype (I32, as compressed-tensors writes with zp_dtype torch.int32) loads the same values;
// a value outside the 8-bit range is refused.
TEST_F(QuantBroken, CtZeroPointOutOfRange) {
  use(kAsym8);
  write_safetensors((dir_ / "model.safetensors").string(), tensors_);
  const Tensor want = open_weight_source(dir_.string())->load(kAsymDown + ".weight");
  Tensor wide(DType::kI32, {64, 2});
  const Tensor z8 = writable(kAsymDown + ".weight_zero_point");
  for (int64_t i = 0; i < 128; ++i) wide.mutable_ptr<int32_t>()[i] = z8.ptr<int8_t>()[i];
  writable(kAsymDown + ".weight_zero_point") = wide;
  write_safetensors((dir_ / "model.safetensors").string(), tensors_);
  const Tensor got = open_weight_source(dir_.string())->load(kAsymDown + ".weight");
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.nbytes())) << "I32 zero points load differently";
  writable(kAsymDown + ".weight_zero_point").mutable_ptr<int32_t>()[3] = 200;
  expect_error({kAsymDown, "weight_zero_point[1, 1] = 200 is outside [-128, 127] for 8-bit weights"});
  writable(kAsymDown + ".weight_zero_point").mutable_ptr<int32_t>()[3] = -129;
  expect_error({kAsymDown, "= -129 is outside [-128, 127]"});
}

TEST_F(QuantBroken, CtAsymStrategyTensorRefused) {
  use(kAsym4);
  edit("config.json", "\"strategy\": \"channel\"", "\"strategy\": \"tensor\"");
  expect_error({kAsymUp.substr(0, 19), "asymmetric weight strategy \"tensor\""});
}

TEST_F(QuantBroken, CtUnsupportedFeatures) {
  const std::pair<std::string, std::string> cases[][2] = {
      // int4 args under a float format / float args with an int group size.
      {{"\"format\": \"pack-quantized\"", "\"format\": \"nvfp4-pack-quantized\""}, {"type \"int\" in a float format", ""}},
      {{"\"format\": \"pack-quantized\"", "\"format\": \"mxfp4-pack-quantized\""}, {"type \"int\" in a float format", ""}},
      {{"\"type\": \"int\"", "\"type\": \"float\""}, {"FP4 weights with group_size 128 are not supported", ""}},
      {{"\"num_bits\": 4", "\"num_bits\": 2"}, {"num_bits 2", ""}},
      {{"\"group_size\": 128", "\"group_size\": 64"}, {"group_size 64", ""}},
      {{"\"symmetric\": true", "\"symmetric\": false"}, {"symmetric: false but weight_zero_point is missing", ""}},
      {{"\"dynamic\": false,", "\"actorder\": \"group\", \"dynamic\": false,"}, {"actorder", ""}},
      {{"\"Linear\"", "\"re:.*mlp.*\""}, {"no config_groups target matches", ""}},
      {{"\"ignore\": [", "\"ignore\": [\"re:.*k_proj$\", "}, {"listed in \"ignore\" but stored quantized", ""}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c[0].second);
    use("qwen3-ct-w4g128");
    edit("config.json", c[0].first, c[0].second);
    expect_error({"module model.layers.", c[1].first});
  }
  use("qwen3-ct-w4g128");
  edit("config.json", "\"transform_config\": {}", "\"transform_config\": {\"t\": 1}");
  expect_error({"transform_config"});
}

TEST_F(QuantBroken, CtTargetedButDense) {
  use("llama-ct-mixed");
  edit("config.json", "\"lm_head\"", "\"nothing\"");  // lm_head no longer ignored: "Linear" targets it
  expect_error({"module lm_head", "stored dense"});
}

TEST_F(QuantBroken, CtNaiveQuantizedInt8Loads) {
  use("llama-ct-mixed");  // the int8 group as weight-only naive-quantized (W8A16)
  edit("config.json", "\"int-quantized\"", "\"naive-quantized\"");
  EXPECT_EQ(load_error(), "");
}

// pack-quantized int8 (4 codes per int32 along K, stored as code + 128):
// repack the W8A8 fixture's int8 MLP weights by the rule of quant_formats.md
// §3.3 and require exactly the same loaded weights.
TEST_F(QuantBroken, CtPackQuantizedInt8EqualsIntQuantized) {
  use("llama-ct-mixed");
  write_safetensors((dir_ / "model.safetensors").string(), tensors_);
  auto ref = Transformer::load(dir_.string(), ModelOptions{});
  for (const char* part : {"gate_proj", "up_proj", "down_proj"}) {
    const std::string m = std::string("model.layers.0.mlp.") + part;
    Tensor w;
    for (auto& [n, t] : tensors_)
      if (n == m + ".weight") w = t;
    ASSERT_EQ(w.dtype(), DType::kI8);
    const int64_t N = w.dim(0), K = w.dim(1);
    Tensor packed(DType::kI32, {N, K / 4});
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < K / 4; ++i) {
        uint32_t word = 0;
        for (int j = 0; j < 4; ++j)
          word |= static_cast<uint32_t>(static_cast<uint8_t>(w.ptr<int8_t>()[n * K + 4 * i + j] + 128)) << (8 * j);
        std::memcpy(packed.mutable_ptr<int32_t>() + n * (K / 4) + i, &word, 4);
      }
    Tensor shape(DType::kI64, {2});
    shape.mutable_ptr<int64_t>()[0] = N;
    shape.mutable_ptr<int64_t>()[1] = K;
    erase(m + ".weight");
    tensors_.emplace_back(m + ".weight_packed", packed);
    tensors_.emplace_back(m + ".weight_shape", shape);
  }
  edit("config.json", "\"int-quantized\"", "\"pack-quantized\"");
  // group_1 becomes weight-only (W8A16): its input_activations object -> null.
  {
    std::ifstream f(dir_ / "config.json");
    std::string text((std::istreambuf_iterator<char>(f)), {});
    const auto a = text.find("\"input_activations\": {");
    ASSERT_NE(a, std::string::npos);
    const auto b = text.find('}', a);
    text.replace(a, b + 1 - a, "\"input_activations\": null");
    std::ofstream(dir_ / "config.json") << text;
  }
  write_safetensors((dir_ / "model.safetensors").string(), tensors_);
  auto packed = Transformer::load(dir_.string(), ModelOptions{});
  const LayerWeights &x = ref->weights().layers[0], &y = packed->weights().layers[0];
  ASSERT_EQ(y.ffn_down.format, WeightFormat::kQ8_G128);
  ASSERT_EQ(y.ffn_gate_up.mats.size(), 1u);
  for (auto [a, b] : {std::pair{&x.ffn_down, &y.ffn_down}, std::pair{&x.ffn_gate_up.mats[0], &y.ffn_gate_up.mats[0]}}) {
    ASSERT_EQ(a->data.nbytes(), b->data.nbytes());
    EXPECT_EQ(0, std::memcmp(a->data.data(), b->data.data(), a->data.nbytes()));
    EXPECT_EQ(0, std::memcmp(a->scales.data(), b->scales.data(), a->scales.nbytes()));
    EXPECT_EQ(0, std::memcmp(a->aux.data(), b->aux.data(), a->aux.nbytes()));
  }
}

TEST_F(QuantBroken, CtStoredFp8WeightRefused) {
  use("llama-ct-mixed");
  const std::string m = "model.layers.0.mlp.up_proj";
  Tensor& w = writable(m + ".weight");
  w = Tensor(DType::kF8_E4M3, w.shape());
  expect_error({m, "F8_E4M3", "not supported"});
}

TEST_F(QuantBroken, CtW8A8StaticActivationsRefused) {
  use("llama-ct-mixed");
  edit("config.json", "\"dynamic\": true", "\"dynamic\": false");
  expect_error({"mlp.", "input activations", "dynamic=false"});
}

// A W8A8 module runs its activations per token, as the checkpoint declares and vLLM runs it; the weight-only
// (W4A16) attention of the same checkpoint does not quantize activations at all.
TEST_F(QuantBroken, CtW8A8RunsPerTokenActivations) {
  use("llama-ct-mixed");
  ASSERT_EQ(load_error(), "");
  auto m = Transformer::load(dir_.string(), ModelOptions{});
  const LayerWeights& l = m->weights().layers[0];
  EXPECT_TRUE(l.ffn_down.act_int8);
  EXPECT_TRUE(l.ffn_down.act_per_token);
  ASSERT_EQ(l.ffn_gate_up.mats.size(), 1u);
  EXPECT_TRUE(l.ffn_gate_up.mats[0].act_per_token);
  EXPECT_FALSE(l.attn_o.act_int8);
}

TEST_F(QuantBroken, CtW8A8DynamicPerTensorActivationsRefused) {
  use("llama-ct-mixed");
  edit("config.json", "\"strategy\": \"token\"", "\"strategy\": \"tensor\"");
  expect_error({"mlp.", "input activations", "tensor", "only dynamic symmetric int8 per token"});
}

// ---- compressed-tensors FP8 / NVFP4 / MXFP4 ----

const std::string kDown0 = "model.layers.0.mlp.down_proj";
const std::string kO0 = "model.layers.0.self_attn.o_proj";

TEST_F(QuantBroken, FpIntactLoads) {
  for (const char* f : {"tiny-ct-fp8", "tiny-ct-nvfp4", "tiny-ct-mxfp4"}) {
    use(f);
    EXPECT_EQ(load_error(), "") << f;
  }
}

TEST_F(QuantBroken, FpMissingTensors) {
  for (const char* f : {"tiny-ct-fp8", "tiny-ct-nvfp4", "tiny-ct-mxfp4"}) {
    SCOPED_TRACE(f);
    use(f);
    erase(kDown0 + ".weight_scale");
    expect_error({kDown0, "missing tensor", "weight_scale"});
  }
  use("tiny-ct-nvfp4");
  erase(kDown0 + ".weight_global_scale");
  expect_error({kDown0, "missing tensor", "weight_global_scale", "divisor"});
  use("tiny-ct-mxfp4");
  erase(kDown0 + ".weight_packed");
  expect_error({kDown0 + ".weight", "missing tensor"});  // without codes the module is simply absent
}

TEST_F(QuantBroken, FpScaleShapeForGroupSize) {
  use("tiny-ct-nvfp4");  // down_proj [64, 256]: 16 scales per row
  writable(kDown0 + ".weight_scale") = Tensor(DType::kF8_E4M3, {64, 8});
  expect_error({kDown0, "weight_scale has shape [64, 8], expected [64, 16]", "per 16"});
  use("tiny-ct-mxfp4");  // 8 scales per row
  writable(kDown0 + ".weight_scale") = Tensor(DType::kU8, {64, 16});
  expect_error({kDown0, "weight_scale has shape [64, 16], expected [64, 8]", "per 32"});
  use("tiny-ct-nvfp4");
  writable(kDown0 + ".weight_scale") = Tensor(DType::kU8, {64, 16});
  expect_error({kDown0, "weight_scale has dtype U8, expected F8_E4M3"});
  use("tiny-ct-fp8");  // block [128, 128] over [64, 256]: [1, 2]
  writable(kDown0 + ".weight_scale") = Tensor(DType::kBF16, {1, 1});
  expect_error({kDown0, "weight_scale has shape [1, 1], expected [1, 2]", "block"});
  use("tiny-ct-fp8");  // o_proj per tensor
  writable(kO0 + ".weight_scale") = Tensor(DType::kBF16, {64, 1});
  expect_error({kO0, "expected [1] (strategy tensor)"});
}

TEST_F(QuantBroken, FpPackedDimMismatch) {
  use("tiny-ct-nvfp4");
  Tensor ws(DType::kI64, {2});
  ws.mutable_ptr<int64_t>()[0] = 64;
  ws.mutable_ptr<int64_t>()[1] = 512;
  tensors_.emplace_back(kDown0 + ".weight_shape", ws);
  expect_error({kDown0, "weight_packed has shape [64, 128], expected [64, 256]", "weight_shape [64, 512]"});
  use("tiny-ct-mxfp4");
  writable(kDown0 + ".weight_packed") = Tensor(DType::kU8, {64, 100});  // K = 200: scales [64, 8] disagree
  expect_error({kDown0});
  use("tiny-ct-fp8");
  writable(kDown0 + ".weight") = Tensor(DType::kU8, {64, 256});
  expect_error({kDown0, "F8_E4M3"});
}

TEST_F(QuantBroken, FpBadValuesAndConfigs) {
  use("tiny-ct-nvfp4");
  writable(kDown0 + ".weight_global_scale").mutable_ptr<float>()[0] = 0.f;
  expect_error({kDown0, "weight_global_scale is 0"});
  use("tiny-ct-mxfp4");
  writable(kDown0 + ".weight_scale").mutable_ptr<uint8_t>()[3] = 0xFF;
  expect_error({kDown0, "0xFF (E8M0 NaN)"});
  use("tiny-ct-fp8");
  edit("config.json", "\"block_structure\": [\n            128,\n            128", "\"block_structure\": [\n            64,\n            64");
  expect_error({"mlp.", "block_structure [64, 64] is not supported"});
  use("tiny-ct-nvfp4");
  edit("config.json", "\"group_size\": 16", "\"group_size\": 64");
  expect_error({"module model.layers.0.", "group_size 64"});
  use("tiny-ct-mxfp4");
  tensors_.emplace_back(kDown0 + ".input_global_scale", Tensor(DType::kF32, {1}));
  expect_error({kDown0, "input_global_scale present"});
}

}  // namespace
}  // namespace blockspec
