// check_drafter on tiny hand-made DFlash / DFlash2 drafters sized for the
// qwen3-tiny-f32 fixture (hidden 64, 3 layers, vocab 512): a valid drafter of
// each method has no problems; each failure mode of `blockspec check` is one
// mutation, and the test asserts exactly which tensors / keys are named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/safetensors.h"
#include "model/dflash_check.h"
#include "model/weight_source.h"

namespace blockspec {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kTarget = std::string(BS_SOURCE_DIR) + "/tests/fixtures/golden/qwen3-tiny-f32";

struct Drafter {
  json cfg;
  std::vector<std::pair<std::string, Tensor>> tensors;

  void set(const std::string& name, DType t, const Shape& s) {
    erase(name);
    tensors.emplace_back(name, Tensor(t, s));
  }
  void erase(const std::string& name) {
    std::erase_if(tensors, [&](const auto& p) { return p.first == name; });
  }
};

// H: drafter hidden; Ht: the hidden size its fc reads per tap (the target's).
Drafter make_drafter(bool v2, int64_t H = 64, int64_t Ht = 64) {
  const int64_t F = 32, nh = 2, nkv = 1, d = 16, L = 2, T = 2, kt = 2, gs = 16, r = 8, V = 512;
  Drafter dr;
  dr.cfg = {{"architectures", {v2 ? "DFlash2DraftModel" : "DFlashDraftModel"}},
            {"model_type", "qwen3"},
            {"hidden_size", H},
            {"intermediate_size", F},
            {"num_hidden_layers", L},
            {"num_attention_heads", nh},
            {"num_key_value_heads", nkv},
            {"head_dim", d},
            {"vocab_size", V},
            {"rms_norm_eps", 1e-6},
            {"rope_theta", 1e6},
            {"max_position_embeddings", 512},
            {"hidden_act", "silu"},
            {"attention_bias", false},
            {"dtype", "bfloat16"},
            {"dflash_config", {{"block_size", 16}, {"mask_token_id", 500}, {"target_layer_ids", {0, 1}}}}};
  if (v2) {
    dr.cfg["is_causal"] = false;
    dr.cfg["layer_types"] = {"sliding_attention", "sliding_attention"};
    dr.cfg["sliding_window"] = 64;
    dr.cfg["dflash_config"].update(
        {{"conv_kernel_size", kt}, {"conv_group_size", gs}, {"selector_rank", r}, {"selector_top_k", 4}});
  }
  const DType b = DType::kBF16;
  dr.set("fc.weight", b, {H, T * Ht});
  dr.set("hidden_norm.weight", b, {H});
  dr.set("norm.weight", b, {H});
  for (int64_t i = 0; i < L; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    dr.set(p + "input_layernorm.weight", b, {H});
    dr.set(p + "post_attention_layernorm.weight", b, {H});
    dr.set(p + "self_attn.q_proj.weight", b, {nh * d, H});
    dr.set(p + "self_attn.k_proj.weight", b, {nkv * d, H});
    dr.set(p + "self_attn.v_proj.weight", b, {nkv * d, H});
    dr.set(p + "self_attn.o_proj.weight", b, {H, nh * d});
    dr.set(p + "self_attn.q_norm.weight", b, {d});
    dr.set(p + "self_attn.k_norm.weight", b, {d});
    dr.set(p + "mlp.gate_proj.weight", b, {F, H});
    dr.set(p + "mlp.up_proj.weight", b, {F, H});
    dr.set(p + "mlp.down_proj.weight", b, {H, F});
    if (!v2) continue;
    for (const char* c : {"attention_conv", "mlp_conv"}) {
      dr.set(p + c + ".base_kernel", b, {2, kt, H});
      dr.set(p + c + ".kernel_projection.weight", b, {2 * kt * (H / gs), H});
    }
  }
  if (v2) {
    dr.set("candidate_selector.predecessor_codebook", b, {V, r});
    dr.set("candidate_selector.successor_codebook", b, {V, r});
    dr.set("candidate_selector.hidden_projection.weight", b, {r, H});
  }
  return dr;
}

class DraftCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("bs_dflash_check_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    target_ = open_weight_source(kTarget)->config();
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const Drafter& d) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "config.json") << d.cfg.dump(2);
    write_safetensors((dir_ / "model.safetensors").string(), d.tensors);
  }
  // Names of the problems, sorted; with_target picks the target-dependent checks.
  std::vector<std::string> names(const Drafter& d, bool with_target = true) {
    write(d);
    info_ = DraftCheckInfo{};
    problems_ = check_drafter(dir_.string(), with_target ? &target_ : nullptr, &info_);
    std::vector<std::string> n;
    for (const DraftProblem& p : problems_) {
      EXPECT_EQ(p.message.find('\n'), std::string::npos) << p.message;
      n.push_back(p.name);
    }
    std::sort(n.begin(), n.end());
    return n;
  }
  std::string message(const std::string& name) const {
    for (const DraftProblem& p : problems_)
      if (p.name == name) return p.message;
    return "";
  }
  bool warned(const std::string& name) const {
    return std::any_of(info_.warnings.begin(), info_.warnings.end(), [&](const auto& w) { return w.name == name; });
  }
  using V = std::vector<std::string>;

  fs::path dir_;
  ModelConfig target_;
  DraftCheckInfo info_;
  std::vector<DraftProblem> problems_;
};

TEST_F(DraftCheck, ValidDFlashHasNoProblems) {
  EXPECT_EQ(names(make_drafter(false)), V{});
  EXPECT_TRUE(info_.is_checkpoint);
  EXPECT_TRUE(info_.target_checked);
  EXPECT_TRUE(info_.warnings.empty());
  EXPECT_EQ(info_.n_tensors, 3 + 2 * 11);  // dflash.md §1.2: 11 per layer + 3
  ASSERT_FALSE(info_.linear_formats.empty());
  EXPECT_EQ(info_.linear_formats[0], std::make_pair(std::string("fc"), std::string("BF16")));
  // Without a target: still fine, and the skipped checks are said.
  EXPECT_EQ(names(make_drafter(false), false), V{});
  EXPECT_FALSE(info_.target_checked);
  EXPECT_TRUE(warned("--target"));
}

TEST_F(DraftCheck, ValidDFlash2HasNoProblems) {
  Drafter d = make_drafter(true);
  EXPECT_EQ(names(d), V{});
  EXPECT_EQ(info_.n_tensors, 3 + 2 * 15 + 3);
  ASSERT_TRUE(info_.config.has_value());
  EXPECT_EQ(info_.config->method, DraftMethod::kDFlash2);
  // Codebooks stored with a ".weight" suffix are accepted too.
  for (const char* c : {"candidate_selector.predecessor_codebook", "candidate_selector.successor_codebook"}) {
    d.erase(c);
    d.set(std::string(c) + ".weight", DType::kBF16, {512, 8});
  }
  EXPECT_EQ(names(d), V{});
  EXPECT_TRUE(info_.warnings.empty());
}

TEST_F(DraftCheck, MissingTopLevelModules) {
  Drafter d = make_drafter(false);
  d.erase("fc.weight");
  EXPECT_EQ(names(d), V{"fc.weight"});
  EXPECT_NE(message("fc.weight").find("missing tensor [64, 128]"), std::string::npos);
  d = make_drafter(false);
  d.erase("hidden_norm.weight");
  d.erase("norm.weight");
  EXPECT_EQ(names(d), (V{"hidden_norm.weight", "norm.weight"}));
}

TEST_F(DraftCheck, MissingLayerTensors) {
  Drafter d = make_drafter(false);
  d.erase("layers.1.self_attn.k_norm.weight");
  d.erase("layers.0.mlp.down_proj.weight");
  EXPECT_EQ(names(d), (V{"layers.0.mlp.down_proj.weight", "layers.1.self_attn.k_norm.weight"}));
}

TEST_F(DraftCheck, AttentionBiasesRequiredIffConfigured) {
  Drafter d = make_drafter(false);
  d.cfg["attention_bias"] = true;
  EXPECT_EQ(names(d).size(), 8u);  // q, k, v, o bias in each of 2 layers
  EXPECT_NE(message("layers.0.self_attn.o_proj.bias").find("attention_bias"), std::string::npos);
  for (int i = 0; i < 2; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".self_attn.";
    d.set(p + "q_proj.bias", DType::kBF16, {32});
    d.set(p + "k_proj.bias", DType::kBF16, {16});
    d.set(p + "v_proj.bias", DType::kBF16, {16});
    d.set(p + "o_proj.bias", DType::kBF16, {64});
  }
  EXPECT_EQ(names(d), V{});
  d.cfg["attention_bias"] = false;  // biases the config does not use: a warning only
  EXPECT_EQ(names(d), V{});
  EXPECT_TRUE(warned("layers.0.self_attn.q_proj.bias"));
}

TEST_F(DraftCheck, DFlash2MissingSelectorAndConv) {
  Drafter d = make_drafter(true);
  d.erase("candidate_selector.successor_codebook");
  d.erase("candidate_selector.hidden_projection.weight");
  d.erase("layers.0.mlp_conv.base_kernel");
  d.erase("layers.1.attention_conv.kernel_projection.weight");
  EXPECT_EQ(names(d), (V{"candidate_selector.hidden_projection.weight", "candidate_selector.successor_codebook",
                         "layers.0.mlp_conv.base_kernel", "layers.1.attention_conv.kernel_projection.weight"}));
  d = make_drafter(true);
  d.set("layers.1.mlp_conv.kernel_projection.weight", DType::kBF16, {8, 64});  // 2 * kt * H/gs = 16 rows
  EXPECT_EQ(names(d), V{"layers.1.mlp_conv.kernel_projection.weight"});
  EXPECT_NE(message("layers.1.mlp_conv.kernel_projection.weight").find("expected [16, 64]"), std::string::npos);
}

TEST_F(DraftCheck, WrongShapeNamesExpected) {
  Drafter d = make_drafter(false);
  d.set("layers.0.self_attn.q_proj.weight", DType::kBF16, {64, 64});
  EXPECT_EQ(names(d), V{"layers.0.self_attn.q_proj.weight"});
  EXPECT_NE(message("layers.0.self_attn.q_proj.weight").find("has shape [64, 64], expected [32, 64]"),
            std::string::npos);
}

TEST_F(DraftCheck, FcWidthMustBeTapsTimesTargetHidden) {
  Drafter d = make_drafter(false);
  d.cfg["dflash_config"]["target_layer_ids"] = {0, 1, 2};  // 3 taps, fc still reads 2 x 64
  EXPECT_EQ(names(d), V{"fc.weight"});
  EXPECT_NE(message("fc.weight").find("expected [64, 192]"), std::string::npos);
  EXPECT_EQ(names(d, false), V{"fc.weight"});  // T x own hidden without a target
  // A drafter of hidden 32 whose fc reads 2 x 64: right for the target's
  // width, but its hidden is not the target's.
  Drafter n = make_drafter(false, 32, 64);
  EXPECT_EQ(names(n), V{"hidden_size"});
  EXPECT_TRUE(problems_[0].is_key);
  EXPECT_EQ(names(n, false), V{"fc.weight"});  // without a target: fc must read 2 x 32
}

TEST_F(DraftCheck, TapBeyondTargetDepth) {
  Drafter d = make_drafter(false);
  d.cfg["dflash_config"]["target_layer_ids"] = {0, 3};  // the target has 3 layers
  EXPECT_EQ(names(d), V{"dflash_config.target_layer_ids"});
  EXPECT_NE(message("dflash_config.target_layer_ids").find("[3]"), std::string::npos);
  EXPECT_EQ(names(d, false), V{});  // unknowable without the target
  d.cfg["dflash_config"]["target_layer_ids"] = {0, 2};  // the last layer: legal, but warned
  EXPECT_EQ(names(d), V{});
  EXPECT_TRUE(warned("dflash_config.target_layer_ids"));
}

// A hybrid target (Qwen3.5 layout, 5 layers L L L F L): tap ids count every layer, Gated DeltaNet or attention.
TEST_F(DraftCheck, TapIdsAgainstAHybridTarget) {
  target_ = open_weight_source(std::string(BS_SOURCE_DIR) + "/tests/fixtures/hybrid/qwen35-text-a")->config();
  ASSERT_TRUE(target_.is_hybrid());
  target_.vocab_size = 512;  // the hand-made drafter's mask token is 511: only the taps are under test here
  Drafter d = make_drafter(false);
  d.cfg["dflash_config"]["target_layer_ids"] = {0, 3};  // a GDN layer and the attention layer
  EXPECT_EQ(names(d), V{});
  d.cfg["dflash_config"]["target_layer_ids"] = {1, 5};
  EXPECT_EQ(names(d), V{"dflash_config.target_layer_ids"});
  EXPECT_NE(message("dflash_config.target_layer_ids").find("[5]"), std::string::npos);
}

TEST_F(DraftCheck, MaskTokenOutsideTargetVocab) {
  Drafter d = make_drafter(false);
  d.cfg["dflash_config"]["mask_token_id"] = 512;
  EXPECT_EQ(names(d), V{"dflash_config.mask_token_id"});
  EXPECT_EQ(names(d, false), V{});
}

TEST_F(DraftCheck, Fp16DFlash2) {
  Drafter d = make_drafter(true);
  d.cfg["dtype"] = "float16";
  EXPECT_EQ(names(d), V{"dtype"});
  EXPECT_NE(message("dtype").find("#55250"), std::string::npos);
  d = make_drafter(true);
  d.set("norm.weight", DType::kF16, {64});
  d.set("layers.0.mlp.up_proj.weight", DType::kF16, {32, 64});
  EXPECT_EQ(names(d), V{"norm.weight"});  // one line for all F16 tensors, naming the first checked
  EXPECT_NE(message("norm.weight").find("2 tensor(s) stored F16"), std::string::npos);
  Drafter v1 = make_drafter(false);  // DFlash1 in fp16 is fine
  v1.cfg["dtype"] = "float16";
  v1.set("norm.weight", DType::kF16, {64});
  EXPECT_EQ(names(v1), V{});
}

TEST_F(DraftCheck, DenseTensorOfNonFloatDtype) {
  Drafter d = make_drafter(false);
  d.set("norm.weight", DType::kI32, {64});
  EXPECT_EQ(names(d), V{"norm.weight"});
  EXPECT_NE(message("norm.weight").find("dtype I32"), std::string::npos);
}

TEST_F(DraftCheck, ExtraTensorsWarnOnly) {
  Drafter d = make_drafter(false);
  d.set("embed_tokens.weight", DType::kBF16, {512, 64});
  EXPECT_EQ(names(d), V{});
  EXPECT_TRUE(warned("embed_tokens.weight"));
}

TEST_F(DraftCheck, ModelPrefixIsNamed) {
  Drafter d = make_drafter(false);
  d.erase("fc.weight");
  d.set("model.fc.weight", DType::kBF16, {64, 128});
  EXPECT_EQ(names(d), V{"fc.weight"});
  EXPECT_NE(message("fc.weight").find("model."), std::string::npos);
}

TEST_F(DraftCheck, ConfigRejectedIsAProblemNotANonCheckpoint) {
  Drafter d = make_drafter(false);
  d.cfg["dflash_config"].erase("mask_token_id");
  EXPECT_EQ(names(d), V{"config.json"});
  EXPECT_TRUE(info_.is_checkpoint);
  EXPECT_NE(message("config.json").find("mask_token_id"), std::string::npos);
}

TEST_F(DraftCheck, NotACheckpoint) {
  auto check = [&](const std::string& path) {
    DraftCheckInfo info;
    const auto p = check_drafter(path, &target_, &info);
    EXPECT_FALSE(info.is_checkpoint) << path;
    EXPECT_EQ(p.size(), 1u) << path;
  };
  check((dir_ / "does-not-exist").string());
  write(make_drafter(false));
  check((dir_ / "model.safetensors").string());  // a file
  check(kTarget);                                // a model, not a drafter
  fs::remove(dir_ / "model.safetensors");
  check(dir_.string());                          // no safetensors
  fs::remove(dir_ / "config.json");
  check(dir_.string());                          // no config.json
}

// compressed-tensors int8 per-channel fc ("Linear" targets it: quant_checkpoint's
// is_linear_module knows the drafter's linears); the layers stay dense (ignored).
Drafter quantized_fc_drafter() {
  Drafter d = make_drafter(false);
  d.cfg["quantization_config"] = json::parse(R"({
    "quant_method": "compressed-tensors", "format": "int-quantized", "quantization_status": "compressed",
    "ignore": ["re:layers\\."],
    "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": null, "output_activations": null,
      "weights": {"num_bits": 8, "type": "int", "symmetric": true, "strategy": "channel", "dynamic": false}}}})");
  d.set("fc.weight", DType::kI8, {64, 128});
  d.set("fc.weight_scale", DType::kBF16, {64, 1});
  return d;
}

TEST_F(DraftCheck, QuantizedFcValidated) {
  Drafter d = quantized_fc_drafter();
  EXPECT_EQ(names(d), V{});
  EXPECT_TRUE(info_.warnings.empty());  // the scale belongs to fc: not an extra tensor
  ASSERT_FALSE(info_.linear_formats.empty());
  EXPECT_EQ(info_.linear_formats[0].first, "fc");
  EXPECT_NE(info_.linear_formats[0].second.find("int8 per-channel"), std::string::npos);
  d.erase("fc.weight_scale");
  EXPECT_EQ(names(d), V{"fc"});
  EXPECT_NE(message("fc").find("weight_scale"), std::string::npos);
}

}  // namespace
}  // namespace blockspec
