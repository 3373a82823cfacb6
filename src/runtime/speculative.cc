#include "runtime/speculative.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/timer.h"
#include "formats/dflash_config.h"
#include "runtime/dflash_proposer.h"
#include "kv/block_allocator.h"
#include "kv/kv_pool.h"
#include "runtime/k_selector.h"
#include "runtime/model_runner.h"
#include "runtime/ngram.h"
#include "runtime/scheduler.h"
#include "runtime/sequence.h"

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
  validate_generate(model, prompt, opts);
  if (K < 0) fail("num_speculative_tokens must be >= 0, found ", K);
  const int64_t P0 = static_cast<int64_t>(prompt.size());
  SpecResult res;
  GenerateResult& r = res.gen;
  r.prompt_tokens = P0;
  r.finish_reason = "length";
  if (!proposer.tap_layers().empty() && proposer.tap_layers() != model.tap_layers())
    model.set_tap_layers(proposer.tap_layers());
  Timer timer;
  if (opts.max_new_tokens == 0) {  // the prompt only
    KvCache cache = model.new_cache(P0);
    std::vector<float> logits;
    model.prefill(prompt.data(), P0, cache, logits, false);
    r.prefill_seconds = timer.seconds();
    return res;
  }
  // One sequence through the serving engine's step (scheduler plan +
  // ModelRunner), over a pool that holds exactly its worst case.
  Sequence s;
  s.st.id = 1;
  s.st.prompt_len = P0;
  s.st.max_tokens = opts.max_new_tokens;
  s.st.may_draft = K > 0;
  s.params.prompt = prompt;
  s.params.max_tokens = opts.max_new_tokens;
  s.params.sampling = opts.sampling;
  s.params.ignore_eos = !opts.stop_at_eos || !opts.eos_ids.empty();
  if (opts.stop_at_eos) s.params.stop_token_ids = opts.eos_ids;  // empty: the model's eos (ignore_eos false)
  s.rng = Rng(opts.sampling.seed);
  s.use_proposer(&proposer);
  proposer.reset();
  SchedulerOptions so;
  so.max_num_seqs = 1;
  so.max_step_tokens = EngineOptions{}.max_step_tokens;
  so.page_tokens = 16;
  so.max_model_len = c.max_position_embeddings;
  so.max_draft = K;
  so.draft_within_budget = true;
  const int64_t n_pages = Scheduler::pages_for(so, s.st);
  BlockAllocator blocks(n_pages);
  KvPool pool(c.n_layers, c.n_kv_heads, c.head_dim, model.kv_cache_dtype(), so.page_tokens, n_pages);
  if (!model.kv_k_scales().empty()) pool.set_layer_scales(model.kv_k_scales(), model.kv_v_scales());
  Scheduler sched(so, blocks);
  sched.add(&s.st);
  ModelRunner runner(model);
  double draft_ms = 0;  // measured proposer time per step (EMA), for ksel
  auto choose = [&](int64_t n) { return ksel ? std::min(K, ksel->choose(n, s.stats, draft_ms)) : K; };
  while (s.end_reason.empty()) {
    const StepPlan plan = sched.plan(choose);
    for (SeqState* st : plan.admitted) {
      BS_ASSERT(st == &s.st);
      s.cache = std::make_unique<KvCache>(pool);
      s.cache->append_pages(s.st.blocks);
      s.tokens = prompt;
    }
    BS_ASSERT(!plan.rows.empty());  // the pool holds the one sequence's worst case
    const bool verify = plan.rows[0].decode;
    const ModelRunner::StepOutcome o = runner.run(plan, [&](const SeqState&) -> Sequence& { return s; });
    if (o.n_drafted > 0) {
      const double ms = o.draft_seconds * 1e3;
      draft_ms = draft_ms == 0 ? ms : 0.8 * draft_ms + 0.2 * ms;
    }
    if (verify) ++res.target_passes;
    if (on_token)
      for (int32_t t : s.out) on_token(t);
    if (!verify && !s.out.empty()) {  // the prompt is in: the first token came from the prefill
      r.prefill_seconds = timer.seconds();
      timer.reset();
    }
  }
  r.decode_seconds = timer.seconds();
  r.finish_reason = s.end_reason;
  r.tokens.assign(s.tokens.begin() + P0, s.tokens.end());
  r.decode_steps = static_cast<int64_t>(r.tokens.size()) - 1;
  res.stats = s.stats;
  sched.finish(&s.st);
  return res;
}

}  // namespace blockspec
