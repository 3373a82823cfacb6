#include "chat/jinja_lexer.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "base/error.h"
#include "chat/jinja_value.h"

namespace blockspec::jinja {

void syntax_error(const std::string& what, int line, int col, const std::string& msg) {
  fail(what, ": syntax error at line ", line, ", column ", col, ": ", msg);
}

namespace {

// Python str.rstrip() on UTF-8 (unicode whitespace).
std::string rstrip_space(const std::string& s) {
  std::u32string u = utf8_decode(s);
  while (!u.empty() && is_python_space(u.back())) u.pop_back();
  return utf8_encode(u);
}

bool all_space(const std::string& s) {
  std::u32string u = utf8_decode(s);
  return !u.empty() && std::all_of(u.begin(), u.end(), is_python_space);
}

class Lexer {
 public:
  Lexer(const std::string& source, const std::string& what) : what_(what) {
    // jinja2 lexer: split on \r\n|\r|\n, drop one trailing empty line, join with \n.
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t start = src_.find('{', pos);
      while (start != std::string::npos && start + 1 < src_.size() && !std::strchr("{%#", src_[start + 1]))
        start = src_.find('{', start + 1);
      if (start == std::string::npos || start + 1 >= src_.size()) {
        emit(Tok::kText, src_.substr(pos), pos);
        break;
      }
      char kind = src_[start + 1];
      char sign = start + 2 < src_.size() && (src_[start + 2] == '-' || src_[start + 2] == '+') ? src_[start + 2] : 0;
      if (kind == '{' && sign == '+') sign = 0;  // "{{+" is not a control sign
      std::string text = src_.substr(pos, start - pos);
      if (sign == '-') {
        text = rstrip_space(text);
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if ((l_pos > 0 || line_starting) && all_space(text.substr(l_pos))) text.resize(l_pos);
      }
      emit(Tok::kText, text, pos);
      size_t body = start + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        pos = lex_comment(start, body);
      } else if (kind == '%' && is_raw(body)) {
        pos = lex_raw(start, body);
      } else {
        pos = lex_tag(kind, start, body);
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    out_.push_back({Tok::kEof, "", 0, 0});
    set_pos(out_.back(), src_.size());
    return std::move(out_);
  }

 private:
  void set_pos(Token& t, size_t off) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), off) - 1;
    t.line = static_cast<int>(it - line_starts_.begin()) + 1;
    t.col = static_cast<int>(off - *it) + 1;
  }
  void emit(Tok kind, std::string text, size_t off) {
    if (kind == Tok::kText && text.empty()) return;
    Token t{kind, std::move(text)};
    set_pos(t, off);
    out_.push_back(std::move(t));
  }
  [[noreturn]] void error_at(size_t off, const std::string& msg) const {
    Token t{Tok::kEof, ""};
    set_pos(t, off);
    syntax_error(what_, t.line, t.col, msg);
  }

  // After an end marker: "-" strips following whitespace, "+" keeps it,
  // plain "%}"/"#}" drop one newline (trim_blocks).
  size_t after_end(size_t p, char sign, bool trim) const {
    if (sign == '-') {
      std::u32string rest = utf8_decode(src_.substr(p));
      size_t n = 0;
      while (n < rest.size() && is_python_space(rest[n])) ++n;
      return p + utf8_encode(rest.substr(0, n)).size();
    }
    if (sign != '+' && trim && p < src_.size() && src_[p] == '\n') return p + 1;
    return p;
  }

  size_t lex_comment(size_t start, size_t body) {
    size_t end = src_.find("#}", body);
    if (end == std::string::npos) error_at(start, "missing end of comment tag '#}'");
    char sign = end > body && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
    return after_end(end + 2, sign, true);
  }

  size_t skip_ws(size_t p) const {
    while (p < src_.size() && std::isspace(static_cast<unsigned char>(src_[p]))) ++p;
    return p;
  }
  bool word_at(size_t p, const char* w) const {
    size_t n = std::strlen(w);
    return src_.compare(p, n, w) == 0 && (p + n >= src_.size() || !(std::isalnum(static_cast<unsigned char>(src_[p + n])) || src_[p + n] == '_'));
  }
  bool is_raw(size_t body) const {
    size_t p = skip_ws(body);
    if (!word_at(p, "raw")) return false;
    p = skip_ws(p + 3);
    return src_.compare(p, 2, "%}") == 0 || src_.compare(p, 3, "-%}") == 0;
  }
  size_t lex_raw(size_t start, size_t body) {
    size_t p = skip_ws(skip_ws(body) + 3);
    char sign = src_[p] == '-' ? '-' : 0;
    p = after_end(p + (sign ? 3 : 2), sign, true);
    for (size_t q = src_.find("{%", p); q != std::string::npos; q = src_.find("{%", q + 2)) {
      size_t r = q + 2;
      char s2 = r < src_.size() && (src_[r] == '-' || src_[r] == '+') ? src_[r++] : 0;
      r = skip_ws(r);
      if (!word_at(r, "endraw")) continue;
      r = skip_ws(r + 6);
      char s3 = r < src_.size() && (src_[r] == '-' || src_[r] == '+') ? src_[r++] : 0;
      if (src_.compare(r, 2, "%}") != 0) continue;
      std::string text = src_.substr(p, q - p);
      emit(Tok::kText, s2 == '-' ? rstrip_space(text) : text, p);
      return after_end(r + 2, s3, true);
    }
    error_at(start, "missing end of raw directive '{% endraw %}'");
  }

  size_t lex_tag(char kind, size_t start, size_t p) {
    emit(kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin, kind == '{' ? "{{" : "{%", start);
    const std::string end = kind == '{' ? "}}" : "%}";
    std::vector<char> brackets;
    for (;;) {
      p = skip_ws(p);
      if (p >= src_.size())
        error_at(start, str_cat("unexpected end of template, expected '", end, "' to close the tag opened here"));
      if (brackets.empty()) {
        char sign = (src_[p] == '-' || (src_[p] == '+' && kind == '%')) ? src_[p] : 0;
        if (src_.compare(p + (sign ? 1 : 0), 2, end) == 0) {
          emit(kind == '{' ? Tok::kVarEnd : Tok::kBlockEnd, end, p);
          return after_end(p + (sign ? 3 : 2), sign, kind == '%');
        }
      }
      p = lex_token(p, brackets);
    }
  }

  size_t lex_token(size_t p, std::vector<char>& brackets) {
    char c = src_[p];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t q = p;
      while (q < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) ++q;
      emit(Tok::kName, src_.substr(p, q - p), p);
      return q;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return lex_number(p);
    if (c == '\'' || c == '"') return lex_string(p);
    static const char* kOps2[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* op : kOps2)
      if (src_.compare(p, 2, op) == 0) {
        emit(Tok::kOp, op, p);
        return p + 2;
      }
    if (!std::strchr("+-*/%~<>=.,:|()[]{}", c)) error_at(p, str_cat("unexpected character ", quote_for_message(std::string(1, c))));
    if (c == '(' || c == '[' || c == '{') brackets.push_back(c);
    if (c == ')' || c == ']' || c == '}') {
      char open = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (brackets.empty()) error_at(p, str_cat("unexpected '", c, "'"));
      if (brackets.back() != open) {
        char close = brackets.back() == '(' ? ')' : brackets.back() == '[' ? ']' : '}';
        error_at(p, str_cat("unexpected '", c, "', expected '", close, "'"));
      }
      brackets.pop_back();
    }
    emit(Tok::kOp, std::string(1, c), p);
    return p + 1;
  }

  size_t lex_number(size_t p) {
    size_t q = p;
    auto digits = [&] {
      while (q < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) ++q;
    };
    digits();
    bool is_float = false;
    if (q + 1 < src_.size() && src_[q] == '.' && std::isdigit(static_cast<unsigned char>(src_[q + 1]))) {
      is_float = true;
      ++q;
      digits();
    }
    if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t r = q + 1;
      if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
      if (r < src_.size() && std::isdigit(static_cast<unsigned char>(src_[r]))) {
        is_float = true;
        q = r;
        digits();
      }
    }
    std::string text;
    for (size_t i = p; i < q; ++i)
      if (src_[i] != '_') text += src_[i];
    emit(is_float ? Tok::kFloat : Tok::kInt, text, p);
    return q;
  }

  size_t lex_string(size_t p) {
    char quote = src_[p];
    std::string value;
    size_t q = p + 1;
    for (;; ++q) {
      if (q >= src_.size()) error_at(p, "unterminated string literal");
      char c = src_[q];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        continue;
      }
      if (++q >= src_.size()) error_at(p, "unterminated string literal");
      q = unescape(q, value);
    }
    emit(Tok::kString, value, p);
    return q + 1;
  }

  // Python "unicode-escape" of one escape whose letter is at q; returns the
  // index of its last character. Unknown escapes keep their backslash.
  size_t unescape(size_t q, std::string& value) const {
    char e = src_[q];
    const char* simple = std::strchr("nrtbfva0\\'\"\n", e);
    if (simple) {
      static const char kFrom[] = "nrtbfva0\\'\"\n";
      static const char* kTo[] = {"\n", "\r", "\t", "\b", "\f", "\v", "\a", "", "\\", "'", "\"", ""};
      size_t i = static_cast<size_t>(std::strchr(kFrom, e) - kFrom);
      if (e == '0') value += '\0'; else value += kTo[i];
      return q;
    }
    int n = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (n == 0) {
      value += '\\';
      value += e;
      return q;
    }
    if (q + n >= src_.size() + 0 || q + n > src_.size() - 1) error_at(q, "truncated \\x/\\u escape in string literal");
    char32_t cp = 0;
    for (int k = 1; k <= n; ++k) {
      char h = src_[q + k];
      if (!std::isxdigit(static_cast<unsigned char>(h))) error_at(q, "bad \\x/\\u escape in string literal");
      cp = cp * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
    }
    if (cp > 0x10ffff) error_at(q, "\\U escape out of range");
    value += utf8_encode(std::u32string(1, cp));
    return q + n;
  }

  std::string what_;
  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> lex_template(const std::string& source, const std::string& what) {
  return Lexer(source, what).run();
}

}  // namespace blockspec::jinja
