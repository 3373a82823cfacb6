// blockspec bench: offline prefill/decode throughput, latency and the
// roofline (achieved GB/s against this machine's measured read bandwidth).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/memory_bandwidth.h"
#include "base/timer.h"
#include "cli/args.h"
#include "cli/bench_serving.h"
#include "cli/bench_spec.h"
#include "cli/commands.h"
#include "cli/model_files.h"
#include "model/transformer.h"
#include "runtime/sampler.h"

namespace blockspec {

namespace {
std::vector<FlagSpec> flags() {
  std::vector<FlagSpec> f = model_flags();
  std::vector<FlagSpec> own = {
    {"--model", "-m", true, "model directory"},
    {"--prompt-len", "", true, "prompt tokens per sequence (default 512)"},
    {"--gen-len", "", true, "generated tokens per sequence (default 64)"},
    {"--concurrency", "-c", true, "sequences decoded together in one batch; with --url: concurrent clients (default 1)"},
    {"--repeats", "-r", true, "repetitions; medians are reported (default 3)"},
    {"--seed", "", true, "seed of the random prompt tokens (default 0)"},
    {"--json", "", false, "print one JSON object on stdout, human output on stderr"},
    {"--help", "-h", false, "show this help"},
    {"--verify-cost", "", true,
     "comma-separated K list: time of one target pass over 1+K tokens vs a 1-token step (default with "
     "--speculative-config: 1,3,7,15)"},
    {"--prompts", "", true, "JSONL prompts for speculative vs plain decoding (e.g. humaneval.jsonl)"},
    {"--prompt-template", "", true, "text with {field} taken from each JSONL line (\\n = newline)"},
    {"--num-prompts", "", true, "prompts used from --prompts (default 8)"},
  };
  own.push_back(spec_flag());
  for (const FlagSpec& s : bench_serving_flags()) own.push_back(s);
  f.insert(f.begin(), own.begin(), own.end());
  return f;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct RepeatStats {
  double prefill_tok_s, decode_tok_s, ttft_ms, tpot_ms, achieved_gb_s;
};

// One repetition: prefill every sequence (one at a time, as a server admits
// them), then decode all of them together for gen_len steps, greedy.
RepeatStats run_once(Transformer& model, int64_t P, int64_t G, int64_t C, Rng& rng) {
  const ModelConfig& cfg = model.config();
  std::vector<KvCache> caches;
  std::vector<int32_t> next(C);
  std::vector<double> ttft;
  std::vector<float> logits;
  double prefill_s = 0;
  for (int64_t s = 0; s < C; ++s) {
    caches.push_back(model.new_cache(P + G));
    std::vector<int32_t> prompt(P);
    for (auto& t : prompt) t = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(cfg.vocab_size));
    Timer t;
    model.prefill(prompt.data(), P, caches.back(), logits, false);
    next[s] = argmax(logits.data(), cfg.vocab_size);
    double e = t.seconds();
    prefill_s += e;
    ttft.push_back(e * 1e3);
  }
  // Bytes a decode step reads: all weights once, plus each sequence's K and V,
  // plus (hybrid models) each sequence's recurrent state, read once (it is
  // written back once too; writes are not counted, as for the KV row).
  const double kv_row_bytes = static_cast<double>(model.kv_bytes_per_token());  // of the cache's dtype
  const double state_bytes = 4.0 * static_cast<double>(model.state_floats_per_sequence());
  double bytes = 0;
  std::vector<double> step_ms;
  Timer total;
  for (int64_t step = 1; step < G; ++step) {
    std::vector<Transformer::SeqChunk> chunks;
    for (int64_t s = 0; s < C; ++s) chunks.push_back({&next[s], 1, &caches[s], false});
    Timer t;
    model.forward_batch(chunks, logits);
    for (int64_t s = 0; s < C; ++s) next[s] = argmax(logits.data() + s * cfg.vocab_size, cfg.vocab_size);
    step_ms.push_back(t.seconds() * 1e3);
    bytes += static_cast<double>(model.weight_bytes());
    for (int64_t s = 0; s < C; ++s) bytes += kv_row_bytes * static_cast<double>(caches[s].size()) + state_bytes;
  }
  const double decode_s = total.seconds();
  RepeatStats r;
  r.prefill_tok_s = static_cast<double>(P * C) / prefill_s;
  r.decode_tok_s = decode_s > 0 ? static_cast<double>((G - 1) * C) / decode_s : 0;
  r.ttft_ms = median(ttft);
  r.tpot_ms = median(step_ms);
  r.achieved_gb_s = decode_s > 0 ? bytes / decode_s / 1e9 : 0;
  return r;
}
}  // namespace

int cmd_bench(const std::vector<std::string>& argv) {
  Args a("bench", flags(), argv);
  if (a.has("--help")) {
    std::fputs(Args::usage("bench", "-m MODEL_DIR [--prompt-len P --gen-len G --concurrency C --repeats R] [--json]",
                           flags()).c_str(), stdout);
    return 0;
  }
  if (!a.positionals().empty()) fail("bench: unexpected argument \"", a.positionals()[0], "\"");
  if (a.has("--url")) {  // serving benchmark against a running server
    if (a.has("--model")) fail("bench: --url and --model exclude each other");
    nlohmann::json j = bench_serving(a);
    if (a.has("--json")) std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  const std::string dir = a.required("--model");
  const int64_t P = a.integer("--prompt-len", 512), G = a.integer("--gen-len", 64);
  const int64_t C = a.integer("--concurrency", 1), R = a.integer("--repeats", 3);
  if (P < 1) fail("bench: --prompt-len must be >= 1, found ", P);
  if (G < 2) fail("bench: --gen-len must be >= 2, found ", G);
  if (C < 1 || C > 256) fail("bench: --concurrency must be in [1, 256], found ", C);
  if (R < 1) fail("bench: --repeats must be >= 1, found ", R);
  ModelOptions mo = model_options(a);
  const bool json_out = a.has("--json");

  auto model = Transformer::load(dir, mo);
  if (P + G > model->config().max_position_embeddings)
    fail("bench: prompt-len + gen-len = ", P + G, " exceeds max_position_embeddings ",
         model->config().max_position_embeddings);
  Rng rng(a.u64("--seed", 0));
  run_once(*model, std::min<int64_t>(P, 16), 4, 1, rng);  // warm-up: page in the mmapped weights
  // Read bandwidth in this process, with decode's threads and ISA, before and after the decode runs. The buffer
  // is at least 1 GiB and at least the weights' size, so it is no more cache-resident than the weights are; the
  // peak RSS is reset after the probe (and read before the second one) so the buffer never counts in it.
  const size_t probe_bytes = std::max<size_t>(size_t{1} << 30, model->weight_bytes());
  const BandwidthResult bw_before = model->measure_read_bandwidth(probe_bytes);
  const bool rss_reset = reset_peak_rss();
  std::vector<RepeatStats> reps;
  const std::vector<double> cpu0 = model->thread_cpu_seconds();
  Timer wall;
  for (int64_t r = 0; r < R; ++r) {
    reps.push_back(run_once(*model, P, G, C, rng));
    const auto& s = reps.back();
    std::fprintf(stderr, "repeat %lld: prefill %.1f tok/s, decode %.2f tok/s, TTFT %.1f ms, TPOT %.1f ms, %.2f GB/s\n",
                 static_cast<long long>(r + 1), s.prefill_tok_s, s.decode_tok_s, s.ttft_ms, s.tpot_ms,
                 s.achieved_gb_s);
  }
  // CPU time of each of our threads over the timed repeats against their wall time: a thread the kernel
  // descheduled (another process on its core) shows up as CPU time well below the wall time.
  const double wall_s = wall.seconds();
  std::vector<double> cpu_s = model->thread_cpu_seconds();
  for (size_t i = 0; i < cpu_s.size() && i < cpu0.size(); ++i) cpu_s[i] -= cpu0[i];
  {
    std::string line;
    for (double c : cpu_s) line += str_cat(line.empty() ? "" : ", ", std::round(c * 100) / 100, " s");
    std::fprintf(stderr, "threads: %s; CPU time %s over %.2f s wall (the caller, then each worker)\n",
                 threads_line(*model, mo).c_str(), line.c_str(), wall_s);
  }
  // Speculative decoding: verification cost per K, and spec vs plain decode
  // on real prompts (each checked lossless) at concurrency 1.
  // Real prompts (tokenized) for speculative vs plain decoding.
  std::vector<std::vector<int32_t>> spec_prompts;
  int64_t longest = P;
  if (a.has("--prompts")) {
    if (!a.has("--speculative-config")) fail("bench: --prompts needs --speculative-config");
    Tokenizer tok = load_tokenizer(dir);
    for (const std::string& t :
         load_prompts(a.str("--prompts"), a.str("--prompt-template"), a.integer("--num-prompts", 8))) {
      spec_prompts.push_back(tok.encode(t));
      longest = std::max<int64_t>(longest, static_cast<int64_t>(spec_prompts.back().size()));
    }
    if (longest + G + 64 > model->config().max_position_embeddings)
      fail("bench: the longest prompt (", longest, " tokens) + gen-len exceeds max_position_embeddings");
  }
  auto spec = open_spec(a, *model, longest + G + 64);
  nlohmann::json verify_cost, spec_decode;
  if (a.has("--verify-cost") || spec) {
    std::vector<int64_t> ks;
    std::string list = a.str("--verify-cost", "1,3,7,15");
    for (size_t i = 0; i <= list.size();) {
      size_t e = list.find(',', i);
      if (e == std::string::npos) e = list.size();
      const std::string item = list.substr(i, e - i);
      char* end = nullptr;
      const long long k = std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || k < 1 || k > 64)
        fail("bench: --verify-cost: \"", item, "\" is not a K in [1, 64]");
      ks.push_back(k);
      i = e + 1;
    }
    verify_cost = bench_verify_cost(*model, spec ? spec->proposer.get() : nullptr, ks, P, std::max<int64_t>(R, 5));
    std::fprintf(stderr, "verification cost after a %lld-token prompt (1-token step %.2f ms):\n",
                 static_cast<long long>(P), verify_cost["decode_1_token_ms"].get<double>());
    for (const auto& r : verify_cost["per_k"]) {
      std::string draft = r.contains("draft_ms") ? ", draft pass " + std::to_string(r["draft_ms"].get<double>()) + " ms"
                                                 : std::string();
      std::fprintf(stderr, "  K=%-3lld verify %.2f ms = %.2fx%s\n", static_cast<long long>(r["k"].get<int64_t>()),
                   r["verify_ms"].get<double>(), r["ratio"].get<double>(), draft.c_str());
    }
  }
  if (spec && !spec_prompts.empty()) {
    spec_decode = bench_spec_decode(*model, *spec, spec_prompts, G, R);
    std::fprintf(stderr, "speculative decoding (%s): plain %.2f tok/s, spec %.2f tok/s, speedup x%.2f (median)\n%s\n",
                 spec->cfg.method_name(), spec_decode["plain_decode_tok_s_p50"].get<double>(),
                 spec_decode["spec_decode_tok_s_p50"].get<double>(), spec_decode["speedup_p50"].get<double>(),
                 spec_decode["spec"].dump().c_str());
  }
  const double peak_rss = peak_rss_mb();
  const BandwidthResult bw_after = model->measure_read_bandwidth(probe_bytes);
  auto med = [&](double RepeatStats::*f) {
    std::vector<double> v;
    for (const auto& s : reps) v.push_back(s.*f);
    return median(v);
  };
  nlohmann::json j;
  j["model"] = dir;
  j["weights"] = model->weights().format_summary;
  j["threads"] = model->n_threads();
  j["thread_cpu_s"] = cpu_s;
  j["wall_s"] = wall_s;
  j["isa"] = model->isa();
  j["activations"] = model->bf16_activations() ? "bf16" : "f32";
  j["concurrency"] = C;
  j["prompt_tokens"] = P;
  j["gen_tokens"] = G;
  j["repeats"] = R;
  j["prefill_tok_s"] = med(&RepeatStats::prefill_tok_s);
  j["decode_tok_s"] = med(&RepeatStats::decode_tok_s);
  j["ttft_ms_p50"] = med(&RepeatStats::ttft_ms);
  j["tpot_ms_p50"] = med(&RepeatStats::tpot_ms);
  j["achieved_gb_s"] = med(&RepeatStats::achieved_gb_s);
  // The roof is the larger of the two probes (the machine can do at least that); a fraction above 1.0 means
  // the probe under-measured (a busy machine during the probe) or the weights were served from cache.
  const double roof = std::max(bw_before.median_gb_s, bw_after.median_gb_s);
  const int64_t llc = last_level_cache_bytes();
  j["read_bw_gb_s"] = roof;
  j["read_bw_before_gb_s"] = bw_before.median_gb_s;
  j["read_bw_after_gb_s"] = bw_after.median_gb_s;
  j["read_bw_probe_bytes"] = probe_bytes;
  j["llc_bytes"] = llc;
  j["bw_fraction"] = roof > 0 ? j["achieved_gb_s"].get<double>() / roof : 0.0;
  std::string bw_flag;
  if (j["bw_fraction"].get<double>() > 1.0)
    bw_flag = llc > 0 && model->weight_bytes() < static_cast<uint64_t>(llc)
                  ? "bw_fraction > 1.0: the weights fit in the last-level cache, so decode reads them from cache, not DRAM"
                  : "bw_fraction > 1.0: a measurement error (the probe under-measured the machine: was it busy?)";
  else if (std::min(bw_before.median_gb_s, bw_after.median_gb_s) < 0.85 * roof)
    bw_flag = "the probes before and after decode differ by more than 15%: the machine is not quiet";
  j["bw_flag"] = bw_flag;
  j["weight_bytes"] = model->weight_bytes();
  j["kv_cache_dtype"] = kv_dtype_name(model->kv_cache_dtype());
  j["kv_bytes_per_token"] = model->kv_bytes_per_token();
  j["state_bytes_per_sequence"] = 4 * model->state_floats_per_sequence();  // hybrid models' recurrent state (f32)
  j["peak_rss_mb"] = peak_rss;
  j["peak_rss_excludes_probe"] = rss_reset;
  if (!verify_cost.is_null()) j["verify_cost"] = verify_cost;
  if (!spec_decode.is_null()) {
    j["spec_decode"] = spec_decode;
    j["spec"] = spec_decode["spec"];
  }
  std::fprintf(stderr,
               "\n%s | weights %s | %d threads (%s) | concurrency %lld | prompt %lld | gen %lld | %lld repeats\n"
               "  prefill      %10.1f tok/s\n  decode       %10.2f tok/s\n  TTFT p50     %10.1f ms\n"
               "  TPOT p50     %10.2f ms\n  achieved     %10.2f GB/s\n"
               "  read bw      %10.2f GB/s (probe before decode %.2f, after %.2f; %s, %d threads)\n"
               "  bw fraction  %10.3f%s%s\n  peak RSS     %10.1f MB\n",
               dir.c_str(), j["weights"].get<std::string>().c_str(), model->n_threads(), model->isa(),
               static_cast<long long>(C), static_cast<long long>(P), static_cast<long long>(G),
               static_cast<long long>(R), j["prefill_tok_s"].get<double>(), j["decode_tok_s"].get<double>(),
               j["ttft_ms_p50"].get<double>(), j["tpot_ms_p50"].get<double>(), j["achieved_gb_s"].get<double>(),
               roof, bw_before.median_gb_s, bw_after.median_gb_s, model->isa(), model->n_threads(),
               j["bw_fraction"].get<double>(), bw_flag.empty() ? "" : "   <- ", bw_flag.c_str(), peak_rss);
  if (json_out) std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace blockspec
