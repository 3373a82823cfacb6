// A byte-level NFA (Thompson construction) and the pieces structured output
// is compiled from: literals, byte ranges, UTF-8 characters, sequences,
// alternatives and bounded / unbounded repetition. Regular languages only:
// JSON nesting is bounded by the schema (or by a depth limit for free JSON).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace blockspec::grammar {

struct Nfa {
  struct Edge {
    uint8_t lo, hi;  // inclusive byte range
    int32_t to;
  };
  std::vector<std::vector<Edge>> edges;    // [states]
  std::vector<std::vector<int32_t>> eps;   // [states]
  int32_t start = -1, accept = -1;
  int32_t add_state();
  int64_t n_states() const { return static_cast<int64_t>(edges.size()); }
};

// A fragment: one entry and one exit state of the NFA under construction.
struct Frag {
  int32_t in, out;
};

// Builds fragments into one Nfa. A fragment is used once; repetition takes a
// generator so each copy is fresh. Throws Error past max_states.
class Builder {
 public:
  explicit Builder(int64_t max_states = 200000) : max_states_(max_states) {}
  Frag empty();
  Frag bytes(uint8_t lo, uint8_t hi);
  Frag literal(const std::string& s);
  // One UTF-8 character: any code point (excluding the ASCII bytes for which
  // ascii_ok is false); multi-byte sequences are accepted as well-formed.
  Frag utf8_char(const std::function<bool(uint8_t)>& ascii_ok);
  Frag seq(std::vector<Frag> parts);
  Frag alt(std::vector<Frag> parts);
  Frag opt(Frag f);
  Frag star(Frag f);
  // Between lo and hi copies (hi < 0: unbounded) of what gen() builds.
  Frag repeat(const std::function<Frag()>& gen, int64_t lo, int64_t hi);
  // Finishes the automaton with f as the whole language.
  Nfa finish(Frag f);

 private:
  int32_t state();
  void eps(int32_t from, int32_t to) { nfa_.eps[from].push_back(to); }
  Nfa nfa_;
  int64_t max_states_;
};

// Regular expressions (the subset JSON-schema patterns and guided_regex
// use): literals and escapes (\d \w \s \D \W \S \. \n \t \uXXXX ...), classes
// [a-z] [^...] with escapes, ".", groups (...) (?:...), alternation |,
// quantifiers * + ? {m} {m,} {m,n} (lazy forms read as greedy), anchors ^ and
// $ at the ends. The whole text must match. Throws Error naming the problem.
// json_string: the matched text is the inside of a JSON string, so '"', '\\'
// and control characters the pattern matches are produced escaped.
Frag compile_regex(Builder& b, const std::string& pattern, bool json_string = false);

// The JSON escape of one byte that cannot stand in a JSON string as itself
// ('"', '\\', < 0x20), or the byte itself.
std::string json_escaped_byte(uint8_t c);

}  // namespace blockspec::grammar
