#include "train/draft_rows.h"

#include <algorithm>

#include "train/blocks.h"

namespace blockspec {

namespace {

// Tokens of record r a row uses: those with taps, at most seq_len.
int64_t usable(const DraftRecordView& r, int64_t seq_len) { return std::min(r.rows, seq_len); }
bool trainable(const DraftRecordView& r, int64_t seq_len) { return usable(r, seq_len) > r.n_prompt + 1; }

}  // namespace

// Greedy packing of records (in `order`) into rows of <= seq_len tokens.
std::vector<std::vector<int64_t>> pack_rows(const DraftData& d, const std::vector<int64_t>& order, int64_t seq_len) {
  std::vector<std::vector<int64_t>> rows;
  int64_t used = seq_len;
  for (int64_t r : order) {
    const int64_t n = usable(d.records()[r], seq_len);
    if (used + n > seq_len) rows.emplace_back(), used = 0;
    rows.back().push_back(r);
    used += n;
  }
  return rows;
}

Packed build_row(const DraftData& d, const std::vector<int64_t>& recs, int64_t seq_len) {
  Packed p;
  const int64_t width = d.n_taps() * d.hidden();
  for (size_t di = 0; di < recs.size(); ++di) {
    const DraftRecordView& r = d.records()[recs[di]];
    const int64_t n = usable(r, seq_len);
    append_taps_f32(r, width, 0, n, p.taps);
    for (int64_t i = 0; i < n; ++i) {
      p.pos.push_back(i);
      p.doc.push_back(static_cast<int32_t>(di));
      p.tok.push_back(r.tokens[i]);
      p.mask.push_back(i >= r.n_prompt ? 1 : 0);
    }
    p.S += n;
  }
  return p;
}

// Target id -> draft id (-1: outside the draft vocabulary); empty: the full vocabulary.
std::vector<int32_t> target_to_draft(const DraftArch& a) {
  std::vector<int32_t> t2d;
  if (a.draft_vocab.empty()) return t2d;
  t2d.assign(a.target_vocab_size, -1);
  for (size_t i = 0; i < a.draft_vocab.size(); ++i) t2d[a.draft_vocab[i]] = static_cast<int32_t>(i);
  return t2d;
}

// The DraftRow of a packed row for these anchors, and which slots the
// metrics count (those the loss trains, plus slots whose target token is
// outside a reduced draft vocabulary: never draftable, so counted wrong).
Blocks make_blocks(const Packed& pk, std::vector<int64_t> anchors, const DraftArch& a, const std::vector<int32_t>& t2d,
                   const std::vector<float>& slot_w, bool dflash2) {
  const int64_t B = a.block_size;
  Blocks b;
  DraftRow& row = b.row;
  row.S = pk.S, row.taps = pk.taps.data(), row.pos = pk.pos, row.B = B;
  const BlockTargets bt = block_targets(anchors, pk.tok, pk.mask, pk.doc, B);
  // DFlash: full-attention layers, the whole block (causal in it with DraftArch::causal); DFlash2: sliding layers,
  // bidirectional in the block.
  row.spans = block_key_spans(anchors, pk.doc, B, a.causal && !dflash2, dflash2 ? a.sliding_window : 0);
  if (dflash2) {  // the selector's predecessor of slot k: the data token at a + k - 1
    row.prev_ids.assign(anchors.size() * B, 0);
    for (size_t j = 0; j < anchors.size(); ++j)
      for (int64_t k = 1; k < B && anchors[j] + k - 1 < pk.S; ++k) row.prev_ids[j * B + k] = pk.tok[anchors[j] + k - 1];
  }
  row.block_ids.assign(anchors.size() * B, a.mask_token_id);
  for (size_t j = 0; j < anchors.size(); ++j) row.block_ids[j * B] = pk.tok[anchors[j]];
  row.labels = bt.labels;
  row.weight.resize(bt.mask.size());
  b.counted = bt.mask;
  double n = 0;
  for (size_t i = 0; i < bt.mask.size(); ++i) {
    float m = bt.mask[i];
    if (m > 0 && !t2d.empty()) {
      const int32_t d = t2d[row.labels[i]];
      row.labels[i] = d < 0 ? 0 : d;
      if (d < 0) m = 0;  // untrainable: the draft head has no row for it
    }
    row.weight[i] = m * slot_w[i % B], n += m;
  }
  row.denom = n + 1e-5;  // unweighted denominator, as speculators (training.md §3)
  row.anchors = std::move(anchors);
  return b;
}

Split split_records(const DraftData& d, double val_frac, int64_t seq_len) {
  Split s;
  const int64_t every = val_frac > 0 ? std::max<int64_t>(2, std::llround(1.0 / val_frac)) : 0;
  for (int64_t i = 0; i < static_cast<int64_t>(d.records().size()); ++i) {
    if (!trainable(d.records()[i], seq_len)) continue;
    (every > 0 && i % every == every - 1 ? s.val : s.train).push_back(i);
  }
  return s;
}

Rng train_anchor_rng(uint64_t seed, int64_t step) {
  return Rng(seed ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(step + 1)));
}

Rng eval_anchor_rng(uint64_t seed, int64_t row) { return Rng(seed + 7919 * static_cast<uint64_t>(row)); }

// Epoch e's order of the training records: a shuffle seeded by (seed, e).
std::vector<int64_t> epoch_order(const std::vector<int64_t>& train, uint64_t seed, int64_t e) {
  std::vector<int64_t> o = train;
  Rng rng(seed * 1000003 + static_cast<uint64_t>(e) + 1);
  for (int64_t i = static_cast<int64_t>(o.size()) - 1; i > 0; --i)
    std::swap(o[i], o[static_cast<int64_t>(rng.next() % static_cast<uint64_t>(i + 1))]);
  return o;
}

void SlotTally::add(const DraftStepResult& r, const Blocks& b) {
  for (size_t i = 0; i < r.correct.size(); ++i) {
    const float m = b.counted[i] > 0 ? 1.f : 0.f;
    const uint8_t ok = r.correct[i] && b.row.weight[i] > 0;  // an out-of-vocabulary slot is never right
    correct.push_back(ok);
    mask.push_back(m);
    hits[i % B] += m * ok;
    seen[i % B] += m;
  }
}

double SlotTally::eal() const { return expected_acceptance_length(correct, mask, B); }

std::vector<double> SlotTally::acc() const {
  std::vector<double> a(B, 0.0);
  for (int64_t k = 0; k < B; ++k) a[k] = seen[k] > 0 ? hits[k] / seen[k] : 0;
  return a;
}

}  // namespace blockspec
