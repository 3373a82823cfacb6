#include "server/openai_request.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/error.h"
#include "server/python_json.h"

namespace blockspec {

using json = nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& msg) { throw ApiError(400, msg, param); }

constexpr int64_t kMaxChoices = 128;  // n: each choice is an engine request with its own KV

// The field, or nullptr when absent or null (OpenAI treats null as "not given").
const json* field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number";
    default: return v.is_number() ? "an integer" : "null";
  }
}

double number(const json& j, const char* name, double def, double lo, double hi) {
  const json* v = field(j, name);
  if (!v) return def;
  if (!v->is_number()) bad(name, str_cat("'", name, "' must be a number, found ", type_name(*v)));
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    bad(name, str_cat("'", name, "' must be in [", lo, ", ", hi, "], found ", v->dump()));
  return x;
}

std::optional<int64_t> integer(const json& j, const char* name, int64_t lo, int64_t hi) {
  const json* v = field(j, name);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) bad(name, str_cat("'", name, "' must be an integer, found ", type_name(*v)));
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi))
    bad(name, str_cat("'", name, "' must be <= ", hi, ", found ", v->dump()));
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) bad(name, str_cat("'", name, "' must be in [", lo, ", ", hi, "], found ", x));
  return x;
}

bool boolean(const json& j, const char* name, bool def) {
  const json* v = field(j, name);
  if (!v) return def;
  if (!v->is_boolean()) bad(name, str_cat("'", name, "' must be a boolean, found ", type_name(*v)));
  return v->get<bool>();
}

std::vector<int32_t> id_list(const json& v, const std::string& name) {
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const json& x : v) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > std::numeric_limits<int32_t>::max())
      bad(name, str_cat("'", name, "' must be a list of non-negative token ids, found ", x.dump()));
    ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  return ids;
}

// Parameters this server does not implement: a clear 400 rather than an
// answer that silently ignores them. Values that mean "off" pass.
void reject_unsupported(const json& j, bool chat) {
  auto unsupported = [](const char* name, const std::string& why = "") {
    bad(name, str_cat("'", name, "' is not supported by this server", why));
  };
  if (const json* v = field(j, "best_of")) {
    if (!(v->is_number_integer() && v->get<int64_t>() == 1)) unsupported("best_of", " (only 1)");
  }
  if (const json* v = field(j, "logit_bias")) {
    if (!v->is_object()) bad("logit_bias", "'logit_bias' must be an object");
    if (!v->empty()) unsupported("logit_bias");
  }
  if (!chat) {
    if (const json* v = field(j, "tools")) {
      if (!v->is_array()) bad("tools", "'tools' must be an array");
      if (!v->empty()) bad("tools", "'tools' is a /v1/chat/completions parameter");
    }
    if (field(j, "tool_choice")) bad("tool_choice", "'tool_choice' is a /v1/chat/completions parameter");
  }
  if (field(j, "functions")) unsupported("functions");
  if (!chat) {
    if (boolean(j, "echo", false)) unsupported("echo");
    if (const json* v = field(j, "suffix")) {
      if (!(v->is_string() && v->get<std::string>().empty())) unsupported("suffix");
    }
  }
  if (integer(j, "min_tokens", 0, std::numeric_limits<int32_t>::max()).value_or(0) > 0) unsupported("min_tokens");
  if (number(j, "repetition_penalty", 1.0, 0.0, 1e9) != 1.0) unsupported("repetition_penalty", " (use presence_penalty / frequency_penalty)");
  if (number(j, "min_p", 0.0, 0.0, 1.0) != 0.0) unsupported("min_p");
}

}  // namespace

template <class J>
std::optional<GenRequest::Structured> structured_output(const J& j);

namespace {

void parse_sampling(const json& j, GenRequest& r, bool chat, const RequestDefaults& d) {
  if (!j.is_object()) bad("", "the request body must be a JSON object");
  reject_unsupported(j, chat);
  r.structured = structured_output(j);
  if (const json* m = field(j, "model")) {
    if (!m->is_string()) bad("model", "'model' must be a string");
    r.model = m->get<std::string>();
  }
  r.n = static_cast<int>(integer(j, "n", 1, kMaxChoices).value_or(1));
  SamplingParams& s = r.params.sampling;
  s.temperature = static_cast<float>(number(j, "temperature", d.temperature.value_or(1.f), 0.0, 100.0));
  s.top_p = static_cast<float>(number(j, "top_p", d.top_p.value_or(1.f), 0.0, 1.0));
  if (s.top_p <= 0.f) bad("top_p", "'top_p' must be in (0, 1], found 0");
  const int64_t top_k = integer(j, "top_k", -1, std::numeric_limits<int32_t>::max()).value_or(d.top_k.value_or(-1));
  s.top_k = top_k < 0 ? 0 : static_cast<int>(top_k);  // vLLM: -1 (or 0) = off
  if (const json* v = field(j, "seed")) {
    if (!v->is_number_integer()) bad("seed", str_cat("'seed' must be an integer, found ", type_name(*v)));
    s.seed = v->is_number_unsigned() ? v->get<uint64_t>() : static_cast<uint64_t>(v->get<int64_t>());
    r.has_seed = true;
  }
  const char* max_name = chat && field(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (const json* v = field(j, max_name)) {
    if (!v->is_number_integer()) bad(max_name, str_cat("'", max_name, "' must be an integer, found ", type_name(*v)));
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      bad(max_name, str_cat("'", max_name, "' is too large: ", v->dump()));
    const int64_t m = v->get<int64_t>();
    if (m <= 0) bad(max_name, str_cat("'", max_name, "' must be at least 1, found ", m));
    r.max_tokens = m;
  }
  if (const json* v = field(j, "stop")) {
    if (v->is_string()) {
      r.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      for (const json& x : *v) {
        if (!x.is_string()) bad("stop", "'stop' must be a string or a list of strings");
        r.stop.push_back(x.get<std::string>());
      }
    } else {
      bad("stop", str_cat("'stop' must be a string or a list of strings, found ", type_name(*v)));
    }
    for (const std::string& s : r.stop)
      if (s.empty()) bad("stop", "'stop' strings must not be empty");
  }
  if (const json* v = field(j, "stop_token_ids")) {
    if (!v->is_array()) bad("stop_token_ids", "'stop_token_ids' must be a list of token ids");
    r.params.stop_token_ids = id_list(*v, "stop_token_ids");
  }
  r.params.ignore_eos = boolean(j, "ignore_eos", false);
  if (!r.params.ignore_eos) {  // vLLM: generation_config.json's eos ids are stop tokens unless ignore_eos
    for (int32_t id : d.eos_token_ids)
      if (std::find(r.params.stop_token_ids.begin(), r.params.stop_token_ids.end(), id) == r.params.stop_token_ids.end())
        r.params.stop_token_ids.push_back(id);
  }
  r.default_max_tokens = d.max_tokens;
  // Logprobs: chat {"logprobs": true, "top_logprobs": n}; completions {"logprobs": n}.
  if (chat) {
    const bool lp = boolean(j, "logprobs", false);
    const std::optional<int64_t> top = integer(j, "top_logprobs", 0, std::numeric_limits<int32_t>::max());
    if (top && !lp) bad("top_logprobs", "when using 'top_logprobs', 'logprobs' must be set to true");
    r.params.n_logprobs = lp ? static_cast<int>(top.value_or(0)) : -1;
  } else {
    r.params.n_logprobs = static_cast<int>(integer(j, "logprobs", 0, std::numeric_limits<int32_t>::max()).value_or(-1));
  }
  r.params.presence_penalty = static_cast<float>(number(j, "presence_penalty", 0.0, -2.0, 2.0));
  r.params.frequency_penalty = static_cast<float>(number(j, "frequency_penalty", 0.0, -2.0, 2.0));
  r.skip_special_tokens = boolean(j, "skip_special_tokens", true);
  r.tokens_as_ids = boolean(j, "return_tokens_as_token_ids", false);
  r.stream = boolean(j, "stream", false);
  if (const json* v = field(j, "stream_options")) {
    if (!v->is_object()) bad("stream_options", "'stream_options' must be an object");
    if (!r.stream) bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
    r.include_usage = boolean(*v, "include_usage", false);
  }
}

// content: a string, or a list of {"type":"text","text":...} parts (joined
// with "\n" as vLLM does); null for an assistant message (then "", as vLLM
// renders an assistant message that only carries tool calls).
std::string message_content(const json& m, size_t i) {
  const std::string param = str_cat("messages[", i, "].content");
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array()) bad(param, str_cat("'", param, "' must be a string or a list of content parts"));
  std::string out;
  for (size_t p = 0; p < it->size(); ++p) {
    const json& part = (*it)[p];
    if (!part.is_object() || part.value("type", json()) != "text")
      bad(param, str_cat("'", param, "[", p, "]': only {\"type\": \"text\", \"text\": ...} parts are supported"));
    auto t = part.find("text");
    if (t == part.end() || !t->is_string()) bad(param, str_cat("'", param, "[", p, "].text' must be a string"));
    if (p) out += "\n";
    out += t->get<std::string>();
  }
  return out;
}

// An assistant message's tool_calls as tool-use templates expect them:
// arguments parsed into an object (vLLM's _postprocess_messages: a JSON
// string is loaded, null or "" becomes {}).
nlohmann::ordered_json message_tool_calls(const json& v, const std::string& param) {
  if (!v.is_array()) bad(param, str_cat("'", param, "' must be a list of tool calls"));
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (size_t k = 0; k < v.size(); ++k) {
    const std::string at = str_cat(param, "[", k, "]");
    const json& c = v[k];
    const json* f = c.is_object() ? field(c, "function") : nullptr;
    if (!f || !f->is_object()) bad(at, str_cat("'", at, "' must be an object with a 'function' object"));
    const json* name = field(*f, "name");
    if (!name || !name->is_string()) bad(at + ".function.name", str_cat("'", at, ".function.name' must be a string"));
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    if (const json* a = field(*f, "arguments")) {
      if (a->is_string()) {
        if (!a->get<std::string>().empty()) {
          auto parsed = py_json_loads(a->get<std::string>());
          if (!parsed) bad(at + ".function.arguments", str_cat("'", at, ".function.arguments' is not valid JSON"));
          args = *parsed;
        }
      } else if (a->is_object() || a->is_array()) {
        args = nlohmann::ordered_json::parse(a->dump());
      } else {
        bad(at + ".function.arguments", str_cat("'", at, ".function.arguments' must be a JSON string"));
      }
    }
    nlohmann::ordered_json call = nlohmann::ordered_json::object();
    if (const json* id = field(c, "id")) {
      if (!id->is_string()) bad(at + ".id", str_cat("'", at, ".id' must be a string"));
      call["id"] = id->get<std::string>();
    }
    call["type"] = "function";
    call["function"] = {{"name", name->get<std::string>()}, {"arguments", std::move(args)}};
    out.push_back(std::move(call));
  }
  return out;
}

std::vector<ChatMessage> parse_messages(const json& j) {
  const json* v = field(j, "messages");
  if (!v) bad("messages", "'messages' is required");
  if (!v->is_array()) bad("messages", "'messages' must be a list of messages");
  if (v->empty()) bad("messages", "'messages' must not be empty");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    if (!m.is_object()) bad(str_cat("messages[", i, "]"), str_cat("'messages[", i, "]' must be an object"));
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      bad(str_cat("messages[", i, "].role"), str_cat("'messages[", i, "].role' must be a string"));
    ChatMessage cm;
    cm.role = role->get<std::string>();
    if (cm.role == "developer") cm.role = "system";
    if (cm.role != "system" && cm.role != "user" && cm.role != "assistant" && cm.role != "tool")
      bad(str_cat("messages[", i, "].role"), str_cat("'messages[", i, "].role' must be system, user, assistant or tool, found ",
                                                  quote_for_message(cm.role)));
    if (const json* tc = field(m, "tool_calls")) {
      if (cm.role != "assistant") bad(str_cat("messages[", i, "].tool_calls"), "only assistant messages carry tool_calls");
      cm.tool_calls = message_tool_calls(*tc, str_cat("messages[", i, "].tool_calls"));
    }
    if (cm.role == "tool") {
      if (const json* id = field(m, "tool_call_id")) {
        if (!id->is_string()) bad(str_cat("messages[", i, "].tool_call_id"), "'tool_call_id' must be a string");
        cm.tool_call_id = id->get<std::string>();
      }
    }
    if (cm.role != "assistant" && (!m.contains("content") || m["content"].is_null()))
      bad(str_cat("messages[", i, "].content"), str_cat("'messages[", i, "].content' is required"));
    cm.content = message_content(m, i);
    if (auto rc = m.find("reasoning_content"); rc != m.end() && rc->is_string()) cm.reasoning_content = *rc;
    out.push_back(std::move(cm));
  }
  return out;
}

ChatTemplateOptions template_options(const json& j) {
  ChatTemplateOptions o;
  o.add_generation_prompt = boolean(j, "add_generation_prompt", true);
  if (const json* kw = field(j, "chat_template_kwargs")) {
    if (!kw->is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    for (auto it = kw->begin(); it != kw->end(); ++it) {
      if (it.key() == "enable_thinking") {
        if (!it->is_boolean()) bad("chat_template_kwargs", "'chat_template_kwargs.enable_thinking' must be a boolean");
        o.enable_thinking = it->get<bool>();
      } else if (it.key() == "add_generation_prompt") {
        if (!it->is_boolean()) bad("chat_template_kwargs", "'chat_template_kwargs.add_generation_prompt' must be a boolean");
        o.add_generation_prompt = it->get<bool>();
      } else {
        o.extra[it.key()] = nlohmann::ordered_json::parse(it->dump());
      }
    }
  }
  return o;
}

}  // namespace

std::string error_body(const std::string& message, const std::string& type, const std::string& param) {
  json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  return json{{"error", e}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

json parse_body(const std::string& body) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    // parse_error: bad syntax, ill-formed UTF-8, lone surrogates;
    // out_of_range: a number beyond double (1e999), found by fuzz_openai_request.
    bad("", str_cat("the request body is not valid JSON (or not valid UTF-8): ", e.what()));
  }
  if (!j.is_object()) bad("", "the request body must be a JSON object");
  return j;
}

GenRequest parse_completion_request(const json& j, const RequestDefaults& defaults) {
  GenRequest r;
  parse_sampling(j, r, /*chat=*/false, defaults);
  if (!r.max_tokens && !r.default_max_tokens) r.max_tokens = 16;  // OpenAI's and vLLM's completions default
  const json* p = field(j, "prompt");
  if (!p) bad("prompt", "'prompt' is required");
  // A list of one prompt is the same as the prompt ("prompt": ["text"] or [[ids]]).
  json one = *p;
  if (one.is_array() && !one.empty() && (one[0].is_string() || one[0].is_array())) {
    if (one.size() != 1) bad("prompt", "only one prompt per request is supported (use concurrent requests)");
    one = json(one[0]);
  }
  if (one.is_string()) {
    r.prompt_text = one.get<std::string>();
  } else if (one.is_array()) {
    r.prompt_ids = id_list(one, "prompt");
    if (r.prompt_ids.empty()) bad("prompt", "'prompt' must not be empty");
  } else {
    bad("prompt", "'prompt' must be a string, a list of token ids, or a list of one of those");
  }
  return r;
}

// The structured-output request, if any: response_format, guided_json /
// guided_regex / guided_choice, or structured_outputs {json, regex, choice,
// json_object}; at most one. J: json, or ordered_json for the schema's order.
template <class J>
std::optional<GenRequest::Structured> structured_output(const J& j) {
  std::optional<GenRequest::Structured> out;
  auto set = [&](GenRequest::Structured s) {
    if (out) bad(s.param, str_cat("'", s.param, "' and '", out->param, "' both constrain the output; give one"));
    out = std::move(s);
  };
  auto schema_of = [&](const J& v, const std::string& param) {
    GenRequest::Structured s{"json_schema", param, {}, {}, {}};
    if (v.is_string()) {  // vLLM takes a schema as JSON text too
      try {
        s.schema = nlohmann::ordered_json::parse(v.template get<std::string>());
      } catch (const std::exception&) {
        bad(param, str_cat("'", param, "' is a string that is not JSON"));
      }
    } else if (v.is_object() || v.is_boolean()) {
      s.schema = nlohmann::ordered_json::parse(v.dump());
    } else {
      bad(param, str_cat("'", param, "' must be a JSON schema object"));
    }
    return s;
  };
  auto has = [&](const J& o, const char* k) { auto it = o.find(k); return it != o.end() && !it->is_null(); };
  if (has(j, "response_format")) {
    const J& rf = j["response_format"];
    const std::string type = rf.is_object() && rf.contains("type") && rf["type"].is_string() ? rf["type"].template get<std::string>() : "";
    if (type == "json_object") {
      set({"json_object", "response_format", {}, {}, {}});
    } else if (type == "json_schema") {
      if (!rf.contains("json_schema") || !rf["json_schema"].is_object() || !rf["json_schema"].contains("schema"))
        bad("response_format", "'response_format' of type json_schema needs json_schema.schema");
      set(schema_of(rf["json_schema"]["schema"], "response_format"));
    } else if (type != "text") {
      bad("response_format", "'response_format.type' must be text, json_object or json_schema");
    }
  }
  if (has(j, "guided_json")) set(schema_of(j["guided_json"], "guided_json"));
  if (has(j, "guided_regex")) {
    if (!j["guided_regex"].is_string()) bad("guided_regex", "'guided_regex' must be a string");
    set({"regex", "guided_regex", {}, j["guided_regex"].template get<std::string>(), {}});
  }
  if (has(j, "guided_choice")) {
    GenRequest::Structured s{"choice", "guided_choice", {}, {}, {}};
    if (!j["guided_choice"].is_array() || j["guided_choice"].empty()) bad("guided_choice", "'guided_choice' must be a non-empty list of strings");
    for (const auto& c : j["guided_choice"]) {
      if (!c.is_string()) bad("guided_choice", "'guided_choice' must be a non-empty list of strings");
      s.choices.push_back(c.template get<std::string>());
    }
    set(std::move(s));
  }
  if (has(j, "structured_outputs")) {  // vLLM >= 0.10's spelling
    const J& so = j["structured_outputs"];
    if (!so.is_object()) bad("structured_outputs", "'structured_outputs' must be an object");
    if (has(so, "json")) set(schema_of(so["json"], "structured_outputs"));
    if (has(so, "regex") && so["regex"].is_string())
      set({"regex", "structured_outputs", {}, so["regex"].template get<std::string>(), {}});
    if (has(so, "choice") && so["choice"].is_array()) {
      GenRequest::Structured s{"choice", "structured_outputs", {}, {}, {}};
      for (const auto& c : so["choice"])
        if (c.is_string()) s.choices.push_back(c.template get<std::string>());
      set(std::move(s));
    }
    if (has(so, "json_object") && so["json_object"].is_boolean() && so["json_object"].template get<bool>())
      set({"json_object", "structured_outputs", {}, {}, {}});
    for (const char* k : {"grammar", "structural_tag"})
      if (has(so, k)) bad("structured_outputs", str_cat("'structured_outputs.", k, "' is not supported (json, regex, choice, json_object are)"));
  }
  for (const char* k : {"guided_grammar", "guided_decoding_backend"})
    if (has(j, k)) bad(k, str_cat("'", k, "' is not supported (guided_json, guided_regex, guided_choice are)"));
  return out;
}

template <class J>
nlohmann::ordered_json normalized_tools(const J& j) {
  auto it = j.find("tools");
  if (it == j.end() || it->is_null()) return nullptr;
  if (!it->is_array()) bad("tools", "'tools' must be a list of tools");
  if (it->empty()) return nullptr;
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (size_t i = 0; i < it->size(); ++i) {
    const std::string at = str_cat("tools[", i, "]");
    const auto& t = (*it)[i];
    if (!t.is_object()) bad(at, str_cat("'", at, "' must be an object"));
    if (t.contains("type") && t["type"] != "function")
      bad(at + ".type", str_cat("'", at, ".type' must be \"function\", found ", t["type"].dump()));
    if (!t.contains("function") || !t["function"].is_object())
      bad(at + ".function", str_cat("'", at, ".function' must be an object"));
    const auto& f = t["function"];
    if (!f.contains("name") || !f["name"].is_string() || f["name"].template get<std::string>().empty())
      bad(at + ".function.name", str_cat("'", at, ".function.name' must be a non-empty string"));
    if (f.contains("description") && !f["description"].is_null() && !f["description"].is_string())
      bad(at + ".function.description", str_cat("'", at, ".function.description' must be a string"));
    if (f.contains("parameters") && !f["parameters"].is_null() && !f["parameters"].is_object())
      bad(at + ".function.parameters", str_cat("'", at, ".function.parameters' must be a JSON schema object"));
    // As vLLM renders them (the pydantic model's dump): type, then the
    // function's name, description, parameters (null when not given), then
    // any other keys the client sent, in its order.
    nlohmann::ordered_json fn = {{"name", f["name"]},
                                 {"description", f.contains("description") ? f["description"] : nullptr},
                                 {"parameters", f.contains("parameters") ? f["parameters"] : nullptr}};
    for (auto kv = f.begin(); kv != f.end(); ++kv)
      if (!fn.contains(kv.key())) fn[kv.key()] = nlohmann::ordered_json::parse(kv->dump());
    fn["parameters"] = nlohmann::ordered_json::parse(fn["parameters"].dump());
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

// tool_choice "required" and named functions are forced as vLLM forces them,
// by structured output: a named function's output is its arguments (the
// function's parameters schema); "required" outputs a JSON array of
// {"name", "parameters"} objects, at least one, each for one of the tools.
void force_tool_schema(GenRequest& r) {
  auto params = [](const nlohmann::ordered_json& f) {
    return f.contains("parameters") && f["parameters"].is_object() ? f["parameters"]
                                                                    : nlohmann::ordered_json{{"type", "object"}};
  };
  GenRequest::Structured s{"json_schema", "tool_choice", {}, {}, {}};
  if (r.tool_choice == "required") {
    nlohmann::ordered_json any = nlohmann::ordered_json::array();
    for (const auto& t : r.tools) {
      const auto& f = t["function"];
      any.push_back({{"type", "object"},
                     {"properties", {{"name", {{"enum", {f["name"]}}}}, {"parameters", params(f)}}},
                     {"required", {"name", "parameters"}}});
    }
    s.schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", any}}}};
  } else {
    for (const auto& t : r.tools)
      if (t["function"]["name"] == r.tool_choice.substr(9)) s.schema = params(t["function"]);
  }
  r.structured = std::move(s);
}

// tool_choice: "none", "auto" (the default with tools), "required" or
// {"type": "function", "function": {"name": ...}}.
void parse_tool_choice(const json& j, GenRequest& r) {
  r.tool_choice = r.tools.is_null() ? "none" : "auto";
  if (const json* v = field(j, "tool_choice")) {
    if (v->is_string() && (*v == "none" || *v == "auto" || *v == "required")) {
      r.tool_choice = v->get<std::string>();
    } else if (v->is_object() && field(*v, "function") && (*v)["function"].is_object() &&
               field((*v)["function"], "name") && (*v)["function"]["name"].is_string()) {
      r.tool_choice = "function:" + (*v)["function"]["name"].get<std::string>();
    } else {
      bad("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                         "\"function\": {\"name\": ...}}");
    }
  }
  if (r.tool_choice != "none" && r.tools.is_null())
    bad("tool_choice", str_cat("'tool_choice' is ", quote_for_message(r.tool_choice), " but the request has no 'tools'"));
  if (r.tool_choice.rfind("function:", 0) == 0) {
    const std::string name = r.tool_choice.substr(9);
    bool found = false;
    for (const auto& t : r.tools) found = found || t["function"]["name"] == name;
    if (!found)
      bad("tool_choice", str_cat("'tool_choice' names the function ", quote_for_message(name), ", which is not in 'tools'"));
  }
  if (r.tool_choice == "required" || r.tool_choice.rfind("function:", 0) == 0) {
    if (r.structured) bad("tool_choice", str_cat("'tool_choice' ", quote_for_message(r.tool_choice), " and '",
                                               r.structured->param, "' both constrain the output; give one"));
    force_tool_schema(r);
  }
  r.parallel_tool_calls = boolean(j, "parallel_tool_calls", true);
}

GenRequest parse_chat_request(const json& j, const RequestDefaults& defaults) {
  GenRequest r;
  r.chat = true;
  parse_sampling(j, r, /*chat=*/true, defaults);
  r.messages = parse_messages(j);
  r.template_opts = template_options(j);
  r.tools = normalized_tools(j);
  parse_tool_choice(j, r);
  r.template_opts.tools = r.tools;
  return r;
}

void keep_client_order(GenRequest& r, const std::string& body) {
  if (r.tools.is_null() && !(r.structured && r.structured->kind == "json_schema")) return;
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(body);
  if (!r.tools.is_null()) {
    r.tools = normalized_tools(ordered);
    r.template_opts.tools = r.tools;
  }
  if (r.structured && r.structured->param == "tool_choice") force_tool_schema(r);  // from the tools in order
  else if (r.structured && r.structured->kind == "json_schema") r.structured = structured_output(ordered);
}

void resolve_max_tokens(GenRequest& r, int64_t n_prompt, int64_t max_model_len) {
  if (n_prompt <= 0) bad(r.chat ? "messages" : "prompt", "the prompt is empty");
  if (n_prompt >= max_model_len)
    bad(r.chat ? "messages" : "prompt",
        str_cat("the prompt is ", n_prompt, " tokens but this model's maximum context length is ", max_model_len,
                " tokens; shorten the prompt"));
  const int64_t room = max_model_len - n_prompt;
  if (!r.max_tokens) r.max_tokens = std::min(room, r.default_max_tokens.value_or(room));
  if (*r.max_tokens > room)
    bad("max_tokens", str_cat("this model's maximum context length is ", max_model_len, " tokens; the prompt is ",
                              n_prompt, " tokens and max_tokens is ", *r.max_tokens, " (at most ", room,
                              " fit); lower max_tokens or shorten the prompt"));
  r.params.max_tokens = *r.max_tokens;
}

TokenizeRequest parse_tokenize_request(const json& j) {
  TokenizeRequest t;
  if (field(j, "messages")) {
    t.messages = parse_messages(j);
    t.template_opts = template_options(j);
    t.template_opts.tools = normalized_tools(j);
    t.add_special_tokens = boolean(j, "add_special_tokens", false);
  } else if (const json* p = field(j, "prompt")) {
    if (!p->is_string()) bad("prompt", "'prompt' must be a string");
    t.prompt = p->get<std::string>();
    t.add_special_tokens = boolean(j, "add_special_tokens", true);
  } else {
    bad("prompt", "either 'prompt' or 'messages' is required");
  }
  return t;
}

std::vector<int32_t> parse_detokenize_request(const json& j) {
  const json* v = field(j, "tokens");
  if (!v || !v->is_array()) bad("tokens", "'tokens' must be a list of token ids");
  return id_list(*v, "tokens");
}

void check_token_ids(const std::vector<int32_t>& ids, int64_t vocab, const std::string& param) {
  for (int32_t id : ids)
    if (id < 0 || id >= vocab) bad(param, str_cat("token id ", id, " is out of range [0, ", vocab, ")"));
}

}  // namespace blockspec
