// config_from_gguf, the GGUF -> HF name map, llama Q/K row order and the
// tokenizer metadata, on toy model headers written by gguf-py's GGUFWriter
// (scripts/make_gguf_golden.py).
#include <gtest/gtest.h>

#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "base/error.h"
#include "formats/gguf.h"
#include "formats/gguf_dequant.h"
#include "formats/gguf_model.h"

namespace blockspec {
namespace {

std::string fixture(const std::string& name) { return std::string(BS_SOURCE_DIR) + "/tests/fixtures/gguf/" + name; }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(GgufModel, LlamaConfig) {
  GgufFile f(fixture("tiny_llama.gguf"));
  ModelConfig c = config_from_gguf(f);
  EXPECT_EQ(c.arch, Arch::kLlama);
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.hidden_size, 8);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.intermediate_size, 16);
  EXPECT_EQ(c.n_heads, 2);
  EXPECT_EQ(c.n_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_EQ(c.vocab_size, 6);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);  // the decimal, not the widened float32
  EXPECT_EQ(c.rope.theta, 10000.0);
  EXPECT_EQ(c.rope.type, RopeType::kLinear);
  EXPECT_EQ(c.rope.factor, 2.0);
  EXPECT_EQ(c.rope.partial_rotary_factor, 1.0);
  EXPECT_TRUE(c.tie_word_embeddings);  // no output.weight
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{4}));
  EXPECT_EQ(c.bos_token_id, 3);
  EXPECT_TRUE(needs_qk_unpermute(f));
}

TEST(GgufModel, Qwen2Config) {
  GgufFile f(fixture("tiny_qwen2.gguf"));
  ModelConfig c = config_from_gguf(f);
  EXPECT_EQ(c.arch, Arch::kQwen2);
  EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.rope.type, RopeType::kYarn);
  EXPECT_EQ(c.rope.factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 32768);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.attention_out_bias);
  EXPECT_FALSE(needs_qk_unpermute(f));
}

TEST(GgufModel, GetterErrorsNameFileAndKey) {
  GgufFile f(fixture("tiny_llama.gguf"));
  std::string path = fixture("tiny_llama.gguf");
  EXPECT_EQ(error_of([&] { f.get_int("qwen2.block_count"); }),
            path + ": metadata key \"qwen2.block_count\" missing");
  EXPECT_EQ(error_of([&] { f.get_int("general.architecture"); }),
            path + ": metadata key \"general.architecture\" has type string, expected an integer");
  EXPECT_EQ(error_of([&] { f.get_string("llama.block_count"); }),
            path + ": metadata key \"llama.block_count\" has type uint32, expected string");
  EXPECT_EQ(error_of([&] { f.get_float("llama.block_count"); }),
            path + ": metadata key \"llama.block_count\" has type uint32, expected float32 or float64");
  EXPECT_EQ(error_of([&] { f.get_string_array("tokenizer.ggml.token_type"); }),
            path + ": metadata key \"tokenizer.ggml.token_type\" has type array[int32], expected array[string]");
  EXPECT_EQ(error_of([&] { f.tensor_info("blk.9.attn_q.weight"); }).rfind(path + ": tensor \"blk.9.attn_q.weight\" not found", 0), 0u);
  EXPECT_FALSE(f.find_int("llama.nope").has_value());
  EXPECT_EQ(f.find_int("llama.block_count"), 2);
}

TEST(GgufModel, TokenizerMetadata) {
  GgufTokenizerData t = gguf_tokenizer(GgufFile(fixture("tiny_qwen2.gguf")));
  EXPECT_EQ(t.model, "gpt2");
  EXPECT_EQ(t.pre, "qwen2");
  EXPECT_EQ(t.tokens, (std::vector<std::string>{"a", "b", "ab", "<s>", "</s>", "<pad>"}));
  EXPECT_EQ(t.token_types, (std::vector<int32_t>{1, 1, 1, 3, 3, 3}));
  EXPECT_EQ(t.merges, (std::vector<std::string>{"a b"}));
  EXPECT_EQ(t.bos_token_id, 3);
  EXPECT_EQ(t.eos_token_id, 4);
  EXPECT_EQ(t.padding_token_id, 5);
  EXPECT_FALSE(t.unknown_token_id.has_value());
  EXPECT_EQ(t.chat_template, "{{ messages }}");
}

TEST(GgufModel, NameMap) {
  EXPECT_EQ(gguf_to_hf_name("token_embd.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(gguf_to_hf_name("output_norm.weight"), "model.norm.weight");
  EXPECT_EQ(gguf_to_hf_name("output.weight"), "lm_head.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.0.attn_norm.weight"), "model.layers.0.input_layernorm.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.12.attn_q.weight"), "model.layers.12.self_attn.q_proj.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.3.attn_k.bias"), "model.layers.3.self_attn.k_proj.bias");
  EXPECT_EQ(gguf_to_hf_name("blk.3.attn_v.weight"), "model.layers.3.self_attn.v_proj.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.3.attn_output.weight"), "model.layers.3.self_attn.o_proj.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.3.attn_q_norm.weight"), "model.layers.3.self_attn.q_norm.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.3.ffn_norm.weight"), "model.layers.3.post_attention_layernorm.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.3.ffn_gate.weight"), "model.layers.3.mlp.gate_proj.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.3.ffn_up.weight"), "model.layers.3.mlp.up_proj.weight");
  EXPECT_EQ(gguf_to_hf_name("blk.3.ffn_down.weight"), "model.layers.3.mlp.down_proj.weight");
  EXPECT_FALSE(gguf_to_hf_name("rope_freqs.weight"));
  EXPECT_FALSE(gguf_to_hf_name("blk.x.attn_q.weight"));
  EXPECT_FALSE(gguf_to_hf_name("blk.1.attn_qq.weight"));
  // Every tensor of the toy models maps.
  for (const char* name : {"tiny_llama.gguf", "tiny_qwen2.gguf"}) {
    GgufFile f(fixture(name));
    for (const auto& t : f.tensors()) EXPECT_TRUE(gguf_to_hf_name(t.name)) << t.name;
  }
}

// LlamaModel.permute (convert_hf_to_gguf.py) on HF rows, written out for
// 2 heads of head_dim 4: HF rows per head are [x0 x1 | y0 y1] (rotate-half
// pairs (x_i, y_i)); the converter interleaves them to [x0 y0 x1 y1].
TEST(GgufModel, UnpermuteLlamaQkRows) {
  const int64_t n_heads = 2, hd = 4, n_rows = n_heads * hd, row_bytes = 3;
  // hf_to_gguf[r] = HF row that the converter put at GGUF row r.
  const std::vector<int64_t> hf_of_gguf_row = {0, 2, 1, 3, 4, 6, 5, 7};
  std::vector<uint8_t> hf(n_rows * row_bytes), gguf_rows(n_rows * row_bytes), back(n_rows * row_bytes);
  std::iota(hf.begin(), hf.end(), 0);
  for (int64_t r = 0; r < n_rows; ++r)
    std::copy_n(hf.begin() + hf_of_gguf_row[r] * row_bytes, row_bytes, gguf_rows.begin() + r * row_bytes);
  unpermute_llama_qk_rows(gguf_rows.data(), back.data(), n_rows, row_bytes, n_heads);
  EXPECT_EQ(back, hf);
  // head_dim 8, one head: GGUF row 2i+s <- HF row s*4+i.
  std::vector<uint8_t> g8 = {0, 4, 1, 5, 2, 6, 3, 7}, h8(8);
  unpermute_llama_qk_rows(g8.data(), h8.data(), 8, 1, 1);
  EXPECT_EQ(h8, (std::vector<uint8_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_NE(error_of([&] { unpermute_llama_qk_rows(g8.data(), h8.data(), 6, 1, 2); }).find("even size"),
            std::string::npos);
}

TEST(GgufModel, DequantizeRejectsUnsupportedType) {
  std::vector<uint8_t> block(66);
  std::vector<float> out(256);
  EXPECT_FALSE(gguf_can_dequantize(GgmlType::kIQ2_XXS));
  EXPECT_NE(error_of([&] { dequantize_gguf(GgmlType::kIQ2_XXS, block.data(), out.data(), 256); }).find("IQ2_XXS"),
            std::string::npos);
}

}  // namespace
}  // namespace blockspec
