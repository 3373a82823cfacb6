// blockspec generate -m MODEL_DIR -p TEXT -n N [sampling flags] [--json]
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/timer.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_files.h"
#include "cli/spec_cli.h"
#include "runtime/generate.h"
#include "tokenizer/tokenizer.h"

namespace blockspec {

namespace {
std::vector<FlagSpec> flags() {
  std::vector<FlagSpec> f = model_flags();
  std::vector<FlagSpec> own = {
    {"--model", "-m", true, "model directory (config.json, *.safetensors, tokenizer.json)"},
    {"--prompt", "-p", true, "prompt text"},
    {"--n-predict", "-n", true, "tokens to generate (default 64)"},
    {"--temp", "", true, "sampling temperature; 0 = greedy (default 0)"},
    {"--top-k", "", true, "keep the k most likely tokens (default 0 = off)"},
    {"--top-p", "", true, "nucleus sampling mass (default 1 = off)"},
    {"--seed", "", true, "random seed (default 0)"},
    {"--ignore-eos", "", false, "keep generating past end-of-sequence tokens"},
    {"--json", "", false, "print one JSON object on stdout, human output on stderr"},
    {"--help", "-h", false, "show this help"},
  };
  own.push_back(spec_flag());
  f.insert(f.begin(), own.begin(), own.end());
  return f;
}
}  // namespace

int cmd_generate(const std::vector<std::string>& argv) {
  Args a("generate", flags(), argv);
  if (a.has("--help")) {
    std::fputs(Args::usage("generate", "-m MODEL_DIR -p TEXT [-n N] [flags]", flags()).c_str(), stdout);
    return 0;
  }
  if (!a.positionals().empty()) fail("generate: unexpected argument \"", a.positionals()[0], "\"");
  const std::string dir = a.required("--model");
  const std::string prompt = a.required("--prompt");
  GenerateOptions go;
  go.max_new_tokens = a.integer("--n-predict", 64);
  if (go.max_new_tokens < 0) fail("generate: -n must be >= 0, found ", go.max_new_tokens);
  go.sampling.temperature = static_cast<float>(a.number("--temp", 0.0));
  go.sampling.top_k = static_cast<int>(a.integer("--top-k", 0));
  go.sampling.top_p = static_cast<float>(a.number("--top-p", 1.0));
  go.sampling.seed = a.u64("--seed", 0);
  go.stop_at_eos = !a.has("--ignore-eos");
  validate_sampling(go.sampling);
  ModelOptions mo = model_options(a);
  const bool json_out = a.has("--json");

  Timer load_timer;
  Tokenizer tok = load_tokenizer(dir);
  auto model = Transformer::load(dir, mo);
  const double load_s = load_timer.seconds();
  if (tok.vocab_size() > model->config().vocab_size)
    fail(dir, ": tokenizer.json has ", tok.vocab_size(), " tokens but config.json vocab_size is ",
         model->config().vocab_size);
  std::vector<int32_t> ids = tok.encode(prompt);

  StreamDecoder stream(tok, /*skip_special=*/true);
  FILE* text_out = json_out ? stderr : stdout;
  auto on_token = [&](int32_t t) {
    std::string s = stream.push(t);
    std::fputs(s.c_str(), text_out);
    std::fflush(text_out);
  };
  auto spec = open_spec(a, *model, static_cast<int64_t>(ids.size()) + go.max_new_tokens + 64);
  SpecResult sr;
  if (spec)
    sr = generate_speculative(*model, *spec->proposer, spec->cfg.num_speculative_tokens, ids, go, on_token,
                              spec->ksel.get());
  else sr.gen = generate(*model, ids, go, on_token);
  const GenerateResult& r = sr.gen;
  std::fputs(stream.flush().c_str(), text_out);
  std::fputs("\n", text_out);
  std::fflush(text_out);
  const double gb_s = r.decode_tok_s() * static_cast<double>(model->weight_bytes()) / 1e9;
  std::fprintf(stderr,
               "[prompt %lld tokens, prefill %.1f tok/s | generated %zu tokens, decode %.1f tok/s, %.2f GB/s "
               "weights | load %.2f s | %d threads, %s | finish: %s]\n",
               static_cast<long long>(r.prompt_tokens), r.prefill_tok_s(), r.tokens.size(), r.decode_tok_s(),
               gb_s, load_s, model->n_threads(), model->isa(), r.finish_reason.c_str());
  if (spec) std::fprintf(stderr, "%s\n", spec_text(spec->cfg, sr.stats).c_str());
  if (json_out) {
    nlohmann::json j;
    if (spec) j["spec"] = spec_json(spec->cfg, sr.stats);
    j["text"] = tok.decode(r.tokens, /*skip_special=*/true);
    j["tokens"] = r.tokens;
    j["prompt_tokens"] = r.prompt_tokens;
    j["completion_tokens"] = r.tokens.size();
    j["prefill_tok_s"] = r.prefill_tok_s();
    j["decode_tok_s"] = r.decode_tok_s();
    j["decode_gb_s"] = gb_s;
    j["load_s"] = load_s;
    j["finish_reason"] = r.finish_reason;
    j["threads"] = model->n_threads();
    j["isa"] = model->isa();
    std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::printf("%s\n", s.c_str());
  }
  return 0;
}

}  // namespace blockspec
