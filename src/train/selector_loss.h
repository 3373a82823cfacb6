// DFlash2's candidate-selector loss (training.md §6, dflash.md §5.1b; the
// speculators PR #1006 reconstruction, the official objective being
// unpublished): for every slot, the K candidates are the top-K of its unary
// (draft) logits, scored
//   s_i = z[c_i] + sum_r pred[prev, r] * g[r] * succ[c_i, r]
// with prev the slot's predecessor (the data token before it: teacher
// forcing) and g = hidden_projection(h). Loss: alpha * sum w * CE(s, index of
// the label) / denom; a label outside the top-K replaces the K-th candidate
// so every weighted slot is supervised. Unary scores are not detached: the
// gradient reaches the draft logits too.
#pragma once
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"

namespace blockspec {

struct SelectorShape {
  int64_t n = 0, V = 0, r = 0, K = 0;  // rows, vocabulary, rank, candidates
};

struct SelectorResult {
  double loss = 0;
  std::vector<int32_t> cand;     // [n, K] candidate ids of each row (label injected on weighted rows)
  std::vector<float> dscore;     // [n, K] d loss / d z[cand] (training; add into dlogits)
  std::vector<uint8_t> correct;  // [n] what serving drafts with prev = the data token: the label is in
                                 // the real top-K and the selector's argmax (lowest index on ties)
};

// logits [n, V], g [n, r], prev / labels [n], weight [n]; pred, succ [V, r].
// dg [n, r] written, dpred / dsucc [V, r] added to; dg nullptr: forward only.
SelectorResult selector_loss(const float* logits, const float* g, const int32_t* prev, const int32_t* labels,
                             const float* weight, double denom, double alpha, const float* pred, const float* succ,
                             const SelectorShape& s, float* dg, float* dpred, float* dsucc, ThreadPool& pool);

}  // namespace blockspec
