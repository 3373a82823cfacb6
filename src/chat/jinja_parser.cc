// Expressions of the Jinja subset (precedence in jinja_parser.h).
#include "chat/jinja_parser.h"

#include <cerrno>
#include <cstdlib>

namespace blockspec::jinja {

ExprPtr Parser::parse_tuple(bool with_condexpr) {
  const Token at = cur();
  ExprPtr first = parse_expression(with_condexpr);
  if (!is_op(",")) return first;
  auto tup = make(Expr::Kind::kTuple, at);
  tup->args.push_back(std::move(first));
  while (skip_op(",")) {
    if (cur().kind == Tok::kVarEnd || cur().kind == Tok::kBlockEnd || is_op(")")) break;
    tup->args.push_back(parse_expression(with_condexpr));
  }
  return tup;
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  DepthGuard guard(*this);
  const Token at = cur();
  ExprPtr e = parse_or();
  if (!with_condexpr) return e;
  while (skip_name("if")) {
    auto c = make(Expr::Kind::kCond, at);
    c->args.push_back(std::move(e));
    c->args.push_back(parse_or());
    c->args.push_back(skip_name("else") ? parse_expression(true) : nullptr);
    e = std::move(c);
  }
  return e;
}

ExprPtr Parser::parse_or() {
  ExprPtr e = parse_and();
  while (is_name("or")) {
    Token at = next();
    e = binary(Expr::Kind::kOr, "or", std::move(e), parse_and(), at);
  }
  return e;
}

ExprPtr Parser::parse_and() {
  ExprPtr e = parse_not();
  while (is_name("and")) {
    Token at = next();
    e = binary(Expr::Kind::kAnd, "and", std::move(e), parse_not(), at);
  }
  return e;
}

ExprPtr Parser::parse_not() {
  DepthGuard guard(*this);
  if (is_name("not")) {
    auto e = make(Expr::Kind::kUnary, next());
    e->name = "not";
    e->args.push_back(parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const Token at = cur();
  std::vector<ExprPtr> operands;
  std::vector<std::string> ops;
  operands.push_back(parse_math1());
  for (;;) {
    if (cur().kind == Tok::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                   cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
      ops.push_back(next().text);
    } else if (is_name("in")) {
      ops.push_back(next().text);
    } else if (is_name("not") && peek(1).kind == Tok::kName && peek(1).text == "in") {
      next();
      next();
      ops.push_back("notin");
    } else {
      break;
    }
    operands.push_back(parse_math1());
  }
  if (ops.empty()) return std::move(operands[0]);
  // a < b < c is (a < b) and (b < c), as in Python.
  ExprPtr result;
  for (size_t i = 0; i < ops.size(); ++i) {
    ExprPtr cmp = binary(Expr::Kind::kBinary, ops[i], clone_ref(operands[i]), clone_ref(operands[i + 1]), at);
    result = result ? binary(Expr::Kind::kAnd, "and", std::move(result), std::move(cmp), at) : std::move(cmp);
  }
  return result;
}

// Comparison chains evaluate their middle operand twice; expressions have
// no side effects worth preserving, so a re-parse of the same tokens is a
// faithful copy.
ExprPtr Parser::clone_ref(const ExprPtr& e) {
  if (!e) return nullptr;
  auto c = std::make_unique<Expr>();
  c->kind = e->kind;
  c->line = e->line;
  c->col = e->col;
  c->name = e->name;
  c->literal = e->literal;
  c->negated = e->negated;
  for (const auto& a : e->args) c->args.push_back(clone_ref(a));
  for (const auto& [k, v] : e->kwargs) c->kwargs.emplace_back(k, clone_ref(v));
  for (const auto& [k, v] : e->dict_items) c->dict_items.emplace_back(clone_ref(k), clone_ref(v));
  return c;
}

ExprPtr Parser::parse_math1() {
  ExprPtr e = parse_concat();
  while (is_op("+") || is_op("-")) {
    Token at = next();
    e = binary(Expr::Kind::kBinary, at.text, std::move(e), parse_concat(), at);
  }
  return e;
}

ExprPtr Parser::parse_concat() {
  ExprPtr e = parse_math2();
  while (is_op("~")) {
    Token at = next();
    e = binary(Expr::Kind::kBinary, "~", std::move(e), parse_math2(), at);
  }
  return e;
}

ExprPtr Parser::parse_math2() {
  ExprPtr e = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    Token at = next();
    e = binary(Expr::Kind::kBinary, at.text, std::move(e), parse_pow(), at);
  }
  return e;
}

ExprPtr Parser::parse_pow() {
  ExprPtr e = parse_unary(true);
  while (is_op("**")) {
    Token at = next();
    e = binary(Expr::Kind::kBinary, "**", std::move(e), parse_unary(true), at);
  }
  return e;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  DepthGuard guard(*this);
  ExprPtr e;
  if (is_op("-") || is_op("+")) {
    e = make(Expr::Kind::kUnary, cur());
    e->name = next().text;
    e->args.push_back(parse_unary(false));
  } else {
    e = parse_postfix(parse_primary());
  }
  return with_filter ? parse_filters(std::move(e)) : std::move(e);
}

ExprPtr Parser::parse_primary() {
  const Token t = cur();
  switch (t.kind) {
    case Tok::kName: {
      next();
      auto e = make(Expr::Kind::kLiteral, t);
      if (t.text == "true" || t.text == "True") e->literal = Value(true);
      else if (t.text == "false" || t.text == "False") e->literal = Value(false);
      else if (t.text == "none" || t.text == "None") e->literal = Value::none();
      else {
        e->kind = Expr::Kind::kName;
        e->name = t.text;
      }
      return e;
    }
    case Tok::kString: {
      auto e = make(Expr::Kind::kLiteral, t);
      std::string s;
      while (cur().kind == Tok::kString) s += next().text;  // adjacent literals concatenate
      e->literal = Value(s);
      return e;
    }
    case Tok::kInt:
    case Tok::kFloat: {
      next();
      auto e = make(Expr::Kind::kLiteral, t);
      if (t.kind == Tok::kFloat) {
        e->literal = Value(std::strtod(t.text.c_str(), nullptr));
      } else {
        errno = 0;
        long long v = std::strtoll(t.text.c_str(), nullptr, 10);
        if (errno == ERANGE) error("integer literal out of range");
        e->literal = Value(static_cast<int64_t>(v));
      }
      return e;
    }
    case Tok::kOp:
      if (t.text == "(") {
        next();
        if (skip_op(")")) return make(Expr::Kind::kTuple, t);
        ExprPtr e = parse_tuple(true);
        expect_op(")");
        return e;
      }
      if (t.text == "[") {
        next();
        auto e = make(Expr::Kind::kList, t);
        while (!skip_op("]")) {
          if (!e->args.empty()) expect_op(",");
          if (skip_op("]")) break;
          e->args.push_back(parse_expression(true));
        }
        return e;
      }
      if (t.text == "{") {
        next();
        auto e = make(Expr::Kind::kDict, t);
        while (!skip_op("}")) {
          if (!e->dict_items.empty()) expect_op(",");
          if (skip_op("}")) break;
          ExprPtr k = parse_expression(true);
          expect_op(":");
          e->dict_items.emplace_back(std::move(k), parse_expression(true));
        }
        return e;
      }
      break;
    default: break;
  }
  error(str_cat("expected an expression, got ", describe(t)));
}

ExprPtr Parser::parse_postfix(ExprPtr e) {
  for (;;) {
    const Token at = start_of(e);
    if (skip_op(".")) {
      auto a = make(Expr::Kind::kAttr, at);
      if (cur().kind == Tok::kInt) {  // foo.0 is foo[0]
        a->kind = Expr::Kind::kIndex;
        a->args.push_back(std::move(e));
        auto idx = make(Expr::Kind::kLiteral, cur());
        idx->literal = Value(static_cast<int64_t>(std::strtoll(next().text.c_str(), nullptr, 10)));
        a->args.push_back(std::move(idx));
      } else {
        a->name = expect_name();
        a->args.push_back(std::move(e));
      }
      e = std::move(a);
    } else if (skip_op("[")) {
      e = parse_subscript(std::move(e), at);
    } else if (skip_op("(")) {
      auto c = make(Expr::Kind::kCall, at);
      c->args.push_back(std::move(e));
      parse_call_args(*c);
      e = std::move(c);
    } else {
      return e;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr target, const Token& at) {
  std::vector<ExprPtr> parts(1);
  bool slice = false;
  for (;;) {
    if (is_op(":")) {
      next();
      slice = true;
      parts.emplace_back();
      if (parts.size() > 3) error("too many ':' in slice");
    } else if (is_op("]")) {
      next();
      break;
    } else {
      if (parts.back()) error(str_cat("expected ']' or ':', got ", describe(cur())));
      parts.back() = parse_expression(true);
    }
  }
  if (!slice) {
    if (!parts[0]) error("empty subscript");
    auto e = make(Expr::Kind::kIndex, at);
    e->args.push_back(std::move(target));
    e->args.push_back(std::move(parts[0]));
    return e;
  }
  auto e = make(Expr::Kind::kSlice, at);
  e->args.push_back(std::move(target));
  parts.resize(3);
  for (auto& p : parts) e->args.push_back(std::move(p));
  return e;
}

void Parser::parse_call_args(Expr& call) {
  while (!skip_op(")")) {
    if (call.args.size() > 1 || !call.kwargs.empty()) expect_op(",");
    if (skip_op(")")) return;
    if (cur().kind == Tok::kName && peek(1).kind == Tok::kOp && peek(1).text == "=") {
      std::string k = next().text;
      next();
      call.kwargs.emplace_back(k, parse_expression(true));
    } else {
      if (!call.kwargs.empty()) error("positional argument after keyword argument");
      call.args.push_back(parse_expression(true));
    }
  }
}

ExprPtr Parser::parse_filters(ExprPtr e) {
  for (;;) {
    const Token at = start_of(e);
    if (skip_op("|")) {
      auto f = make(Expr::Kind::kFilter, at);
      f->name = expect_name();
      while (skip_op(".")) f->name += "." + expect_name();
      f->args.push_back(std::move(e));
      if (skip_op("(")) parse_call_args(*f);
      e = std::move(f);
    } else if (is_name("is")) {
      next();
      auto t = make(Expr::Kind::kTest, at);
      t->negated = skip_name("not");
      t->name = expect_name();
      t->args.push_back(std::move(e));
      if (skip_op("(")) {
        parse_call_args(*t);
      } else if ((cur().kind == Tok::kName || cur().kind == Tok::kString || cur().kind == Tok::kInt ||
                  cur().kind == Tok::kFloat || is_op("(") || is_op("[") || is_op("{")) &&
                 !is_name("else") && !is_name("or") && !is_name("and")) {
        t->args.push_back(parse_postfix(parse_primary()));
      }
      e = std::move(t);
    } else if (skip_op("(")) {
      auto c = make(Expr::Kind::kCall, at);
      c->args.push_back(std::move(e));
      parse_call_args(*c);
      e = std::move(c);
    } else {
      return e;
    }
  }
}

}  // namespace blockspec::jinja
