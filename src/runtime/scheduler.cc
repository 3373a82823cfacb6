#include "runtime/scheduler.h"

#include <algorithm>

#include "base/error.h"

namespace blockspec {

Scheduler::Scheduler(const SchedulerOptions& opts, BlockAllocator& blocks, BlockAllocator* state_slots)
    : o_(opts), blocks_(blocks), state_slots_(state_slots) {
  if (o_.max_num_seqs < 1) fail("scheduler: max_num_seqs must be >= 1, found ", o_.max_num_seqs);
  if (o_.max_step_tokens < 1) fail("scheduler: max_step_tokens must be >= 1, found ", o_.max_step_tokens);
  if (o_.page_tokens < 1) fail("scheduler: page_tokens must be >= 1, found ", o_.page_tokens);
  if (o_.max_draft < 0) fail("scheduler: max_draft must be >= 0, found ", o_.max_draft);
}

int64_t Scheduler::pages_for(const SchedulerOptions& o, const SeqState& s) {
  const int64_t tokens = s.prompt_len + s.max_tokens + (o.max_draft > 0 ? o.max_draft + 1 : 0);
  return (tokens + o.page_tokens - 1) / o.page_tokens;
}

void Scheduler::add(SeqState* s) {
  BS_ASSERT(s != nullptr && s->blocks.empty());
  waiting_.push_back(s);
}

SeqState* Scheduler::drop_waiting(uint64_t id) {
  auto it = std::find_if(waiting_.begin(), waiting_.end(), [id](const SeqState* s) { return s->id == id; });
  if (it == waiting_.end()) return nullptr;
  SeqState* s = *it;
  waiting_.erase(it);
  return s;
}

void Scheduler::admit(StepPlan& plan) {
  while (!waiting_.empty() && n_running() < o_.max_num_seqs) {
    SeqState* s = waiting_.front();
    // The prompt's leading full pages already in the prefix cache (never the
    // page of its last token, which must run to give the first logits).
    std::vector<int32_t> hits;
    uint64_t last_hash = 0;
    int64_t unowned = 0;  // hits that count as free now
    if (o_.prefix_caching && s->prompt_tokens) {
      uint64_t parent = 0;
      for (int64_t i = 0; i < (s->prompt_len - 1) / o_.page_tokens; ++i) {
        const int32_t* t = s->prompt_tokens + i * o_.page_tokens;
        const uint64_t h = page_hash(parent, t, o_.page_tokens);
        const int32_t b = blocks_.find_cached(h, parent, t, o_.page_tokens);
        if (b < 0 || (o_.cached_page_usable && !o_.cached_page_usable(b, h))) break;
        hits.push_back(b);
        unowned += blocks_.ref_count(b) == 0;
        parent = last_hash = h;
      }
    }
    const int64_t need = pages_for(*s) - static_cast<int64_t>(hits.size());
    if (blocks_.n_free() - unowned < need) break;  // FIFO: the head waits for memory
    if (state_slots_ && !state_slots_->can_allocate(1)) break;  // ... or for a state slot
    for (int32_t b : hits) blocks_.take_cached(b);  // first: allocate() must not evict them
    s->blocks = hits;
    const std::vector<int32_t> fresh = blocks_.allocate(need);
    s->blocks.insert(s->blocks.end(), fresh.begin(), fresh.end());
    s->n_cached = s->n_prefilled = static_cast<int64_t>(hits.size()) * o_.page_tokens;
    s->cached_hash = hits.empty() ? 0 : last_hash;
    if (o_.prefix_caching) {
      cache_queries_ += static_cast<uint64_t>(s->prompt_len);
      cache_hits_ += static_cast<uint64_t>(s->n_cached);
    }
    if (state_slots_) s->state_slot = state_slots_->allocate(1)[0];
    waiting_.pop_front();
    running_.push_back(s);
    plan.admitted.push_back(s);
  }
}

StepPlan Scheduler::plan(const std::function<int64_t(int64_t)>& choose_k) {
  StepPlan plan;
  admit(plan);
  int64_t n_decoding = 0;
  bool any_drafter = false;
  for (const SeqState* s : running_) {
    if (s->prefilling()) continue;
    ++n_decoding;
    any_drafter |= s->may_draft;
  }
  if (o_.max_draft > 0 && any_drafter && choose_k) plan.k = std::clamp<int64_t>(choose_k(n_decoding), 0, o_.max_draft);
  // Verify blocks (or single decode rows) first: a decode never waits for a prompt.
  int64_t budget = o_.max_step_tokens;
  for (SeqState* s : running_) {
    if (s->prefilling()) continue;
    // The anchor sits at position context_len - 1; drafts never pass max_model_len.
    int64_t room = o_.max_model_len > 0 ? o_.max_model_len - s->context_len() : plan.k;
    if (o_.draft_within_budget) room = std::min(room, s->max_tokens - s->n_generated - 1);
    if (o_.max_draft_pos > 0) room = std::min(room, o_.max_draft_pos - s->context_len());
    const int64_t nd = s->may_draft ? std::clamp<int64_t>(std::min(plan.k, room), 0, plan.k) : 0;
    plan.rows.push_back({s, true, 1 + nd, nd});
    budget -= 1 + nd;
  }
  // Prompt chunks fill what is left; the first always moves at least a
  // little, so decodes filling the budget cannot starve admission.
  bool any_prefill = false;
  for (SeqState* s : running_) {
    if (!s->prefilling()) continue;
    const int64_t n = std::min(s->prompt_len - s->n_prefilled, std::max<int64_t>(budget, any_prefill ? 0 : 16));
    if (n <= 0) break;
    plan.rows.push_back({s, false, n, 0});
    budget -= n;
    any_prefill = true;
  }
  return plan;
}

void Scheduler::finish(SeqState* s) {
  auto it = std::find(running_.begin(), running_.end(), s);
  BS_ASSERT(it != running_.end());  // finishing a sequence that does not run
  running_.erase(it);
  blocks_.free(s->blocks);
  s->blocks.clear();
  if (state_slots_ && s->state_slot >= 0) state_slots_->free(s->state_slot);
  s->state_slot = -1;
}

}  // namespace blockspec
