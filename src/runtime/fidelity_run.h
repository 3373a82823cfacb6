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
// ids[start + t]. on_window(i, stats) runs after window i (progress lines,
// saving the state). A resumed run passes the stats after the first
// `first_window` windows (one per candidate) and continues from there.
//   ids: [n_ids]; returns one FidelityStats per candidate.
std::vector<FidelityStats> score_fidelity(
    Transformer& ref, const std::vector<FidelityCandidate>& cands, const std::vector<int32_t>& ids,
    const std::vector<TokenWindow>& windows,
    const std::function<void(size_t, const std::vector<FidelityStats>&)>& on_window = {}, size_t first_window = 0,
    std::vector<FidelityStats> resumed = {});

// Greedy continuations of up to n_new tokens for every prompt, every prompt in one batched forward per step
// (prefill chunks of at most `batch_tokens` rows); a sequence stops after one of the model's EOS tokens.
//   prompts: token ids each; returns the generated ids of each prompt.
std::vector<std::vector<int32_t>> greedy_continuations(Transformer& m, KvDType kv,
                                                       const std::vector<std::vector<int32_t>>& prompts, int64_t n_new,
                                                       int64_t batch_tokens = 2048);

// How a candidate's greedy continuations agree with the reference's: prompts whose continuation is identical,
// and the mean length of the common prefix.
struct GreedyAgreement {
  int64_t n_prompts = 0, identical = 0;
  double mean_common_prefix = 0, mean_length = 0;  // tokens
};
GreedyAgreement greedy_agreement(const std::vector<std::vector<int32_t>>& ref,
                                 const std::vector<std::vector<int32_t>>& cand);

}  // namespace blockspec
