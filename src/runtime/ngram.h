// Draftless speculation by n-gram prompt lookup (vLLM's "ngram" method):
// find the most recent earlier occurrence of the sequence's last n tokens
// (n from prompt_lookup_max down to prompt_lookup_min) and propose the tokens
// that followed it. Deterministic, so its q is one-hot.
#pragma once
#include <cstdint>

#include "runtime/spec_types.h"

namespace blockspec {

class NgramProposer : public Proposer {
 public:
  NgramProposer(int64_t prompt_lookup_min, int64_t prompt_lookup_max);
  std::string method() const override { return "ngram"; }
  void observe(const std::vector<int32_t>&, int64_t, int64_t, const float*) override {}
  void propose(const std::vector<int32_t>& seq, int64_t k, const SamplingParams& sp, Rng& rng, Draft& out) override;
  void reset() override {}

 private:
  int64_t min_n_, max_n_;
};

}  // namespace blockspec
