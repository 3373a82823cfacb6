// Tokenizer from GGUF tokenizer metadata: byte-level BPE with the split
// regexes llama.cpp uses for the file's `tokenizer.ggml.pre`, added tokens
// from the token types, no normalizer.
#include "tokenizer/gguf_vocab.h"

#include <memory>
#include <string_view>
#include <unordered_map>

#include "base/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_json.h"

namespace blockspec {

using tok::TokenizerParts;

namespace {

// Qwen2's tokenizer.json Split regex, as HF transformers writes it
// (models/qwen2/tokenization_qwen2.py PRETOKENIZE_REGEX). llama.cpp spells
// the contractions as '[sS]|'[tT]... because its regex engine lacks (?i:);
// PCRE2, like HF's Oniguruma, also folds "'ſ" (U+017F) into 's, which
// llama.cpp's spelling does not: we follow HF, the golden reference.
constexpr std::string_view kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen3.5's (transformers models/qwen3_5/tokenization_qwen3_5.py PRETOKENIZE_REGEX;
// llama.cpp LLAMA_VOCAB_PRE_TYPE_QWEN35 spells the contractions out): Qwen2's
// with combining marks (\p{M}) joining letters in words and kept out of
// punctuation runs (hybrid.md §9.1).
constexpr std::string_view kQwen35Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct PreType {
  std::string_view name;
  std::vector<std::string_view> regexes;  // applied in order, each Isolated
};

// From llama.cpp src/llama-vocab.cpp (llm_tokenizer_bpe, regex_exprs per
// LLAMA_VOCAB_PRE_TYPE_*; the name -> type map is in llama_vocab::impl::load).
// llama.cpp writes the GPT-2 regex without its final "|\s+" and runs it by a
// hand-written matcher that behaves as if it were there, so the full
// kGpt2SplitPattern (HF's ByteLevel regex) is used. Only names checked
// against a real file or whose regexes HF and llama.cpp agree on are listed;
// add more from that table.
const std::vector<PreType>& pre_types() {
  static const std::vector<PreType> kTypes = {
      // LLAMA_VOCAB_PRE_TYPE_GPT2; HF's GGUF conversion default (ByteLevel with regex).
      {"gpt2", {tok::kGpt2SplitPattern}},
      // LLAMA_VOCAB_PRE_TYPE_SMOLLM (grouped with STARCODER): digits one by
      // one, then GPT-2. This is SmolLM's own tokenizer.json (Digits with
      // individual_digits, then ByteLevel); HF transformers' GGUF conversion
      // (5.x) drops the digit split for "smollm" and so differs on runs of
      // spaces before digits, see tests/tokenizer/gguf_vocab_golden_test.cc.
      {"smollm", {R"(\p{N})", tok::kGpt2SplitPattern}},
      // LLAMA_VOCAB_PRE_TYPE_QWEN2; HF maps both names to the Qwen2 regex.
      {"qwen2", {kQwen2Split}},
      {"deepseek-r1-qwen", {kQwen2Split}},
      // LLAMA_VOCAB_PRE_TYPE_QWEN35 (no NFC normalisation, as llama.cpp; HF's tokenizer.json has NFC).
      {"qwen35", {kQwen35Split}},
  };
  return kTypes;
}

const PreType* find_pre_type(const std::string& name) {
  for (const auto& t : pre_types())
    if (t.name == name) return &t;
  return nullptr;
}

std::string supported_list() {
  std::string s;
  for (const auto& t : pre_types()) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

// A token in the byte-level alphabet as raw bytes; otherwise its own UTF-8,
// as HF's conversion respells such a token byte by byte.
std::string token_bytes_of(const tok::ByteLevelTable& table, const std::string& token,
                           bool* in_alphabet) {
  std::string bytes;
  *in_alphabet = tok::byte_level_to_bytes(table, token, &bytes);
  return *in_alphabet ? bytes : token;
}

void check_id(const std::string& what, const char* key, const std::optional<int32_t>& id,
              size_t n_vocab) {
  if (id && (*id < 0 || size_t(*id) >= n_vocab))
    fail(what, ": tokenizer.ggml.", key, ": expected an id in [0, ", n_vocab, "), found ", *id,
         "; the metadata does not match tokenizer.ggml.tokens");
}

void check_header(const GgufVocab& v, const std::string& what) {
  if (v.model != "gpt2")
    fail(what, ": tokenizer.ggml.model: expected \"gpt2\" (byte-level BPE), found \"", v.model,
         "\"; SentencePiece (\"llama\"), WordPiece (\"bert\") and Unigram (\"t5\") vocabularies "
         "are not supported");
  if (!find_pre_type(v.pre))
    fail(what, ": tokenizer.ggml.pre: expected one of ", supported_list(), ", found \"", v.pre,
         "\"", v.pre.empty() ? " (missing)" : "",
         "; its split regexes must be added to src/tokenizer/gguf_vocab.cc from llama.cpp's "
         "llama-vocab.cpp");
  if (v.tokens.empty()) fail(what, ": tokenizer.ggml.tokens: expected a non-empty array, found none");
  if (v.tokens.size() > size_t(INT32_MAX))
    fail(what, ": tokenizer.ggml.tokens: expected at most 2^31-1 tokens, found ", v.tokens.size());
  if (!v.token_types.empty() && v.token_types.size() != v.tokens.size())
    fail(what, ": tokenizer.ggml.token_type: expected ", v.tokens.size(),
         " entries (one per token), found ", v.token_types.size());
  for (size_t i = 0; i < v.token_types.size(); ++i)
    if (v.token_types[i] < 0 || v.token_types[i] > int32_t(GgufTokenType::kByte))
      fail(what, ": tokenizer.ggml.token_type[", i, "]: expected a llama_token_type in [0, 6], "
                 "found ", v.token_types[i]);
  check_id(what, "bos_token_id", v.bos, v.tokens.size());
  check_id(what, "eos_token_id", v.eos, v.tokens.size());
  check_id(what, "padding_token_id", v.pad, v.tokens.size());
  check_id(what, "unknown_token_id", v.unk, v.tokens.size());
}

std::vector<std::pair<std::string, std::string>> convert_merges(
    const GgufVocab& v, const tok::ByteLevelTable& table,
    const std::unordered_map<std::string, int32_t>& vocab, const std::string& what) {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(v.merges.size());
  std::string a, b;
  for (size_t r = 0; r < v.merges.size(); ++r) {
    const std::string& m = v.merges[r];
    size_t sp = m.find(' ');
    if (sp == std::string::npos || m.find(' ', sp + 1) != std::string::npos)
      fail(what, ": tokenizer.ggml.merges[", r, "]: expected \"left right\" (two tokens, one "
                 "space), found \"", m, "\"");
    if (!tok::byte_level_to_bytes(table, std::string_view(m).substr(0, sp), &a) ||
        !tok::byte_level_to_bytes(table, std::string_view(m).substr(sp + 1), &b))
      fail(what, ": tokenizer.ggml.merges[", r, "]: expected tokens in the byte-level alphabet, "
                 "found \"", m, "\"");
    const char* missing = !vocab.count(a) ? "left part" : !vocab.count(b) ? "right part"
                          : !vocab.count(a + b) ? "concatenation" : nullptr;
    if (missing)
      fail(what, ": tokenizer.ggml.merges[", r, "]: expected both parts of \"", m,
           "\" and their concatenation in tokenizer.ggml.tokens, found the ", missing, " missing");
    out.emplace_back(a, b);
  }
  return out;
}

TokenizerParts parts_from_gguf(const GgufVocab& v, const std::string& what) {
  check_header(v, what);
  TokenizerParts p;
  p.byte_level = tok::make_byte_level_table();

  std::vector<tok::PreTokenizerStep> steps;
  for (std::string_view re : find_pre_type(v.pre)->regexes) {
    tok::PreTokenizerStep s;
    s.kind = tok::PreTokenizerStep::Kind::kSplit;
    s.regex = std::make_shared<tok::Regex>(re, str_cat(what, ": tokenizer.ggml.pre \"", v.pre, "\""));
    s.behavior = tok::SplitBehavior::kIsolated;
    steps.push_back(std::move(s));
  }
  tok::PreTokenizerStep byte_level;  // maps nothing on raw bytes; kept for the shape HF has
  byte_level.kind = tok::PreTokenizerStep::Kind::kByteLevel;
  steps.push_back(std::move(byte_level));
  p.pre_tokenizer = tok::PreTokenizer(std::move(steps));

  const size_t n = v.tokens.size();
  std::unordered_map<std::string, int32_t> vocab;
  vocab.reserve(n);
  std::vector<bool> in_alphabet(n);
  p.id_bytes.assign(n, std::string());
  p.id_kind.assign(n, TokenizerParts::IdKind::kModel);
  for (size_t id = 0; id < n; ++id) {
    bool ok = false;
    p.id_bytes[id] = token_bytes_of(p.byte_level, v.tokens[id], &ok);
    in_alphabet[id] = ok;
    // A later duplicate wins the lookup, as in HF's dict and llama.cpp's map.
    if (!p.id_bytes[id].empty()) vocab[p.id_bytes[id]] = int32_t(id);
  }
  // Bytes without a token are dropped before merging, as both HF (BPE with
  // no unk token) and llama.cpp do; SmolLM2 has none for 21 bytes.
  auto merges = convert_merges(v, p.byte_level, vocab, what);
  p.bpe = tok::BpeModel(std::move(vocab), merges, /*ignore_merges=*/false, what,
                        /*allow_missing_bytes=*/true);

  // HF adds CONTROL tokens as special first, then USER_DEFINED ones as plain
  // added tokens, both unnormalized; a CONTROL token outside the byte-level
  // alphabet is a mislabel HF skips (it stays a plain vocab entry).
  std::vector<std::string> patterns;
  for (int32_t want : {int32_t(GgufTokenType::kControl), int32_t(GgufTokenType::kUserDefined)}) {
    for (size_t id = 0; id < v.token_types.size(); ++id) {
      if (v.token_types[id] != want || !in_alphabet[id] || v.tokens[id].empty()) continue;
      tok::AddedToken a;
      a.content = v.tokens[id];
      a.id = int32_t(id);
      a.special = want == int32_t(GgufTokenType::kControl);
      a.normalized = false;
      p.id_kind[id] = a.special ? TokenizerParts::IdKind::kSpecial : TokenizerParts::IdKind::kAdded;
      patterns.push_back(a.content);
      p.added.push_back(std::move(a));
    }
  }
  p.raw_matcher.build(patterns, p.added);
  return p;
}

}  // namespace

std::vector<std::string> gguf_pre_types() {
  std::vector<std::string> out;
  for (const auto& t : pre_types()) out.emplace_back(t.name);
  return out;
}

std::vector<std::string> gguf_pre_regexes(const std::string& pre) {
  std::vector<std::string> out;
  if (const PreType* t = find_pre_type(pre))
    for (auto re : t->regexes) out.emplace_back(re);
  return out;
}

Tokenizer Tokenizer::from_gguf_vocab(const GgufVocab& vocab, const std::string& what) {
  return from_parts(parts_from_gguf(vocab, what));
}

}  // namespace blockspec
