// Structured output's automata (issue 19): regexes, JSON schemas and free
// JSON accept exactly the texts they should, byte by byte and token by token
// (a byte-level vocabulary and the tiny BPE one), stop tokens are allowed only
// once the text is complete, and unsupported schema keywords are errors.
#include <gtest/gtest.h>

#include "base/error.h"
#include "grammar/compiled_grammar.h"
#include "grammar/json_schema.h"
#include "tokenizer/tokenizer.h"

namespace blockspec::grammar {
namespace {

using ojson = nlohmann::ordered_json;
constexpr int32_t kStop = 256;

// Tokens 0..255: one byte each; 256: a stop token.
std::shared_ptr<Vocab> byte_vocab() {
  auto v = std::make_shared<Vocab>();
  for (int b = 0; b < 256; ++b) v->bytes.push_back(std::string(1, static_cast<char>(b)));
  v->bytes.push_back("");
  v->special.assign(257, false);
  v->special[kStop] = true;
  v->build_trie();
  return v;
}

bool accepts(Nfa nfa, const std::string& text) {
  CompiledGrammar g(std::move(nfa), byte_vocab(), {kStop});
  int32_t s = g.start_state();
  for (unsigned char c : text) {
    if (!token_allowed(g.allowed(s), c)) return false;
    s = g.next(s, c);
    if (s < 0) return false;
  }
  return token_allowed(g.allowed(s), kStop);  // stop tokens: allowed exactly when the text is complete
}

TEST(Grammar, Regex) {
  for (const char* ok : {"abx", "abcx", "y"}) EXPECT_TRUE(accepts(compile_regex_language("[a-c]{2,3}x|y"), ok)) << ok;
  for (const char* no : {"ax", "abcax", "", "yy"}) EXPECT_FALSE(accepts(compile_regex_language("[a-c]{2,3}x|y"), no)) << no;
  EXPECT_TRUE(accepts(compile_regex_language("^\\d{3}-[A-Z]+(?:\\.\\w*)?$"), "123-AB.c_9"));
  EXPECT_FALSE(accepts(compile_regex_language("\\d{3}"), "12a"));
  EXPECT_TRUE(accepts(compile_regex_language("caf\u00e9 .+"), "caf\u00e9 \u00fcber"));
  EXPECT_TRUE(accepts(compile_regex_language("[^a]*"), "bcd\u00e9"));
  EXPECT_THROW(compile_regex_language("(ab"), Error);
  EXPECT_THROW(compile_regex_language("a{3,1}"), Error);
  EXPECT_THROW(compile_regex_language("(?=a)"), Error);
  EXPECT_THROW(compile_regex_language("\\uzzzz"), Error);  // not hex: a one-line error, not std::invalid_argument
  EXPECT_THROW(compile_regex_language("\\u12g4"), Error);
  EXPECT_THROW(compile_regex_language("\\x4"), Error);
  EXPECT_TRUE(accepts(compile_regex_language("\\x41\\u00e9"), "A\u00e9"));
  EXPECT_TRUE(accepts(compile_choice({"yes", "no", "maybe"}), "no"));
  EXPECT_FALSE(accepts(compile_choice({"yes", "no"}), "n"));
}

TEST(Grammar, JsonSchema) {
  const ojson schema = ojson::parse(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 5}, "age": {"type": "integer", "minimum": 0},
      "tags": {"type": "array", "items": {"enum": ["a", "b c", 3]}, "minItems": 1, "maxItems": 2},
      "code": {"type": "string", "pattern": "^[A-Z]{2}\"\\d$"}, "note": {"type": ["string", "null"]}},
      "required": ["name", "tags"]})");
  const Nfa n = compile_json_schema(schema);
  for (const char* ok : {R"({"name": "Bob", "tags": ["a"]})", R"({"name":"Bob","age":42,"tags":["b c", 3]})",
                         R"({"name": "\u00e9\n", "tags": [3], "code": "AB\"7", "note": null})",
                         R"({"name": "", "tags": ["a"], "note": "x"})"})
    EXPECT_TRUE(accepts(n, ok)) << ok;
  for (const char* no : {R"({"tags": ["a"]})", R"({"name": "Bob"})", R"({"name": "Bob", "tags": []})",
                         R"({"name": "Bobbie", "tags": ["a"]})", R"({"name": "Bob", "tags": ["a", "a", "a"]})",
                         R"({"name": "Bob", "age": -1, "tags": ["a"]})", R"({"tags": ["a"], "name": "Bob"})",
                         R"({"name": "Bob", "tags": ["a"], })", R"({"name": "Bob", "tags": ["a"], "x": 1})",
                         R"({"name": "Bob", "tags": ["a"], "code": "AB7"})", R"({"name": "Bob", "tags": ["d"]})"})
    EXPECT_FALSE(accepts(n, no)) << no;
  // $ref and anyOf; numbers.
  const ojson refs = ojson::parse(R"({"$defs": {"p": {"type": "object", "properties": {"x": {"type": "number"}},
      "required": ["x"]}}, "anyOf": [{"$ref": "#/$defs/p"}, {"type": "boolean"}]})");
  for (const char* ok : {R"({"x": -1.5e+3})", "true", R"({"x": 0})"}) EXPECT_TRUE(accepts(compile_json_schema(refs), ok)) << ok;
  for (const char* no : {R"({"x": 01})", R"({"x": 1.})", "null"}) EXPECT_FALSE(accepts(compile_json_schema(refs), no)) << no;
  // Free JSON objects.
  for (const char* ok : {"{}", R"({"a": [1, {"b": null}], "c": "d"})", R"({"a":[]})"})
    EXPECT_TRUE(accepts(compile_json_object(), ok)) << ok;
  for (const char* no : {"[]", R"({"a": [1,]})", "{\"a\": 1", R"({a: 1})"}) EXPECT_FALSE(accepts(compile_json_object(), no)) << no;
  // Unsupported constraints are errors naming the keyword and where it is.
  try {
    compile_json_schema(ojson::parse(R"({"type": "object", "properties": {"n": {"type": "number", "maximum": 3}}})"));
    ADD_FAILURE() << "maximum accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/properties/n: the keyword \"maximum\" is not supported"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(compile_json_schema(ojson::parse(R"({"type": "string", "format": "hostname"})")), Error);
  EXPECT_THROW(compile_json_schema(ojson::parse(R"({"$ref": "#/nowhere"})")), Error);
}

// Over a real BPE vocabulary: the tokens a mask allows are exactly those whose
// bytes keep the text a prefix of the language, and a whole answer spelled in
// multi-byte tokens walks through.
TEST(Grammar, TokenMasksOverABpeVocabulary) {
  const Tokenizer tok = Tokenizer::from_file(std::string(BS_SOURCE_DIR) + "/tests/fixtures/golden/qwen3-tiny-f32/tokenizer.json");
  auto v = std::make_shared<Vocab>();
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    v->bytes.push_back(tok.token_bytes(id));
    v->special.push_back(tok.is_special(id));
  }
  v->build_trie();
  const int32_t eos = 511;
  CompiledGrammar g(compile_json_schema(ojson::parse(R"({"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}},
      "required": ["city"]})")), v, {eos});
  const std::string text = R"({"city": "Rome"})";
  const std::vector<int32_t> ids = tok.encode(text);
  int32_t s = g.start_state();
  std::string sofar;
  for (int32_t id : ids) {
    const std::vector<uint64_t>& m = g.allowed(s);
    EXPECT_FALSE(token_allowed(m, eos)) << "stop allowed after " << sofar;
    // Every allowed token extends a prefix of some valid text; check a few by brute force.
    for (int32_t t = 0; t < tok.vocab_size(); ++t) {
      if (t == eos) continue;  // next() moves past a stop token whenever allowed() lets it through
      const bool allowed = token_allowed(m, t);
      EXPECT_EQ(allowed, g.next(s, t) >= 0) << t;
    }
    ASSERT_TRUE(token_allowed(m, id)) << "token " << id << " after " << sofar;
    s = g.next(s, id);
    sofar += tok.token_bytes(id);
  }
  EXPECT_TRUE(token_allowed(g.allowed(s), eos));
  EXPECT_GE(g.next(s, eos), 0);
  EXPECT_FALSE(token_allowed(g.allowed(g.start_state()), tok.encode("[")[0]));
}

}  // namespace
}  // namespace blockspec::grammar
