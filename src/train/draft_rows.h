// The rows a drafter trains and is evaluated on (training.md §1-§3), shared
// by `train-drafter` (train/trainer.h) and the drafter PTQR of `ptqr`
// (ptqr/ptqr_drafter.h): records packed into rows of up to seq_len tokens,
// the DraftRow of a row for a set of anchors, the held-out split, the epoch
// order, and the per-slot tally of what serving would accept.
#pragma once
#include <cstdint>
#include <vector>

#include "train/draft_checkpoint.h"
#include "train/draft_data.h"
#include "runtime/sampler.h"
#include "train/draft_step.h"

namespace blockspec {

// One packed training row: documents back to back, positions restarting
// at 0 per document (training.md §1).
struct Packed {
  int64_t S = 0;
  std::vector<float> taps;      // [S, width]
  std::vector<int64_t> pos;     // [S]
  std::vector<int32_t> doc;     // [S] document within the row
  std::vector<int32_t> tok;     // [S] the data = the target's greedy tokens = the labels (training.md §8)
  std::vector<uint8_t> mask;    // [S] 1 on response tokens
};

// Greedy packing of records (in `order`) into rows of <= seq_len tokens.
std::vector<std::vector<int64_t>> pack_rows(const DraftData& d, const std::vector<int64_t>& order, int64_t seq_len);
Packed build_row(const DraftData& d, const std::vector<int64_t>& recs, int64_t seq_len);

// Target id -> draft id (-1: outside the draft vocabulary); empty: the full vocabulary.
std::vector<int32_t> target_to_draft(const DraftArch& a);

// The DraftRow of a packed row for these anchors, and which slots the
// metrics count (those the loss trains, plus slots whose target token is
// outside a reduced draft vocabulary: never draftable, so counted wrong).
struct Blocks {
  DraftRow row;
  std::vector<float> counted;  // [nA * B]
};
Blocks make_blocks(const Packed& pk, std::vector<int64_t> anchors, const DraftArch& a, const std::vector<int32_t>& t2d,
                   const std::vector<float>& slot_w, bool dflash2);

// Records held out (every round(1 / val_frac)-th) and trained on; records
// too short to train are in neither.
struct Split {
  std::vector<int64_t> train, val;
};
Split split_records(const DraftData& d, double val_frac, int64_t seq_len);

// The anchors' Rng of training step `step` (a function of the step, so a resumed run draws the same), and of
// held-out row `row` (1-based: the same anchors at every evaluation).
Rng train_anchor_rng(uint64_t seed, int64_t step);
Rng eval_anchor_rng(uint64_t seed, int64_t row);

// Epoch e's order of the training records: a shuffle seeded by (seed, e).
std::vector<int64_t> epoch_order(const std::vector<int64_t>& train, uint64_t seed, int64_t e);

// Correct counted slots of many blocks: eal and accuracy per slot.
struct SlotTally {
  int64_t B;
  std::vector<uint8_t> correct;
  std::vector<float> mask;
  std::vector<double> hits, seen;
  explicit SlotTally(int64_t b) : B(b), hits(b, 0.0), seen(b, 0.0) {}
  void add(const DraftStepResult& r, const Blocks& b);
  double eal() const;
  std::vector<double> acc() const;
};

}  // namespace blockspec
