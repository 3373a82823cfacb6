// Syntax tree of a parsed Jinja template: expressions and statements, each
// with the line/column of its first token for runtime error messages.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace blockspec::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kList,     // args: items
    kTuple,    // args: items (a list value at run time)
    kDict,     // kwargs-like pairs in dict_items
    kAttr,     // args[0].name
    kIndex,    // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]], missing parts null
    kCall,     // args[0](args[1..], kwargs)
    kFilter,   // args[0] | name(args[1..], kwargs)
    kTest,     // args[0] is [not] name(args[1..])
    kUnary,    // name in {"-", "+", "not"}: args[0]
    kBinary,   // args[0] name args[1]: + - * / // % ** ~ == != < > <= >= in notin
    kAnd,
    kOr,
    kCond,  // args[0] if args[1] else args[2] (args[2] may be null)
  };
  Kind kind;
  int line = 0;
  int col = 0;
  std::string name;
  Value literal;
  bool negated = false;  // kTest: "is not"
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::pair<ExprPtr, ExprPtr>> dict_items;
};

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

struct Node {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches: (cond, body), last cond null for else
    kFor,       // for targets in expr [if filter] body [else else_body]
    kSet,       // set targets = expr, or set targets[0].attr = expr
    kSetBlock,  // set targets[0] %} body {% endset
    kMacro,     // macro name(params) body
    kBreak,
    kContinue,
    kPassThrough,  // {% generation %} body: rendered as is
  };
  Kind kind;
  int line = 0;
  int col = 0;
  std::string text;  // kText; kMacro name; kSet attribute (ns.attr) when non-empty
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters and defaults
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
};

// Parses lexed tokens into a body; throws Error naming `what`, line, column.
Body parse_template(const std::string& source, const std::string& what);

}  // namespace blockspec::jinja
