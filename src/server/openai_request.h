// OpenAI request bodies -> what the engine needs. Parsing checks every
// field's type and range and throws ApiError (HTTP 400, OpenAI error shape,
// `param` naming the field); fields this server does not implement are
// rejected by name instead of being silently ignored, unknown fields are
// ignored (clients send user, metadata, store, ...).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "runtime/engine.h"
#include "server/generation_config.h"

namespace blockspec {

struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string param = "",
           std::string type = "invalid_request_error")
      : std::runtime_error(message), status(status), param(std::move(param)), type(std::move(type)) {}
  int status;
  std::string param, type;
};

// {"error":{"message":...,"type":...,"param":...|null,"code":null}}
std::string error_body(const std::string& message, const std::string& type, const std::string& param);

// Parses a request body; malformed JSON (invalid UTF-8 included) or a
// non-object top level -> ApiError.
nlohmann::json parse_body(const std::string& body);

// A parsed /v1/completions or /v1/chat/completions request. The prompt is
// either text (completions), token ids (completions) or chat messages.
struct GenRequest {
  bool chat = false;
  std::string model;                   // empty: not given
  std::optional<std::string> prompt_text;
  std::vector<int32_t> prompt_ids;     // when the prompt was token ids
  std::vector<ChatMessage> messages;   // chat
  ChatTemplateOptions template_opts;   // chat: add_generation_prompt, chat_template_kwargs
  RequestParams params;                // prompt left empty; max_tokens resolved later
  std::optional<int64_t> max_tokens;   // as given
  std::optional<int64_t> default_max_tokens;  // generation_config.json's max_new_tokens (cut to fit)
  std::vector<std::string> stop;
  bool stream = false, include_usage = false;
  int n = 1;  // choices: n engine requests
  bool skip_special_tokens = true;
  bool tokens_as_ids = false;  // vLLM's return_tokens_as_token_ids: logprobs name tokens "token_id:N"
  bool has_seed = false;  // no seed: the server draws one (unseeded requests differ, as with OpenAI)
  // Chat tools, as vLLM renders them into the prompt (null: none), and
  // tool_choice: "none", "auto", "required" or "function:NAME" (the last two
  // forced through `structured`).
  nlohmann::ordered_json tools;
  std::string tool_choice = "none";
  bool parallel_tool_calls = true;  // false: only the first tool call is returned
  // Structured output: response_format json_object / json_schema, or vLLM's
  // guided_json / guided_regex / guided_choice (and structured_outputs {...}).
  struct Structured {
    std::string kind;               // "json_schema", "json_object", "regex", "choice"
    std::string param;              // the field it came from (for errors)
    nlohmann::ordered_json schema;  // json_schema, in the client's key order (keep_client_order)
    std::string regex;
    std::vector<std::string> choices;
  };
  std::optional<Structured> structured;
};

// Fields the request omits take their value from `defaults` (the model's
// generation_config.json) where it has one; its eos ids join stop_token_ids
// unless ignore_eos.
GenRequest parse_completion_request(const nlohmann::json& j, const RequestDefaults& defaults = {});
GenRequest parse_chat_request(const nlohmann::json& j, const RequestDefaults& defaults = {});
// Re-reads `tools` and a structured-output schema from the raw body in the
// client's key order (parse_body's JSON sorts keys; the prompt renders tools
// with tojson, and a schema's properties are generated in their order).
void keep_client_order(GenRequest& r, const std::string& body);

// Resolves max_tokens against the prompt length (when not given: the
// default_max_tokens cut to what fits, else completions 16 and chat the
// rest of max_model_len) and checks prompt + max_tokens <= max_model_len;
// throws ApiError.
void resolve_max_tokens(GenRequest& r, int64_t n_prompt, int64_t max_model_len);

// /tokenize: {"prompt": str} or {"messages": [...]} (+ add_special_tokens,
// add_generation_prompt, chat_template_kwargs). /detokenize: {"tokens": [ids]}.
struct TokenizeRequest {
  std::optional<std::string> prompt;
  std::vector<ChatMessage> messages;
  ChatTemplateOptions template_opts;
  bool add_special_tokens = true;
};
TokenizeRequest parse_tokenize_request(const nlohmann::json& j);
std::vector<int32_t> parse_detokenize_request(const nlohmann::json& j);

// Checks every id is in [0, vocab); throws ApiError naming `param`.
void check_token_ids(const std::vector<int32_t>& ids, int64_t vocab, const std::string& param);

}  // namespace blockspec
