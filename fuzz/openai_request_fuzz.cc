// libFuzzer target: an HTTP request body through the OpenAI request parsers
// of `blockspec serve` (src/server/openai_request.h), as every endpoint sees
// it. They may reject the input with ApiError; anything else (a crash, a
// sanitizer report, nlohmann's type_error from a field we read without
// checking its type) is a bug. Built and run by scripts/fuzz.sh; registered
// in CTest as fuzz_openai_request; seeded with a few valid requests.
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/error.h"
#include "grammar/json_schema.h"
#include "server/openai_request.h"
#include "server/tool_calls.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace blockspec;
  const std::string body(reinterpret_cast<const char*>(data), size);
  nlohmann::json j;
  try {
    j = parse_body(body);
  } catch (const ApiError& e) {
    (void)error_body(e.what(), e.type, e.param);
    return 0;
  }
  auto attempt = [&](auto&& fn) {
    try {
      fn();
    } catch (const ApiError& e) {
      (void)error_body(e.what(), e.type, e.param);
    }
  };
  attempt([&] {
    GenRequest r = parse_completion_request(j);
    resolve_max_tokens(r, r.prompt_ids.empty() ? 3 : static_cast<int64_t>(r.prompt_ids.size()), 512);
    check_token_ids(r.prompt_ids, 512, "prompt");
    check_token_ids(r.params.stop_token_ids, 512, "stop_token_ids");
  });
  attempt([&] {
    GenRequest r = parse_chat_request(j);
    resolve_max_tokens(r, static_cast<int64_t>(r.messages.size()), 512);
  });
  // Structured output: the request's constraint compiled as serve compiles it
  // (a schema or regex it cannot take is an Error, which serve answers 400).
  attempt([&] {
    GenRequest r = parse_chat_request(j);
    keep_client_order(r, body);
    if (!r.structured) return;
    try {
      const GenRequest::Structured& s = *r.structured;
      if (s.kind == "json_schema") (void)grammar::compile_json_schema(s.schema);
      else if (s.kind == "regex") (void)grammar::compile_regex_language(s.regex);
      else if (s.kind == "choice") (void)grammar::compile_choice(s.choices);
    } catch (const Error&) {
    }
  });
  // The tool-call parsers on the raw text, whole and as a stream of pieces.
  int ids = 0;
  const auto new_id = [&ids] { return std::to_string(ids++); };
  for (ToolCallFormat f : {ToolCallFormat::hermes, ToolCallFormat::qwen3_coder, ToolCallFormat::qwen3_xml}) {
    (void)extract_tool_calls(f, body, nlohmann::ordered_json::array(), new_id);
    ToolCallStream s(f, nlohmann::ordered_json::array(), new_id);
    std::vector<ToolCallDelta> out;
    for (size_t i = 0; i < body.size(); i += 3) s.feed(body.substr(i, 3), out);
    s.finish(out);
  }
  attempt([&] { (void)parse_tokenize_request(j); });
  attempt([&] { (void)parse_detokenize_request(j); });
  return 0;
}
