#include "formats/hf_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "base/error.h"

namespace blockspec {
namespace {

const char* kQwen3Legacy = R"({
  "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936,
  "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
  "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
  "max_position_embeddings": 40960, "rms_norm_eps": 1e-06, "rope_theta": 1000000,
  "rope_scaling": null, "tie_word_embeddings": true, "attention_bias": false,
  "eos_token_id": 151645, "bos_token_id": 151643, "torch_dtype": "bfloat16"})";

std::string err_of(const std::string& json) {
  try {
    parse_hf_config(json, "cfg.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(HfConfig, Qwen3LegacyLayout) {
  ModelConfig c = parse_hf_config(kQwen3Legacy, "cfg.json");
  EXPECT_EQ(c.arch, Arch::kQwen3);
  EXPECT_EQ(c.head_dim, 128);  // decoupled: hidden/heads would be 64
  EXPECT_EQ(c.n_kv_heads, 8);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.rope.type, RopeType::kDefault);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  ASSERT_EQ(c.eos_token_ids.size(), 1u);
  EXPECT_EQ(c.eos_token_ids[0], 151645);
  EXPECT_EQ(c.bos_token_id.value(), 151643);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
}

TEST(HfConfig, Transformers5LayoutWithRopeParameters) {
  ModelConfig c = parse_hf_config(R"({"model_type":"llama","vocab_size":100,"hidden_size":64,
    "intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":8,"num_key_value_heads":2,
    "max_position_embeddings":512,"dtype":"float32","eos_token_id":[1,2],
    "rope_parameters":{"rope_type":"llama3","rope_theta":500000.0,"factor":8.0,"low_freq_factor":1.0,
    "high_freq_factor":4.0,"original_max_position_embeddings":64}})", "cfg.json");
  EXPECT_EQ(c.arch, Arch::kLlama);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.rope.type, RopeType::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 64);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(c.torch_dtype, "float32");
}

TEST(HfConfig, Qwen2AlwaysHasQkvBias) {
  ModelConfig c = parse_hf_config(R"({"model_type":"qwen2","vocab_size":10,"hidden_size":8,
    "intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":1,
    "rope_scaling":{"type":"yarn","factor":4.0,"original_max_position_embeddings":128}})", "x");
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.attention_out_bias);
  EXPECT_EQ(c.rope.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(c.rope.factor, 4.0);
}

TEST(HfConfig, RefusesUnknownArchitectureByName) {
  std::string e = err_of(R"({"model_type":"gpt2","vocab_size":1})");
  EXPECT_NE(e.find("cfg.json"), std::string::npos) << e;
  EXPECT_NE(e.find("\"gpt2\""), std::string::npos) << e;
  e = err_of(R"({"model_type":"llama","architectures":["MistralForCausalLM"]})");
  EXPECT_NE(e.find("MistralForCausalLM"), std::string::npos) << e;
}

TEST(HfConfig, BadFieldsNamed) {
  EXPECT_NE(err_of("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(err_of("[1]").find("object"), std::string::npos);
  EXPECT_NE(err_of(R"({"model_type":"llama"})").find("vocab_size"), std::string::npos);
  std::string base = R"({"model_type":"llama","vocab_size":10,"hidden_size":8,"intermediate_size":16,
    "num_hidden_layers":1,"num_attention_heads":2)";
  EXPECT_NE(err_of(base + R"(,"num_key_value_heads":3})").find("num_key_value_heads"), std::string::npos);
  EXPECT_NE(err_of(base + R"(,"rope_scaling":{"rope_type":"longrope"}})").find("longrope"), std::string::npos);
  EXPECT_NE(err_of(base + R"(,"eos_token_id":"x"})").find("eos_token_id"), std::string::npos);
  EXPECT_NE(err_of(base + R"(,"rms_norm_eps":-1})").find("rms_norm_eps"), std::string::npos);
  EXPECT_NE(err_of(R"({"model_type":"llama","vocab_size":10,"hidden_size":-8})").find("hidden_size"),
            std::string::npos);
  EXPECT_NE(err_of(base + R"(,"head_dim":7})").find("head_dim"), std::string::npos);
}

TEST(Rope, DefaultAndLinear) {
  ModelConfig c = parse_hf_config(kQwen3Legacy, "x");
  RopeTables t = compute_rope(c);
  ASSERT_EQ(t.inv_freq.size(), 64u);
  EXPECT_FLOAT_EQ(t.inv_freq[0], 1.0f);
  EXPECT_NEAR(t.inv_freq[1], std::pow(1e6, -2.0 / 128), 1e-7);
  c.rope.type = RopeType::kLinear;
  c.rope.factor = 2.0;
  RopeTables l = compute_rope(c);
  EXPECT_FLOAT_EQ(l.inv_freq[1], t.inv_freq[1] / 2);
}

TEST(Rope, YarnAttentionFactor) {
  ModelConfig c = parse_hf_config(kQwen3Legacy, "x");
  c.rope.type = RopeType::kYarn;
  c.rope.factor = 4.0;
  c.rope.original_max_position_embeddings = 32768;
  RopeTables t = compute_rope(c);
  EXPECT_NEAR(t.attention_scaling, 0.1 * std::log(4.0) + 1.0, 1e-6);
  // Highest frequencies extrapolate (unchanged), lowest interpolate (/factor).
  EXPECT_FLOAT_EQ(t.inv_freq[0], 1.0f);
  EXPECT_NEAR(t.inv_freq[63], std::pow(1e6f, -126.0f / 128) / 4, 1e-12);
}

// Hybrid Qwen3.5 (hybrid.md §1): the text-only layout with derived layer
// types and HF's defaults, the multimodal wrapper, and the refusals.
const char* kQwen35Text = R"({
  "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text", "vocab_size": 248320,
  "hidden_size": 2560, "intermediate_size": 9216, "num_hidden_layers": 6, "num_attention_heads": 16,
  "num_key_value_heads": 4, "head_dim": 256, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
  "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "mrope_section": [11, 11, 10]},
  "eos_token_id": 248044, "mamba_ssm_dtype": "float32", "attn_output_gate": true, "output_gate_type": "swish"})";

TEST(HfConfig, Qwen35TextDerivesLayerTypesAndDefaults) {
  const ModelConfig c = parse_hf_config(kQwen35Text, "cfg.json");
  EXPECT_EQ(c.arch, Arch::kQwen35);
  ASSERT_TRUE(c.is_hybrid());
  EXPECT_EQ(c.linear_layers, (std::vector<bool>{true, true, true, false, true, true}));  // (i+1) % 4 == 0: full
  EXPECT_EQ(c.n_attention_layers(), 1);
  EXPECT_EQ(c.kv_layer(3), 0);
  EXPECT_EQ(c.gdn.conv_kernel, 4);
  EXPECT_EQ(c.gdn.key_head_dim, 128);
  EXPECT_EQ(c.gdn.conv_dim(), 2 * 16 * 128 + 32 * 128);
  EXPECT_EQ(c.gdn.state_floats(), 3 * 8192 + 32 * 128 * 128);
  EXPECT_DOUBLE_EQ(c.rope.partial_rotary_factor, 0.25);  // HF's qwen3_5 default
  EXPECT_TRUE(c.attn_output_gate);
  EXPECT_TRUE(c.offset_norms);
  EXPECT_EQ(c.weight_prefix, "model.");
}

TEST(HfConfig, Qwen35WrapperReadsTextConfig) {
  const ModelConfig c = parse_hf_config(R"({"architectures": ["Qwen3_5ForConditionalGeneration"],
    "model_type": "qwen3_5", "tie_word_embeddings": true, "text_config": {"model_type": "qwen3_5_text",
    "vocab_size": 256, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "tie_word_embeddings": false,
    "layer_types": ["linear_attention", "full_attention", "linear_attention"], "linear_key_head_dim": 16,
    "linear_value_head_dim": 24, "linear_num_key_heads": 2, "linear_num_value_heads": 6,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.5}},
    "vision_config": {"depth": 1}})", "cfg.json");
  EXPECT_EQ(c.weight_prefix, "model.language_model.");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_TRUE(c.tie_word_embeddings);  // the wrapper's own flag decides
  EXPECT_EQ(c.linear_layers, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(c.gdn.value_dim(), 6 * 24);
  EXPECT_DOUBLE_EQ(c.rope.partial_rotary_factor, 0.5);
}

TEST(HfConfig, HybridRefusalsAreNamed) {
  std::string base = kQwen35Text;
  auto with = [&](const std::string& from, const std::string& to) {
    std::string j = base;
    j.replace(j.find(from), from.size(), to);
    return err_of(j);
  };
  EXPECT_NE(with("\"qwen3_5_text\"", "\"qwen3_5_moe\"").find("qwen3_5_moe\" (a mixture-of-experts"), std::string::npos);
  EXPECT_NE(with("\"qwen3_5_text\"", "\"qwen3_next\"").find("qwen3_next"), std::string::npos);
  EXPECT_NE(with("\"linear_num_value_heads\": 32", "\"linear_num_value_heads\": 20").find("not a multiple"),
            std::string::npos);
  EXPECT_NE(with("\"attn_output_gate\": true", "\"attn_output_gate\": false").find("attn_output_gate"), std::string::npos);
  EXPECT_NE(with("\"swish\"", "\"sigmoid\"").find("output_gate_type"), std::string::npos);
  EXPECT_NE(with("\"mamba_ssm_dtype\"", "\"layer_types\": [\"linear_attention\"], \"x\"").find("one type per layer"),
            std::string::npos);
  EXPECT_NE(err_of(R"({"model_type": "qwen3_5", "architectures": ["Qwen3_5ForConditionalGeneration"]})")
                .find("text_config"),
            std::string::npos);
}

}  // namespace
}  // namespace blockspec
