// Jinja lexer with the settings HF's apply_chat_template uses
// (transformers/utils/chat_template_utils.py: trim_blocks=True,
// lstrip_blocks=True, default delimiters, keep_trailing_newline=False).
// Mirrors jinja2/lexer.py: newlines normalised to "\n", one trailing newline
// dropped, "-" strips all whitespace on its side, "+" disables lstrip/trim,
// lstrip_blocks strips spaces before "{%" / "{#" when only whitespace precedes
// them on their line, trim_blocks drops the first newline after "%}" / "#}".
#pragma once
#include <string>
#include <vector>

namespace blockspec::jinja {

enum class Tok { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
  Tok kind;
  std::string text;  // kText data, name, unescaped string, number spelling, operator
  int line = 1;
  int col = 1;
};

// Throws blockspec::Error "<what>: syntax error at line L, column C: ..."
std::vector<Token> lex_template(const std::string& source, const std::string& what);

[[noreturn]] void syntax_error(const std::string& what, int line, int col, const std::string& msg);

}  // namespace blockspec::jinja
