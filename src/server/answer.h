// Internal to src/server: one request's state while its answer is written
// (kept alive by the content provider after the handler returns), and the
// JSON it is written as: the OpenAI shapes of choices, SSE chunks, logprobs
// and tool calls. A request with n > 1 has n choices, each its own engine
// request (Generation) with its own parsers.
#pragma once
#include <chrono>
#include <ctime>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/generation.h"
#include "server/reasoning.h"
#include "server/server.h"
#include "server/tool_calls.h"

namespace blockspec {

// The fields every response and chunk of one request share.
struct AnswerHead {
  std::string id, object, model;
  std::time_t created;
  bool chat;
};

// What shapes every choice's answer (the request's options).
struct AnswerStyle {
  bool thinking = false;          // --reasoning-parser qwen3 on a chat request
  bool thinking_enabled = true;   // ... and thinking on (chat_template_kwargs.enable_thinking)
  std::optional<ToolCallFormat> tool_format;  // --tool-call-parser, tools and tool_choice "auto"
  nlohmann::ordered_json tools;
  bool parallel_tool_calls = true;
  std::function<std::string()> new_tool_id;
  // tool_choice "required" or a named function: the output (constrained by
  // structured output) is the tool calls; "" otherwise.
  std::string forced_tool;
  int n_logprobs = -1;            // the request's logprobs (-1: none)
  bool tokens_as_ids = false;     // logprobs name tokens "token_id:N"
};

// One of the request's n answers.
struct Choice {
  int index = 0;
  std::unique_ptr<Generation> gen;
  std::string text;                          // non-streaming: the whole answer so far
  std::optional<ReasoningStream> think;      // streaming: the splits as pieces arrive
  std::optional<ToolCallStream> tool_stream;
  bool role_sent = false, ended = false, counted = false;
  size_t logprobs_sent = 0;                  // streaming: tokens whose logprobs went out
  bool forced_header_sent = false;           // streaming a named tool choice: its call's first delta is out
  int64_t text_offset = 0;                   // completions: characters of the tokens before them
};

struct Answer {
  std::shared_ptr<ServedModel> model;  // keeps the engine alive while we answer
  AnswerHead reply;
  AnswerStyle style;
  bool include_usage = false;
  std::vector<Choice> choices;
  std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
};

// One SSE chunk's parts (all optional).
struct ChunkParts {
  const std::string* text = nullptr;  // chat: delta.content; completions: text ("" when null)
  bool role = false;                  // chat: delta.role "assistant"
  const std::string* reasoning = nullptr;
  const nlohmann::json* tool_calls = nullptr;
  const nlohmann::json* logprobs = nullptr;
  std::string finish;                 // "" while streaming
};
std::string sse_chunk(const AnswerHead& r, int index, const ChunkParts& p, bool usage_null);

// The non-streaming answer of every choice, with usage.
nlohmann::json full_answer(Answer& a);
// {"prompt_tokens", "completion_tokens" (all choices), "total_tokens"}.
nlohmann::json usage_json(const Answer& a);
nlohmann::json answer_base(const AnswerHead& r);  // id, object, created, model

// The logprobs of choice c's generated tokens [from, to) in the API's shape.
nlohmann::json logprobs_json(const Answer& a, Choice& c, size_t from, size_t to);

// A tool-call delta as the API streams it (delta.tool_calls[0]).
nlohmann::json tool_call_delta_json(const ToolCallDelta& d);

// The calls of a forced tool choice's output: a named function's output is
// its arguments; "required" outputs [{"name", "parameters"}, ...] (empty
// when the text is not that, e.g. cut by max_tokens).
std::vector<ToolCall> forced_tool_calls(const AnswerStyle& s, const std::string& text);

}  // namespace blockspec
