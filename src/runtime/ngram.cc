#include "runtime/ngram.h"

#include <algorithm>

#include "base/error.h"

namespace blockspec {

NgramProposer::NgramProposer(int64_t prompt_lookup_min, int64_t prompt_lookup_max)
    : min_n_(prompt_lookup_min), max_n_(prompt_lookup_max) {
  if (min_n_ < 1) fail("prompt_lookup_min must be >= 1, found ", min_n_);
  if (max_n_ < min_n_)
    fail("prompt_lookup_max must be >= prompt_lookup_min (", min_n_, "), found ", max_n_);
}

// One backward scan over the possible end positions e of an earlier
// occurrence: m(e) = how many of the last max_n tokens match going back from
// e. The first e (the most recent) that reaches a new longest m wins, so the
// result is the longest n, and for it the most recent occurrence. Cost
// O(len * max_n) per call, stopping at the first full max_n match.
void NgramProposer::propose(const std::vector<int32_t>& seq, int64_t k, const SamplingParams&, Rng&, Draft& out) {
  out.clear();
  const int64_t len = static_cast<int64_t>(seq.size());
  if (k <= 0 || len < min_n_ + 1) return;
  int64_t best_m = 0, best_e = -1;
  for (int64_t e = len - 2; e >= 0 && best_m < max_n_; --e) {
    const int64_t cap = std::min<int64_t>(max_n_, e + 1);
    int64_t m = 0;
    while (m < cap && seq[e - m] == seq[len - 1 - m]) ++m;
    if (m > best_m) best_m = m, best_e = e;
  }
  if (best_m < min_n_) return;
  const int64_t end = std::min(len, best_e + 1 + k);
  out.tokens.assign(seq.begin() + best_e + 1, seq.begin() + end);  // [<= k]
  out.q_kind = Draft::Q::kOneHot;
}

}  // namespace blockspec
