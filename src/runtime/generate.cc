#include "runtime/generate.h"

#include <algorithm>

#include "base/error.h"
#include "base/timer.h"

namespace blockspec {

void validate_generate(const Transformer& model, const std::vector<int32_t>& prompt, const GenerateOptions& opts) {
  const ModelConfig& c = model.config();
  if (prompt.empty()) fail("the prompt is empty: at least one token is needed");
  if (opts.max_new_tokens < 0) fail("max_new_tokens must be >= 0, found ", opts.max_new_tokens);
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= c.vocab_size)
      fail("prompt token ", i, " has id ", prompt[i], ", outside the model vocabulary of ", c.vocab_size);
  const int64_t total = static_cast<int64_t>(prompt.size()) + opts.max_new_tokens;
  if (total > c.max_position_embeddings)
    fail("prompt (", prompt.size(), " tokens) + max_new_tokens (", opts.max_new_tokens,
         ") exceeds max_position_embeddings ", c.max_position_embeddings);
  validate_sampling(opts.sampling);
}

GenerateResult generate(Transformer& model, const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                        const std::function<void(int32_t)>& on_token) {
  const ModelConfig& c = model.config();
  validate_generate(model, prompt, opts);
  const int64_t total = static_cast<int64_t>(prompt.size()) + opts.max_new_tokens;
  const std::vector<int32_t>& eos = opts.eos_ids.empty() ? c.eos_token_ids : opts.eos_ids;

  GenerateResult r;
  r.prompt_tokens = static_cast<int64_t>(prompt.size());
  r.finish_reason = "length";
  KvCache cache = model.new_cache(std::max<int64_t>(total, 1));
  Sampler sampler(opts.sampling);
  std::vector<float> logits;
  Timer timer;
  model.prefill(prompt.data(), r.prompt_tokens, cache, logits, false);
  r.prefill_seconds = timer.seconds();
  if (opts.max_new_tokens == 0) return r;
  timer.reset();
  for (;;) {
    int32_t tok = sampler.sample(logits.data(), c.vocab_size);
    r.tokens.push_back(tok);
    if (on_token) on_token(tok);
    if (opts.stop_at_eos && std::find(eos.begin(), eos.end(), tok) != eos.end()) {
      r.finish_reason = "stop";
      break;
    }
    if (static_cast<int64_t>(r.tokens.size()) >= opts.max_new_tokens) break;
    model.forward(&tok, 1, cache, logits, false);
    ++r.decode_steps;
  }
  r.decode_seconds = timer.seconds();
  return r;
}

}  // namespace blockspec
