// Tree-walking renderer. Scoping follows Jinja: each for-loop iteration and
// each macro call gets a fresh frame, so `set` inside them never leaks out
// (that is what namespace() objects are for); `if` shares its frame.
#include "chat/jinja_render.h"

#include <algorithm>
#include <unordered_map>

#include "base/error.h"
#include "chat/jinja_builtins.h"

namespace blockspec::jinja {
namespace {

// Macro recursion; with the parser's nesting bound (100) this keeps the
// renderer's stack use to a few MB even for a hostile template.
constexpr int kMaxCallDepth = 16;

class Renderer {
 public:
  Renderer(const ValueDict& vars, const std::string& what) : what_(what) {
    frames_.emplace_back();
    for (const auto& [k, v] : vars) frames_[0][k] = v;
  }

  std::string run(const Body& body) {
    std::string out;
    exec_body(body, out);
    return out;
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using Frame = std::unordered_map<std::string, Value>;

  Flow exec_body(const Body& body, std::string& out) {
    for (const auto& n : body) {
      Flow f = exec(*n, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow exec(const Node& n, std::string& out) {
    switch (n.kind) {
      case Node::Kind::kText: out += n.text; return Flow::kNormal;
      case Node::Kind::kOutput: out += eval(*n.expr).str(); return Flow::kNormal;
      case Node::Kind::kIf:
        for (const auto& [cond, body] : n.branches)
          if (!cond || eval(*cond).truthy()) return exec_body(body, out);
        return Flow::kNormal;
      case Node::Kind::kFor: return exec_for(n, out);
      case Node::Kind::kSet: exec_set(n, eval(*n.expr)); return Flow::kNormal;
      case Node::Kind::kSetBlock: {
        std::string captured;
        exec_body(n.body, captured);
        exec_set(n, Value(captured));
        return Flow::kNormal;
      }
      case Node::Kind::kMacro: define_macro(n); return Flow::kNormal;
      case Node::Kind::kBreak: return Flow::kBreak;
      case Node::Kind::kContinue: return Flow::kContinue;
      case Node::Kind::kPassThrough: return exec_body(n.body, out);
    }
    return Flow::kNormal;
  }

  [[noreturn]] void located(const JinjaError& e, int line, int col) const {
    if (dynamic_cast<const TemplateRaised*>(&e))
      fail(what_, ": template raised an exception at line ", line, ": ", e.what());
    fail(what_, ": line ", line, ", column ", col, ": ", e.what());
  }

  void bind_targets(const std::vector<std::string>& targets, const Value& v, Frame& frame) {
    if (targets.size() == 1) {
      frame[targets[0]] = v;
      return;
    }
    ValueList items = iterate(v);
    if (items.size() != targets.size())
      throw JinjaError(str_cat("ValueError: cannot unpack ", items.size(), " values into ", targets.size(), " names"));
    for (size_t i = 0; i < targets.size(); ++i) frame[targets[i]] = items[i];
  }

  Flow exec_for(const Node& n, std::string& out) {
    ValueList items;
    try {
      items = iterate(eval(*n.expr));
      if (n.filter) {
        ValueList kept;
        for (const Value& item : items) {
          frames_.emplace_back();
          bind_targets(n.targets, item, frames_.back());
          bool keep = eval(*n.filter).truthy();
          frames_.pop_back();
          if (keep) kept.push_back(item);
        }
        items = std::move(kept);
      }
    } catch (const JinjaError& e) {
      located(e, n.line, n.col);
    }
    if (items.empty()) return exec_body(n.else_body, out);
    const auto length = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < length; ++i) {
      frames_.emplace_back();
      try {
        bind_targets(n.targets, items[static_cast<size_t>(i)], frames_.back());
      } catch (const JinjaError& e) {
        located(e, n.line, n.col);
      }
      ValueDict loop = {{"index0", Value(i)},
                        {"index", Value(i + 1)},
                        {"revindex0", Value(length - i - 1)},
                        {"revindex", Value(length - i)},
                        {"first", Value(i == 0)},
                        {"last", Value(i == length - 1)},
                        {"length", Value(length)},
                        {"depth", Value(1)},
                        {"depth0", Value(0)}};
      if (i > 0) loop.emplace_back("previtem", items[static_cast<size_t>(i - 1)]);
      if (i + 1 < length) loop.emplace_back("nextitem", items[static_cast<size_t>(i + 1)]);
      loop.emplace_back("cycle", Value([i](const CallArgs& a) {
        if (a.positional.empty()) throw JinjaError("TypeError: no items for cycling given");
        return a.positional[static_cast<size_t>(i) % a.positional.size()];
      }, "cycle"));
      frames_.back()["loop"] = Value(std::move(loop));
      Flow f = exec_body(n.body, out);
      frames_.pop_back();
      if (f == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  void exec_set(const Node& n, const Value& v) {
    try {
      if (n.text.empty()) {
        bind_targets(n.targets, v, frames_.back());
        return;
      }
      Value target = lookup(n.targets[0]);
      if (!target.is_namespace())
        throw JinjaError(str_cat("TypeError: can only assign attributes on namespace() objects, '", n.targets[0],
                                 "' is ", target.is_undefined() ? "undefined" : target.type_name()));
      if (!n.text.empty() && n.text[0] == '_')
        throw JinjaError(str_cat("SecurityError: chat templates cannot store underscore-prefixed attributes on a namespace, but got '", n.text, "'"));
      ValueDict& attrs = target.as_namespace().attrs;
      for (auto& [k, old] : attrs)
        if (k == n.text) {
          old = v;
          return;
        }
      attrs.emplace_back(n.text, v);
    } catch (const JinjaError& e) {
      located(e, n.line, n.col);
    }
  }

  void define_macro(const Node& n) {
    const Node* macro = &n;
    frames_.back()[n.text] = Value([this, macro](const CallArgs& a) { return call_macro(*macro, a); }, n.text);
  }

  Value call_macro(const Node& m, const CallArgs& a) {
    if (a.positional.size() > m.params.size())
      throw JinjaError(str_cat("TypeError: macro '", m.text, "' takes not more than ", m.params.size(), " argument(s)"));
    if (call_depth_ >= kMaxCallDepth) throw JinjaError("RecursionError: maximum macro call depth exceeded");
    std::vector<Frame> saved = {frames_[0], Frame{}};
    std::swap(saved, frames_);
    ++call_depth_;
    std::string out;
    try {
      for (size_t i = 0; i < m.params.size(); ++i) {
        const auto& [name, def] = m.params[i];
        const Value* given = get_arg(a, i, name.c_str());
        frames_.back()[name] = given ? *given : def ? eval(*def) : Value::undefined(str_cat("'", name, "' is undefined"));
      }
      exec_body(m.body, out);
    } catch (...) {
      --call_depth_;
      saved[0] = frames_[0];
      std::swap(saved, frames_);
      throw;
    }
    --call_depth_;
    saved[0] = frames_[0];
    std::swap(saved, frames_);
    return Value(out);
  }

  Value lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return lookup_global(name);
  }

  Value eval(const Expr& e) {
    try {
      return eval_inner(e);
    } catch (const JinjaError& err) {
      located(err, e.line, e.col);
    }
  }

  CallArgs eval_args(const Expr& e) {
    CallArgs a;
    for (size_t i = 1; i < e.args.size(); ++i) a.positional.push_back(eval_inner(*e.args[i]));
    for (const auto& [k, v] : e.kwargs) a.keyword.emplace_back(k, eval_inner(*v));
    return a;
  }

  Value eval_inner(const Expr& e) {
    using K = Expr::Kind;
    switch (e.kind) {
      case K::kLiteral: return e.literal;
      case K::kName: return lookup(e.name);
      case K::kList:
      case K::kTuple: {
        ValueList l;
        for (const auto& a : e.args) l.push_back(eval_inner(*a));
        return Value(std::move(l));
      }
      case K::kDict: {
        ValueDict d;
        for (const auto& [k, v] : e.dict_items) {
          Value key = eval_inner(*k);
          if (!key.is_string()) throw JinjaError(str_cat("TypeError: dict keys must be strings here, got ", key.type_name()));
          Value val = eval_inner(*v);
          auto it = std::find_if(d.begin(), d.end(), [&](const auto& p) { return p.first == key.as_string(); });
          if (it != d.end()) it->second = val; else d.emplace_back(key.as_string(), val);
        }
        return Value(std::move(d));
      }
      case K::kAttr: return get_attr(eval_inner(*e.args[0]), e.name);
      case K::kIndex: return get_item(eval_inner(*e.args[0]), eval_inner(*e.args[1]));
      case K::kSlice: {
        Value obj = eval_inner(*e.args[0]);
        auto part = [&](size_t i) { return e.args[i] ? eval_inner(*e.args[i]) : Value::none(); };
        return slice(obj, part(1), part(2), part(3));
      }
      case K::kCall: {
        Value fn = eval_inner(*e.args[0]);
        return call_value(fn, eval_args(e));
      }
      case K::kFilter: {
        Value v = eval_inner(*e.args[0]);
        return apply_filter(e.name, v, eval_args(e));
      }
      case K::kTest: {
        Value v = eval_inner(*e.args[0]);
        return Value(apply_test(e.name, v, eval_args(e)) != e.negated);
      }
      case K::kUnary: {
        Value v = eval_inner(*e.args[0]);
        if (e.name == "not") return Value(!v.truthy());
        if (v.is_undefined()) undefined_error(v);
        if (!v.is_number()) throw JinjaError(str_cat("TypeError: bad operand type for unary ", e.name, ": '", v.type_name(), "'"));
        if (e.name == "+") return v.kind() == Value::Kind::kBool ? Value(v.as_int()) : v;
        return v.kind() == Value::Kind::kFloat ? Value(-v.as_float()) : binary_op("-", Value(int64_t{0}), v);
      }
      case K::kBinary: {
        Value a = eval_inner(*e.args[0]);
        return binary_op(e.name, a, eval_inner(*e.args[1]));
      }
      case K::kAnd: {
        Value a = eval_inner(*e.args[0]);
        return a.truthy() ? eval_inner(*e.args[1]) : a;
      }
      case K::kOr: {
        Value a = eval_inner(*e.args[0]);
        return a.truthy() ? a : eval_inner(*e.args[1]);
      }
      case K::kCond:
        if (eval_inner(*e.args[1]).truthy()) return eval_inner(*e.args[0]);
        return e.args[2] ? eval_inner(*e.args[2]) : Value::undefined("the inline if-expression evaluated to false and no else section was defined");
    }
    return Value();
  }

  std::string what_;
  std::vector<Frame> frames_;  // [0]: the context and top-level sets
  int call_depth_ = 0;
};

}  // namespace

std::string render_template(const Body& body, const ValueDict& vars, const std::string& what) {
  return Renderer(vars, what).run(body);
}

}  // namespace blockspec::jinja
