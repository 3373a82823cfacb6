// blockspec eval --model A --reference B --text FILE [--ctx N] [--max-tokens N] [--json]
//
// Fidelity of model A (e.g. a quantized checkpoint, or the same checkpoint
// with --weights q4) against reference B over a text: perplexity of both,
// KL(B || A) per scored position (mean and p99) and top-1 agreement.
// The text is cut into non-overlapping windows of --ctx tokens; each window
// is a fresh sequence for both models, and every position t > 0 of it is
// scored on the token that follows t - 1. Both models stay loaded, since KL
// needs both distributions at the same position.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "base/timer.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_files.h"
#include "model/transformer.h"
#include "runtime/fidelity.h"
#include "tensor/quant_tensor.h"
#include "tokenizer/tokenizer.h"

namespace blockspec {

namespace {
// --kv-cache-dtype (from model_flags) sets the model's KV cache;
// --reference-kv-cache-dtype the reference's (default f32, so a run measures
// the KV quantization error against an exact cache when both share weights).
std::vector<FlagSpec> flags() {
  std::vector<FlagSpec> f = model_flags();
  std::vector<FlagSpec> own = {
    {"--model", "-m", true, "model under test: HF directory or GGUF file"},
    {"--reference", "", true, "reference model: HF directory or GGUF file"},
    {"--reference-weights", "", true, "reference weight format: f32, bf16, q8, q4 (default: stored precision)"},
    {"--reference-kv-cache-dtype", "", true,
     "reference KV cache dtype: auto, f32, bf16, fp8_e4m3, int8_per_token_head, int8_block_g128 (default f32)"},
    {"--text", "", true, "text file to score (UTF-8)"},
    {"--ctx", "", true, "tokens per window; each window is a fresh sequence (default 512)"},
    {"--max-tokens", "", true, "scored tokens in total (default: the whole text)"},
    {"--json", "", false, "print one JSON object on stdout, human output on stderr"},
    {"--help", "-h", false, "show this help"},
  };
  f.insert(f.begin(), own.begin(), own.end());
  return f;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("eval: --text ", path, ": cannot open (", std::strerror(errno), ")");
  std::ostringstream s;
  s << f.rdbuf();
  if (f.bad()) fail("eval: --text ", path, ": read error");
  std::string text = s.str();
  if (text.empty()) fail("eval: --text ", path, ": file is empty; expected some text to score");
  return text;
}

// Both models must see the same token ids, or their distributions are over
// different things and KL means nothing.
void check_same_tokens(const std::vector<int32_t>& a, const std::vector<int32_t>& b, const std::string& model,
                       const std::string& ref) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i])
      fail("eval: tokenizers of ", model, " and ", ref, " disagree on the text at token ", i, " (id ", a[i],
           " vs ", b[i], "); eval needs models that share a tokenizer");
  if (a.size() != b.size())
    fail("eval: tokenizers of ", model, " and ", ref, " disagree on the text at token ", n, " (", a.size(),
         " vs ", b.size(), " tokens in all); eval needs models that share a tokenizer");
}

void check_model(const Transformer& m, const Tokenizer& tok, const std::string& path, int64_t ctx) {
  const ModelConfig& c = m.config();
  if (tok.vocab_size() > c.vocab_size)
    fail("eval: ", path, ": tokenizer has ", tok.vocab_size(), " tokens but config vocab_size is ", c.vocab_size);
  if (ctx > c.max_position_embeddings)
    fail("eval: --ctx ", ctx, " exceeds max_position_embeddings ", c.max_position_embeddings, " of ", path,
         "; pass a smaller --ctx");
}

struct Window {
  int64_t start, n;  // tokens [start, start + n)
};

// Non-overlapping windows of ctx tokens; a window of n tokens scores n - 1.
// The last one is cut so that at most max_scored tokens are scored in all.
std::vector<Window> make_windows(int64_t n_ids, int64_t ctx, int64_t max_scored) {
  std::vector<Window> w;
  int64_t scored = 0;
  for (int64_t start = 0; start + 1 < n_ids && scored < max_scored; start += ctx) {
    const int64_t n = std::min({ctx, n_ids - start, max_scored - scored + 1});
    w.push_back({start, n});
    scored += n - 1;
  }
  return w;
}
}  // namespace

int cmd_eval(const std::vector<std::string>& argv) {
  Args a("eval", flags(), argv);
  if (a.has("--help")) {
    std::fputs(Args::usage("eval", "-m MODEL --reference REF --text FILE [--ctx N] [--max-tokens N] [--json]",
                           flags()).c_str(), stdout);
    return 0;
  }
  if (!a.positionals().empty()) fail("eval: unexpected argument \"", a.positionals()[0], "\"");
  const std::string model_path = a.required("--model");
  const std::string ref_path = a.required("--reference");
  const std::string text_path = a.required("--text");
  const int64_t ctx = a.integer("--ctx", 512);
  if (ctx < 2) fail("eval: --ctx must be >= 2 (one context token and one scored token), found ", ctx);
  const bool has_max = a.has("--max-tokens");
  const int64_t max_tokens = a.integer("--max-tokens", 0);
  if (has_max && max_tokens < 1) fail("eval: --max-tokens must be >= 1, found ", max_tokens);
  ModelOptions mo = model_options(a);
  ModelOptions ro = mo;
  ro.weights.reset();
  if (a.has("--reference-weights")) {
    auto f = weight_format_from_name(a.str("--reference-weights"));
    if (!f)
      fail("eval: --reference-weights: unknown format \"", a.str("--reference-weights"),
           "\" (expected f32, bf16, q8, q4, fp8, nvfp4 or mxfp4)");
    ro.weights = f;
  }
  ro.kv_cache_dtype = parse_kv_cache_dtype("--reference-kv-cache-dtype", a.str("--reference-kv-cache-dtype", "f32"));
  const bool json_out = a.has("--json");

  Timer timer;
  const std::string text = read_text(text_path);
  Tokenizer tok = load_tokenizer(model_path);
  const std::vector<int32_t> ids = tok.encode(text);
  if (ids.size() < 2)
    fail("eval: --text ", text_path, " is ", ids.size(), " token(s) long; at least 2 are needed to score one");
  check_same_tokens(ids, load_tokenizer(ref_path).encode(text), model_path, ref_path);

  auto model = Transformer::load(model_path, mo);
  auto ref = Transformer::load(ref_path, ro);
  const int64_t vocab = model->config().vocab_size;
  if (ref->config().vocab_size != vocab)
    fail("eval: vocab_size of ", model_path, " is ", vocab, " but of ", ref_path, " is ",
         ref->config().vocab_size, "; eval needs the same vocabulary");
  check_model(*model, tok, model_path, ctx);
  check_model(*ref, tok, ref_path, ctx);

  const int64_t n_ids = static_cast<int64_t>(ids.size());
  const std::vector<Window> windows = make_windows(n_ids, ctx, has_max ? max_tokens : n_ids);
  FidelityStats stats;
  std::vector<float> logits_a, logits_b;  // [n, vocab] each
  for (size_t wi = 0; wi < windows.size(); ++wi) {
    const Window& w = windows[wi];
    KvCache cache_a = model->new_cache(w.n), cache_b = ref->new_cache(w.n);
    model->prefill(ids.data() + w.start, w.n, cache_a, logits_a, /*all_logits=*/true);
    ref->prefill(ids.data() + w.start, w.n, cache_b, logits_b, /*all_logits=*/true);
    for (int64_t t = 0; t + 1 < w.n; ++t)
      stats.add(logits_a.data() + t * vocab, logits_b.data() + t * vocab, vocab, ids[w.start + t + 1]);
    std::fprintf(stderr, "window %zu/%zu: %lld tokens scored, ppl %.4f, ppl_reference %.4f, kld_mean %.6f\n",
                 wi + 1, windows.size(), static_cast<long long>(stats.n_tokens()), stats.ppl(),
                 stats.ppl_reference(), stats.kld_mean());
  }
  const double seconds = timer.seconds();

  nlohmann::json j;
  j["model"] = model_path;
  j["reference"] = ref_path;
  j["weights"] = model->weights().format_summary;
  j["reference_weights"] = ref->weights().format_summary;
  j["kv_cache_dtype"] = kv_dtype_name(model->kv_cache_dtype());
  j["reference_kv_cache_dtype"] = kv_dtype_name(ref->kv_cache_dtype());
  j["ctx"] = ctx;
  j["n_windows"] = windows.size();
  j["n_tokens"] = stats.n_tokens();
  j["ppl"] = stats.ppl();
  j["ppl_reference"] = stats.ppl_reference();
  j["kld_mean"] = stats.kld_mean();
  j["kld_p99"] = stats.kld_p99();
  j["kld_max"] = stats.kld_max();
  j["top1_agreement"] = stats.top1_agreement();
  j["threads"] = model->n_threads();
  j["isa"] = model->kernels().isa;
  j["activations"] = model->bf16_activations() ? "bf16" : "f32";
  j["seconds"] = seconds;
  std::fprintf(stderr,
               "\n%s (weights %s, kv %s)\n  vs reference %s (weights %s, kv %s)\n"
               "  %lld tokens scored in %zu windows of <= %lld | %d threads (%s) | %.1f s\n"
               "  ppl            %12.4f\n  ppl reference  %12.4f\n  KL mean        %12.6f\n"
               "  KL p99         %12.6f\n  KL max         %12.6f\n  top-1 agree    %12.4f\n",
               model_path.c_str(), j["weights"].get<std::string>().c_str(), kv_dtype_name(model->kv_cache_dtype()),
               ref_path.c_str(), j["reference_weights"].get<std::string>().c_str(),
               kv_dtype_name(ref->kv_cache_dtype()), static_cast<long long>(stats.n_tokens()),
               windows.size(), static_cast<long long>(ctx), model->n_threads(), model->kernels().isa, seconds,
               stats.ppl(), stats.ppl_reference(), stats.kld_mean(), stats.kld_p99(), stats.kld_max(),
               stats.top1_agreement());
  if (json_out) std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace blockspec
