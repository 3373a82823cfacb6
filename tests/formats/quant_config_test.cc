// Quantization config parsing (GPTQ quantize_config / quantization_config,
// compressed-tensors config_groups), target matching and the int32 packing.
#include "formats/quant_config.h"

#include <gtest/gtest.h>

#include "base/error.h"

namespace blockspec {
namespace {

TEST(QuantConfig, GptqDefaultsAndAliases) {
  QuantConfig q = parse_quant_config(R"({"bits": 8, "group_size": -1, "desc_act": false})", "qc");
  EXPECT_EQ(q.method, QuantMethod::kGptq);
  EXPECT_EQ(q.gptq.bits, 8);
  EXPECT_EQ(q.gptq.group_size, -1);
  EXPECT_TRUE(q.gptq.sym);                         // missing sym means true
  EXPECT_EQ(q.gptq.checkpoint_format, "gptq");     // missing means v1
  q = parse_quant_config(R"({"quant_method": "gptq", "w_bit": 4, "q_group_size": 128, "checkpoint_format": "gptq_v2",
                             "dynamic": {"-:.*lm_head": {}}})", "qc");
  EXPECT_EQ(q.gptq.bits, 4);
  EXPECT_EQ(q.gptq.group_size, 128);
  EXPECT_EQ(q.gptq.checkpoint_format, "gptq_v2");
  EXPECT_TRUE(q.gptq.has_dynamic);
  q = parse_quant_config(R"({"quant_method": "gptq", "is_marlin_format": true})", "qc");
  EXPECT_EQ(q.gptq.checkpoint_format, "marlin");
}

TEST(QuantConfig, CompressedTensorsGroups) {
  QuantConfig q = parse_quant_config(R"({"quant_method": "compressed-tensors", "format": "mixed-precision",
    "ignore": ["lm_head"], "sparsity_config": {}, "transform_config": {},
    "config_groups": {
      "group_0": {"targets": ["re:.*q_proj$"], "format": "pack-quantized",
                  "weights": {"num_bits": 4, "type": "int", "symmetric": true, "group_size": 128, "actorder": "static"}},
      "group_1": {"targets": ["Linear"], "format": "int-quantized",
                  "weights": {"num_bits": 8, "strategy": "channel"},
                  "input_activations": {"num_bits": 8, "strategy": "token", "dynamic": true}}}})", "qc");
  ASSERT_EQ(q.method, QuantMethod::kCompressedTensors);
  EXPECT_EQ(q.ct.format, "mixed-precision");
  EXPECT_EQ(q.ct.quantization_status, "compressed");
  EXPECT_FALSE(q.ct.has_sparsity);
  EXPECT_FALSE(q.ct.has_transform);
  ASSERT_EQ(q.ct.groups.size(), 2u);
  const CtGroup& g0 = q.ct.groups[0];
  EXPECT_EQ(g0.name, "group_0");
  ASSERT_TRUE(g0.weights);
  EXPECT_EQ(g0.weights->strategy, "group");  // inferred from group_size
  EXPECT_EQ(g0.weights->actorder, "weight");  // "static" alias
  EXPECT_FALSE(g0.input_activations);
  const CtGroup& g1 = q.ct.groups[1];
  EXPECT_EQ(g1.weights->strategy, "channel");
  ASSERT_TRUE(g1.input_activations);
  EXPECT_EQ(g1.input_activations->dynamic, "true");
  EXPECT_EQ(q.ct.ignore, std::vector<std::string>{"lm_head"});
}

TEST(QuantConfig, RefusesMalformedAndUnknown) {
  auto err = [](const std::string& text) {
    try {
      parse_quant_config(text, "cfg.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(err(R"({"quant_method": "awq", "bits": 4})").find("awq"), std::string::npos);
  EXPECT_NE(err(R"({"quant_method": "fp8"})").find("not supported"), std::string::npos);
  EXPECT_NE(err(R"({"bits": "4"})").find("\"bits\""), std::string::npos);
  EXPECT_NE(err(R"({"group_size": 0})").find("group_size"), std::string::npos);
  EXPECT_NE(err(R"({"quant_method": "compressed-tensors"})").find("config_groups"), std::string::npos);
  EXPECT_NE(err(R"({"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": []}}})").find("targets"),
            std::string::npos);
  EXPECT_NE(err("{").find("invalid JSON"), std::string::npos);
}

TEST(QuantConfig, FloatBlockStructure) {
  QuantConfig q = parse_quant_config(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
      "quantization_status": "compressed", "config_groups": {"group_0": {"targets": ["Linear"], "weights":
      {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128], "symmetric": true,
       "dynamic": false}}, "group_1": {"targets": ["lm_head"], "weights": {"num_bits": 4, "type": "float",
       "strategy": "tensor_group", "group_size": 16, "block_structure": null}}}})",
                                     "qc");
  ASSERT_EQ(q.ct.groups.size(), 2u);
  EXPECT_EQ(q.ct.groups[0].weights->type, "float");
  EXPECT_EQ(q.ct.groups[0].weights->block_structure, (std::vector<int64_t>{128, 128}));
  EXPECT_TRUE(q.ct.groups[1].weights->block_structure.empty());
  EXPECT_EQ(q.ct.groups[1].weights->strategy, "tensor_group");
  EXPECT_EQ(q.ct.groups[1].weights->group_size, 16);
  try {
    parse_quant_config(R"({"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": ["Linear"],
        "weights": {"num_bits": 8, "type": "float", "block_structure": [128]}}}})", "cfg.json");
    ADD_FAILURE() << "accepted a one-element block_structure";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("block_structure"), std::string::npos);
  }
}

TEST(QuantConfig, TargetMatching) {
  EXPECT_TRUE(ct_target_matches("Linear", "model.layers.0.mlp.up_proj", true));
  EXPECT_FALSE(ct_target_matches("Linear", "model.embed_tokens", false));
  EXPECT_TRUE(ct_target_matches("lm_head", "lm_head", true));
  EXPECT_FALSE(ct_target_matches("lm_head", "model.lm_head", true));
  // re: is Python re.match: anchored at the start, not at the end.
  EXPECT_TRUE(ct_target_matches("re:.*self_attn\\.(q|k)_proj$", "model.layers.3.self_attn.k_proj", true));
  EXPECT_FALSE(ct_target_matches("re:.*self_attn\\.(q|k)_proj$", "model.layers.3.self_attn.v_proj", true));
  EXPECT_TRUE(ct_target_matches("re:model.layers.1", "model.layers.12.mlp.down_proj", true));
  EXPECT_FALSE(ct_target_matches("re:layers", "model.layers.1.mlp.down_proj", true));
  EXPECT_THROW(ct_target_matches("re:(", "x", true), Error);
}

TEST(QuantConfig, PackedFieldFollowsTheSpecExamples) {
  // quant_formats.md §2.6: 4-bit codes [15,0,10,6,8,8,12,7] pack to 0x7C886A0F.
  const uint32_t w = 0x7C886A0Fu;
  const uint32_t want[8] = {15, 0, 10, 6, 8, 8, 12, 7};
  for (int j = 0; j < 8; ++j) EXPECT_EQ(packed_field(w, 4, j), want[j]);
  // 8-bit codes [0x01, 0x80, 0xFF, 0x7F] pack to 0x7FFF8001.
  const uint32_t want8[4] = {0x01, 0x80, 0xFF, 0x7F};
  for (int j = 0; j < 4; ++j) EXPECT_EQ(packed_field(0x7FFF8001u, 8, j), want8[j]);
  // v1 sym zeros: 0x77777777 is z - 1 = 7 in every field.
  for (int j = 0; j < 8; ++j) EXPECT_EQ(packed_field(0x77777777u, 4, j), 7u);
}

}  // namespace
}  // namespace blockspec
