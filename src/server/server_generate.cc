// POST /v1/completions and /v1/chat/completions: one JSON answer, or SSE
// chunks ("data: {json}\n\n" ... "data: [DONE]\n\n") as tokens arrive.
#include <chrono>

#include "base/error.h"
#include "server/generation.h"
#include "server/server_impl.h"

namespace blockspec {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::chrono::milliseconds kPoll{50};
// A stream that has sent nothing for this long (queued behind other
// requests) gets an SSE comment line, so a vanished client is noticed even
// before its first token.
constexpr std::chrono::seconds kHeartbeat{2};

struct Reply {  // the fields every response and chunk of one request share
  std::string id, object, model;
  std::time_t created;
  bool chat;
};

json usage_json(const Generation& g) {
  return {{"prompt_tokens", g.prompt_tokens()},
          {"completion_tokens", g.completion_tokens()},
          {"total_tokens", g.prompt_tokens() + g.completion_tokens()}};
}

json finish_json(const std::string& reason) { return reason.empty() ? json(nullptr) : json(reason); }

json base(const Reply& r) { return {{"id", r.id}, {"object", r.object}, {"created", r.created}, {"model", r.model}}; }

// One SSE chunk; finish: "" while streaming.
std::string chunk(const Reply& r, const std::string* text, bool role, const std::string& finish, bool usage_null) {
  json c = base(r);
  json choice = {{"index", 0}};
  if (r.chat) {
    json delta = json::object();
    if (role) delta["role"] = "assistant";
    if (text) delta["content"] = *text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text ? *text : "";
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_json(finish);
  c["choices"] = json::array({choice});
  if (usage_null) c["usage"] = nullptr;
  return "data: " + dump_json(c) + "\n\n";
}

// Stream state kept alive by the content provider after the handler returns.
struct Stream {
  std::shared_ptr<ServedModel> model;  // keeps the engine alive while we stream
  std::unique_ptr<Generation> gen;
  Reply reply;
  bool include_usage = false;
  bool role_sent = false, done = false, counted = false;
  Clock::time_point last_write = Clock::now();
};

// Final status of a finished generation that could not produce an answer.
void throw_if_failed(const Generation& g) {
  if (g.finish_reason() == "error")
    throw ApiError(500, "generation failed: " + (g.error().empty() ? std::string("engine error") : g.error()), "",
                   "server_error");
  if (g.finish_reason() == "abort") throw ApiError(503, "the request was cancelled: the server is shutting down", "", "server_error");
}

}  // namespace

void Server::Impl::handle_generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  auto m = model_or_503();
  json body = parse_body(req.body);
  GenRequest r = chat ? parse_chat_request(body) : parse_completion_request(body);
  if (!r.model.empty() && r.model != opts.served_model_name)
    throw ApiError(400, "the model '" + r.model + "' does not exist; this server serves '" + opts.served_model_name + "'",
                   "model");
  r.params.prompt = prompt_ids_for(*m, r);
  resolve_max_tokens(r, static_cast<int64_t>(r.params.prompt.size()), m->engine->max_model_len());
  check_token_ids(r.params.stop_token_ids, m->engine->model_config().vocab_size, "stop_token_ids");
  if (!r.has_seed) r.params.sampling.seed = random_seed();

  Reply reply{new_id(chat ? "chatcmpl" : "cmpl"), chat ? "chat.completion" : "text_completion", opts.served_model_name,
              std::time(nullptr), chat};
  auto gen = std::make_unique<Generation>(*m->engine, *m->tokenizer, r.params, r.stop, r.skip_special_tokens);

  if (!r.stream) {
    std::string text;
    while (!gen->poll(text, kPoll)) {
      if (stopping.load()) gen->cancel();
    }
    count_finished(gen->finish_reason());
    throw_if_failed(*gen);
    json choice = {{"index", 0}};
    if (chat) choice["message"] = {{"role", "assistant"}, {"content", text}};
    else choice["text"] = text;
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = gen->finish_reason();
    json out = base(reply);
    out["choices"] = json::array({choice});
    out["usage"] = usage_json(*gen);
    set_json(res, out);
    return;
  }

  if (chat) reply.object = "chat.completion.chunk";
  auto st = std::make_shared<Stream>();
  st->model = m;
  st->gen = std::move(gen);
  st->reply = reply;
  st->include_usage = r.include_usage;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, st](size_t, httplib::DataSink& sink) {
        auto send = [&](const std::string& s) {
          st->last_write = Clock::now();
          return sink.write(s.data(), s.size());
        };
        auto hang_up = [&] {  // the client is gone (or we are stopping): free the engine request now
          st->gen->cancel();
          if (!st->counted) count_finished("abort");
          st->counted = true;
          return false;
        };
        if (stopping.load()) return hang_up();
        const Reply& rp = st->reply;
        if (rp.chat && !st->role_sent) {
          st->role_sent = true;
          const std::string empty;
          if (!send(chunk(rp, &empty, true, "", st->include_usage))) return hang_up();
        }
        std::string delta;
        const bool fin = st->gen->poll(delta, kPoll);
        if (!delta.empty() && !send(chunk(rp, &delta, false, "", st->include_usage))) return hang_up();
        if (!fin) {
          if (Clock::now() - st->last_write > kHeartbeat && !send(": keep-alive\n\n")) return hang_up();
          if (!sink.is_writable()) return hang_up();
          return true;
        }
        const Generation& g = *st->gen;
        st->counted = true;
        count_finished(g.finish_reason());
        if (g.finish_reason() == "error" || g.finish_reason() == "abort") {
          json e = json::parse(error_body(g.finish_reason() == "error" ? "generation failed: " + g.error()
                                                                         : "the request was cancelled",
                                          "server_error", ""));
          send("data: " + dump_json(e) + "\n\n");
        } else {
          if (!send(chunk(rp, nullptr, false, g.finish_reason(), st->include_usage))) return false;
          if (st->include_usage) {
            json u = base(rp);
            u["choices"] = json::array();
            u["usage"] = usage_json(g);
            if (!send("data: " + dump_json(u) + "\n\n")) return false;
          }
        }
        send("data: [DONE]\n\n");
        sink.done();
        return true;
      },
      [this, st](bool) {
        // Response gone (finished, failed or the server stopped): never
        // leave the request running in the engine.
        if (!st->gen->finished()) st->gen->cancel();
        if (!st->counted) count_finished("abort");
        st->counted = true;
      });
}

}  // namespace blockspec
