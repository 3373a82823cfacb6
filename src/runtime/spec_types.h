// Types shared by every speculative-decoding method: what a proposer drafts
// (tokens and the proposal distribution q the rejection step needs), the
// proposer interface, and the acceptance metrics.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/sampler.h"

namespace blockspec {

// One step's draft d1..dk for positions P+1..P+k after the anchor at P.
struct Draft {
  std::vector<int32_t> tokens;  // [k]
  // The distribution each draft token was drawn from:
  //   kOneHot     -- deterministic proposer (greedy drafter, n-gram): q = 1 at the token
  //   kDense      -- q: [k, V] full-vocabulary probabilities (sampled DFlash1)
  //   kCandidates -- q: [k, C] over cand: [k, C] token ids (DFlash2's selector);
  //                  q(x) = sum of q[i] with cand[i] == x
  enum class Q { kOneHot, kDense, kCandidates } q_kind = Q::kOneHot;
  std::vector<float> q;
  std::vector<int32_t> cand;
  int64_t n_cand = 0;  // C
  // Drafted by n-gram prompt lookup in place of the drafter (SpecConfig::lookup_first).
  bool from_lookup = false;
  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  void clear() {
    tokens.clear(), q.clear(), cand.clear();
    q_kind = Q::kOneHot, n_cand = 0, from_lookup = false;
  }
};

class Proposer;

// One sequence's request for a draft: up to k tokens to follow *seq, into *out
// (k_lookup >= 0: n-gram lookup in front of a drafter drafts up to k_lookup
// tokens and the drafter up to k; -1: k for both).
struct ProposeCall {
  Proposer* proposer;
  const std::vector<int32_t>* seq;
  int64_t k;
  const SamplingParams* sp;
  Rng* rng;
  Draft* out;
  int64_t k_lookup = -1;
  int64_t lookup_k() const { return k_lookup < 0 ? k : k_lookup; }
};

// The draft length of each source in a step with n-gram lookup in front of a
// drafter (SpecConfig::lookup_first), each chosen from its own acceptance and
// cost; the plan reserves rows for the larger.
struct DraftLengths {
  int64_t drafter = 0, lookup = 0;
  int64_t max() const { return std::max(drafter, lookup); }
};

// A source of draft tokens. The speculative loop tells it every token the
// target has committed (observe), then asks for up to k tokens after the
// sequence (propose). The last token of `seq` in propose is the anchor: it is
// committed but the target has not run it yet, so its hidden state is unknown.
class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual std::string method() const = 0;
  // Target layers whose outputs the proposer consumes (DFlash taps); empty
  // when it needs none.
  virtual std::vector<int64_t> tap_layers() const { return {}; }
  // n-gram lookup drafts in front of this proposer's drafter (ProposeCall::k_lookup).
  virtual bool lookup_first() const { return false; }
  // The target processed and committed seq[n_seen .. n_seen + n_new); taps:
  // [n_new, n_taps * H] their tapped hidden states (nullptr when no taps).
  virtual void observe(const std::vector<int32_t>& seq, int64_t n_seen, int64_t n_new, const float* taps) = 0;
  // Drafts up to k tokens to follow seq (may return fewer, or none). sp is
  // the request's sampling (temperature <= 0: greedy); rng draws any
  // randomness the proposal needs.
  virtual void propose(const std::vector<int32_t>& seq, int64_t k, const SamplingParams& sp, Rng& rng,
                       Draft& out) = 0;
  // Forget all state (a new sequence starts).
  virtual void reset() = 0;
  // Prefix caching of the context a proposer computes from observed tokens
  // (DFlash: its context K/V). Bytes per token of a saved context; 0: it
  // keeps none that can be saved (then a proposer that reads taps needs
  // every prompt token run, and prefix caching stays off).
  virtual int64_t context_bytes_per_token() const { return 0; }
  // Leading tokens whose context is computed (and may be saved).
  virtual int64_t context_size() const { return 0; }
  // Computes the context of every observed token now, without drafting (a
  // drafter otherwise runs them at its next draft, which may not come).
  virtual void commit_context() {}
  // The context of tokens lo..lo+n-1 into dst (n * context_bytes_per_token()
  // bytes); false, copying nothing, when it is no longer (or not yet) held.
  virtual bool save_context(int64_t /*lo*/, int64_t /*n*/, uint8_t* /*dst*/) const { return false; }
  // After reset(): the context of the next n tokens from a save_context copy,
  // as if they had been observed (observe continues after them).
  virtual void load_context(int64_t n, const uint8_t* src);
  // Proposers that draft together -- one drafter forward for many sequences
  // -- share a non-null key (their drafter); nullptr: this one drafts alone.
  virtual const void* batch_key() const { return nullptr; }
  // Drafts for every call, all of whose proposers have this one's batch_key,
  // exactly as propose() would for each alone.
  virtual void propose_together(const std::vector<ProposeCall>& calls) {
    for (const ProposeCall& c : calls) c.proposer->propose(*c.seq, c.k, *c.sp, *c.rng, *c.out);
  }
};

// Drafts for every call, grouping the calls whose proposers share a
// batch_key into one propose_together each.
void propose_all(const std::vector<ProposeCall>& calls);

// Acceptance metrics, per request and summed (vLLM's spec_decode counters).
struct SpecStats {
  int64_t num_drafts = 0;           // verification passes that carried >= 1 draft token
  int64_t num_draft_tokens = 0;     // draft tokens verified
  int64_t num_accepted_tokens = 0;  // of them, accepted
  std::vector<int64_t> accepted_per_pos;    // [K] drafts whose token at position i was accepted
  // [K] drafts that verified position i (it was drafted and every earlier
  // one accepted): accepted_per_pos[i] / tested_per_pos[i] is the acceptance
  // of position i given its predecessors', unbiased when K varies per step.
  std::vector<int64_t> tested_per_pos;
  std::vector<int64_t> acceptance_hist;     // [K+1] drafts that accepted exactly a tokens
  // Of the drafts above, those n-gram lookup made in place of the drafter
  // (SpecConfig::lookup_first), and their accepted tokens.
  int64_t num_lookup_drafts = 0;
  int64_t num_lookup_accepted_tokens = 0;
  // 1 + accepted / drafts: tokens committed per target pass (bonus included).
  double mean_acceptance_length() const {
    return num_drafts > 0 ? 1.0 + static_cast<double>(num_accepted_tokens) / num_drafts : 0.0;
  }
  // Records one verification of n_draft tokens with `accepted` accepted
  // (lookup: the draft came from n-gram lookup, Draft::from_lookup).
  void record(int64_t n_draft, int64_t accepted, bool lookup = false);
  void merge(const SpecStats& o);
};

}  // namespace blockspec
