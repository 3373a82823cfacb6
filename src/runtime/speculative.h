// Speculative decoding: the proposers a SpecConfig names, and the
// draft -> verify -> accept loop for one sequence (dflash.md §3.1). The loop is lossless: greedy output equals
// plain greedy decoding token for token, and at T > 0 rejection sampling
// (runtime/spec_verify.h) emits exactly the distribution of plain sampling.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "model/transformer.h"
#include "model/dflash.h"
#include "runtime/generate.h"
#include "runtime/spec_config.h"
#include "runtime/spec_types.h"

namespace blockspec {

// Completes cfg against its drafter (nullptr for ngram) and the target, and
// checks they agree: K = block_size - 1 and adaptive_k when K was not given,
// K <= block_size - 1, the drafter's context KV dtype (the target's unless
// given), and the target's tap layers set to the drafter's
// target_layer_ids. No file is read.
void configure_spec(SpecConfig& cfg, const DraftModel* drafter, Transformer& target);

// One proposer for one sequence; drafters' weights are shared among the
// proposers of many sequences (the server), each holds its own context
// cache. capacity: longest sequence. cfg must have been configured.
// whole_context: a drafter keeps every context position of its sliding
// layers too (not a ring of the window), so any page of it can be saved
// for prefix caching (Proposer::save_context).
std::unique_ptr<Proposer> new_proposer(const SpecConfig& cfg, const std::shared_ptr<DraftModel>& drafter,
                                       int64_t capacity, bool whole_context = false);

// configure_spec + new_proposer, for one sequence (generate, bench, tests).
std::unique_ptr<Proposer> make_proposer(SpecConfig& cfg, const std::shared_ptr<DraftModel>& drafter,
                                        Transformer& target, int64_t capacity);

struct SpecResult {
  GenerateResult gen;      // decode_steps = tokens decoded after the first
  SpecStats stats;
  int64_t target_passes = 0;  // verification forwards
};

// Generates like generate(), proposing up to k tokens per step.
// With ksel, each step drafts ksel->choose(1, ...) <= k tokens.
class KSelector;
SpecResult generate_speculative(Transformer& model, Proposer& proposer, int64_t k,
                                const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                                const std::function<void(int32_t)>& on_token = {}, const KSelector* ksel = nullptr);

// One sequence through the serving engine's step (Scheduler plan +
// ModelRunner) over a KV pool that holds exactly its worst case: what
// generate_speculative runs, and generate() with no proposer (plain
// decoding, k = 0), so every path decodes through the same step.
SpecResult run_sequence(Transformer& model, Proposer* proposer, int64_t k, const std::vector<int32_t>& prompt,
                        const GenerateOptions& opts, const std::function<void(int32_t)>& on_token,
                        const KSelector* ksel);

}  // namespace blockspec
