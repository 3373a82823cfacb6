// Reads a HF tokenizer.json into the parts the Tokenizer runs: normalizer,
// pre-tokenizer, BPE model, added tokens and the id -> bytes table used to
// decode. Every unsupported or malformed field is refused with an Error
// that names the file, the JSON path, and the expected vs found value.
//
// Deliberately ignored: `post_processor` (it only adds tokens when HF is
// asked for add_special_tokens=True, which Tokenizer::encode does not do),
// `truncation` and `padding` (batching options, not tokenization), and the
// ByteLevel `trim_offsets` flag (offsets only).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode_text.h"

namespace blockspec::tok {

struct TokenizerParts {
  std::vector<NormalForm> normalizers;  // applied in order; empty: none
  PreTokenizer pre_tokenizer;
  BpeModel bpe;
  std::vector<AddedToken> added;  // as listed in the JSON
  AddedTokenMatcher raw_matcher;         // added tokens with normalized=false
  AddedTokenMatcher normalized_matcher;  // added tokens with normalized=true
  // Decoding table, indexed by id: raw bytes and what kind of id it is.
  enum class IdKind : uint8_t { kAbsent, kModel, kAdded, kSpecial };
  std::vector<std::string> id_bytes;  // [vocab_size]
  std::vector<IdKind> id_kind;        // [vocab_size]
  ByteLevelTable byte_level;
};

// `what` names the source (a path) in error messages.
TokenizerParts parse_tokenizer_json(std::string_view json_text, const std::string& what);

// Runs the normalizers of `parts` over `text` (valid UTF-8).
std::string apply_normalizers(const TokenizerParts& parts, std::string_view text);

}  // namespace blockspec::tok
