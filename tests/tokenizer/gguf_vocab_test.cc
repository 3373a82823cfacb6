// Tokenizer::from_gguf_vocab on a toy vocabulary: the pre-tokenizer chosen
// by name, token types, bytes without a token, and the errors bad metadata
// must produce. The real vocabularies are checked against HF in
// gguf_vocab_golden_test.cc.
#include "tokenizer/gguf_vocab.h"

#include <gtest/gtest.h>

#include "base/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_text.h"

namespace blockspec {
namespace {

std::string bl(std::string_view bytes) {  // raw bytes -> byte-level alphabet
  auto table = tok::make_byte_level_table();
  std::string s;
  for (char c : bytes) tok::append_utf8(s, table.byte_to_char[uint8_t(c)]);
  return s;
}

// Ids 0..255 are the bytes; then the merges below in rank order, then
// a CONTROL, a USER_DEFINED and an UNUSED token.
constexpr int32_t kAb = 256, kSp1 = 257, k12 = 258, kSpSp = 259, kCtl = 260, kUser = 261, kPad = 262;

GgufVocab toy(const std::string& pre) {
  GgufVocab v;
  v.model = "gpt2";
  v.pre = pre;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(bl(std::string(1, char(b))));
  v.tokens.insert(v.tokens.end(), {"ab", bl(" 1"), "12", bl("  "), "<|ctl|>", "<ud>", "[PAD262]"});
  v.token_types.assign(v.tokens.size(), int32_t(GgufTokenType::kNormal));
  v.token_types[kCtl] = int32_t(GgufTokenType::kControl);
  v.token_types[kUser] = int32_t(GgufTokenType::kUserDefined);
  v.token_types[kPad] = int32_t(GgufTokenType::kUnused);
  v.merges = {"a b", bl(" ") + " 1", "1 2", bl(" ") + " " + bl(" ")};
  v.eos = kCtl;
  return v;
}

using Ids = std::vector<int32_t>;

TEST(GgufVocab, SupportedPreTypes) {
  EXPECT_EQ(gguf_pre_types(), (std::vector<std::string>{"gpt2", "smollm", "qwen2", "deepseek-r1-qwen", "qwen35"}));
  auto smollm = gguf_pre_regexes("smollm");
  ASSERT_EQ(smollm.size(), 2u);
  EXPECT_EQ(smollm[0], R"(\p{N})");
  EXPECT_EQ(smollm[1], gguf_pre_regexes("gpt2")[0]);
  EXPECT_EQ(gguf_pre_regexes("qwen2"), gguf_pre_regexes("deepseek-r1-qwen"));
  EXPECT_TRUE(gguf_pre_regexes("llama-bpe").empty());
}

TEST(GgufVocab, PreTokenizerFollowsName) {
  Tokenizer gpt2 = Tokenizer::from_gguf_vocab(toy("gpt2"), "toy.gguf");
  Tokenizer smollm = Tokenizer::from_gguf_vocab(toy("smollm"), "toy.gguf");
  Tokenizer qwen2 = Tokenizer::from_gguf_vocab(toy("qwen2"), "toy.gguf");
  // GPT-2: " ?\p{N}+" keeps " 12" whole; " 1" (rank 1) merges before "12".
  EXPECT_EQ(gpt2.encode(" 12"), (Ids{kSp1, '2'}));
  EXPECT_EQ(gpt2.encode("12"), (Ids{k12}));
  // smollm: digits isolated first, so no digit ever merges.
  EXPECT_EQ(smollm.encode(" 12"), (Ids{' ', '1', '2'}));
  EXPECT_EQ(smollm.encode("12"), (Ids{'1', '2'}));
  // Spaces before digits: "  " stays one piece once the digit is cut off.
  EXPECT_EQ(smollm.encode("x  1"), (Ids{'x', kSpSp, '1'}));
  EXPECT_EQ(gpt2.encode("x  1"), (Ids{'x', ' ', kSp1}));
  // Qwen2: \p{N} one at a time, letters with one leading non-letter.
  EXPECT_EQ(qwen2.encode("ab12"), (Ids{kAb, '1', '2'}));
  EXPECT_EQ(qwen2.encode(" ab"), (Ids{' ', kAb}));  // " ab" piece: no " a" merge
  for (const Tokenizer* t : {&gpt2, &smollm, &qwen2})
    EXPECT_EQ(t->decode(t->encode("x  12 ab\n")), "x  12 ab\n");
}

TEST(GgufVocab, TokenTypesMakeAddedTokens) {
  Tokenizer t = Tokenizer::from_gguf_vocab(toy("qwen2"), "toy.gguf");
  EXPECT_EQ(t.vocab_size(), 263);
  EXPECT_EQ(t.encode("ab<|ctl|>ab<ud>[PAD262]"),
            (Ids{kAb, kCtl, kAb, kUser, '[', 'P', 'A', 'D', '2', '6', '2', ']'}));
  EXPECT_TRUE(t.is_special(kCtl));
  EXPECT_FALSE(t.is_special(kUser));
  EXPECT_FALSE(t.is_special(kPad));
  EXPECT_EQ(t.decode({kCtl, kAb, kUser, kPad}), "<|ctl|>ab<ud>[PAD262]");
  EXPECT_EQ(t.decode({kCtl, kAb, kUser}, /*skip_special=*/true), "ab<ud>");
  EXPECT_EQ(t.token_id("<|ctl|>"), kCtl);
  EXPECT_EQ(t.token_id("ab"), kAb);
}

TEST(GgufVocab, ControlTokenOutsideTheAlphabetStaysPlain) {
  // HF skips such a CONTROL token (a llama.cpp mislabel): its text is not
  // matched, and it decodes to its own UTF-8.
  GgufVocab v = toy("qwen2");
  v.tokens[kCtl] = "<c tl>";  // a raw space is outside the byte-level alphabet
  Tokenizer t = Tokenizer::from_gguf_vocab(v, "toy.gguf");
  EXPECT_FALSE(t.is_special(kCtl));
  EXPECT_EQ(t.decode({kCtl}), "<c tl>");
  EXPECT_NE(t.encode("<c tl>"), (Ids{kCtl}));
}

TEST(GgufVocab, BytesWithoutATokenAreDropped) {
  // As HF's BPE without an unk token: the byte is removed before merging,
  // so its neighbours within one piece may merge across it (checked with
  // tokenizers 0.23.3: ".\x04." -> [".."] given the merge ". .").
  GgufVocab v = toy("gpt2");
  v.tokens[4] = "<unused byte 4>";
  v.tokens[kAb] = "..";
  v.merges[0] = ". .";
  Tokenizer t = Tokenizer::from_gguf_vocab(v, "toy.gguf");
  EXPECT_EQ(t.encode(".\x04."), (Ids{kAb}));
  EXPECT_EQ(t.encode(".\x04.\x04"), (Ids{kAb}));
  EXPECT_EQ(t.encode("a\x04" "b"), (Ids{'a', 'b'}));  // three pieces under the GPT-2 regex
  EXPECT_EQ(t.encode("\x04"), Ids{});
}

std::string error_of(const GgufVocab& v) {
  try {
    Tokenizer::from_gguf_vocab(v, "m.gguf");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(GgufVocab, RefusesUnsupportedModelAndPre) {
  GgufVocab v = toy("qwen2");
  v.model = "llama";
  EXPECT_NE(error_of(v).find("m.gguf: tokenizer.ggml.model: expected \"gpt2\" (byte-level BPE), found \"llama\""),
            std::string::npos)
      << error_of(v);
  v = toy("llama-bpe");
  std::string e = error_of(v);
  EXPECT_NE(e.find("m.gguf: tokenizer.ggml.pre: expected one of gpt2, smollm, qwen2, deepseek-r1-qwen, qwen35, "
                   "found \"llama-bpe\""),
            std::string::npos)
      << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << "one line";
  v = toy("");
  EXPECT_NE(error_of(v).find("found \"\" (missing)"), std::string::npos) << error_of(v);
}

TEST(GgufVocab, RefusesInconsistentMetadata) {
  GgufVocab v = toy("gpt2");
  v.token_types.pop_back();
  EXPECT_NE(error_of(v).find("tokenizer.ggml.token_type: expected 263 entries (one per token), found 262"),
            std::string::npos)
      << error_of(v);
  v = toy("gpt2");
  v.token_types[7] = 9;
  EXPECT_NE(error_of(v).find("tokenizer.ggml.token_type[7]: expected a llama_token_type in [0, 6], found 9"),
            std::string::npos)
      << error_of(v);
  v = toy("gpt2");
  v.merges.push_back("abc");
  EXPECT_NE(error_of(v).find("tokenizer.ggml.merges[4]: expected \"left right\""), std::string::npos)
      << error_of(v);
  v = toy("gpt2");
  v.merges.push_back("b c");
  EXPECT_NE(error_of(v).find("tokenizer.ggml.merges[4]: expected both parts of \"b c\" and their "
                             "concatenation in tokenizer.ggml.tokens, found the concatenation missing"),
            std::string::npos)
      << error_of(v);
  v = toy("gpt2");
  v.bos = 263;
  EXPECT_NE(error_of(v).find("tokenizer.ggml.bos_token_id: expected an id in [0, 263), found 263"),
            std::string::npos)
      << error_of(v);
  v = toy("gpt2");
  v.tokens.clear();
  v.token_types.clear();
  EXPECT_NE(error_of(v).find("tokenizer.ggml.tokens: expected a non-empty array"), std::string::npos)
      << error_of(v);
  // A token list without even the merge parts.
  v = toy("gpt2");
  v.tokens.resize(10);
  v.token_types.clear();
  v.eos.reset();
  EXPECT_NE(error_of(v).find("tokenizer.ggml.merges[0]: expected both parts"), std::string::npos)
      << error_of(v);
}

}  // namespace
}  // namespace blockspec
