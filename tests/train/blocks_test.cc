// The training blocks of a packed row, on a hand-made row (training.md §7.5:
// "test labels with a one-block hand-made example"): two documents and
// padding, a loss mask, the target's predictions pred[i] = 10 + i.
#include "train/blocks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "base/error.h"

namespace blockspec {
namespace {

const std::vector<int32_t> kDoc = {0, 0, 0, 0, 0, 0, 1, 1, 1, -1};
const std::vector<uint8_t> kLoss = {0, 0, 1, 1, 1, 1, 0, 1, 1, 0};
std::vector<int32_t> preds() {
  std::vector<int32_t> p(10);
  for (int i = 0; i < 10; ++i) p[i] = 10 + i;
  return p;
}

TEST(TrainBlocks, AnchorsAreTrainablePositionsInsideTheirDocument) {
  Rng rng(1);
  EXPECT_EQ(select_anchors(kLoss, kDoc, 100, rng), (std::vector<int64_t>{1, 2, 3, 4, 6, 7}));
  std::set<std::vector<int64_t>> seen;
  for (int s = 0; s < 20; ++s) {
    Rng r(100 + s);
    std::vector<int64_t> a = select_anchors(kLoss, kDoc, 3, r);
    ASSERT_EQ(a.size(), 3u);
    EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
    for (int64_t x : a) EXPECT_TRUE(x == 1 || x == 2 || x == 3 || x == 4 || x == 6 || x == 7) << x;
    seen.insert(a);
  }
  EXPECT_GT(seen.size(), 5u);  // redrawn, not fixed
}

TEST(TrainBlocks, LabelsArePredictionsAndNeverCrossADocument) {
  const BlockTargets t = block_targets({4, 7}, preds(), kLoss, kDoc, 4);
  // Block 0 (anchor 4): slot 1 = position 5; slots 2, 3 are in document 1.
  // Block 1 (anchor 7): slot 1 = position 8; slot 2 is padding, slot 3 past the row.
  EXPECT_EQ(t.labels, (std::vector<int32_t>{0, 15, 0, 0, 0, 18, 0, 0}));
  EXPECT_EQ(t.mask, (std::vector<float>{0, 1, 0, 0, 0, 1, 0, 0}));
  EXPECT_THROW(block_targets({12}, preds(), kLoss, kDoc, 4), Error);
}

TEST(TrainBlocks, PositionWeights) {
  const std::vector<float> w = exp_decay_weights(4, 2.0);
  EXPECT_EQ(w[0], 0.f);
  EXPECT_FLOAT_EQ(w[1], 1.f);
  EXPECT_FLOAT_EQ(w[2], static_cast<float>(std::exp(-0.5)));
  EXPECT_FLOAT_EQ(w[3], static_cast<float>(std::exp(-1.0)));
  // D-PACE, alpha 0.5, losses 0, ln 2, 0: q~ = 1, 0.75, 1; P = 1, 0.75, 0.75.
  const std::vector<float> d = dpace_weights({9.f, 0.f, static_cast<float>(std::log(2.0)), 0.f}, {0, 1, 1, 1}, 4, 0.5);
  EXPECT_EQ(d[0], 0.f);
  EXPECT_FLOAT_EQ(d[1], 2.5f);
  EXPECT_FLOAT_EQ(d[2], 1.5f);
  EXPECT_FLOAT_EQ(d[3], 0.75f);
  // A masked slot gets 0 and q~ = 1 (it neither counts nor discounts later slots).
  const std::vector<float> m = dpace_weights({0.f, 0.f, 5.f, 0.f}, {0, 1, 0, 1}, 4, 0.5);
  EXPECT_FLOAT_EQ(m[1], 2.f);
  EXPECT_EQ(m[2], 0.f);
  EXPECT_FLOAT_EQ(m[3], 1.f);
}

TEST(TrainBlocks, ExpectedAcceptanceLength) {
  // Block 0: correct, correct, wrong -> 3. Block 1: wrong -> 1. Block 2: nothing counts -> skipped.
  const std::vector<uint8_t> correct = {0, 1, 1, 0, 0, 0, 1, 1, 0, 1, 1, 1};
  const std::vector<float> mask = {0, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0};
  EXPECT_DOUBLE_EQ(expected_acceptance_length(correct, mask, 4), 2.0);
  EXPECT_DOUBLE_EQ(expected_acceptance_length(correct, std::vector<float>(12, 0.f), 4), 0.0);
}

TEST(TrainBlocks, KeySpansFollowTheInferenceVisibility) {
  // S = 10 context rows, then block rows 10..13 (anchor 4) and 14..17 (anchor 7).
  const std::vector<int32_t> full = block_key_spans({4, 7}, kDoc, 4, false, 0);
  EXPECT_EQ(std::vector<int32_t>(full.begin(), full.begin() + 4), (std::vector<int32_t>{0, 4, 10, 14}));
  EXPECT_EQ(std::vector<int32_t>(full.begin() + 16, full.begin() + 20), (std::vector<int32_t>{6, 7, 14, 18}));
  const std::vector<int32_t> causal = block_key_spans({4, 7}, kDoc, 4, true, 0);
  EXPECT_EQ(std::vector<int32_t>(causal.begin() + 4, causal.begin() + 8), (std::vector<int32_t>{0, 4, 10, 12}));
  // Window 2, query slot 3 of anchor 4 (position 7): context needs 7 - pk < 2, i.e. none before the
  // anchor; block slots with |3 - l| < 2: 2 and 3.
  const std::vector<int32_t> win = block_key_spans({4, 7}, kDoc, 4, false, 2);
  EXPECT_EQ(std::vector<int32_t>(win.begin() + 12, win.begin() + 16), (std::vector<int32_t>{4, 4, 12, 14}));
  // Slot 1 (position 5): context pk = 4 is the anchor itself, invisible; block slots 0..2.
  EXPECT_EQ(std::vector<int32_t>(win.begin() + 4, win.begin() + 8), (std::vector<int32_t>{4, 4, 10, 13}));
}

}  // namespace
}  // namespace blockspec
