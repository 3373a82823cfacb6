// Single-sequence generation: chunked prefill, then one-token decode steps
// until max_new_tokens or an end-of-sequence token -- the serving engine's
// step (runtime/model_runner.h) run for one sequence without drafts.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/transformer.h"
#include "runtime/sampler.h"

namespace blockspec {

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  SamplingParams sampling;
  bool stop_at_eos = true;
  std::vector<int32_t> eos_ids;  // empty: the model config's eos_token_id
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated tokens (eos included if hit)
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t decode_steps = 0;  // forwards after prefill
  std::string finish_reason;  // "length" or "stop"
  double prefill_tok_s() const { return prefill_seconds > 0 ? prompt_tokens / prefill_seconds : 0; }
  double decode_tok_s() const { return decode_seconds > 0 ? decode_steps / decode_seconds : 0; }
};

// Checks a request against the model (non-empty prompt of in-vocabulary ids,
// prompt + max_new_tokens within max_position_embeddings, sampling params);
// throws Error naming what is wrong. Shared by generate and the speculative loop.
void validate_generate(const Transformer& model, const std::vector<int32_t>& prompt, const GenerateOptions& opts);

// on_token is called with each new token as soon as it is chosen.
GenerateResult generate(Transformer& model, const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                        const std::function<void(int32_t)>& on_token = {});

}  // namespace blockspec
