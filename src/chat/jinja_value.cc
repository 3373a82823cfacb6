#include "chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace blockspec::jinja {

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList l;
      for (const auto& e : j) l.push_back(from_json(e));
      return Value(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      ValueDict d;
      for (const auto& [k, e] : j.items()) d.emplace_back(k, from_json(e));
      return Value(std::move(d));
    }
    default: return none();  // binary / discarded: not produced by parsing JSON
  }
}

const Value* Value::find(std::string_view key) const {
  const ValueDict* d = kind_ == Kind::kDict ? dict_.get() : kind_ == Kind::kNamespace ? &ns_->attrs : nullptr;
  if (!d) return nullptr;
  for (const auto& [k, v] : *d)
    if (k == key) return &v;
  return nullptr;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool:
    case Kind::kInt: return int_ != 0;
    case Kind::kFloat: return float_ != 0;
    case Kind::kString: return !str_.empty();
    case Kind::kList: return !list_->empty();
    case Kind::kDict: return !dict_->empty();
    default: return true;
  }
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // "-1.2345e+02"
  size_t e = sci.find('e');
  int exp = std::stoi(sci.substr(e + 1));
  std::string mant = sci.substr(0, e);
  bool neg = !mant.empty() && mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out + eb;
  }
  if (exp < 0) return out + "0." + std::string(-exp - 1, '0') + digits;
  if (static_cast<int>(digits.size()) <= exp + 1)
    return out + digits + std::string(exp + 1 - digits.size(), '0') + ".0";
  return out + digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
}

std::string Value::str() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kString: return str_;
    default: return repr();
  }
}

static std::string python_str_repr(const std::string& s) {
  // Python picks single quotes unless the string has ' and no ".
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == q || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + q;
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return int_ ? "True" : "False";
    case Kind::kInt: return std::to_string(int_);
    case Kind::kFloat: return python_float_repr(float_);
    case Kind::kString: return python_str_repr(str_);
    case Kind::kList: {
      std::string out = "[";
      for (size_t i = 0; i < list_->size(); ++i) out += (i ? ", " : "") + (*list_)[i].repr();
      return out + "]";
    }
    case Kind::kDict: {
      std::string out = "{";
      for (size_t i = 0; i < dict_->size(); ++i)
        out += (i ? ", " : "") + python_str_repr((*dict_)[i].first) + ": " + (*dict_)[i].second.repr();
      return out + "}";
    }
    case Kind::kNamespace: return "<Namespace>";
    case Kind::kFunction: return "<function " + str_ + ">";
  }
  return "";
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "None";
    case Kind::kBool: return "bool object";
    case Kind::kInt: return "int object";
    case Kind::kFloat: return "float object";
    case Kind::kString: return "str object";
    case Kind::kList: return "list object";
    case Kind::kDict: return "dict object";
    case Kind::kNamespace: return "Namespace object";
    case Kind::kFunction: return "function object";
  }
  return "?";
}

nlohmann::ordered_json Value::to_json() const {
  switch (kind_) {
    case Kind::kBool: return int_ != 0;
    case Kind::kInt: return int_;
    case Kind::kFloat: return float_;
    case Kind::kString: return str_;
    case Kind::kList: {
      auto j = nlohmann::ordered_json::array();
      for (const auto& e : *list_) j.push_back(e.to_json());
      return j;
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      auto j = nlohmann::ordered_json::object();
      for (const auto& [k, e] : kind_ == Kind::kDict ? *dict_ : ns_->attrs) j[k] = e.to_json();
      return j;
    }
    default: return nullptr;
  }
}

bool operator==(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.as_string() == b.as_string();
    case Value::Kind::kList: return a.as_list() == b.as_list();
    case Value::Kind::kDict: {
      if (a.as_dict().size() != b.as_dict().size()) return false;
      for (const auto& [k, v] : a.as_dict()) {
        const Value* o = b.find(k);
        if (!o || !(*o == v)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace: return &a.as_namespace() == &b.as_namespace();
    default: return false;
  }
}

static void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

static void json_dump(std::string& out, const Value& v, int indent, int depth, std::string_view item_sep,
                      std::string_view key_sep, bool sort_keys) {
  auto newline = [&](int d) {
    if (indent >= 0) out += "\n" + std::string(static_cast<size_t>(indent * d), ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kString: json_string(out, v.as_string()); return;
    case Value::Kind::kFloat: {
      double d = v.as_float();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : python_float_repr(d);
      return;
    }
    case Value::Kind::kNone:
    case Value::Kind::kUndefined: out += "null"; return;
    case Value::Kind::kBool: out += v.as_int() ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(v.as_int()); return;
    case Value::Kind::kList: {
      if (v.as_list().empty()) { out += "[]"; return; }
      out += '[';
      for (size_t i = 0; i < v.as_list().size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        json_dump(out, v.as_list()[i], indent, depth + 1, item_sep, key_sep, sort_keys);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      ValueDict items = v.is_dict() ? v.as_dict() : v.as_namespace().attrs;
      if (items.empty()) { out += "{}"; return; }
      if (sort_keys)
        std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        json_string(out, items[i].first);
        out += key_sep;
        json_dump(out, items[i].second, indent, depth + 1, item_sep, key_sep, sort_keys);
      }
      newline(depth);
      out += '}';
      return;
    }
    case Value::Kind::kFunction: out += "null"; return;
  }
}

std::string python_json_dumps(const Value& v, int indent, std::string_view item_sep, std::string_view key_sep,
                              bool sort_keys) {
  std::string out;
  json_dump(out, v, indent, 0, item_sep, key_sep, sort_keys);
  return out;
}

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    if (n < 0 || i + static_cast<size_t>(n) >= s.size()) {
      if (n != 0) { out += U'\uFFFD'; ++i; continue; }
    }
    char32_t cp = n == 0 ? c : n == 1 ? (c & 0x1f) : n == 2 ? (c & 0x0f) : (c & 0x07);
    bool ok = true;
    for (int k = 1; k <= n; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 2) { ok = false; break; }
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (!ok) { out += U'\uFFFD'; ++i; continue; }
    out += cp;
    i += n + 1;
  }
  return out;
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  for (char32_t c : s) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xc0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xe0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (c & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (c & 0x3f));
    }
  }
  return out;
}

bool is_python_space(char32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
         c == 0x3000;
}

}  // namespace blockspec::jinja
