#include "chat/jinja_strings.h"

#include <algorithm>
#include <array>

#include <utf8proc.h>

namespace blockspec::jinja {
namespace {

constexpr std::array<const char*, 20> kStringMethods = {
    "startswith", "endswith", "split", "rsplit", "strip", "lstrip", "rstrip", "lower", "upper", "title",
    "capitalize", "replace", "find", "rfind", "count", "join", "isdigit", "isalpha", "isspace", "splitlines"};

std::string str_arg(const CallArgs& a, size_t pos, const char* name, const char* method) {
  const Value* v = get_arg(a, pos, name);
  if (!v) throw JinjaError(str_cat("TypeError: str.", method, "() missing argument '", name, "'"));
  if (!v->is_string())
    throw JinjaError(str_cat("TypeError: str.", method, "() argument '", name, "' must be str, not ", v->type_name()));
  return v->as_string();
}

std::optional<std::string> opt_str_arg(const CallArgs& a, size_t pos, const char* name, const char* method) {
  const Value* v = get_arg(a, pos, name);
  if (!v || v->is_none()) return std::nullopt;
  return str_arg(a, pos, name, method);
}

int64_t int_arg(const CallArgs& a, size_t pos, const char* name, int64_t def) {
  const Value* v = get_arg(a, pos, name);
  if (!v || v->is_none()) return def;
  if (!v->is_int()) throw JinjaError(str_cat("TypeError: '", name, "' must be an integer, not ", v->type_name()));
  return v->as_int();
}

// str.split / str.rsplit (Python semantics, including maxsplit).
ValueList py_split(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit, bool from_right) {
  ValueList out;
  if (sep) {
    if (sep->empty()) throw JinjaError("ValueError: empty separator");
    std::vector<std::string> parts;
    if (!from_right) {
      size_t pos = 0;
      for (size_t f; (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) &&
                     (f = s.find(*sep, pos)) != std::string::npos;
           pos = f + sep->size())
        parts.push_back(s.substr(pos, f - pos));
      parts.push_back(s.substr(pos));
    } else {
      size_t end = s.size();
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        if (end < sep->size()) break;
        size_t f = s.rfind(*sep, end - sep->size());
        if (f == std::string::npos) break;
        parts.push_back(s.substr(f + sep->size(), end - f - sep->size()));
        end = f;
      }
      parts.push_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
    for (auto& p : parts) out.emplace_back(std::move(p));
    return out;
  }
  std::u32string u = utf8_decode(s);
  std::vector<std::u32string> parts;
  if (!from_right) {
    size_t i = 0;
    for (;;) {
      while (i < u.size() && is_python_space(u[i])) ++i;
      if (i >= u.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
        size_t e = u.size();
        while (e > i && is_python_space(u[e - 1])) --e;
        parts.push_back(u.substr(i, e - i));
        break;
      }
      size_t j = i;
      while (j < u.size() && !is_python_space(u[j])) ++j;
      parts.push_back(u.substr(i, j - i));
      i = j;
    }
  } else {
    size_t e = u.size();
    for (;;) {
      while (e > 0 && is_python_space(u[e - 1])) --e;
      if (e == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
        size_t b = 0;
        while (b < e && is_python_space(u[b])) ++b;
        parts.push_back(u.substr(b, e - b));
        break;
      }
      size_t b = e;
      while (b > 0 && !is_python_space(u[b - 1])) --b;
      parts.push_back(u.substr(b, e - b));
      e = b;
    }
    std::reverse(parts.begin(), parts.end());
  }
  for (auto& p : parts) out.emplace_back(utf8_encode(p));
  return out;
}

bool affix_match(const std::string& s, const Value& affix, bool prefix, const char* method) {
  auto one = [&](const Value& a) {
    if (!a.is_string())
      throw JinjaError(str_cat("TypeError: ", method, " first arg must be str or a tuple of str, not ", a.type_name()));
    const std::string& x = a.as_string();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_list()) return std::any_of(affix.as_list().begin(), affix.as_list().end(), one);
  return one(affix);
}

Value dict_method(const Value& self, const std::string& name, const CallArgs& args) {
  ValueList out;
  if (name == "get") {
    const Value* key = get_arg(args, 0, "key");
    if (!key) throw JinjaError("TypeError: get expected at least 1 argument, got 0");
    if (key->is_string())
      if (const Value* v = self.find(key->as_string())) return *v;
    const Value* def = get_arg(args, 1, "default");
    return def ? *def : Value::none();
  }
  for (const auto& [k, v] : self.as_dict()) {
    if (name == "items") out.emplace_back(ValueList{Value(k), v});
    else if (name == "keys") out.emplace_back(k);
    else out.push_back(v);
  }
  return Value(std::move(out));
}

bool is_alpha(utf8proc_int32_t c) {
  utf8proc_category_t cat = utf8proc_category(c);
  return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
}

}  // namespace

bool is_string_method(const std::string& name) {
  return std::find(kStringMethods.begin(), kStringMethods.end(), name) != kStringMethods.end();
}

std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right) {
  std::u32string u = utf8_decode(s);
  std::u32string set = chars ? utf8_decode(*chars) : U"";
  auto strip_it = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_python_space(c); };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return utf8_encode(u.substr(b, e - b));
}

static std::string map_case(const std::string& s, bool upper) {
  std::u32string u = utf8_decode(s);
  for (auto& c : u) c = static_cast<char32_t>(upper ? utf8proc_toupper(static_cast<utf8proc_int32_t>(c)) : utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
  return utf8_encode(u);
}
std::string py_lower(const std::string& s) { return map_case(s, false); }
std::string py_upper(const std::string& s) { return map_case(s, true); }

std::string py_capitalize(const std::string& s) {
  std::u32string u = utf8_decode(py_lower(s));
  if (!u.empty()) u[0] = static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(u[0])));
  return utf8_encode(u);
}

std::string py_title(const std::string& s) {
  std::u32string u = utf8_decode(s);
  bool prev_cased = false;
  for (auto& c : u) {
    auto w = static_cast<utf8proc_int32_t>(c);
    c = static_cast<char32_t>(prev_cased ? utf8proc_tolower(w) : utf8proc_totitle(w));
    prev_cased = is_alpha(w);
  }
  return utf8_encode(u);
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
  std::string out;
  size_t pos = 0;
  int64_t n = 0;
  if (old.empty()) {  // Python inserts repl between every code point
    std::u32string u = utf8_decode(s);
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || n < count) out += repl, ++n;
      if (i < u.size()) out += utf8_encode(u.substr(i, 1));
    }
    return out;
  }
  for (size_t f; (count < 0 || n < count) && (f = s.find(old, pos)) != std::string::npos; pos = f + old.size(), ++n)
    out += s.substr(pos, f - pos) + repl;
  return out + s.substr(pos);
}

Value call_method(const Value& self, const std::string& m, const CallArgs& a) {
  if (self.is_dict()) return dict_method(self, m, a);
  const std::string& s = self.as_string();
  const char* mc = m.c_str();
  if (m == "startswith" || m == "endswith") {
    const Value* affix = get_arg(a, 0, "prefix");
    if (!affix) throw JinjaError(str_cat("TypeError: ", m, "() takes at least 1 argument (0 given)"));
    return Value(affix_match(s, *affix, m == "startswith", mc));
  }
  if (m == "split" || m == "rsplit")
    return Value(py_split(s, opt_str_arg(a, 0, "sep", mc), int_arg(a, 1, "maxsplit", -1), m == "rsplit"));
  if (m == "strip" || m == "lstrip" || m == "rstrip")
    return Value(py_strip(s, opt_str_arg(a, 0, "chars", mc), m != "rstrip", m != "lstrip"));
  if (m == "lower") return Value(py_lower(s));
  if (m == "upper") return Value(py_upper(s));
  if (m == "title") return Value(py_title(s));
  if (m == "capitalize") return Value(py_capitalize(s));
  if (m == "replace") return Value(py_replace(s, str_arg(a, 0, "old", mc), str_arg(a, 1, "new", mc), int_arg(a, 2, "count", -1)));
  if (m == "find" || m == "rfind" || m == "count") {
    std::string sub = str_arg(a, 0, "sub", mc);
    if (m == "count") {
      if (sub.empty()) return Value(static_cast<int64_t>(utf8_decode(s).size() + 1));
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value(n);
    }
    size_t f = m == "find" ? s.find(sub) : s.rfind(sub);
    return Value(f == std::string::npos ? int64_t{-1} : static_cast<int64_t>(utf8_decode(s.substr(0, f)).size()));
  }
  if (m == "join") {
    const Value* it = get_arg(a, 0, "iterable");
    if (!it) throw JinjaError("TypeError: str.join() takes exactly one argument (0 given)");
    std::string out;
    ValueList items = iterate(*it);
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string())
        throw JinjaError(str_cat("TypeError: sequence item ", i, ": expected str instance, ", items[i].type_name(), " found"));
      out += (i ? s : "") + items[i].as_string();
    }
    return Value(out);
  }
  if (m == "splitlines") {
    ValueList out;
    size_t pos = 0;
    for (size_t f; (f = s.find('\n', pos)) != std::string::npos; pos = f + 1) out.emplace_back(s.substr(pos, f - pos));
    if (pos < s.size()) out.emplace_back(s.substr(pos));
    return Value(std::move(out));
  }
  std::u32string u = utf8_decode(s);
  auto all = [&](auto pred) { return !u.empty() && std::all_of(u.begin(), u.end(), pred); };
  if (m == "isdigit") return Value(all([](char32_t c) { return c >= '0' && c <= '9'; }));
  if (m == "isalpha") return Value(all([](char32_t c) { return is_alpha(static_cast<utf8proc_int32_t>(c)); }));
  if (m == "isspace") return Value(all(is_python_space));
  throw JinjaError(str_cat("'str object' has no attribute '", m, "'"));
}

}  // namespace blockspec::jinja
