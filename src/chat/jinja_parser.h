// Recursive-descent parser for the Jinja subset, following jinja2/parser.py:
// statements in jinja_parse_stmt.cc, expressions in jinja_parser.cc with
// Jinja's precedence: condexpr < or < and < not < compare < +,- < ~ <
// *,/,//,% < ** < unary < postfix (.attr, [index], (call)) and filters/tests.
// Internal to src/chat; the public entry point is parse_template (jinja_ast.h).
#pragma once
#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"

namespace blockspec::jinja {

const char* tok_desc(Tok k);

class Parser {
 public:
  Parser(std::vector<Token> toks, const std::string& what) : t_(std::move(toks)), what_(what) {}

  Body parse_all() {
    Body body = parse_body({});
    if (cur().kind != Tok::kEof) error(str_cat("unexpected tag '", peek(1).text, "'"));
    return body;
  }

 private:
  static constexpr int kMaxDepth = 100;  // nested blocks / expressions; real templates use < 10
  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxDepth) p_.error(str_cat("template nested deeper than ", kMaxDepth, " levels"));
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };

  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t n) const { return t_[std::min(i_ + n, t_.size() - 1)]; }
  Token next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }
  [[noreturn]] void error(const std::string& msg) const { syntax_error(what_, cur().line, cur().col, msg); }
  std::string describe(const Token& t) const {
    return t.kind == Tok::kName || t.kind == Tok::kOp ? "'" + t.text + "'" : tok_desc(t.kind);
  }
  bool is_op(const char* op) const { return cur().kind == Tok::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().kind == Tok::kName && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    ++i_;
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    ++i_;
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) error(str_cat("expected '", op, "', got ", describe(cur())));
  }
  void expect(Tok k) {
    if (cur().kind != k) error(str_cat("expected ", tok_desc(k), ", got ", describe(cur())));
    ++i_;
  }
  std::string expect_name() {
    if (cur().kind != Tok::kName) error(str_cat("expected a name, got ", describe(cur())));
    return next().text;
  }
  ExprPtr make(Expr::Kind k, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = at.line;
    e->col = at.col;
    return e;
  }

  // Postfix and binary nodes report the position where their left operand starts.
  static Token start_of(const ExprPtr& e) { return Token{Tok::kOp, "", e->line, e->col}; }

  ExprPtr binary(Expr::Kind k, const std::string& op, ExprPtr a, ExprPtr b, const Token& /*op_token*/) {
    auto e = make(k, start_of(a));
    e->name = op;
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  // Statements (jinja_parse_stmt.cc).
  Body parse_body(std::initializer_list<const char*> end_tags);
  std::unique_ptr<Node> node(Node::Kind k);
  std::unique_ptr<Node> parse_statement();
  std::unique_ptr<Node> parse_if();
  std::unique_ptr<Node> parse_for();
  std::unique_ptr<Node> parse_set();
  std::unique_ptr<Node> parse_macro();

  // Expressions (jinja_parser.cc).
  ExprPtr parse_tuple(bool with_condexpr);
  ExprPtr parse_expression(bool with_condexpr);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr clone_ref(const ExprPtr& e);
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr e);
  ExprPtr parse_filters(ExprPtr e);
  void parse_call_args(Expr& call);
  ExprPtr parse_subscript(ExprPtr target, const Token& at);

  std::vector<Token> t_;
  size_t i_ = 0;
  std::string what_;
  int loop_depth_ = 0;
  int depth_ = 0;  // recursion depth, bounded so a hostile template cannot overflow the stack
};

}  // namespace blockspec::jinja
