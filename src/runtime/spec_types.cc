#include "runtime/spec_types.h"

#include <algorithm>

#include "base/error.h"

namespace blockspec {

namespace {
// a += b elementwise, growing a to b's size.
void add_grow(std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  if (a.size() < b.size()) a.resize(b.size(), 0);
  for (size_t i = 0; i < b.size(); ++i) a[i] += b[i];
}
}  // namespace

void SpecStats::record(int64_t n_draft, int64_t accepted, bool lookup) {
  if (n_draft < 0 || accepted < 0 || accepted > n_draft)
    fail("SpecStats::record: accepted must be in [0, n_draft], found accepted ", accepted, " of n_draft ", n_draft);
  if (n_draft == 0) return;  // a pass without draft tokens is not a draft
  ++num_drafts;
  num_draft_tokens += n_draft;
  num_accepted_tokens += accepted;
  const size_t k = static_cast<size_t>(n_draft);
  if (accepted_per_pos.size() < k) accepted_per_pos.resize(k, 0);
  if (tested_per_pos.size() < k) tested_per_pos.resize(k, 0);
  for (int64_t i = 0; i <= accepted && i < n_draft; ++i) ++tested_per_pos[i];
  if (acceptance_hist.size() < k + 1) acceptance_hist.resize(k + 1, 0);
  for (int64_t i = 0; i < accepted; ++i) ++accepted_per_pos[i];
  ++acceptance_hist[accepted];
  if (lookup) ++num_lookup_drafts, num_lookup_accepted_tokens += accepted;
}

void SpecStats::merge(const SpecStats& o) {
  num_drafts += o.num_drafts;
  num_draft_tokens += o.num_draft_tokens;
  num_accepted_tokens += o.num_accepted_tokens;
  add_grow(accepted_per_pos, o.accepted_per_pos);
  add_grow(tested_per_pos, o.tested_per_pos);
  add_grow(acceptance_hist, o.acceptance_hist);
  num_lookup_drafts += o.num_lookup_drafts;
  num_lookup_accepted_tokens += o.num_lookup_accepted_tokens;
}

}  // namespace blockspec

namespace blockspec {

void Proposer::load_context(int64_t, const uint8_t*) {
  fail("speculative method ", method(), " keeps no context to load");
}

void propose_all(const std::vector<ProposeCall>& calls) {
  std::vector<bool> done(calls.size(), false);
  std::vector<ProposeCall> group;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (done[i]) continue;
    const void* key = calls[i].proposer->batch_key();
    group.assign(1, calls[i]);
    if (key != nullptr)
      for (size_t j = i + 1; j < calls.size(); ++j)
        if (!done[j] && calls[j].proposer->batch_key() == key) group.push_back(calls[j]), done[j] = true;
    calls[i].proposer->propose_together(group);
  }
}

}  // namespace blockspec
