#include "runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <unordered_map>

#include "base/error.h"
#include "base/timer.h"
#include "runtime/engine_impl.h"
#include "runtime/spec_verify.h"

namespace blockspec {

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds.size() && v > bounds[i]) ++i;
  ++counts[i];
  sum += v;
  ++count;
}

namespace {

Histogram make_hist(std::vector<double> bounds) {
  Histogram h;
  h.bounds = std::move(bounds);
  h.counts.assign(h.bounds.size() + 1, 0);
  return h;
}

}  // namespace

Engine::Engine(std::unique_ptr<Transformer> model, const EngineOptions& opts) : impl_(std::make_unique<Impl>()) {
  Impl& I = *impl_;
  I.model = std::move(model);
  I.opts = opts;
  const ModelConfig& c = I.model->config();
  if (opts.max_num_seqs < 1 || opts.max_num_seqs > 1024)
    fail("--max-num-seqs must be in [1, 1024], found ", opts.max_num_seqs);
  I.max_model_len = opts.max_model_len > 0 ? opts.max_model_len : c.max_position_embeddings;
  if (I.max_model_len > c.max_position_embeddings)
    fail("--max-model-len ", I.max_model_len, " exceeds the model's max_position_embeddings ",
         c.max_position_embeddings);
  if (opts.max_step_tokens < 16) fail("max_step_tokens must be >= 16, found ", opts.max_step_tokens);
  max_model_len_ = I.max_model_len;
  // A given num_speculative_tokens is the draft length of every step (as in
  // vLLM); without it the draft length adapts to the measured verify cost.
  int64_t max_draft = 0;
  if (opts.spec) {
    I.spec = opts.spec;
    I.drafter = opts.drafter;
    configure_spec(*I.spec, I.drafter.get(), *I.model);  // fills in K for drafters
    max_draft = I.spec->num_speculative_tokens;
    if (I.spec->adaptive_k)
      I.ksel = opts.verify_cost_ms.empty() ? KSelector(*I.model, max_draft, opts.max_num_seqs)
                                           : KSelector(opts.verify_cost_ms, max_draft);
  }
  if (!opts.capture_taps.empty()) {
    if (opts.spec) fail("capture_taps (drafter data generation) cannot be combined with speculative decoding");
    I.model->set_tap_layers(opts.capture_taps);
  }
  // KV budget in pages of kPageTokens tokens.
  const int64_t per_token = I.model->kv_bytes_per_token();
  // Default: room for max_num_seqs full-length sequences, but at most 2 GiB
  // of KV (and at least one full-length sequence).
  const int64_t page_bytes = per_token * kPageTokens;
  const int64_t longest = I.max_model_len + (max_draft > 0 ? max_draft + 1 : 0);  // a verify block past the end
  const int64_t longest_pages = (longest + kPageTokens - 1) / kPageTokens;
  const int64_t full = opts.max_num_seqs * longest_pages;
  const int64_t pages_total = opts.kv_cache_mb > 0 ? opts.kv_cache_mb * (int64_t(1) << 20) / page_bytes
                                                   : std::max(longest_pages, std::min(full, (int64_t(2) << 30) / page_bytes));
  if (pages_total < longest_pages)
    fail("the KV cache budget (", pages_total * kPageTokens, " tokens) is smaller than --max-model-len ",
         I.max_model_len, longest > I.max_model_len ? " plus a verify block" : "",
         "; raise the KV memory or lower --max-model-len");
  {
    const ModelConfig& mc = I.model->config();
    I.pool = std::make_unique<KvPool>(mc.n_attention_layers(), mc.n_kv_heads, mc.head_dim, I.model->kv_cache_dtype(), kPageTokens,
                                      pages_total);
    if (!I.model->kv_k_scales().empty()) I.pool->set_layer_scales(I.model->kv_k_scales(), I.model->kv_v_scales());
  }
  I.blocks = std::make_unique<BlockAllocator>(pages_total);
  SchedulerOptions so;
  so.max_num_seqs = opts.max_num_seqs;
  so.max_step_tokens = opts.max_step_tokens;
  so.page_tokens = kPageTokens;
  so.max_model_len = I.max_model_len;
  so.max_draft = max_draft;
  if (I.spec) so.max_draft_pos = I.spec->draft_max_model_len;
  if (const int64_t sf = I.model->state_floats_per_sequence(); sf > 0) {
    I.state = std::make_unique<StatePool>(opts.max_num_seqs, sf);
    I.state_slots = std::make_unique<BlockAllocator>(opts.max_num_seqs);
    I.m.state_slots_total = opts.max_num_seqs;
    I.m.state_bytes_per_slot = sf * static_cast<int64_t>(sizeof(float));
  }
  if (opts.enable_prefix_caching) {
    // A proposer that reads the target's taps needs them for every token; one
    // that keeps what it computes from them (DFlash's context K/V) has that
    // kept per cached page instead.
    int64_t ctx_bytes = 0;
    bool taps = false;
    if (I.spec) {
      std::unique_ptr<Proposer> probe = new_proposer(*I.spec, I.drafter, 1);
      if (opts.wrap_proposer) probe = opts.wrap_proposer(std::move(probe));
      taps = !probe->tap_layers().empty();
      ctx_bytes = probe->context_bytes_per_token();
    }
    if (I.state) I.prefix_caching_note = "prefix caching is off: a hybrid model's recurrent state is not cached";
    else if (taps && ctx_bytes == 0)
      I.prefix_caching_note = "prefix caching is off: the drafter reads the target's features of every prompt token";
    else if (!opts.capture_taps.empty()) I.prefix_caching_note = "prefix caching is off while capturing taps";
    else I.prefix_caching = true;
    if (I.prefix_caching && taps) {
      I.draft_page_bytes = ctx_bytes * kPageTokens;
      I.draft_pages.reset(new uint8_t[static_cast<size_t>(pages_total * I.draft_page_bytes)]);
      I.draft_page_hash.assign(static_cast<size_t>(pages_total), 0);
      I.prefix_caching_note = str_cat("the drafter's context is kept beside each cached page, ", ctx_bytes,
                                      " bytes a token, up to ", (pages_total * I.draft_page_bytes) >> 20, " MiB");
      so.cached_page_usable = [&I](int32_t b, uint64_t h) { return I.draft_page_hash[b] == h; };
    }
  }
  so.prefix_caching = I.prefix_caching;
  I.m.prefix_caching = I.prefix_caching;
  I.sched = std::make_unique<Scheduler>(so, *I.blocks, I.state_slots.get());
  I.runner = std::make_unique<ModelRunner>(*I.model);
  I.m.ttft_s = make_hist({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80});
  I.m.tpot_s = make_hist({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80});
  I.m.e2e_s = make_hist({0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960});
  I.m.kv_page_tokens = kPageTokens;
  I.m.kv_pages_total = pages_total;
  I.dead = &dead_;
  I.thread = std::thread([&I] { I.loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

const ModelConfig& Engine::model_config() const { return impl_->model->config(); }
int64_t Engine::vocab_size() const { return impl_->model->config().vocab_size; }
std::string Engine::verify_cost_table() const {
  return impl_->spec && impl_->spec->adaptive_k ? impl_->ksel.describe() : std::string();
}

uint64_t Engine::submit(RequestParams p, std::function<void(const TokenEvent&)> on_event) {
  Impl& I = *impl_;
  const ModelConfig& c = I.model->config();
  if (p.prompt.empty()) fail("the prompt is empty");
  for (int32_t t : p.prompt)
    if (t < 0 || t >= c.vocab_size) fail("prompt token id ", t, " is outside the vocabulary (", c.vocab_size, ")");
  if (p.max_tokens < 1) fail("max_tokens must be >= 1, found ", p.max_tokens);
  const int64_t need = static_cast<int64_t>(p.prompt.size()) + p.max_tokens;
  if (need > I.max_model_len)
    fail("the prompt (", p.prompt.size(), " tokens) + max_tokens (", p.max_tokens, ") = ", need,
         " exceeds the maximum model length ", I.max_model_len);
  validate_sampling(p.sampling);
  if (p.on_taps && I.opts.capture_taps.empty()) fail("on_taps needs an engine started with capture_taps");
  if (!std::isfinite(p.presence_penalty) || std::fabs(p.presence_penalty) > 2 || !std::isfinite(p.frequency_penalty) ||
      std::fabs(p.frequency_penalty) > 2)
    fail("presence_penalty and frequency_penalty must be in [-2, 2]");
  if (p.grammar && p.ignore_eos) fail("structured output cannot be combined with ignore_eos: a complete output ends the answer");
  if (p.n_logprobs < -1 || p.n_logprobs > c.vocab_size)
    fail("n_logprobs must be -1 (none) or in [0, ", c.vocab_size, "], found ", p.n_logprobs);
  if (dead_.load()) fail("the engine has stopped after an internal error");
  auto s = std::make_unique<Sequence>();
  s->params = std::move(p);
  s->st.prompt_tokens = s->params.prompt.data();  // the scheduler's prefix-cache lookups
  s->st.prompt_len = static_cast<int64_t>(s->params.prompt.size());
  s->st.max_tokens = s->params.max_tokens;
  s->st.may_draft = I.spec.has_value() && !s->penalized();
  s->on_event = std::move(on_event);
  s->t_submit = now_s();
  s->rng = Rng(s->params.sampling.seed);
  uint64_t id;
  {
    std::lock_guard<std::mutex> g(I.mu);
    id = s->st.id = I.next_id++;
    I.incoming.push_back(std::move(s));
    ++I.m.waiting;
  }
  I.cv.notify_all();
  return id;
}

void Engine::cancel(uint64_t id, const std::string& reason) {
  if (reason != "abort" && reason != "stop")
    fail("Engine::cancel: reason must be \"abort\" or \"stop\", found ", quote_for_message(reason));
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    impl_->to_cancel.emplace_back(id, reason);
  }
  impl_->cv.notify_all();
}

const std::vector<int32_t>& Engine::eos_token_ids() const { return impl_->model->config().eos_token_ids; }

bool Engine::prefix_caching() const { return impl_->prefix_caching; }
const std::string& Engine::prefix_caching_note() const { return impl_->prefix_caching_note; }

void Engine::reset_prefix_cache() {
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    impl_->reset_cache = true;
  }
  impl_->cv.notify_all();
}

EngineMetrics Engine::metrics() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->m;
}

void Engine::Impl::finish(Sequence& s, const std::string& reason, const std::string& error) {
  if (s.ended) return;
  s.ended = true;
  TokenEvent ev;
  ev.finished = true;
  ev.finish_reason = reason;
  ev.error = error;
  ev.prompt_tokens = s.st.prompt_len;
  ev.completion_tokens = s.st.n_generated;
  ev.cached_tokens = s.st.n_cached;
  ev.spec = s.stats;
  const double t = now_s();
  if (s.running) sched->finish(&s.st);  // its pages go back now
  s.running = false;
  s.cache.reset();
  s.use_proposer(nullptr);
  s.owned_proposer.reset();
  {
    std::lock_guard<std::mutex> g(mu);
    if (reason == "abort") ++m.requests_aborted;
    else ++m.requests_finished;
    m.e2e_s.observe(t - s.t_submit);
    if (s.st.n_generated > 1 && s.t_first > 0)
      m.tpot_s.observe((t - s.t_first) / static_cast<double>(s.st.n_generated - 1));
    m.spec.merge(s.stats);
    m.finished_by_reason[reason]++;
  }
  if (s.on_event) s.on_event(ev);
}

void Engine::Impl::loop() {
  try {
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return stop || !incoming.empty() || !to_cancel.empty() || !live.empty() || reset_cache; });
        if (stop) break;
      }
      if (opts.before_step) opts.before_step();
      step();
    }
  } catch (const std::exception& e) {
    dead->store(true);
    for (auto& [id, s] : live)
      if (s->running) finish(*s, "error", std::string("internal error: ") + e.what());
  }
  // Stopping: everything still queued or running ends as aborted.
  {
    std::lock_guard<std::mutex> g(mu);
    for (auto& s : incoming) live.emplace(s->st.id, std::move(s));
    incoming.clear();
  }
  for (auto& [id, s] : live) finish(*s, "abort");  // no-op for those that ended in error
  live.clear();
}

}  // namespace blockspec
