#include "runtime/generate.h"

#include "base/error.h"
#include "runtime/speculative.h"

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
  return run_sequence(model, nullptr, 0, prompt, opts, on_token, nullptr).gen;  // the serving step, no drafts
}

}  // namespace blockspec
