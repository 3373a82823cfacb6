#include "grammar/nfa.h"

#include <algorithm>
#include <array>
#include <memory>

#include "base/error.h"
#include "tokenizer/unicode_text.h"

namespace blockspec::grammar {

int32_t Nfa::add_state() {
  edges.emplace_back();
  eps.emplace_back();
  return static_cast<int32_t>(edges.size() - 1);
}

int32_t Builder::state() {
  if (nfa_.n_states() >= max_states_)
    fail("structured output: the grammar needs more than ", max_states_,
         " automaton states; simplify the schema (fewer nested or bounded repetitions)");
  return nfa_.add_state();
}

Frag Builder::empty() {
  const int32_t a = state(), b = state();
  eps(a, b);
  return {a, b};
}

Frag Builder::bytes(uint8_t lo, uint8_t hi) {
  const int32_t a = state(), b = state();
  nfa_.edges[a].push_back({lo, hi, b});
  return {a, b};
}

Frag Builder::literal(const std::string& s) {
  std::vector<Frag> parts;
  for (unsigned char c : s) parts.push_back(bytes(c, c));
  return parts.empty() ? empty() : seq(std::move(parts));
}

Frag Builder::utf8_char(const std::function<bool(uint8_t)>& ascii_ok) {
  const int32_t a = state(), b = state();
  for (int lo = 0; lo < 0x80;) {  // runs of allowed ASCII bytes
    if (!ascii_ok(static_cast<uint8_t>(lo))) {
      ++lo;
      continue;
    }
    int hi = lo;
    while (hi + 1 < 0x80 && ascii_ok(static_cast<uint8_t>(hi + 1))) ++hi;
    nfa_.edges[a].push_back({static_cast<uint8_t>(lo), static_cast<uint8_t>(hi), b});
    lo = hi + 1;
  }
  // Multi-byte sequences: a lead byte then 1-3 continuation bytes.
  const int32_t c1 = state(), c2 = state(), c3 = state();
  nfa_.edges[a].push_back({0xC2, 0xDF, c1});
  nfa_.edges[a].push_back({0xE0, 0xEF, c2});
  nfa_.edges[a].push_back({0xF0, 0xF4, c3});
  nfa_.edges[c3].push_back({0x80, 0xBF, c2});
  nfa_.edges[c2].push_back({0x80, 0xBF, c1});
  nfa_.edges[c1].push_back({0x80, 0xBF, b});
  return {a, b};
}

Frag Builder::seq(std::vector<Frag> parts) {
  if (parts.empty()) return empty();
  for (size_t i = 0; i + 1 < parts.size(); ++i) eps(parts[i].out, parts[i + 1].in);
  return {parts.front().in, parts.back().out};
}

Frag Builder::alt(std::vector<Frag> parts) {
  const int32_t a = state(), b = state();
  for (const Frag& f : parts) {
    eps(a, f.in);
    eps(f.out, b);
  }
  return {a, b};
}

Frag Builder::opt(Frag f) {
  eps(f.in, f.out);
  return f;
}

Frag Builder::star(Frag f) {
  const int32_t a = state(), b = state();
  eps(a, f.in);
  eps(a, b);
  eps(f.out, f.in);
  eps(f.out, b);
  return {a, b};
}

Frag Builder::repeat(const std::function<Frag()>& gen, int64_t lo, int64_t hi) {
  std::vector<Frag> parts;
  for (int64_t i = 0; i < lo; ++i) parts.push_back(gen());
  if (hi < 0) {
    parts.push_back(star(gen()));
  } else {
    // Optional copies nested so the NFA stays linear: (x(x(x)?)?)?
    std::vector<Frag> tail;
    for (int64_t i = lo; i < hi; ++i) tail.push_back(gen());
    if (!tail.empty()) {
      for (size_t i = 1; i < tail.size(); ++i) eps(tail[i - 1].out, tail[i].in);
      const int32_t end = tail.back().out;
      for (size_t i = 1; i < tail.size(); ++i) eps(tail[i].in, end);  // the run may end before copy i
      parts.push_back(opt({tail.front().in, end}));
    }
  }
  return seq(std::move(parts));
}

Nfa Builder::finish(Frag f) {
  nfa_.start = f.in;
  nfa_.accept = f.out;
  return std::move(nfa_);
}

// ---- regular expressions -------------------------------------------------

namespace {

// A parsed regex: built into fragments as often as repetition needs.
struct Node {
  enum Kind { kLit, kClass, kSeq, kAlt, kRepeat } kind = kLit;
  std::string lit;                    // kLit: UTF-8 bytes
  std::array<bool, 128> ascii{};      // kClass: allowed ASCII bytes
  bool non_ascii = false;             // kClass: every non-ASCII character too
  std::vector<std::unique_ptr<Node>> kids;
  int64_t lo = 0, hi = 0;             // kRepeat
};

class RegexParser {
 public:
  explicit RegexParser(const std::string& p) : p_(p) {}
  std::unique_ptr<Node> parse() {
    if (i_ < p_.size() && p_[i_] == '^') ++i_;
    auto n = alternation();
    if (i_ != p_.size()) bad("unbalanced ')'");
    return n;
  }

 private:
  const std::string& p_;
  size_t i_ = 0;
  int depth_ = 0;

  [[noreturn]] void bad(const std::string& why) const {
    fail("regex ", quote_for_message(p_), " at offset ", i_, ": ", why);
  }
  std::unique_ptr<Node> alternation() {
    auto first = sequence();
    if (i_ >= p_.size() || p_[i_] != '|') return first;
    auto n = std::make_unique<Node>();
    n->kind = Node::kAlt;
    n->kids.push_back(std::move(first));
    while (i_ < p_.size() && p_[i_] == '|') {
      ++i_;
      n->kids.push_back(sequence());
    }
    return n;
  }
  std::unique_ptr<Node> sequence() {
    auto n = std::make_unique<Node>();
    n->kind = Node::kSeq;
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
      if (p_[i_] == '$' && i_ + 1 == p_.size()) {  // end anchor
        ++i_;
        break;
      }
      auto a = atom();
      n->kids.push_back(quantified(std::move(a)));
    }
    return n;
  }
  static std::unique_ptr<Node> cls(const std::function<bool(int)>& in, bool non_ascii) {
    auto n = std::make_unique<Node>();
    n->kind = Node::kClass;
    for (int c = 0; c < 128; ++c) n->ascii[c] = in(c);
    n->non_ascii = non_ascii;
    return n;
  }
  static bool is_digit(int c) { return c >= '0' && c <= '9'; }
  static bool is_word(int c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
  static bool is_space(int c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
  // A class escape (\d \w \s and negations) into `set`; false if e is not one.
  static bool class_escape(char e, std::array<bool, 128>& set, bool& non_ascii) {
    std::function<bool(int)> f;
    bool neg = false;
    switch (e) {
      case 'd': f = is_digit; break;
      case 'w': f = is_word; break;
      case 's': f = is_space; break;
      case 'D': f = is_digit, neg = true; break;
      case 'W': f = is_word, neg = true; break;
      case 'S': f = is_space, neg = true; break;
      default: return false;
    }
    for (int c = 0; c < 128; ++c)
      if (f(c) != neg) set[c] = true;
    if (neg) non_ascii = true;
    return true;
  }
  // A single-character escape's UTF-8 bytes.
  // \uXXXX / \xXX: exactly n hex digits, the code point as UTF-8.
  std::string hex_escape(size_t n) {
    if (i_ + n > p_.size() || !std::all_of(p_.begin() + i_, p_.begin() + i_ + n,
                                           [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); }))
      bad(n == 4 ? "\\u needs 4 hex digits" : "\\x needs 2 hex digits");
    const uint32_t cp = static_cast<uint32_t>(std::stoul(p_.substr(i_, n), nullptr, 16));
    i_ += n;
    std::string out;
    tok::append_utf8(out, cp);
    return out;
  }

  std::string char_escape(char e) {
    switch (e) {
      case 'n': return "\n";
      case 't': return "\t";
      case 'r': return "\r";
      case 'f': return "\f";
      case 'v': return "\v";
      case '0': return std::string(1, '\0');
      case 'u': return hex_escape(4);
      case 'x': return hex_escape(2);
      default:
        if (std::isalnum(static_cast<unsigned char>(e))) bad(std::string("unsupported escape \\") + e);
        return std::string(1, e);  // \. \\ \( ... : the character itself
    }
  }
  // The UTF-8 bytes of the character at i_ (advances).
  std::string next_char() {
    const unsigned char c = static_cast<unsigned char>(p_[i_]);
    const size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (i_ + n > p_.size()) bad("truncated UTF-8");
    std::string s = p_.substr(i_, n);
    i_ += n;
    return s;
  }
  std::unique_ptr<Node> atom() {
    const char c = p_[i_];
    if (c == '(') {
      if (++depth_ > 64) bad("groups nest more than 64 levels");
      ++i_;
      if (p_.compare(i_, 2, "?:") == 0) i_ += 2;
      else if (i_ < p_.size() && p_[i_] == '?') bad("only (?:...) groups are supported");
      auto n = alternation();
      if (i_ >= p_.size() || p_[i_] != ')') bad("missing ')'");
      ++i_;
      --depth_;
      return n;
    }
    if (c == '[') return bracket();
    if (c == '.') {
      ++i_;
      return cls([](int ch) { return ch != '\n'; }, true);
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') bad("a quantifier with nothing to repeat");
    auto n = std::make_unique<Node>();
    if (c == '\\') {
      if (++i_ >= p_.size()) bad("a trailing backslash");
      const char e = p_[i_++];
      std::array<bool, 128> set{};
      bool non_ascii = false;
      if (class_escape(e, set, non_ascii)) return cls([&](int ch) { return set[ch]; }, non_ascii);
      n->lit = char_escape(e);
      return n;
    }
    n->lit = next_char();
    return n;
  }
  std::unique_ptr<Node> bracket() {
    ++i_;  // [
    bool neg = false;
    if (i_ < p_.size() && p_[i_] == '^') neg = true, ++i_;
    std::array<bool, 128> set{};
    bool non_ascii = false;
    bool first = true;
    while (i_ < p_.size() && (p_[i_] != ']' || first)) {
      first = false;
      int lo;
      if (p_[i_] == '\\') {
        if (++i_ >= p_.size()) bad("a trailing backslash");
        const char e = p_[i_++];
        if (class_escape(e, set, non_ascii)) continue;
        const std::string s = char_escape(e);
        if (s.size() != 1) {  // a non-ASCII character in a class
          non_ascii = true;
          continue;
        }
        lo = static_cast<unsigned char>(s[0]);
      } else if (static_cast<unsigned char>(p_[i_]) >= 0x80) {
        next_char();
        non_ascii = true;  // non-ASCII members: any non-ASCII character (a superset, noted in docs)
        continue;
      } else {
        lo = static_cast<unsigned char>(p_[i_++]);
      }
      int hi = lo;
      if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        ++i_;
        if (p_[i_] == '\\') {
          ++i_;
          const std::string s = char_escape(p_[i_++]);
          hi = static_cast<unsigned char>(s[0]);
        } else if (static_cast<unsigned char>(p_[i_]) >= 0x80) {
          next_char();
          non_ascii = true;
          hi = 127;
        } else {
          hi = static_cast<unsigned char>(p_[i_++]);
        }
        if (hi < lo) bad("a range out of order");
      }
      for (int ch = lo; ch <= std::min(hi, 127); ++ch) set[ch] = true;
    }
    if (i_ >= p_.size()) bad("missing ']'");
    ++i_;
    if (neg) return cls([&](int ch) { return !set[ch]; }, !non_ascii);
    return cls([&](int ch) { return set[ch]; }, non_ascii);
  }
  std::unique_ptr<Node> quantified(std::unique_ptr<Node> a) {
    if (i_ >= p_.size()) return a;
    int64_t lo, hi;
    const char c = p_[i_];
    if (c == '*') lo = 0, hi = -1, ++i_;
    else if (c == '+') lo = 1, hi = -1, ++i_;
    else if (c == '?') lo = 0, hi = 1, ++i_;
    else if (c == '{' && i_ + 1 < p_.size() && std::isdigit(static_cast<unsigned char>(p_[i_ + 1]))) {
      const size_t close = p_.find('}', i_);
      if (close == std::string::npos) bad("missing '}'");
      const std::string body = p_.substr(i_ + 1, close - i_ - 1);
      const size_t comma = body.find(',');
      try {
        lo = std::stoll(body.substr(0, comma));
        hi = comma == std::string::npos ? lo : comma + 1 == body.size() ? -1 : std::stoll(body.substr(comma + 1));
      } catch (const std::exception&) {
        bad("a bad {m,n} quantifier");
      }
      if (lo < 0 || (hi >= 0 && hi < lo) || lo > 1000 || hi > 1000) bad("a {m,n} quantifier out of range (at most 1000)");
      i_ = close + 1;
    } else {
      return a;
    }
    if (i_ < p_.size() && (p_[i_] == '?' || p_[i_] == '+')) ++i_;  // lazy / possessive: the same language
    auto n = std::make_unique<Node>();
    n->kind = Node::kRepeat;
    n->lo = lo;
    n->hi = hi;
    n->kids.push_back(std::move(a));
    return n;
  }
};

bool json_special(int c) { return c == '"' || c == '\\' || c < 0x20; }

Frag build(Builder& b, const Node& n, bool js) {
  switch (n.kind) {
    case Node::kLit: {
      if (!js) return b.literal(n.lit);
      std::string out;
      for (unsigned char c : n.lit) out += json_escaped_byte(c);
      return b.literal(out);
    }
    case Node::kClass: {
      if (js) {  // plain characters, and the specials the class holds in their escaped form
        std::vector<Frag> parts;
        bool any_plain = n.non_ascii;
        for (int c = 0; c < 128; ++c) {
          if (!n.ascii[c]) continue;
          if (json_special(c)) parts.push_back(b.literal(json_escaped_byte(static_cast<uint8_t>(c))));
          else any_plain = true;
        }
        if (any_plain) {
          if (n.non_ascii) {
            parts.push_back(b.utf8_char([&](uint8_t ch) { return n.ascii[ch] && !json_special(ch); }));
          } else {
            for (int lo = 0; lo < 128;) {
              if (!n.ascii[lo] || json_special(lo)) {
                ++lo;
                continue;
              }
              int hi = lo;
              while (hi + 1 < 128 && n.ascii[hi + 1] && !json_special(hi + 1)) ++hi;
              parts.push_back(b.bytes(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)));
              lo = hi + 1;
            }
          }
        }
        if (parts.empty()) fail("regex: an empty character class matches nothing");
        return parts.size() == 1 ? parts[0] : b.alt(std::move(parts));
      }
      if (!n.non_ascii) {
        std::vector<Frag> parts;
        for (int lo = 0; lo < 128;) {
          if (!n.ascii[lo]) {
            ++lo;
            continue;
          }
          int hi = lo;
          while (hi + 1 < 128 && n.ascii[hi + 1]) ++hi;
          parts.push_back(b.bytes(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)));
          lo = hi + 1;
        }
        if (parts.empty()) fail("regex: an empty character class matches nothing");
        return parts.size() == 1 ? parts[0] : b.alt(std::move(parts));
      }
      return b.utf8_char([&](uint8_t ch) { return n.ascii[ch]; });
    }
    case Node::kSeq: {
      std::vector<Frag> parts;
      for (const auto& k : n.kids) parts.push_back(build(b, *k, js));
      return b.seq(std::move(parts));
    }
    case Node::kAlt: {
      std::vector<Frag> parts;
      for (const auto& k : n.kids) parts.push_back(build(b, *k, js));
      return b.alt(std::move(parts));
    }
    case Node::kRepeat: return b.repeat([&] { return build(b, *n.kids[0], js); }, n.lo, n.hi);
  }
  return b.empty();
}

}  // namespace

std::string json_escaped_byte(uint8_t c) {
  switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\t': return "\\t";
    case '\r': return "\\r";
    case '\b': return "\\b";
    case '\f': return "\\f";
    default:
      if (c < 0x20) {
        static const char* hex = "0123456789abcdef";
        return std::string("\\u00") + hex[c >> 4] + hex[c & 15];
      }
      return std::string(1, static_cast<char>(c));
  }
}

Frag compile_regex(Builder& b, const std::string& pattern, bool json_string) {
  const std::unique_ptr<Node> n = RegexParser(pattern).parse();
  return build(b, *n, json_string);
}

}  // namespace blockspec::grammar
