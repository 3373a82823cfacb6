// Choosing the number of draft tokens per step from measured cost.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/transformer.h"
#include "runtime/spec_types.h"

namespace blockspec {

// Picks the draft length per step from the target's MEASURED cost of a
// forward over r rows (timed at start-up, corrected by the served forwards:
// LiveCost) and the acceptance observed so far: the k in [0, K] that maximises expected tokens per second for n
// decoding sequences, (n * (1 + E[accepted | k])) / (cost(n * (1 + k)) +
// draft cost). On a bandwidth-bound CPU a few rows cost about one row, so k
// stays high at batch 1 and falls as the batch grows.
class LiveCost;

class KSelector {
 public:
  KSelector() = default;
  KSelector(Transformer& model, int64_t K, int64_t max_seqs);  // measures the table
  // From a given cost table {rows, ms} with rows increasing (tests, or a
  // table measured elsewhere).
  KSelector(std::vector<std::pair<int64_t, double>> table, int64_t K) : K_(K), table_(std::move(table)) {}
  // live: the served forwards' correction of the table (none: the table as timed).
  int64_t choose(int64_t n_decoding, const SpecStats& seen, double draft_ms_per_seq,
                 const LiveCost* live = nullptr) const;
  // n-gram lookup in front of a drafter: each source's k by choose() from its
  // own drafts, the lookup's at no draft cost. A source that does not pay
  // alone drafts 0.
  DraftLengths choose_sources(int64_t n_decoding, const SpecStats& seen_drafter, const SpecStats& seen_lookup,
                              double drafter_ms_per_seq, const LiveCost* live = nullptr) const;
  int64_t max_k() const { return K_; }
  // Expected accepted tokens of a k-token draft on this acceptance history.
  double expected_accepted(const SpecStats& seen, int64_t k) const;
  double cost_ms(int64_t rows) const;  // the table's, interpolated
  // The cost choose() weighs: the table's times the served correction (none: the table's).
  double served_ms(int64_t rows, const LiveCost* live) const;
  // "1 row 33.2 ms, 2 1.10x, 4 1.24x, ..." for a start-up log line.
  std::string describe() const;

 private:
  std::vector<double> conditional(const SpecStats& seen) const;  // [K] acceptance of position i given i - 1
  int64_t K_ = 0;
  std::vector<std::pair<int64_t, double>> table_;  // rows -> ms
};

// The acceptance KSelector::choose reads: the last kHalf to 2 * kHalf drafts
// (two halves; the older is dropped when the newer fills), added step by
// step. A server's prompts change (code, then chat), and acceptance with
// them: a history summed since start-up kept drafting on chat at the
// acceptance code had earned (BENCHMARKS.md, "n-gram lookup in front of the
// drafter"), and one summed at request ends learned nothing inside a request.
// A source whose k fell to 0 makes no drafts to refresh its window, so every
// kHalf steps without a draft drop the older half: after 2 * kHalf idle steps
// the prior decides again, and a few drafts measure the new prompts.
class AcceptanceWindow {
 public:
  static constexpr int64_t kHalf = 64;
  void add(const SpecStats& step);  // one step's drafts (none: an idle step)
  SpecStats seen() const;

 private:
  SpecStats older_, newer_;
  int64_t idle_ = 0;  // steps without a draft since the last draft or drop
};

// The drafter's cost per drafting sequence for KSelector::choose, from the
// measured draft time of the steps that drafted: an EMA (weight 0.2 for each
// new step). The first measurement carries cold caches, so the second
// replaces it instead of blending in (a drafter's context of more than 16
// waiting tokens, a prompt's, runs apart and is not counted: ModelRunner). After
// kGrace steps in a row that drafted nothing, each further one decays the
// estimate by 0.9: one slow draft that turned drafting off cannot keep it
// off for good (nothing would ever measure it again); drafting resumes once
// the estimate says it pays, and the next measurement decides. The decay is
// of the estimate read, not of the EMA, and only after the grace: decaying
// the EMA itself on every idle step (before session 33) settles at a third to half the
// drafts' cost when k alternates between 0 (three steps) and 1, as it does on
// chat prompts at 0.2 acceptance, and kept drafting on at a loss. (A longer
// grace, 32, spaced the retries of a drafter that costs as much as a step so
// far apart that its acceptance window forgot the drafts between them.)
class DraftCost {
 public:
  static constexpr int64_t kGrace = 16;
  void drafted(double ms_per_seq);
  void idle() { ++idle_; }
  double ms() const;

 private:
  double ms_ = 0;
  int64_t n_ = 0, idle_ = 0;  // drafts measured; steps without a draft since the last
};

// The target's cost as served, per row count, as a factor on the start-up
// table: the forwards of decode-only steps (every row a decoding sequence's
// token or draft), each measured time over the table's. One start-up table,
// timed in a few seconds, decided K for a server's whole life before: a noisy
// start left the drafter at K = 1 (BENCHMARKS.md, session 31). The factor is
// a level times a shape: the level follows every forward against its count's
// shape (an EMA of weight 0.2: the host's read bandwidth swings within
// seconds), the shape of a row count is its forwards' time against the
// level of their moment (the mean of the first kMin, then an EMA of weight
// 0.1); each update clipped to [0.5, 2] x the current value, so one
// preempted step moves them little. A count not yet measured takes its
// nearest measured neighbour's shape. Without the level a count
// timed in a slow spell looked dear for good (2 rows at 1.34x a plain step
// where 3 rows read 1.04x, and a server that stopped drafting). AdaptiveK
// explores the counts around its choice (a plain step among them) that the
// served steps have not measured lately, so the ratio of a verify to a
// plain step is measured, not assumed.
class LiveCost {
 public:
  static constexpr int64_t kMin = 4;
  void observe(int64_t rows, double ratio);  // one forward: measured ms / table ms
  double factor(int64_t rows) const;         // 1 until kMin forwards of `rows` rows
  int64_t observed(int64_t rows) const;
  // Fewer than kMin forwards of `rows` rows, or none among the last `window` forwards.
  bool stale(int64_t rows, int64_t window) const;

 private:
  struct F {
    double f = 1;
    int64_t n = 0, last = 0;  // forwards observed, the forward count at the latest
  };
  std::vector<F> by_rows_;  // [rows]: the shape, each count's time against the level
  int64_t forwards_ = 0;
  double level_ = 1;  // every forward's time over the table's and its count's shape, an EMA of weight 0.2
};

// The adaptive draft length of one engine (or one generate_speculative run),
// step by step: the lengths chosen for the step being planned, each source's
// recent acceptance and the drafter's measured cost.
class AdaptiveK {
 public:
  // Each source's k for n decoding sequences, capped at k_max (lookup_first:
  // the lookup's and the drafter's apart; otherwise one k for both).
  int64_t choose(const KSelector& ks, int64_t n, bool lookup_first, int64_t k_max);
  void fix(int64_t k) { lengths_ = {k, k}; }  // a given K this step
  // After a step: its verified drafts by source, the sequences that ran the
  // drafter and that the lookup drafted for, the proposers' time, and
  // whether any sequence decoded.
  void stepped(const SpecStats& drafted, const SpecStats& looked_up, int64_t n_drafted, int64_t n_lookup,
               double draft_seconds, bool decoded);
  // A decode-only step's target forward over `rows` rows took `seconds`.
  void forwarded(const KSelector& ks, int64_t rows, double seconds);
  const DraftLengths& lengths() const { return lengths_; }
  const LiveCost& live_cost() const { return live_; }
  double draft_ms() const { return cost_.ms(); }  // the drafter's measured cost per drafting sequence (DraftCost)

 private:
  static constexpr int64_t kExplore = 16, kStale = 256;
  DraftLengths lengths_;
  LiveCost live_;
  int64_t choices_ = 0, explored_ = 0;
  AcceptanceWindow drafter_, lookup_;
  DraftCost cost_;
};

}  // namespace blockspec
