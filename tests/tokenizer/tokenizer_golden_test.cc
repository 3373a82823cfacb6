// Token-for-token agreement with HF `tokenizers` (version pinned by
// scripts/make_tokenizer_golden.py) on a ~7 MB mixed corpus: per document
// the token count and FNV-1a hash of the ids, full ids for a subset (so a
// mismatch shows the first differing position), HF's decoded text hash,
// round trips and streaming decode.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "golden_corpus.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_text.h"

namespace blockspec {
namespace {

struct Golden {
  nlohmann::json meta;
  std::vector<int32_t> ids;  // [total full-id tokens]
  std::vector<golden::Document> docs;
};

const Golden& golden_data() {
  // Loaded once per test binary; const after construction.
  static const Golden g = [] {
    Golden g;
    std::string dir = golden::fixture_dir();
    g.meta = nlohmann::json::parse(read_text_file(dir + "/golden.json"));
    std::string blob = read_text_file(dir + "/golden_ids.bin");
    g.ids.resize(blob.size() / 4);
    std::memcpy(g.ids.data(), blob.data(), g.ids.size() * 4);
    g.docs = golden::shared_documents();
    auto syn = golden::synthetic_documents();
    g.docs.insert(g.docs.end(), syn.begin(), syn.end());
    return g;
  }();
  return g;
}

const Tokenizer& qwen3() {
  static const Tokenizer t =
      Tokenizer::from_file(golden::shared_data_dir() + "/tokenizers/qwen3/tokenizer.json");
  return t;
}

std::string hex64(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string show_ids(const Tokenizer& t, const std::vector<int32_t>& ids, size_t from, size_t to) {
  std::string s;
  for (size_t i = from; i < std::min(to, ids.size()); ++i)
    s += str_cat(ids[i], "'", t.decode({ids[i]}), "' ");
  return s;
}

TEST(TokenizerGolden, CorpusMatchesDocumentList) {
  const auto& g = golden_data();
  const auto& docs = g.meta.at("docs");
  ASSERT_EQ(g.docs.size(), docs.size())
      << "the corpus rules of golden_corpus.h and make_tokenizer_golden.py disagree";
  size_t bytes = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    ASSERT_EQ(g.docs[i].name, docs[i].at("name").get<std::string>()) << "document " << i;
    ASSERT_EQ(g.docs[i].text.size(), docs[i].at("bytes").get<size_t>()) << g.docs[i].name;
    bytes += g.docs[i].text.size();
  }
  EXPECT_GE(bytes, size_t(5) << 20) << "corpus smaller than 5 MiB";
}

TEST(TokenizerGolden, EncodeMatchesHf) {
  const auto& g = golden_data();
  const Tokenizer& tok = qwen3();
  const auto& docs = g.meta.at("docs");
  ASSERT_EQ(g.docs.size(), docs.size());
  size_t n_bad = 0, n_tokens = 0, n_bytes = 0;
  double seconds = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    const auto& d = docs[i];
    const std::string& text = g.docs[i].text;
    auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> ids = tok.encode(text);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    n_tokens += ids.size();
    n_bytes += text.size();
    size_t want_n = d.at("n_tokens").get<size_t>();
    std::string want_h = d.at("ids_fnv").get<std::string>();
    if (ids.size() == want_n && hex64(golden::fnv1a64_ids(ids)) == want_h) continue;
    ++n_bad;
    std::string detail;
    if (d.contains("ids_offset")) {
      size_t off = d.at("ids_offset").get<size_t>();
      std::vector<int32_t> want(g.ids.begin() + off, g.ids.begin() + off + want_n);
      size_t k = 0;
      while (k < ids.size() && k < want.size() && ids[k] == want[k]) ++k;
      size_t from = k >= 3 ? k - 3 : 0;
      detail = str_cat("first difference at token ", k, "\n  HF:   ", show_ids(tok, want, from, k + 5),
                       "\n  ours: ", show_ids(tok, ids, from, k + 5));
    }
    ADD_FAILURE() << g.docs[i].name << ": expected " << want_n << " tokens with hash " << want_h
                  << ", found " << ids.size() << " with hash " << hex64(golden::fnv1a64_ids(ids))
                  << "\n" << detail;
    if (n_bad >= 20) break;
  }
  EXPECT_EQ(n_bad, 0u);
  std::printf("[ info ] %zu documents, %zu bytes, %zu tokens; encode %.2f s (%.1f MB/s, informal)\n",
              docs.size(), n_bytes, n_tokens, seconds, n_bytes / 1e6 / seconds);
}

TEST(TokenizerGolden, DecodeMatchesHfAndRoundTrips) {
  const auto& g = golden_data();
  const Tokenizer& tok = qwen3();
  const auto& docs = g.meta.at("docs");
  size_t n_round_trips = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    const auto& d = docs[i];
    if (!d.contains("ids_offset")) continue;  // decode the HF ids themselves
    size_t off = d.at("ids_offset").get<size_t>(), n = d.at("n_tokens").get<size_t>();
    std::vector<int32_t> ids(g.ids.begin() + off, g.ids.begin() + off + n);
    std::string text = tok.decode(ids);
    EXPECT_EQ(hex64(golden::fnv1a64(text.data(), text.size())), d.at("decode_fnv").get<std::string>())
        << g.docs[i].name << ": decode differs from HF's";
    if (d.at("round_trips").get<bool>()) {
      ++n_round_trips;
      EXPECT_TRUE(text == g.docs[i].text) << g.docs[i].name << ": decode(encode(x)) != x";
    }
  }
  EXPECT_GT(n_round_trips, 10u);
}

TEST(TokenizerGolden, StreamingDecodeEqualsDecode) {
  const auto& g = golden_data();
  const Tokenizer& tok = qwen3();
  for (const auto& doc : g.docs) {
    if (doc.name.rfind("synthetic/", 0) != 0) continue;  // the multi-byte heavy ones
    std::vector<int32_t> ids = tok.encode(doc.text);
    StreamDecoder dec(tok);
    std::string joined;
    for (int32_t id : ids) {
      std::string chunk = dec.push(id);
      // Every chunk must be complete UTF-8 on its own.
      ASSERT_EQ(tok::first_invalid_utf8(chunk), chunk.size()) << doc.name;
      joined += chunk;
    }
    joined += dec.flush();
    EXPECT_TRUE(joined == tok.decode(ids)) << doc.name;
  }
}

// The edit of gpt2_style_variant() in the script: the GPT-2 path (ByteLevel
// with use_regex and add_prefix_space) and an added token with every flag.
Tokenizer gpt2_style_variant() {
  std::string path = golden::shared_data_dir() + "/tokenizers/qwen3/tokenizer.json";
  auto j = nlohmann::json::parse(read_text_file(path));
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true},
                        {"use_regex", true}};
  j["added_tokens"].push_back({{"id", 151669}, {"content", "hello world"}, {"single_word", true},
                               {"lstrip", true}, {"rstrip", true}, {"normalized", true},
                               {"special", false}});
  return Tokenizer::from_json(j.dump(), path + " (gpt2-style variant)");
}

TEST(TokenizerGolden, Gpt2StyleVariantMatchesHf) {
  const auto& g = golden_data();
  const auto& v = g.meta.at("gpt2_style_variant");
  std::vector<std::string> texts;
  for (const auto& d : g.docs)
    if (d.name.rfind("synthetic/", 0) == 0) texts.push_back(d.text);
  for (const auto& e : v.at("extra")) texts.push_back(e.get<std::string>());
  const auto& want = v.at("docs");
  ASSERT_EQ(texts.size(), want.size());
  Tokenizer tok = gpt2_style_variant();
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<int32_t> ids = tok.encode(texts[i]);
    EXPECT_EQ(ids.size(), want[i].at("n_tokens").get<size_t>()) << "variant text " << i;
    EXPECT_EQ(hex64(golden::fnv1a64_ids(ids)), want[i].at("ids_fnv").get<std::string>())
        << "variant text " << i;
  }
}

}  // namespace
}  // namespace blockspec
