// Small hand-checked cases on a toy byte-level tokenizer (ids 0..255 are the
// bytes themselves, merges on top), a few Qwen3 cases checked against HF
// `tokenizers` 0.23.3, and the errors bad inputs must produce.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode_text.h"

namespace blockspec {
namespace {

using nlohmann::json;

std::string bl(std::string_view bytes) {  // raw bytes -> byte-level alphabet
  auto table = tok::make_byte_level_table();
  std::string s;
  for (char c : bytes) tok::append_utf8(s, table.byte_to_char[uint8_t(c)]);
  return s;
}

// Toy tokenizer: id b for byte b; merges a+b=256, ab+c=257, " "+a=258,
// b+c=259 (given as a pair, the other form of `merges`).
json toy_json() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[bl(std::string(1, char(b)))] = b;
  vocab["ab"] = 256;
  vocab["abc"] = 257;
  vocab[bl(" a")] = 258;
  vocab["bc"] = 259;
  json j;
  j["version"] = "1.0";
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false},
                        {"trim_offsets", false}, {"use_regex", false}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["model"] = {{"type", "BPE"}, {"vocab", vocab},
                {"merges", json::array({"a b", "ab c", bl(" ") + " a", json::array({"b", "c"})})}};
  auto added = [](int id, const char* content, bool special, bool lstrip, bool rstrip, bool single) {
    return json{{"id", id}, {"content", content}, {"special", special}, {"lstrip", lstrip},
                {"rstrip", rstrip}, {"single_word", single}, {"normalized", !special}};
  };
  j["added_tokens"] = json::array({added(300, "<x>", true, false, false, false),
                                   added(301, "yo", false, false, false, true),
                                   added(302, "<l>", true, true, false, false),
                                   added(303, "<r>", true, false, true, false)});
  return j;
}

Tokenizer toy() { return Tokenizer::from_json(toy_json().dump(), "toy.json"); }

using Ids = std::vector<int32_t>;

TEST(Tokenizer, MergesApplyByRankLeftmostFirst) {
  Tokenizer t = toy();
  EXPECT_EQ(t.encode("abc"), (Ids{257}));         // a+b (rank 0) before b+c (rank 3)
  EXPECT_EQ(t.encode("bcab"), (Ids{259, 256}));   // ab first, then bc
  EXPECT_EQ(t.encode(" a"), (Ids{258}));
  EXPECT_EQ(t.encode("aaab"), (Ids{'a', 'a', 256}));
  EXPECT_EQ(t.encode(""), Ids{});
  EXPECT_EQ(t.vocab_size(), 304);
}

TEST(Tokenizer, AddedTokensAndTheirFlags) {
  Tokenizer t = toy();
  EXPECT_EQ(t.encode("a<x>b"), (Ids{'a', 300, 'b'}));
  EXPECT_EQ(t.encode("<x><x>"), (Ids{300, 300}));
  // single_word: "yo" alone matches, inside "you" it does not.
  EXPECT_EQ(t.encode("yo you"), (Ids{301, ' ', 'y', 'o', 'u'}));
  EXPECT_EQ(t.encode("a  <l>b"), (Ids{'a', 302, 'b'}));  // lstrip eats the spaces
  EXPECT_EQ(t.encode("<r> \t b"), (Ids{303, 'b'}));       // rstrip too
  EXPECT_TRUE(t.is_special(300));
  EXPECT_FALSE(t.is_special(301));
  EXPECT_EQ(t.token_id("<x>"), 300);
  EXPECT_EQ(t.token_id("abc"), 257);
  EXPECT_EQ(t.token_id(bl(" a")), 258);
  EXPECT_EQ(t.token_id("nope"), std::nullopt);
}

TEST(Tokenizer, NfcBeforeTheModel) {
  Tokenizer t = toy();
  // e + COMBINING ACUTE composes to U+00E9 = C3 A9.
  EXPECT_EQ(t.encode("e\xCC\x81"), (Ids{0xC3, 0xA9}));
}

TEST(Tokenizer, DecodeAndSkipSpecial) {
  Tokenizer t = toy();
  EXPECT_EQ(t.decode({257, 300, 258}), "abc<x> a");
  EXPECT_EQ(t.decode({257, 300, 258}, /*skip_special=*/true), "abc a");
  EXPECT_EQ(t.decode({9999, 'a'}), "a");  // unknown ids decode to nothing, like HF
  EXPECT_EQ(t.token_bytes(258), " a");
  EXPECT_THROW(t.token_bytes(-1), Error);
  EXPECT_EQ(t.decode(t.encode("a<x> yo\tabc\n")), "a<x> yo\tabc\n");
}

TEST(StreamDecoder, HoldsBackSplitCharacters) {
  Tokenizer t = toy();
  StreamDecoder d(t);
  EXPECT_EQ(d.push(0xE4), "");  // U+4E2D 中 = E4 B8 AD, one byte per token
  EXPECT_EQ(d.push(0xB8), "");
  EXPECT_EQ(d.push(0xAD), "\xE4\xB8\xAD");
  EXPECT_EQ(d.push('a'), "a");
  EXPECT_EQ(d.push(0xF0), "");  // 4-byte emoji U+1F600 = F0 9F 98 80
  EXPECT_EQ(d.push(0x9F), "");
  EXPECT_EQ(d.push(0x98), "");
  EXPECT_EQ(d.push(0x80), "\xF0\x9F\x98\x80");
  EXPECT_EQ(d.flush(), "");
}

TEST(StreamDecoder, InvalidBytesBecomeReplacementCharacters) {
  Tokenizer t = toy();
  StreamDecoder d(t);
  EXPECT_EQ(d.push(0xFF), "\xEF\xBF\xBD");            // never valid
  EXPECT_EQ(d.push(0xE4), "");
  EXPECT_EQ(d.push(0xB8), "");
  EXPECT_EQ(d.push('a'), "\xEF\xBF\xBD" "a");         // E4 B8 cut short: one U+FFFD
  EXPECT_EQ(d.push(0xE4), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");               // flush proves it incomplete
  StreamDecoder s(t, /*skip_special=*/true);
  EXPECT_EQ(s.push(300), "");
  EXPECT_EQ(s.push(257), "abc");
}

TEST(PreTokenizer, SplitBehaviours) {
  auto pieces = [](tok::SplitBehavior b, bool invert) {
    tok::PreTokenizerStep step;
    step.regex = std::make_shared<tok::Regex>("-", "test");
    step.behavior = b;
    step.invert = invert;
    tok::PreTokenizer pre({step});
    tok::PreTokenizeScratch scratch;
    std::vector<std::string_view> out;
    pre.split("the-final--countdown", scratch, &out);
    return std::vector<std::string>(out.begin(), out.end());
  };
  using V = std::vector<std::string>;
  using B = tok::SplitBehavior;
  // The examples of HF's Split documentation.
  EXPECT_EQ(pieces(B::kRemoved, false), (V{"the", "final", "countdown"}));
  EXPECT_EQ(pieces(B::kIsolated, false), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(pieces(B::kMergedWithPrevious, false), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(pieces(B::kMergedWithNext, false), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(pieces(B::kContiguous, false), (V{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(pieces(B::kRemoved, true), (V{"-", "-", "-"}));
}

TEST(PreTokenizer, QwenPatternPiecesAsHf) {
  // Pieces checked against HF's Split pre_tokenize_str (tokenizers 0.23.3).
  const char* pattern =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  tok::PreTokenizerStep step;
  step.regex = std::make_shared<tok::Regex>(pattern, "test");
  tok::PreTokenizer pre({step});
  tok::PreTokenizeScratch scratch;
  std::vector<std::string_view> out;
  pre.split("x'\xC5\xBFtar IT'S we'LL x'K 123  \n\n  y", scratch, &out);
  std::vector<std::string> got(out.begin(), out.end());
  // (?i) folds U+017F LONG S to 's' in Oniguruma as in PCRE2.
  EXPECT_EQ(got, (std::vector<std::string>{"x", "'\xC5\xBF", "tar", " IT", "'S", " we", "'LL", " x",
                                           "'K", " ", "1", "2", "3", "  \n\n", " ", " y"}));
}

TEST(Tokenizer, Utf8Helpers) {
  std::string out;
  EXPECT_EQ(tok::append_utf8_lossy("a\xC0\xAF" "b", true, &out), 4u);
  EXPECT_EQ(out, "a\xEF\xBF\xBD\xEF\xBF\xBD" "b");  // C0 and AF: each its own subpart
  EXPECT_EQ(tok::first_invalid_utf8("\xED\xA0\x80"), 0u);  // a surrogate
  EXPECT_EQ(tok::first_invalid_utf8("ok\xF4\x90\x80\x80"), 2u);  // > U+10FFFF
}

// ------------------------------------------------------------ bad inputs

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string load_error(const json& j) {
  return error_of([&] { Tokenizer::from_json(j.dump(), "bad.json"); });
}

TEST(TokenizerErrors, MissingFileAndInvalidJson) {
  EXPECT_NE(error_of([] { Tokenizer::from_file("/nonexistent/tokenizer.json"); })
                .find("/nonexistent/tokenizer.json"), std::string::npos);
  std::string e = error_of([] { Tokenizer::from_json("{\"model\": [", "broken.json"); });
  EXPECT_NE(e.find("broken.json"), std::string::npos) << e;
  EXPECT_NE(e.find("not valid JSON"), std::string::npos) << e;
}

TEST(TokenizerErrors, UnsupportedPartsNameTheirField) {
  struct Case {
    std::function<void(json&)> edit;
    const char* field;
  };
  std::vector<Case> cases = {
      {[](json& j) { j["model"]["type"] = "WordPiece"; }, "model.type"},
      {[](json& j) { j["model"]["dropout"] = 0.1; }, "model.dropout"},
      {[](json& j) { j["model"]["continuing_subword_prefix"] = "##"; }, "model.continuing_subword_prefix"},
      {[](json& j) { j["model"]["merges"][0] = "a q"; }, "model.merges[0]"},
      {[](json& j) { j["model"]["merges"][1] = "abc"; }, "model.merges[1]"},
      {[](json& j) { j["model"].erase("vocab"); }, "model.vocab"},
      {[](json& j) { j["normalizer"] = {{"type", "Lowercase"}}; }, "normalizer.type"},
      {[](json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }, "pre_tokenizer.type"},
      {[](json& j) { j["pre_tokenizer"] = nullptr; }, "pre_tokenizer"},
      {[](json& j) {
         j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}},
                               {"behavior", "Isolated"}};
       }, "pre_tokenizer.pattern"},
      {[](json& j) {
         j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "x"}}},
                               {"behavior", "Sideways"}};
       }, "pre_tokenizer.behavior"},
      {[](json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, "decoder.type"},
      {[](json& j) { j["added_tokens"][0].erase("id"); }, "added_tokens[0].id"},
      {[](json& j) { j["added_tokens"][1]["lstrip"] = "yes"; }, "added_tokens[1].lstrip"},
  };
  for (const auto& c : cases) {
    json j = toy_json();
    c.edit(j);
    std::string e = load_error(j);
    EXPECT_NE(e.find("bad.json"), std::string::npos) << e;
    EXPECT_NE(e.find(c.field), std::string::npos) << "expected the field " << c.field << " in: " << e;
  }
}

TEST(TokenizerErrors, EncodeRefusesInvalidUtf8) {
  Tokenizer t = toy();
  std::string e = error_of([&] { t.encode("ok\xFFno"); });
  EXPECT_NE(e.find("byte offset 2"), std::string::npos) << e;
}

// ------------------------------------------- Qwen3, checked against HF

TEST(TokenizerQwen3, CasesCheckedAgainstHf) {
  std::string path = std::string(BS_SOURCE_DIR) + "/data/tokenizers/qwen3/tokenizer.json";
  Tokenizer t = Tokenizer::from_file(path);
  EXPECT_EQ(t.vocab_size(), 151669);
  EXPECT_EQ(t.encode("it'\xC5\xBF"), (Ids{275, 6, 144815}));  // 'ſ is not 's
  EXPECT_EQ(t.encode("IT'S 'Ll"), (Ids{952, 13272, 364, 43, 75}));
  EXPECT_EQ(t.encode("  \n\n  x"), (Ids{18611, 220, 856}));
  EXPECT_EQ(t.encode("a\xC2\x85" "b"), (Ids{64, 126, 227, 65}));
  EXPECT_EQ(t.encode("<|im_start|>\xCC\x81" "e"), (Ids{151644, 53839, 68}));
  EXPECT_EQ(t.decode({151644, 9707}), "<|im_start|>Hello");
  EXPECT_EQ(t.decode({151644, 9707}, /*skip_special=*/true), "Hello");
  EXPECT_TRUE(t.is_special(151643));   // <|endoftext|>
  EXPECT_FALSE(t.is_special(151667));  // <think> is added but not special
  EXPECT_EQ(t.token_id("<think>"), 151667);
}

}  // namespace
}  // namespace blockspec
