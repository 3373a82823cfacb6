#include "runtime/ngram.h"

#include <gtest/gtest.h>

#include <string>

#include "base/error.h"

namespace blockspec {
namespace {

std::vector<int32_t> propose(NgramProposer& p, const std::vector<int32_t>& seq, int64_t k) {
  SamplingParams sp;
  Rng rng(1);
  Draft d;
  d.tokens = {99};  // stale content must be cleared
  d.q_kind = Draft::Q::kDense;
  p.propose(seq, k, sp, rng, d);
  EXPECT_EQ(d.q_kind, Draft::Q::kOneHot);
  return d.tokens;
}

TEST(Ngram, ProposesWhatFollowedTheMatch) {
  NgramProposer p(1, 3);
  EXPECT_EQ(propose(p, {1, 2, 3, 4, 5, 9, 1, 2, 3}, 2), (std::vector<int32_t>{4, 5}));
}

TEST(Ngram, MostRecentOccurrenceWins) {
  NgramProposer p(2, 2);
  // [1 2] occurs at 0 (-> 7) and 4 (-> 8); the later one is proposed.
  EXPECT_EQ(propose(p, {1, 2, 7, 0, 1, 2, 8, 0, 1, 2}, 1), (std::vector<int32_t>{8}));
}

TEST(Ngram, LongerMatchWinsOverMoreRecent) {
  NgramProposer p(1, 3);
  // suffix [5 1 2]: full 3-gram at 0 (-> 7); only [1 2] at 5 (-> 8, more recent).
  EXPECT_EQ(propose(p, {5, 1, 2, 7, 6, 1, 2, 8, 5, 1, 2}, 1), (std::vector<int32_t>{7}));
  NgramProposer p2(1, 2);  // max_n 2: [1 2] most recent -> 8
  EXPECT_EQ(propose(p2, {5, 1, 2, 7, 6, 1, 2, 8, 5, 1, 2}, 1), (std::vector<int32_t>{8}));
}

TEST(Ngram, NoMatchProposesNothing) {
  NgramProposer p(2, 4);
  EXPECT_TRUE(propose(p, {1, 2, 3, 4, 5, 3}, 3).empty());  // only 1-grams repeat, min_n 2
  EXPECT_TRUE(propose(p, {7}, 3).empty());
  EXPECT_TRUE(propose(p, {}, 3).empty());
  NgramProposer p1(1, 4);
  EXPECT_EQ(propose(p1, {1, 2, 3, 4, 5, 3}, 3), (std::vector<int32_t>{4, 5, 3}));
  EXPECT_TRUE(propose(p1, {1, 2, 3, 4, 5, 3}, 0).empty());
}

TEST(Ngram, TruncatesAtKAndAtSequenceEnd) {
  NgramProposer p(1, 2);
  std::vector<int32_t> seq = {1, 2, 3, 4, 5, 6, 1, 2};
  EXPECT_EQ(propose(p, seq, 3), (std::vector<int32_t>{3, 4, 5}));
  EXPECT_EQ(propose(p, seq, 100), (std::vector<int32_t>{3, 4, 5, 6, 1, 2}));
  // An occurrence may overlap the suffix: [4 4] at 1..2 is followed by the last token only.
  EXPECT_EQ(propose(p, {3, 4, 4, 4}, 5), (std::vector<int32_t>{4}));
}

TEST(Ngram, ValidatesBounds) {
  try {
    NgramProposer(0, 3);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prompt_lookup_min"), std::string::npos);
  }
  try {
    NgramProposer(3, 2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prompt_lookup_max"), std::string::npos);
  }
}

// The match is found across a long sequence (its speed is a benchmark's
// business, not a test's: a timed assertion fails on a busy machine).
TEST(Ngram, FindsTheMatchAcrossALongSequence) {
  // 4096 distinct tokens, then the first again: the scan walks the whole sequence.
  std::vector<int32_t> seq;
  for (int32_t i = 0; i < 4096; ++i) seq.push_back(i);
  seq.push_back(0);
  NgramProposer p(1, 5);
  EXPECT_EQ(propose(p, seq, 4), (std::vector<int32_t>{1, 2, 3, 4}));
}

}  // namespace
}  // namespace blockspec
