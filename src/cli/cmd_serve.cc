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
#include "runtime/speculative.h"
#include "cli/serve_flags.h"
#include "cli/spec_config.h"
#include "model/chat_files.h"
#include "server/generation_config.h"
#include "server/server.h"

namespace blockspec {

int cmd_serve(const std::vector<std::string>& argv) {
  Args a("serve", serve_flags(), argv);
  if (a.has("--help")) {
    std::fputs(Args::usage("serve", "MODEL [--host H] [--port P] [flags]   (flags as `vllm serve` spells them)",
                           serve_flags())
                   .c_str(),
               stdout);
    return 0;
  }
  ServeSettings ss = read_serve_flags(a);
  const std::string& path = ss.model;
  ServerOptions& so = ss.server;
  EngineOptions& eo = ss.engine;
  const ModelOptions& mo = ss.model_opts;
  for (const std::string& n : ss.notes) std::fprintf(stderr, "blockspec serve: %s\n", n.c_str());

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
  RequestDefaults defaults =
      load_request_defaults(ss.generation_config, path, tok.vocab_size(), ss.override_generation_config);
  std::fprintf(stderr, "blockspec serve: generation config: %s\n", defaults.describe().c_str());
  ChatAssets assets = read_chat_assets(path, ss.chat_template_file);
  auto model = Transformer::load(path, mo);
  if (tok.vocab_size() > model->config().vocab_size)
    fail(path, ": the tokenizer has ", tok.vocab_size(), " tokens but the model's vocab_size is ",
         model->config().vocab_size);
  std::fprintf(stderr, "blockspec serve: threads: %s\n", threads_line(*model, mo).c_str());
  bool draft_kv_given = false;
  if (eo.spec) {
    eo.drafter = load_spec_drafter(*eo.spec, *model);
    draft_kv_given = eo.spec->draft_kv_dtype.has_value();
    configure_spec(*eo.spec, eo.drafter.get(), *model);  // K, adaptive K and the drafter's KV dtype, for the log
  }
  const int64_t kv_token_bytes = model->kv_bytes_per_token();
  const KvDType kv_dtype = model->kv_cache_dtype();
  if (ss.memory_fraction > 0) {
    const int64_t weights = static_cast<int64_t>(model->weight_bytes() + (eo.drafter ? eo.drafter->weight_bytes() : 0));
    const int64_t state = model->state_floats_per_sequence() * static_cast<int64_t>(sizeof(float)) * eo.max_num_seqs;
    const int64_t mem = usable_memory_bytes();
    eo.kv_cache_mb = std::max<int64_t>(1, kv_budget_bytes(ss.memory_fraction, mem, weights, state) >> 20);
    std::fprintf(stderr, "blockspec serve: --gpu-memory-utilization %.3g of %lld MiB: weights %lld MiB, state %lld "
                 "MiB, KV cache %lld MiB\n", ss.memory_fraction, static_cast<long long>(mem >> 20),
                 static_cast<long long>(weights >> 20), static_cast<long long>(state >> 20),
                 static_cast<long long>(eo.kv_cache_mb));
  }
  if (eo.spec && eo.spec->uses_drafter()) {  // the drafter's context KV (vLLM's speculative kv_cache_dtype)
    const KvDType d = eo.spec->draft_kv_dtype.value_or(kv_dtype);
    std::fprintf(stderr, "blockspec serve: drafter context KV cache dtype %s (%s), %lld bytes per token\n",
                 kv_dtype_name(d), draft_kv_given ? "speculative-config kv_cache_dtype" : "as the target's",
                 static_cast<long long>(DraftCache(*eo.spec->draft, 1, d).bytes_per_token()));
  }
  auto engine = std::make_unique<Engine>(std::move(model), eo);
  const int64_t max_len = engine->max_model_len();
  {
    const EngineMetrics m = engine->metrics();
    const int64_t tokens = m.kv_pages_total * m.kv_page_tokens;
    std::fprintf(stderr, "blockspec serve: KV cache: %s, %lld tokens (%lld MiB); maximum concurrency for %lld "
                 "tokens per request: %.2fx\n", kv_dtype_name(kv_dtype), static_cast<long long>(tokens),
                 static_cast<long long>(tokens * kv_token_bytes >> 20), static_cast<long long>(max_len),
                 static_cast<double>(tokens) / static_cast<double>(max_len));
  }
  if (!engine->verify_cost_table().empty())
    std::fprintf(stderr, "blockspec serve: verify cost (adaptive K; corrected as requests run): %s\n",
                 engine->verify_cost_table().c_str());
  if (engine->prefix_caching())
    std::fprintf(stderr, "blockspec serve: prefix caching: on (pages of 16 tokens%s%s)\n",
                 engine->prefix_caching_note().empty() ? "" : "; ", engine->prefix_caching_note().c_str());
  else if (!engine->prefix_caching_note().empty())
    std::fprintf(stderr, "blockspec serve: %s\n", engine->prefix_caching_note().c_str());
  server.set_model(make_served_model(std::move(engine), std::move(tok), assets, path, std::move(defaults)));
  std::string spec_line;
  if (eo.spec) {
    spec_line = str_cat(", speculative ", eo.spec->method_name());
    if (eo.spec->lookup_first)
      spec_line += str_cat(" behind n-gram lookup (", eo.spec->prompt_lookup_min, "-", eo.spec->prompt_lookup_max, ")");
    if (eo.spec->adaptive_k) spec_line += " (adaptive K)";
    else spec_line += str_cat(" K=", eo.spec->num_speculative_tokens);
    const char* sep = ", K by batch size:";
    for (const SpecConfig::BatchK& r : eo.spec->k_by_batch) {
      spec_line += str_cat(sep, " ", r.lo, "-", r.hi, ": ", std::min(r.k, eo.spec->num_speculative_tokens));
      sep = ",";
    }
  }
  std::fprintf(stderr, "blockspec serve: ready: model \"%s\", max_model_len %lld, max_num_seqs %lld%s\n",
               so.served_model_name.c_str(), static_cast<long long>(max_len),
               static_cast<long long>(eo.max_num_seqs), spec_line.c_str());
  if (assets.template_source.empty())
    std::fprintf(stderr, "blockspec serve: warning: no chat template; /v1/chat/completions answers 400 (pass --chat-template)\n");
  server.wait();
  return 0;
}

}  // namespace blockspec
