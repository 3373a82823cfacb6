// The serving engine's step planner (nano-vllm's Scheduler): which sequences
// run in a step, how many tokens each forwards, how many draft tokens each
// decoding sequence verifies, and which waiting requests are admitted. It is
// tensor-free: it sees token counts and KV page ids, never a cache, a
// proposer or a logit, so it is unit-tested without a model
// (tests/runtime/scheduler_test.cc). The engine's ModelRunner part
// (engine_step.cc) turns a StepPlan into one batched forward.
//
// Admission: FIFO, while fewer than max_num_seqs run, the KV pages of the
// head's worst case (prompt + max_tokens + a verify block) are free and, for
// a model with per-sequence state (hybrid targets' recurrent state,
// kv/state_pool.h), a state slot is free. A
// running request therefore never waits for memory and nothing is ever
// preempted; a request that does not fit waits (its successors too, so a
// long prompt cannot starve).
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "kv/block_allocator.h"

namespace blockspec {

struct SchedulerOptions {
  int64_t max_num_seqs = 8;
  int64_t max_step_tokens = 256;  // rows of one forward: verify blocks first, prompt chunks in the rest
  int64_t page_tokens = 16;       // tokens per KV page
  int64_t max_model_len = 0;      // no draft reaches past this position
  int64_t max_draft = 0;          // K: tokens a verify block may add to the anchor (0: no speculation)
  // The draft's max_model_len (vLLM's speculative max_model_len): draft tokens
  // stay at positions below it, so longer sequences decode without drafts (0: no limit).
  int64_t max_draft_pos = 0;
  // false (serving, as vLLM): K draft tokens every step; drafts accepted past
  // max_tokens are verified and dropped. true (one sequence, as the DFlash
  // reference's dflash_generate): the last blocks shrink to the tokens the
  // request can still use (k <= max_tokens - generated - 1), which saves
  // their verify rows and, since a block-diffusion drafter drafts the block
  // jointly, reproduces the reference's drafts exactly.
  bool draft_within_budget = false;
  // Admission takes the prompt's leading full pages from the prefix cache
  // (BlockAllocator::find_cached) when they are there; the last prompt token
  // is always computed (its logits start the answer).
  bool prefix_caching = false;
  // When set, a cached page is taken only if this says yes of (page, hash),
  // and the hits stop at the first it refuses (the engine: the drafter's
  // context of the page is kept beside it).
  std::function<bool(int32_t block, uint64_t hash)> cached_page_usable;
};

// What the scheduler knows of a request.
struct SeqState {
  uint64_t id = 0;
  int64_t prompt_len = 0, max_tokens = 0;
  int64_t n_prefilled = 0;  // prompt tokens whose K/V are cached
  int64_t n_generated = 0;  // emitted tokens; in decode the last one is the anchor, not yet in the KV
  bool may_draft = false;   // has a proposer and no penalties (a penalized request decodes plainly)
  std::vector<int32_t> blocks;  // KV pages held while running (the scheduler's reference)
  const int32_t* prompt_tokens = nullptr;  // [prompt_len] for prefix caching (the caller's, alive with this state)
  int64_t n_cached = 0;         // prompt tokens whose K/V came from the prefix cache (n_prefilled starts there)
  uint64_t cached_hash = 0;     // page_hash of the last of those pages (0: none), where publishing continues
  int32_t state_slot = -1;      // the model-state slot held while running (-1: none)

  bool prefilling() const { return n_prefilled < prompt_len; }
  int64_t context_len() const { return prompt_len + n_generated; }
};

// One step's work, in the order of the forward's rows.
struct StepPlan {
  struct Row {
    SeqState* seq = nullptr;
    bool decode = false;  // decode: the anchor + n_draft draft tokens; else n prompt tokens from n_prefilled
    int64_t n = 0;        // rows this sequence adds to the forward (decode: 1 + n_draft)
    int64_t n_draft = 0;  // draft tokens asked of the proposer (it may return fewer)
  };
  std::vector<SeqState*> admitted;  // entered running this step, blocks allocated
  std::vector<Row> rows;            // every decoding sequence, then prompt chunks
  int64_t k = 0;                    // the draft length chosen for this step
};

class Scheduler {
 public:
  // state_slots: the allocator of per-sequence model-state slots, or nullptr
  // when the model keeps no state besides KV (dense models).
  Scheduler(const SchedulerOptions& opts, BlockAllocator& blocks, BlockAllocator* state_slots = nullptr);

  // Queues a request (FIFO). The SeqState stays the caller's; it must live
  // until finish() or drop_waiting() returns it.
  void add(SeqState* s);
  // Removes a waiting request by id: it, or nullptr when none waits.
  SeqState* drop_waiting(uint64_t id);
  // Admits what fits, then plans one step. choose_k(n_decoding) gives the
  // draft length for a step with that many decoding sequences (a fixed K or
  // the adaptive choice); it is called only when some sequence may draft.
  StepPlan plan(const std::function<int64_t(int64_t n_decoding)>& choose_k);
  // A running request ended (finished, stopped or cancelled): it leaves
  // running and its pages go back at once.
  void finish(SeqState* s);

  // Prefix cache lookups so far, in tokens (vLLM's prefix_cache_queries / hits).
  uint64_t cache_queries() const { return cache_queries_; }
  uint64_t cache_hits() const { return cache_hits_; }
  int64_t n_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t n_running() const { return static_cast<int64_t>(running_.size()); }
  const std::vector<SeqState*>& running() const { return running_; }
  // Pages a request holds while it runs: its worst case, verify block included.
  static int64_t pages_for(const SchedulerOptions& o, const SeqState& s);
  int64_t pages_for(const SeqState& s) const { return pages_for(o_, s); }

 private:
  void admit(StepPlan& plan);
  SchedulerOptions o_;
  BlockAllocator& blocks_;
  BlockAllocator* state_slots_;
  std::deque<SeqState*> waiting_;
  std::vector<SeqState*> running_;  // admission order
  uint64_t cache_queries_ = 0, cache_hits_ = 0;
};

}  // namespace blockspec
