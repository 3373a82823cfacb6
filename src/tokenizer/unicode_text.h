// UTF-8 and Unicode helpers the tokenizer needs: validation, code point
// stepping, the character classes HF `tokenizers` uses around added tokens
// (Rust's `\s` and `\w`), Unicode normalization (utf8proc) and the GPT-2
// byte <-> unicode table of the ByteLevel pre-tokenizer and decoder.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace blockspec::tok {

// Byte offset of the first invalid UTF-8 sequence in `s`, or s.size() when
// the whole string is valid (overlongs, surrogates and > U+10FFFF invalid).
size_t first_invalid_utf8(std::string_view s);

// Decodes the code point at s[i] (s must be valid UTF-8); sets *len to its
// byte length.
char32_t decode_utf8_at(std::string_view s, size_t i, size_t* len);
void append_utf8(std::string& out, char32_t cp);

// Number of bytes that a UTF-8 sequence starting with lead byte `b` claims,
// 0 for a continuation or invalid lead byte.
int utf8_sequence_length(uint8_t b);

// Unicode White_Space, as Rust's char::is_whitespace and regex `\s`.
bool is_unicode_whitespace(char32_t cp);
// Rust regex `\w`: alphabetic, marks, decimal digits, connector punctuation
// and the joiners (approximated with general categories L*, Nl, M*, Nd, Pc).
bool is_word_char(char32_t cp);

// Appends `bytes` to *out as valid UTF-8, each maximal invalid subpart
// replaced by U+FFFD (the rule of Rust's from_utf8_lossy and Python's
// errors="replace"). When `final` is false a trailing sequence that may
// still complete is left unconsumed; returns the number of bytes consumed.
size_t append_utf8_lossy(std::string_view bytes, bool final, std::string* out);

enum class NormalForm { kNone, kNfc, kNfd, kNfkc, kNfkd };
// `text` must be valid UTF-8. kNone returns the text unchanged.
std::string normalize(std::string_view text, NormalForm form);

// The GPT-2 byte-level alphabet: every byte maps to one printable code
// point, so BPE never sees whitespace or control characters.
struct ByteLevelTable {
  std::array<char32_t, 256> byte_to_char{};
  // Inverse over [0, 0x180): every code point of the table is below 0x144.
  std::array<int16_t, 0x180> char_to_byte{};
};
ByteLevelTable make_byte_level_table();

// Converts a token written in the byte-level alphabet back to raw bytes.
// Returns false (leaving *out unspecified) when some character is outside
// the alphabet (e.g. an added token containing a plain space); HF's
// ByteLevel decoder then emits the token's own UTF-8 bytes instead.
bool byte_level_to_bytes(const ByteLevelTable& table, std::string_view token, std::string* out);

}  // namespace blockspec::tok
