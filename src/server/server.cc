#include "server/server.h"

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "base/error.h"
#include "server/server_impl.h"

namespace blockspec {

using json = nlohmann::json;

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void set_json(httplib::Response& res, const json& j) {
  res.status = 200;
  res.set_content(dump_json(j), "application/json");
}

void set_error(httplib::Response& res, int status, const std::string& message, const std::string& param,
               const std::string& type) {
  std::string t = type;
  if (t.empty()) {
    t = status == 401   ? "authentication_error"
        : status == 404 ? "not_found_error"
        : status >= 500 ? "server_error"
                        : "invalid_request_error";
  }
  res.status = status;
  res.set_content(error_body(message, t, param), "application/json");
}

std::shared_ptr<ServedModel> make_served_model(std::unique_ptr<Engine> engine, Tokenizer tok,
                                               const ChatAssets& assets, const std::string& path,
                                               RequestDefaults defaults) {
  auto m = std::make_shared<ServedModel>();
  m->tokenizer = std::make_unique<Tokenizer>(std::move(tok));
  if (!assets.template_source.empty())
    m->chat_template = std::make_unique<ChatTemplate>(assets.template_source, assets.template_what);
  m->assets = assets;
  if (assets.add_bos) {
    m->bos_id = m->tokenizer->token_id(assets.bos_token);
    if (!m->bos_id) m->assets.add_bos = false;  // the bos text is no single token: add none
  }
  m->path = path;
  m->defaults = std::move(defaults);
  m->engine = std::move(engine);
  return m;
}

std::shared_ptr<ServedModel> Server::Impl::model_or_503() {
  std::lock_guard<std::mutex> lock(mu);
  if (!model) throw ApiError(503, "the model is still loading; retry when GET /health answers 200", "", "server_error");
  if (!model->engine->healthy()) throw ApiError(503, "the engine has stopped; restart the server", "", "server_error");
  return model;
}

void Server::Impl::count_finished(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu);
  ++counters.finished[reason];
}

std::string Server::Impl::new_id(const char* prefix) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-%016llx%08llx", prefix, static_cast<unsigned long long>(id_salt),
                static_cast<unsigned long long>(next_id.fetch_add(1)));
  return buf;
}

uint64_t Server::Impl::random_seed() {
  // splitmix64 of (salt + counter): distinct per request and per server run.
  uint64_t z = opts.seed.value_or(id_salt) + 0x9e3779b97f4a7c15ull * (next_seed.fetch_add(1) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::vector<int32_t> prompt_ids_for(const ServedModel& m, const GenRequest& r) {
  if (r.chat) {
    if (!m.chat_template)
      throw ApiError(400, "this model has no chat template (none in its tokenizer_config.json or GGUF); start the "
                          "server with --chat-template FILE, or use /v1/completions", "messages");
    ChatTemplateOptions o = r.template_opts;
    o.bos_token = m.assets.bos_token;
    o.eos_token = m.assets.eos_token;
    return m.tokenizer->encode(m.chat_template->apply(r.messages, o));
  }
  if (r.prompt_text) {
    std::vector<int32_t> ids;
    if (m.assets.add_bos && m.bos_id) ids.push_back(*m.bos_id);
    std::vector<int32_t> t = m.tokenizer->encode(*r.prompt_text);
    ids.insert(ids.end(), t.begin(), t.end());
    return ids;
  }
  check_token_ids(r.prompt_ids, m.engine->vocab_size(), "prompt");
  return r.prompt_ids;
}

void Server::Impl::handle_tokenize(const httplib::Request& req, httplib::Response& res) {
  auto m = model_or_503();
  TokenizeRequest t = parse_tokenize_request(parse_body(req.body));
  std::vector<int32_t> ids;
  if (t.prompt) {
    if (t.add_special_tokens && m->assets.add_bos && m->bos_id) ids.push_back(*m->bos_id);
    std::vector<int32_t> e = m->tokenizer->encode(*t.prompt);
    ids.insert(ids.end(), e.begin(), e.end());
  } else {
    GenRequest g;
    g.chat = true;
    g.messages = t.messages;
    g.template_opts = t.template_opts;
    g.tools = t.template_opts.tools;
    keep_client_order(g, req.body);
    ids = prompt_ids_for(*m, g);
  }
  set_json(res, {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", m->engine->max_model_len()}});
}

void Server::Impl::handle_detokenize(const httplib::Request& req, httplib::Response& res) {
  auto m = model_or_503();
  std::vector<int32_t> ids = parse_detokenize_request(parse_body(req.body));
  check_token_ids(ids, m->tokenizer->vocab_size(), "tokens");
  set_json(res, {{"prompt", m->tokenizer->decode(ids)}});
}

void Server::Impl::routes() {
  using httplib::Request;
  using httplib::Response;
  // Authentication before routing, so an unknown path without a key is 401,
  // like vLLM. /health stays open for load balancers.
  http.set_pre_routing_handler([this](const Request& req, Response& res) {
    if (opts.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + opts.api_key)
      return httplib::Server::HandlerResponse::Unhandled;
    set_error(res, 401, "missing or wrong API key: send the header \"Authorization: Bearer <key>\"");
    return httplib::Server::HandlerResponse::Handled;
  });
  // Fills a body for the statuses httplib answers itself (404, 413, ...).
  http.set_error_handler(httplib::Server::HandlerWithResponse([](const Request& req, Response& res) {
    if (!res.body.empty() || res.is_chunked_content_provider_) return httplib::Server::HandlerResponse::Unhandled;
    if (res.status == 404) set_error(res, 404, "no route " + req.method + " " + req.path);
    else set_error(res, res.status, "HTTP status " + std::to_string(res.status));
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([](const Request&, Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    set_error(res, 500, what, "", "server_error");
  });
  if (opts.log_requests) {
    http.set_logger([](const Request& req, const Response& res) {
      std::fprintf(stderr, "blockspec serve: %s %s %d\n", req.method.c_str(), req.path.c_str(), res.status);
    });
  }

  http.Get("/health", [this](const Request&, Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    if (!model) set_error(res, 503, "loading the model", "", "server_error");
    else if (!model->engine->healthy()) set_error(res, 503, "the engine has stopped", "", "server_error");
    else res.status = 200;
  });
  http.Get("/v1/models", [this](const Request&, Response& res) {
    guarded(res, [&] {
      auto m = model_or_503();
      json card = {{"id", opts.served_model_name}, {"object", "model"},   {"created", created},
                   {"owned_by", "blockspec"},       {"root", m->path},     {"parent", nullptr},
                   {"max_model_len", m->engine->max_model_len()}};
      set_json(res, {{"object", "list"}, {"data", json::array({card})}});
    });
  });
  http.Get("/metrics", [this](const Request&, Response& res) {
    std::shared_ptr<ServedModel> m;
    ServerCounters c;
    {
      std::lock_guard<std::mutex> lock(mu);
      m = model;
      c = counters;
    }
    EngineMetrics em = m ? m->engine->metrics() : EngineMetrics{};
    res.set_content(render_metrics(em, c, opts.served_model_name), "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Post("/v1/completions", [this](const Request& req, Response& res) {
    guarded(res, [&] { handle_generate(req, res, /*chat=*/false); });
  });
  http.Post("/v1/chat/completions", [this](const Request& req, Response& res) {
    guarded(res, [&] { handle_generate(req, res, /*chat=*/true); });
  });
  // vLLM's POST /reset_prefix_cache: forget every cached prefix (the step
  // thread does it before its next step); 200 with an empty body.
  http.Post("/reset_prefix_cache", [this](const Request&, Response& res) {
    guarded(res, [&] {
      model_or_503()->engine->reset_prefix_cache();
      res.status = 200;
    });
  });
  http.Post("/tokenize", [this](const Request& req, Response& res) { guarded(res, [&] { handle_tokenize(req, res); }); });
  http.Post("/detokenize", [this](const Request& req, Response& res) {
    guarded(res, [&] { handle_detokenize(req, res); });
  });
}

Server::Server(ServerOptions opts) : impl_(std::make_unique<Impl>()) {
  impl_->opts = std::move(opts);
  std::random_device rd;
  impl_->id_salt = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  impl_->created = std::time(nullptr);
}

Server::~Server() { stop(); }

int Server::start() {
  Impl& s = *impl_;
  // See server.h: a write to a closed socket must fail, not kill us.
  struct sigaction sa {};
  sa.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &sa, nullptr);
  const int n_threads = std::max(4, s.opts.n_http_threads);
  s.http.new_task_queue = [n_threads] { return new httplib::ThreadPool(static_cast<size_t>(n_threads)); };
  s.http.set_payload_max_length(64u << 20);
  s.http.set_read_timeout(30, 0);
  // SSE chunks are small writes: without TCP_NODELAY, Nagle + the client's
  // delayed ACK hold each one back up to ~40 ms and tokens arrive in bursts.
  s.http.set_tcp_nodelay(true);
  s.routes();
  if (s.opts.port == 0) {
    s.bound_port = s.http.bind_to_any_port(s.opts.host);
    if (s.bound_port < 0) fail("serve: cannot listen on ", s.opts.host, " (any port): check --host");
  } else {
    if (!s.http.bind_to_port(s.opts.host, s.opts.port))
      fail("serve: cannot listen on ", s.opts.host, ":", s.opts.port,
           " (address in use or not local?): pick another --port or --host");
    s.bound_port = s.opts.port;
  }
  s.listener = std::thread([&s] { s.http.listen_after_bind(); });
  // httplib's stop() does nothing until the listener thread runs, so a
  // stop() right after start() (a model that fails to load at once) would
  // leave that thread in accept() and stop() joining it forever.
  while (!s.http.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return s.bound_port;
}

int Server::port() const { return impl_->bound_port; }

void Server::set_model(std::shared_ptr<ServedModel> model) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->model = std::move(model);
}

void Server::stop() {
  Impl& s = *impl_;
  if (s.stopping.exchange(true)) {
    wait();
    return;
  }
  s.http.stop();
  if (s.listener.joinable()) s.listener.join();
  std::shared_ptr<ServedModel> m;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    m.swap(s.model);
    s.stopped = true;
  }
  s.stopped_cv.notify_all();
  m.reset();  // the engine stops here (unless a handler still holds it)
}

void Server::wait() {
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->stopped_cv.wait(lock, [&] { return impl_->stopped; });
}

}  // namespace blockspec
