// Python str / dict methods as templates call them (message.content.split(...),
// tool.items()), on code points so that non-ASCII content behaves like Python.
#pragma once
#include <optional>
#include <string>

#include "chat/jinja_builtins.h"

namespace blockspec::jinja {

bool is_string_method(const std::string& name);
Value call_method(const Value& self, const std::string& name, const CallArgs& args);

// str.strip / lstrip / rstrip: chars nullopt means whitespace.
std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right);
std::string py_lower(const std::string& s);
std::string py_upper(const std::string& s);
std::string py_capitalize(const std::string& s);
std::string py_title(const std::string& s);
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count);

}  // namespace blockspec::jinja
