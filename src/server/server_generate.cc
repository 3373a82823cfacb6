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
#include <algorithm>
#include <chrono>

#include "base/error.h"
#include "server/answer.h"
#include "server/server_impl.h"
#include "server/structured.h"

namespace blockspec {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::chrono::milliseconds kPoll{50};

// The error body of a generation that ended without an answer.
std::string failure_body(const Generation& g) {
  if (g.finish_reason() == "error")
    return error_body("generation failed: " + (g.error().empty() ? std::string("engine error") : g.error()),
                      "server_error", "");
  return error_body("the request was cancelled: the server is shutting down", "server_error", "");
}

bool failed(const Generation& g) { return g.finish_reason() == "error" || g.finish_reason() == "abort"; }

// Writes one piece of the answer; false when the connection is broken.
bool send(Answer& a, httplib::DataSink& sink, const std::string& s) {
  a.last_write = Clock::now();
  return sink.write(s.data(), s.size());
}

// Polls the choices that are still generating: the first waits up to kPoll,
// the rest only take what is there. deltas[i]: choice i's new text. Returns
// whether every choice has ended.
bool poll_all(Answer& a, std::vector<std::string>& deltas, std::vector<bool>& ended_now) {
  bool waited = false, all = true;
  deltas.assign(a.choices.size(), "");
  ended_now.assign(a.choices.size(), false);
  for (size_t i = 0; i < a.choices.size(); ++i) {
    Choice& c = a.choices[i];
    if (c.ended) continue;
    c.ended = ended_now[i] = c.gen->poll(deltas[i], waited ? std::chrono::milliseconds(0) : kPoll);
    waited = true;
    all = all && c.ended;
  }
  return all;
}

// The SSE chunks of choice c's new text: reasoning, content and tool-call
// deltas, with the logprobs of tokens not yet sent riding on the first
// chunk that goes out (its finish chunk when none does). false: the
// connection broke.
bool stream_choice(Answer& a, Choice& c, std::string delta, bool fin, httplib::DataSink& sink) {
  const AnswerHead& rp = a.reply;
  json lp_buf;
  auto lp_now = [&]() -> const json* {
    const size_t n = c.gen->logprobs().size();
    if (a.style.n_logprobs < 0 || n <= c.logprobs_sent) return nullptr;
    lp_buf = logprobs_json(a, c, c.logprobs_sent, n);
    c.logprobs_sent = n;
    return &lp_buf;
  };
  auto out = [&](ChunkParts p) {
    p.logprobs = lp_now();
    return send(a, sink, sse_chunk(rp, c.index, p, a.include_usage));
  };
  if (c.think) {  // reasoning_content and content deltas
    std::string reasoning, content;
    c.think->feed(delta, reasoning, content);
    if (fin) c.think->finish(reasoning, content);
    if (!reasoning.empty() && !out({.reasoning = &reasoning})) return false;
    delta = content;
  }
  if (!a.style.forced_tool.empty() && a.style.forced_tool != "required") {  // a named function: its arguments stream
    if (!delta.empty()) {
      ToolCallDelta d;
      d.index = 0;
      d.arguments = delta;
      if (!c.forced_header_sent) {
        d.id = a.style.new_tool_id();
        d.name = a.style.forced_tool;
        c.forced_header_sent = true;
      }
      const json calls = json::array({tool_call_delta_json(d)});
      if (!out({.tool_calls = &calls})) return false;
    }
    delta.clear();
  } else if (a.style.forced_tool == "required") {  // the array of calls: sent once complete
    c.text += delta;
    delta.clear();
    if (fin && !failed(*c.gen)) {
      const std::vector<ToolCall> calls = forced_tool_calls(a.style, c.text);
      if (calls.empty() && !out({.text = &c.text})) return false;
      for (size_t i = 0; i < calls.size(); ++i) {
        ToolCallDelta d;
        d.index = static_cast<int>(i);
        d.id = calls[i].id;
        d.name = calls[i].name;
        d.arguments = calls[i].arguments;
        const json j = json::array({tool_call_delta_json(d)});
        if (!out({.tool_calls = &j})) return false;
      }
      return out({.finish = calls.empty() ? c.gen->finish_reason() : "tool_calls"});
    }
  }
  if (c.tool_stream) {  // content and tool_calls deltas
    std::vector<ToolCallDelta> pieces;
    c.tool_stream->feed(delta, pieces);
    if (fin) c.tool_stream->finish(pieces);
    delta.clear();
    for (const ToolCallDelta& d : pieces) {
      if (d.index < 0) {
        if (!out({.text = &d.content})) return false;
      } else if (d.index == 0 || a.style.parallel_tool_calls) {
        const json calls = json::array({tool_call_delta_json(d)});
        if (!out({.tool_calls = &calls})) return false;
      }
    }
  }
  if (!delta.empty() && !out({.text = &delta})) return false;
  if (!fin || failed(*c.gen)) return true;
  const bool called = c.tool_stream && c.tool_stream->n_calls() > 0;
  return out({.finish = called ? "tool_calls" : c.gen->finish_reason()});
}

}  // namespace

// The client is gone (or we are stopping): free the engine requests now.
bool Server::Impl::hang_up(Answer& a) {
  // Counted before the engine hears of it, so a client that sees the engine
  // idle also sees the abort counted.
  for (Choice& c : a.choices) {
    if (!c.counted) count_finished("abort");
    c.counted = true;
    c.gen->cancel();
  }
  return false;
}

// While generating: false when the client has gone (the caller hangs up).
bool Server::Impl::still_there(Answer& a, httplib::DataSink& sink, const std::string& keep_alive) {
  if (Clock::now() - a.last_write > std::chrono::milliseconds(opts.heartbeat_ms) && !send(a, sink, keep_alive))
    return false;
  return sink.is_writable();
}

void Server::Impl::count_ended(Answer& a) {
  for (Choice& c : a.choices)
    if (c.ended && !c.counted) {
      c.counted = true;
      count_finished(c.gen->finish_reason());
    }
}

// One call of a non-streaming request's content provider (see the top).
bool Server::Impl::json_step(Answer& a, httplib::DataSink& sink) {
  if (stopping.load()) return hang_up(a);
  std::vector<std::string> deltas;
  std::vector<bool> ended_now;
  const bool all = poll_all(a, deltas, ended_now);
  for (size_t i = 0; i < a.choices.size(); ++i) a.choices[i].text += deltas[i];
  count_ended(a);
  for (Choice& c : a.choices)
    if (c.ended && failed(*c.gen)) {
      // The 200 is out: say what failed, then end the connection without the
      // last chunk, so a client fails (the openai client retries and meets
      // the 503 of a stopped engine) instead of taking this for an answer.
      send(a, sink, failure_body(*c.gen));
      hang_up(a);
      return false;
    }
  if (!all) return still_there(a, sink, " ") || hang_up(a);
  send(a, sink, dump_json(full_answer(a)));
  sink.done();
  return true;
}

// One call of a streaming request's content provider.
bool Server::Impl::sse_step(Answer& a, httplib::DataSink& sink) {
  if (stopping.load()) return hang_up(a);
  const AnswerHead& rp = a.reply;
  const std::string empty;
  for (Choice& c : a.choices)
    if (rp.chat && !c.role_sent) {
      c.role_sent = true;
      if (!send(a, sink, sse_chunk(rp, c.index, {.text = &empty, .role = true}, a.include_usage))) return hang_up(a);
    }
  std::vector<std::string> deltas;
  std::vector<bool> ended_now;
  const bool all = poll_all(a, deltas, ended_now);
  for (size_t i = 0; i < a.choices.size(); ++i) {
    Choice& c = a.choices[i];
    if (!stream_choice(a, c, deltas[i], ended_now[i], sink)) return hang_up(a);
  }
  count_ended(a);
  for (Choice& c : a.choices)
    if (c.ended && failed(*c.gen)) {
      send(a, sink, "data: " + failure_body(*c.gen) + "\n\n");
      hang_up(a);
      send(a, sink, "data: [DONE]\n\n");
      sink.done();
      return true;
    }
  if (!all) return still_there(a, sink, ": keep-alive\n\n") || hang_up(a);
  if (a.include_usage) {
    json u = answer_base(rp);
    u["choices"] = json::array();
    u["usage"] = usage_json(a);
    if (!send(a, sink, "data: " + dump_json(u) + "\n\n")) return false;
  }
  send(a, sink, "data: [DONE]\n\n");
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
  if (r.structured) {
    if (r.params.ignore_eos)
      throw ApiError(400, "'ignore_eos' cannot be combined with structured output: a complete output ends the answer",
                     "ignore_eos");
    std::vector<int32_t> stops = r.params.stop_token_ids;
    for (int32_t id : m->engine->eos_token_ids())
      if (std::find(stops.begin(), stops.end(), id) == stops.end()) stops.push_back(id);
    r.params.grammar = compile_structured(*m, *r.structured, std::move(stops));
  }
  if (r.params.n_logprobs > opts.max_logprobs)
    throw ApiError(400, str_cat("requested ", r.params.n_logprobs, " logprobs, more than this server's maximum of ",
                                opts.max_logprobs, " (--max-logprobs)"), chat ? "top_logprobs" : "logprobs");

  auto a = std::make_shared<Answer>();
  a->model = m;
  const char* object = chat ? (r.stream ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  a->reply = {new_id(chat ? "chatcmpl" : "cmpl"), object, opts.served_model_name, std::time(nullptr), chat};
  a->include_usage = r.include_usage;
  AnswerStyle& st = a->style;
  st.n_logprobs = r.params.n_logprobs;
  st.tokens_as_ids = r.tokens_as_ids;
  if (chat && opts.reasoning_parser == "qwen3") {
    st.thinking = true;
    st.thinking_enabled = r.template_opts.enable_thinking.value_or(true);  // Qwen3 thinks unless told not to
  }
  if (chat && (r.tool_choice == "required" || r.tool_choice.rfind("function:", 0) == 0)) {
    st.forced_tool = r.tool_choice == "required" ? "required" : r.tool_choice.substr(9);
    st.new_tool_id = [this] { return new_id("chatcmpl-tool"); };
  }
  if (chat && r.tool_choice == "auto") {
    st.tool_format = tool_call_format(opts.tool_call_parser);
    st.tools = r.tools;
    st.parallel_tool_calls = r.parallel_tool_calls;
    st.new_tool_id = [this] { return new_id("chatcmpl-tool"); };
  }
  // n choices, each its own engine request; with a seed, choice i samples
  // with seed + i (vLLM's rule for n > 1), without one each draws its own.
  a->choices.resize(static_cast<size_t>(r.n));
  for (int i = 0; i < r.n; ++i) {
    Choice& c = a->choices[i];
    c.index = i;
    RequestParams p = r.params;
    p.sampling.seed = r.has_seed ? r.params.sampling.seed + static_cast<uint64_t>(i) : random_seed();
    // Submits: the engine's own checks still answer 400 (through guarded); a
    // later choice failing to submit cancels the earlier ones (~Generation).
    c.gen = std::make_unique<Generation>(*m->engine, *m->tokenizer, std::move(p), r.stop, r.skip_special_tokens);
    if (r.stream && st.thinking) c.think.emplace(st.thinking_enabled);
    if (r.stream && st.tool_format) c.tool_stream.emplace(*st.tool_format, st.tools, st.new_tool_id);
  }
  auto release = [this, a](bool) {
    // Response gone (finished, failed or the server stopped): never leave
    // a request running in the engine.
    for (Choice& c : a->choices) {
      if (!c.counted) count_finished("abort");
      c.counted = true;
      if (!c.gen->finished()) c.gen->cancel();
    }
  };
  if (!r.stream) {
    res.set_chunked_content_provider(
        "application/json", [this, a](size_t, httplib::DataSink& sink) { return json_step(*a, sink); }, release);
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [this, a](size_t, httplib::DataSink& sink) { return sse_step(*a, sink); }, release);
}

}  // namespace blockspec
