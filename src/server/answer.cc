#include "server/answer.h"

#include <algorithm>

#include "server/python_json.h"
#include "server/server_impl.h"
#include "tokenizer/unicode_text.h"

namespace blockspec {

using json = nlohmann::json;

namespace {

json finish_json(const std::string& reason) { return reason.empty() ? json(nullptr) : json(reason); }

// A token as logprobs show it (vLLM: tokenizer.decode([id]), special tokens
// included, bytes that are not valid UTF-8 on their own as U+FFFD).
std::string token_text(const Tokenizer& tz, int32_t id, bool as_id) {
  if (as_id) return "token_id:" + std::to_string(id);
  std::string out;
  tok::append_utf8_lossy(tz.decode({id}), /*final=*/true, &out);
  return out;
}

float floor_lp(float lp) { return std::max(lp, -9999.0f); }  // vLLM's floor: JSON has no -inf

json token_entry(const Tokenizer& tz, int32_t id, float lp, bool as_id) {
  const std::string t = token_text(tz, id, as_id);
  return {{"token", t}, {"logprob", floor_lp(lp)}, {"bytes", std::vector<int>(t.begin(), t.end())}};
}

int64_t n_chars(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

json tool_call_json(const ToolCall& c) {
  return {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

// One choice of a non-streaming answer.
json full_choice(Answer& a, Choice& c) {
  const AnswerStyle& s = a.style;
  json choice = {{"index", c.index}};
  std::string finish = c.gen->finish_reason();
  if (a.reply.chat) {
    std::optional<std::string> content = c.text, reasoning;
    if (s.thinking) {
      const ReasoningSplit sp = split_reasoning(c.text, s.thinking_enabled);
      content = sp.content;
      reasoning = sp.reasoning;
    }
    json calls = json::array();
    if (!s.forced_tool.empty()) {
      const std::vector<ToolCall> forced = forced_tool_calls(s, content.value_or(""));
      for (const ToolCall& call : forced) calls.push_back(tool_call_json(call));
      if (!forced.empty()) {
        content = "";  // vLLM's message for forced tool calls
        if (s.forced_tool == "required") finish = "tool_calls";
      }
    } else if (s.tool_format) {
      ToolCallSplit tc = extract_tool_calls(*s.tool_format, content.value_or(""), s.tools, s.new_tool_id);
      if (!s.parallel_tool_calls && tc.calls.size() > 1) tc.calls.resize(1);
      for (const ToolCall& call : tc.calls) calls.push_back(tool_call_json(call));
      if (content) content = tc.content;
      if (!tc.calls.empty()) finish = "tool_calls";  // vLLM's finish_reason when auto tool calls were made
    }
    choice["message"] = {{"role", "assistant"}, {"content", content ? json(*content) : json(nullptr)}};
    if (s.thinking) choice["message"]["reasoning_content"] = reasoning ? json(*reasoning) : json(nullptr);
    choice["message"]["tool_calls"] = calls;
  } else {
    choice["text"] = c.text;
  }
  choice["logprobs"] = s.n_logprobs >= 0 ? logprobs_json(a, c, 0, c.gen->tokens().size()) : json(nullptr);
  choice["finish_reason"] = finish;
  return choice;
}

}  // namespace

json answer_base(const AnswerHead& r) {
  return {{"id", r.id}, {"object", r.object}, {"created", r.created}, {"model", r.model}};
}

json usage_json(const Answer& a) {
  // vLLM: the prompt counted once, the completions of every choice summed.
  const int64_t prompt = a.choices.empty() ? 0 : a.choices[0].gen->prompt_tokens();
  int64_t completion = 0;
  for (const Choice& c : a.choices) completion += c.gen->completion_tokens();
  const int64_t cached = a.choices.empty() ? 0 : a.choices[0].gen->cached_tokens();
  return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

std::string sse_chunk(const AnswerHead& r, int index, const ChunkParts& p, bool usage_null) {
  json c = answer_base(r);
  json choice = {{"index", index}};
  if (r.chat) {
    json delta = json::object();
    if (p.role) delta["role"] = "assistant";
    if (p.reasoning) delta["reasoning_content"] = *p.reasoning;
    if (p.text) delta["content"] = *p.text;
    if (p.tool_calls) delta["tool_calls"] = *p.tool_calls;
    choice["delta"] = delta;
  } else {
    choice["text"] = p.text ? *p.text : "";
  }
  choice["logprobs"] = p.logprobs ? *p.logprobs : json(nullptr);
  choice["finish_reason"] = finish_json(p.finish);
  c["choices"] = json::array({choice});
  if (usage_null) c["usage"] = nullptr;
  return "data: " + dump_json(c) + "\n\n";
}

json full_answer(Answer& a) {
  json out = answer_base(a.reply);
  out["choices"] = json::array();
  for (Choice& c : a.choices) out["choices"].push_back(full_choice(a, c));
  out["usage"] = usage_json(a);
  return out;
}

// Chat {"content": [{token, logprob, bytes, top_logprobs}]}; completions
// {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}.
json logprobs_json(const Answer& a, Choice& c, size_t from, size_t to) {
  const Tokenizer& tz = *a.model->tokenizer;
  const bool as_id = a.style.tokens_as_ids;
  const std::vector<int32_t>& ids = c.gen->tokens();
  const std::vector<TokenLogprob>& lps = c.gen->logprobs();
  to = std::min({to, ids.size(), lps.size()});
  if (a.reply.chat) {
    json content = json::array();
    for (size_t i = from; i < to; ++i) {
      json e = token_entry(tz, ids[i], lps[i].logprob, as_id);
      json top = json::array();
      for (const auto& [id, lp] : lps[i].top) top.push_back(token_entry(tz, id, lp, as_id));
      e["top_logprobs"] = std::move(top);
      content.push_back(std::move(e));
    }
    return {{"content", std::move(content)}};
  }
  json tokens = json::array(), token_lps = json::array(), tops = json::array(), offsets = json::array();
  for (size_t i = from; i < to; ++i) {
    const std::string t = token_text(tz, ids[i], as_id);
    tokens.push_back(t);
    token_lps.push_back(floor_lp(lps[i].logprob));
    json top = json::object();  // the top n and the chosen token, as OpenAI's legacy completions
    for (const auto& [id, lp] : lps[i].top) top[token_text(tz, id, as_id)] = floor_lp(lp);
    top[t] = floor_lp(lps[i].logprob);
    tops.push_back(std::move(top));
    offsets.push_back(c.text_offset);
    c.text_offset += n_chars(t);
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json tool_call_delta_json(const ToolCallDelta& d) {
  json call = {{"index", d.index}};
  if (!d.id.empty()) {
    call["id"] = d.id;
    call["type"] = "function";
    call["function"] = {{"name", d.name}, {"arguments", d.arguments}};
  } else {
    call["function"] = {{"arguments", d.arguments}};
  }
  return call;
}

std::vector<ToolCall> forced_tool_calls(const AnswerStyle& s, const std::string& text) {
  std::vector<ToolCall> out;
  if (s.forced_tool != "required") {
    out.push_back({s.new_tool_id(), s.forced_tool, text});
    return out;
  }
  const std::optional<nlohmann::ordered_json> v = py_json_loads(text);
  if (!v || !v->is_array()) return out;
  for (const auto& e : *v) {
    if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("parameters")) return {};
    out.push_back({s.new_tool_id(), e["name"].get<std::string>(), py_dumps(e["parameters"])});
  }
  return out;
}

}  // namespace blockspec
