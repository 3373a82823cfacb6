// blockspec ptqr IN OUT --calib FILE [flags]
// Quantization-aware retraining of a dense target whose student runs the
// serving kernels (issue 18, ptqr/ptqr.h); OUT is a compressed-tensors W8A8
// (or --scheme w8a16 / w4a16) G128 checkpoint as `blockspec quantize` writes it.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "quantize/smooth.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_files.h"
#include "formats/dflash_config.h"
#include "ptqr/ptqr.h"
#include "ptqr/ptqr_drafter.h"
#include "tokenizer/tokenizer.h"

namespace blockspec {

namespace {

std::vector<FlagSpec> flags() {
  return {
      {"--scheme", "", true,
       "w8a8 (default: int8 G128 weights, dynamic per-token int8 activations), w8a16 or w4a16 (weight-only G128); "
       "a drafter: w8a8"},
      {"--group", "", true, "weight group size (128)"},
      {"--kv-cache-dtype", "", true,
       "the KV cache dtype the student trains through: f32 (default), bf16, int8_per_token_head, int8_block_g128"},
      {"--calib", "", true, "calibration text file (.jsonl: the string fields of each line)"},
      {"--tokens", "", true, "calibration tokens (default 8192), cut into --window windows"},
      {"--window", "", true, "tokens per causal window (default 512)"},
      {"--steps", "", true, "optimizer steps per layer, one window each (default 100)"},
      {"--lr", "", true, "peak AdamW learning rate of the latent weights (default 1e-5; cosine, 5% warm-up)"},
      {"--dither-start", "", true, "sigma_0 of the rounding dither (default 1.0; 0: no dither)"},
      {"--dither-decay", "", true,
       "sigma_t = sigma_0 r^t, 0 once below 1e-3 (default r: reaches 1e-3 at 80% of --steps)"},
      {"--train-vectors", "", false, "train the layer norms and biases too (written as replaced tensors)"},
      {"--lr-vectors", "", true, "peak AdamW rate of the norms and biases (default 1e-4)"},
      {"--smooth", "", true, "SmoothQuant alpha in (0, 1]: the student starts from the smoothed model (the teacher stays the original)"},
      {"--smooth-mappings", "", true,
       "with --smooth: norms (default; llm-compressor SmoothQuant's input_layernorm -> q/k/v, post_attention_layernorm -> "
       "gate/up) or all (also v_proj -> o_proj and up_proj -> down_proj, AWQ's mapping list)"},
      {"--smooth-attention", "", true,
       "SmoothAttention alpha in (0, 1] (QServe): the keys' outlier channels move into the queries before training, for an int8 KV cache"},
      {"--e2e-steps", "", true,
       "after the block-wise phase, N steps of the end-to-end phase: the codes fixed, every group's scale trained on "
       "the KL of the whole serving student's logits to the teacher's (default 0: none)"},
      {"--e2e-lr", "", true, "peak AdamW rate of the end-to-end phase's scale multipliers (default 1e-4)"},
      {"--e2e-stop-after", "", true, "stop once N end-to-end steps are done; the state is kept, continue with --resume"},
      {"--smooth-tokens", "", true,
       "SmoothQuant / SmoothAttention statistics over the first N calibration tokens (default: all of --tokens)"},
      {"--smooth-search", "", true,
       "comma-separated SmoothQuant alphas: each layer starts from the one whose RTN start fits best (needs --smooth)"},
      {"--smooth-search-mappings", "", false,
       "with --smooth-search: then each mapping's alpha in turn (q/k/v, gate/up, o, down) over the same alphas"},
      {"--holdout", "", true,
       "hold the last N windows out of training; each layer keeps the step (0: its start) scoring lowest on them"},
      {"--val-every", "", true, "with --holdout: score the held-out windows every N steps (default 10)"},
      {"--max-layers", "", true, "retrain only the first N layers (the rest are RTN)"},
      {"--seed", "", true, "seed of the dither and the window order (default 0)"},
      {"--stop-after", "", true, "stop once N layers (a drafter: N optimizer steps) are trained; the state is kept, continue with --resume"},
      {"--resume", "", false, "continue from OUT.ptqr-state/ (the last finished layer)"},
      {"--threads", "", true, "worker threads (default: all cores)"},
      {"--target", "", true, "IN is a DFlash drafter: the target whose taps it reads (GGUF or HF directory)"},
      {"--drafter-data", "", true,
       "IN is a DFlash drafter: draft_data.bin of `train-drafter TARGET DIR --data-only` (records, taps)"},
      {"--max-anchors", "", true, "drafter: blocks per training row (default 64)"},
      {"--seq-len", "", true, "drafter: tokens per packed row (default 2048)"},
      {"--json", "", false, "print the report as JSON on stdout"},
      {"--help", "-h", false, "show this help"},
  };
}

// IN is a DFlash drafter (ptqr/ptqr_drafter.h).
int ptqr_drafter(const Args& a, const std::string& in, const std::string& out) {
  for (const char* f : {"--calib", "--tokens", "--window", "--kv-cache-dtype", "--smooth", "--smooth-attention", "--smooth-mappings", "--train-vectors",
                        "--lr-vectors", "--max-layers", "--group", "--smooth-tokens", "--holdout", "--val-every",
                        "--smooth-search", "--smooth-search-mappings"})
    if (a.has(f)) fail("ptqr: ", f, " is for targets; ", in, " is a drafter (see --target, --drafter-data)");
  if (a.str("--scheme", "w8a8") != "w8a8")
    fail("ptqr: --scheme ", a.str("--scheme"), ": a drafter trains w8a8 only so far");
  PtqrDrafterOptions o;
  o.drafter = in, o.out = out;
  o.target = a.required("--target");
  o.data = a.required("--drafter-data");
  o.steps = a.integer("--steps", 200);
  o.lr = a.number("--lr", 1e-5);
  if (!(o.lr > 0 && o.lr < 1)) fail("ptqr: --lr must be in (0, 1), found ", o.lr);
  o.dither_start = a.number("--dither-start", 1.0);
  o.dither_decay = a.number("--dither-decay", 0.0);
  o.max_anchors = a.integer("--max-anchors", 64);
  o.seq_len = a.integer("--seq-len", 2048);
  if (o.max_anchors < 1) fail("ptqr: --max-anchors must be >= 1, found ", o.max_anchors);
  if (o.seq_len < 16) fail("ptqr: --seq-len must be >= 16, found ", o.seq_len);
  o.seed = a.u64("--seed", 0);
  o.resume = a.has("--resume");
  o.stop_after_steps = a.integer("--stop-after", -1);  // a drafter: steps
  o.n_threads = static_cast<int>(a.integer("--threads", 0));
  const PtqrDrafterReport r = run_ptqr_drafter(o);
  if (r.stopped) {
    std::fprintf(stderr, "ptqr: stopped after %lld steps; continue with the same command and --resume\n",
                 static_cast<long long>(r.resumed_from + r.steps));
    return 0;
  }
  FILE* h = a.has("--json") ? stderr : stdout;
  auto acc = [](const std::vector<double>& v) {
    std::string s;
    for (size_t k = 1; k < v.size(); ++k) s += (k > 1 ? " " : "") + std::to_string(v[k]).substr(0, 5);
    return s;
  };
  std::fprintf(h, "held-out (%lld records): %-14s %-10s %-6s %s\n", static_cast<long long>(r.n_val_records), "drafter",
               "KL", "eal", "accuracy per slot");
  for (const auto& [name, e] : {std::pair<const char*, const PtqrDrafterEval&>{"bf16 (teacher)", r.teacher},
                                {"W8A8 RTN", r.rtn}, {"W8A8 PTQR", r.trained}})
    std::fprintf(h, "  %-14s %-10.5f %-6.3f %s\n", name, e.kl, e.eal, acc(e.slot_acc).c_str());
  double worst = 0;
  std::string worst_m;
  for (const auto& [m, e] : r.rel_err)
    if (e > worst) worst = e, worst_m = m;
  std::fprintf(h, "ptqr: %lld steps (resumed at %lld) on %lld training records; %.0f s, %.0f context tok/s, peak RSS "
               "%.0f MB; wrote %s (%.1f MB, %lld tensors copied byte for byte; largest relative dequantization "
               "error %.5f, %s)\n",
               static_cast<long long>(r.steps), static_cast<long long>(r.resumed_from),
               static_cast<long long>(r.n_train_records), r.seconds, r.tokens_per_s, r.peak_rss_mb, out.c_str(),
               r.out_bytes / 1e6, static_cast<long long>(r.n_copied), worst, worst_m.c_str());
  if (a.has("--json")) {
    nlohmann::ordered_json j;
    j["out"] = out;
    for (const auto& [name, e] : {std::pair<const char*, const PtqrDrafterEval&>{"teacher", r.teacher},
                                  {"rtn", r.rtn}, {"ptqr", r.trained}})
      j[name] = {{"kl", e.kl}, {"eal", e.eal}, {"slot_acc", e.slot_acc}};
    j["steps"] = r.steps;
    j["seconds"] = r.seconds;
    j["tokens_per_s"] = r.tokens_per_s;
    j["peak_rss_mb"] = r.peak_rss_mb;
    j["copied"] = r.n_copied;
    j["out_bytes"] = r.out_bytes;
    for (const auto& [m, e] : r.rel_err) j["rel_err"][m] = e;
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

}  // namespace

int cmd_ptqr(const std::vector<std::string>& argv) {
  Args a("ptqr", flags(), argv);
  if (a.has("--help")) {
    std::fputs(Args::usage("ptqr", "IN OUT --calib FILE [--kv-cache-dtype int8_block_g128] [--steps N] ...  |  DRAFTER OUT --target T --drafter-data F", flags()).c_str(),
               stdout);
    return 0;
  }
  if (a.positionals().size() != 2) fail("ptqr: expected IN OUT (a dense model and the output directory)");
  if (is_draft_checkpoint(a.positionals()[0])) return ptqr_drafter(a, a.positionals()[0], a.positionals()[1]);
  for (const char* f : {"--target", "--drafter-data", "--max-anchors", "--seq-len"})
    if (a.has(f)) fail("ptqr: ", f, " is for DFlash drafters; ", a.positionals()[0], " is not one");
  PtqrOptions o;
  o.in = a.positionals()[0];
  o.out = a.positionals()[1];
  o.scheme = qscheme_from_name(a.str("--scheme", "w8a8"));  // run_ptqr (ptqr_spec) refuses the float schemes
  o.group = a.integer("--group", 128);
  if (a.has("--kv-cache-dtype")) {
    const auto kv = kv_dtype_from_name(a.str("--kv-cache-dtype"));
    if (!kv) fail("ptqr: --kv-cache-dtype ", a.str("--kv-cache-dtype"), ": expected one of ", kv_dtype_names());
    o.kv = *kv;
  }
  o.window = a.integer("--window", 512);
  o.steps = a.integer("--steps", 100);
  o.lr = a.number("--lr", 1e-5);
  o.dither_start = a.number("--dither-start", 1.0);
  o.dither_decay = a.number("--dither-decay", 0.0);
  o.max_layers = a.integer("--max-layers", -1);
  o.smooth = a.number("--smooth", 0.0);
  o.smooth_attention = a.number("--smooth-attention", 0.0);
  o.smooth_mappings = parse_smooth_mappings(a.str("--smooth-mappings", "norms"));
  if (a.has("--smooth-mappings") && !a.has("--smooth")) fail("--smooth-mappings needs --smooth ALPHA");
  o.smooth_tokens = a.integer("--smooth-tokens", -1);
  if (a.has("--smooth-tokens") && !a.has("--smooth") && !a.has("--smooth-attention"))
    fail("--smooth-tokens needs --smooth ALPHA or --smooth-attention ALPHA");
  if (a.has("--smooth-tokens") && o.smooth_tokens < 1) fail("ptqr: --smooth-tokens ", o.smooth_tokens, ": expected >= 1");
  if (a.has("--smooth-search")) {
    const std::string list = a.str("--smooth-search");
    size_t i = 0;
    while (i <= list.size()) {
      const size_t j = std::min(list.find(',', i), list.size());
      const std::string item = list.substr(i, j - i);
      char* end = nullptr;
      const double v = std::strtod(item.c_str(), &end);
      if (item.empty() || end != item.c_str() + item.size())
        fail("ptqr: --smooth-search ", list, ": \"", item, "\" is not a number (expected e.g. 0.3,0.5,0.7)");
      o.smooth_search.push_back(v);
      i = j + 1;
    }
  }
  o.smooth_search_mappings = a.has("--smooth-search-mappings");
  o.holdout = a.integer("--holdout", 0);
  o.val_every = a.integer("--val-every", 10);
  if (a.has("--val-every") && o.holdout == 0) fail("ptqr: --val-every needs --holdout N");
  o.train_vectors = a.has("--train-vectors");
  o.lr_vectors = a.number("--lr-vectors", 1e-4);
  if (!(o.lr_vectors > 0)) fail("ptqr: --lr-vectors ", o.lr_vectors, ": expected > 0");
  o.seed = a.u64("--seed", 0);
  o.resume = a.has("--resume");
  o.stop_after_layers = a.integer("--stop-after", -1);
  o.e2e_steps = a.integer("--e2e-steps", 0);
  o.e2e_lr = a.number("--e2e-lr", 1e-4);
  o.e2e_stop_after = a.integer("--e2e-stop-after", -1);
  if ((a.has("--e2e-lr") || a.has("--e2e-stop-after")) && o.e2e_steps == 0)
    fail("ptqr: --e2e-lr and --e2e-stop-after need --e2e-steps N");
  o.n_threads = static_cast<int>(a.integer("--threads", 0));
  const int64_t tokens = a.integer("--tokens", 8192);
  if (!a.has("--calib")) fail("ptqr: --calib FILE is required (the text the layers are retrained on)");
  if (tokens < o.window) fail("ptqr: --tokens ", tokens, " is less than one --window (", o.window, ")");
  const Tokenizer tok = load_tokenizer(o.in);
  std::vector<int32_t> ids = tok.encode(read_calib_text(a.str("--calib"), "ptqr"));
  if (static_cast<int64_t>(ids.size()) < tokens)
    std::fprintf(stderr, "ptqr: --calib has only %zu tokens (asked for %lld)\n", ids.size(), static_cast<long long>(tokens));
  else
    ids.resize(tokens);
  o.calib_ids = std::move(ids);
  const PtqrReport r = run_ptqr(o);
  if (r.stopped) {
    if (r.e2e_steps > 0)
      std::fprintf(stderr, "ptqr: stopped in the end-to-end phase; continue with the same command and --resume\n");
    else
      std::fprintf(stderr, "ptqr: stopped after %zu layers; continue with the same command and --resume\n", r.layers.size());
    return 0;
  }
  FILE* h = a.has("--json") ? stderr : stdout;
  std::fprintf(h, "%-6s %-12s %-12s %-8s %-8s%s\n", "layer", "loss RTN", "loss PTQR", "ratio", "seconds",
               o.holdout > 0 ? " held-out RTN  held-out PTQR  kept step" : "");
  for (const PtqrLayerReport& l : r.layers) {
    std::fprintf(h, "%-6lld %-12.6g %-12.6g %-8.3f %-8.0f", static_cast<long long>(l.layer), l.loss_rtn, l.loss_final,
                 l.loss_final / std::max(1e-30, l.loss_rtn), l.seconds);
    if (o.holdout > 0)
      std::fprintf(h, " %-13.6g %-13.6g %-9lld", l.val_rtn, l.val_final, static_cast<long long>(l.kept_step));
    if (!o.smooth_search.empty()) std::fprintf(h, " alpha %s", l.smooth_alphas.describe().c_str());
    std::fprintf(h, "\n");
  }
  std::fprintf(h, "ptqr: %zu layers retrained on %lld windows of %lld tokens (resumed after %lld); %.0f s, "
               "%.0f training tok/s, peak RSS %.0f MB; wrote %s (serve it with --kv-cache-dtype %s)\n",
               r.layers.size(), static_cast<long long>(r.n_windows), static_cast<long long>(r.window_tokens),
               static_cast<long long>(r.resumed_from), r.total_seconds, r.train_tokens_per_s, r.peak_rss_mb,
               o.out.c_str(), kv_dtype_name(o.kv));
  std::fprintf(h, "audit: %lld tensors copied from IN byte for byte, %zu written from new values (smoothed norms), "
               "%.1f MB written\n", static_cast<long long>(r.n_copied), r.replaced.size(), r.out_bytes / 1e6);
  double worst = 0;
  std::string worst_m;
  for (const PtqrLayerReport& l : r.layers)
    for (const auto& [m, e] : l.rel_err)
      if (e > worst) worst = e, worst_m = m;
  if (!worst_m.empty())
    std::fprintf(h, "audit: largest relative dequantization error against the trained masters %.5f (%s)\n", worst,
                 worst_m.c_str());
  if (r.e2e_steps > 0)
    std::fprintf(h, "ptqr e2e: %lld steps (resumed at %lld) in %.0f s, %.0f tok/s: KL over the %s windows "
                 "%.6f -> %.6f, top-1 %.4f -> %.4f; largest scale change %.4f%%%s\n",
                 static_cast<long long>(r.e2e_steps), static_cast<long long>(r.e2e_resumed_from), r.e2e_seconds,
                 r.e2e_tokens_per_s, o.holdout > 0 ? "held-out" : "calibration", r.e2e_kl_before, r.e2e_kl_after,
                 r.e2e_agree_before, r.e2e_agree_after, 100.0 * r.e2e_max_scale_change,
                 o.holdout > 0 ? str_cat("; kept the scales of step ", r.e2e_kept_step).c_str() : "");
  for (const std::string& n : r.notes) std::fprintf(h, "note: %s\n", n.c_str());
  if (a.has("--json")) {
    nlohmann::ordered_json j;
    j["out"] = o.out;
    if (r.e2e_steps > 0)
      j["e2e"] = {{"steps", r.e2e_steps}, {"resumed_from", r.e2e_resumed_from}, {"kl_before", r.e2e_kl_before},
                  {"kl_after", r.e2e_kl_after}, {"agree_before", r.e2e_agree_before},
                  {"agree_after", r.e2e_agree_after}, {"max_scale_change", r.e2e_max_scale_change},
                  {"seconds", r.e2e_seconds}, {"tokens_per_s", r.e2e_tokens_per_s}, {"kept_step", r.e2e_kept_step}};
    j["kv_cache_dtype"] = kv_dtype_name(o.kv);
    j["windows"] = r.n_windows;
    j["window_tokens"] = r.window_tokens;
    j["total_seconds"] = r.total_seconds;
    j["train_tokens_per_s"] = r.train_tokens_per_s;
    j["peak_rss_mb"] = r.peak_rss_mb;
    j["copied"] = r.n_copied;
    j["replaced"] = r.replaced;
    j["out_bytes"] = r.out_bytes;
    for (const PtqrLayerReport& l : r.layers) {
      nlohmann::ordered_json lj = {{"layer", l.layer}, {"loss_rtn", l.loss_rtn}, {"loss_final", l.loss_final},
                                   {"seconds", l.seconds}};
      if (o.holdout > 0) lj["val_rtn"] = l.val_rtn, lj["val_final"] = l.val_final, lj["kept_step"] = l.kept_step;
      if (!o.smooth_search.empty()) {
        lj["smooth_alphas"] = l.smooth_alphas.values();  // q/k/v, gate/up, o, down
        for (const auto& [al, loss] : l.smooth_scores) lj["smooth_scores"].push_back({al.values(), loss});
      }
      for (const auto& [m, e] : l.rel_err) lj["rel_err"][m] = e;
      j["layers"].push_back(lj);
    }
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

}  // namespace blockspec
