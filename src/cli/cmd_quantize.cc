// blockspec quantize IN OUT --scheme SCHEME [--method rtn|gptq] [--format compressed-tensors|gptq] ...
//
// IN: an HF safetensors directory (Qwen3 / Qwen2 / Llama target, DFlash / DFlash2 drafter) or a GGUF file; OUT:
// an HF directory (quantize/quantize.h has the module rules, quantize/writer.h the formats). Prints, per
// quantized layer, the relative output error ||W x - Wq x|| / ||W x|| (calibration inputs when there are any,
// else random inputs), then a summary eval of OUT against IN (KLD, top-1 agreement, perplexities) on held-out
// text: --eval-text, else the calibration text's tokens after the calibration ones.
#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "quantize/smooth.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_files.h"
#include "formats/dflash_config.h"
#include "quantize/drafter_calibration.h"
#include "model/transformer.h"
#include "quantize/quantize.h"
#include "runtime/fidelity_run.h"
#include "tokenizer/tokenizer.h"

namespace blockspec {

namespace {

std::vector<FlagSpec> flags() {
  return {
      {"--scheme", "-s", true, "w8a8, w4a16, w8a16, fp8, nvfp4 or mxfp4"},
      {"--method", "", true, "rtn or gptq (default rtn; gptq needs --calib)"},
      {"--format", "", true, "compressed-tensors (default) or gptq (w4a16 / w8a16 only)"},
      {"--group", "", true, "int schemes: group size 128 (default) or -1 (per channel)"},
      {"--asym", "", false, "w4a16 / w8a16: asymmetric (zero points; GPTQ writes gptq_v2)"},
      {"--act-order", "", false, "gptq: columns by descending Hessian diagonal (static groups, trivial g_idx)"},
      {"--no-act-target", "", false,
       "w8a8 gptq: minimise |(W - Q) x_q| instead of |W x - Q x_q| (x_q: int8-rounded inputs; see docs/quantize.md)"},
      {"--fp8-strategy", "", true, "fp8 scales: channel (default) or tensor"},
      {"--calib", "", true, "calibration text file (.jsonl: the string fields of each line)"},
      {"--calib-tokens", "", true, "calibration tokens (default 2048)"},
      {"--eval-text", "", true,
       "text for the closing eval of OUT against IN (default: the --calib text after its calibration tokens)"},
      {"--eval-tokens", "", true, "tokens scored by the closing eval (default 2048)"},
      {"--no-eval", "", false, "skip the closing eval"},
      {"--kv-cache-scheme", "", true,
       "fp8: also write calibrated FP8 KV cache scales (k_scale / v_scale = absmax / 448 per layer, needs --calib)"},
      {"--calib-window", "", true, "tokens per calibration sequence (default 512)"},
      {"--target", "", true, "drafter input: the target model it drafts for (needed by gptq; its tokenizer reads --calib)"},
      {"--anchor-stride", "", true, "drafter gptq: a block at every n-th calibration position (default 1)"},
      {"--damp", "", true, "gptq dampening, fraction of mean diag(H) (default 0.01)"},
      {"--smooth", "", true,
       "SmoothQuant alpha in (0, 1] (typical 0.5; 0 = off; needs --calib; dense targets): migrate activation outliers "
       "into q/k/v/gate/up_proj before quantizing"},
      {"--smooth-mappings", "", true,
       "with --smooth: norms (default; llm-compressor SmoothQuant's input_layernorm -> q/k/v, post_attention_layernorm -> "
       "gate/up) or all (also v_proj -> o_proj and up_proj -> down_proj, AWQ's mapping list)"},
      {"--smooth-attention", "", true,
       "SmoothAttention alpha in (0, 1] (QServe; typical 0.5; 0 = off; needs --calib; dense targets): move the keys' "
       "outlier channels into the queries, for an int8 KV cache"},
      {"--ignore", "", true, "keep modules dense: glob or re:REGEX on the module name (repeatable)"},
      {"--fc-bits", "", true, "drafter fc: 4, 8 or 16 (dense); default as the scheme"},
      {"--quantize-lm-head", "", false, "quantize lm_head too"},
      {"--threads", "-t", true, "worker threads (default: all cores)"},
      {"--json", "", false, "print the report as one JSON object on stdout"},
      {"--help", "-h", false, "show this help"},
  };
}

}  // namespace

int cmd_quantize(const std::vector<std::string>& argv_in) {
  // --ignore may repeat: collect every value, hand the rest to Args.
  std::vector<std::string> argv, ignore;
  for (size_t i = 0; i < argv_in.size(); ++i) {
    if (argv_in[i] == "--ignore") {
      if (i + 1 >= argv_in.size()) fail("quantize: --ignore needs a value");
      ignore.push_back(argv_in[++i]);
    } else if (argv_in[i].rfind("--ignore=", 0) == 0) {
      ignore.push_back(argv_in[i].substr(9));
    } else {
      argv.push_back(argv_in[i]);
    }
  }
  Args a("quantize", flags(), argv);
  if (a.has("--help")) {
    std::fputs(Args::usage("quantize", "IN OUT --scheme SCHEME [--method rtn|gptq] [--calib FILE] ...", flags()).c_str(),
               stdout);
    return 0;
  }
  if (a.positionals().size() != 2) fail("quantize: expected IN OUT (an HF directory or GGUF file, and the output directory)");
  QuantizeOptions o;
  o.in = a.positionals()[0];
  o.out = a.positionals()[1];
  o.scheme = qscheme_from_name(a.required("--scheme"));
  const std::string method = a.str("--method", "rtn");
  if (method != "rtn" && method != "gptq") fail("--method \"", method, "\": expected rtn or gptq");
  o.gptq = method == "gptq";
  const std::string fmt = a.str("--format", "compressed-tensors");
  if (fmt != "compressed-tensors" && fmt != "gptq") fail("--format \"", fmt, "\": expected compressed-tensors or gptq");
  o.format = fmt == "gptq" ? QFormat::kGptq : QFormat::kCompressedTensors;
  o.group = a.integer("--group", 128);
  o.asym = a.has("--asym");
  o.act_order = a.has("--act-order");
  o.act_target = !a.has("--no-act-target");
  if (!o.act_target && !(o.gptq && o.scheme == QScheme::kW8A8)) fail("--no-act-target is for --scheme w8a8 --method gptq");
  if (o.act_order && !o.gptq) fail("--act-order needs --method gptq");
  o.fp8_strategy = a.str("--fp8-strategy", "channel");
  o.fc_bits = static_cast<int>(a.integer("--fc-bits", 0));
  o.quantize_lm_head = a.has("--quantize-lm-head");
  o.ignore = ignore;
  o.damp = a.number("--damp", 0.01);
  o.smooth = a.number("--smooth", 0.0);
  o.smooth_attention = a.number("--smooth-attention", 0.0);
  o.smooth_mappings = parse_smooth_mappings(a.str("--smooth-mappings", "norms"));
  if (a.has("--smooth-mappings") && !a.has("--smooth")) fail("--smooth-mappings needs --smooth ALPHA");
  o.n_threads = static_cast<int>(a.integer("--threads", 0));
  if (a.has("--kv-cache-scheme")) {
    if (a.str("--kv-cache-scheme") != "fp8")
      fail("--kv-cache-scheme \"", a.str("--kv-cache-scheme"), "\": expected fp8 (per-layer FP8 K / V scales)");
    if (!a.has("--calib")) fail("--kv-cache-scheme fp8 needs --calib FILE (the scales come from calibration K / V)");
    o.kv_fp8 = true;
  }
  o.calib_window = a.integer("--calib-window", 512);
  if (o.calib_window <= 0) fail("--calib-window must be > 0");
  const int64_t calib_tokens = a.integer("--calib-tokens", 2048);
  o.target = a.str("--target", "");
  o.anchor_stride = a.integer("--anchor-stride", 1);
  if (o.anchor_stride <= 0) fail("--anchor-stride must be > 0");
  const bool draft = is_draft_checkpoint(o.in);
  std::vector<int32_t> held_out;  // calibration text after the calibration tokens: the default eval text
  const int64_t eval_tokens = a.integer("--eval-tokens", 2048);
  if (eval_tokens < 1) fail("--eval-tokens must be >= 1, found ", eval_tokens);
  const bool do_eval = !draft && !a.has("--no-eval");
  std::string eval_text;
  if (a.has("--eval-text")) {
    if (draft) fail("quantize: --eval-text is for a target model (a drafter is checked by check / bench, not eval)");
    eval_text = read_calib_text(a.str("--eval-text"), "quantize");  // fails naming the file before any work
  }
  if (!draft && !o.target.empty())
    fail("quantize: --target is only for a drafter input (", o.in, " is not a DFlash / DFlash2 drafter)");
  if (draft && o.gptq && o.target.empty())
    fail("quantize: --method gptq on drafter ", o.in, " needs --target TARGET (the model it drafts for)");
  if (draft && !o.target.empty()) check_drafter_against_target(o.in, o.target);  // before tokenizing with it
  if (a.has("--calib")) {
    if (draft && o.target.empty()) {
      std::fprintf(stderr, "quantize: %s is a drafter: --calib is not used without --target (RTN)\n", o.in.c_str());
    } else {
      // A drafter has no tokenizer of its own: the calibration text is the target's tokens.
      const Tokenizer tok = load_tokenizer(draft ? o.target : o.in);
      std::vector<int32_t> ids = tok.encode(read_calib_text(a.str("--calib"), "quantize"));
      if (static_cast<int64_t>(ids.size()) > calib_tokens) held_out.assign(ids.begin() + calib_tokens, ids.end());
      if (static_cast<int64_t>(ids.size()) < calib_tokens)
        std::fprintf(stderr, "quantize: --calib has only %zu tokens (asked for %lld)\n", ids.size(),
                     static_cast<long long>(calib_tokens));
      else
        ids.resize(calib_tokens);
      o.calib_ids = std::move(ids);
    }
  } else if (o.gptq) {
    fail("quantize: --method gptq needs --calib FILE (calibration text)");
  }
  const bool json_out = a.has("--json");
  const QuantizeReport r = quantize_model(o);
  FILE* hout = json_out ? stderr : stdout;
  std::fprintf(hout, "%-52s %-34s %s\n", "module", "quantization",
               r.calib_tokens ? "rel. output error (calib)  calib rows" : "rel. output error (random x)");
  for (const LayerReport& l : r.layers) {
    if (l.on_calib)
      std::fprintf(hout, "%-52s %-34s %.5f  %lld\n", l.module.c_str(), l.how.c_str(), l.rel_err,
                   static_cast<long long>(l.calib_rows));
    else
      std::fprintf(hout, "%-52s %-34s %.5f%s\n", l.module.c_str(), l.how.c_str(), l.rel_err,
                   r.calib_tokens ? " (random x)" : "");
  }
  double mean = 0;
  for (const LayerReport& l : r.layers) mean += l.rel_err;
  if (!r.layers.empty()) mean /= static_cast<double>(r.layers.size());
  std::fprintf(hout, "%zu modules quantized (mean rel. error %.5f), %zu linears dense, %lld tensors copied, %.1f MB written",
               r.layers.size(), mean, r.dense_linears.size(), static_cast<long long>(r.n_copied), r.out_bytes / 1e6);
  if (r.calib_tokens) std::fprintf(hout, "; calibration %lld tokens, %.1f s", static_cast<long long>(r.calib_tokens), r.calib_seconds);
  if (r.calib_blocks) std::fprintf(hout, " (%lld drafter blocks)", static_cast<long long>(r.calib_blocks));
  std::fprintf(hout, "; %.1f s total\n", r.total_seconds);
  if (!r.replaced.empty())
    std::fprintf(hout, "%zu tensors replaced before quantizing (%s%s)\n", r.replaced.size(), r.replaced[0].c_str(),
                 r.replaced.size() > 1 ? ", ..." : "");
  for (const std::string& n : r.notes) std::fprintf(hout, "note: %s\n", n.c_str());
  if (!r.kv_k_scale.empty()) {
    const auto [k0, k1] = std::minmax_element(r.kv_k_scale.begin(), r.kv_k_scale.end());
    const auto [v0, v1] = std::minmax_element(r.kv_v_scale.begin(), r.kv_v_scale.end());
    std::fprintf(hout, "kv cache: fp8 scales for %zu layers, k_scale %.4g .. %.4g, v_scale %.4g .. %.4g (absmax / 448)\n",
                 r.kv_k_scale.size(), *k0, *k1, *v0, *v1);
  }
  nlohmann::ordered_json ej;
  if (do_eval) {
    std::vector<int32_t> ids = held_out;
    std::string what = "the calibration text after its " + std::to_string(o.calib_ids.size()) + " calibration tokens";
    if (!eval_text.empty()) ids = load_tokenizer(o.in).encode(eval_text), what = a.str("--eval-text");
    if (ids.size() < 64) {
      std::fprintf(hout, "eval: no held-out text (pass --eval-text FILE); fidelity: blockspec eval -m %s --reference %s "
                   "--text FILE\n", o.out.c_str(), o.in.c_str());
    } else {
      ModelOptions mo;
      mo.n_threads = o.n_threads;
      mo.kv_cache_dtype = KvDType::kF32;  // weights only: both models keep an exact cache
      auto cand = Transformer::load(o.out, mo);
      // The reference is IN at the precision quantize read it in: an HF directory at its stored precision; a GGUF
      // file (whose blocks would load as q8) as bf16, like `eval --reference-weights bf16`.
      if (!gguf_path_of(o.in).empty()) mo.weights = WeightFormat::kBF16;
      auto ref = Transformer::load(o.in, mo);
      const int64_t ctx = std::min<int64_t>(512, ref->config().max_position_embeddings);
      const auto windows = fidelity_windows(static_cast<int64_t>(ids.size()), ctx, eval_tokens);
      const auto t0 = std::chrono::steady_clock::now();
      const FidelityStats st = score_fidelity(*ref, {{cand.get(), KvDType::kF32}}, ids, windows)[0];
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(hout, "eval vs %s (%s) over %lld tokens of %s (windows of %lld, %.1f s): KLD mean %.6f, p99 %.6f, "
                   "top-1 agreement %.4f, ppl %.4f (reference %.4f)\n", o.in.c_str(),
                   ref->weights().format_summary.c_str(),
                   static_cast<long long>(st.n_tokens()), what.c_str(), static_cast<long long>(ctx), secs,
                   st.kld_mean(), st.kld_p99(), st.top1_agreement(), st.ppl(), st.ppl_reference());
      ej = {{"text", what}, {"reference_weights", ref->weights().format_summary}, {"n_tokens", st.n_tokens()}, {"ctx", ctx}, {"kld_mean", st.kld_mean()},
            {"kld_p99", st.kld_p99()}, {"top1_agreement", st.top1_agreement()}, {"ppl", st.ppl()},
            {"ppl_reference", st.ppl_reference()}, {"seconds", secs}};
    }
  }
  if (json_out) {
    nlohmann::ordered_json j;
    j["out"] = o.out;
    j["calib_tokens"] = r.calib_tokens;
    j["calib_seconds"] = r.calib_seconds;
    j["calib_blocks"] = r.calib_blocks;
    j["total_seconds"] = r.total_seconds;
    j["out_bytes"] = r.out_bytes;
    j["dense_linears"] = r.dense_linears;
    j["smooth"] = o.smooth;
    j["smooth_attention"] = o.smooth_attention;
    j["smooth_mappings"] = o.smooth_mappings == SmoothMappings::kAll ? "all" : "norms";
    j["replaced"] = r.replaced;
    j["notes"] = r.notes;
    if (!r.kv_k_scale.empty()) j["kv_k_scale"] = r.kv_k_scale, j["kv_v_scale"] = r.kv_v_scale;
    if (!ej.empty()) j["eval"] = ej;
    for (const LayerReport& l : r.layers)
      j["layers"].push_back({{"module", l.module}, {"how", l.how}, {"rel_err", l.rel_err}, {"on_calib", l.on_calib},
                            {"calib_rows", l.calib_rows}});
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

}  // namespace blockspec
