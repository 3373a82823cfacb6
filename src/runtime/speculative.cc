#include "runtime/speculative.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/timer.h"
#include "formats/dflash_config.h"
#include "runtime/dflash_proposer.h"
#include "runtime/k_selector.h"
#include "runtime/ngram.h"
#include "runtime/spec_verify.h"

namespace blockspec {

using nlohmann::json;

SpecConfig parse_spec_config(const std::string& text) {
  const char* what = "--speculative-config";
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(what, ": not valid JSON: ", e.what());
  }
  if (!j.is_object()) fail(what, ": expected a JSON object, e.g. {\"method\":\"dflash\",\"model\":DIR}");
  SpecConfig c;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    auto str = [&] {
      if (!v.is_string()) fail(what, ": \"", key, "\" must be a string, found ", v.dump());
      return v.get<std::string>();
    };
    auto pos_int = [&](int64_t min) {
      if (!v.is_number_integer() || v.get<int64_t>() < min)
        fail(what, ": \"", key, "\" must be an integer >= ", min, ", found ", v.dump());
      return v.get<int64_t>();
    };
    if (key == "method") c.method = str();
    else if (key == "model") c.model = str();
    else if (key == "num_speculative_tokens") c.num_speculative_tokens = pos_int(1);
    else if (key == "prompt_lookup_max") c.prompt_lookup_max = pos_int(1);
    else if (key == "prompt_lookup_min") c.prompt_lookup_min = pos_int(1);
    else if (key == "draft_sample_method") c.draft_sample_method = str();
    else
      fail(what, ": unknown key \"", key,
           "\" (known: method, model, num_speculative_tokens, prompt_lookup_max, prompt_lookup_min, "
           "draft_sample_method)");
  }
  if (c.method.empty() && !c.model.empty() && is_draft_checkpoint(c.model))
    c.method = draft_method_name(load_draft_config(c.model).method);
  if (c.method.empty()) fail(what, ": missing \"method\" (dflash, dflash2 or ngram)");
  if (c.method != "dflash" && c.method != "dflash2" && c.method != "ngram")
    fail(what, ": method \"", c.method, "\" is not supported (supported: dflash, dflash2, ngram)");
  if (c.method == "ngram") {
    if (!c.model.empty()) fail(what, ": method ngram takes no \"model\"");
    if (c.num_speculative_tokens == 0) fail(what, ": method ngram needs \"num_speculative_tokens\"");
    // vLLM: prompt_lookup_max defaults to min when only min is given, and both
    // to 5 / 1 otherwise... we follow its documented defaults min 1, max = min or 5.
    if (c.prompt_lookup_min == 0) c.prompt_lookup_min = 1;
    if (c.prompt_lookup_max == 0) c.prompt_lookup_max = std::max<int64_t>(c.prompt_lookup_min, 5);
    if (c.prompt_lookup_max < c.prompt_lookup_min)
      fail(what, ": prompt_lookup_max ", c.prompt_lookup_max, " < prompt_lookup_min ", c.prompt_lookup_min);
  } else {
    if (c.model.empty()) fail(what, ": method ", c.method, " needs \"model\": the drafter directory");
    if (c.prompt_lookup_max || c.prompt_lookup_min)
      fail(what, ": prompt_lookup_max / prompt_lookup_min apply to method ngram only");
    if (!is_draft_checkpoint(c.model))
      fail(what, ": \"model\" ", c.model, " is not a DFlash drafter (no config.json naming DFlashDraftModel or "
                 "DFlash2DraftModel)");
    // The drafter's architectures decide between dflash and dflash2.
    c.method = draft_method_name(load_draft_config(c.model).method);
  }
  if (c.draft_sample_method != "probabilistic" && c.draft_sample_method != "greedy")
    fail(what, ": draft_sample_method must be \"probabilistic\" or \"greedy\", found \"", c.draft_sample_method, "\"");
  return c;
}

std::shared_ptr<DraftModel> load_drafter(SpecConfig& c, Transformer& target, std::optional<WeightFormat> draft_weights) {
  if (c.method == "ngram") return nullptr;
  std::shared_ptr<DraftModel> dm = DraftModel::load(c.model, target, DraftOptions{draft_weights, false});
  const int64_t kmax = dm->config().block_size - 1;
  if (c.num_speculative_tokens == 0) {
    c.num_speculative_tokens = kmax;
    c.adaptive_k = true;
  }
  if (c.num_speculative_tokens > kmax)
    fail("--speculative-config: num_speculative_tokens ", c.num_speculative_tokens, " exceeds block_size - 1 = ",
         kmax, " of the drafter (more masks than it was trained for)");
  target.set_tap_layers(dm->config().target_layer_ids);
  return dm;
}

std::unique_ptr<Proposer> new_proposer(const SpecConfig& c, const std::shared_ptr<DraftModel>& drafter,
                                       int64_t capacity) {
  if (c.method == "ngram") return std::make_unique<NgramProposer>(c.prompt_lookup_min, c.prompt_lookup_max);
  if (!drafter) fail("speculative method ", c.method, " needs its drafter loaded");
  return std::make_unique<DFlashProposer>(drafter, capacity, c.draft_sample_method);
}

std::unique_ptr<Proposer> make_proposer(SpecConfig& c, Transformer& target, int64_t capacity,
                                        std::optional<WeightFormat> draft_weights) {
  return new_proposer(c, load_drafter(c, target, draft_weights), capacity);
}

SpecResult generate_speculative(Transformer& model, Proposer& proposer, int64_t K, const std::vector<int32_t>& prompt,
                                const GenerateOptions& opts, const std::function<void(int32_t)>& on_token,
                                const KSelector* ksel) {
  const ModelConfig& c = model.config();
  const int64_t V = c.vocab_size;
  validate_generate(model, prompt, opts);
  if (K < 0) fail("num_speculative_tokens must be >= 0, found ", K);
  const int64_t P0 = static_cast<int64_t>(prompt.size());
  const int64_t total = P0 + opts.max_new_tokens;
  const std::vector<int32_t>& eos = opts.eos_ids.empty() ? c.eos_token_ids : opts.eos_ids;
  const bool greedy = opts.sampling.temperature <= 0;
  const bool taps = !proposer.tap_layers().empty();
  if (taps && proposer.tap_layers() != model.tap_layers()) model.set_tap_layers(proposer.tap_layers());

  SpecResult res;
  GenerateResult& r = res.gen;
  r.prompt_tokens = P0;
  r.finish_reason = "length";
  // The verify block may reach K positions past the last emitted token.
  KvCache cache = model.new_cache(total + K + 1);
  Rng rng(opts.sampling.seed);
  std::vector<float> logits, feats;
  std::vector<int32_t> seq = prompt;
  proposer.reset();
  Timer timer;
  model.prefill(prompt.data(), P0, cache, logits, false, taps ? &feats : nullptr);
  r.prefill_seconds = timer.seconds();
  if (opts.max_new_tokens == 0) return res;
  timer.reset();
  proposer.observe(seq, 0, P0, taps ? feats.data() : nullptr);

  std::vector<float> probs;
  bool done = false;
  // Appends a token; false once generation must stop.
  auto emit = [&](int32_t t) {
    seq.push_back(t);
    r.tokens.push_back(t);
    if (on_token) on_token(t);
    if (opts.stop_at_eos && std::find(eos.begin(), eos.end(), t) != eos.end()) {
      r.finish_reason = "stop";
      return false;
    }
    return static_cast<int64_t>(r.tokens.size()) < opts.max_new_tokens;
  };
  int32_t first;
  if (greedy) {
    first = argmax(logits.data(), V);
  } else {
    sampling_probs(logits.data(), V, opts.sampling, probs);
    first = sample_from_probs(probs.data(), V, rng);
  }
  done = !emit(first);
  Draft draft;
  std::vector<int32_t> block;
  double draft_ms = 0;  // measured proposer time per step (EMA)
  while (!done) {
    const int64_t remaining = opts.max_new_tokens - static_cast<int64_t>(r.tokens.size());
    int64_t k = std::min<int64_t>(K, remaining - 1);  // a pass emits accepted + 1 <= remaining
    if (ksel != nullptr) k = std::min(k, ksel->choose(1, res.stats, draft_ms));
    draft.clear();
    if (k > 0) {
      Timer dt;
      proposer.propose(seq, k, opts.sampling, rng, draft);
      const double ms = dt.seconds() * 1e3;
      draft_ms = draft_ms == 0 ? ms : 0.8 * draft_ms + 0.2 * ms;
    }
    if (draft.size() > k) fail(proposer.method(), ": proposed ", draft.size(), " tokens, asked for ", k);
    const int64_t kd = draft.size();
    block.assign(1, seq.back());
    block.insert(block.end(), draft.tokens.begin(), draft.tokens.end());
    const int64_t start = cache.size();
    model.forward_batch({Transformer::SeqChunk{block.data(), kd + 1, &cache, true, taps ? &feats : nullptr}}, logits);
    ++res.target_passes;
    const VerifyOutcome v =
        greedy ? verify_greedy(draft, logits.data(), V) : verify_sampled(draft, logits.data(), V, opts.sampling, rng);
    if (kd > 0) res.stats.record(kd, v.accepted);
    // The anchor and the accepted drafts are now committed and in the
    // target's cache; rejected rows are dropped by cropping. v.next (the
    // correction or bonus) is the new anchor: committed, not yet run.
    cache.set_size(start + v.accepted + 1);
    const int64_t n_seen = static_cast<int64_t>(seq.size()) - 1;
    bool go = true;
    for (int64_t i = 0; i < v.accepted && go; ++i) go = emit(draft.tokens[i]);
    if (go) go = emit(v.next);
    done = !go;
    if (!done) proposer.observe(seq, n_seen, v.accepted + 1, taps ? feats.data() : nullptr);
  }
  r.decode_seconds = timer.seconds();
  r.decode_steps = static_cast<int64_t>(r.tokens.size()) - 1;
  return res;
}

}  // namespace blockspec
