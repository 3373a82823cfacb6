#include "runtime/k_selector.h"

#include <algorithm>

#include "base/timer.h"

namespace blockspec {

KSelector::KSelector(Transformer& model, int64_t K, int64_t max_seqs) : K_(K) {
  // Time forwards of r rows (one sequence, all logits) after a short context.
  const int64_t max_rows = std::min<int64_t>(max_seqs * (K + 1), 256);
  const int64_t V = model.config().vocab_size;
  std::vector<int32_t> ids(max_rows + 8);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7919 + 11) % V);
  KvCache cache = model.new_cache(max_rows + 8);
  std::vector<float> logits;
  model.forward(ids.data(), 8, cache, logits, false);
  for (int64_t r = 1;; r = std::min(r * 2, max_rows)) {
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      Timer t;
      model.forward_batch({Transformer::SeqChunk{ids.data() + 8, r, &cache, true, nullptr, true}}, logits);
      model.commit(cache, 8);  // a verify's cost includes a hybrid model's state rollback
      best = std::min(best, t.seconds() * 1e3);
    }
    // More rows never cost less: a dip below the previous entry is timing
    // noise, and left in it would make a draft that nobody accepts look free.
    if (!table_.empty()) best = std::max(best, table_.back().second);
    table_.push_back({r, best});
    if (r == max_rows) break;
  }
}

double KSelector::cost_ms(int64_t rows) const {
  if (table_.empty()) return static_cast<double>(rows);
  if (rows <= table_.front().first) return table_.front().second;
  for (size_t i = 1; i < table_.size(); ++i) {
    if (rows <= table_[i].first) {
      const auto [r0, t0] = table_[i - 1];
      const auto [r1, t1] = table_[i];
      return t0 + (t1 - t0) * static_cast<double>(rows - r0) / static_cast<double>(r1 - r0);
    }
  }
  const auto [r, t] = table_.back();
  return t * static_cast<double>(rows) / static_cast<double>(r);  // beyond the table: linear
}

int64_t KSelector::choose(int64_t n, const SpecStats& seen, double draft_ms) const {
  if (K_ == 0 || n == 0) return 0;
  // Conditional acceptance of position i given i-1 accepted; a prior of 0.6
  // until there are enough drafts to measure it. Its denominator is the
  // drafts that tested position i: with K chosen per step, a position past
  // a short step's K was never offered, and counting those drafts as
  // rejections (the old "accepted at i-1" denominator) sank the estimate
  // of every later position, shortened K further and ended in k = 0.
  std::vector<double> cond(K_, 0.6);
  if (seen.num_drafts >= 8) {
    double prev = static_cast<double>(seen.num_drafts);
    for (int64_t i = 0; i < K_ && i < static_cast<int64_t>(seen.accepted_per_pos.size()); ++i) {
      const double a = static_cast<double>(seen.accepted_per_pos[i]);
      if (i < static_cast<int64_t>(seen.tested_per_pos.size())) {
        const double t = static_cast<double>(seen.tested_per_pos[i]);
        if (t >= 8) cond[i] = std::clamp(a / t, 0.0, 1.0);
        else if (i > 0) cond[i] = cond[i - 1];  // too few tests: like the position before
      } else {  // a history without tested counts: every draft had length K
        cond[i] = prev > 0 ? std::clamp(a / prev, 0.0, 1.0) : 0.0;
      }
      prev = a;
    }
  }
  double best_rate = n / cost_ms(n);  // k = 0
  int64_t best_k = 0;
  double expect = 0, reach = 1;
  for (int64_t k = 1; k <= K_; ++k) {
    reach *= cond[k - 1];
    expect += reach;
    const double rate = n * (1.0 + expect) / (cost_ms(n * (1 + k)) + n * draft_ms);
    if (rate > best_rate * 1.02) {  // a draft must pay for itself with a margin
      best_rate = rate;
      best_k = k;
    }
  }
  return best_k;
}

DraftLengths KSelector::choose_sources(int64_t n, const SpecStats& seen_drafter, const SpecStats& seen_lookup,
                                       double drafter_ms) const {
  return {choose(n, seen_drafter, drafter_ms), choose(n, seen_lookup, 0.0)};
}

void AcceptanceWindow::add(const SpecStats& step) {
  if (step.num_drafts == 0) {
    if (++idle_ < kHalf) return;
    idle_ = 0;
  } else {
    idle_ = 0;
    newer_.merge(step);
    if (newer_.num_drafts < kHalf) return;
  }
  older_ = std::move(newer_), newer_ = SpecStats{};
}

SpecStats AcceptanceWindow::seen() const {
  SpecStats s = older_;
  s.merge(newer_);
  return s;
}

int64_t AdaptiveK::choose(const KSelector& ks, int64_t n, bool lookup_first, int64_t k_max) {
  if (lookup_first) {
    const DraftLengths l = ks.choose_sources(n, drafter_.seen(), lookup_.seen(), cost_.ms());
    lengths_ = {std::min(k_max, l.drafter), std::min(k_max, l.lookup)};
  } else {
    fix(std::min(k_max, ks.choose(n, drafter_.seen(), cost_.ms())));
  }
  return lengths_.max();
}

void AdaptiveK::stepped(const SpecStats& drafted, const SpecStats& looked_up, int64_t n_drafted, int64_t n_lookup,
                        double draft_seconds, bool decoded) {
  if (n_drafted > 0) cost_.drafted(draft_seconds * 1e3 / static_cast<double>(n_drafted));
  else if (decoded && (n_lookup == 0 || lengths_.drafter == 0)) cost_.idle();  // not when the lookup drafted for all
  drafter_.add(drafted);
  lookup_.add(looked_up);
}

void DraftCost::drafted(double ms) {
  ms_ = n_ < 2 ? ms : 0.8 * ms_ + 0.2 * ms;  // measurements 1 and 2 are taken as they are
  ++n_;
}

}  // namespace blockspec
