// Renders a parsed Jinja template against a set of variables.
#pragma once
#include <string>

#include "chat/jinja_ast.h"

namespace blockspec::jinja {

// Throws blockspec::Error "<what>: line L, column C: <python-like error>", or
// "<what>: template raised an exception at line L: <message>" for
// raise_exception(message).
std::string render_template(const Body& body, const ValueDict& vars, const std::string& what);

}  // namespace blockspec::jinja
