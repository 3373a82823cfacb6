// The serving engine: one step loop on its own thread that batches up to
// max_num_seqs sequences per target forward (continuous batching). Each
// step admits waiting requests while KV pages are free (admission control:
// requests queue, they are never dropped), gives every running decode one
// token (or a speculative verify block), and fills the rest of the step's
// token budget with chunks of pending prompts (chunked prefill, so a long
// prompt never stalls running decodes). A finished or cancelled request
// frees its KV pages at once.
//
// Thread safety: submit / cancel / metrics / healthy may be called from any
// thread; callbacks run on the engine thread and must return quickly.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "grammar/token_grammar.h"
#include "runtime/sampler.h"
#include "runtime/spec_config.h"
#include "runtime/spec_types.h"

namespace blockspec {

class Transformer;  // model/transformer.h: the server above sees no model or kernel header
class DraftModel;
struct ModelConfig;

struct EngineOptions {
  int64_t max_num_seqs = 8;
  int64_t max_model_len = 0;      // 0: the model's max_position_embeddings
  int64_t kv_cache_mb = 0;        // KV pool budget; 0: max_num_seqs * max_model_len tokens
  int64_t max_step_tokens = 256;  // tokens one step forwards (prefill chunks fill what decodes leave)
  std::optional<SpecConfig> spec;  // speculative decoding for every request
  std::shared_ptr<DraftModel> drafter;  // the drafter spec names (cli/spec_config.h loads it); null for ngram
  // Adaptive K (spec without num_speculative_tokens): the target's verify
  // cost {rows, ms}, rows increasing; empty: measured at start-up. Either
  // way the served forwards correct it (LiveCost, runtime/k_selector.h).
  std::vector<std::pair<int64_t, double>> verify_cost_ms;
  // Data generation for drafter training (issue 15): the target layers
  // (DFlash target_layer_ids) whose hidden states every request with an
  // on_taps callback receives as the target computes them. Not with spec:
  // the drafter's own taps are the only ones a speculative engine computes.
  std::vector<int64_t> capture_taps;
  // A test seam, empty in production: takes the proposer `spec` made for a
  // new request and returns the one to use (a test wraps it, e.g. to break
  // its proposal distribution on purpose, or replaces it with one whose
  // drafts it knows). spec still sets the draft length.
  std::function<std::unique_ptr<Proposer>(std::unique_ptr<Proposer>)> wrap_proposer;
  // A test seam, empty in production: called on the engine thread before
  // every step, with no lock held. A test blocks in it to hold requests at a
  // known point (e.g. unfinished while a client hangs up), so it can wait on
  // a condition instead of racing the engine.
  std::function<void()> before_step;
  // vLLM's automatic prefix caching (kv/block_allocator.h): full KV pages
  // are kept under the hash of every token up to them and a request whose
  // prompt starts with the same tokens skips computing them. Not used (and
  // Engine::prefix_caching_note() says why) for hybrid targets, whose
  // recurrent state is not cached, with capture_taps, which needs the
  // target's features of every prompt token, and with a proposer that reads
  // those features but cannot save what it computed from them. A DFlash /
  // DFlash2 drafter's context K/V of each cached page is kept beside the
  // page (a page is a hit only while both are kept).
  bool enable_prefix_caching = false;
};

struct RequestParams {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int64_t max_tokens = 16;
  std::vector<int32_t> stop_token_ids;  // in addition to the model's eos unless ignore_eos
  bool ignore_eos = false;
  float presence_penalty = 0.f, frequency_penalty = 0.f;  // OpenAI semantics, on generated tokens
  // Log-probabilities of the generated tokens (runtime/sampler.h
  // token_logprob): -1 none; 0 the chosen token's; n > 0 also the top n.
  // Speculative steps report them from the target's verify rows, so they
  // are the ones plain decoding reports for the same tokens.
  int n_logprobs = -1;
  // Structured output: the tokens this request may generate (grammar/token_grammar.h);
  // null: any. The target's logits are masked before sampling and before verifying drafts.
  std::shared_ptr<TokenGrammar> grammar;
  // With EngineOptions::capture_taps: called on the engine thread whenever
  // the target has run and committed tokens [first, first + n) of prompt +
  // output, with their tapped hidden states taps: [n, n_taps * H]. Every
  // token but the last one or two (never run, or run in the final step) is
  // reported once, in order.
  std::function<void(int64_t first, int64_t n, const float* taps)> on_taps;
};

// What the engine reports to a request: new tokens, and once, the end.
struct TokenEvent {
  std::vector<int32_t> tokens;  // newly generated (may be empty on the final event)
  // The last of `tokens` is the eos / stop token that ends the request (its
  // text is not part of the answer: vLLM's rule unless include_stop_str_in_output).
  bool ends_with_stop_token = false;
  int64_t cached_tokens = 0;  // prompt tokens taken from the prefix cache
  std::vector<TokenLogprob> logprobs;  // [tokens.size()] when RequestParams::n_logprobs >= 0
  bool finished = false;
  std::string finish_reason;    // "stop" (eos / stop token), "length", "abort" (cancelled), "error"
  std::string error;            // when finish_reason == "error"
  int64_t prompt_tokens = 0, completion_tokens = 0;  // totals so far
  SpecStats spec;               // this request's acceptance metrics (on the final event)
};

// A histogram with fixed upper bounds (Prometheus-style cumulative buckets).
struct Histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;  // [bounds.size() + 1]: last is +Inf
  double sum = 0;
  uint64_t count = 0;
  void observe(double v);
};

struct EngineMetrics {
  uint64_t requests_finished = 0, requests_aborted = 0, prompt_tokens = 0, generation_tokens = 0;
  int64_t running = 0, waiting = 0;
  int64_t kv_pages_total = 0, kv_pages_used = 0, kv_page_tokens = 0;
  // Hybrid models: per-sequence recurrent-state slots (0 for dense models).
  int64_t state_slots_total = 0, state_slots_used = 0, state_bytes_per_slot = 0;
  double kv_usage() const { return kv_pages_total ? static_cast<double>(kv_pages_used) / kv_pages_total : 0.0; }
  Histogram ttft_s, tpot_s, e2e_s;
  SpecStats spec;  // summed over requests
  uint64_t steps = 0;
  std::map<std::string, uint64_t> finished_by_reason;  // "stop", "length", "abort", "error"
  int64_t last_k = 0;  // draft tokens per sequence chosen for the latest step
  // Steps that decoded, by the draft length K planned for them (speculative
  // engines): K follows num_speculative_tokens_per_batch_size or the adaptive choice.
  std::map<int64_t, uint64_t> steps_by_k;
  // Adaptive K: the target's forward cost in ms by rows, as served (the
  // start-up table corrected by LiveCost), for the row counts served so far.
  std::map<int64_t, double> verify_cost_ms;
  // Adaptive K: the drafter's time per drafting sequence and step as the choice weighs it (DraftCost), 0 before
  // the first draft.
  double draft_cost_ms = 0;
  // Where the engine thread's time goes (seconds since start-up): every step, the target forwards (ModelRunner),
  // the drafts, and the drafter's context passes outside drafts (a published page whose drafter context trails
  // it: the draft length is 0 there, or the request ends; a draft after more than 16 tokens without one runs
  // their context first, apart).
  double step_seconds = 0, forward_seconds = 0, draft_seconds = 0, draft_context_seconds = 0;
  // Prefix caching: prompt tokens looked up and found (vLLM's
  // prefix_cache_queries / prefix_cache_hits), pages holding a cached prefix.
  bool prefix_caching = false;
  uint64_t prefix_cache_queries = 0, prefix_cache_hits = 0;
  int64_t kv_pages_cached = 0;
};

class Engine {
 public:
  Engine(std::unique_ptr<Transformer> model, const EngineOptions& opts);
  ~Engine();  // stops the loop; pending requests end with "abort"
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const ModelConfig& model_config() const;  // include formats/hf_config.h to read it
  int64_t vocab_size() const;
  // The measured verify-cost table the adaptive draft length starts from
  // (KSelector::describe), empty without one.
  std::string verify_cost_table() const;
  int64_t max_model_len() const { return max_model_len_; }
  const std::vector<int32_t>& eos_token_ids() const;  // the model's (they end every request unless ignore_eos)

  // Validates (prompt length + max_tokens <= max_model_len, ids in the
  // vocabulary, sampling params); throws Error with the reason. on_event
  // receives every token event, the last one with finished = true.
  uint64_t submit(RequestParams params, std::function<void(const TokenEvent&)> on_event);
  // Ends a request now, freeing its KV pages, and counts it under `reason`:
  // "abort" (the client went away, the server stops) or "stop" (the caller
  // found a stop string in the text, so the request ended normally). Ids
  // that are unknown or already finished are ignored. Throws Error on any
  // other reason.
  void cancel(uint64_t id, const std::string& reason = "abort");
  EngineMetrics metrics() const;
  bool healthy() const { return !dead_.load(); }
  // Whether prefix caching is on; when asked for but off, why (one line);
  // when on with a drafter, how its context is kept.
  bool prefix_caching() const;
  const std::string& prefix_caching_note() const;
  // Forgets every cached prefix (the pages of running requests stay theirs);
  // carried out by the step thread before its next step.
  void reset_prefix_cache();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t max_model_len_ = 0;
  std::atomic<bool> dead_{false};
};

}  // namespace blockspec
