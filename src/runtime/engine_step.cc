// One engine step: submissions and cancellations into the scheduler, its
// plan (admissions, then decode / verify rows first and prompt chunks in the
// rest of the token budget), the ModelRunner's drafts + ONE target forward +
// verification over every row, then the tokens reported and finished
// requests ended. Finished requests give their KV pages back in the same step.
#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "base/timer.h"
#include "runtime/engine_impl.h"

namespace blockspec {

namespace {

// A request's tap sink for drafter data generation: a proposer that is
// only ever observed (the engine has no spec, so it is never asked to
// draft), passing the committed tokens' taps to RequestParams::on_taps.
class TapRecorder : public Proposer {
 public:
  TapRecorder(std::vector<int64_t> layers, std::function<void(int64_t, int64_t, const float*)> sink)
      : layers_(std::move(layers)), sink_(std::move(sink)) {}
  std::string method() const override { return "tap-recorder"; }
  std::vector<int64_t> tap_layers() const override { return layers_; }
  void observe(const std::vector<int32_t>&, int64_t n_seen, int64_t n_new, const float* taps) override {
    sink_(n_seen, n_new, taps);
  }
  void propose(const std::vector<int32_t>&, int64_t, const SamplingParams&, Rng&, Draft& out) override { out.clear(); }
  void reset() override {}

 private:
  std::vector<int64_t> layers_;
  std::function<void(int64_t, int64_t, const float*)> sink_;
};

}  // namespace

void Engine::Impl::intake() {
  std::deque<std::unique_ptr<Sequence>> arrived;
  std::vector<std::pair<uint64_t, std::string>> cancels;  // id, reason
  bool reset = false;
  {
    std::lock_guard<std::mutex> g(mu);
    arrived.swap(incoming);
    cancels.swap(to_cancel);
    std::swap(reset, reset_cache);
  }
  if (reset) blocks->reset_cache();
  for (auto& s : arrived) {
    sched->add(&s->st);
    const uint64_t id = s->st.id;
    live.emplace(id, std::move(s));
  }
  for (const auto& [id, why] : cancels) {
    auto it = live.find(id);
    if (it == live.end()) continue;  // unknown or already finished
    if (!it->second->running) sched->drop_waiting(id);
    finish(*it->second, why);
    live.erase(it);
  }
}

void Engine::Impl::start(Sequence& s) {
  s.running = true;
  s.cache = std::make_unique<KvCache>(*pool);
  s.cache->append_pages(s.st.blocks);  // the whole worst case, reserved by the scheduler
  s.cache->set_size(s.st.n_cached);    // a prompt prefix found in the prefix cache is already there
  s.n_published = s.n_draft_saved = s.st.n_cached / kPageTokens;  // those pages are published already
  s.page_hashes.assign(s.n_published, 0);  // only the last one is known, and needed
  if (s.n_published > 0) s.page_hashes.back() = s.st.cached_hash;
  s.last_page_hash = s.st.cached_hash;
  if (draft_page_bytes > 0)  // fresh pages hold no drafter context until this sequence saves theirs
    for (size_t i = s.n_published; i < s.st.blocks.size(); ++i) draft_page_hash[s.st.blocks[i]] = 0;
  if (state) {  // a hybrid model's recurrent state: the slot the scheduler gave it, from zero
    state->clear(s.st.state_slot);
    s.cache->attach_state(state->slot(s.st.state_slot), state->floats_per_slot());
  }
  if (spec) {
    s.owned_proposer = new_proposer(*spec, drafter, s.cache->capacity(), draft_page_bytes > 0);
    if (opts.wrap_proposer) s.owned_proposer = opts.wrap_proposer(std::move(s.owned_proposer));
    s.use_proposer(s.owned_proposer.get());
    s.proposer->reset();
    if (draft_page_bytes > 0)  // the cached pages' drafter context, which the scheduler checked is kept
      for (int64_t i = 0; i < s.n_draft_saved; ++i)
        s.proposer->load_context(kPageTokens, draft_pages.get() + s.st.blocks[i] * draft_page_bytes);
  } else if (s.params.on_taps) {
    s.owned_proposer = std::make_unique<TapRecorder>(opts.capture_taps, s.params.on_taps);
    s.use_proposer(s.owned_proposer.get());  // observed only: without spec the request never drafts
  }
  s.tokens = s.params.prompt;
  if (s.params.grammar) s.grammar_state = s.params.grammar->start_state();
}

void Engine::Impl::publish_pages(Sequence& s) {
  if (!prefix_caching || !s.cache) return;
  // Pages whose every position holds final K/V of a known token (a request
  // that ended inside a verify block keeps accepted drafts it never emitted).
  const int64_t full = std::min<int64_t>(s.cache->size(), static_cast<int64_t>(s.tokens.size())) / kPageTokens;
  for (; s.n_published < full; ++s.n_published) {
    const int32_t* t = s.tokens.data() + s.n_published * kPageTokens;
    const uint64_t h = page_hash(s.last_page_hash, t, kPageTokens);
    blocks->publish(s.st.blocks[s.n_published], h, s.last_page_hash, t, kPageTokens);
    s.page_hashes.push_back(h);
    s.last_page_hash = h;
  }
  if (draft_page_bytes == 0 || !s.proposer) return;
  // The drafter's context of published pages. It runs a token's taps at its
  // next draft, so it trails the target: when a published page waits for
  // it (the draft length is 0 now, or the request ends) it runs them now.
  if (s.proposer->context_size() / kPageTokens < s.n_published) {
    const Timer t;
    s.proposer->commit_context();
    context_seconds += t.seconds();
  }
  const int64_t ready = std::min(s.n_published, s.proposer->context_size() / kPageTokens);
  for (; s.n_draft_saved < ready; ++s.n_draft_saved) {
    // Into the page published under the hash: this sequence's, or one
    // published before it with the same tokens (whose drafter context may
    // be missing: its sequence ended before the drafter ran its last taps).
    const int64_t i = s.n_draft_saved;
    const uint64_t h = s.page_hashes[i], parent = i > 0 ? s.page_hashes[i - 1] : 0;
    const int32_t found = blocks->find_cached(h, parent, s.tokens.data() + i * kPageTokens, kPageTokens);
    const int32_t b = found >= 0 ? found : s.st.blocks[i];
    if (draft_page_hash[b] == h) continue;
    if (s.proposer->save_context(i * kPageTokens, kPageTokens, draft_pages.get() + b * draft_page_bytes))
      draft_page_hash[b] = h;
  }
}

void Engine::Impl::publish() {
  std::lock_guard<std::mutex> g(mu);
  m.running = sched->n_running();
  m.waiting = sched->n_waiting() + static_cast<int64_t>(incoming.size());
  m.kv_pages_used = blocks->n_used();
  m.kv_pages_cached = blocks->n_cached();
  m.prefix_cache_queries = sched->cache_queries();
  m.prefix_cache_hits = sched->cache_hits();
  if (state_slots) m.state_slots_used = state_slots->n_used();
}

int64_t Engine::Impl::choose_k(int64_t n_decoding) {
  if (!spec) return 0;
  if (spec->adaptive_k) return adaptive.choose(ksel, n_decoding, spec->lookup_first, spec->num_speculative_tokens);
  const int64_t k = k_for_batch(*spec, n_decoding);
  adaptive.fix(k);
  return k;
}

void Engine::Impl::step() {
  const Timer step_timer;
  intake();
  const StepPlan plan = sched->plan([this](int64_t n) { return choose_k(n); });
  for (SeqState* st : plan.admitted) start(*live.at(st->id));
  publish();
  if (plan.rows.empty()) return;

  const ModelRunner::StepOutcome o =
      runner->run(plan, [this](const SeqState& st) -> Sequence& { return *live.at(st.id); }, &adaptive.lengths());
  const bool any_decode =
      std::any_of(plan.rows.begin(), plan.rows.end(), [](const StepPlan::Row& r) { return r.decode; });
  adaptive.stepped(o.drafted, o.looked_up, o.n_drafted, o.n_lookup, o.draft_seconds, any_decode);
  if (spec && spec->adaptive_k) adaptive.forwarded(ksel, o.decode_rows, o.forward_seconds);
  // Report this step's tokens (and the ends).
  std::vector<uint64_t> ended;
  for (Sequence* sp : o.touched) {
    Sequence& s = *sp;
    publish_pages(s);  // before finish() frees the pages: they stay cached
    if (s.out.empty() && s.end_reason.empty()) continue;
    if (!s.out.empty()) {
      if (s.st.n_generated == static_cast<int64_t>(s.out.size())) {  // its first tokens
        std::lock_guard<std::mutex> g(mu);
        m.ttft_s.observe(s.t_first - s.t_submit);
      }
      TokenEvent ev;
      ev.tokens = s.out;
      ev.ends_with_stop_token = s.end_reason == "stop";  // set only by a stop token (ModelRunner::emit)
      ev.cached_tokens = s.st.n_cached;
      ev.logprobs = std::move(s.out_logprobs);
      s.out_logprobs.clear();
      ev.prompt_tokens = s.st.prompt_len;
      ev.completion_tokens = s.st.n_generated;
      if (s.on_event) s.on_event(ev);
      s.out.clear();  // a sequence with several rows is reported once
    }
    if (!s.end_reason.empty() && !s.ended) {
      finish(s, s.end_reason);
      ended.push_back(s.st.id);
    }
  }
  for (uint64_t id : ended) live.erase(id);
  publish();
  std::lock_guard<std::mutex> g(mu);
  m.generation_tokens += static_cast<uint64_t>(o.new_tokens);
  m.prompt_tokens += static_cast<uint64_t>(o.prompt_tokens);
  m.steps++;
  m.step_seconds += step_timer.seconds();
  m.forward_seconds += o.forward_seconds;
  m.draft_seconds += o.draft_seconds;
  context_seconds += o.context_seconds;
  m.draft_context_seconds = context_seconds;
  m.last_k = plan.k;
  if (spec && any_decode) m.steps_by_k[plan.k]++;
  if (spec && spec->adaptive_k && o.decode_rows > 0)
    m.verify_cost_ms[o.decode_rows] = ksel.served_ms(o.decode_rows, &adaptive.live_cost());
  if (spec && spec->adaptive_k) m.draft_cost_ms = adaptive.draft_ms();
}

}  // namespace blockspec
