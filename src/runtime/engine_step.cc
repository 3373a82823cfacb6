// One engine step: admissions and cancellations, then ONE target forward over
// every running sequence (decode tokens / verify blocks first, prompt chunks
// in the rest of the token budget), then sampling or verification.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "base/error.h"
#include "base/timer.h"
#include "runtime/engine_impl.h"
#include "runtime/spec_verify.h"

namespace blockspec {

int64_t Engine::Impl::reserve_tokens(const RequestParams& p) const {
  return static_cast<int64_t>(p.prompt.size()) + p.max_tokens + (spec ? spec->num_speculative_tokens + 1 : 0);
}

int32_t Engine::Impl::pick(Sequence& s, const float* row) {
  const int64_t V = model->config().vocab_size;
  if (s.penalized()) {  // OpenAI: logit -= presence * [count > 0] + frequency * count
    s.adjusted.assign(row, row + V);
    for (const auto& [t, c] : s.counts) s.adjusted[t] -= s.params.presence_penalty + s.params.frequency_penalty * c;
    row = s.adjusted.data();
  }
  if (s.params.sampling.temperature <= 0) return argmax(row, V);
  sampling_probs(row, V, s.params.sampling, s.probs);
  return sample_from_probs(s.probs.data(), V, s.rng);
}

bool Engine::Impl::emit(Sequence& s, int32_t t) {
  s.tokens.push_back(t);
  s.out.push_back(t);
  ++s.n_generated;
  s.counts[t]++;
  if (s.n_generated == 1) {
    s.t_first = now_s();
    std::lock_guard<std::mutex> g(mu);
    m.ttft_s.observe(s.t_first - s.t_submit);
  }
  const auto& eos = model->config().eos_token_ids;
  const auto& stops = s.params.stop_token_ids;
  if ((!s.params.ignore_eos && std::find(eos.begin(), eos.end(), t) != eos.end()) ||
      std::find(stops.begin(), stops.end(), t) != stops.end()) {
    s.end_reason = "stop";  // finish() reports it after this step's tokens
    s.draft.clear();
    return false;
  }
  if (s.n_generated >= s.params.max_tokens) {
    s.end_reason = "length";
    return false;
  }
  return true;
}

void Engine::Impl::admit() {
  std::vector<std::pair<uint64_t, std::string>> cancels;  // id, reason
  std::vector<std::unique_ptr<Sequence>> admitted, dropped;
  std::vector<std::string> dropped_why;
  {
    std::lock_guard<std::mutex> g(mu);
    cancels.swap(to_cancel);
    for (const auto& [id, why] : cancels) {
      auto it = std::find_if(waiting.begin(), waiting.end(), [id = id](const auto& s) { return s->id == id; });
      if (it != waiting.end()) {
        dropped.push_back(std::move(*it));
        dropped_why.push_back(why);
        waiting.erase(it);
      }
    }
    while (!waiting.empty() && static_cast<int64_t>(running.size() + admitted.size()) < opts.max_num_seqs) {
      const int64_t pages = (reserve_tokens(waiting.front()->params) + kPageTokens - 1) / kPageTokens;
      if (pages_used + pages > pages_total) break;  // FIFO: the head waits for memory
      pages_used += pages;
      waiting.front()->pages = pages;
      admitted.push_back(std::move(waiting.front()));
      waiting.pop_front();
    }
    m.waiting = static_cast<int64_t>(waiting.size());
    m.kv_pages_used = pages_used;
  }
  for (size_t i = 0; i < dropped.size(); ++i) finish(*dropped[i], dropped_why[i]);
  for (auto& s : running) {
    auto c = std::find_if(cancels.begin(), cancels.end(), [&](const auto& x) { return x.first == s->id; });
    if (c != cancels.end()) finish(*s, c->second);  // no-op when s finished already
  }
  for (auto& s : admitted) {
    const int64_t cap = reserve_tokens(s->params);
    s->cache = std::make_unique<KvCache>(*pool);
    // The page accounting above reserved exactly these pages for this request.
    if (!s->cache->reserve(cap)) fail("engine: KV pool out of pages despite accounting (", cap, " tokens)");
    if (spec) {
      s->proposer = new_proposer(*spec, drafter, cap);
      s->proposer->reset();
    }
    s->tokens = s->params.prompt;
    running.push_back(std::move(s));
  }
}

void Engine::Impl::step() {
  admit();
  // Drop finished sequences (their pages return to the pool).
  auto gone = std::stable_partition(running.begin(), running.end(), [](const auto& s) { return !s->done; });
  if (gone != running.end()) {
    std::lock_guard<std::mutex> g(mu);
    for (auto it = gone; it != running.end(); ++it) pages_used -= (*it)->pages;
    m.kv_pages_used = pages_used;
  }
  running.erase(gone, running.end());
  {
    std::lock_guard<std::mutex> g(mu);
    m.running = static_cast<int64_t>(running.size());
  }
  if (running.empty()) return;

  const ModelConfig& c = model->config();
  const int64_t V = c.vocab_size;
  const bool taps = drafter != nullptr;
  int64_t n_dec = 0;
  for (const auto& s : running) n_dec += s->prefilling() ? 0 : 1;
  SpecStats seen;
  {
    std::lock_guard<std::mutex> g(mu);
    seen = m.spec;
  }
  const int64_t k = spec ? ksel.choose(n_dec, seen, draft_ms_ema) : 0;

  // ---- plan: decode / verify blocks first, then prompt chunks ----
  std::vector<Transformer::SeqChunk> chunks;
  std::vector<Sequence*> order;
  int64_t budget = opts.max_step_tokens;
  Timer draft_timer;
  int64_t n_drafted = 0;
  for (auto& sp : running) {
    Sequence& s = *sp;
    if (s.prefilling()) continue;
    s.draft.clear();
    const int64_t remaining = s.params.max_tokens - s.n_generated;
    const int64_t ks = s.penalized() ? 0 : std::min<int64_t>(k, remaining - 1);
    if (ks > 0 && s.proposer) {
      s.proposer->propose(s.tokens, ks, s.params.sampling, s.rng, s.draft);
      ++n_drafted;
    }
    s.block.assign(1, s.tokens.back());
    s.block.insert(s.block.end(), s.draft.tokens.begin(), s.draft.tokens.end());
    chunks.push_back({s.block.data(), static_cast<int64_t>(s.block.size()), s.cache.get(), true,
                      taps ? &s.taps : nullptr});
    order.push_back(&s);
    budget -= static_cast<int64_t>(s.block.size());
  }
  if (n_drafted > 0) {
    const double ms = draft_timer.seconds() * 1e3 / static_cast<double>(n_drafted);
    draft_ms_ema = draft_ms_ema == 0 ? ms : 0.8 * draft_ms_ema + 0.2 * ms;
  }
  bool any_prefill = false;
  for (auto& sp : running) {
    Sequence& s = *sp;
    if (!s.prefilling()) continue;
    // Always move at least one prompt forward a little, so decodes filling
    // the budget cannot starve admission.
    const int64_t n = std::min(s.prompt_len() - s.n_prefilled, std::max<int64_t>(budget, any_prefill ? 0 : 16));
    if (n <= 0) break;
    chunks.push_back({s.params.prompt.data() + s.n_prefilled, n, s.cache.get(), false, taps ? &s.taps : nullptr});
    order.push_back(&s);
    budget -= n;
    any_prefill = true;
  }

  // ---- one forward over everything ----
  std::vector<float> logits;
  model->forward_batch(chunks, logits);

  // ---- sample / verify ----
  int64_t row = 0, new_tokens = 0, prompt_done = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    Sequence& s = *order[i];
    const Transformer::SeqChunk& ch = chunks[i];
    s.out.clear();
    if (s.prefilling()) {
      const int64_t n_seen = s.n_prefilled;
      s.n_prefilled += ch.n;
      prompt_done += ch.n;
      if (s.proposer) s.proposer->observe(s.tokens, n_seen, ch.n, taps ? s.taps.data() : nullptr);
      if (!s.prefilling()) emit(s, pick(s, logits.data() + row * V));
      row += 1;
    } else {
      const int64_t kd = s.draft.size();
      const int64_t start = s.cache->size() - kd - 1;
      VerifyOutcome v;
      if (kd == 0) {
        v.next = pick(s, logits.data() + row * V);
      } else {
        v = s.params.sampling.temperature <= 0
                ? verify_greedy(s.draft, logits.data() + row * V, V)
                : verify_sampled(s.draft, logits.data() + row * V, V, s.params.sampling, s.rng);
        s.stats.record(kd, v.accepted);
      }
      row += kd + 1;
      s.cache->set_size(start + v.accepted + 1);
      const int64_t n_seen = static_cast<int64_t>(s.tokens.size()) - 1;
      bool go = true;
      for (int64_t j = 0; j < v.accepted && go; ++j) go = emit(s, s.draft.tokens[j]);
      if (go) go = emit(s, v.next);
      if (go && s.proposer) s.proposer->observe(s.tokens, n_seen, v.accepted + 1, taps ? s.taps.data() : nullptr);
    }
    // Report this step's tokens (and the end, if reached).
    if (!s.out.empty()) {
      TokenEvent ev;
      ev.tokens = s.out;
      new_tokens += static_cast<int64_t>(ev.tokens.size());
      ev.prompt_tokens = s.prompt_len();
      ev.completion_tokens = s.n_generated;
      if (s.on_event) s.on_event(ev);
    }
    if (!s.end_reason.empty()) finish(s, s.end_reason);
  }
  std::lock_guard<std::mutex> g(mu);
  m.generation_tokens += static_cast<uint64_t>(new_tokens);
  m.prompt_tokens += static_cast<uint64_t>(prompt_done);
  m.steps++;
  m.last_k = k;
}

}  // namespace blockspec
