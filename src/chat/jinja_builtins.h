// Jinja's runtime library as chat templates use it: filters, tests, methods
// of str/dict (bound on attribute access), the globals HF adds
// (raise_exception, namespace, dict, strftime_now) and range, plus Python's
// operators on Values.
#pragma once
#include <string>

#include "base/error.h"
#include "chat/jinja_value.h"

namespace blockspec::jinja {

// A runtime error without position; the renderer adds what/line/column.
class JinjaError : public Error {
 public:
  using Error::Error;
};
// raise_exception(msg) from the template: the message is kept verbatim.
class TemplateRaised : public JinjaError {
 public:
  using JinjaError::JinjaError;
};

[[noreturn]] void undefined_error(const Value& u);  // UndefinedError with its hint

Value get_attr(const Value& obj, const std::string& name);  // obj.name (methods bound)
Value get_item(const Value& obj, const Value& key);         // obj[key]
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
Value binary_op(const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);  // item in container
ValueList iterate(const Value& v);                           // for x in v

Value apply_filter(const std::string& name, const Value& v, const CallArgs& args);
bool apply_test(const std::string& name, const Value& v, const CallArgs& args);
Value call_value(const Value& fn, const CallArgs& args);
Value lookup_global(const std::string& name);  // Undefined when not a builtin global

// Keyword-or-positional argument `name` at position `pos` of a builtin call.
const Value* get_arg(const CallArgs& args, size_t pos, const char* name);

}  // namespace blockspec::jinja
