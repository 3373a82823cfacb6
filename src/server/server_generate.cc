// POST /v1/completions and /v1/chat/completions: one JSON answer, or SSE
// chunks ("data: {json}\n\n" ... "data: [DONE]\n\n") as tokens arrive.
//
// Both kinds are answered by a chunked content provider, so the handler
// thread watches the connection while the engine generates: a client that
// hangs up has its engine request cancelled (KV pages freed) within a poll
// (kPoll), not when generation ends. cpp-httplib 0.11 tells us through
// DataSink::is_writable(), which peeks the socket for EOF / reset; a JSON
// answer that takes longer than heartbeat_ms is preceded by single spaces
// (leading whitespace is valid JSON), an SSE stream gets comment lines.
// Errors found before generation starts keep their status (400, 503, ...);
// the 200 is only committed once the engine has the request.
#include <chrono>

#include "base/error.h"
#include "server/generation.h"
#include "server/reasoning.h"
#include "server/tool_calls.h"
#include "tokenizer/unicode_text.h"
#include "server/server_impl.h"

namespace blockspec {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// The fields every response and chunk of one request share.
struct AnswerHead {
  std::string id, object, model;
  std::time_t created;
  bool chat;
};

// Request state kept alive by the content provider after the handler returns.
struct Answer {
  std::shared_ptr<ServedModel> model;  // keeps the engine alive while we answer
  std::unique_ptr<Generation> gen;
  AnswerHead reply;
  bool include_usage = false;
  bool role_sent = false, counted = false;
  std::string text;  // non-streaming: the whole answer so far
  // --reasoning-parser on a chat request: the split, and whether thinking is on.
  std::optional<ReasoningStream> think;
  bool thinking_enabled = true;
  // --tool-call-parser on a chat request with tools and tool_choice "auto".
  std::optional<ToolCallFormat> tool_format;
  nlohmann::ordered_json tools;
  std::optional<ToolCallStream> tool_stream;  // streaming: the split as pieces arrive
  bool parallel_tool_calls = true;
  std::function<std::string()> new_tool_id;
  int n_logprobs = -1;       // the request's logprobs (-1: none)
  bool tokens_as_ids = false;  // logprobs name tokens "token_id:N"
  size_t logprobs_sent = 0;  // streaming: tokens whose logprobs went out
  int64_t text_offset = 0;   // completions: characters of the tokens before them
  Clock::time_point last_write = Clock::now();
};

namespace {

constexpr std::chrono::milliseconds kPoll{50};

json usage_json(const Generation& g) {
  return {{"prompt_tokens", g.prompt_tokens()},
          {"completion_tokens", g.completion_tokens()},
          {"total_tokens", g.prompt_tokens() + g.completion_tokens()}};
}

json finish_json(const std::string& reason) { return reason.empty() ? json(nullptr) : json(reason); }

// A token as logprobs show it (vLLM: tokenizer.decode([id]), special tokens
// included, bytes that are not valid UTF-8 on their own as U+FFFD).
std::string token_text(const Tokenizer& tz, int32_t id, bool as_id = false) {
  if (as_id) return "token_id:" + std::to_string(id);
  std::string out;
  tok::append_utf8_lossy(tz.decode({id}), /*final=*/true, &out);
  return out;
}

json token_entry(const Tokenizer& tok, int32_t id, float lp, bool as_id) {
  const std::string t = token_text(tok, id, as_id);
  return {{"token", t}, {"logprob", std::max(lp, -9999.0f)},  // vLLM's floor: JSON has no -inf
          {"bytes", std::vector<int>(t.begin(), t.end())}};
}

int64_t n_chars(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// The logprobs of generated tokens [from, to) in the API's shape: chat
// {"content": [{token, logprob, bytes, top_logprobs}]}, completions
// {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}.
json logprobs_json(Answer& st, size_t from, size_t to) {
  const Tokenizer& tok = *st.model->tokenizer;
  const std::vector<int32_t>& ids = st.gen->tokens();
  const std::vector<TokenLogprob>& lps = st.gen->logprobs();
  to = std::min({to, ids.size(), lps.size()});
  if (st.reply.chat) {
    json content = json::array();
    for (size_t i = from; i < to; ++i) {
      json e = token_entry(tok, ids[i], lps[i].logprob, st.tokens_as_ids);
      json top = json::array();
      for (const auto& [id, lp] : lps[i].top) top.push_back(token_entry(tok, id, lp, st.tokens_as_ids));
      e["top_logprobs"] = std::move(top);
      content.push_back(std::move(e));
    }
    return {{"content", std::move(content)}};
  }
  json tokens = json::array(), token_lps = json::array(), tops = json::array(), offsets = json::array();
  for (size_t i = from; i < to; ++i) {
    const std::string t = token_text(tok, ids[i], st.tokens_as_ids);
    tokens.push_back(t);
    token_lps.push_back(std::max(lps[i].logprob, -9999.0f));
    json top = json::object();  // the top n and the chosen token, as OpenAI's legacy completions
    for (const auto& [id, lp] : lps[i].top) top[token_text(tok, id, st.tokens_as_ids)] = std::max(lp, -9999.0f);
    top[t] = std::max(lps[i].logprob, -9999.0f);
    tops.push_back(std::move(top));
    offsets.push_back(st.text_offset);
    st.text_offset += n_chars(t);
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json base(const AnswerHead& r) { return {{"id", r.id}, {"object", r.object}, {"created", r.created}, {"model", r.model}}; }

// One SSE chunk; finish: "" while streaming; reasoning: a chat delta's
// reasoning_content; tool_calls: a chat delta's tool_calls.
std::string chunk(const AnswerHead& r, const std::string* text, bool role, const std::string& finish, bool usage_null,
                  const std::string* reasoning = nullptr, const json* tool_calls = nullptr,
                  const json* logprobs = nullptr) {
  json c = base(r);
  json choice = {{"index", 0}};
  if (r.chat) {
    json delta = json::object();
    if (role) delta["role"] = "assistant";
    if (reasoning) delta["reasoning_content"] = *reasoning;
    if (text) delta["content"] = *text;
    if (tool_calls) delta["tool_calls"] = *tool_calls;
    choice["delta"] = delta;
  } else {
    choice["text"] = text ? *text : "";
  }
  choice["logprobs"] = logprobs ? *logprobs : json(nullptr);
  choice["finish_reason"] = finish_json(finish);
  c["choices"] = json::array({choice});
  if (usage_null) c["usage"] = nullptr;
  return "data: " + dump_json(c) + "\n\n";
}

// A tool call as the API writes it (message.tool_calls[i]).
json tool_call_json(const ToolCall& c) {
  return {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

// The one JSON answer of a non-streaming request.
json full_answer(Answer& st) {
  const Generation& g = *st.gen;
  json choice = {{"index", 0}};
  std::string finish = g.finish_reason();
  if (st.reply.chat) {
    std::optional<std::string> content = st.text, reasoning;
    if (st.think) {
      const ReasoningSplit sp = split_reasoning(st.text, st.thinking_enabled);
      content = sp.content;
      reasoning = sp.reasoning;
    }
    json calls = json::array();
    if (st.tool_format) {
      ToolCallSplit tc = extract_tool_calls(*st.tool_format, content.value_or(""), st.tools, st.new_tool_id);
      if (!st.parallel_tool_calls && tc.calls.size() > 1) tc.calls.resize(1);
      for (const ToolCall& c : tc.calls) calls.push_back(tool_call_json(c));
      if (content) content = tc.content;
      if (!tc.calls.empty()) finish = "tool_calls";  // vLLM: auto tool calls end the turn so
    }
    choice["message"] = {{"role", "assistant"}, {"content", content ? json(*content) : json(nullptr)}};
    if (st.think) choice["message"]["reasoning_content"] = reasoning ? json(*reasoning) : json(nullptr);
    choice["message"]["tool_calls"] = calls;
  } else {
    choice["text"] = st.text;
  }
  choice["logprobs"] = st.n_logprobs >= 0 ? logprobs_json(st, 0, g.tokens().size()) : json(nullptr);
  choice["finish_reason"] = finish;
  json out = base(st.reply);
  out["choices"] = json::array({choice});
  out["usage"] = usage_json(g);
  return out;
}

// The error body of a generation that ended without an answer.
std::string failure_body(const Generation& g) {
  if (g.finish_reason() == "error")
    return error_body("generation failed: " + (g.error().empty() ? std::string("engine error") : g.error()),
                      "server_error", "");
  return error_body("the request was cancelled: the server is shutting down", "server_error", "");
}

// Writes one piece of the answer; false when the connection is broken.
bool send(Answer& st, httplib::DataSink& sink, const std::string& s) {
  st.last_write = Clock::now();
  return sink.write(s.data(), s.size());
}

}  // namespace

// The client is gone (or we are stopping): free the engine request now.
bool Server::Impl::hang_up(Answer& st) {
  // Counted before the engine hears of it, so a client that sees the engine
  // idle also sees the abort counted.
  if (!st.counted) count_finished("abort");
  st.counted = true;
  st.gen->cancel();
  return false;
}

// While generating: false when the client has gone (the caller hangs up).
bool Server::Impl::still_there(Answer& st, httplib::DataSink& sink, const std::string& keep_alive) {
  if (Clock::now() - st.last_write > std::chrono::milliseconds(opts.heartbeat_ms) && !send(st, sink, keep_alive))
    return false;
  return sink.is_writable();
}

// One call of a non-streaming request's content provider (see the top).
bool Server::Impl::json_step(Answer& st, httplib::DataSink& sink) {
  if (stopping.load()) return hang_up(st);
  if (!st.gen->poll(st.text, kPoll)) return still_there(st, sink, " ") || hang_up(st);
  const Generation& g = *st.gen;
  st.counted = true;
  count_finished(g.finish_reason());
  if (g.finish_reason() == "error" || g.finish_reason() == "abort") {
    // The 200 is out: say what failed, then end the connection without the
    // last chunk, so a client fails (the openai client retries and meets
    // the 503 of a stopped engine) instead of taking this for an answer.
    send(st, sink, failure_body(g));
    return false;
  }
  send(st, sink, dump_json(full_answer(st)));
  sink.done();
  return true;
}

// One call of a streaming request's content provider.
bool Server::Impl::sse_step(Answer& st, httplib::DataSink& sink) {
  if (stopping.load()) return hang_up(st);
  const AnswerHead& rp = st.reply;
  if (rp.chat && !st.role_sent) {
    st.role_sent = true;
    const std::string empty;
    if (!send(st, sink, chunk(rp, &empty, true, "", st.include_usage))) return hang_up(st);
  }
  std::string delta;
  const bool fin = st.gen->poll(delta, kPoll);
  // The logprobs of tokens not yet sent ride on the next chunk that goes out.
  json lp_buf;
  auto lp_now = [&]() -> const json* {
    const size_t n = st.gen->logprobs().size();
    if (st.n_logprobs < 0 || n <= st.logprobs_sent) return nullptr;
    lp_buf = logprobs_json(st, st.logprobs_sent, n);
    st.logprobs_sent = n;
    return &lp_buf;
  };
  if (st.think) {  // reasoning_content and content deltas
    std::string reasoning, content;
    st.think->feed(delta, reasoning, content);
    if (fin) st.think->finish(reasoning, content);
    if (!reasoning.empty() &&
        !send(st, sink, chunk(rp, nullptr, false, "", st.include_usage, &reasoning, nullptr, lp_now())))
      return hang_up(st);
    delta = content;
  }
  if (st.tool_stream) {  // content and tool_calls deltas
    std::vector<ToolCallDelta> pieces;
    st.tool_stream->feed(delta, pieces);
    if (fin) st.tool_stream->finish(pieces);
    delta.clear();
    for (const ToolCallDelta& d : pieces) {
      if (d.index < 0) {
        if (!send(st, sink, chunk(rp, &d.content, false, "", st.include_usage, nullptr, nullptr, lp_now())))
          return hang_up(st);
        continue;
      }
      if (d.index > 0 && !st.parallel_tool_calls) continue;
      json call = {{"index", d.index}};
      if (!d.id.empty()) {
        call["id"] = d.id;
        call["type"] = "function";
        call["function"] = {{"name", d.name}, {"arguments", d.arguments}};
      } else {
        call["function"] = {{"arguments", d.arguments}};
      }
      const json calls = json::array({call});
      if (!send(st, sink, chunk(rp, nullptr, false, "", st.include_usage, nullptr, &calls, lp_now()))) return hang_up(st);
    }
  }
  if (!delta.empty() && !send(st, sink, chunk(rp, &delta, false, "", st.include_usage, nullptr, nullptr, lp_now())))
    return hang_up(st);
  if (!fin) return still_there(st, sink, ": keep-alive\n\n") || hang_up(st);
  const Generation& g = *st.gen;
  st.counted = true;
  count_finished(g.finish_reason());
  if (g.finish_reason() == "error" || g.finish_reason() == "abort") {
    send(st, sink, "data: " + failure_body(g) + "\n\n");
  } else {
    const bool called = st.tool_stream && st.tool_stream->n_calls() > 0;
    if (!send(st, sink,
              chunk(rp, nullptr, false, called ? "tool_calls" : g.finish_reason(), st.include_usage, nullptr, nullptr,
                    lp_now())))
      return false;
    if (st.include_usage) {
      json u = base(rp);
      u["choices"] = json::array();
      u["usage"] = usage_json(g);
      if (!send(st, sink, "data: " + dump_json(u) + "\n\n")) return false;
    }
  }
  send(st, sink, "data: [DONE]\n\n");
  sink.done();
  return true;
}

void Server::Impl::handle_generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  auto m = model_or_503();
  json body = parse_body(req.body);
  GenRequest r = chat ? parse_chat_request(body, m->defaults) : parse_completion_request(body, m->defaults);
  if (!r.model.empty() && r.model != opts.served_model_name)
    throw ApiError(400, "the model '" + r.model + "' does not exist; this server serves '" + opts.served_model_name + "'",
                   "model");
  if (chat) {
    keep_client_order(r, req.body);
    if (r.tool_choice == "auto" && !(opts.enable_auto_tool_choice && !opts.tool_call_parser.empty()))
      throw ApiError(400, "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set",
                     "tool_choice");
    // The parser reads the tags as text: keep them even where the vocabulary
    // marks them special (vLLM's hermes parser does the same).
    if (r.tool_choice == "auto") r.skip_special_tokens = false;
  }
  r.params.prompt = prompt_ids_for(*m, r);
  resolve_max_tokens(r, static_cast<int64_t>(r.params.prompt.size()), m->engine->max_model_len());
  check_token_ids(r.params.stop_token_ids, m->engine->vocab_size(), "stop_token_ids");
  if (!r.has_seed) r.params.sampling.seed = random_seed();
  if (r.params.n_logprobs > opts.max_logprobs)
    throw ApiError(400, str_cat("requested ", r.params.n_logprobs, " logprobs, more than this server's maximum of ",
                                opts.max_logprobs, " (--max-logprobs)"), chat ? "top_logprobs" : "logprobs");

  auto st = std::make_shared<Answer>();
  st->model = m;
  // Submits: the engine's own checks still answer 400 (through guarded).
  st->gen = std::make_unique<Generation>(*m->engine, *m->tokenizer, r.params, r.stop, r.skip_special_tokens);
  const char* object = chat ? (r.stream ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  st->reply = {new_id(chat ? "chatcmpl" : "cmpl"), object, opts.served_model_name, std::time(nullptr), chat};
  st->include_usage = r.include_usage;
  st->n_logprobs = r.params.n_logprobs;
  st->tokens_as_ids = r.tokens_as_ids;
  if (chat && opts.reasoning_parser == "qwen3") {
    st->thinking_enabled = r.template_opts.enable_thinking.value_or(true);  // Qwen3 thinks unless told not to
    st->think.emplace(st->thinking_enabled);
  }
  if (chat && r.tool_choice == "auto") {
    st->tool_format = tool_call_format(opts.tool_call_parser);
    st->tools = r.tools;
    st->parallel_tool_calls = r.parallel_tool_calls;
    st->new_tool_id = [this] { return new_id("chatcmpl-tool"); };
    if (r.stream) st->tool_stream.emplace(*st->tool_format, st->tools, st->new_tool_id);
  }
  auto release = [this, st](bool) {
    // Response gone (finished, failed or the server stopped): never leave
    // the request running in the engine.
    if (!st->counted) count_finished("abort");
    st->counted = true;
    if (!st->gen->finished()) st->gen->cancel();
  };
  if (!r.stream) {
    res.set_chunked_content_provider(
        "application/json", [this, st](size_t, httplib::DataSink& sink) { return json_step(*st, sink); },
        release);
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [this, st](size_t, httplib::DataSink& sink) { return sse_step(*st, sink); },
      release);
}

}  // namespace blockspec
