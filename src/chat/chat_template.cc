#include "chat/chat_template.h"

#include "base/error.h"
#include "chat/jinja_render.h"

namespace blockspec {

using nlohmann::ordered_json;

ChatTemplate::ChatTemplate(const std::string& source, const std::string& what)
    : what_(what), body_(jinja::parse_template(source, what)) {}

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages, const ChatTemplateOptions& opts) const {
  ordered_json list = ordered_json::array();
  for (const auto& m : messages) {
    ordered_json j = {{"role", m.role}, {"content", m.content}};
    if (!m.reasoning_content.empty()) j["reasoning_content"] = m.reasoning_content;
    if (!m.tool_calls.is_null()) j["tool_calls"] = m.tool_calls;
    if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
    list.push_back(std::move(j));
  }
  return apply_json(list, opts);
}

// HF's _alias_reasoning_fields: reasoning given as reasoning_content,
// thinking or reasoning is visible under "thinking" (first key) and
// "reasoning_content" (last key).
static ordered_json alias_reasoning(const ordered_json& m) {
  if (!m.is_object()) return m;
  for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
    auto it = m.find(key);
    if (it == m.end() || it->is_null()) continue;
    ordered_json out = {{"thinking", *it}};
    for (const auto& [k, v] : m.items()) out[k] = v;
    out.erase("reasoning_content");
    out["reasoning_content"] = *it;
    return out;
  }
  return m;
}

std::string ChatTemplate::apply_json(const ordered_json& messages, const ChatTemplateOptions& opts) const {
  if (!messages.is_array()) fail(what_, ": messages must be a JSON array, got ", messages.type_name());
  // As tokenizer.apply_chat_template does before rendering.
  if (messages.empty()) fail(what_, ": cannot apply a chat template to an empty conversation; give at least one message");
  ordered_json aliased = ordered_json::array();
  for (const auto& m : messages) {
    if (!m.is_object()) fail(what_, ": each chat message must be a JSON object, got ", m.type_name());
    aliased.push_back(alias_reasoning(m));
  }
  using jinja::Value;
  jinja::ValueDict vars = {{"messages", Value::from_json(aliased)},
                           {"tools", Value::from_json(opts.tools)},
                           {"documents", Value::none()},
                           {"add_generation_prompt", Value(opts.add_generation_prompt)}};
  if (!opts.bos_token.empty()) vars.emplace_back("bos_token", Value(opts.bos_token));
  if (!opts.eos_token.empty()) vars.emplace_back("eos_token", Value(opts.eos_token));
  if (opts.enable_thinking) vars.emplace_back("enable_thinking", Value(*opts.enable_thinking));
  if (!opts.extra.is_null() && !opts.extra.is_object())
    fail(what_, ": extra template arguments must be a JSON object, got ", opts.extra.type_name());
  if (opts.extra.is_object())
    for (const auto& [k, v] : opts.extra.items()) vars.emplace_back(k, Value::from_json(v));
  return jinja::render_template(body_, vars, what_);
}

}  // namespace blockspec
