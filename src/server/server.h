// The OpenAI-compatible HTTP server of `blockspec serve` (cpp-httplib).
//
// The listener starts before the model has loaded so that /health can say
// 503 while it loads; set_model() makes the server ready. Endpoints:
//   POST /v1/completions, /v1/chat/completions (JSON or SSE streaming),
//   GET /v1/models, /health, /metrics (Prometheus), POST /tokenize, /detokenize.
// Every bad request gets an OpenAI-shaped error body (400, 401, 404, 503);
// nothing a client sends can crash or hang the process. A client that
// disconnects, streaming or not, has its engine request cancelled at once.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "chat/chat_template.h"
#include "runtime/engine.h"
#include "chat/chat_assets.h"
#include "server/generation_config.h"
#include "grammar/compiled_grammar.h"
#include "tokenizer/tokenizer.h"

namespace blockspec {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                // 0: any free port (Server::port() tells which)
  std::string served_model_name;  // the name clients pass as "model"
  std::string api_key;            // non-empty: "Authorization: Bearer KEY" on every endpoint but /health
  int n_http_threads = 64;        // connections served at once (a waiting stream holds one)
  bool log_requests = false;      // one line per request on stderr
  // Seed of the seeds drawn for requests without "seed" (vLLM's --seed): the
  // n-th such request gets the same seed in every run. nullopt: random per run.
  std::optional<uint64_t> seed;
  // vLLM's --reasoning-parser: "qwen3" splits chat answers into
  // reasoning_content and content (server/reasoning.h); "" = raw text.
  std::string reasoning_parser;
  // vLLM's --enable-auto-tool-choice and --tool-call-parser: chat requests
  // with tools (tool_choice "auto") get the model's tool calls as tool_calls
  // (server/tool_calls.h); without both, such requests are refused (400).
  int max_logprobs = 20;  // vLLM's --max-logprobs: the most logprobs / top_logprobs a request may ask for
  bool enable_auto_tool_choice = false;
  std::string tool_call_parser;
  // A response still waiting for the engine writes a keep-alive after this
  // much silence: an SSE comment, or a space before the JSON answer.
  int heartbeat_ms = 2000;
};

// A loaded model with everything the endpoints need. Members are destroyed
// in reverse order: the engine (and its step thread) goes first.
struct ServedModel {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat_template;  // null: the chat endpoint answers 400
  ChatAssets assets;
  std::optional<int32_t> bos_id;  // prepended to completion prompts when assets.add_bos
  std::string path;               // what was loaded (GET /v1/models "root")
  RequestDefaults defaults;       // generation_config.json's, for fields a request omits
  std::unique_ptr<Engine> engine;
  // Structured output: the vocabulary as byte strings with its trie, made on
  // the first request that needs it (server/structured.h).
  std::once_flag vocab_once;
  std::shared_ptr<const grammar::Vocab> vocab;
  // Compiled grammars by constraint (the 32 most recent): requests with the
  // same schema share one automaton and its cached masks. The grammars are
  // only ever stepped on the engine thread; the map is guarded by grammars_mu.
  std::mutex grammars_mu;
  std::vector<std::pair<std::string, std::shared_ptr<TokenGrammar>>> grammars;  // most recent last
};

// Compiles the chat template (a syntax error throws Error naming the file)
// and resolves the bos id.
std::shared_ptr<ServedModel> make_served_model(std::unique_ptr<Engine> engine, Tokenizer tok,
                                               const ChatAssets& assets, const std::string& path,
                                               RequestDefaults defaults = {});

class Server {
 public:
  explicit Server(ServerOptions opts);
  ~Server();  // stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and starts serving on a thread; returns the bound port. Throws
  // Error when the address cannot be bound. Ignores SIGPIPE process-wide:
  // Debian's cpp-httplib sends without MSG_NOSIGNAL, and a client that hangs
  // up mid-stream must not kill the server.
  int start();
  int port() const;
  void set_model(std::shared_ptr<ServedModel> model);  // /health turns 200
  void stop();  // closes the listener, ends streams; idempotent
  void wait();  // blocks until stop()

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace blockspec
