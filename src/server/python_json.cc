#include "server/python_json.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <cstdio>

#include "grammar/nfa.h"
#include "tokenizer/unicode_text.h"

namespace blockspec {

using ojson = nlohmann::ordered_json;

namespace {

constexpr const char* kBigIntKey = "\x01" "bigint";

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

// Digits with single underscores between them (Python's numeric literal
// rule); appends the digits to `out`, false when malformed or empty.
bool digits_with_underscores(const std::string& s, size_t& i, std::string& out) {
  const size_t start = out.size();
  while (i < s.size()) {
    if (is_digit(s[i])) {
      out += s[i++];
    } else if (s[i] == '_' && out.size() > start && i + 1 < s.size() && is_digit(s[i + 1])) {
      ++i;
    } else {
      break;
    }
  }
  return out.size() > start;
}

// A canonical decimal integer (optional '-') as a JSON number, or a big int.
ojson integer_value(const std::string& canonical) {
  const bool neg = canonical[0] == '-';
  if (neg) {
    int64_t v = 0;
    auto r = std::from_chars(canonical.data(), canonical.data() + canonical.size(), v);
    if (r.ec == std::errc() && r.ptr == canonical.data() + canonical.size()) return ojson(v);
  } else {
    uint64_t v = 0;
    auto r = std::from_chars(canonical.data(), canonical.data() + canonical.size(), v);
    if (r.ec == std::errc() && r.ptr == canonical.data() + canonical.size()) {
      if (v <= static_cast<uint64_t>(INT64_MAX)) return ojson(static_cast<int64_t>(v));
      return ojson(v);
    }
  }
  return py_big_int(canonical);
}

std::string canonical_digits(bool neg, const std::string& digits) {
  size_t z = 0;
  while (z + 1 < digits.size() && digits[z] == '0') ++z;
  std::string d = digits.substr(z);
  return (neg && d != "0") ? "-" + d : d;
}

void append_utf8(std::string& out, uint32_t cp) {
  // A lone surrogate (\ud800 alone) cannot be UTF-8: U+FFFD, as Python's encode(errors="replace") writes it.
  tok::append_utf8(out, cp >= 0xD800 && cp <= 0xDFFF ? 0xFFFD : cp);
}

// One recursive-descent reader for both dialects: JSON as json.loads reads
// it, and the Python literals ast.literal_eval reads. Throws nothing: any
// failure sets ok = false.
class LiteralReader {
 public:
  LiteralReader(const std::string& s, bool python) : s_(s), py_(python) {}

  std::optional<ojson> read_all() {
    ojson v = value(0);
    skip_ws();
    if (!ok_ || i_ != s_.size()) return std::nullopt;
    return v;
  }

 private:
  const std::string& s_;
  bool py_;
  size_t i_ = 0;
  bool ok_ = true;

  ojson fail() {
    ok_ = false;
    return ojson();
  }
  void skip_ws() {
    // Python literals may also hold comments and line continuations; models do not write them.
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r' ||
                              (py_ && (s_[i_] == '\f' || s_[i_] == '\v'))))
      ++i_;
  }
  bool word(const char* w) {
    const size_t n = std::strlen(w);
    if (s_.compare(i_, n, w) != 0) return false;
    const size_t e = i_ + n;
    if (e < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[e])) || s_[e] == '_')) return false;
    i_ = e;
    return true;
  }

  ojson value(int depth) {
    if (depth > 512) return fail();  // json.loads and literal_eval both hit a recursion limit
    skip_ws();
    if (i_ >= s_.size()) return fail();
    const char c = s_[i_];
    if (c == '{') return object(depth);
    if (c == '[') return sequence(depth, ']');
    if (py_ && c == '(') return sequence(depth, ')');
    if (c == '"' || (py_ && (c == '\'' || ((c == 'r' || c == 'R' || c == 'u' || c == 'U') && i_ + 1 < s_.size() &&
                                          (s_[i_ + 1] == '\'' || s_[i_ + 1] == '"')))))
      return py_ ? python_strings() : json_string();
    if (py_) {
      if (word("True")) return ojson(true);
      if (word("False")) return ojson(false);
      if (word("None")) return ojson(nullptr);
      if (c == '-' || c == '+') {  // unary operators on numbers
        ++i_;
        ojson v = value(depth + 1);
        if (!ok_ || !(v.is_number() || (v.is_object() && v.contains(kBigIntKey)))) return fail();
        if (c == '+') return v;
        return negate(v);
      }
      return python_number();
    }
    if (word("true")) return ojson(true);
    if (word("false")) return ojson(false);
    if (word("null")) return ojson(nullptr);
    if (word("NaN")) return ojson(std::nan(""));
    if (word("Infinity")) return ojson(INFINITY);
    if (s_.compare(i_, 9, "-Infinity") == 0) {
      i_ += 9;
      return ojson(-INFINITY);
    }
    return json_number();
  }

  static ojson negate(const ojson& v) {
    if (v.is_number_float()) return ojson(-v.get<double>());
    if (v.is_number_integer() && !v.is_number_unsigned()) {
      const int64_t x = v.get<int64_t>();
      if (x != INT64_MIN) return ojson(-x);
    }
    const std::string digits = v.is_object() ? v.begin()->get<std::string>() : v.dump();
    return integer_value(digits[0] == '-' ? digits.substr(1) : canonical_digits(true, digits));
  }

  ojson object(int depth) {
    ++i_;  // {
    ojson out = ojson::object();
    skip_ws();
    if (i_ < s_.size() && s_[i_] == '}') {
      ++i_;
      return out;
    }
    while (ok_) {
      skip_ws();
      ojson key = value(depth + 1);
      if (!ok_) return fail();
      std::string k;
      if (key.is_string()) {
        k = key.get<std::string>();
      } else if (!py_) {
        return fail();  // JSON keys are strings
      } else if (key.is_number_float()) {
        k = py_float_repr(key.get<double>());
      } else if (key.is_boolean()) {
        k = key.get<bool>() ? "true" : "false";
      } else if (key.is_null()) {
        k = "null";
      } else if (key.is_number()) {
        k = key.dump();
      } else if (key.is_object() && key.contains(kBigIntKey)) {
        k = key[kBigIntKey].get<std::string>();
      } else {
        return fail();  // json.dumps cannot write a tuple or container key
      }
      skip_ws();
      if (i_ >= s_.size() || s_[i_] != ':') return fail();
      ++i_;
      ojson v = value(depth + 1);
      if (!ok_) return fail();
      out[k] = std::move(v);  // a repeated key keeps its first place and takes the last value (dict rule)
      skip_ws();
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        skip_ws();
        if (py_ && i_ < s_.size() && s_[i_] == '}') break;  // trailing comma
        continue;
      }
      break;
    }
    if (i_ >= s_.size() || s_[i_] != '}') return fail();
    ++i_;
    return out;
  }

  ojson sequence(int depth, char close) {
    ++i_;
    ojson out = ojson::array();
    skip_ws();
    if (i_ < s_.size() && s_[i_] == close) {
      ++i_;
      return out;
    }
    bool comma = false;
    while (ok_) {
      out.push_back(value(depth + 1));
      if (!ok_) return fail();
      skip_ws();
      comma = i_ < s_.size() && s_[i_] == ',';
      if (!comma) break;
      ++i_;
      skip_ws();
      if (py_ && i_ < s_.size() && s_[i_] == close) break;  // trailing comma
    }
    if (i_ >= s_.size() || s_[i_] != close) return fail();
    // (1) is a parenthesised number, not a tuple; (1,) is a tuple.
    if (close == ')' && out.size() == 1 && !comma) {
      ++i_;
      return out[0];
    }
    ++i_;
    return out;
  }

  // n hex digits at i_ (advances); false when fewer or not hex.
  bool hex(int n, uint32_t& cp) {
    if (i_ + n > s_.size()) return false;
    cp = 0;
    for (int k = 0; k < n; ++k) {
      const char h = s_[i_++];
      cp <<= 4;
      if (is_digit(h)) cp |= h - '0';
      else if (h >= 'a' && h <= 'f') cp |= h - 'a' + 10;
      else if (h >= 'A' && h <= 'F') cp |= h - 'A' + 10;
      else return false;
    }
    return true;
  }

  ojson json_string() {
    ++i_;  // "
    std::string out;
    while (i_ < s_.size()) {
      const char c = s_[i_++];
      if (c == '"') return ojson(out);
      if (static_cast<unsigned char>(c) < 0x20) return fail();  // strict: raw control characters refused
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) return fail();
      const char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp;
          if (!hex(4, cp)) return fail();
          if (cp >= 0xD800 && cp <= 0xDBFF && s_.compare(i_, 2, "\\u") == 0) {
            const size_t save = i_;
            i_ += 2;
            uint32_t lo;
            if (hex(4, lo) && lo >= 0xDC00 && lo <= 0xDFFF) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            else i_ = save;
          }
          append_utf8(out, cp);
          break;
        }
        default: return fail();
      }
    }
    return fail();
  }

  // One or more adjacent Python string literals, joined.
  ojson python_strings() {
    std::string out;
    bool any = false;
    while (true) {
      skip_ws();
      if (i_ >= s_.size()) break;
      bool raw = false;
      size_t j = i_;
      if (s_[j] == 'r' || s_[j] == 'R') raw = true, ++j;
      else if (s_[j] == 'u' || s_[j] == 'U') ++j;
      if (j >= s_.size() || (s_[j] != '\'' && s_[j] != '"')) break;
      i_ = j;
      if (!python_string(raw, out)) return fail();
      any = true;
    }
    return any ? ojson(out) : fail();
  }

  bool python_string(bool raw, std::string& out) {
    const char q = s_[i_];
    const bool triple = s_.compare(i_, 3, std::string(3, q)) == 0;
    i_ += triple ? 3 : 1;
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == q && (!triple || s_.compare(i_, 3, std::string(3, q)) == 0)) {
        i_ += triple ? 3 : 1;
        return true;
      }
      if (c == '\n' && !triple) return false;
      ++i_;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) return false;
      const char e = s_[i_++];
      if (raw) {  // r'...': the backslash stays
        out += '\\';
        out += e;
        continue;
      }
      switch (e) {
        case '\n': break;  // line continuation
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x': case 'u': case 'U': {
          uint32_t cp;
          if (!hex(e == 'x' ? 2 : e == 'u' ? 4 : 8, cp) || cp > 0x10FFFF) return false;
          append_utf8(out, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {  // octal, up to 3 digits
            uint32_t cp = e - '0';
            for (int k = 0; k < 2 && i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '7'; ++k) cp = cp * 8 + (s_[i_++] - '0');
            append_utf8(out, cp);
          } else {  // unknown escapes keep the backslash
            out += '\\';
            out += e;
          }
      }
    }
    return false;
  }

  ojson json_number() {
    const size_t start = i_;
    bool neg = false;
    if (i_ < s_.size() && s_[i_] == '-') neg = true, ++i_;
    if (i_ >= s_.size() || !is_digit(s_[i_])) return fail();
    if (s_[i_] == '0') ++i_;
    else while (i_ < s_.size() && is_digit(s_[i_])) ++i_;
    const std::string int_digits = s_.substr(start + neg, i_ - start - neg);
    bool is_float = false;
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (i_ >= s_.size() || !is_digit(s_[i_])) return fail();
      while (i_ < s_.size() && is_digit(s_[i_])) ++i_;
      is_float = true;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (i_ >= s_.size() || !is_digit(s_[i_])) return fail();
      while (i_ < s_.size() && is_digit(s_[i_])) ++i_;
      is_float = true;
    }
    if (!is_float) return integer_value(canonical_digits(neg, int_digits));
    return ojson(std::strtod(s_.substr(start, i_ - start).c_str(), nullptr));
  }

  ojson python_number() {
    // Python literal numbers: decimal / 0x / 0o / 0b integers and decimal
    // floats, with underscores between digits; complex (j) refused.
    std::string text;
    size_t j = i_;
    while (j < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[j])) || s_[j] == '_' || s_[j] == '.' ||
                             ((s_[j] == '+' || s_[j] == '-') && j > i_ && (s_[j - 1] == 'e' || s_[j - 1] == 'E'))))
      ++j;
    text = s_.substr(i_, j - i_);
    if (text.empty()) return fail();
    i_ = j;
    if (text.size() > 2 && text[0] == '0' && std::strchr("xXoObB", text[1])) {
      const int base = (text[1] == 'x' || text[1] == 'X') ? 16 : (text[1] == 'o' || text[1] == 'O') ? 8 : 2;
      std::string digits;
      for (size_t k = 2; k < text.size(); ++k)
        if (text[k] != '_') digits += text[k];
      uint64_t v = 0;
      auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v, base);
      if (r.ec != std::errc() || r.ptr != digits.data() + digits.size() || digits.empty()) return fail();
      return v <= static_cast<uint64_t>(INT64_MAX) ? ojson(static_cast<int64_t>(v)) : ojson(v);
    }
    if (auto iv = py_int(text)) {
      // Python 3 refuses leading zeros on a non-zero decimal literal ("012").
      if (text.size() > 1 && text[0] == '0' && *iv != "0") return fail();
      return integer_value(*iv);
    }
    if (text.find_first_of("iInN") != std::string::npos) return fail();  // inf / nan are names, not literals
    if (auto fv = py_float(text)) return ojson(*fv);
    return fail();
  }
};

void dump_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) out += grammar::json_escaped_byte(c);  // json.dumps's escapes, ensure_ascii=False
  out += '"';
}

void dump(const ojson& v, std::string& out) {
  switch (v.type()) {
    case ojson::value_t::null: out += "null"; return;
    case ojson::value_t::boolean: out += v.get<bool>() ? "true" : "false"; return;
    case ojson::value_t::number_integer: out += std::to_string(v.get<int64_t>()); return;
    case ojson::value_t::number_unsigned: out += std::to_string(v.get<uint64_t>()); return;
    case ojson::value_t::number_float: out += py_float_repr(v.get<double>()); return;
    case ojson::value_t::string: dump_string(v.get_ref<const std::string&>(), out); return;
    case ojson::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& x : v) {
        if (!first) out += ", ";
        first = false;
        dump(x, out);
      }
      out += ']';
      return;
    }
    case ojson::value_t::object: {
      if (v.size() == 1 && v.contains(kBigIntKey)) {
        out += v[kBigIntKey].get<std::string>();
        return;
      }
      out += '{';
      bool first = true;
      for (const auto& [k, x] : v.items()) {
        if (!first) out += ", ";
        first = false;
        dump_string(k, out);
        out += ": ";
        dump(x, out);
      }
      out += '}';
      return;
    }
    default: out += "null"; return;  // binary / discarded: never produced here
  }
}

}  // namespace

ojson py_big_int(const std::string& digits) { return ojson{{kBigIntKey, digits}}; }

std::string py_dumps(const ojson& v) {
  std::string out;
  dump(v, out);
  return out;
}

std::string py_float_repr(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  // Shortest round-trip digits in scientific form: [-]d[.ddd]e[+-]XX.
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  const size_t epos = sci.find('e');
  std::string digits = sci.substr(0, epos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp = std::atoi(sci.c_str() + epos + 1);
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {  // float_repr_style 'short': fixed notation in this range
    if (exp >= 0) {
      std::string ip = digits.substr(0, std::min<size_t>(digits.size(), exp + 1));
      ip.append(exp + 1 > static_cast<int>(digits.size()) ? exp + 1 - digits.size() : 0, '0');
      std::string fp = static_cast<int>(digits.size()) > exp + 1 ? digits.substr(exp + 1) : "0";
      out += ip + "." + fp;
    } else {
      out += "0." + std::string(-exp - 1, '0') + digits;
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char e[16];
  std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out + e;
}

std::optional<std::string> py_int(const std::string& s) {
  const std::string t = trim(s);
  size_t i = 0;
  bool neg = false;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) neg = t[i++] == '-';
  std::string digits;
  if (!digits_with_underscores(t, i, digits) || i != t.size()) return std::nullopt;
  return canonical_digits(neg, digits);
}

std::optional<double> py_float(const std::string& s) {
  const std::string t = trim(s);
  size_t i = 0;
  std::string clean;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) clean += t[i++];
  std::string rest = t.substr(i);
  for (char& c : rest) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (rest == "inf" || rest == "infinity") return clean == "-" ? -INFINITY : INFINITY;
  if (rest == "nan") return std::nan("");
  const bool int_part = digits_with_underscores(t, i, clean);
  bool frac_part = false;
  if (i < t.size() && t[i] == '.') {
    clean += t[i++];
    frac_part = digits_with_underscores(t, i, clean);
  }
  if (!int_part && !frac_part) return std::nullopt;
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    clean += t[i++];
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) clean += t[i++];
    if (!digits_with_underscores(t, i, clean)) return std::nullopt;
  }
  if (i != t.size()) return std::nullopt;
  return std::strtod(clean.c_str(), nullptr);
}

std::optional<ojson> py_literal_eval(const std::string& s) {
  // literal_eval strips leading spaces and tabs; the parser allows trailing whitespace.
  return LiteralReader(s, /*python=*/true).read_all();
}

std::optional<ojson> py_json_loads(const std::string& s) { return LiteralReader(s, /*python=*/false).read_all(); }

}  // namespace blockspec
