// libFuzzer target: an HTTP request body through the OpenAI request parsers
// of `blockspec serve` (src/server/openai_request.h), as every endpoint sees
// it. They may reject the input with ApiError; anything else (a crash, a
// sanitizer report, nlohmann's type_error from a field we read without
// checking its type) is a bug. Built and run by scripts/fuzz.sh; registered
// in CTest as fuzz_openai_request; seeded with a few valid requests.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/openai_request.h"

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
  attempt([&] { (void)parse_tokenize_request(j); });
  attempt([&] { (void)parse_detokenize_request(j); });
  return 0;
}
