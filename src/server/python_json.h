// Python's view of values, as vLLM's tool parsers produce them: the
// `arguments` string of a tool call is Python's json.dumps(value,
// ensure_ascii=False) of a value that json.loads, int(), float() or
// ast.literal_eval made from the model's text. A client compares those
// strings byte for byte with vLLM's, so the rules are Python's:
//   json.dumps: separators ", " and ": ", floats by repr (shortest round
//   trip; exponent form below 1e-4 and from 1e16, "e-07"), Infinity / NaN,
//   strings escaped only for '"', '\\' and control characters (\n \r \t \b
//   \f, else \u00xx), everything else as is.
// (Rules read from CPython's json/encoder.py and float_repr_style 'short'.)
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace blockspec {

// json.dumps(v, ensure_ascii=False). Integers beyond 64 bits are carried as
// strings of digits tagged by py_big_int (they print without quotes).
std::string py_dumps(const nlohmann::ordered_json& v);

// repr(float(x)) as json.dumps writes it (Infinity, -Infinity, NaN).
std::string py_float_repr(double x);

// int(s): optional sign, decimal digits with single underscores between
// them, surrounding whitespace; the canonical decimal digits, any length.
std::optional<std::string> py_int(const std::string& s);

// float(s): Python's float syntax (decimal, exponent, underscores between
// digits, inf / infinity / nan in any case, surrounding whitespace).
std::optional<double> py_float(const std::string& s);

// ast.literal_eval(s) for the literals a model writes as tool arguments:
// numbers (unary +/-), strings ('...' / "..." with escapes, adjacent ones
// joined), True / False / None, lists, tuples (-> lists), dicts, sets are
// refused. Integers beyond 64 bits come back through py_big_int.
std::optional<nlohmann::ordered_json> py_literal_eval(const std::string& s);

// json.loads(s): standard JSON plus Infinity / -Infinity / NaN; integers
// beyond 64 bits through py_big_int. nullopt when Python would raise.
std::optional<nlohmann::ordered_json> py_json_loads(const std::string& s);

// An integer too large for 64 bits: an object {"\x01bigint": "digits"} that
// py_dumps prints as the bare digits.
nlohmann::ordered_json py_big_int(const std::string& digits);

}  // namespace blockspec
