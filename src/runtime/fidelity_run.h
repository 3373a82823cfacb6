// Runs the fidelity comparison of `eval` (and of quantize's summary): the
// reference and each candidate model prefill the same token windows, and
// every scored position feeds FidelityStats (runtime/fidelity.h).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "model/transformer.h"
#include "runtime/fidelity.h"

namespace blockspec {

struct TokenWindow {
  int64_t start, n;  // tokens [start, start + n); scores n - 1 positions
};

// Non-overlapping windows of ctx tokens over n_ids tokens; the last one is cut
// so that at most max_scored positions are scored in all.
std::vector<TokenWindow> fidelity_windows(int64_t n_ids, int64_t ctx, int64_t max_scored);

struct FidelityCandidate {
  Transformer* model;
  KvDType kv;  // the cache dtype this candidate runs with
};

// Each window is a fresh sequence for every model; position t > 0 is scored on
// ids[start + t]. on_window(i, stats) runs after window i (progress lines).
//   ids: [n_ids]; returns one FidelityStats per candidate.
std::vector<FidelityStats> score_fidelity(
    Transformer& ref, const std::vector<FidelityCandidate>& cands, const std::vector<int32_t>& ids,
    const std::vector<TokenWindow>& windows,
    const std::function<void(size_t, const std::vector<FidelityStats>&)>& on_window = {});

}  // namespace blockspec
