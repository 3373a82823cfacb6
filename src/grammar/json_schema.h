// Structured output languages compiled to byte NFAs (grammar/nfa.h):
//   - a JSON schema (response_format json_schema, vLLM's guided_json),
//   - any JSON object (response_format json_object),
//   - a regular expression (guided_regex), a list of choices (guided_choice).
//
// The JSON text is compact with optional single spaces after '{', '[', ','
// and ':' (json.dumps style or fully compact both fit); object properties
// come in the schema's order, required ones always, optional ones or not.
// Supported schema keywords: type (and lists of types), properties,
// required, items, minItems, maxItems, enum, const, anyOf, oneOf, allOf of
// one schema, $ref to #/$defs or #/definitions (at most 6 deep), pattern,
// minLength, maxLength, format (date, time, date-time, uuid, email),
// minimum >= 0 on integers; additionalProperties is read as false (only the
// declared properties are produced, which every reading allows);
// annotations (title, description, default, examples, $schema, $id, ...) are
// ignored. Anything else is an Error naming the keyword and its path, so a
// constraint is never silently dropped. Bounds that keep outputs finite:
// integers up to 16 digits, fractions 15, exponents 3; free JSON (json_object,
// or a schema of {} / true) nests at most 4 levels.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "grammar/nfa.h"

namespace blockspec::grammar {

Nfa compile_json_schema(const nlohmann::ordered_json& schema);
Nfa compile_json_object();
Nfa compile_regex_language(const std::string& pattern);
Nfa compile_choice(const std::vector<std::string>& choices);

}  // namespace blockspec::grammar
