#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/error.h"

namespace blockspec {

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (auto& s : s_) s = splitmix64(x);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

void validate_sampling(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0)
    fail("temperature must be a finite number >= 0, found ", p.temperature);
  if (p.top_k < 0) fail("top_k must be >= 0, found ", p.top_k);
  if (!(p.top_p > 0 && p.top_p <= 1)) fail("top_p must be in (0, 1], found ", p.top_p);
}

int32_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return static_cast<int32_t>(best);
}

void sampling_probs(const float* logits, int64_t vocab, const SamplingParams& p, std::vector<float>& probs) {
  probs.assign(vocab, 0.0f);
  if (p.temperature <= 0) {
    probs[argmax(logits, vocab)] = 1.0f;
    return;
  }
  // The kept set without sorting the whole vocabulary (a 152k-entry sort per
  // row made sampled speculative verification slow): top-k by a selection
  // of the k-th logit, top-p by sorting a growing prefix of the candidates.
  // Order of candidates wherever it matters: logit descending, ties lower id.
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::vector<int32_t> idx;
  if (p.top_k > 0 && p.top_k < vocab) {
    std::vector<float> vals(logits, logits + vocab);
    std::nth_element(vals.begin(), vals.begin() + (p.top_k - 1), vals.end(), std::greater<float>());
    const float kth = vals[p.top_k - 1];
    // HF TopK keeps every token whose logit ties the k-th.
    for (int64_t i = 0; i < vocab; ++i)
      if (logits[i] >= kth) idx.push_back(static_cast<int32_t>(i));
  } else {
    idx.resize(vocab);
    std::iota(idx.begin(), idx.end(), 0);
  }
  const int64_t n_cand = static_cast<int64_t>(idx.size());
  const double inv_t = 1.0 / p.temperature;
  float mxl = logits[idx[0]];
  for (int32_t i : idx) mxl = std::max(mxl, logits[i]);
  const double mx = mxl * inv_t;
  double sum = 0;
  for (int32_t i : idx) sum += std::exp(logits[i] * inv_t - mx);
  int64_t keep = n_cand;
  if (p.top_p < 1) {
    // Smallest prefix (by logit) whose mass reaches top_p, at least one token:
    // sort only the first m candidates, growing m until the prefix suffices.
    for (int64_t m = std::min<int64_t>(n_cand, 64);; m = std::min<int64_t>(n_cand, m * 8)) {
      std::partial_sort(idx.begin(), idx.begin() + m, idx.end(), by_logit);
      double cum = 0;
      int64_t n = 0;
      while (n < m) {
        cum += std::exp(logits[idx[n]] * inv_t - mx) / sum;
        ++n;
        if (cum >= p.top_p) break;
      }
      if (cum >= p.top_p || m == n_cand) {
        keep = n;
        break;
      }
    }
    sum = 0;
    for (int64_t i = 0; i < keep; ++i) sum += std::exp(logits[idx[i]] * inv_t - mx);
  }
  for (int64_t i = 0; i < keep; ++i) probs[idx[i]] = static_cast<float>(std::exp(logits[idx[i]] * inv_t - mx) / sum);
}

int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& p, Rng& rng, std::vector<float>& probs) {
  if (p.temperature <= 0) return argmax(logits, vocab);
  sampling_probs(logits, vocab, p, probs);
  return sample_from_probs(probs.data(), vocab, rng);
}

int32_t sample_from_probs(const float* probs, int64_t vocab, Rng& rng) {
  double u = rng.uniform(), cum = 0;
  int32_t last = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (probs[i] <= 0) continue;
    cum += probs[i];
    last = static_cast<int32_t>(i);
    if (u < cum) return last;
  }
  return last;  // rounding left u beyond the total mass
}

}  // namespace blockspec

namespace blockspec {

TokenLogprob token_logprob(const float* logits, int64_t vocab, float temperature, int32_t token, int n_top) {
  const double inv_t = temperature > 0 ? 1.0 / temperature : 1.0;
  double mx = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) mx = std::max(mx, logits[i] * inv_t);
  double sum = 0;  // in double: the log-sum-exp over ~150k entries
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(logits[i] * inv_t - mx);
  const double lse = mx + std::log(sum);
  TokenLogprob out;
  out.logprob = static_cast<float>(logits[token] * inv_t - lse);
  if (n_top > 0) {
    std::vector<int32_t> idx(vocab);
    std::iota(idx.begin(), idx.end(), 0);
    const int64_t k = std::min<int64_t>(n_top, vocab);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (int64_t i = 0; i < k; ++i) out.top.emplace_back(idx[i], static_cast<float>(logits[idx[i]] * inv_t - lse));
  }
  return out;
}

}  // namespace blockspec
