// See fidelity_run.h.
#include "runtime/fidelity_run.h"

#include <algorithm>

namespace blockspec {

std::vector<TokenWindow> fidelity_windows(int64_t n_ids, int64_t ctx, int64_t max_scored) {
  std::vector<TokenWindow> w;
  int64_t scored = 0;
  for (int64_t start = 0; start + 1 < n_ids && scored < max_scored; start += ctx) {
    const int64_t n = std::min({ctx, n_ids - start, max_scored - scored + 1});
    w.push_back({start, n});
    scored += n - 1;
  }
  return w;
}

std::vector<FidelityStats> score_fidelity(
    Transformer& ref, const std::vector<FidelityCandidate>& cands, const std::vector<int32_t>& ids,
    const std::vector<TokenWindow>& windows,
    const std::function<void(size_t, const std::vector<FidelityStats>&)>& on_window) {
  const int64_t vocab = ref.config().vocab_size;
  std::vector<FidelityStats> stats(cands.size());
  std::vector<float> logits_a, logits_b;  // [n, vocab] each
  for (size_t wi = 0; wi < windows.size(); ++wi) {
    const TokenWindow& w = windows[wi];
    KvCache cache_b = ref.new_cache(w.n);
    ref.prefill(ids.data() + w.start, w.n, cache_b, logits_b, /*all_logits=*/true);
    for (size_t c = 0; c < cands.size(); ++c) {
      KvCache cache_a = cands[c].model->new_cache(w.n, cands[c].kv);
      cands[c].model->prefill(ids.data() + w.start, w.n, cache_a, logits_a, /*all_logits=*/true);
      for (int64_t t = 0; t + 1 < w.n; ++t)
        stats[c].add(logits_a.data() + t * vocab, logits_b.data() + t * vocab, vocab, ids[w.start + t + 1]);
    }
    if (on_window) on_window(wi, stats);
  }
  return stats;
}

}  // namespace blockspec
