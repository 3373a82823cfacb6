// blockspec serve MODEL [--host H] [--port P] [flags]: the OpenAI-compatible
// server (src/server). Flags are vLLM's names. The listener opens first, so
// /health answers 503 while the model loads; SIGINT / SIGTERM stop it.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <thread>

#include "base/error.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_files.h"
#include "cli/spec_cli.h"
#include "runtime/engine.h"
#include "cli/spec_config.h"
#include "model/chat_files.h"
#include "server/generation_config.h"
#include "server/server.h"

namespace blockspec {

namespace {

std::vector<FlagSpec> flags() {
  std::vector<FlagSpec> f = {
      {"--host", "", true, "address to listen on (default 127.0.0.1)"},
      {"--port", "", true, "port to listen on; 0 = any free port (default 8000)"},
      {"--served-model-name", "", true, "model name clients pass as \"model\" (default: the model path's basename)"},
      {"--max-num-seqs", "", true, "sequences batched per step (default 8)"},
      {"--max-model-len", "", true, "longest prompt + completion in tokens (default: the model's max_position_embeddings)"},
      {"--max-num-batched-tokens", "", true, "tokens one engine step forwards (default 256)"},
      {"--kv-cache-memory", "", true, "KV cache budget in MiB (default: room for max-num-seqs x max-model-len tokens)"},
      {"--api-key", "", true, "require \"Authorization: Bearer KEY\" on every endpoint but /health"},
      {"--chat-template", "", true, "Jinja chat template file (default: the model's own)"},
      {"--generation-config", "", true,
       "auto: the model's generation_config.json sets the defaults of temperature, top_p, top_k, max_tokens and "
       "adds its eos_token_id as stop tokens; vllm: built-in defaults; or a directory holding one (default auto)"},
      {"--log-requests", "", false, "one line per HTTP request on stderr"},
      {"--help", "-h", false, "show this help"},
  };
  f.push_back(spec_flag());
  std::vector<FlagSpec> m = model_flags();
  f.insert(f.end(), m.begin(), m.end());
  return f;
}

int64_t positive(const Args& a, const std::string& flag, int64_t def, int64_t hi) {
  const int64_t v = a.integer(flag, def);
  if (v < 0 || v > hi || (v == 0 && def != 0)) fail(flag, " must be in [1, ", hi, "], found ", v);
  return v;
}

std::string basename_of(const std::string& path) {
  std::filesystem::path p(path);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();  // "dir/" -> "dir"
  return p.filename().string();
}

}  // namespace

int cmd_serve(const std::vector<std::string>& argv) {
  Args a("serve", flags(), argv);
  if (a.has("--help")) {
    std::fputs(Args::usage("serve", "MODEL [--host H] [--port P] [flags]", flags()).c_str(), stdout);
    return 0;
  }
  if (a.positionals().size() != 1)
    fail("serve: expected one MODEL (an HF directory or a .gguf file), found ", a.positionals().size(), " arguments");
  const std::string path = a.positionals()[0];

  ServerOptions so;
  so.host = a.str("--host", "127.0.0.1");
  so.port = static_cast<int>(a.integer("--port", 8000));
  if (so.port < 0 || so.port > 65535) fail("--port must be in [0, 65535], found ", so.port);
  so.served_model_name = a.str("--served-model-name", basename_of(path));
  so.api_key = a.str("--api-key", "");
  so.log_requests = a.has("--log-requests");

  EngineOptions eo;
  eo.max_num_seqs = positive(a, "--max-num-seqs", 8, 4096);
  eo.max_model_len = positive(a, "--max-model-len", 0, int64_t{1} << 24);
  eo.max_step_tokens = positive(a, "--max-num-batched-tokens", 256, int64_t{1} << 20);
  eo.kv_cache_mb = positive(a, "--kv-cache-memory", 0, int64_t{1} << 24);
  if (a.has("--speculative-config")) eo.spec = parse_spec_config(a.str("--speculative-config"));
  so.n_http_threads = static_cast<int>(std::max<int64_t>(64, 4 * eo.max_num_seqs + 16));
  ModelOptions mo = model_options(a);
  const std::string chat_template_file = a.str("--chat-template", "");
  if (!chat_template_file.empty() && !std::filesystem::exists(chat_template_file))
    fail("--chat-template: ", chat_template_file, " does not exist");
  const std::string gen_config = a.str("--generation-config", "auto");
  if (gen_config != "auto" && gen_config != "vllm" && !std::filesystem::is_directory(gen_config))
    fail("--generation-config must be auto, vllm or a directory holding generation_config.json, found ",
         quote_for_message(gen_config));

  // SIGINT / SIGTERM go to one waiting thread (blocked everywhere else, so
  // the server's threads inherit the mask).
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  Server server(so);
  const int port = server.start();
  std::fprintf(stderr, "blockspec serve: listening on http://%s:%d (loading %s)\n", so.host.c_str(), port,
               path.c_str());
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    std::fprintf(stderr, "blockspec serve: signal %d, stopping\n", sig);
    server.stop();
  });
  struct Join {  // wakes the waiter on any exit path (a load error included)
    std::thread& t;
    ~Join() {
      pthread_kill(t.native_handle(), SIGTERM);
      t.join();
    }
  } join{waiter};

  Tokenizer tok = load_tokenizer(path);
  // Before the weights, so a bad file fails fast; its eos ids must be tokens.
  RequestDefaults defaults = load_request_defaults(gen_config, path, tok.vocab_size());
  std::fprintf(stderr, "blockspec serve: generation config: %s\n", defaults.describe().c_str());
  ChatAssets assets = read_chat_assets(path, chat_template_file);
  auto model = Transformer::load(path, mo);
  if (tok.vocab_size() > model->config().vocab_size)
    fail(path, ": the tokenizer has ", tok.vocab_size(), " tokens but the model's vocab_size is ",
         model->config().vocab_size);
  if (eo.spec) eo.drafter = load_spec_drafter(*eo.spec, *model);
  auto engine = std::make_unique<Engine>(std::move(model), eo);
  const int64_t max_len = engine->max_model_len();
  server.set_model(make_served_model(std::move(engine), std::move(tok), assets, path, std::move(defaults)));
  std::fprintf(stderr, "blockspec serve: ready: model \"%s\", max_model_len %lld, max_num_seqs %lld%s%s\n",
               so.served_model_name.c_str(), static_cast<long long>(max_len),
               static_cast<long long>(eo.max_num_seqs), eo.spec ? ", speculative " : "",
               eo.spec ? eo.spec->method_name() : "");
  if (assets.template_source.empty())
    std::fprintf(stderr, "blockspec serve: warning: no chat template; /v1/chat/completions answers 400 (pass --chat-template)\n");
  server.wait();
  return 0;
}

}  // namespace blockspec
