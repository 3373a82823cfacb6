// Tokenizer input taken from a GGUF file's metadata (llama.cpp's
// `tokenizer.ggml.*` keys), as a plain struct: the GGUF reader lives in
// formats/, which this layer must not include, so whoever reads the file
// fills a GgufVocab and calls Tokenizer::from_gguf_vocab.
//
// Only byte-level BPE (`tokenizer.ggml.model` = "gpt2") is supported. A GGUF
// carries no pre-tokenizer, only its name (`tokenizer.ggml.pre`); the regexes
// per name are llama.cpp's (src/llama-vocab.cpp), see kGgufPreTokenizers in
// gguf_vocab.cc. Token types follow HF transformers' GGUF conversion
// (integrations/gguf/gguf_tokenizer_mapping.py): CONTROL tokens become
// special added tokens, USER_DEFINED tokens plain added tokens, both matched
// whole in the raw text. No normalizer runs (neither llama.cpp nor HF's
// conversion applies one), so non-NFC text is tokenized as given.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace blockspec {

// llama.cpp's llama_token_type values (tokenizer.ggml.token_type).
enum class GgufTokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // special: <|im_start|>, <|endoftext|>
  kUserDefined = 4,  // added, not special: <tool_call>
  kUnused = 5,       // [PAD151665]: a plain vocab entry
  kByte = 6,
};

struct GgufVocab {
  std::string model;                 // tokenizer.ggml.model; "gpt2" = byte-level BPE
  std::string pre;                   // tokenizer.ggml.pre, e.g. "smollm", "qwen2"
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens [n_vocab], byte-level alphabet
  std::vector<int32_t> token_types;  // tokenizer.ggml.token_type [n_vocab]; empty: all normal
  std::vector<std::string> merges;   // tokenizer.ggml.merges, "left right", best rank first
  // Carried for the caller (generation, chat template); Tokenizer::encode
  // never adds BOS/EOS, like HF encode(text, add_special_tokens=False).
  std::optional<int32_t> bos;        // tokenizer.ggml.bos_token_id
  std::optional<int32_t> eos;        // tokenizer.ggml.eos_token_id
  std::optional<int32_t> pad;        // tokenizer.ggml.padding_token_id
  std::optional<int32_t> unk;        // tokenizer.ggml.unknown_token_id
  bool add_bos = false;              // tokenizer.ggml.add_bos_token
  bool add_eos = false;              // tokenizer.ggml.add_eos_token
};

// The `tokenizer.ggml.pre` names Tokenizer::from_gguf_vocab accepts.
std::vector<std::string> gguf_pre_types();

// The split regexes of a supported pre type, applied in order (each splits
// the pieces of the previous one, matches and gaps both kept), or an empty
// vector for an unsupported name.
std::vector<std::string> gguf_pre_regexes(const std::string& pre);

}  // namespace blockspec
