// Engine internals shared by engine.cc (API, threads, metrics) and
// engine_step.cc (one step: scheduler plan, ModelRunner, reporting).
// Private to the runtime layer.
#pragma once
#include <chrono>
#include <unordered_map>
#include <utility>

#include "kv/block_allocator.h"
#include "kv/kv_pool.h"
#include "kv/state_pool.h"
#include "runtime/engine.h"
#include "runtime/speculative.h"
#include "runtime/k_selector.h"
#include "runtime/model_runner.h"
#include "runtime/scheduler.h"
#include "runtime/sequence.h"

namespace blockspec {

// Tokens per KV page (the scheduler's admission counts pages of this size).
constexpr int64_t kPageTokens = 16;

struct Engine::Impl {
  std::unique_ptr<Transformer> model;
  std::unique_ptr<KvPool> pool;  // KV memory; declared first so every cache view dies before it
  std::unique_ptr<BlockAllocator> blocks;  // who holds which page of pool (engine thread only)
  // Per-sequence model state besides KV (hybrid targets' recurrent state):
  // its memory and who holds which slot; null for models without state.
  std::unique_ptr<StatePool> state;
  std::unique_ptr<BlockAllocator> state_slots;
  std::unique_ptr<Scheduler> sched;        // engine thread only
  std::unique_ptr<ModelRunner> runner;     // engine thread only
  EngineOptions opts;
  int64_t max_model_len = 0;
  std::shared_ptr<DraftModel> drafter;
  std::optional<SpecConfig> spec;
  KSelector ksel;
  AdaptiveK adaptive;  // each source's k for the step being planned, recent acceptance, drafter cost

  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  uint64_t next_id = 1;
  std::deque<std::unique_ptr<Sequence>> incoming;  // submitted, not yet seen by the scheduler; guarded by mu
  std::vector<std::pair<uint64_t, std::string>> to_cancel;  // id, finish reason; guarded by mu
  bool reset_cache = false;  // reset_prefix_cache() asked; guarded by mu
  bool prefix_caching = false;
  std::string prefix_caching_note;  // why it is off although asked for, or how the drafter's context is kept
  // Prefix caching with a proposer that computes a context from every token
  // (DFlash's context K/V): that context of each cached page, beside it.
  int64_t draft_page_bytes = 0;            // bytes of one page's drafter context (0: none kept)
  std::unique_ptr<uint8_t[]> draft_pages;  // [pages_total, draft_page_bytes], touched as pages are saved
  std::vector<uint64_t> draft_page_hash;   // [pages_total] the page hash whose context a slot holds (0: none)
  EngineMetrics m;                                // guarded by mu
  double context_seconds = 0;  // drafter context passes (publish_pages and the runner's catch-ups), into m at each step's end
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> live;  // queued or running; engine thread only
  std::thread thread;
  std::atomic<bool>* dead = nullptr;

  void loop();
  void step();
  void intake();  // submissions into the scheduler, cancellations carried out
  void start(Sequence& s);  // admitted: KV view and proposer
  void publish();  // running / waiting / KV page counts into m
  void publish_pages(Sequence& s);  // s's full pages with final K/V into the prefix cache (and their drafter context)
  int64_t choose_k(int64_t n_decoding);  // sets adaptive.lengths() too
  // Reports the end and frees everything the request holds; the Sequence
  // itself is destroyed by the caller (it may still be in a loop's hands).
  void finish(Sequence& s, const std::string& reason, const std::string& error = "");
};

}  // namespace blockspec
