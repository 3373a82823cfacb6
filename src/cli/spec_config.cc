#include "cli/spec_config.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/error.h"
#include "cli/model_files.h"
#include "formats/dflash_config.h"
#include "formats/quant_config.h"

namespace blockspec {

using nlohmann::json;

std::vector<std::string> drafter_dirs() {
  std::vector<std::string> d;
  if (const char* e = std::getenv("BLOCKSPEC_DRAFTERS"); e != nullptr && *e != '\0') d.push_back(e);
#ifdef BS_DRAFTERS_DIR
  d.push_back(BS_DRAFTERS_DIR);
#endif
  return d;
}

std::string resolve_drafter(const std::string& model) {
  namespace fs = std::filesystem;
  if (model.empty() || model.find('/') != std::string::npos || fs::exists(model)) return model;
  std::string known;
  for (const std::string& dir : drafter_dirs()) {
    const fs::path p = fs::path(dir) / model;
    if (is_draft_checkpoint(p.string())) return p.string();
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (is_draft_checkpoint(e.path().string())) known += (known.empty() ? "" : ", ") + e.path().filename().string();
  }
  fail("--speculative-config: \"model\" ", model, " is neither a directory nor a shipped drafter (shipped: ",
       known.empty() ? "none found" : known, ")");
}

namespace {

// vLLM's SpeculativeConfig keys that cannot matter to a CPU engine running
// its drafter in the serving process: accepted, with the reason logged.
const std::pair<const char*, const char*> kNoEffect[] = {
    {"enforce_eager", "no CUDA graphs on a CPU: every step runs eagerly"},
    {"attention_backend", "one attention implementation on the CPU"},
    {"moe_backend", "the drafters blockspec runs have no MoE layers"},
    {"disable_padded_drafter_batch", "drafts are never padded here (EAGLE-only in vLLM)"},
    {"disable_eagle_block_drop", "applies to EAGLE with prefix caching only"},
    {"use_local_argmax_reduction", "vocabulary-parallel argmax: no tensor parallelism here"},
    {"index_share_for_mtp_iteration", "applies to MTP drafters only"},
    {"revision", "no model hub: the drafter directory is read as it is"},
    {"code_revision", "no model hub, and blockspec runs no checkpoint code"},
    {"draft_load_config", "the drafter loads from its directory with the target's loader"},
    {"suffix_decoding_max_tree_depth", "applies to method suffix only"},
    {"suffix_decoding_max_cached_requests", "applies to method suffix only"},
    {"suffix_decoding_max_spec_factor", "applies to method suffix only"},
    {"suffix_decoding_min_token_prob", "applies to method suffix only"},
};

// vLLM fills these in from the engine; a user never passes them.
const char* const kInternal[] = {"target_model_config", "target_parallel_config", "draft_model_config",
                                 "draft_parallel_config"};

// Keys that only change what a method blockspec does not have: refused
// unless they hold vLLM's default (false / null), with what to use instead.
const std::pair<const char*, const char*> kOffOnly[] = {
    {"use_heterogeneous_vocab", "is method draft_model's (a drafter with another vocabulary); DFlash drafters "
                                "share the target's tokenizer"},
    {"parallel_drafting", "is for EAGLE / draft-model drafters; a DFlash drafter drafts its block in one pass "
                          "already"},
    {"enable_adaptive_verification", "is method dspark's; omit num_speculative_tokens for blockspec's adaptive K"},
    {"dspark_draft_topk", "is method dspark's"},
    {"synthetic_acceptance_rates", "needs rejection_sample_method synthetic, which blockspec does not have"},
    {"synthetic_acceptance_length", "needs rejection_sample_method synthetic, which blockspec does not have"},
};

const char* kKnown =
    "method, model, num_speculative_tokens, num_speculative_tokens_per_batch_size, kv_cache_dtype, quantization, "
    "max_model_len, draft_tensor_parallel_size, prompt_lookup_min, prompt_lookup_max, draft_sample_method, "
    "rejection_sample_method and vLLM's other SpeculativeConfig keys (README: serving flags)";

// vLLM's quantization names of a drafter checkpoint to the method blockspec reads from its config.json.
std::optional<QuantMethod> quant_method_of(const std::string& name) {
  if (name == "gptq" || name == "gptq_marlin" || name == "marlin") return QuantMethod::kGptq;
  if (name == "compressed-tensors" || name == "compressed_tensors") return QuantMethod::kCompressedTensors;
  return std::nullopt;
}

std::vector<SpecConfig::BatchK> parse_k_table(const json& v, const char* what) {
  const char* form = "a list of [range_start, range_end, num_speculative_tokens], e.g. [[1, 1, 7], [2, 8, 3]]";
  if (!v.is_array() || v.empty()) fail(what, ": \"num_speculative_tokens_per_batch_size\" must be ", form, ", found ", v.dump());
  std::vector<SpecConfig::BatchK> t;
  for (const json& e : v) {
    if (!e.is_array() || e.size() != 3 || !e[0].is_number_integer() || !e[1].is_number_integer() ||
        !e[2].is_number_integer())
      fail(what, ": \"num_speculative_tokens_per_batch_size\" entry ", e.dump(), " is not [start, end, k] (", form, ")");
    const SpecConfig::BatchK r{e[0].get<int64_t>(), e[1].get<int64_t>(), e[2].get<int64_t>()};
    if (r.lo < 1 || r.hi < r.lo || r.k < 0 || r.k > 1024 || r.hi > 1 << 20)
      fail(what, ": \"num_speculative_tokens_per_batch_size\" entry ", e.dump(),
           " needs 1 <= start <= end and 0 <= k <= 1024");
    if (!t.empty() && r.lo <= t.back().hi)
      fail(what, ": \"num_speculative_tokens_per_batch_size\" ranges must ascend without overlap: ", e.dump(),
           " starts at or before the end of the one before it");
    t.push_back(r);
  }
  return t;
}

}  // namespace

SpecConfig parse_spec_config(const std::string& text, std::vector<std::string>* notes) {
  const char* what = "--speculative-config";
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(what, ": not valid JSON: ", e.what());
  }
  if (!j.is_object()) fail(what, ": expected a JSON object, e.g. {\"method\":\"dflash\",\"model\":DIR}");
  std::vector<std::string> said;
  std::string method, model, draft_sample = "probabilistic", kv_dtype, quantization;
  std::optional<int64_t> k, lookup_min, lookup_max, draft_len;
  std::vector<SpecConfig::BatchK> k_table;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    auto str = [&] {
      if (!v.is_string()) fail(what, ": \"", key, "\" must be a string, found ", v.dump());
      return v.get<std::string>();
    };
    auto pos_int = [&](int64_t hi) {
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > hi)
        fail(what, ": \"", key, "\" must be an integer in [1, ", hi, "], found ", v.dump());
      return v.get<int64_t>();
    };
    auto off = [&] { return v.is_null() || v == false; };  // vLLM's default of a flag or an optional
    if (v.is_null() && key != "method" && key != "model") continue;  // null = unset, as in vLLM
    bool matched = false;
    for (const auto& [name, why] : kNoEffect)
      if (key == name) {
        said.push_back(str_cat("\"", key, "\" accepted, no effect here: ", why));
        matched = true;
      }
    for (const char* name : kInternal)
      if (key == name) fail(what, ": \"", key, "\" is set internally by vLLM, not by users; remove it");
    for (const auto& [name, why] : kOffOnly)
      if (key == name) {
        if (!off()) fail(what, ": \"", key, "\" ", why, "; remove it");
        matched = true;
      }
    if (matched) continue;
    if (key == "method") method = str();
    else if (key == "model") model = str();
    else if (key == "num_speculative_tokens") k = pos_int(1024);
    else if (key == "num_speculative_tokens_per_batch_size") k_table = parse_k_table(v, what);
    else if (key == "prompt_lookup_max") lookup_max = pos_int(1024);
    else if (key == "prompt_lookup_min") lookup_min = pos_int(1024);
    else if (key == "draft_sample_method") draft_sample = str();
    else if (key == "kv_cache_dtype") kv_dtype = str();
    else if (key == "quantization") quantization = str();
    else if (key == "max_model_len") draft_len = pos_int(int64_t{1} << 30);
    else if (key == "draft_tensor_parallel_size" || key == "tensor_parallel_size") {
      if (pos_int(1024) != 1)
        fail(what, ": \"", key, "\" ", v.dump(), ": blockspec runs the drafter in one process on the CPU, without "
             "tensor parallelism; use 1 or omit it");
      if (key == "tensor_parallel_size")
        said.push_back("\"tensor_parallel_size\" read as draft_tensor_parallel_size (vLLM's name for the drafter's)");
    } else if (key == "rejection_sample_method") {
      const std::string m = str();
      if (m != "standard")
        fail(what, ": rejection_sample_method \"", m, "\" is not supported: blockspec verifies with standard "
             "(lossless) rejection sampling only; use \"standard\" or omit it");
    } else {
      fail(what, ": unknown key \"", key, "\" (known: ", kKnown, ")");
    }
  }
  if (method != "ngram") model = resolve_drafter(model);  // a short name of a shipped drafter
  if (method.empty() && !model.empty() && is_draft_checkpoint(model)) method = "dflash";  // refined below
  if (method.empty()) fail(what, ": missing \"method\" (dflash, dflash2 or ngram)");
  if (method != "dflash" && method != "dflash2" && method != "ngram")
    fail(what, ": method \"", method, "\" is not supported (supported: dflash, dflash2, ngram)");
  if (draft_sample != "probabilistic" && draft_sample != "greedy")
    fail(what, ": draft_sample_method must be \"probabilistic\" or \"greedy\", found \"", draft_sample, "\"");
  SpecConfig c;
  c.num_speculative_tokens = k.value_or(0);
  c.greedy_draft = draft_sample == "greedy";
  c.k_by_batch = k_table;
  c.draft_max_model_len = draft_len.value_or(0);
  if (method == "ngram") {
    if (!model.empty()) fail(what, ": method ngram takes no \"model\"");
    if (!quantization.empty()) fail(what, ": \"quantization\" names a drafter's format; method ngram has no drafter");
    if (!kv_dtype.empty())
      said.push_back("\"kv_cache_dtype\" accepted, no effect: method ngram has no drafter and no drafter KV");
    // vLLM's defaults: prompt_lookup_min 1; prompt_lookup_max 5, or min when min > 5.
    c.method = SpecMethod::kNgram;
    c.prompt_lookup_min = lookup_min.value_or(1);
    c.prompt_lookup_max = lookup_max.value_or(std::max<int64_t>(c.prompt_lookup_min, 5));
    if (c.prompt_lookup_max < c.prompt_lookup_min)
      fail(what, ": prompt_lookup_max ", c.prompt_lookup_max, " < prompt_lookup_min ", c.prompt_lookup_min);
  } else {
    if (model.empty()) fail(what, ": method ", method, " needs \"model\": the drafter directory");
    if (lookup_min || lookup_max) {  // n-gram lookup first, the drafter where it finds nothing (lookup_first)
      c.lookup_first = true;
      c.prompt_lookup_min = lookup_min.value_or(kLookupFirstMin);
      c.prompt_lookup_max = lookup_max.value_or(std::max<int64_t>(c.prompt_lookup_min, 5));
      if (c.prompt_lookup_max < c.prompt_lookup_min)
        fail(what, ": prompt_lookup_max ", c.prompt_lookup_max, " < prompt_lookup_min ", c.prompt_lookup_min);
    }
    if (!is_draft_checkpoint(model))
      fail(what, ": \"model\" ", model, " is not a DFlash drafter (no config.json naming DFlashDraftModel or "
                 "DFlash2DraftModel)");
    c.model = model;
    c.draft = std::make_shared<const DraftConfig>(load_draft_config(model));
    // The drafter's architectures decide between dflash and dflash2.
    c.method = c.draft->method == DraftMethod::kDFlash2 ? SpecMethod::kDFlash2 : SpecMethod::kDFlash;
    if (k && *k > c.draft->block_size - 1)
      fail(what, ": num_speculative_tokens ", *k, " exceeds block_size - 1 = ", c.draft->block_size - 1, " of ",
           model, " (more masks than it was trained for)");
    if (!kv_dtype.empty()) c.draft_kv_dtype = parse_kv_cache_dtype(str_cat(what, ": kv_cache_dtype"), kv_dtype);
    if (!quantization.empty()) {  // checked against what the checkpoint says (blockspec reads its config.json)
      const auto want = quant_method_of(quantization);
      if (!want)
        fail(what, ": quantization \"", quantization, "\": blockspec drafters are dense, gptq or compressed-tensors "
             "checkpoints (their format is read from config.json; omit the key)");
      const std::optional<QuantConfig> have = load_quant_config(model);
      if (!have || have->method != *want)
        fail(what, ": quantization \"", quantization, "\" but the drafter ", model, " is ",
             !have ? "not quantized" : have->method == QuantMethod::kGptq ? "gptq" : "compressed-tensors",
             " (its config.json); fix the key or omit it");
    }
  }
  for (const SpecConfig::BatchK& r : c.k_by_batch)
    if (k && r.k > *k)
      said.push_back(str_cat("num_speculative_tokens_per_batch_size: k ", r.k, " for batch sizes ", r.lo, "-", r.hi,
                             " is above num_speculative_tokens ", *k, " and runs as ", *k, " (vLLM clamps it too)"));
  if (notes) *notes = said;
  return c;
}

std::shared_ptr<DraftModel> load_spec_drafter(const SpecConfig& cfg, Transformer& target) {
  if (!cfg.uses_drafter()) return nullptr;
  if (!cfg.draft) fail("--speculative-config: the drafter config of ", cfg.model, " was not read");
  return DraftModel::load(cfg.model, *cfg.draft, target, DraftOptions{std::nullopt, false});
}

}  // namespace blockspec
