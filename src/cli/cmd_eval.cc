// blockspec eval --model A --reference B --text FILE [--ctx N] [--max-tokens N] [--candidates LIST] [--json]
//
// --candidates scores several variants of A (weight formats, KV dtypes, or
// other checkpoints given as PATH=WEIGHTS) in one pass over the text: the
// reference runs once per window, each distinct checkpoint and weight format
// is loaded once, and KV variants share it.
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
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "base/timer.h"
#include "chat/chat_template.h"
#include "cli/args.h"
#include "cli/bench_spec.h"
#include "cli/commands.h"
#include "cli/model_files.h"
#include "model/chat_files.h"
#include "model/transformer.h"
#include "runtime/fidelity.h"
#include "runtime/fidelity_run.h"
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
    {"--reference-activations", "", true, "reference activation precision: f32 (default) or bf16"},
    {"--candidates", "", true,
     "score several variants against one reference pass: comma-separated [PATH=]WEIGHTS[:KV] (PATH another "
     "checkpoint, default --model; WEIGHTS a --weights format or \"stored\"; KV a --kv-cache-dtype; e.g. "
     "q8,q4,bf16:int8_block_g128,out/w4a16-gptq=stored)"},
    {"--text", "", true, "text file to score (UTF-8)"},
    {"--ctx", "", true, "tokens per window; each window is a fresh sequence (default 512)"},
    {"--max-tokens", "", true, "scored tokens in total (default: the whole text)"},
    {"--state", "", true,
     "save the scores after every window to FILE (JSON) and, when FILE exists from the same command, continue "
     "after its last window (a long eval can stop and resume)"},
    {"--stop-after-windows", "", true, "with --state: stop after window N (the state is saved; run again to continue)"},
    {"--greedy-prompts", "", true,
     "JSONL prompts (\"prompt\", \"turns\"[0] or \"question\"; --prompt-template) for greedy agreement: each is "
     "rendered with the reference's chat template and continued greedily by the reference and every candidate"},
    {"--greedy-num-prompts", "", true, "prompts of --greedy-prompts used (default 52)"},
    {"--greedy-tokens", "", true, "greedy tokens per prompt (default 64; a sequence also ends at EOS)"},
    {"--prompt-template", "", true, "build each greedy prompt from the line's fields, e.g. \"{question}\""},
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

// One variant of the model under test: its weight format (nullopt: stored)
// and KV cache dtype (nullopt: the model's auto rule).
struct Candidate {
  std::string path;  // checkpoint
  std::optional<WeightFormat> weights;
  std::optional<KvDType> kv;
  std::string weights_key;  // groups candidates that share one loaded model: path=weights
};

// [PATH=]WEIGHTS[:KV]; the KV colon is searched after the '=' so paths may hold ':'.
std::vector<Candidate> parse_candidates(const std::string& list, const std::string& model_path) {
  std::vector<Candidate> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) fail("eval: --candidates \"", list, "\": empty entry");
    Candidate c;
    c.path = model_path;
    std::string spec = item;
    const size_t eq = item.rfind('=');
    if (eq != std::string::npos) {
      c.path = item.substr(0, eq);
      spec = item.substr(eq + 1);
      if (c.path.empty()) fail("eval: --candidates entry \"", item, "\": empty checkpoint path before '='");
    }
    const size_t colon = spec.find(':');
    const std::string w = spec.substr(0, colon);
    if (w != "stored") {
      c.weights = weight_format_from_name(w);
      if (!c.weights)
        fail("eval: --candidates entry \"", item, "\": unknown weight format \"", w,
             "\" (expected stored, f32, bf16, q8, q4, fp8, nvfp4 or mxfp4)");
    }
    if (colon != std::string::npos) c.kv = parse_kv_cache_dtype("--candidates entry \"" + item + "\"", spec.substr(colon + 1));
    c.weights_key = c.path + "=" + w;
    out.push_back(c);
  }
  if (out.empty()) fail("eval: --candidates is empty; expected e.g. q8,q4,bf16:int8_block_g128");
  return out;
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
  const std::string ref_act = a.str("--reference-activations", "f32");
  if (ref_act != "f32" && ref_act != "bf16")
    fail("eval: --reference-activations: unknown precision \"", ref_act, "\" (expected f32 or bf16)");
  ro.emulate_bf16_activations = ref_act == "bf16";
  const bool sweep = a.has("--candidates");
  if (sweep && (a.has("--weights") || a.has("--kv-cache-dtype")))
    fail("eval: --candidates names each variant's weights and KV dtype; drop --weights / --kv-cache-dtype");
  std::vector<Candidate> cands =
      sweep ? parse_candidates(a.str("--candidates"), model_path)
            : std::vector<Candidate>{{model_path, mo.weights, mo.kv_cache_dtype, "-"}};
  const bool json_out = a.has("--json");

  Timer timer;
  const std::string text = read_text(text_path);
  Tokenizer tok = load_tokenizer(model_path);
  const std::vector<int32_t> ids = tok.encode(text);
  if (ids.size() < 2)
    fail("eval: --text ", text_path, " is ", ids.size(), " token(s) long; at least 2 are needed to score one");
  check_same_tokens(ids, load_tokenizer(ref_path).encode(text), model_path, ref_path);
  for (size_t i = 0; i < cands.size(); ++i) {
    bool seen = cands[i].path == model_path;
    for (size_t j = 0; j < i && !seen; ++j) seen = cands[j].path == cands[i].path;
    if (!seen) check_same_tokens(ids, load_tokenizer(cands[i].path).encode(text), model_path, cands[i].path);
  }

  // One loaded model per distinct weight format; its candidates differ only
  // in the KV cache they are given.
  std::vector<std::unique_ptr<Transformer>> models;
  std::vector<size_t> model_of(cands.size());
  std::vector<KvDType> kv_of(cands.size());
  for (size_t i = 0; i < cands.size(); ++i) {
    size_t m = 0;
    while (m < i && cands[m].weights_key != cands[i].weights_key) ++m;
    if (m == i) {
      ModelOptions o = mo;
      o.weights = cands[i].weights;
      o.kv_cache_dtype = sweep ? std::nullopt : mo.kv_cache_dtype;
      model_of[i] = models.size();
      models.push_back(Transformer::load(cands[i].path, o));
    } else {
      model_of[i] = model_of[m];
    }
    const Transformer& t = *models[model_of[i]];
    kv_of[i] = cands[i].kv ? *cands[i].kv : t.kv_cache_dtype();
  }
  auto ref = Transformer::load(ref_path, ro);
  const int64_t vocab = ref->config().vocab_size;
  for (size_t i = 0; i < cands.size(); ++i) {
    const Transformer& m = *models[model_of[i]];
    if (m.config().vocab_size != vocab)
      fail("eval: vocab_size of ", cands[i].path, " is ", m.config().vocab_size, " but of ", ref_path, " is ", vocab,
           "; eval needs the same vocabulary");
    check_model(m, tok, cands[i].path, ctx);
  }
  check_model(*ref, tok, ref_path, ctx);

  const int64_t n_ids = static_cast<int64_t>(ids.size());
  const std::vector<TokenWindow> windows = fidelity_windows(n_ids, ctx, has_max ? max_tokens : n_ids);
  std::vector<FidelityCandidate> fc;
  for (size_t c = 0; c < cands.size(); ++c) fc.push_back({models[model_of[c]].get(), kv_of[c]});
  // --state: what identifies this eval, the windows done and every candidate's accumulated scores.
  const std::string state_path = a.str("--state");
  const nlohmann::json fingerprint = {
      {"model", model_path}, {"reference", ref_path}, {"reference_weights", a.str("--reference-weights")},
      {"reference_kv", kv_dtype_name(ref->kv_cache_dtype())}, {"reference_activations", ref_act},
      {"candidates", a.str("--candidates")}, {"weights", a.str("--weights")}, {"kv", a.str("--kv-cache-dtype")},
      {"text", text_path}, {"text_tokens", ids.size()}, {"ctx", ctx}, {"windows", windows.size()}};
  size_t first_window = 0;
  std::vector<FidelityStats> resumed;
  if (!state_path.empty() && std::ifstream(state_path).good()) {
    nlohmann::json st;
    try {
      st = nlohmann::json::parse(read_text(state_path));
    } catch (const std::exception& e) {
      fail("eval: --state ", state_path, ": not a state file of eval (", e.what(), ")");
    }
    if (!st.contains("fingerprint") || st["fingerprint"] != fingerprint)
      fail("eval: --state ", state_path, " was written by another eval command; delete it or repeat that command");
    first_window = st.at("windows_done").get<size_t>();
    for (const auto& c : st.at("stats"))
      resumed.emplace_back(FidelityState{c.at("sum_nll_a").get<double>(), c.at("sum_nll_b").get<double>(),
                                         c.at("n_agree").get<int64_t>(), c.at("kl").get<std::vector<double>>()});
    std::fprintf(stderr, "eval: resuming after window %zu of %zu (%s)\n", first_window, windows.size(),
                 state_path.c_str());
  }
  auto save_state = [&](size_t done, const std::vector<FidelityStats>& st) {
    nlohmann::json j = {{"fingerprint", fingerprint}, {"windows_done", done}, {"stats", nlohmann::json::array()}};
    for (const FidelityStats& f : st) {
      const FidelityState s = f.state();
      j["stats"].push_back({{"sum_nll_a", s.sum_nll_a}, {"sum_nll_b", s.sum_nll_b}, {"n_agree", s.n_agree}, {"kl", s.kl}});
    }
    const std::string tmp = state_path + ".tmp";
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      f << j.dump();
      if (!f.flush()) fail("eval: --state ", state_path, ": cannot write ", tmp);
    }
    if (std::rename(tmp.c_str(), state_path.c_str()) != 0) fail("eval: --state ", state_path, ": cannot replace it");
  };
  std::vector<TokenWindow> run_windows = windows;
  if (a.has("--stop-after-windows")) {
    if (state_path.empty()) fail("eval: --stop-after-windows needs --state FILE (where the scores so far are kept)");
    const int64_t n = a.integer("--stop-after-windows", 0);
    if (n < 1) fail("eval: --stop-after-windows must be >= 1, found ", n);
    run_windows.resize(std::min<size_t>(windows.size(), static_cast<size_t>(n)));
    if (first_window > run_windows.size()) first_window = run_windows.size(), resumed.clear();
  }
  if (first_window >= run_windows.size() && first_window > 0 && run_windows.size() < windows.size())
    fail("eval: --state ", state_path, " already holds ", first_window, " windows (--stop-after-windows ",
         run_windows.size(), ")");
  const std::vector<FidelityStats> stats = score_fidelity(
      *ref, fc, ids, run_windows,
      [&](size_t wi, const std::vector<FidelityStats>& st) {
        std::fprintf(stderr, "window %zu/%zu: %lld tokens scored, ppl_reference %.4f", wi + 1, windows.size(),
                     static_cast<long long>(st[0].n_tokens()), st[0].ppl_reference());
        for (const FidelityStats& s : st) std::fprintf(stderr, " | ppl %.4f kld_mean %.6f", s.ppl(), s.kld_mean());
        std::fprintf(stderr, "\n");
        if (!state_path.empty()) save_state(wi + 1, st);
      },
      first_window, std::move(resumed));
  // Greedy agreement on prompts: the reference's continuations against each candidate's, batched per model.
  std::vector<GreedyAgreement> greedy;
  int64_t greedy_tokens = 0;
  if (a.has("--greedy-prompts")) {
    greedy_tokens = a.integer("--greedy-tokens", 64);
    if (greedy_tokens < 1) fail("eval: --greedy-tokens must be >= 1, found ", greedy_tokens);
    const int64_t np = a.integer("--greedy-num-prompts", 52);
    if (np < 1) fail("eval: --greedy-num-prompts must be >= 1, found ", np);
    const ChatAssets assets = read_chat_assets(ref_path);
    std::vector<std::vector<int32_t>> prompts;
    for (const std::string& t : load_prompts(a.str("--greedy-prompts"), a.str("--prompt-template"), np)) {
      if (assets.template_source.empty()) {
        prompts.push_back(tok.encode(t));
      } else {
        const ChatTemplate ct(assets.template_source, assets.template_what);
        ChatTemplateOptions co;
        co.bos_token = assets.bos_token, co.eos_token = assets.eos_token;
        prompts.push_back(tok.encode(ct.apply({{"user", t, ""}}, co)));
      }
      if (static_cast<int64_t>(prompts.back().size()) + greedy_tokens > ref->config().max_position_embeddings)
        fail("eval: greedy prompt ", prompts.size(), " (", prompts.back().size(), " tokens) + --greedy-tokens exceeds "
             "max_position_embeddings");
    }
    Timer gt;
    const auto ref_out = greedy_continuations(*ref, ref->kv_cache_dtype(), prompts, greedy_tokens);
    for (size_t c = 0; c < cands.size(); ++c) {
      greedy.push_back(greedy_agreement(ref_out, greedy_continuations(*models[model_of[c]], kv_of[c], prompts,
                                                                      greedy_tokens)));
      std::fprintf(stderr, "greedy: candidate %zu/%zu: %lld/%lld prompts identical (%.1f s)\n", c + 1, cands.size(),
                   static_cast<long long>(greedy.back().identical), static_cast<long long>(greedy.back().n_prompts),
                   gt.seconds());
    }
  }
  const double seconds = timer.seconds();

  auto result = [&](size_t c) {
    const Transformer& m = *models[model_of[c]];
    const FidelityStats& st = stats[c];
    return nlohmann::json{{"model", cands[c].path}, {"weights", m.weights().format_summary}, {"kv_cache_dtype", kv_dtype_name(kv_of[c])},
                          {"activations", m.bf16_activations() ? "bf16" : "f32"},
                          {"n_tokens", st.n_tokens()}, {"ppl", st.ppl()}, {"ppl_reference", st.ppl_reference()},
                          {"kld_mean", st.kld_mean()}, {"kld_p99", st.kld_p99()}, {"kld_max", st.kld_max()},
                          {"top1_agreement", st.top1_agreement()}};
  };
  auto with_greedy = [&](size_t c) {
    nlohmann::json r = result(c);
    if (c < greedy.size())
      r["greedy"] = {{"prompts", greedy[c].n_prompts}, {"identical", greedy[c].identical},
                     {"mean_common_prefix", greedy[c].mean_common_prefix},
                     {"mean_reference_length", greedy[c].mean_length}, {"tokens", greedy_tokens}};
    return r;
  };
  nlohmann::json j = sweep ? nlohmann::json::object() : with_greedy(0);
  j["model"] = model_path;
  j["reference"] = ref_path;
  j["reference_weights"] = ref->weights().format_summary;
  j["reference_kv_cache_dtype"] = kv_dtype_name(ref->kv_cache_dtype());
  j["reference_activations"] = ref->bf16_activations() ? "bf16" : "f32";
  j["ctx"] = ctx;
  j["n_windows"] = windows.size();
  j["n_tokens"] = stats[0].n_tokens();
  j["ppl_reference"] = stats[0].ppl_reference();
  j["threads"] = ref->n_threads();
  j["isa"] = ref->isa();
  j["seconds"] = seconds;
  if (sweep) {
    j["results"] = nlohmann::json::array();
    for (size_t c = 0; c < cands.size(); ++c) j["results"].push_back(with_greedy(c));
  }
  std::fprintf(stderr, "\n%s vs reference %s (weights %s, kv %s, activations %s)\n"
               "  %lld tokens scored in %zu windows of <= %lld | %d threads (%s) | %.1f s | ppl reference %.4f\n",
               model_path.c_str(), ref_path.c_str(), j["reference_weights"].get<std::string>().c_str(),
               kv_dtype_name(ref->kv_cache_dtype()), ref_act.c_str(), static_cast<long long>(stats[0].n_tokens()),
               windows.size(), static_cast<long long>(ctx), ref->n_threads(), ref->isa(), seconds,
               stats[0].ppl_reference());
  std::fprintf(stderr, "  %-28s %-20s %12s %12s %12s %12s %10s%s\n", "weights", "kv", "ppl", "KL mean", "KL p99",
               "KL max", "top-1", greedy.empty() ? "" : "  greedy same");
  for (size_t c = 0; c < cands.size(); ++c) {
    const nlohmann::json r = result(c);
    const std::string g = c < greedy.size() ? str_cat("  ", greedy[c].identical, "/", greedy[c].n_prompts) : "";
    std::fprintf(stderr, "  %-28s %-20s %12.4f %12.6f %12.6f %12.6f %10.4f%s%s%s\n",
                 r["weights"].get<std::string>().c_str(), r["kv_cache_dtype"].get<std::string>().c_str(),
                 stats[c].ppl(), stats[c].kld_mean(), stats[c].kld_p99(), stats[c].kld_max(),
                 stats[c].top1_agreement(), g.c_str(), cands[c].path == model_path ? "" : "  ",
                 cands[c].path == model_path ? "" : cands[c].path.c_str());
  }
  if (json_out) std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace blockspec
