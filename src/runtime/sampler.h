// Token sampling: greedy, or temperature -> top-k -> top-p (the order HF's
// logits processors apply them) and a seeded draw. The RNG is our own
// xoshiro256** so a seed gives the same tokens on every platform and build.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace blockspec {

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy
  int top_k = 0;             // <= 0: off
  float top_p = 1.0f;        // >= 1: off
  uint64_t seed = 0;
};

class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next();
  double uniform();  // [0, 1) with 53 random bits
 private:
  uint64_t s_[4];
};

// Validates params; throws Error naming the bad field.
void validate_sampling(const SamplingParams& p);

// Probabilities after temperature/top-k/top-p (zero outside the kept set).
//   logits: [vocab]  -> probs: [vocab], sums to 1
void sampling_probs(const float* logits, int64_t vocab, const SamplingParams& p, std::vector<float>& probs);

// The one way a token is chosen from logits (ModelRunner::pick, so every
// path): temperature <= 0 -> argmax; else a draw from sampling_probs with
// one rng.uniform(). probs: scratch, [vocab] afterwards when sampled.
//   logits: [vocab]
int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& p, Rng& rng, std::vector<float>& probs);

int32_t argmax(const float* x, int64_t n);  // first index of the maximum

// A token's log-probability under the distribution it was chosen from:
// log_softmax(logits / T) (T <= 0: greedy, T = 1), before top-k / top-p,
// and the n_top largest entries (id, logprob), largest first (ties: lower id).
//   logits: [vocab] (penalties already applied)
struct TokenLogprob {
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};
TokenLogprob token_logprob(const float* logits, int64_t vocab, float temperature, int32_t token, int n_top);

// Inverse-CDF draw with one rng.uniform(): the first i whose running sum of
// probs exceeds u (the last positive entry when rounding leaves u beyond the
// total). sample_token draws exactly this way.
//   probs: [vocab], sums to 1
int32_t sample_from_probs(const float* probs, int64_t vocab, Rng& rng);

}  // namespace blockspec
