// Engine internals shared by engine.cc (API, threads, metrics) and
// engine_step.cc (one batched step). Private to the runtime layer.
#pragma once
#include <chrono>
#include <unordered_map>
#include <utility>

#include "model/kv_pool.h"
#include "runtime/engine.h"
#include "runtime/k_selector.h"

namespace blockspec {

// KV is accounted in pages of this many tokens; a request reserves the
// pages of its whole worst case (prompt + max_tokens + a verify block) when
// it is admitted, so a running request never waits for memory and nothing is
// ever preempted; requests that do not fit wait in FIFO order.
constexpr int64_t kPageTokens = 16;

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Sequence {
  uint64_t id = 0;
  RequestParams params;
  std::function<void(const TokenEvent&)> on_event;
  std::vector<int32_t> tokens;  // prompt + generated; in decode, back() is the anchor (not yet in the KV)
  int64_t n_prefilled = 0;      // prompt tokens whose K/V are cached
  int64_t n_generated = 0;
  std::unique_ptr<KvCache> cache;
  int64_t pages = 0;
  std::unique_ptr<Proposer> proposer;
  Rng rng{0};
  SpecStats stats;
  std::unordered_map<int32_t, int32_t> counts;  // generated token -> occurrences (penalties)
  double t_submit = 0, t_first = 0;
  bool done = false;          // finished and reported; dropped from running at the next step
  std::string end_reason;     // set by emit() when a stop token or max_tokens ends the request
  // This step:
  Draft draft;
  std::vector<float> taps;
  std::vector<int32_t> block;
  std::vector<int32_t> out;  // tokens to report
  std::vector<float> adjusted, probs;  // [V] scratch of pick(): penalized logits, sampling probabilities

  int64_t prompt_len() const { return static_cast<int64_t>(params.prompt.size()); }
  bool prefilling() const { return n_prefilled < prompt_len(); }
  bool penalized() const { return params.presence_penalty != 0.f || params.frequency_penalty != 0.f; }
};

struct Engine::Impl {
  std::unique_ptr<Transformer> model;
  std::unique_ptr<KvPool> pool;  // engine thread only; declared first so every cache dies before it
  EngineOptions opts;
  int64_t max_model_len = 0;
  std::shared_ptr<DraftModel> drafter;
  std::optional<SpecConfig> spec;
  KSelector ksel;
  double draft_ms_ema = 0;  // measured drafter time per sequence and step

  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  uint64_t next_id = 1;
  std::deque<std::unique_ptr<Sequence>> waiting;  // guarded by mu
  std::vector<std::pair<uint64_t, std::string>> to_cancel;  // id, finish reason; guarded by mu
  EngineMetrics m;                                // guarded by mu
  std::vector<std::unique_ptr<Sequence>> running;  // engine thread only
  int64_t pages_used = 0, pages_total = 0;         // guarded by mu
  std::thread thread;
  std::atomic<bool>* dead = nullptr;

  void loop();
  void step();
  void admit();
  void finish(Sequence& s, const std::string& reason, const std::string& error = "");
  int32_t pick(Sequence& s, const float* logits_row);
  bool emit(Sequence& s, int32_t t);  // false when s finished
  int64_t reserve_tokens(const RequestParams& p) const;
};

}  // namespace blockspec
