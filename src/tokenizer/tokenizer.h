// Byte-level BPE tokenizer read from a HF tokenizer.json (Qwen2/Qwen3,
// Llama-3-style and GPT-2-style byte-level models): NFC normalizer, the
// pre-tokenizer Split regex, byte-to-unicode mapping, ranked merges, added
// and special tokens. Agrees with HF `tokenizers` token for token.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace blockspec {

struct GgufVocab;  // tokenizer/gguf_vocab.h
namespace tok {
struct TokenizerParts;
}

class Tokenizer {
 public:
  // Throws Error naming the file and the field if the JSON is not a
  // supported byte-level BPE tokenizer.
  static Tokenizer from_file(const std::string& tokenizer_json_path);
  static Tokenizer from_json(const std::string& json_text, const std::string& what);
  // From GGUF tokenizer metadata (see gguf_vocab.h); `what` names the file.
  // Throws Error naming the tokenizer.ggml.* key for an unsupported model or
  // pre-tokenizer name and for inconsistent metadata.
  static Tokenizer from_gguf_vocab(const GgufVocab& vocab, const std::string& what);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Like HF encode(text, add_special_tokens=False): added/special tokens in
  // the text are matched first, the rest goes through normalizer,
  // pre-tokenizer and BPE.
  std::vector<int32_t> encode(std::string_view text) const;
  // Concatenated bytes of the tokens (special tokens included unless
  // skip_special). May end in a partial UTF-8 sequence.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
  std::string token_bytes(int32_t id) const;  // raw bytes of one token
  int32_t vocab_size() const;                 // max id + 1 over vocab and added tokens
  std::optional<int32_t> token_id(std::string_view token) const;  // exact token string
  bool is_special(int32_t id) const;

 private:
  Tokenizer();
  static Tokenizer from_parts(tok::TokenizerParts parts);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Streams decoded text token by token, holding back an incomplete UTF-8
// sequence until it completes, so every chunk returned is valid UTF-8
// (invalid bytes become U+FFFD only when flush() proves them invalid).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special = false)
      : tok_(tok), skip_special_(skip_special) {}
  std::string push(int32_t id);  // text that became complete with this token
  std::string flush();           // whatever is held back, made valid
 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace blockspec
