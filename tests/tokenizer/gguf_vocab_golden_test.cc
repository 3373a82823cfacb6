// Tokenizer::from_gguf_vocab against HF on the real GGUF vocabularies of
// SmolLM2-135M-Instruct (pre "smollm") and Qwen2.5-Coder-1.5B-Instruct (pre
// "qwen2"), over the corpus of tokenizer_golden_test.cc. The metadata and the
// golden ids come from scripts/make_gguf_tokenizer_golden.py (see its
// docstring for why the SmolLM2 reference corrects HF's pre-tokenizer).
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <set>

#include "golden_corpus.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_text.h"

namespace blockspec {
namespace {

std::string gguf_fixture_dir() { return std::string(BS_SOURCE_DIR) + "/tests/fixtures/tokenizer_gguf"; }

std::string hex64(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// FNV-1a 64 over each string's bytes and a NUL, as the script hashes lists.
std::string fnv_list(const std::vector<std::string>& xs) {
  std::string all;
  for (const auto& x : xs) {
    all += x;
    all.push_back('\0');
  }
  return hex64(golden::fnv1a64(all.data(), all.size()));
}

std::optional<int32_t> opt_id(const nlohmann::json& j) {
  if (j.is_null()) return std::nullopt;
  return j.get<int32_t>();
}

// The fixture as a GgufVocab; a "base" vocabulary is rebuilt from the shared
// Qwen3 tokenizer.json and checked against the file's hashes.
GgufVocab load_vocab(const std::string& model) {
  std::string path = gguf_fixture_dir() + "/" + model + ".vocab.json";
  auto fx = nlohmann::json::parse(read_text_file(path));
  GgufVocab v;
  v.model = fx.at("model").get<std::string>();
  v.pre = fx.at("pre").get<std::string>();
  if (fx.contains("base")) {
    auto tj = nlohmann::json::parse(
        read_text_file(golden::shared_data_dir() + "/tokenizers/qwen3/tokenizer.json"));
    const auto& vocab = tj.at("model").at("vocab");
    size_t nb = fx.at("base").at("n_tokens").get<size_t>();
    EXPECT_EQ(vocab.size(), nb);
    v.tokens.resize(vocab.size());
    for (auto it = vocab.begin(); it != vocab.end(); ++it) v.tokens.at(it->get<size_t>()) = it.key();
    for (const auto& t : fx.at("tokens_tail")) v.tokens.push_back(t.get<std::string>());
    for (const auto& m : tj.at("model").at("merges"))
      v.merges.push_back(m.is_string() ? m.get<std::string>()
                                       : m[0].get<std::string>() + " " + m[1].get<std::string>());
  } else {
    v.tokens = fx.at("tokens").get<std::vector<std::string>>();
    v.merges = fx.at("merges").get<std::vector<std::string>>();
  }
  EXPECT_EQ(v.tokens.size(), fx.at("n_tokens").get<size_t>()) << path;
  EXPECT_EQ(v.merges.size(), fx.at("n_merges").get<size_t>()) << path;
  EXPECT_EQ(fnv_list(v.tokens), fx.at("tokens_fnv").get<std::string>()) << path << ": tokens";
  EXPECT_EQ(fnv_list(v.merges), fx.at("merges_fnv").get<std::string>()) << path << ": merges";
  v.token_types.assign(v.tokens.size(), int32_t(GgufTokenType::kNormal));
  for (auto it = fx.at("token_types_sparse").begin(); it != fx.at("token_types_sparse").end(); ++it)
    for (const auto& id : *it) v.token_types.at(id.get<size_t>()) = std::stoi(it.key());
  const auto& sp = fx.at("special_ids");
  v.bos = opt_id(sp.at("bos"));
  v.eos = opt_id(sp.at("eos"));
  v.pad = opt_id(sp.at("pad"));
  v.unk = opt_id(sp.at("unk"));
  v.add_bos = fx.at("add_bos").is_boolean() && fx.at("add_bos").get<bool>();
  v.add_eos = fx.at("add_eos").is_boolean() && fx.at("add_eos").get<bool>();
  return v;
}

const std::vector<golden::Document>& corpus() {
  static const std::vector<golden::Document> docs = [] {
    auto d = golden::shared_documents();
    auto syn = golden::synthetic_documents();
    d.insert(d.end(), syn.begin(), syn.end());
    return d;
  }();
  return docs;
}

struct Case {
  std::string model;
  GgufVocab vocab;
  Tokenizer tok;
  nlohmann::json golden;
};

const Case& load_case(const std::string& model) {
  // Built once per model per binary; const afterwards.
  static std::map<std::string, std::unique_ptr<Case>> cache;
  auto& c = cache[model];
  if (!c) {
    GgufVocab v = load_vocab(model);
    Tokenizer t = Tokenizer::from_gguf_vocab(v, model + ".vocab.json");
    auto g = nlohmann::json::parse(read_text_file(gguf_fixture_dir() + "/" + model + ".golden.json"));
    c.reset(new Case{model, std::move(v), std::move(t), std::move(g)});
  }
  return *c;
}

std::string show_ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

class GgufVocabGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufVocabGolden, ExtraTextsMatchHfExactly) {
  const Case& c = load_case(GetParam());
  for (const auto& x : c.golden.at("extra")) {
    std::string text = x.at("text").get<std::string>();
    auto want = x.at("ids").get<std::vector<int32_t>>();
    auto got = c.tok.encode(text);
    EXPECT_EQ(got, want) << c.model << ": \"" << text << "\"\n  HF:   " << show_ids(want)
                         << "\n  ours: " << show_ids(got);
    // False where the text has bytes without a token (SmolLM2), which encode drops.
    if (x.at("round_trips").get<bool>()) {
      EXPECT_EQ(c.tok.decode(got), text) << c.model;
    }
  }
}

TEST_P(GgufVocabGolden, CorpusMatchesHf) {
  const Case& c = load_case(GetParam());
  const auto& docs = c.golden.at("docs");
  const auto& texts = corpus();
  ASSERT_EQ(texts.size(), docs.size()) << "corpus rules of golden_corpus.h and the script disagree";
  size_t n_bad = 0, n_tokens = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    const auto& d = docs[i];
    ASSERT_EQ(texts[i].name, d.at("name").get<std::string>());
    std::vector<int32_t> ids = c.tok.encode(texts[i].text);
    n_tokens += ids.size();
    std::string h = hex64(golden::fnv1a64_ids(ids));
    if (ids.size() != d.at("n_tokens").get<size_t>() || h != d.at("ids_fnv").get<std::string>()) {
      ADD_FAILURE() << c.model << ": " << texts[i].name << ": expected " << d.at("n_tokens")
                    << " tokens with hash " << d.at("ids_fnv") << ", found " << ids.size()
                    << " with hash " << h;
      if (++n_bad >= 10) break;
      continue;
    }
    std::string text = c.tok.decode(ids);
    EXPECT_EQ(hex64(golden::fnv1a64(text.data(), text.size())), d.at("decode_fnv").get<std::string>())
        << c.model << ": " << texts[i].name << ": decode differs from HF's";
    if (d.at("round_trips").get<bool>()) {
      EXPECT_TRUE(text == texts[i].text) << texts[i].name;
    }
  }
  EXPECT_EQ(n_bad, 0u);
  std::printf("[ info ] %s: %zu documents, %zu tokens; HF's unmodified GGUF conversion differs on %zu\n",
              c.model.c_str(), docs.size(), n_tokens, c.golden.at("hf_gguf_differs").size());
}

TEST_P(GgufVocabGolden, SpecialTokensFollowTokenTypes) {
  const Case& c = load_case(GetParam());
  const GgufVocab& v = c.vocab;
  EXPECT_EQ(c.tok.vocab_size(), int32_t(v.tokens.size()));
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    bool control = v.token_types[id] == int32_t(GgufTokenType::kControl);
    ASSERT_EQ(c.tok.is_special(int32_t(id)), control) << c.model << " id " << id << " " << v.tokens[id];
    if (control || v.token_types[id] == int32_t(GgufTokenType::kUserDefined)) {
      EXPECT_EQ(c.tok.encode(v.tokens[id]), std::vector<int32_t>{int32_t(id)}) << v.tokens[id];
      EXPECT_EQ(c.tok.token_id(v.tokens[id]), int32_t(id));
    }
  }
  ASSERT_TRUE(v.eos.has_value());
  EXPECT_EQ(c.tok.token_bytes(*v.eos), "<|im_end|>") << c.model;
}

INSTANTIATE_TEST_SUITE_P(Models, GgufVocabGolden,
                         ::testing::Values("smollm2", "qwen2.5-coder-1.5b"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

// Qwen2.5's GGUF holds the same BPE vocabulary and merges as the Qwen3
// tokenizer.json; the two tokenizers agree except where the GGUF's missing
// NFC normalizer or Qwen3's extra added tokens (<think>, <tool_response>)
// matter: exactly the documents the script listed.
TEST(GgufVocabGoldenQwen, EqualsQwen3TokenizerJsonOutsideListedDocuments) {
  const Case& c = load_case("qwen2.5-coder-1.5b");
  Tokenizer json_tok =
      Tokenizer::from_file(golden::shared_data_dir() + "/tokenizers/qwen3/tokenizer.json");
  std::set<std::string> listed;
  for (const auto& n : c.golden.at("tokenizer_json_differs")) listed.insert(n.get<std::string>());
  size_t n_equal = 0, n_equal_after_nfc = 0;
  for (const auto& d : corpus()) {
    std::vector<int32_t> want = json_tok.encode(d.text);
    bool equal = c.tok.encode(d.text) == want;
    EXPECT_EQ(equal, !listed.count(d.name)) << d.name;
    n_equal += equal;
    bool qwen3_only_tokens = false;
    for (const char* t : {"<think>", "</think>", "<tool_response>", "</tool_response>"})
      qwen3_only_tokens |= d.text.find(t) != std::string::npos;
    if (!equal && !qwen3_only_tokens) {
      // Then the missing normalizer is the whole difference.
      EXPECT_EQ(c.tok.encode(tok::normalize(d.text, tok::NormalForm::kNfc)), want) << d.name;
      ++n_equal_after_nfc;
    }
  }
  std::printf("[ info ] qwen2.5 GGUF tokenizer == Qwen3 tokenizer.json on %zu of %zu documents, "
              "%zu more after NFC; the rest hold tokens only Qwen3 has\n",
              n_equal, corpus().size(), n_equal_after_nfc);
}

}  // namespace
}  // namespace blockspec
