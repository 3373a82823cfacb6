// Python operators, subscripts, attributes and str/dict methods on Values.
#include "chat/jinja_builtins.h"

#include <algorithm>
#include <cmath>

#include "chat/jinja_strings.h"

namespace blockspec::jinja {

void undefined_error(const Value& u) { throw JinjaError("UndefinedError: " + u.name()); }

static Value undefined_attr(const Value& obj, const std::string& name) {
  return Value::undefined(str_cat("'", obj.type_name(), "' has no attribute '", name, "'"));
}

const Value* get_arg(const CallArgs& args, size_t pos, const char* name) {
  for (const auto& [k, v] : args.keyword)
    if (k == name) return &v;
  return pos < args.positional.size() ? &args.positional[pos] : nullptr;
}

static Value bind(const Value& self, const std::string& name) {
  return Value([self, name](const CallArgs& args) { return call_method(self, name, args); }, name);
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) undefined_error(obj);
  if (obj.is_dict()) {
    if (name == "items" || name == "keys" || name == "values" || name == "get") return bind(obj, name);
    const Value* v = obj.find(name);
    return v ? *v : undefined_attr(obj, name);
  }
  if (obj.is_namespace()) {
    const Value* v = obj.find(name);
    return v ? *v : undefined_attr(obj, name);
  }
  if (obj.is_string() && is_string_method(name)) return bind(obj, name);
  return undefined_attr(obj, name);
}

// Python's index normalisation: negative counts from the end.
static bool normalize_index(int64_t& i, size_t n) {
  if (i < 0) i += static_cast<int64_t>(n);
  return i >= 0 && i < static_cast<int64_t>(n);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) undefined_error(obj);
  if (obj.is_dict() || obj.is_namespace()) {
    if (key.is_string()) {
      if (const Value* v = obj.find(key.as_string())) return *v;
      if (obj.is_dict()) return get_attr(obj, key.as_string());  // d['items'] is the method, like Jinja
      return undefined_attr(obj, key.as_string());
    }
    return Value::undefined(str_cat("'", obj.type_name(), "' has no element ", key.repr()));
  }
  if ((obj.is_list() || obj.is_string()) && key.is_int()) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      if (!normalize_index(i, obj.as_list().size()))
        return Value::undefined(str_cat("'list object' has no element ", key.repr()));
      return obj.as_list()[static_cast<size_t>(i)];
    }
    std::u32string u = utf8_decode(obj.as_string());
    if (!normalize_index(i, u.size())) return Value::undefined(str_cat("'str object' has no element ", key.repr()));
    return Value(utf8_encode(u.substr(static_cast<size_t>(i), 1)));
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value::undefined(str_cat("'", obj.type_name(), "' has no element ", key.repr()));
}

// Python slice.indices(): start/stop/step for a sequence of length n.
static std::vector<size_t> slice_indices(size_t n, const Value& start, const Value& stop, const Value& step) {
  auto as_opt_int = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_int()) throw JinjaError(str_cat("TypeError: slice ", what, " must be an integer or None, got ", v.type_name()));
    return v.as_int();
  };
  int64_t len = static_cast<int64_t>(n);
  int64_t st = as_opt_int(step, "step").value_or(1);
  if (st == 0) throw JinjaError("ValueError: slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v < 0 ? *v + len : *v;
    if (st > 0) return std::clamp<int64_t>(x, 0, len);
    return std::clamp<int64_t>(x, -1, len - 1);
  };
  int64_t b = clamp(as_opt_int(start, "start"), st > 0 ? 0 : len - 1);
  int64_t e = clamp(as_opt_int(stop, "stop"), st > 0 ? len : -1);
  std::vector<size_t> idx;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) idx.push_back(static_cast<size_t>(i));
  return idx;
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) undefined_error(obj);
  if (obj.is_list()) {
    ValueList out;
    for (size_t i : slice_indices(obj.as_list().size(), start, stop, step)) out.push_back(obj.as_list()[i]);
    return Value(std::move(out));
  }
  if (obj.is_string()) {
    std::u32string u = utf8_decode(obj.as_string()), out;
    for (size_t i : slice_indices(u.size(), start, stop, step)) out += u[i];
    return Value(utf8_encode(out));
  }
  throw JinjaError(str_cat("TypeError: '", obj.type_name(), "' is not subscriptable"));
}

ValueList iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return v.as_list();
    case Value::Kind::kDict: {
      ValueList keys;
      for (const auto& [k, e] : v.as_dict()) keys.emplace_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      ValueList chars;
      for (char32_t c : utf8_decode(v.as_string())) chars.emplace_back(utf8_encode(std::u32string(1, c)));
      return chars;
    }
    default: throw JinjaError(str_cat("TypeError: '", v.type_name(), "' is not iterable"));
  }
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (item.is_undefined()) undefined_error(item);
    if (!item.is_string())
      throw JinjaError(str_cat("TypeError: 'in <string>' requires string as left operand, not ", item.type_name()));
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_dict() || container.is_namespace()) return item.is_string() && container.find(item.as_string());
  if (container.is_list()) {
    for (const auto& e : container.as_list())
      if (e == item) return true;
    return false;
  }
  if (container.is_undefined()) return false;
  throw JinjaError(str_cat("TypeError: argument of type '", container.type_name(), "' is not iterable"));
}

[[noreturn]] static void bad_operands(const std::string& op, const Value& a, const Value& b) {
  throw JinjaError(str_cat("TypeError: unsupported operand type(s) for ", op, ": '", a.type_name(), "' and '",
                           b.type_name(), "'"));
}

static Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  bool ints = a.is_int() && b.is_int();
  int64_t x = a.as_int(), y = b.as_int(), r = 0;
  double fx = a.as_float(), fy = b.as_float();
  if (op == "/") {
    if (fy == 0) throw JinjaError("ZeroDivisionError: division by zero");
    return Value(fx / fy);
  }
  if (op == "//" || op == "%") {
    if (fy == 0) throw JinjaError("ZeroDivisionError: integer division or modulo by zero");
    if (ints) {
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;  // Python floors
      return Value(op == "//" ? q : m);
    }
    double q = std::floor(fx / fy);
    return op == "//" ? Value(q) : Value(fx - q * fy);
  }
  if (op == "**") {
    if (ints && y >= 0) {
      double p = std::pow(fx, fy);
      if (std::abs(p) > 9.2e18) throw JinjaError("OverflowError: integer power too large");
      return Value(static_cast<int64_t>(std::llround(p)));
    }
    return Value(std::pow(fx, fy));
  }
  if (!ints) return Value(op == "+" ? fx + fy : op == "-" ? fx - fy : fx * fy);
  bool overflow = op == "+" ? __builtin_add_overflow(x, y, &r)
                  : op == "-" ? __builtin_sub_overflow(x, y, &r)
                              : __builtin_mul_overflow(x, y, &r);
  if (overflow) throw JinjaError("OverflowError: integer result too large");
  return Value(r);
}

static int compare_values(const std::string& op, const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.as_float() < b.as_float() ? -1 : a.as_float() > b.as_float() ? 1 : 0;
  if (a.is_string() && b.is_string()) return a.as_string().compare(b.as_string());
  if (a.is_list() && b.is_list()) {
    const auto &l = a.as_list(), &r = b.as_list();
    for (size_t i = 0; i < l.size() && i < r.size(); ++i)
      if (!(l[i] == r[i])) return compare_values(op, l[i], r[i]);
    return l.size() < r.size() ? -1 : l.size() > r.size() ? 1 : 0;
  }
  throw JinjaError(str_cat("TypeError: '", op, "' not supported between instances of '", a.type_name(), "' and '",
                           b.type_name(), "'"));
}

static Value repeat(const Value& seq, int64_t n) {
  if (n > 1000000) throw JinjaError("OverflowError: repetition count too large");
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value(out);
  }
  ValueList out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
  return Value(std::move(out));
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value(a.str() + b.str());
  if (op == "==") return Value(a == b);
  if (op == "!=") return Value(!(a == b));
  if (op == "in") return Value(contains(b, a));
  if (op == "notin") return Value(!contains(b, a));
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  if (op == "<") return Value(compare_values(op, a, b) < 0);
  if (op == ">") return Value(compare_values(op, a, b) > 0);
  if (op == "<=") return Value(compare_values(op, a, b) <= 0);
  if (op == ">=") return Value(compare_values(op, a, b) >= 0);
  if (a.is_number() && b.is_number()) return arithmetic(op, a, b);
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (a.is_list() && b.is_list()) {
      ValueList out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return Value(std::move(out));
    }
    if (a.is_string())
      throw JinjaError(str_cat("TypeError: can only concatenate str (not \"", b.type_name(), "\") to str"));
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && b.is_int()) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && a.is_int()) return repeat(b, a.as_int());
  }
  bad_operands(op, a, b);
}

Value call_value(const Value& fn, const CallArgs& args) {
  if (fn.is_undefined()) undefined_error(fn);
  if (!fn.is_function()) throw JinjaError(str_cat("TypeError: '", fn.type_name(), "' is not callable"));
  return fn.as_function()(args);
}

}  // namespace blockspec::jinja
