// Values of the Jinja interpreter: Python's data model, cut down to what chat
// templates touch (None, bool, int, float, str, list, dict, namespace,
// builtin functions) plus Jinja's Undefined. Lists and dicts are immutable
// once built (HF renders in an ImmutableSandboxedEnvironment), so they are
// shared by pointer; only namespace objects are mutable (`set ns.x = ...`).
// Dicts keep insertion order like Python's, which `tojson` and `items` show.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace blockspec::jinja {

class Value;
using ValueList = std::vector<Value>;
using ValueDict = std::vector<std::pair<std::string, Value>>;  // insertion order

// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
using Function = std::function<Value(const CallArgs&)>;

struct Namespace {
  ValueDict attrs;
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction };

  Value() = default;  // Undefined
  static Value undefined(std::string name) { Value v; v.str_ = std::move(name); return v; }
  static Value none() { Value v; v.kind_ = Kind::kNone; return v; }
  Value(bool b) : kind_(Kind::kBool), int_(b) {}
  Value(int64_t i) : kind_(Kind::kInt), int_(i) {}
  Value(int i) : kind_(Kind::kInt), int_(i) {}
  Value(double d) : kind_(Kind::kFloat), float_(d) {}
  Value(std::string s) : kind_(Kind::kString), str_(std::move(s)) {}
  Value(const char* s) : kind_(Kind::kString), str_(s) {}
  Value(ValueList l) : kind_(Kind::kList), list_(std::make_shared<const ValueList>(std::move(l))) {}
  Value(ValueDict d) : kind_(Kind::kDict), dict_(std::make_shared<const ValueDict>(std::move(d))) {}
  Value(std::shared_ptr<Namespace> ns) : kind_(Kind::kNamespace), ns_(std::move(ns)) {}
  Value(Function f, std::string name)
      : kind_(Kind::kFunction), str_(std::move(name)), fn_(std::make_shared<Function>(std::move(f))) {}

  // JSON from the caller (messages, tools, extra kwargs).
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt || kind_ == Kind::kBool; }  // Python: bool is an int
  bool is_number() const { return is_int() || kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_function() const { return kind_ == Kind::kFunction; }

  int64_t as_int() const { return int_; }
  double as_float() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& as_string() const { return str_; }
  const ValueList& as_list() const { return *list_; }
  const ValueDict& as_dict() const { return *dict_; }
  Namespace& as_namespace() const { return *ns_; }
  const Function& as_function() const { return *fn_; }
  // Name of an Undefined (for its error message) or of a function.
  const std::string& name() const { return str_; }

  // Key lookup in a dict or namespace; nullptr when absent.
  const Value* find(std::string_view key) const;

  bool truthy() const;            // Python bool(); Undefined is false
  std::string str() const;        // Python str(); Undefined renders as ""
  std::string repr() const;       // Python repr() (inside list/dict str())
  std::string type_name() const;  // as Jinja names it in errors: "dict object"
  nlohmann::ordered_json to_json() const;

 private:
  Kind kind_ = Kind::kUndefined;
  int64_t int_ = 0;
  double float_ = 0;
  std::string str_;
  std::shared_ptr<const ValueList> list_;
  std::shared_ptr<const ValueDict> dict_;
  std::shared_ptr<Namespace> ns_;
  std::shared_ptr<Function> fn_;
};

bool operator==(const Value& a, const Value& b);  // Python ==

// Python repr() of a float: shortest round-trip digits, exponent form
// outside 1e-4 <= |x| < 1e16 ("1e+20", "0.5", "1.0").
std::string python_float_repr(double d);

// json.dumps(v, ensure_ascii=False, indent=indent, separators=...) as HF's
// tojson filter calls it; indent < 0 means None.
std::string python_json_dumps(const Value& v, int indent, std::string_view item_sep,
                              std::string_view key_sep, bool sort_keys);

// UTF-8 <-> code points, for Python's code-point string semantics (len,
// slicing, strip with a character set). Invalid bytes map to U+FFFD.
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
bool is_python_space(char32_t c);  // str.isspace()

}  // namespace blockspec::jinja
