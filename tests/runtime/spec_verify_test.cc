#include "runtime/spec_verify.h"

#include <gtest/gtest.h>

#include "base/error.h"

namespace blockspec {
namespace {

// [3, 4] rows with argmax 1, 2, 3 (row 1 has a tie 2/3: the first wins).
const std::vector<float> kLogits = {0, 5, 1, 2, /**/ 0, 1, 4, 4, /**/ 1, 0, 2, 3};

Draft draft(std::vector<int32_t> tokens) {
  Draft d;
  d.tokens = std::move(tokens);
  return d;
}

TEST(VerifyGreedy, AcceptsTheMatchingPrefix) {
  VerifyOutcome o = verify_greedy(draft({1, 2}), kLogits.data(), 4);
  EXPECT_EQ(o.accepted, 2);  // all accepted: bonus from the last row
  EXPECT_EQ(o.next, 3);
  o = verify_greedy(draft({1, 3}), kLogits.data(), 4);
  EXPECT_EQ(o.accepted, 1);  // 3 ties 2 in row 1 but is not the first maximum
  EXPECT_EQ(o.next, 2);
  o = verify_greedy(draft({0, 2}), kLogits.data(), 4);
  EXPECT_EQ(o.accepted, 0);  // a later match after a mismatch does not count
  EXPECT_EQ(o.next, 1);
  o = verify_greedy(draft({}), kLogits.data(), 4);
  EXPECT_EQ(o.accepted, 0);  // k = 0: plain greedy decoding of row 0
  EXPECT_EQ(o.next, 1);
}

TEST(VerifyGreedy, RejectsMalformedDrafts) {
  EXPECT_THROW(verify_greedy(draft({4}), kLogits.data(), 4), Error);
  EXPECT_THROW(verify_greedy(draft({-1}), kLogits.data(), 4), Error);
  Draft d = draft({1, 2});
  d.q.assign(8, 0.1f);  // q values on a one-hot draft: q_kind left unset
  EXPECT_THROW(verify_greedy(d, kLogits.data(), 4), Error);
  d.q_kind = Draft::Q::kDense;
  d.q.assign(7, 0.1f);  // must be [2, 4]
  EXPECT_THROW(verify_greedy(d, kLogits.data(), 4), Error);
  d.q_kind = Draft::Q::kCandidates;
  d.n_cand = 2;
  d.q.assign(4, 0.5f);
  d.cand = {1, 2, 3, 4};  // 4 is outside the vocabulary
  EXPECT_THROW(verify_greedy(d, kLogits.data(), 4), Error);
  d.cand = {1, 2, 3};
  EXPECT_THROW(verify_greedy(d, kLogits.data(), 4), Error);
}

TEST(VerifySampled, ZeroTemperatureIsGreedy) {
  SamplingParams sp;
  Rng rng(3);
  VerifyOutcome o = verify_sampled(draft({1, 3}), kLogits.data(), 4, sp, rng);
  EXPECT_EQ(o.accepted, 1);
  EXPECT_EQ(o.next, 2);
}

TEST(VerifySampled, OneHotTokenOutsideTopKIsAlwaysRejected) {
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 2;  // row 0 keeps 1 and 3
  Rng rng(5);
  for (int i = 0; i < 200; ++i) {
    VerifyOutcome o = verify_sampled(draft({2, 2}), kLogits.data(), 4, sp, rng);
    EXPECT_EQ(o.accepted, 0);
    EXPECT_TRUE(o.next == 1 || o.next == 3);
  }
}

TEST(VerifySampled, DenseQEqualToPAcceptsEverything) {
  SamplingParams sp;
  sp.temperature = 0.8f;
  Draft d = draft({2, 0});
  std::vector<float> p;
  for (int i = 0; i < 2; ++i) {
    sampling_probs(kLogits.data() + i * 4, 4, sp, p);
    d.q.insert(d.q.end(), p.begin(), p.end());  // [2, 4]
  }
  d.q_kind = Draft::Q::kDense;
  Rng rng(9);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(verify_sampled(d, kLogits.data(), 4, sp, rng).accepted, 2);
}

TEST(VerifySampled, TokenTheProposalCouldNotDrawIsReplacedByADrawFromP) {
  // p = [1/2, 1/2]; the draft claims q = [1, 0] yet proposes 1. The residual
  // max(p - q, 0) would always give 1; the documented rule draws from p.
  const std::vector<float> logits = {0, 0, 0, 0};  // [2, 2]
  SamplingParams sp;
  sp.temperature = 1.0f;
  Draft d = draft({1});
  d.q_kind = Draft::Q::kDense;
  d.q = {1.0f, 0.0f};
  Rng rng(11);
  int ones = 0;
  for (int i = 0; i < 2000; ++i) {
    VerifyOutcome o = verify_sampled(d, logits.data(), 2, sp, rng);
    EXPECT_EQ(o.accepted, 0);
    ones += o.next;
  }
  EXPECT_NEAR(ones / 2000.0, 0.5, 0.05);
}

TEST(VerifySampled, EmptyDraftSamplesRowZero) {
  SamplingParams sp;
  sp.temperature = 1.0f;
  std::vector<float> p;
  sampling_probs(kLogits.data(), 4, sp, p);
  Rng rng(13);
  std::vector<int> n(4, 0);
  const int kN = 20000;
  for (int i = 0; i < kN; ++i) ++n[verify_sampled(draft({}), kLogits.data(), 4, sp, rng).next];
  for (int v = 0; v < 4; ++v) EXPECT_NEAR(n[v] / double(kN), p[v], 0.015) << v;
}

}  // namespace
}  // namespace blockspec
