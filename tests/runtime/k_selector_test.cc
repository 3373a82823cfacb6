// The adaptive draft length (no num_speculative_tokens given): KSelector's
// choice on a given verify-cost table and acceptance history, without a
// model or a clock.
#include "runtime/k_selector.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace blockspec {
namespace {

// A bandwidth-bound target: up to 8 rows cost what one row costs (10 ms),
// beyond that the cost grows with the rows (compute-bound).
std::vector<std::pair<int64_t, double>> flat_then_linear() { return {{1, 10.0}, {8, 10.0}, {64, 80.0}}; }

SpecStats history(int64_t drafts, std::vector<int64_t> accepted_per_pos) {
  SpecStats s;
  s.num_drafts = drafts;
  s.accepted_per_pos = std::move(accepted_per_pos);
  return s;
}

TEST(KSelector, NothingToDraftForNoSequenceOrNoK) {
  EXPECT_EQ(KSelector(flat_then_linear(), 0).choose(1, {}, 0.0), 0);
  EXPECT_EQ(KSelector(flat_then_linear(), 4).choose(0, {}, 0.0), 0);
}

TEST(KSelector, PriorDraftsTheCeilingWhereRowsAreFree) {
  // Prior acceptance 0.6 per position: 1 + 0.6 + 0.36 + 0.216 + 0.13 tokens
  // per 10 ms pass at k = 4, each step up worth more than the 2% margin.
  const KSelector ks(flat_then_linear(), 4);
  EXPECT_EQ(ks.choose(1, {}, 0.0), 4);
  // Two sequences: 2 * (1 + k) rows, still free up to k = 3; k = 4 (10 rows,
  // 12.5 ms) loses to k = 3: 2 * 2.18 / 10 > 2 * 2.31 / 12.5.
  EXPECT_EQ(ks.choose(2, {}, 0.0), 3);
}

TEST(KSelector, ComputeBoundBatchesStopDrafting) {
  // 8 sequences: any draft leaves the flat part (16 rows cost 20 ms):
  // 8 * 1.6 / 20 < 8 / 10.
  EXPECT_EQ(KSelector(flat_then_linear(), 4).choose(8, {}, 0.0), 0);
}

TEST(KSelector, FollowsMeasuredAcceptance) {
  const KSelector ks(flat_then_linear(), 4);
  // Nothing ever accepted: drafting cannot pay.
  EXPECT_EQ(ks.choose(1, history(20, {0, 0, 0, 0}), 0.0), 0);
  // Position 1 always accepted, position 2 never: k = 1 (the second draft
  // token only costs).
  EXPECT_EQ(ks.choose(1, history(20, {20, 0, 0, 0}), 0.0), 1);
  // Everything accepted: the ceiling.
  EXPECT_EQ(ks.choose(1, history(20, {20, 20, 20, 20}), 0.0), 4);
  // Fewer than 8 drafts: the prior still decides.
  EXPECT_EQ(ks.choose(1, history(7, {0, 0, 0, 0}), 0.0), 4);
}

// n-gram lookup in front of a drafter: each source's k from its own drafts
// (the drafter's are all drafts less the lookup's) and cost.
TEST(KSelector, LookupAndDrafterEachGetTheirOwnK) {
  const KSelector ks(flat_then_linear(), 4);
  // The lookup's 10 drafts all accepted in full; the drafter's 20 never.
  DraftLengths l = ks.choose_sources(1, history(20, {0, 0, 0, 0}), history(10, {10, 10, 10, 10}), 0.0);
  EXPECT_EQ(l.lookup, 4);
  EXPECT_EQ(l.drafter, 0);
  EXPECT_EQ(l.max(), 4);
  // The other way round: the drafter accepts position 1 always and position 2 never, the lookup nothing.
  l = ks.choose_sources(1, history(20, {20, 0, 0, 0}), history(10, {0, 0, 0, 0}), 0.0);
  EXPECT_EQ(l.drafter, 1);
  EXPECT_EQ(l.lookup, 0);
  // The drafter's cost weighs on the drafter alone: at 20 ms a draft does not pay with prior acceptance...
  l = ks.choose_sources(1, {}, {}, 20.0);
  EXPECT_EQ(l.drafter, 0);
  EXPECT_EQ(l.lookup, 4);  // ... while the lookup, free, drafts the ceiling
}

// The acceptance the selector reads is the last 64 to 128 drafts: a change
// of workload shows within them, where a history summed since start-up
// would keep the old acceptance.
TEST(KSelector, AcceptanceWindowForgetsOldDrafts) {
  const KSelector ks(flat_then_linear(), 4);
  AcceptanceWindow w;
  SpecStats good, bad;
  good.record(1, 1);
  bad.record(1, 0);
  for (int i = 0; i < 300; ++i) w.add(good);
  EXPECT_EQ(w.seen().num_drafts, 300 % AcceptanceWindow::kHalf + AcceptanceWindow::kHalf);
  EXPECT_EQ(ks.choose(1, w.seen(), 0.0), 4);
  for (int i = 0; i < 2 * AcceptanceWindow::kHalf; ++i) w.add(bad);  // the workload changes
  EXPECT_EQ(w.seen().num_accepted_tokens, 0);
  EXPECT_EQ(ks.choose(1, w.seen(), 0.0), 0);
  SpecStats summed;  // what a summed history would say
  for (int i = 0; i < 300; ++i) summed.merge(good);
  for (int i = 0; i < 2 * AcceptanceWindow::kHalf; ++i) summed.merge(bad);
  EXPECT_GT(ks.choose(1, summed, 0.0), 0);
  // Drafting is off now, so no draft refreshes the window: idle steps age it
  // out, and the prior drafts again after 2 * kHalf of them.
  const SpecStats none;
  for (int i = 0; i < 2 * AcceptanceWindow::kHalf - 1; ++i) w.add(none);
  EXPECT_EQ(ks.choose(1, w.seen(), 0.0), 0) << "forgot before 2 * kHalf idle steps";
  w.add(none);
  EXPECT_EQ(w.seen().num_drafts, 0);
  EXPECT_EQ(ks.choose(1, w.seen(), 0.0), 4);
}

TEST(KSelector, ADrafterSlowerThanItsGainIsTurnedOff) {
  // Prior expectation at k = 4 is 2.31 tokens per pass; a drafter costing
  // 20 ms per sequence makes that 2.31 / 30 ms < 1 / 10 ms.
  EXPECT_EQ(KSelector(flat_then_linear(), 4).choose(1, {}, 20.0), 0);
  // At 1 ms it still pays: 2.31 / 11 > 1 / 10.
  EXPECT_EQ(KSelector(flat_then_linear(), 4).choose(1, {}, 1.0), 4);
}

// Steps that drafted fewer tokens never tested the later positions: those
// drafts are not evidence against them. A target paying 3 ms per extra row;
// a history of 20 k = 4 drafts then 40 k = 2 drafts, all accepted, must
// draft 4. Judged by "accepted at i-1" (60 drafts accepted position 1, only
// 20 position 2) position 2's acceptance would read 1/3 and k stay at 2.
TEST(KSelector, ShortStepsDoNotCountAgainstLaterPositions) {
  const KSelector ks({{1, 10.0}, {5, 22.0}}, 4);
  SpecStats s;
  for (int i = 0; i < 20; ++i) s.record(4, 4);
  for (int i = 0; i < 40; ++i) s.record(2, 2);
  EXPECT_EQ(ks.choose(1, s, 0.0), 4);
  SpecStats old = s;  // the old denominator on the same counts
  old.tested_per_pos.clear();
  EXPECT_EQ(ks.choose(1, old, 0.0), 2);
  // Real rejections still count: position 1 tested 30 times, accepted 3.
  SpecStats r;
  for (int i = 0; i < 27; ++i) r.record(4, 1);
  for (int i = 0; i < 3; ++i) r.record(4, 4);
  EXPECT_EQ(ks.choose(1, r, 0.0), 1);
}

}  // namespace
}  // namespace blockspec

namespace blockspec {
namespace {

// The draft cost estimate: the first (cold) measurement is replaced by the
// second, then an EMA; a long stretch of steps without drafts decays it, so
// one slow draft cannot turn drafting off for good, but a short one (k
// alternating between 0 and 1) leaves it as measured.
TEST(DraftCost, ColdFirstDraftIsReplacedAndLongIdleStretchesForget) {
  DraftCost c;
  EXPECT_EQ(c.ms(), 0.0);
  c.drafted(50.0);  // cold caches, the prompt's context
  EXPECT_EQ(c.ms(), 50.0);
  c.drafted(2.0);
  EXPECT_EQ(c.ms(), 2.0);
  c.drafted(4.0);
  EXPECT_DOUBLE_EQ(c.ms(), 0.8 * 2.0 + 0.2 * 4.0);
  // Alternating: a few idle steps between drafts of 4 ms keep the estimate at the drafts' cost.
  DraftCost alt;
  alt.drafted(4.0), alt.drafted(4.0);
  for (int i = 0; i < 50; ++i) {
    for (int j = 0; j < 3; ++j) alt.idle();
    EXPECT_DOUBLE_EQ(alt.ms(), 4.0);
    alt.drafted(4.0);
  }
  EXPECT_DOUBLE_EQ(alt.ms(), 4.0);
  // Within the grace the estimate holds, past it it decays, and a draft measures again from the EMA.
  for (int j = 0; j < DraftCost::kGrace; ++j) alt.idle();
  EXPECT_DOUBLE_EQ(alt.ms(), 4.0);
  alt.idle();
  EXPECT_DOUBLE_EQ(alt.ms(), 4.0 * 0.9);
  alt.drafted(4.0);
  EXPECT_DOUBLE_EQ(alt.ms(), 4.0);
  // A spike that makes drafting look unprofitable (KSelector: 20 ms turns a
  // 4-token draft off at 10 ms per pass) is forgotten within a few steps past the grace.
  DraftCost spike;
  spike.drafted(5.0), spike.drafted(1.0), spike.drafted(100.0);
  const KSelector ks({{1, 10.0}, {8, 10.0}}, 4);
  EXPECT_EQ(ks.choose(1, {}, spike.ms()), 0);
  int idle = 0;
  while (ks.choose(1, {}, spike.ms()) == 0 && idle < 1000) spike.idle(), ++idle;
  EXPECT_GT(idle, DraftCost::kGrace);
  EXPECT_LT(idle, DraftCost::kGrace + 10);
}

}  // namespace
}  // namespace blockspec

namespace blockspec {
namespace {

// The served forwards correct the start-up table row count by row count: a
// noisy start that made 4 rows look 4x a plain step kept k at 0; once kMin
// plain and 4-row forwards measured them at the same cost, k = 3.
TEST(LiveCost, ServedForwardsCorrectANoisyStartUpTable) {
  const KSelector ks({{1, 10.0}, {2, 20.0}, {4, 40.0}}, 3);
  LiveCost live;
  EXPECT_EQ(ks.choose(1, {}, 0.0, &live), 0);
  for (int i = 0; i < LiveCost::kMin; ++i) live.observe(1, 1.0), live.observe(4, 0.25);
  EXPECT_NEAR(live.factor(4) / live.factor(1), 0.25, 0.03);
  EXPECT_EQ(ks.choose(1, {}, 0.0, &live), 3);
  EXPECT_EQ(ks.choose(1, {}, 0.0), 0) << "without the live costs, the table's choice";
  // A count not measured takes its nearest measured neighbour's shape (the fewer rows on a tie).
  EXPECT_DOUBLE_EQ(live.factor(3), live.factor(4));
  EXPECT_DOUBLE_EQ(live.factor(2), live.factor(1));
  EXPECT_DOUBLE_EQ(live.factor(9), live.factor(4));
  // Only one count measured: a level shift, applied to every count, leaves the table's shape (and k) as it was.
  LiveCost level;
  for (int i = 0; i < LiveCost::kMin; ++i) level.observe(4, 1.7);
  EXPECT_DOUBLE_EQ(level.factor(1), 1.7);
  EXPECT_EQ(ks.choose(1, {}, 0.0, &level), 0);
}

// Each count against the level of its moment: 2 rows timed in a slow spell
// (every forward 1.5x) and 1 and 3 rows in a fast one read about the same
// shape (the level lags the spell's edges by a few forwards: 2 rows read
// 1.15x the others); measured against a fixed level (the table), 2 rows
// would read 1.5x them.
TEST(LiveCost, ASlowSpellIsALevelNotAShape) {
  LiveCost c;
  for (int i = 0; i < 8; ++i) c.observe(1, 1.0), c.observe(3, 1.0);
  for (int i = 0; i < 10; ++i) c.observe(1, 1.5);  // the spell begins (plain steps)
  for (int i = 0; i < 8; ++i) c.observe(2, 1.5);
  for (int i = 0; i < 10; ++i) c.observe(1, 1.0);  // it ends
  EXPECT_NEAR(c.factor(2) / c.factor(1), 1.0, 0.2);
  EXPECT_NEAR(c.factor(3) / c.factor(1), 1.0, 0.2);
  EXPECT_NEAR(c.factor(2) / c.factor(3), 1.0, 0.2);
  EXPECT_NEAR(c.factor(1), 1.0, 0.1);
}

// The whole loop on a target whose forwards of up to 4 rows truly cost one
// plain step (10 ms) and whose start-up table said 4 rows cost 4x: AdaptiveK
// starts at k = 0, its exploration times k = 1 (2 rows) and the plain step,
// climbs, and drafts 3 from then on, exploring k = 2 and the plain step
// when their costs have gone unmeasured for kStale forwards. The
// other way round (a table that says rows are free, served verifies at 3x a
// plain step) it comes down.
TEST(LiveCost, ExplorationFindsTheServedCost) {
  auto run = [](const KSelector& ks, double (*true_ms)(int64_t), std::vector<int64_t>* tail) {
    AdaptiveK a;
    for (int step = 0; step < 3000; ++step) {
      const int64_t k = a.choose(ks, 1, false, 3);
      a.forwarded(ks, 1 + k, true_ms(1 + k) / 1e3);
      if (step >= 2000) tail->push_back(k);
    }
  };
  std::vector<int64_t> ks_flat;
  run(KSelector({{1, 10.0}, {2, 20.0}, {4, 40.0}}, 3), [](int64_t) { return 10.0; }, &ks_flat);
  const int64_t at3 = std::count(ks_flat.begin(), ks_flat.end(), 3);
  // Exploring only what the served steps have not measured lately: k = 2 and the plain step, each once in
  // about kStale forwards.
  EXPECT_GE(at3, 1000 - 2 * (1000 / 256 + 1));
  EXPECT_LT(at3, 1000) << "no exploration";
  std::vector<int64_t> ks_dear;
  run(KSelector({{1, 10.0}, {8, 10.0}}, 3), [](int64_t r) { return r == 1 ? 10.0 : 10.0 + 10.0 * r; }, &ks_dear);
  EXPECT_GE(std::count(ks_dear.begin(), ks_dear.end(), 0), 1000 - 2 * (1000 / 256 + 1));
}

// Past kMin an EMA of weight 0.1, each ratio clipped to [0.5, 2] x the
// shape: one preempted step (100x) moves the shape by a tenth of a doubling.
TEST(LiveCost, OneSlowStepMovesTheFactorLittle) {
  LiveCost c;
  for (int i = 0; i < LiveCost::kMin; ++i) c.observe(3, 1.0 + 0.1 * i);
  const double shape = c.factor(3) / c.factor(1);  // one count: its own shape is 1
  EXPECT_DOUBLE_EQ(shape, 1.0);
  c.observe(3, 100.0);
  // The level jumps by its weight (0.2 of the ratio), the shape by at most a tenth of a doubling.
  EXPECT_LE(c.factor(3) / c.factor(1), 0.9 + 0.1 * 2.0 + 1e-12);
  c.observe(3, -1.0);  // not a time: ignored
  c.observe(3, std::nan(""));
  EXPECT_EQ(c.observed(3), LiveCost::kMin + 1);
}

}  // namespace
}  // namespace blockspec
