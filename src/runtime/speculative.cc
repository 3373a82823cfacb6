#include "runtime/speculative.h"

#include <algorithm>

#include "base/error.h"
#include "base/timer.h"
#include "runtime/dflash_proposer.h"
#include "kv/block_allocator.h"
#include "kv/kv_pool.h"
#include "runtime/k_selector.h"
#include "runtime/model_runner.h"
#include "runtime/ngram.h"
#include "runtime/scheduler.h"
#include "runtime/sequence.h"

namespace blockspec {

const char* spec_method_name(SpecMethod m) {
  switch (m) {
    case SpecMethod::kNgram: return "ngram";
    case SpecMethod::kDFlash: return "dflash";
    case SpecMethod::kDFlash2: return "dflash2";
  }
  return "?";
}

int64_t k_for_batch(const SpecConfig& c, int64_t n_decoding) {
  int64_t k = c.num_speculative_tokens;
  for (const SpecConfig::BatchK& r : c.k_by_batch) {
    if (n_decoding < r.lo) break;
    k = r.k;  // the range holding n, or the last one before it
  }
  return std::min(k, c.num_speculative_tokens);
}

void configure_spec(SpecConfig& c, const DraftModel* drafter, Transformer& target) {
  const char* what = "--speculative-config";
  if (!c.uses_drafter()) {
    if (drafter) fail(what, ": method ngram takes no drafter");
    if (c.num_speculative_tokens == 0) {  // not given: adaptive, at most kNgramMaxDraft (or the table's K)
      c.num_speculative_tokens = kNgramMaxDraft;
      for (const SpecConfig::BatchK& r : c.k_by_batch) c.num_speculative_tokens = std::max(c.num_speculative_tokens, r.k);
      c.adaptive_k = c.k_by_batch.empty();
    }
    if (c.num_speculative_tokens < 1) fail(what, ": num_speculative_tokens must be >= 1");
    if (c.prompt_lookup_min < 1 || c.prompt_lookup_max < c.prompt_lookup_min)
      fail(what, ": prompt_lookup_min ", c.prompt_lookup_min, " / prompt_lookup_max ", c.prompt_lookup_max,
           " must satisfy 1 <= min <= max");
    return;
  }
  if (!drafter) fail(what, ": method ", c.method_name(), " needs its drafter loaded (", c.model, ")");
  const DraftConfig& dc = drafter->config();
  const SpecMethod m = dc.method == DraftMethod::kDFlash2 ? SpecMethod::kDFlash2 : SpecMethod::kDFlash;
  if (m != c.method)
    fail(what, ": method ", c.method_name(), " but the drafter ", c.model, " is ", draft_method_name(dc.method));
  const int64_t kmax = dc.block_size - 1;
  if (c.num_speculative_tokens == 0) {  // not given: adaptive up to block_size - 1, or the table's K under that
    c.num_speculative_tokens = kmax;
    c.adaptive_k = c.k_by_batch.empty();
  }
  if (c.lookup_first && (c.prompt_lookup_min < 1 || c.prompt_lookup_max < c.prompt_lookup_min))
    fail(what, ": prompt_lookup_min ", c.prompt_lookup_min, " / prompt_lookup_max ", c.prompt_lookup_max,
         " must satisfy 1 <= min <= max");
  if (c.num_speculative_tokens > kmax)
    fail(what, ": num_speculative_tokens ", c.num_speculative_tokens, " exceeds block_size - 1 = ", kmax,
         " of the drafter (more masks than it was trained for)");
  if (!c.draft_kv_dtype) c.draft_kv_dtype = target.kv_cache_dtype();  // vLLM: the draft inherits --kv-cache-dtype
  target.set_tap_layers(dc.target_layer_ids);
}

std::unique_ptr<Proposer> new_proposer(const SpecConfig& c, const std::shared_ptr<DraftModel>& drafter,
                                       int64_t capacity, bool whole_context) {
  if (!c.uses_drafter()) return std::make_unique<NgramProposer>(c.prompt_lookup_min, c.prompt_lookup_max);
  if (!drafter) fail("speculative method ", c.method_name(), " needs its drafter loaded");
  std::optional<NgramProposer> lookup;
  if (c.lookup_first) lookup.emplace(c.prompt_lookup_min, c.prompt_lookup_max);
  return std::make_unique<DFlashProposer>(drafter, capacity, c.greedy_draft, c.draft_kv_dtype.value_or(KvDType::kF32),
                                          whole_context, std::move(lookup));
}

std::unique_ptr<Proposer> make_proposer(SpecConfig& c, const std::shared_ptr<DraftModel>& drafter,
                                        Transformer& target, int64_t capacity) {
  configure_spec(c, drafter.get(), target);
  return new_proposer(c, drafter, capacity);
}

SpecResult generate_speculative(Transformer& model, Proposer& proposer, int64_t K, const std::vector<int32_t>& prompt,
                                const GenerateOptions& opts, const std::function<void(int32_t)>& on_token,
                                const KSelector* ksel) {
  return run_sequence(model, &proposer, K, prompt, opts, on_token, ksel);
}

SpecResult run_sequence(Transformer& model, Proposer* proposer, int64_t K, const std::vector<int32_t>& prompt,
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
  if (proposer == nullptr) K = 0;
  if (proposer && !proposer->tap_layers().empty() && proposer->tap_layers() != model.tap_layers())
    model.set_tap_layers(proposer->tap_layers());
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
  s.use_proposer(proposer);
  if (proposer) proposer->reset();
  SchedulerOptions so;
  so.max_num_seqs = 1;
  so.max_step_tokens = EngineOptions{}.max_step_tokens;
  so.page_tokens = 16;
  so.max_model_len = c.max_position_embeddings;
  so.max_draft = K;
  so.draft_within_budget = true;
  const int64_t n_pages = Scheduler::pages_for(so, s.st);
  BlockAllocator blocks(n_pages);
  KvPool pool(c.n_attention_layers(), c.n_kv_heads, c.head_dim, model.kv_cache_dtype(), so.page_tokens, n_pages);
  if (!model.kv_k_scales().empty()) pool.set_layer_scales(model.kv_k_scales(), model.kv_v_scales());
  Scheduler sched(so, blocks);
  sched.add(&s.st);
  ModelRunner runner(model);
  AdaptiveK adaptive;  // each source's k, recent acceptance and drafter cost, for ksel
  const bool lookup_first = proposer && proposer->lookup_first();
  adaptive.fix(K);
  auto choose = [&](int64_t n) { return ksel ? adaptive.choose(*ksel, n, lookup_first, K) : K; };
  while (s.end_reason.empty()) {
    const StepPlan plan = sched.plan(choose);
    for (SeqState* st : plan.admitted) {
      BS_ASSERT(st == &s.st);
      s.cache = std::make_unique<KvCache>(pool);
      s.cache->append_pages(s.st.blocks);
      if (model.state_floats_per_sequence() > 0) s.cache->own_state(model.state_floats_per_sequence());
      s.tokens = prompt;
    }
    BS_ASSERT(!plan.rows.empty());  // the pool holds the one sequence's worst case
    const bool verify = plan.rows[0].decode;
    const ModelRunner::StepOutcome o =
        runner.run(plan, [&](const SeqState&) -> Sequence& { return s; }, &adaptive.lengths());
    adaptive.stepped(o.drafted, o.looked_up, o.n_drafted, o.n_lookup, o.draft_seconds, verify);
    if (ksel) adaptive.forwarded(*ksel, o.decode_rows, o.forward_seconds);
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
