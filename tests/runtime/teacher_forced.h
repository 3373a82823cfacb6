// A proposer for lossless tests with known acceptance (tests/runtime).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "runtime/speculative.h"

namespace blockspec::testing {

// Proposes the target's own greedy continuation `ref` (prompt + plain greedy
// output, at least K tokens past the budget's end) with the token at a
// random offset c in [0, k] replaced (c == k: no corruption; always when
// !corrupt), so exactly c drafts must be accepted. Checks, at each call, that
// the previous step accepted exactly what it expected. The loop drafts K
// tokens even in its last steps and counts as accepted only what the budget
// (ending at position `end`, prompt + max_new_tokens) can still use:
// expected_accepted does the same.
class TeacherForced : public Proposer {
 public:
  TeacherForced(std::vector<int32_t> ref, int64_t V, uint64_t seed, int64_t end, bool corrupt = true)
      : ref_(std::move(ref)), V_(V), gen_(seed), corrupt_(corrupt), end_(end) {}
  std::string method() const override { return "teacher-forced"; }
  void observe(const std::vector<int32_t>&, int64_t, int64_t, const float*) override {}
  void propose(const std::vector<int32_t>& seq, int64_t k, const SamplingParams&, Rng&, Draft& out) override {
    out.clear();
    const int64_t n = static_cast<int64_t>(seq.size());
    if (last_n_ >= 0) {
      EXPECT_EQ(n - last_n_ - 1, last_expected_) << "accepted count at length " << last_n_;
    }
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(seq[i], ref_[i]) << "sequence diverged at " << i;
    ASSERT_LE(n + k, static_cast<int64_t>(ref_.size()));
    const int64_t c = corrupt_ ? std::uniform_int_distribution<int64_t>(0, k)(gen_) : k;
    for (int64_t i = 0; i < k; ++i) {
      const int32_t t = ref_[n + i];
      out.tokens.push_back(i == c ? static_cast<int32_t>((t + 1 + gen_() % (V_ - 1)) % V_) : t);
    }
    last_n_ = n, last_expected_ = c;
    expected_accepted += std::min<int64_t>(c, end_ - n - 1);
  }
  void reset() override { last_n_ = -1, expected_accepted = 0; }
  int64_t expected_accepted = 0;

 private:
  std::vector<int32_t> ref_;
  int64_t V_;
  std::mt19937_64 gen_;
  bool corrupt_;
  int64_t end_;
  int64_t last_n_ = -1, last_expected_ = 0;
};

}  // namespace blockspec::testing
