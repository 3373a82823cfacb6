// vLLM's `--tool-call-parser`: the tool calls in a chat answer's text become
// OpenAI `tool_calls` (issue 19). Formats, by vLLM's parser names:
//   hermes       <tool_call>{"name": ..., "arguments": {...}}</tool_call>
//                (Hermes 2 Pro, Qwen2.5, Qwen3): the JSON between the tags;
//                arguments = json.dumps of its "arguments" value.
//   qwen3_coder  <tool_call><function=NAME><parameter=P>VALUE</parameter>
//   qwen3_xml    ...</function></tool_call> (Qwen3-Coder, Qwen3.5): one
//                leading and one trailing newline of a value are dropped;
//                the value is typed by the tool's JSON schema (string /
//                int* / num* float* / bool / object, array: json.loads,
//                else ast.literal_eval; "null" is null; a parameter the
//                schema lacks stays a string); a missing </parameter> or
//                </function> ends at the next tag or the end.
// The two Qwen3 parsers read the same format and give the same calls; they
// stream as vLLM's do: qwen3_coder sends each parameter when it is complete,
// qwen3_xml also streams string values as they are generated.
//
// Where the rules go beyond vLLM's (documented in docs/serving.md):
// - Content is the text before the first tool call; text between or after
//   calls that is not whitespace is content too (tags dropped), and a call
//   that does not parse (hermes: not a JSON object with a string "name"
//   and an "arguments"; qwen3: no '>' closing <function=) is returned as
//   content, its own text only: the other calls stay calls (vLLM's hermes
//   turns the whole answer into content when one call is malformed, which a
//   stream cannot do once earlier calls are sent).
// - Streamed and whole answers agree by construction: extract_tool_calls
//   runs the stream over the whole text, so the streamed content pieces and
//   each call's argument pieces add up to the non-streamed answer.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace blockspec {

enum class ToolCallFormat { hermes, qwen3_coder, qwen3_xml };

// vLLM's parser name -> format; nullopt when blockspec has no such parser.
std::optional<ToolCallFormat> tool_call_format(const std::string& name);
constexpr const char* kToolCallParsers = "hermes, qwen3_coder, qwen3_xml";

// One streamed piece: content text (index < 0) or a part of tool call
// `index`: its first part carries the id and name (arguments "" then).
struct ToolCallDelta {
  std::string content;
  int index = -1;
  std::string id, name;
  std::string arguments;
};

class ToolCallStream {
 public:
  using IdFn = std::function<std::string()>;
  // tools: the request's `tools` array (the Qwen3 formats type their values by it).
  ToolCallStream(ToolCallFormat format, nlohmann::ordered_json tools, IdFn new_id);

  // Appends to `out` what is certain after `piece`; holds back text that may
  // still become part of a tag.
  void feed(const std::string& piece, std::vector<ToolCallDelta>& out);
  // The answer ended: releases what was held (an unclosed call is completed
  // as far as it goes).
  void finish(std::vector<ToolCallDelta>& out);
  int n_calls() const { return n_calls_; }

 private:
  void run(bool final, std::vector<ToolCallDelta>& out);
  bool step_content(bool final, std::vector<ToolCallDelta>& out);
  bool step_hermes(bool final, std::vector<ToolCallDelta>& out);
  bool step_qwen3(bool final, std::vector<ToolCallDelta>& out);
  bool step_param(bool final, std::vector<ToolCallDelta>& out);
  void emit_content(const std::string& text, std::vector<ToolCallDelta>& out);
  void emit_outside(std::string text, std::vector<ToolCallDelta>& out);
  void open_call(const std::string& name, std::vector<ToolCallDelta>& out);
  void emit_args(const std::string& piece, std::vector<ToolCallDelta>& out);
  void finish_param(const std::string& raw, std::vector<ToolCallDelta>& out);
  void stream_string_param(size_t end, std::vector<ToolCallDelta>& out);
  const nlohmann::ordered_json* param_schema(const std::string& param) const;

  ToolCallFormat format_;
  nlohmann::ordered_json tools_;
  IdFn new_id_;
  std::string buf_;      // every byte fed
  size_t pos_ = 0;       // buf_[0, pos_) is dealt with
  bool in_calls_ = false;  // past the first tool-call tag
  int n_calls_ = 0;
  // Qwen3 formats: the open function and parameter.
  bool fn_open_ = false, in_param_ = false, str_started_ = false;
  std::string fn_name_, param_name_;
  int n_params_ = 0;
  size_t value_start_ = 0;  // buf_ offset of the open parameter's raw value
  size_t str_sent_ = 0;     // bytes of a streamed string value already sent
};

struct ToolCall {
  std::string id, name, arguments;  // arguments: JSON text
};
struct ToolCallSplit {
  std::optional<std::string> content;  // nullopt: no content (JSON null)
  std::vector<ToolCall> calls;
};

// The whole answer at once (non-streaming); the same as the stream's pieces.
ToolCallSplit extract_tool_calls(ToolCallFormat format, const std::string& text, const nlohmann::ordered_json& tools,
                                 const ToolCallStream::IdFn& new_id);

}  // namespace blockspec
