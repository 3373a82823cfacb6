// A model's own Jinja chat template, rendered the way HF's
// tokenizer.apply_chat_template(messages, tokenize=False, ...) renders it:
// variables messages, tools (None unless given), documents (None),
// add_generation_prompt, the special tokens given here, then every extra
// keyword argument (enable_thinking among them).
//
// The Jinja subset (see jinja_*.h): {{ }}, {% %}, {# #}, whitespace control,
// trim_blocks/lstrip_blocks, if/elif/else, for (loop.*, else, break, continue,
// inline if filter, tuple unpacking), set (names, tuples, ns.attr, blocks),
// macros, raw, generation; filters and tests that chat templates use; str and
// dict methods; raise_exception, namespace, dict, range, strftime_now.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/jinja_ast.h"

namespace blockspec {

struct ChatMessage {
  std::string role;
  std::string content;
  std::string reasoning_content;  // empty: the message has no reasoning_content key
  // An assistant message's tool calls, [{"id", "type", "function": {"name",
  // "arguments": {...}}}] with arguments as an object (what tool-use
  // templates expect); null: no tool_calls key.
  nlohmann::ordered_json tool_calls;
  std::string tool_call_id;  // a "tool" message: the call it answers (empty: no key)
};

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  std::optional<bool> enable_thinking;  // absent: the variable is undefined in the template
  std::string bos_token, eos_token;     // empty: undefined in the template
  nlohmann::ordered_json tools;         // null: tools is None
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // other template kwargs
};

class ChatTemplate {
 public:
  // Parses `source`; a syntax error throws Error naming `what`, line and column.
  ChatTemplate(const std::string& source, const std::string& what);

  std::string apply(const std::vector<ChatMessage>& messages, const ChatTemplateOptions& opts) const;
  // Messages as JSON objects (role, content, reasoning_content, tool_calls, ...).
  std::string apply_json(const nlohmann::ordered_json& messages, const ChatTemplateOptions& opts) const;

  const std::string& what() const { return what_; }

 private:
  std::string what_;
  jinja::Body body_;
};

}  // namespace blockspec
