// The Qwen3.5 / 3.6 / 3.8 tokenizer (data/tokenizers/qwen3.5/tokenizer.json,
// made from the published tiktoken ranks by scripts/make_qwen35_tokenizer.py
// as transformers' converter makes it) against tiktoken itself: the two
// vectors of hybrid.md §9.1 (Thai marks exercise \p{M} in the pre-tokenizer
// regex; chat specials matched whole before BPE), and 2.5M tokens of the
// golden corpus, token for token (per-document hashes, full ids for a subset
// so a mismatch shows where), with HF's decode and round trips.
#include <gtest/gtest.h>

#include <cstring>

#include "golden_corpus.h"
#include "tokenizer/tokenizer.h"

namespace blockspec {
namespace {

std::string hex64(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

struct Fixture {
  nlohmann::json meta;
  std::vector<int32_t> ids;
  std::vector<golden::Document> docs;
  Tokenizer tok;
};

const Fixture& fixture() {
  static const Fixture f = [] {
    const std::string dir = std::string(BS_SOURCE_DIR) + "/tests/fixtures/tokenizer_qwen35";
    Fixture f{nlohmann::json::parse(read_text_file(dir + "/golden.json")), {}, golden::shared_documents(),
              Tokenizer::from_file(golden::shared_data_dir() + "/tokenizers/qwen3.5/tokenizer.json")};
    const std::string blob = read_text_file(dir + "/golden_ids.bin");
    f.ids.resize(blob.size() / 4);
    std::memcpy(f.ids.data(), blob.data(), f.ids.size() * 4);
    auto syn = golden::synthetic_documents();
    f.docs.insert(f.docs.end(), syn.begin(), syn.end());
    return f;
  }();
  return f;
}

TEST(Qwen35Tokenizer, VocabularyAndSpecials) {
  const Tokenizer& t = fixture().tok;
  EXPECT_EQ(t.vocab_size(), 248077);  // 248,044 ranks + 33 specials (embedding rows are padded to 248,320)
  for (int32_t id = 248044; id < 248077; ++id) EXPECT_TRUE(t.is_special(id)) << id;
  EXPECT_FALSE(t.is_special(248043));
  EXPECT_EQ(t.encode("<think>"), (std::vector<int32_t>{248068}));
  EXPECT_EQ(t.encode("<|audio_start|>"), (std::vector<int32_t>{248070}));  // the DFlash mask token
}

TEST(Qwen35Tokenizer, HybridDocVectors) {
  const Fixture& f = fixture();
  for (const auto& v : f.meta.at("vectors")) {
    const std::string text = v.at("text").get<std::string>();
    EXPECT_EQ(f.tok.encode(text), v.at("ids").get<std::vector<int32_t>>()) << text;
  }
}

TEST(Qwen35Tokenizer, CorpusMatchesTiktoken) {
  const Fixture& f = fixture();
  const auto& docs = f.meta.at("docs");
  ASSERT_EQ(f.docs.size(), docs.size());
  size_t n_bad = 0, n_tokens = 0, n_round_trips = 0;
  for (size_t i = 0; i < docs.size() && n_bad < 10; ++i) {
    const auto& d = docs[i];
    const std::vector<int32_t> ids = f.tok.encode(f.docs[i].text);
    n_tokens += ids.size();
    const size_t want_n = d.at("n_tokens").get<size_t>();
    if (ids.size() != want_n || hex64(golden::fnv1a64_ids(ids)) != d.at("ids_fnv").get<std::string>()) {
      ++n_bad;
      std::string where;
      if (d.contains("ids_offset")) {
        const size_t off = d.at("ids_offset").get<size_t>();
        size_t k = 0;
        while (k < ids.size() && k < want_n && ids[k] == f.ids[off + k]) ++k;
        where = str_cat(" (first difference at token ", k, ")");
      }
      ADD_FAILURE() << f.docs[i].name << ": " << ids.size() << " tokens, tiktoken " << want_n << where;
      continue;
    }
    const std::string text = f.tok.decode(ids);
    EXPECT_EQ(hex64(golden::fnv1a64(text.data(), text.size())), d.at("decode_fnv").get<std::string>())
        << f.docs[i].name << ": decode differs from HF's";
    if (d.at("round_trips").get<bool>()) {
      ++n_round_trips;
      EXPECT_EQ(text, f.docs[i].text) << f.docs[i].name;
    }
  }
  EXPECT_EQ(n_bad, 0u);
  EXPECT_EQ(n_tokens, f.meta.at("n_tokens").get<size_t>());
  EXPECT_GT(n_round_trips, 100u);
}

}  // namespace
}  // namespace blockspec
