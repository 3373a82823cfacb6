// A request inside the engine (and inside the one-sequence speculative loop,
// which runs the same step): what the scheduler plans with (st), and the
// model-side state the step runs: token ids, a KV cache viewing st's pages,
// the proposer, the random stream, the acceptance counters and this step's
// scratch. Private to the runtime layer.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache.h"
#include "runtime/engine.h"
#include "runtime/scheduler.h"
#include "runtime/spec_types.h"

namespace blockspec {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Sequence {
  SeqState st;  // id, lengths, KV pages
  RequestParams params;
  std::function<void(const TokenEvent&)> on_event;
  std::vector<int32_t> tokens;     // prompt + generated; in decode, back() is the anchor (not yet in the KV)
  std::unique_ptr<KvCache> cache;  // a view of st.blocks in the pool, from admission on
  std::unique_ptr<Proposer> owned_proposer;
  Proposer* proposer = nullptr;    // owned_proposer, or one the caller keeps (generate_speculative)
  bool wants_taps = false;         // the proposer reads the target's tapped hidden states
  Rng rng{0};
  SpecStats stats;
  std::unordered_map<int32_t, int32_t> counts;  // generated token -> occurrences (penalties)
  double t_submit = 0, t_first = 0;
  bool running = false;    // admitted: the scheduler holds it and its pages
  bool ended = false;      // the end has been reported
  std::string end_reason;  // set by the step when a stop token or max_tokens ends the request
  int64_t n_published = 0;  // prefix caching: leading full pages published (or taken from the cache)
  uint64_t last_page_hash = 0;  // ... the hash of the last of them
  std::vector<uint64_t> page_hashes;  // [n_published] their hashes (0 for pages taken from the cache)
  int64_t n_draft_saved = 0;  // leading pages whose drafter context is saved (or was loaded from the cache)
  // This step:
  Draft draft;
  std::vector<float> taps;    // [rows, n_taps * H] the target's tapped hidden states
  std::vector<int32_t> block;  // the anchor and the drafts
  std::vector<int32_t> out;    // tokens emitted
  std::vector<TokenLogprob> out_logprobs;  // [out.size()] when params.n_logprobs >= 0
  std::vector<float> adjusted, probs;  // [V] scratch of pick(): penalized / masked logits, sampling probabilities
  int32_t grammar_state = -1;          // structured output: the grammar's state after the emitted tokens
  std::vector<float> masked;           // [k + 1, V] a verify block's rows under the grammar

  bool penalized() const { return params.presence_penalty != 0.f || params.frequency_penalty != 0.f; }
  // Sets the proposer (nullptr: none); asks it once whether it needs taps.
  void use_proposer(Proposer* p) {
    proposer = p;
    wants_taps = p != nullptr && !p->tap_layers().empty();
  }
};

}  // namespace blockspec
