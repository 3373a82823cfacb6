#include "runtime/k_selector.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

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
  std::vector<int64_t> rows;
  for (int64_t r = 1;; r = std::min(r * 2, max_rows)) {
    rows.push_back(r);
    if (r == max_rows) break;
  }
  // A warm-up round, then rounds over every row count. The table is the
  // median 1-row time times, per row count, the median of each round's ratio
  // to that round's 1-row time: a shared machine's read bandwidth swings
  // (28-48 GB/s on the 2-core EPYC), and the best of each count's repeats
  // timed back to back (the table before) caught a fast spell for 1 row
  // more often than for 8, so 4 rows read 1.12x in one start and 1.58x in
  // the next (session 31) and a start decided K for the server's life.
  constexpr int kRounds = 5;
  std::vector<std::vector<double>> ms(kRounds + 1, std::vector<double>(rows.size()));
  for (int round = 0; round <= kRounds; ++round) {
    for (size_t i = 0; i < rows.size(); ++i) {
      Timer t;
      model.forward_batch({Transformer::SeqChunk{ids.data() + 8, rows[i], &cache, true, nullptr, true}}, logits);
      model.commit(cache, 8);  // a verify's cost includes a hybrid model's state rollback
      ms[round][i] = t.seconds() * 1e3;
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::vector<double> base;
  for (int round = 1; round <= kRounds; ++round) base.push_back(ms[round][0]);
  const double one = median(base);
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<double> ratio;
    for (int round = 1; round <= kRounds; ++round) ratio.push_back(ms[round][i] / ms[round][0]);
    // More rows never cost less: a dip below the previous entry is timing
    // noise, and left in it would make a draft that nobody accepts look free.
    const double t = one * median(ratio);
    table_.push_back({rows[i], table_.empty() ? t : std::max(t, table_.back().second)});
  }
}

std::string KSelector::describe() const {
  if (table_.empty()) return "none";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%lld row %.1f ms", static_cast<long long>(table_[0].first), table_[0].second);
  std::string s = buf;
  for (size_t i = 1; i < table_.size(); ++i) {
    std::snprintf(buf, sizeof buf, ", %lld %.2fx", static_cast<long long>(table_[i].first),
                  table_[i].second / table_[0].second);
    s += buf;
  }
  return s;
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

double KSelector::served_ms(int64_t rows, const LiveCost* live) const {
  return cost_ms(rows) * (live ? live->factor(rows) : 1.0);
}

std::vector<double> KSelector::conditional(const SpecStats& seen) const {
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
  return cond;
}

double KSelector::expected_accepted(const SpecStats& seen, int64_t k) const {
  const std::vector<double> cond = conditional(seen);
  double expect = 0, reach = 1;
  for (int64_t i = 0; i < std::min(k, K_); ++i) expect += (reach *= cond[i]);
  return expect;
}

int64_t KSelector::choose(int64_t n, const SpecStats& seen, double draft_ms, const LiveCost* live) const {
  if (K_ == 0 || n == 0) return 0;
  const std::vector<double> cond = conditional(seen);
  // The table's cost times the live factor, never below the cost of fewer
  // rows (factors of neighbouring counts can cross).
  double floor_ms = 0;
  auto cost = [&](int64_t rows) {
    floor_ms = std::max(floor_ms, served_ms(rows, live));
    return floor_ms;
  };
  double best_rate = n / cost(n);  // k = 0
  int64_t best_k = 0;
  double expect = 0, reach = 1;
  for (int64_t k = 1; k <= K_; ++k) {
    reach *= cond[k - 1];
    expect += reach;
    const double rate = n * (1.0 + expect) / (cost(n * (1 + k)) + n * draft_ms);
    if (rate > best_rate * 1.02) {  // a draft must pay for itself with a margin
      best_rate = rate;
      best_k = k;
    }
  }
  return best_k;
}

DraftLengths KSelector::choose_sources(int64_t n, const SpecStats& seen_drafter, const SpecStats& seen_lookup,
                                       double drafter_ms, const LiveCost* live) const {
  return {choose(n, seen_drafter, drafter_ms, live), choose(n, seen_lookup, 0.0, live)};
}

void LiveCost::observe(int64_t rows, double ratio) {
  if (rows < 1 || !(ratio > 0) || !std::isfinite(ratio)) return;
  if (static_cast<int64_t>(by_rows_.size()) <= rows) by_rows_.resize(rows + 1);
  // ratio = level x shape[rows], both unknown: the shape is measured against
  // the level before this forward (a count timed in a slow spell is not
  // dearer than one timed in a fast spell), the level against the count's
  // shape so far (each count moves it alike). Each clipped to [0.5, 2] x its
  // current value.
  if (forwards_ == 0) level_ = ratio;
  F& e = by_rows_[rows];
  const double shape_before = e.f;
  const bool known = e.n > 0;
  double rel = ratio / level_;
  if (known) rel = std::clamp(rel, 0.5 * e.f, 2.0 * e.f);
  ++e.n;
  e.last = ++forwards_;
  e.f = e.n == 1 ? rel : e.n <= kMin ? e.f + (rel - e.f) / static_cast<double>(e.n) : 0.9 * e.f + 0.1 * rel;
  if (known) level_ = 0.8 * level_ + 0.2 * std::clamp(ratio / shape_before, 0.5 * level_, 2.0 * level_);
}

double LiveCost::factor(int64_t rows) const {
  // The nearest row count measured kMin times (the fewer rows on a tie): the
  // table's shape stays where nothing has measured it.
  const double level = forwards_ > 0 ? level_ : 1.0;
  const int64_t R = static_cast<int64_t>(by_rows_.size());
  for (int64_t d = 0; d < std::max(R, rows + 1); ++d) {
    if (observed(rows - d) >= kMin) return level * by_rows_[rows - d].f;
    if (observed(rows + d) >= kMin) return level * by_rows_[rows + d].f;
  }
  return level;
}

bool LiveCost::stale(int64_t rows, int64_t window) const {
  return observed(rows) < kMin || forwards_ - by_rows_[rows].last > window;
}

int64_t LiveCost::observed(int64_t rows) const {
  return rows >= 0 && rows < static_cast<int64_t>(by_rows_.size()) ? by_rows_[rows].n : 0;
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
    const DraftLengths l = ks.choose_sources(n, drafter_.seen(), lookup_.seen(), cost_.ms(), &live_);
    lengths_ = {std::min(k_max, l.drafter), std::min(k_max, l.lookup)};
  } else {
    fix(std::min(k_max, ks.choose(n, drafter_.seen(), cost_.ms(), &live_)));
  }
  // Every kExplore-th choice may run another k instead, in turn no draft (a
  // plain step: the cost every draft length is weighed against) and the
  // drafter's k - 1 and k + 1, when LiveCost has not measured its row count
  // lately (kStale forwards): the counts around the choice stay measured, not
  // only the choice. Without it a start-up table that overrated a verify kept
  // k where it was, its alternatives never timed; exploring on a fixed beat
  // (one choice in 24, the first version) spent 4% of the steps off the
  // choice where the steps' own k already varied. A draft length whose
  // tokens would not pay even with free rows (the drafter's measured
  // acceptance says so) is not explored.
  if (k_max > 0 && ++choices_ % kExplore == 0) {
    const int64_t k = lengths_.drafter;
    for (int tries = 0; tries < 3; ++tries) {
      const int64_t turn = explored_++ % 3;
      const int64_t c = turn == 0 ? 0 : turn == 1 ? k - 1 : k + 1;
      if (c < 0 || c > k_max || (c == 0 && lengths_.max() == 0) || (c != 0 && c == k)) continue;
      if (c > 0 && ks.expected_accepted(drafter_.seen(), c) <= 0.02) continue;
      if (!live_.stale(n * (1 + c), kStale)) continue;
      if (c == 0) fix(0);
      else if (lookup_first) lengths_.drafter = c;
      else fix(c);
      break;
    }
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

void AdaptiveK::forwarded(const KSelector& ks, int64_t rows, double seconds) {
  if (rows > 0) live_.observe(rows, seconds * 1e3 / ks.cost_ms(rows));
}

void DraftCost::drafted(double ms) {
  ms_ = n_ < 2 ? ms : 0.8 * ms_ + 0.2 * ms;  // measurements 1 and 2 are taken as they are
  ++n_;
  idle_ = 0;
}

double DraftCost::ms() const {
  return idle_ <= kGrace ? ms_ : ms_ * std::pow(0.9, static_cast<double>(idle_ - kGrace));
}

}  // namespace blockspec
