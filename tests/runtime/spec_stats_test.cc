#include <gtest/gtest.h>

#include "base/error.h"
#include "runtime/spec_types.h"

namespace blockspec {
namespace {

TEST(SpecStats, RecordCountsPositionsAndHistogram) {
  SpecStats s;
  EXPECT_EQ(s.mean_acceptance_length(), 0.0);
  s.record(3, 2);
  s.record(3, 0);
  s.record(0, 0);  // no draft tokens: not a draft
  EXPECT_EQ(s.num_drafts, 2);
  EXPECT_EQ(s.num_draft_tokens, 6);
  EXPECT_EQ(s.num_accepted_tokens, 2);
  EXPECT_EQ(s.accepted_per_pos, (std::vector<int64_t>{1, 1, 0}));
  EXPECT_EQ(s.tested_per_pos, (std::vector<int64_t>{2, 1, 1}));  // (3, 2) tested 0..2, (3, 0) tested 0
  EXPECT_EQ(s.acceptance_hist, (std::vector<int64_t>{1, 0, 1, 0}));
  EXPECT_DOUBLE_EQ(s.mean_acceptance_length(), 2.0);
  s.record(5, 5);  // a larger k grows both vectors
  EXPECT_EQ(s.accepted_per_pos, (std::vector<int64_t>{2, 2, 1, 1, 1}));
  EXPECT_EQ(s.tested_per_pos, (std::vector<int64_t>{3, 2, 2, 1, 1}));
  EXPECT_EQ(s.acceptance_hist, (std::vector<int64_t>{1, 0, 1, 0, 0, 1}));
  s.record(1, 1);  // a smaller k keeps them, and tests only position 0
  EXPECT_EQ(s.accepted_per_pos.size(), 5u);
  EXPECT_EQ(s.tested_per_pos, (std::vector<int64_t>{4, 2, 2, 1, 1}));
  EXPECT_EQ(s.acceptance_hist[1], 1);
  EXPECT_DOUBLE_EQ(s.mean_acceptance_length(), 1.0 + 8.0 / 4.0);
}

TEST(SpecStats, RecordRejectsImpossibleCounts) {
  SpecStats s;
  EXPECT_THROW(s.record(2, 3), Error);
  EXPECT_THROW(s.record(2, -1), Error);
  EXPECT_THROW(s.record(-1, 0), Error);
  EXPECT_EQ(s.num_drafts, 0);
}

TEST(SpecStats, MergeSumsAndGrows) {
  SpecStats a, b;
  a.record(2, 1);
  b.record(4, 4);
  b.record(4, 3);
  a.merge(b);
  EXPECT_EQ(a.num_drafts, 3);
  EXPECT_EQ(a.num_draft_tokens, 10);
  EXPECT_EQ(a.num_accepted_tokens, 8);
  EXPECT_EQ(a.accepted_per_pos, (std::vector<int64_t>{3, 2, 2, 1}));
  EXPECT_EQ(a.acceptance_hist, (std::vector<int64_t>{0, 1, 0, 1, 1}));
  SpecStats c;
  c.merge(a);  // merging into empty equals the source
  EXPECT_EQ(c.acceptance_hist, a.acceptance_hist);
  EXPECT_DOUBLE_EQ(c.mean_acceptance_length(), 1.0 + 8.0 / 3.0);
}

}  // namespace
}  // namespace blockspec
