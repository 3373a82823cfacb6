// blockspec train-drafter TARGET OUT --prompts FILE.jsonl [flags]
// Trains a DFlash drafter for TARGET on the target's own greedy responses
// (issue 15, training.md): data generation through the batched engine with
// the tap hidden states captured (OUT/data/draft_data.bin, resumable), then
// the C++ trainer (OUT/train_state.safetensors, resumable), writing a
// z-lab DFlash checkpoint to OUT (config.json + model.safetensors).
#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/memory_bandwidth.h"
#include "base/timer.h"
#include "chat/chat_template.h"
#include "cli/args.h"
#include "cli/bench_spec.h"
#include "cli/commands.h"
#include "cli/model_files.h"
#include "formats/dflash_config.h"
#include "model/chat_files.h"
#include "model/dflash.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "train/datagen.h"
#include "train/frozen_target.h"
#include "train/trainer.h"

namespace blockspec {

namespace {

namespace fs = std::filesystem;

std::vector<FlagSpec> flags() {
  std::vector<FlagSpec> f = model_flags();
  std::vector<FlagSpec> own = {
    {"--method", "", true, "dflash (default) or dflash2 (block convolutions and a candidate selector, dflash.md §5)"},
    {"--selector-rank", "", true, "dflash2: rank of the selector's codebooks (default 64: two [vocab, rank] tables)"},
    {"--selector-top-k", "", true, "dflash2: candidates per slot (default 16)"},
    {"--selector-alpha", "", true, "dflash2: weight of the selector loss (default 1.0)"},
    {"--conv-kernel", "", true, "dflash2: taps of the block convolutions (default 2)"},
    {"--conv-group", "", true, "dflash2: channels per dynamic-kernel group (default 16)"},
    {"--sliding-window", "", true, "dflash2: attention window of the sliding layers (default 2048)"},
    {"--block-attention", "", true, "dflash: bidirectional (default) or causal attention inside the draft block (causal: slots 1..K the same whatever K serving drafts)"},
    {"--prompts", "", true, "JSONL training prompts, comma-separated files in order (\"prompt\", \"turns\"[0] or \"question\"; never evaluation sets)"},
    {"--prompt-order", "", true, "file (default) or shuffle (by --seed): the order data generation answers the prompts in"},
    {"--prompt-template", "", true, "build each prompt from the line's fields, e.g. \"{question}\""},
    {"--num-prompts", "", true, "answer only the first N prompts of --prompt-order (default all); N1,N2,...: the first Ni of each --prompts file, its --responses prompts first"},
    {"--max-new-tokens", "", true, "tokens the target generates per prompt (default 256)"},
    {"--concurrency", "", true, "sequences the engine batches while generating data (default 16)"},
    {"--responses", "", true, "tokens-only data file of an earlier run (--export-responses): those prompts are prefilled for their taps, not answered again"},
    {"--export-responses", "", true, "only write the tokens (no taps) of OUT's data records to FILE, then stop (small enough to keep; --responses reads it)"},
    {"--data-only", "", false, "generate (or finish) the data, then stop"},
    {"--known-only", "", false, "with --responses: prefill only the known responses for their taps, generate none"},
    {"--tokens-only", "", false, "generate the responses only, without taps, into OUT/data/responses.bin (--responses copied in, not prefilled; resumable), then stop: the file --responses reads, with no prefill spent now"},
    {"--train-only", "", false, "train on the records the data file holds now (data generation may still be running)"},
    {"--layers", "", true, "draft layers (default 1)"},
    {"--block-size", "", true, "block size B: drafts up to B-1 tokens (default 8)"},
    {"--taps", "", true, "target layer ids to tap, e.g. 1,7,13,19,25 (default: 5 spread over the target)"},
    {"--tap-dtype", "", true, "how data stores the taps: bf16 (half the disk) or f32 (default: bf16, or what the data file holds)"},
    {"--intermediate-size", "", true, "draft MLP width (default: the target's)"},
    {"--mask-token-id", "", true, "id of the mask token (default: the last special token that is not bos/eos)"},
    {"--draft-vocab", "", true, "reduced draft vocabulary: the N most frequent response tokens (default: the full vocabulary)"},
    {"--epochs", "", true, "passes over the data (default 6)"},
    {"--lr", "", true, "peak learning rate (default 6e-4)"},
    {"--seed", "", true, "seed of init, anchors and shuffles (default 42)"},
    {"--seq-len", "", true, "tokens per packed training row (default 2048)"},
    {"--max-anchors", "", true, "blocks per row per step (default 128)"},
    {"--gamma", "", true, "position weight decay exp(-(k-1)/gamma) (default 4)"},
    {"--position-weights", "", true, "exp (default: the decay of --gamma) or dpace (D-PACE: each slot weighed by how much the expected acceptance length depends on it, from the step's own losses; DFlash only)"},
    {"--dpace-alpha", "", true, "D-PACE's floor alpha of each slot's acceptance estimate (default 0.5)"},
    {"--max-steps", "", true, "stop after N optimizer steps this run (default: all epochs)"},
    {"--checkpoint-minutes", "", true, "minutes between checkpoints (default 10)"},
    {"--head-dtype", "", true, "bf16 (default) or f32: precision of the frozen lm_head's products in training"},
    {"--matmul", "", true, "f32 (default) or bf16: precision of the drafter's linear products in training, forward and backward (bf16: both operands rounded, f32 sums, as bf16 autocast; ~1.4x the tokens/s where the CPU has AVX-512 BF16)"},
    {"--target-weights", "", true, "alias of --weights: the target's compute format for data generation"},
    {"--resume", "", false, "continue from OUT/train_state.safetensors when it exists"},
    {"--init", "", true, "start from the parameters of drafter DIR (bf16, f32 or quantized by `blockspec quantize`: its exact dequantization; its shape, taps, mask token and draft vocabulary are the defaults, a flag that disagrees fails); a fresh schedule and optimizer (--resume: OUT's state wins)"},
    {"--vocab-from-data", "", false, "with --init: choose the draft vocabulary (--draft-vocab N, default the checkpoint's size) from this run's data instead of keeping the checkpoint's ids (the head is the target's frozen rows, so only the ids change; the trained layers are kept)"},
    {"--vocab-from", "", true, "count the draft vocabulary (--draft-vocab N) over the responses of FILE (a data or --export-responses file of this target, e.g. every answer generated so far) instead of this run's records; wherever the ids come from data (no --init, or --vocab-from-data)"},
    {"--help", "-h", false, "show this help"},
  };
  f.insert(f.begin(), own.begin(), own.end());
  return f;
}

// "a,b,c" -> {a, b, c}; empty items fail.
std::vector<std::string> split_list(const std::string& s, const std::string& flag) {
  std::vector<std::string> out;
  for (size_t i = 0; i <= s.size();) {
    const size_t e = std::min(s.find(',', i), s.size());
    if (e == i) fail(flag, ": empty item in \"", s, "\"");
    out.push_back(s.substr(i, e - i));
    i = e + 1;
  }
  return out;
}

// "a,b,c" -> non-negative integers; what: the error's noun ("a layer id", "a count").
std::vector<int64_t> parse_ids(const std::string& s, const std::string& flag, const char* what = "a layer id") {
  std::vector<int64_t> out;
  for (const std::string& item : split_list(s, flag)) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (*end != '\0' || v < 0) fail(flag, ": \"", item, "\" is not ", what);
    out.push_back(v);
  }
  return out;
}

std::string hms(double s) {
  char b[32];
  const long t = static_cast<long>(s);
  std::snprintf(b, sizeof b, "%ldh%02ldm%02lds", t / 3600, t / 60 % 60, t % 60);
  return b;
}

}  // namespace

int cmd_train_drafter(const std::vector<std::string>& argv) {
  Args a("train-drafter", flags(), argv);
  if (a.has("--help")) {
    std::fputs(Args::usage("train-drafter", "TARGET OUT --prompts FILE.jsonl [flags]", flags()).c_str(), stdout);
    return 0;
  }
  if (a.positionals().size() != 2) fail("train-drafter: expected TARGET and OUT, found ", a.positionals().size(), " arguments");
  const std::string target_path = a.positionals()[0], out = a.positionals()[1];
  if (a.has("--export-responses")) {  // tokens only, from the data as it is now (a generating run may go on)
    const std::string data_path = (fs::path(out) / "data" / "draft_data.bin").string(), ef = a.str("--export-responses");
    if (!fs::is_regular_file(data_path)) fail("--export-responses: ", data_path, " does not exist");
    const DraftData d(data_path);
    const std::string tmp = ef + ".tmp";
    fs::remove(tmp);
    {
      DraftDataWriter w(tmp, d.n_taps(), d.hidden(), TapDType::kBF16);
      for (DraftRecordView r : d.records()) {
        r.rows = 0, r.taps = nullptr, r.taps_bf16 = nullptr;
        w.append(r);
      }
    }
    fs::rename(tmp, ef);
    fs::remove(tmp + ".lock");
    int64_t n_tok = 0;
    for (const DraftRecordView& r : d.records()) n_tok += r.n_tokens - r.n_prompt;
    std::fprintf(stderr, "%zu responses (%lld response tokens, no taps) written to %s\n", d.records().size(),
                 static_cast<long long>(n_tok), ef.c_str());
    return 0;
  }
  // --init DIR: its config gives the architecture flags' defaults, and a flag given otherwise fails.
  std::optional<DraftConfig> init;
  if (a.has("--init")) {
    if (!is_draft_checkpoint(a.str("--init")))
      fail("--init: ", a.str("--init"), " is not a drafter checkpoint (no config.json naming a DFlash architecture)");
    init = load_draft_config(a.str("--init"));
  }
  const bool vocab_from_data = a.has("--vocab-from-data");
  if (vocab_from_data && !init) fail("--vocab-from-data is for --init (without it the vocabulary comes from the data anyway)");
  if (vocab_from_data && init->draft_vocab_size == 0 && !a.has("--draft-vocab"))
    fail("--vocab-from-data: ", a.str("--init"), " has the full vocabulary; give --draft-vocab N");
  if (a.has("--vocab-from") && init && !vocab_from_data)
    fail("--vocab-from: --init ", a.str("--init"), " keeps its own draft ids; add --vocab-from-data to re-choose them");
  if (a.has("--vocab-from") && !fs::is_regular_file(a.str("--vocab-from")))
    fail("--vocab-from: ", a.str("--vocab-from"), " is not a file");
  const auto init_int = [&](const char* flag, int64_t init_value, int64_t dflt) {
    if (!init) return a.integer(flag, dflt);
    if (a.has(flag) && a.integer(flag, dflt) != init_value)
      fail("--init: ", a.str("--init"), " has ", flag + 2, " ", init_value, " but ", flag, " is ", a.integer(flag, dflt));
    return init_value;
  };
  // Settled here, before anything loads. --vocab-from-data re-chooses the ids, so its size may differ from --init's.
  const int64_t Vd = vocab_from_data ? a.integer("--draft-vocab", init->draft_vocab_size)
                                     : init_int("--draft-vocab", init ? init->draft_vocab_size : 0, 0);
  const std::string method = a.str("--method", init ? draft_method_name(init->method) : "dflash");
  if (init && method != draft_method_name(init->method))
    fail("--init: ", a.str("--init"), " is a ", draft_method_name(init->method), " drafter but --method is ", method);
  if (method != "dflash" && method != "dflash2") fail("train-drafter: --method must be dflash or dflash2, found \"", method, "\"");
  const bool init_causal = init && !init->layer_causal.empty() && init->layer_causal[0];
  const std::string block_attention = a.str("--block-attention", init_causal ? "causal" : "bidirectional");
  if (init && method == "dflash" && (block_attention == "causal") != init_causal)
    fail("--init: ", a.str("--init"), " attends ", init_causal ? "causally" : "bidirectionally",
         " inside the block but --block-attention is ", block_attention);
  if (block_attention != "bidirectional" && block_attention != "causal")
    fail("train-drafter: --block-attention must be bidirectional or causal, found \"", block_attention, "\"");
  if (method == "dflash2" && a.has("--block-attention"))
    fail("train-drafter: --block-attention is a dflash option (DFlash2 is bidirectional in the block)");
  const int64_t B = init_int("--block-size", init ? init->block_size : 0, 8);
  const int64_t n_layers = init_int("--layers", init ? init->base.n_layers : 0, 1);
  if (B < 2 || B > 32) fail("train-drafter: --block-size must be in [2, 32], found ", B);
  if (n_layers < 1 || n_layers > 16) fail("train-drafter: --layers must be in [1, 16], found ", n_layers);
  TrainOptions to;
  to.epochs = a.integer("--epochs", 6);
  to.lr = a.number("--lr", 6e-4);
  to.seed = a.u64("--seed", 42);
  to.seq_len = a.integer("--seq-len", 2048);
  to.max_anchors = a.integer("--max-anchors", 128);
  to.gamma = a.number("--gamma", 4.0);
  to.max_steps = a.integer("--max-steps", 0);
  to.checkpoint_every_s = 60 * a.number("--checkpoint-minutes", 10);
  const std::string matmul = a.str("--matmul", "f32");
  if (matmul != "f32" && matmul != "bf16") fail("train-drafter: --matmul must be f32 or bf16, found \"", matmul, "\"");
  if (to.epochs < 1) fail("train-drafter: --epochs must be >= 1, found ", to.epochs);
  if (!(to.lr > 0 && to.lr < 1)) fail("train-drafter: --lr must be in (0, 1), found ", to.lr);
  if (to.seq_len < 16) fail("train-drafter: --seq-len must be >= 16, found ", to.seq_len);
  if (to.max_anchors < 1) fail("train-drafter: --max-anchors must be >= 1, found ", to.max_anchors);
  if (!(to.gamma > 0)) fail("train-drafter: --gamma must be > 0");
  const std::string pw = a.str("--position-weights", "exp");
  if (pw != "exp" && pw != "dpace") fail("train-drafter: --position-weights must be exp or dpace, found \"", pw, "\"");
  if (pw == "exp" && a.has("--dpace-alpha")) fail("train-drafter: --dpace-alpha needs --position-weights dpace");
  if (pw == "dpace") {
    if (method == "dflash2") fail("train-drafter: D-PACE (--position-weights dpace) weighs DFlash's cross-entropy; DFlash2 uses --gamma");
    if (a.has("--gamma")) fail("train-drafter: --gamma is the exp decay's; D-PACE (--position-weights dpace) has none");
    to.dpace_alpha = a.number("--dpace-alpha", 0.5);
    if (!(to.dpace_alpha > 0 && to.dpace_alpha <= 1))
      fail("train-drafter: --dpace-alpha must be in (0, 1], found ", to.dpace_alpha);
  }
  const int64_t max_new = a.integer("--max-new-tokens", 256), conc = a.integer("--concurrency", 16);
  if (max_new < 2) fail("train-drafter: --max-new-tokens must be >= 2, found ", max_new);
  if (conc < 1 || conc > 256) fail("train-drafter: --concurrency must be in [1, 256], found ", conc);
  ModelOptions mo = model_options(a);
  if (a.has("--target-weights")) {
    if (a.has("--weights")) fail("train-drafter: give --weights or --target-weights, not both");
    Args alias("train-drafter", model_flags(), {"--weights", a.str("--target-weights")});
    mo.weights = model_options(alias).weights;
  }

  // ---- prompts, rendered with the target's chat template ----
  Tokenizer tok = load_tokenizer(target_path);
  const ChatAssets assets = read_chat_assets(target_path);
  if (assets.template_source.empty()) fail(target_path, ": the target has no chat template to render prompts with");
  const ChatTemplate tmpl(assets.template_source, assets.template_what);
  ChatTemplateOptions co;
  co.bos_token = assets.bos_token, co.eos_token = assets.eos_token;
  std::vector<std::vector<int32_t>> prompts;  // every file's prompts in turn: a record's index is its place here
  std::vector<int64_t> file_sizes;             // prompts per file
  for (const std::string& file : split_list(a.required("--prompts"), "--prompts")) {
    const size_t before = prompts.size();
    for (const std::string& text : load_prompts(file, a.str("--prompt-template"), int64_t(1) << 40))
      prompts.push_back(tok.encode(tmpl.apply({{"user", text, ""}}, co)));
    file_sizes.push_back(static_cast<int64_t>(prompts.size() - before));
  }
  const std::string order_name = a.str("--prompt-order", "file");
  if (order_name != "file" && order_name != "shuffle")
    fail("--prompt-order must be file or shuffle, found \"", order_name, "\"");
  // The order data generation answers the prompts in; --num-prompts keeps its first N (so with shuffle, N
  // prompts drawn from every file). Records keep their prompt's index in the files either way.
  std::vector<int64_t> order(prompts.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  if (order_name == "shuffle") {  // Fisher-Yates with the project's Rng: the same order on every machine
    Rng rng(to.seed * 7919 + 17);
    for (int64_t i = static_cast<int64_t>(order.size()) - 1; i > 0; --i)
      std::swap(order[i], order[static_cast<int64_t>(rng.next() % static_cast<uint64_t>(i + 1))]);
  }
  if (a.has("--responses") && a.has("--train-only"))
    fail("train-drafter: --responses feeds data generation, which --train-only skips");
  std::map<int64_t, std::vector<int32_t>> known;  // --responses: prompt index -> prompt + response
  if (a.has("--responses")) {
    const std::string rf = a.str("--responses");
    if (!fs::is_regular_file(rf)) fail("--responses: ", rf, " is not a file");
    const DraftData prev(rf);
    for (const DraftRecordView& r : prev.records()) {
      if (r.index < 0 || r.index >= static_cast<int64_t>(prompts.size()))
        fail("--responses: ", rf, ": record for prompt ", r.index, " but --prompts has ", prompts.size());
      known[r.index].assign(r.tokens, r.tokens + r.n_tokens);
    }
    std::fprintf(stderr, "data: %zu known responses in %s\n", known.size(), rf.c_str());
  }
  if (a.has("--num-prompts")) {
    const std::string v = a.str("--num-prompts");
    if (v.find(',') != std::string::npos) {  // one count per file
      std::set<int64_t> ks;
      for (const auto& kv : known) ks.insert(kv.first);
      order = select_per_file(order, file_sizes, parse_ids(v, "--num-prompts", "a count"), ks);
    } else {
      const int64_t n = a.integer("--num-prompts", 0);
      if (n < 1) fail("--num-prompts must be at least 1, found ", n);
      if (n < static_cast<int64_t>(order.size())) order.resize(n);
    }
  }

  auto model = Transformer::load(target_path, mo);
  const ModelConfig mc = model->config();
  const std::vector<int64_t> taps =
      a.has("--taps") ? parse_ids(a.str("--taps"), "--taps")
      : init          ? init->target_layer_ids
                      : default_target_layer_ids(mc.n_layers, 5);
  if (init) {
    const ModelConfig& b = init->base;
    if (taps != init->target_layer_ids) fail("--init: ", a.str("--init"), " taps other target layers than --taps");
    if (b.hidden_size != mc.hidden_size || b.n_heads != mc.n_heads || b.n_kv_heads != mc.n_kv_heads ||
        b.head_dim != mc.head_dim)
      fail("--init: ", a.str("--init"), " has hidden ", b.hidden_size, ", ", b.n_heads, "/", b.n_kv_heads,
           " heads of ", b.head_dim, "; the target ", mc.hidden_size, ", ", mc.n_heads, "/", mc.n_kv_heads, " of ",
           mc.head_dim, " (a drafter of another target)");
  }
  for (int64_t t : taps)
    if (t >= mc.n_layers) fail("--taps: ", t, " is not a layer of the target (it has ", mc.n_layers, ")");
  int64_t mask_id = init_int("--mask-token-id", init ? init->mask_token_id : 0, -1);
  if (mask_id < 0) {
    for (int32_t id = std::min<int32_t>(tok.vocab_size(), static_cast<int32_t>(mc.vocab_size)) - 1; id >= 0; --id) {
      const bool eos = std::find(mc.eos_token_ids.begin(), mc.eos_token_ids.end(), id) != mc.eos_token_ids.end();
      if (tok.is_special(id) && !eos && mc.bos_token_id != id) {
        mask_id = id;
        break;
      }
    }
    if (mask_id < 0) fail("train-drafter: the tokenizer has no spare special token; pass --mask-token-id");
  }
  if (mask_id >= mc.vocab_size) fail("--mask-token-id ", mask_id, " is outside the target's vocabulary (", mc.vocab_size, ")");
  fs::create_directories(fs::path(out) / "data");
  {
    nlohmann::ordered_json r;
    std::string cmd = "blockspec train-drafter";
    for (const std::string& s : argv) cmd += " " + s;
    r["command"] = cmd;
    r["target"] = target_path;
    r["prompts"] = a.required("--prompts");
    r["num_prompts"] = order.size();
    r["taps"] = taps;
    r["mask_token_id"] = mask_id;
    if (init) r["init"] = a.str("--init");
    std::ofstream(fs::path(out) / "recipe.json") << r.dump(2) << "\n";
  }

  // ---- data: the target's own greedy responses and taps ----
  const std::string data_path = (fs::path(out) / "data" / "draft_data.bin").string();
  if (a.has("--data-only") && a.has("--train-only")) fail("train-drafter: --data-only and --train-only exclude each other");
  const bool tokens_only = a.has("--tokens-only");
  if (a.has("--known-only") && !a.has("--responses")) fail("train-drafter: --known-only needs --responses");
  if (tokens_only && a.has("--train-only")) fail("train-drafter: --tokens-only and --train-only exclude each other");
  if (!a.has("--train-only")) {
    const TapDType want = parse_tap_dtype(a.has("--tap-dtype") ? a.str("--tap-dtype") : "bf16");
    const std::string write_path = tokens_only ? (fs::path(out) / "data" / "responses.bin").string() : data_path;
    DraftDataWriter w(write_path, static_cast<int64_t>(taps.size()), mc.hidden_size, want);
    if (a.has("--tap-dtype") && w.tap_dtype() != want)
      fail("--tap-dtype: ", write_path, " already holds ", w.tap_dtype() == TapDType::kBF16 ? "bf16" : "f32",
           " taps; resume without --tap-dtype or use another output directory");
    const std::set<int64_t> done(w.done().begin(), w.done().end());
    const size_t n_done = static_cast<size_t>(
        std::count_if(order.begin(), order.end(), [&](int64_t i) { return done.count(i) > 0; }));
    if (n_done < order.size()) {
      std::fprintf(stderr, "data: %zu of %zu prompts done, generating the rest (batch %lld, up to %lld tokens each)\n",
                   n_done, order.size(), static_cast<long long>(conc), static_cast<long long>(max_new));
      EngineOptions eo;
      eo.max_num_seqs = conc;
      eo.max_model_len = std::min<int64_t>(mc.max_position_embeddings, 4096);
      eo.max_step_tokens = 512;
      if (!tokens_only) eo.capture_taps = taps;
      Engine eng(Transformer::load(target_path, mo), eo);
      DatagenOptions dg;
      dg.taps = !tokens_only;
      dg.max_new_tokens = max_new;
      if (!known.empty()) dg.responses = &known;
      dg.known_only = a.has("--known-only");
      dg.in_flight = 2 * conc;
      dg.order = order;
      double last = -1e9;  // the first report always prints
      dg.progress = [&](const DatagenProgress& p) {
        if (p.seconds - last < 10 && p.done != p.total) return;
        last = p.seconds;
        const double tps = p.new_tokens / std::max(1e-9, p.seconds);
        std::fprintf(stderr, "data %lld/%lld prompts | %lld new tokens | %lld known tokens %s | %.1f tok/s | %s elapsed\n",
                     static_cast<long long>(p.done), static_cast<long long>(p.total),
                     static_cast<long long>(p.new_tokens), static_cast<long long>(p.known_tokens),
                     tokens_only ? "copied" : "prefilled", tps,
                     hms(p.seconds).c_str());
      };
      const int64_t skipped = generate_draft_data(eng, prompts, w, dg);
      if (skipped > 0) std::fprintf(stderr, "data: %lld prompts too long for --max-new-tokens were skipped\n",
                                    static_cast<long long>(skipped));
    }
    std::fprintf(stderr, "data: %zu records, %lld tokens in %s%s\n", w.done().size(),
                 static_cast<long long>(w.tokens_written()), write_path.c_str(), tokens_only ? " (tokens only)" : "");
  }
  if (a.has("--data-only") || tokens_only) return 0;

  // ---- training ----
  // A step allocates and frees the same large buffers (activations, GEMM transposes, up to ~50 MB each):
  // keep them on the heap instead of fresh mmaps, which the kernel zeroes page by page on every step
  // (perf of a Qwen2.5-Coder-1.5B drafter run: 5.5% of the time in clear_page before).
  mallopt(M_MMAP_MAX, 0);  // glibc: every allocation from the heap
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  DraftData data(data_path);
  DraftShape s;
  s.H = mc.hidden_size, s.n_heads = mc.n_heads, s.n_kv_heads = mc.n_kv_heads, s.head_dim = mc.head_dim;
  s.F = init_int("--intermediate-size", init ? init->base.intermediate_size : 0, mc.intermediate_size);
  s.n_layers = n_layers;
  s.tap_width = static_cast<int64_t>(taps.size()) * mc.hidden_size;
  std::vector<int32_t> vocab;
  if (Vd < 0 || Vd > mc.vocab_size) fail("--draft-vocab must be in [1, ", mc.vocab_size, "], found ", Vd);
  if (a.has("--vocab-from") && !(Vd > 0 && Vd < mc.vocab_size))
    fail("--vocab-from: the draft vocabulary is the full vocabulary here; give --draft-vocab N below ", mc.vocab_size);
  const fs::path vocab_path = fs::path(out) / "draft_vocab.json";
  if (Vd > 0 && Vd < mc.vocab_size) {
    // Chosen once (--init's d2t, or from the data: without --init, or with --vocab-from-data) and kept, so a
    // resumed run trains against the same head rows. The head is the target's frozen rows of these ids, so a
    // drafter's trained layers carry over to another choice of them.
    const bool keep_init = init && !vocab_from_data;
    const std::vector<int32_t> from_init =
        keep_init ? read_draft_vocab_ids(a.str("--init"), Vd, mc.vocab_size) : std::vector<int32_t>{};
    if (fs::exists(vocab_path)) {
      std::ifstream f(vocab_path);
      vocab = nlohmann::json::parse(f, nullptr, false).value("ids", std::vector<int32_t>{});
      if (static_cast<int64_t>(vocab.size()) != Vd)
        fail(vocab_path.string(), ": holds ", vocab.size(), " ids but --draft-vocab is ", Vd, "; use another OUT");
      if (keep_init && vocab != from_init)
        fail(vocab_path.string(), ": another draft vocabulary than --init ", a.str("--init"), "'s; use another OUT");
    } else {
      if (keep_init)
        vocab = from_init;
      else if (a.has("--vocab-from"))
        vocab = choose_draft_vocab(DraftData(a.str("--vocab-from")), Vd, mc.vocab_size, a.str("--vocab-from"));
      else
        vocab = choose_draft_vocab(data, Vd, mc.vocab_size, data_path);
      std::ofstream(vocab_path) << nlohmann::json{{"ids", vocab}}.dump() << "\n";
    }
  }
  s.V = vocab.empty() ? mc.vocab_size : Vd;
  DraftArch arch;
  if (method == "dflash2") {
    if (!vocab.empty()) fail("train-drafter: --draft-vocab is for dflash; DFlash2's selector indexes the full vocabulary");
    s.conv_kernel = init_int("--conv-kernel", init ? init->conv_kernel_size : 0, 2);
    s.conv_group = init_int("--conv-group", init ? init->conv_group_size : 0, 16);
    s.selector_rank = init_int("--selector-rank", init ? init->selector_rank : 0, 64);
    s.selector_top_k = init_int("--selector-top-k", init ? init->selector_top_k : 0, 16);
    s.selector_alpha = a.number("--selector-alpha", 1.0);
    arch.sliding_window = init_int("--sliding-window", init && !init->layer_window.empty() ? init->layer_window[0] : 0, 2048);
    if (s.conv_kernel < 1 || s.conv_kernel > B) fail("--conv-kernel must be in [1, --block-size], found ", s.conv_kernel);
    if (s.conv_group < 1 || s.H % s.conv_group != 0)
      fail("--conv-group must divide the hidden size ", s.H, ", found ", s.conv_group);
    if (s.selector_rank < 1 || s.selector_rank > 4096) fail("--selector-rank must be in [1, 4096], found ", s.selector_rank);
    if (s.selector_top_k < 2 || s.selector_top_k > s.V)
      fail("--selector-top-k must be in [2, ", s.V, "], found ", s.selector_top_k);
    if (!(s.selector_alpha >= 0)) fail("--selector-alpha must be >= 0");
    if (arch.sliding_window < B) fail("--sliding-window must be at least --block-size, found ", arch.sliding_window);
  } else {
    for (const char* f : {"--selector-rank", "--selector-top-k", "--selector-alpha", "--conv-kernel", "--conv-group",
                          "--sliding-window"})
      if (a.has(f)) fail("train-drafter: ", f, " is a dflash2 option (--method dflash2)");
    arch.causal = block_attention == "causal";
  }
  s.eps = static_cast<float>(mc.rms_norm_eps);
  ModelConfig rc;
  rc.head_dim = mc.head_dim;
  rc.rope.theta = mc.rope.theta;
  s.rope = compute_rope(rc);
  arch.block_size = B;
  arch.mask_token_id = static_cast<int32_t>(mask_id);
  arch.target_layer_ids = taps;
  arch.num_target_layers = mc.n_layers;
  arch.target_vocab_size = mc.vocab_size;
  arch.rope_theta = mc.rope.theta;
  arch.max_position_embeddings = mc.max_position_embeddings;
  arch.target_model_type = mc.model_type;
  DraftParams p = DraftParams::init(s, to.seed, 0.02f);
  if (init) {
    read_draft_params(a.str("--init"), s, p);
    std::fprintf(stderr, "init: the parameters of %s\n", a.str("--init").c_str());
  }
  ThreadPool& pool = *model->op_context().pool;
  const std::string head_dtype = a.str("--head-dtype", "bf16");
  if (head_dtype != "bf16" && head_dtype != "f32") fail("--head-dtype must be bf16 or f32, found \"", head_dtype, "\"");
  auto frozen = freeze_target(*model, pool, head_dtype == "bf16", vocab);
  arch.draft_vocab = vocab;
  arch.head = frozen->lm_head.data();
  OpContext ctx = model->op_context();
  ctx.bf16_train_products = matmul == "bf16";
  double last = -1;
  const TrainResult r = train_drafter(data, frozen->view, s, p, arch, to, out, a.has("--resume"), ctx,
                                      [&](const TrainProgress& pr) {
    if (!pr.eval && pr.elapsed_s - last < 15) return;
    last = pr.elapsed_s;
    std::string acc;
    for (size_t k = 1; k < pr.slot_acc.size(); ++k) acc += (k > 1 ? " " : "") + std::to_string(pr.slot_acc[k]).substr(0, 4);
    std::fprintf(stderr, "step %lld/%lld ep %lld | loss %.3f | acc %s | eal %.2f val %.2f | lr %.1e | %.0f tok/s | ETA %s\n",
                 static_cast<long long>(pr.step), static_cast<long long>(pr.total_steps),
                 static_cast<long long>(pr.epoch), pr.loss, acc.c_str(), pr.train_eal, pr.val_eal, pr.lr,
                 pr.tokens_per_s, hms(pr.eta_s).c_str());
  });
  // Peak RSS (VmHWM) of the whole run, data generation included; the mapped taps file's resident pages count.
  std::fprintf(stderr, "done: %lld steps in %s (%.0f tokens/s); held-out eal %.2f -> %.2f; peak RSS %.0f MB; drafter in %s\n",
               static_cast<long long>(r.steps), hms(r.seconds).c_str(), r.tokens_per_s, r.val_eal_start,
               r.val_eal_end, peak_rss_mb(), out.c_str());
  return 0;
}

}  // namespace blockspec
