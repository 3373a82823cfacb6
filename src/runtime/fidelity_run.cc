// See fidelity_run.h.
#include "runtime/fidelity_run.h"

#include <algorithm>

#include "base/error.h"

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
    const std::function<void(size_t, const std::vector<FidelityStats>&)>& on_window, size_t first_window,
    std::vector<FidelityStats> resumed) {
  const int64_t vocab = ref.config().vocab_size;
  std::vector<FidelityStats> stats = first_window > 0 ? std::move(resumed) : std::vector<FidelityStats>(cands.size());
  if (stats.size() != cands.size()) fail("score_fidelity: ", stats.size(), " resumed stats for ", cands.size(), " candidates");
  std::vector<float> logits_a, logits_b;  // [n, vocab] each
  for (size_t wi = first_window; wi < windows.size(); ++wi) {
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

std::vector<std::vector<int32_t>> greedy_continuations(Transformer& m, KvDType kv,
                                                       const std::vector<std::vector<int32_t>>& prompts, int64_t n_new,
                                                       int64_t batch_tokens) {
  const int64_t V = m.config().vocab_size, n = static_cast<int64_t>(prompts.size());
  const auto& eos = m.config().eos_token_ids;
  std::vector<KvCache> caches;
  caches.reserve(n);
  for (const auto& p : prompts) caches.push_back(m.new_cache(static_cast<int64_t>(p.size()) + n_new, kv));
  std::vector<std::vector<int32_t>> out(n);
  std::vector<int32_t> next(n, -1);
  std::vector<float> logits;
  auto argmax = [&](const float* l) {
    return static_cast<int32_t>(std::max_element(l, l + V) - l);
  };
  // Prefill: groups of prompts up to batch_tokens rows, the last logits of each.
  for (int64_t i = 0; i < n;) {
    std::vector<Transformer::SeqChunk> chunks;
    int64_t rows = 0;
    const int64_t first = i;
    while (i < n && (chunks.empty() || rows + static_cast<int64_t>(prompts[i].size()) <= batch_tokens)) {
      chunks.push_back({prompts[i].data(), static_cast<int64_t>(prompts[i].size()), &caches[i], false});
      rows += static_cast<int64_t>(prompts[i].size());
      ++i;
    }
    m.forward_batch(chunks, logits);
    for (int64_t j = first; j < i; ++j) next[j] = argmax(logits.data() + (j - first) * V);
  }
  std::vector<bool> done(n, n_new <= 0);
  for (int64_t step = 0; step < n_new; ++step) {
    std::vector<Transformer::SeqChunk> chunks;
    std::vector<int64_t> who;
    for (int64_t j = 0; j < n; ++j) {
      if (done[j]) continue;
      out[j].push_back(next[j]);
      if (std::find(eos.begin(), eos.end(), next[j]) != eos.end() || static_cast<int64_t>(out[j].size()) >= n_new) {
        done[j] = true;
        continue;
      }
      chunks.push_back({&out[j].back(), 1, &caches[j], false});
      who.push_back(j);
    }
    if (chunks.empty()) break;
    m.forward_batch(chunks, logits);
    for (size_t c = 0; c < who.size(); ++c) next[who[c]] = argmax(logits.data() + c * V);
  }
  return out;
}

GreedyAgreement greedy_agreement(const std::vector<std::vector<int32_t>>& ref,
                                 const std::vector<std::vector<int32_t>>& cand) {
  GreedyAgreement g;
  g.n_prompts = static_cast<int64_t>(std::min(ref.size(), cand.size()));
  for (int64_t i = 0; i < g.n_prompts; ++i) {
    const auto& a = ref[i];
    const auto& b = cand[i];
    size_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
    g.identical += a == b ? 1 : 0;
    g.mean_common_prefix += static_cast<double>(k);
    g.mean_length += static_cast<double>(a.size());
  }
  if (g.n_prompts > 0) g.mean_common_prefix /= static_cast<double>(g.n_prompts), g.mean_length /= static_cast<double>(g.n_prompts);
  return g;
}

}  // namespace blockspec
