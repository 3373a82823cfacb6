#include "tokenizer/unicode_text.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "base/error.h"

namespace blockspec::tok {

int utf8_sequence_length(uint8_t b) {
  if (b < 0x80) return 1;
  if (b < 0xC2) return 0;  // continuation byte or overlong lead
  if (b < 0xE0) return 2;
  if (b < 0xF0) return 3;
  if (b < 0xF5) return 4;
  return 0;
}

size_t first_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  size_t n = s.size(), i = 0;
  while (i < n) {
    uint8_t b = p[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    int len = utf8_sequence_length(b);
    if (len == 0 || i + len > n) return i;
    for (int k = 1; k < len; ++k)
      if ((p[i + k] & 0xC0) != 0x80) return i;
    uint8_t b1 = p[i + 1];
    // Second-byte ranges that exclude overlongs, surrogates and > U+10FFFF.
    if (b == 0xE0 && b1 < 0xA0) return i;
    if (b == 0xED && b1 > 0x9F) return i;
    if (b == 0xF0 && b1 < 0x90) return i;
    if (b == 0xF4 && b1 > 0x8F) return i;
    i += len;
  }
  return n;
}

char32_t decode_utf8_at(std::string_view s, size_t i, size_t* len) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + i;
  uint8_t b = p[0];
  if (b < 0x80) {
    *len = 1;
    return b;
  }
  if (b < 0xE0) {
    *len = 2;
    return (char32_t(b & 0x1F) << 6) | (p[1] & 0x3F);
  }
  if (b < 0xF0) {
    *len = 3;
    return (char32_t(b & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
  }
  *len = 4;
  return (char32_t(b & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) |
         (char32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

size_t append_utf8_lossy(std::string_view bytes, bool final, std::string* out) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    size_t valid_end = i + first_invalid_utf8(bytes.substr(i));
    out->append(bytes.substr(i, valid_end - i));
    i = valid_end;
    if (i == n) break;
    int len = utf8_sequence_length(p[i]);
    // Count the bytes after the lead that still fit a valid sequence.
    size_t k = 1;
    if (len > 0) {
      for (; k < size_t(len) && i + k < n; ++k) {
        uint8_t b = p[i + k];
        uint8_t lo = 0x80, hi = 0xBF;
        if (k == 1) {
          if (p[i] == 0xE0) lo = 0xA0;
          if (p[i] == 0xED) hi = 0x9F;
          if (p[i] == 0xF0) lo = 0x90;
          if (p[i] == 0xF4) hi = 0x8F;
        }
        if (b < lo || b > hi) break;
      }
      if (i + k == n && k < size_t(len) && !final) return i;  // may still complete
    }
    out->append("\xEF\xBF\xBD");  // U+FFFD for the maximal invalid subpart
    i += k;
  }
  return n;
}

bool is_unicode_whitespace(char32_t cp) {
  // The White_Space property list (PropList.txt); it has not changed since
  // Unicode 6.3.
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20:
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool is_word_char(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
           cp == '_';
  }
  if (cp == 0x200C || cp == 0x200D) return true;
  switch (utf8proc_category(utf8proc_int32_t(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

std::string normalize(std::string_view text, NormalForm form) {
  if (form == NormalForm::kNone) return std::string(text);
  // ASCII is invariant under every normal form; most prompts are ASCII, and
  // this skips utf8proc's two passes over them.
  bool ascii = true;
  for (char c : text) {
    if (static_cast<uint8_t>(c) >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii) return std::string(text);
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNfc: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::kNfd: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::kNfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::kNfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::kNone: break;
  }
  utf8proc_uint8_t* raw = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                    utf8proc_ssize_t(text.size()), &raw,
                                    static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(raw, &std::free);
  if (n < 0) fail("tokenizer normalizer: utf8proc failed: ", utf8proc_errmsg(n));
  return std::string(reinterpret_cast<const char*>(raw), size_t(n));
}

ByteLevelTable make_byte_level_table() {
  ByteLevelTable t;
  t.char_to_byte.fill(-1);
  // Printable Latin-1 bytes stand for themselves; the other 68 bytes take
  // the code points 256, 257, ... in byte order (GPT-2's bytes_to_unicode).
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    char32_t c = printable ? char32_t(b) : next++;
    t.byte_to_char[b] = c;
    t.char_to_byte[c] = int16_t(b);
  }
  return t;
}

bool byte_level_to_bytes(const ByteLevelTable& table, std::string_view token, std::string* out) {
  out->clear();
  if (first_invalid_utf8(token) != token.size()) return false;
  for (size_t i = 0; i < token.size();) {
    size_t len = 0;
    char32_t c = decode_utf8_at(token, i, &len);
    if (c >= table.char_to_byte.size() || table.char_to_byte[c] < 0) return false;
    out->push_back(char(table.char_to_byte[c]));
    i += len;
  }
  return true;
}

}  // namespace blockspec::tok
