// Speculative decoding: `--speculative-config` as vLLM spells it, the
// proposers it names, and the draft -> verify -> accept loop for one
// sequence (dflash.md §3.1). The loop is lossless: greedy output equals
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
#include "runtime/spec_types.h"

namespace blockspec {

struct SpecConfig {
  std::string method;  // "dflash", "dflash2" or "ngram"
  std::string model;   // drafter directory (dflash, dflash2)
  int64_t num_speculative_tokens = 0;  // K; 0 = the method's default
  // No K given: K = block_size - 1 is only the ceiling, and the draft length
  // of each step is chosen from the measured verify cost (k_selector.h).
  bool adaptive_k = false;
  int64_t prompt_lookup_max = 0, prompt_lookup_min = 0;  // ngram (vLLM defaults: max = K... see .cc)
  std::string draft_sample_method = "probabilistic";     // or "greedy"
};

// Parses the JSON object of --speculative-config. The method may be omitted
// when "model" is a drafter: it is then read from the drafter's
// architectures (DFlash2DraftModel -> dflash2). "dflash" naming a DFlash2
// drafter runs it as dflash2 (vLLM does the same). Errors name the key.
SpecConfig parse_spec_config(const std::string& json_text);

// The proposer the config names, loaded against `target` (which it may
// configure: DFlash sets the target's tap layers). capacity: longest
// sequence. Fills in defaults (K = block_size - 1 for drafters).
std::unique_ptr<Proposer> make_proposer(SpecConfig& cfg, Transformer& target, int64_t capacity,
                                        std::optional<WeightFormat> draft_weights = std::nullopt);

// The pieces of make_proposer, for a server that shares one drafter among
// many sequences: load the drafter once (sets cfg defaults and the target's
// tap layers; nullptr for draftless methods), then one proposer per sequence.
std::shared_ptr<DraftModel> load_drafter(SpecConfig& cfg, Transformer& target,
                                         std::optional<WeightFormat> draft_weights = std::nullopt);
std::unique_ptr<Proposer> new_proposer(const SpecConfig& cfg, const std::shared_ptr<DraftModel>& drafter,
                                       int64_t capacity);

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

}  // namespace blockspec
