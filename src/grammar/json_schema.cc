#include "grammar/json_schema.h"

#include <set>

#include "base/error.h"

namespace blockspec::grammar {

using ojson = nlohmann::ordered_json;

namespace {

constexpr int kFreeDepth = 4;  // nesting of free JSON (json_object, {} schemas)
constexpr int kMaxRefDepth = 6;
constexpr int kMaxSchemaDepth = 64;

const std::set<std::string> kAnnotations = {"title", "description", "default", "examples", "$schema", "$id",
                                            "$comment", "deprecated", "readOnly", "writeOnly", "additionalProperties",
                                            "$defs", "definitions", "strict", "name"};

class SchemaCompiler {
 public:
  SchemaCompiler(Builder& b, const ojson& root) : b_(b), root_(root) {}

  Frag ws() { return b_.opt(b_.literal(" ")); }

  Frag string_char() {
    return b_.alt({b_.utf8_char([](uint8_t c) { return c != '"' && c != '\\' && c >= 0x20; }),
                   b_.seq({b_.literal("\\"), b_.alt({b_.bytes('"', '"'), b_.bytes('\\', '\\'), b_.bytes('/', '/'),
                                                     b_.bytes('b', 'b'), b_.bytes('f', 'f'), b_.bytes('n', 'n'),
                                                     b_.bytes('r', 'r'), b_.bytes('t', 't')})}),
                   b_.seq({b_.literal("\\u"), b_.repeat([&] { return hex(); }, 4, 4)})});
  }
  Frag hex() { return b_.alt({b_.bytes('0', '9'), b_.bytes('a', 'f'), b_.bytes('A', 'F')}); }
  Frag digits(int64_t lo, int64_t hi) { return b_.repeat([&] { return b_.bytes('0', '9'); }, lo, hi); }

  Frag any_string() { return b_.seq({b_.literal("\""), b_.star(string_char()), b_.literal("\"")}); }
  Frag integer(bool nonneg) {
    Frag body = b_.alt({b_.literal("0"), b_.seq({b_.bytes('1', '9'), digits(0, 15)})});
    return nonneg ? body : b_.seq({b_.opt(b_.literal("-")), body});
  }
  Frag number() {
    return b_.seq({integer(false), b_.opt(b_.seq({b_.literal("."), digits(1, 15)})),
                   b_.opt(b_.seq({b_.alt({b_.literal("e"), b_.literal("E")}),
                                  b_.opt(b_.alt({b_.literal("+"), b_.literal("-")})), digits(1, 3)}))});
  }
  Frag any_value(int depth) {
    std::vector<Frag> alts = {b_.literal("null"), b_.literal("true"), b_.literal("false"), number(), any_string()};
    if (depth > 0) {
      alts.push_back(b_.seq({b_.literal("["), ws(),
                             b_.opt(b_.seq({any_value(depth - 1),
                                            b_.star(b_.seq({b_.literal(","), ws(), any_value(depth - 1)}))})),
                             b_.literal("]")}));
      alts.push_back(any_object(depth));
    }
    return b_.alt(std::move(alts));
  }
  Frag any_object(int depth) {
    auto member = [&] { return b_.seq({any_string(), b_.literal(":"), ws(), any_value(depth - 1)}); };
    return b_.seq({b_.literal("{"), ws(), b_.opt(b_.seq({member(), b_.star(b_.seq({b_.literal(","), ws(), member()}))})),
                   b_.literal("}")});
  }

  Frag value(const ojson& s, const std::string& path, int refs) {
    struct Depth {  // nesting of the schema itself (recursion here)
      int& d;
      explicit Depth(int& x) : d(x) { ++d; }
      ~Depth() { --d; }
    } depth(depth_);
    if (depth_ > kMaxSchemaDepth) fail(where(path), ": the schema nests more than ", kMaxSchemaDepth, " levels");
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail(where(path), ": the schema false allows no value");
      return any_value(kFreeDepth);
    }
    if (!s.is_object()) fail(where(path), ": a schema must be an object or a boolean");
    for (auto it = s.begin(); it != s.end(); ++it) check_keyword(it.key(), s, path);
    if (s.contains("$ref")) {
      if (refs >= kMaxRefDepth)
        fail(where(path), ": $ref nested more than ", kMaxRefDepth, " deep (recursive schemas are cut there)");
      return value(resolve(s["$ref"], path), path + "/$ref", refs + 1);
    }
    if (s.contains("const")) return b_.literal(s["const"].dump());
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) fail(where(path), ": enum must be a non-empty array");
      std::vector<Frag> alts;
      for (const ojson& v : s["enum"]) alts.push_back(b_.literal(v.dump()));
      return b_.alt(std::move(alts));
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      if (!s[key].is_array() || s[key].empty()) fail(where(path), ": ", key, " must be a non-empty array");
      std::vector<Frag> alts;
      for (size_t i = 0; i < s[key].size(); ++i) alts.push_back(value(s[key][i], path + "/" + key + "/" + std::to_string(i), refs));
      return b_.alt(std::move(alts));
    }
    if (s.contains("allOf")) {
      if (!s["allOf"].is_array() || s["allOf"].size() != 1)
        fail(where(path), ": allOf is supported with exactly one schema");
      return value(s["allOf"][0], path + "/allOf/0", refs);
    }
    if (!s.contains("type")) {
      if (s.contains("properties")) return object(s, path, refs);
      if (s.contains("items")) return array(s, path, refs);
      return any_value(kFreeDepth);
    }
    const ojson& t = s["type"];
    if (t.is_string()) return typed(t.get<std::string>(), s, path, refs);
    if (!t.is_array() || t.empty()) fail(where(path), ": type must be a string or a non-empty array of strings");
    std::vector<Frag> alts;
    for (const ojson& x : t) {
      if (!x.is_string()) fail(where(path), ": type must be a string or a non-empty array of strings");
      alts.push_back(typed(x.get<std::string>(), s, path, refs));
    }
    return b_.alt(std::move(alts));
  }

 private:
  Builder& b_;
  const ojson& root_;
  int depth_ = 0;

  static std::string where(const std::string& path) { return "response schema at " + (path.empty() ? "/" : path); }

  void check_keyword(const std::string& k, const ojson& s, const std::string& path) {
    static const std::set<std::string> known = {"type", "properties", "required", "items", "minItems", "maxItems",
                                                "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "pattern",
                                                "minLength", "maxLength", "format", "minimum"};
    if (kAnnotations.count(k)) return;
    if (!known.count(k)) fail(where(path), ": the keyword \"", k, "\" is not supported by blockspec's structured output");
    if (k == "minimum" && !(s[k].is_number() && s[k].get<double>() == 0 && s.value("type", ojson("")) == "integer"))
      fail(where(path), ": \"minimum\" is supported only as 0 on an integer");
  }

  const ojson& resolve(const ojson& ref, const std::string& path) {
    if (!ref.is_string()) fail(where(path), ": $ref must be a string");
    const std::string r = ref.get<std::string>();
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p = prefix;
      if (r.rfind(p, 0) != 0) continue;
      const std::string group = p.substr(2, p.size() - 3), name = r.substr(p.size());
      if (root_.contains(group) && root_[group].contains(name)) return root_[group][name];
    }
    fail(where(path), ": $ref \"", r, "\" does not name a schema under #/$defs or #/definitions");
  }

  static int64_t bound(const ojson& s, const char* key, int64_t def, const std::string& path) {
    if (!s.contains(key)) return def;
    if (!s[key].is_number_integer() || s[key].get<int64_t>() < 0)
      fail(where(path), ": ", key, " must be a non-negative integer");
    return s[key].get<int64_t>();
  }

  Frag typed(const std::string& t, const ojson& s, const std::string& path, int refs) {
    if (t == "null") return b_.literal("null");
    if (t == "boolean") return b_.alt({b_.literal("true"), b_.literal("false")});
    if (t == "integer") return integer(s.contains("minimum"));
    if (t == "number") return number();
    if (t == "string") return string(s, path);
    if (t == "array") return array(s, path, refs);
    if (t == "object") return object(s, path, refs);
    fail(where(path), ": unknown type \"", t, "\"");
  }

  Frag string(const ojson& s, const std::string& path) {
    const int64_t lo = bound(s, "minLength", 0, path), hi = bound(s, "maxLength", -1, path);
    if (hi >= 0 && hi < lo) fail(where(path), ": maxLength is below minLength");
    if (hi > 1000 || lo > 1000) fail(where(path), ": minLength / maxLength above 1000 are not supported");
    if (s.contains("pattern") || s.contains("format")) {
      if (s.contains("minLength") || s.contains("maxLength"))
        fail(where(path), ": a pattern or format with minLength / maxLength is not supported");
      std::string pattern;
      if (s.contains("pattern")) {
        if (!s["pattern"].is_string()) fail(where(path), ": pattern must be a string");
        // JSON-schema patterns search ("b" matches "abc"): unanchored ends become ".*".
        std::string p = s["pattern"].get<std::string>();
        const bool at_start = !p.empty() && p.front() == '^';
        if (at_start) p.erase(0, 1);
        const bool at_end = !p.empty() && p.back() == '$' && !(p.size() >= 2 && p[p.size() - 2] == '\\');
        if (at_end) p.pop_back();
        pattern = (at_start ? "" : ".*") + std::string("(?:") + p + ")" + (at_end ? "" : ".*");
      } else {
        pattern = format_regex(s["format"], path);
      }
      try {
        return b_.seq({b_.literal("\""), compile_regex(b_, pattern, /*json_string=*/true), b_.literal("\"")});
      } catch (const Error& e) {
        fail(where(path), ": ", e.what());
      }
    }
    return b_.seq({b_.literal("\""), b_.repeat([&] { return string_char(); }, lo, hi), b_.literal("\"")});
  }

  static std::string format_regex(const ojson& f, const std::string& path) {
    const std::string x = f.is_string() ? f.get<std::string>() : "";
    const std::string date = "[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])";
    const std::string time = "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,6})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
    if (x == "date") return date;
    if (x == "time") return time;
    if (x == "date-time") return date + "T" + time;
    if (x == "uuid") return "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
    if (x == "email") return "[a-zA-Z0-9._%+-]{1,32}@[a-zA-Z0-9-]{1,32}(?:\\.[a-zA-Z0-9-]{1,32}){0,3}\\.[a-zA-Z]{2,8}";
    fail(where(path), ": format \"", x, "\" is not supported (date, time, date-time, uuid, email)");
  }

  Frag array(const ojson& s, const std::string& path, int refs) {
    const int64_t lo = bound(s, "minItems", 0, path), hi = bound(s, "maxItems", -1, path);
    if (hi >= 0 && hi < lo) fail(where(path), ": maxItems is below minItems");
    if (lo > 64 || hi > 64) fail(where(path), ": minItems / maxItems above 64 are not supported");
    const ojson any = true;
    const ojson& items = s.contains("items") ? s["items"] : any;
    auto item = [&] { return value(items, path + "/items", refs); };
    if (hi == 0) return b_.seq({b_.literal("["), ws(), b_.literal("]")});
    // item (, item){lo-1, hi-1}, or nothing when lo == 0
    Frag more = b_.repeat([&] { return b_.seq({b_.literal(","), ws(), item()}); }, std::max<int64_t>(lo - 1, 0),
                          hi < 0 ? -1 : hi - 1);
    Frag list = b_.seq({item(), more});
    return b_.seq({b_.literal("["), ws(), lo == 0 ? b_.opt(list) : list, b_.literal("]")});
  }

  Frag object(const ojson& s, const std::string& path, int refs) {
    if (!s.contains("properties")) return any_object(kFreeDepth);
    const ojson& props = s["properties"];
    if (!props.is_object()) fail(where(path), ": properties must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail(where(path), ": required must be an array of names");
      for (const ojson& r : s["required"]) {
        if (!r.is_string() || !props.contains(r.get<std::string>()))
          fail(where(path), ": required names ", r.dump(), ", which is not in properties");
        required.insert(r.get<std::string>());
      }
    }
    // States: first_i (no property written yet, at property i) and more_i
    // (some written): a property is written as "key": value after first_i,
    // or as , "key": value after more_i; optional ones may be skipped.
    const Frag open = b_.seq({b_.literal("{"), ws()});
    int32_t first_at = open.out, more_at = -1;  // more_0 does not exist: nothing is written yet
    bool more_reachable = false;
    for (auto it = props.begin(); it != props.end(); ++it) {
      const std::string key = ojson(it.key()).dump();
      auto member = [&] { return b_.seq({b_.literal(key), b_.literal(":"), ws(), value(*it, path + "/properties/" + it.key(), refs)}); };
      Frag nf = b_.empty(), nm = b_.empty();
      // first_i -> member -> more_{i+1}
      Frag m1 = member();
      b_.seq({Frag{first_at, first_at}, m1, Frag{nm.in, nm.in}});
      if (more_reachable) {  // more_i -> , member -> more_{i+1}
        Frag m2 = b_.seq({b_.literal(","), ws(), member()});
        b_.seq({Frag{more_at, more_at}, m2, Frag{nm.in, nm.in}});
      }
      if (!required.count(it.key())) {  // skipped
        b_.seq({Frag{first_at, first_at}, Frag{nf.in, nf.in}});
        if (more_reachable) b_.seq({Frag{more_at, more_at}, Frag{nm.in, nm.in}});
      } else {
        // first_{i+1} is unreachable: a required property was not written
      }
      first_at = nf.in;
      more_at = nm.in;
      more_reachable = true;
    }
    const Frag end = b_.empty();
    if (more_reachable) b_.seq({Frag{more_at, more_at}, b_.literal("}"), Frag{end.in, end.in}});
    if (required.empty()) b_.seq({Frag{first_at, first_at}, b_.literal("}"), Frag{end.in, end.in}});
    return {open.in, end.out};
  }
};

}  // namespace

Nfa compile_json_schema(const ojson& schema) {
  Builder b;
  SchemaCompiler c(b, schema);
  return b.finish(c.value(schema, "", 0));
}

Nfa compile_json_object() {
  Builder b;
  SchemaCompiler c(b, ojson::object());
  return b.finish(c.any_object(kFreeDepth));
}

Nfa compile_regex_language(const std::string& pattern) {
  Builder b;
  std::string p = pattern;
  if (!p.empty() && p.back() == '$' && (p.size() < 2 || p[p.size() - 2] != '\\')) p.pop_back();
  return b.finish(compile_regex(b, p));
}

Nfa compile_choice(const std::vector<std::string>& choices) {
  if (choices.empty()) fail("guided_choice must list at least one choice");
  Builder b;
  std::vector<Frag> alts;
  for (const std::string& c : choices) alts.push_back(b.literal(c));
  return b.finish(b.alt(std::move(alts)));
}

}  // namespace blockspec::grammar
