// The real GGUF models (scripts/fetch_models.sh): the reader opens them, the
// config matches the published model, and every tensor dequantizes to finite
// values. Skipped when the model is not cached.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "formats/gguf.h"
#include "formats/gguf_dequant.h"
#include "formats/gguf_model.h"

namespace blockspec {
namespace {

std::string cached_model(const std::string& name) {
  const char* cache = std::getenv("BLOCKSPEC_CACHE");
  const char* home = std::getenv("HOME");
  std::string dir = cache ? cache : std::string(home ? home : "") + "/.cache/blockspec";
  std::string path = dir + "/models/" + name + ".gguf";
  return std::filesystem::exists(path) ? path : "";
}

std::map<std::string, int> type_histogram(const GgufFile& f) {
  std::map<std::string, int> h;
  for (const auto& t : f.tensors()) ++h[ggml_type_name(t.type)];
  std::string line;
  for (const auto& [name, n] : h) line += " " + name + ":" + std::to_string(n);
  std::printf("%s: %zu tensors,%s\n", f.path().c_str(), f.tensors().size(), line.c_str());
  return h;
}

// Dequantizes every tensor (one at a time) and checks that all values are finite.
void expect_all_finite(const GgufFile& f) {
  for (const auto& t : f.tensors()) {
    Tensor x = dequantize_gguf_tensor(f, t.name);
    const float* p = x.ptr<float>();
    int64_t bad = 0;
    for (int64_t i = 0; i < x.numel(); ++i) bad += !std::isfinite(p[i]);
    EXPECT_EQ(bad, 0) << t.name;
  }
}

TEST(GgufReal, SmolLM2) {
  std::string path = cached_model("smollm2");
  ASSERT_FALSE(path.empty()) << "the model is missing: run scripts/fetch_models.sh smollm2";
  GgufFile f(path);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  auto h = type_histogram(f);
  EXPECT_EQ(h, (std::map<std::string, int>{{"F32", 61}, {"Q4_1", 210}, {"Q8_0", 1}}));
  ModelConfig c = config_from_gguf(f);
  EXPECT_EQ(c.arch, Arch::kLlama);
  EXPECT_EQ(c.n_layers, 30);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.n_heads, 9);
  EXPECT_EQ(c.n_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.rope.theta, 100000.0);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{2}));
  EXPECT_TRUE(needs_qk_unpermute(f));
  GgufTokenizerData tok = gguf_tokenizer(f);
  EXPECT_EQ(tok.model, "gpt2");
  EXPECT_EQ(tok.pre, "smollm");
  EXPECT_EQ(tok.tokens.size(), 49152u);
  EXPECT_EQ(tok.merges.size(), 48900u);
  EXPECT_FALSE(tok.chat_template.empty());
  for (const auto& t : f.tensors()) EXPECT_TRUE(gguf_to_hf_name(t.name)) << t.name;
  expect_all_finite(f);
}

TEST(GgufReal, Qwen25Coder15B) {
  std::string path = cached_model("qwen2.5-coder-1.5b");
  ASSERT_FALSE(path.empty()) << "the model is missing: run scripts/fetch_models.sh qwen2.5-coder-1.5b";
  GgufFile f(path);
  EXPECT_EQ(f.get_string("general.architecture"), "qwen2");
  EXPECT_EQ(f.get_string("general.name"), "Qwen2.5 Coder 1.5B Instruct GGUF");
  auto h = type_histogram(f);
  EXPECT_EQ(h, (std::map<std::string, int>{{"F32", 141}, {"Q4_K", 169}, {"Q6_K", 29}}));
  ModelConfig c = config_from_gguf(f);
  EXPECT_EQ(c.arch, Arch::kQwen2);
  EXPECT_EQ(c.n_layers, 28);
  EXPECT_EQ(c.hidden_size, 1536);
  EXPECT_EQ(c.intermediate_size, 8960);
  EXPECT_EQ(c.n_heads, 12);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.vocab_size, 151936);
  // HF ties lm_head for this model, but the GGUF carries its own Q6_K output.weight.
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{151645}));
  EXPECT_FALSE(needs_qk_unpermute(f));
  GgufTokenizerData tok = gguf_tokenizer(f);
  EXPECT_EQ(tok.pre, "qwen2");
  EXPECT_EQ(tok.merges.size(), 151387u);
  EXPECT_EQ(tok.padding_token_id, 151643);
  for (const auto& t : f.tensors()) EXPECT_TRUE(gguf_to_hf_name(t.name)) << t.name;
  expect_all_finite(f);
}

}  // namespace
}  // namespace blockspec
