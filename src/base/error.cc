#include "base/error.h"

#include <algorithm>

namespace blockspec {

std::string quote_for_message(std::string_view s, size_t max_len) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  const size_t n = std::min(s.size(), max_len);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
  if (s.size() > max_len) out += str_cat("...(", s.size(), " bytes)");
  return out;
}

}  // namespace blockspec
