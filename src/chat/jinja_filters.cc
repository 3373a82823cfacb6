// Jinja's built-in filters and tests that chat templates use, HF's tojson
// override (json.dumps with ensure_ascii=False), and the globals.
#include <algorithm>
#include <cmath>
#include <ctime>

#include "chat/jinja_builtins.h"
#include "chat/jinja_strings.h"

namespace blockspec::jinja {
namespace {

bool bool_arg(const CallArgs& a, size_t pos, const char* name, bool def) {
  const Value* v = get_arg(a, pos, name);
  return v ? v->truthy() : def;
}

std::string string_arg(const CallArgs& a, size_t pos, const char* name, const std::string& def) {
  const Value* v = get_arg(a, pos, name);
  return v && !v->is_none() ? v->str() : def;
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<int64_t>(utf8_decode(v.as_string()).size());
    case Value::Kind::kList: return static_cast<int64_t>(v.as_list().size());
    case Value::Kind::kDict: return static_cast<int64_t>(v.as_dict().size());
    case Value::Kind::kNamespace: return static_cast<int64_t>(v.as_namespace().attrs.size());
    default: throw JinjaError(str_cat("TypeError: object of type '", v.type_name(), "' has no len()"));
  }
}

// attribute="a.b" or an integer index, as Jinja's make_attrgetter.
Value attribute_of(const Value& item, const Value& attr) {
  if (attr.is_int()) return get_item(item, attr);
  Value cur = item;
  std::string path = attr.str();
  size_t pos = 0;
  for (;;) {
    size_t dot = path.find('.', pos);
    std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    cur = cur.is_undefined() ? cur : get_item(cur, Value(part));
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

std::string tojson(const Value& v, const CallArgs& a) {
  if (v.is_undefined()) throw JinjaError("TypeError: Object of type Undefined is not JSON serializable");
  const Value* indent_v = get_arg(a, 1, "indent");
  int indent = indent_v && !indent_v->is_none() ? static_cast<int>(indent_v->as_int()) : -1;
  std::string item_sep = indent >= 0 ? "," : ", ", key_sep = ": ";
  if (const Value* sep = get_arg(a, 2, "separators"); sep && sep->is_list() && sep->as_list().size() == 2) {
    item_sep = sep->as_list()[0].str();
    key_sep = sep->as_list()[1].str();
  }
  return python_json_dumps(v, indent, item_sep, key_sep, bool_arg(a, 3, "sort_keys", false));
}

// select / reject / selectattr / rejectattr: args[0] (attr for *attr), then test name and its args.
Value select(const std::string& name, const Value& seq, const CallArgs& a) {
  bool by_attr = name == "selectattr" || name == "rejectattr";
  bool keep = name == "select" || name == "selectattr";
  size_t first = by_attr ? 1 : 0;
  CallArgs test_args;
  std::string test;
  if (a.positional.size() > first) {
    test = a.positional[first].str();
    test_args.positional.assign(a.positional.begin() + static_cast<long>(first) + 1, a.positional.end());
  }
  ValueList out;
  for (const Value& item : iterate(seq)) {
    Value subject = by_attr ? attribute_of(item, a.positional.empty() ? Value("") : a.positional[0]) : item;
    bool ok = test.empty() ? subject.truthy() : apply_test(test, subject, test_args);
    if (ok == keep) out.push_back(item);
  }
  return Value(std::move(out));
}

Value map_filter(const Value& seq, const CallArgs& a) {
  ValueList out;
  const Value* attr = get_arg(a, 99, "attribute");
  for (const Value& item : iterate(seq)) {
    if (attr) {
      Value v = attribute_of(item, *attr);
      if (v.is_undefined())
        if (const Value* d = get_arg(a, 99, "default")) v = *d;
      out.push_back(v);
    } else if (!a.positional.empty()) {
      CallArgs rest;
      rest.positional.assign(a.positional.begin() + 1, a.positional.end());
      out.push_back(apply_filter(a.positional[0].str(), item, rest));
    } else {
      out.push_back(item);
    }
  }
  return Value(std::move(out));
}

std::string indent_filter(const std::string& s, const CallArgs& a) {
  const Value* w = get_arg(a, 0, "width");
  std::string pad = w && w->is_string() ? w->as_string() : std::string(w ? static_cast<size_t>(std::max<int64_t>(0, w->as_int())) : 4, ' ');
  bool first = bool_arg(a, 1, "first", false), blank = bool_arg(a, 2, "blank", false);
  std::string out;
  size_t pos = 0;
  bool is_first = true;
  for (;;) {
    size_t nl = s.find('\n', pos);
    std::string line = s.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    bool do_pad = is_first ? first : (blank || !py_strip(line, std::nullopt, true, true).empty());
    out += (do_pad ? pad : "") + line;
    if (nl == std::string::npos) return out;
    out += '\n';
    pos = nl + 1;
    is_first = false;
  }
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

Value apply_filter(const std::string& f, const Value& v, const CallArgs& a) {
  if (f == "default" || f == "d") {
    bool use = v.is_undefined() || (bool_arg(a, 1, "boolean", false) && !v.truthy());
    const Value* def = get_arg(a, 0, "default_value");
    return use ? (def ? *def : Value("")) : v;
  }
  if (f == "length" || f == "count") return Value(length(v));
  if (f == "tojson") return Value(tojson(v, a));
  if (f == "selectattr" || f == "rejectattr" || f == "select" || f == "reject") return select(f, v, a);
  if (f == "map") return map_filter(v, a);
  if (f == "list") return Value(iterate(v));
  if (f == "items") {
    if (v.is_undefined()) return Value(ValueList{});
    if (!v.is_dict()) throw JinjaError(str_cat("TypeError: items filter needs a mapping, got ", v.type_name()));
    return call_method(v, "items", {});
  }
  if (f == "first" || f == "last") {
    ValueList items = iterate(v);
    if (items.empty()) return Value::undefined(str_cat("No ", f, " item, sequence was empty."));
    return f == "first" ? items.front() : items.back();
  }
  if (f == "reverse") {
    if (v.is_string()) return slice(v, Value(), Value(), Value(int64_t{-1}));
    ValueList items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (f == "join") {
    const Value* attr = get_arg(a, 1, "attribute");
    std::string sep = string_arg(a, 0, "d", ""), out;
    ValueList items = iterate(v);
    for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + (attr ? attribute_of(items[i], *attr) : items[i]).str();
    return Value(out);
  }
  if (f == "sum") {
    Value total = get_arg(a, 1, "start") ? *get_arg(a, 1, "start") : Value(int64_t{0});
    const Value* attr = get_arg(a, 0, "attribute");
    for (const Value& item : iterate(v)) total = binary_op("+", total, attr ? attribute_of(item, *attr) : item);
    return total;
  }
  if (f == "abs") {
    if (v.is_int()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
    if (v.is_number()) return Value(std::fabs(v.as_float()));
    throw JinjaError(str_cat("TypeError: bad operand type for abs(): '", v.type_name(), "'"));
  }
  if (f == "int") {
    if (v.is_number()) return Value(static_cast<int64_t>(v.as_float()));
    try {
      return Value(static_cast<int64_t>(std::stoll(py_strip(v.str(), std::nullopt, true, true))));
    } catch (const std::exception&) {
      return get_arg(a, 0, "default") ? *get_arg(a, 0, "default") : Value(int64_t{0});
    }
  }
  if (f == "float") {
    if (v.is_number()) return Value(v.as_float());
    try {
      return Value(std::stod(v.str()));
    } catch (const std::exception&) {
      return get_arg(a, 0, "default") ? *get_arg(a, 0, "default") : Value(0.0);
    }
  }
  if (f == "safe") return v;
  // The rest take the value as a string, as Jinja's soft_str does.
  if (v.is_undefined() && f != "string" && f != "trim" && f != "lower" && f != "upper" && f != "capitalize" &&
      f != "title" && f != "replace" && f != "indent" && f != "e" && f != "escape")
    throw JinjaError(str_cat("TemplateAssertionError: no filter named '", f, "'"));
  std::string s = v.str();
  if (f == "string") return Value(s);
  if (f == "trim") return Value(py_strip(s, a.positional.empty() ? std::nullopt : std::optional(a.positional[0].str()), true, true));
  if (f == "lower") return Value(py_lower(s));
  if (f == "upper") return Value(py_upper(s));
  if (f == "capitalize") return Value(py_capitalize(s));
  if (f == "title") return Value(py_title(s));
  if (f == "replace") {
    const Value* c = get_arg(a, 2, "count");
    return Value(py_replace(s, string_arg(a, 0, "old", ""), string_arg(a, 1, "new", ""), c && !c->is_none() ? c->as_int() : -1));
  }
  if (f == "indent") return Value(indent_filter(s, a));
  if (f == "e" || f == "escape") return Value(escape(s));
  throw JinjaError(str_cat("TemplateAssertionError: no filter named '", f, "'"));
}

bool apply_test(const std::string& t, const Value& v, const CallArgs& a) {
  const Value* arg = get_arg(a, 0, "other");
  auto need_arg = [&]() -> const Value& {
    if (!arg) throw JinjaError(str_cat("TypeError: test '", t, "' needs an argument"));
    return *arg;
  };
  if (t == "defined") return !v.is_undefined();
  if (t == "undefined") return v.is_undefined();
  if (t == "none") return v.is_none();
  if (t == "boolean") return v.is_bool();
  if (t == "true") return v.is_bool() && v.as_int();
  if (t == "false") return v.is_bool() && !v.as_int();
  if (t == "integer") return v.kind() == Value::Kind::kInt;
  if (t == "float") return v.kind() == Value::Kind::kFloat;
  if (t == "number") return v.is_number();
  if (t == "string") return v.is_string();
  if (t == "mapping") return v.is_dict();
  if (t == "iterable") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (t == "sequence") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (t == "callable") return v.is_function();
  if (t == "lower") return v.is_string() && py_lower(v.as_string()) == v.as_string();
  if (t == "upper") return v.is_string() && py_upper(v.as_string()) == v.as_string();
  if (t == "odd" || t == "even") {
    if (!v.is_int()) throw JinjaError(str_cat("TypeError: test '", t, "' needs an integer, got ", v.type_name()));
    return (((v.as_int() % 2) + 2) % 2 == 1) == (t == "odd");
  }
  if (t == "divisibleby") return binary_op("%", v, need_arg()) == Value(int64_t{0});
  if (t == "eq" || t == "equalto" || t == "==") return binary_op("==", v, need_arg()).truthy();
  if (t == "ne" || t == "!=") return binary_op("!=", v, need_arg()).truthy();
  if (t == "lt" || t == "lessthan" || t == "<") return binary_op("<", v, need_arg()).truthy();
  if (t == "le" || t == "<=") return binary_op("<=", v, need_arg()).truthy();
  if (t == "gt" || t == "greaterthan" || t == ">") return binary_op(">", v, need_arg()).truthy();
  if (t == "ge" || t == ">=") return binary_op(">=", v, need_arg()).truthy();
  if (t == "in") return contains(need_arg(), v);
  if (t == "sameas") {
    const Value& o = need_arg();
    return v.kind() == o.kind() && (v.is_none() || v.is_undefined() || (v.is_bool() && v == o));
  }
  throw JinjaError(str_cat("TemplateAssertionError: no test named '", t, "'"));
}

static Value make_namespace(const CallArgs& a) {
  auto ns = std::make_shared<Namespace>();
  for (const Value& p : a.positional)
    if (p.is_dict()) ns->attrs = p.as_dict();
  for (const auto& [k, v] : a.keyword) {
    if (!k.empty() && k[0] == '_')
      throw JinjaError(str_cat("SecurityError: chat templates cannot store underscore-prefixed attributes on a namespace, but got '", k, "'"));
    auto it = std::find_if(ns->attrs.begin(), ns->attrs.end(), [&](const auto& e) { return e.first == k; });
    if (it != ns->attrs.end()) it->second = v; else ns->attrs.emplace_back(k, v);
  }
  return Value(ns);
}

static Value range(const CallArgs& a) {
  std::vector<int64_t> n;
  for (const Value& p : a.positional) {
    if (!p.is_int()) throw JinjaError(str_cat("TypeError: range() needs integers, got ", p.type_name()));
    n.push_back(p.as_int());
  }
  if (n.empty() || n.size() > 3) throw JinjaError("TypeError: range expected 1 to 3 arguments");
  int64_t start = n.size() > 1 ? n[0] : 0, stop = n.size() > 1 ? n[1] : n[0], step = n.size() > 2 ? n[2] : 1;
  if (step == 0) throw JinjaError("ValueError: range() arg 3 must not be zero");
  ValueList out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (out.size() >= 100000) throw JinjaError("OverflowError: range too big, maximum size for range is 100000");
    out.emplace_back(i);
  }
  return Value(std::move(out));
}

Value lookup_global(const std::string& name) {
  if (name == "namespace") return Value(make_namespace, name);
  if (name == "range") return Value(range, name);
  if (name == "dict")
    return Value([](const CallArgs& a) {
      ValueDict d = !a.positional.empty() && a.positional[0].is_dict() ? a.positional[0].as_dict() : ValueDict{};
      for (const auto& kv : a.keyword) d.push_back(kv);
      return Value(std::move(d));
    }, name);
  if (name == "raise_exception")
    return Value([](const CallArgs& a) -> Value {
      throw TemplateRaised(a.positional.empty() ? std::string() : a.positional[0].str());
    }, name);
  if (name == "strftime_now")
    return Value([](const CallArgs& a) {
      std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[256];
      size_t n = std::strftime(buf, sizeof buf, a.positional.empty() ? "" : a.positional[0].str().c_str(), &tm);
      return Value(std::string(buf, n));
    }, name);
  return Value::undefined(str_cat("'", name, "' is undefined"));
}

}  // namespace blockspec::jinja
