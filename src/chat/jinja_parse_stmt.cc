// Statements of the Jinja subset: if/elif/else, for (else, inline if,
// tuple targets), set (names, tuples, ns.attr, blocks), macro, break,
// continue, generation.
#include "chat/jinja_parser.h"

namespace blockspec::jinja {

const char* tok_desc(Tok k) {
  switch (k) {
    case Tok::kText: return "template text";
    case Tok::kVarBegin: return "'{{'";
    case Tok::kVarEnd: return "end of print statement '}}'";
    case Tok::kBlockBegin: return "'{%'";
    case Tok::kBlockEnd: return "end of statement block '%}'";
    case Tok::kName: return "name";
    case Tok::kString: return "string";
    case Tok::kInt: return "integer";
    case Tok::kFloat: return "float";
    case Tok::kOp: return "operator";
    case Tok::kEof: return "end of template";
  }
  return "?";
}

Body Parser::parse_body(std::initializer_list<const char*> end_tags) {
  Body body;
  for (;;) {
    const Token& t = cur();
    if (t.kind == Tok::kEof) {
      if (end_tags.size() == 0) return body;
      error(str_cat("unexpected end of template, expected '", *end_tags.begin(), "'"));
    }
    if (t.kind == Tok::kText) {
      auto n = node(Node::Kind::kText);
      n->text = next().text;
      body.push_back(std::move(n));
    } else if (t.kind == Tok::kVarBegin) {
      auto n = node(Node::Kind::kOutput);
      next();
      n->expr = parse_tuple(true);
      expect(Tok::kVarEnd);
      body.push_back(std::move(n));
    } else if (t.kind == Tok::kBlockBegin) {
      const Token& tag = peek(1);
      if (tag.kind == Tok::kName &&
          std::any_of(end_tags.begin(), end_tags.end(), [&](const char* e) { return tag.text == e; })) {
        next();  // leave the tag name for the caller
        return body;
      }
      next();
      body.push_back(parse_statement());
    } else {
      error(str_cat("unexpected ", describe(t)));
    }
  }
}

std::unique_ptr<Node> Parser::node(Node::Kind k) {
  auto n = std::make_unique<Node>();
  n->kind = k;
  n->line = cur().line;
  n->col = cur().col;
  return n;
}

std::unique_ptr<Node> Parser::parse_statement() {
  DepthGuard guard(*this);
  if (cur().kind != Tok::kName) error(str_cat("expected a tag name, got ", describe(cur())));
  std::string tag = cur().text;
  if (tag == "if") return parse_if();
  if (tag == "for") return parse_for();
  if (tag == "set") return parse_set();
  if (tag == "macro") return parse_macro();
  if (tag == "generation") {
    auto n = node(Node::Kind::kPassThrough);
    next();
    expect(Tok::kBlockEnd);
    n->body = parse_body({"endgeneration"});
    next();
    expect(Tok::kBlockEnd);
    return n;
  }
  if (tag == "break" || tag == "continue") {
    auto n = node(tag == "break" ? Node::Kind::kBreak : Node::Kind::kContinue);
    if (loop_depth_ == 0) error(str_cat("'", tag, "' outside of a for loop"));
    next();
    expect(Tok::kBlockEnd);
    return n;
  }
  if (tag.rfind("end", 0) == 0 || tag == "elif" || tag == "else")
    error(str_cat("unexpected '", tag, "' (no open block it could close)"));
  error(str_cat("unknown tag '", tag, "' (supported: if, for, set, macro, break, continue, raw, generation)"));
}

std::unique_ptr<Node> Parser::parse_if() {
  auto n = node(Node::Kind::kIf);
  next();
  for (;;) {
    ExprPtr cond = parse_tuple(true);
    expect(Tok::kBlockEnd);
    Body body = parse_body({"elif", "else", "endif"});
    n->branches.emplace_back(std::move(cond), std::move(body));
    std::string tag = next().text;
    if (tag == "elif") continue;
    if (tag == "else") {
      expect(Tok::kBlockEnd);
      n->branches.emplace_back(nullptr, parse_body({"endif"}));
      next();
    }
    expect(Tok::kBlockEnd);
    return n;
  }
}

std::unique_ptr<Node> Parser::parse_for() {
  auto n = node(Node::Kind::kFor);
  next();
  bool paren = skip_op("(");
  do {
    n->targets.push_back(expect_name());
  } while (skip_op(","));
  if (paren) expect_op(")");
  if (!skip_name("in")) error(str_cat("expected 'in' in for loop, got ", describe(cur())));
  n->expr = parse_tuple(false);
  if (skip_name("if")) n->filter = parse_tuple(true);
  if (is_name("recursive")) error("recursive for loops are not supported");
  expect(Tok::kBlockEnd);
  ++loop_depth_;
  n->body = parse_body({"else", "endfor"});
  --loop_depth_;
  if (next().text == "else") {
    expect(Tok::kBlockEnd);
    n->else_body = parse_body({"endfor"});
    next();
  }
  expect(Tok::kBlockEnd);
  return n;
}

std::unique_ptr<Node> Parser::parse_set() {
  auto n = node(Node::Kind::kSet);
  next();
  n->targets.push_back(expect_name());
  if (skip_op(".")) {
    n->text = expect_name();
  } else {
    while (skip_op(",")) n->targets.push_back(expect_name());
  }
  if (cur().kind == Tok::kBlockEnd && n->targets.size() == 1 && n->text.empty()) {
    next();
    n->kind = Node::Kind::kSetBlock;
    n->body = parse_body({"endset"});
    next();
    expect(Tok::kBlockEnd);
    return n;
  }
  expect_op("=");
  n->expr = parse_tuple(true);
  expect(Tok::kBlockEnd);
  return n;
}

std::unique_ptr<Node> Parser::parse_macro() {
  auto n = node(Node::Kind::kMacro);
  next();
  n->text = expect_name();
  expect_op("(");
  while (!skip_op(")")) {
    if (!n->params.empty()) expect_op(",");
    if (skip_op(")")) break;
    std::string p = expect_name();
    ExprPtr def = skip_op("=") ? parse_expression(true) : nullptr;
    n->params.emplace_back(p, std::move(def));
  }
  expect(Tok::kBlockEnd);
  int saved = loop_depth_;
  loop_depth_ = 0;
  n->body = parse_body({"endmacro"});
  loop_depth_ = saved;
  next();
  expect(Tok::kBlockEnd);
  return n;
}

Body parse_template(const std::string& source, const std::string& what) {
  return Parser(lex_template(source, what), what).parse_all();
}

}  // namespace blockspec::jinja
