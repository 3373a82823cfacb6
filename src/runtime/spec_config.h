// The typed speculative-decoding configuration every path runs from
// (generate, bench, serve). cli/spec_config.cc parses vLLM's
// `--speculative-config` JSON into it and reads the drafter's config.json
// once; runtime reads no JSON and no files.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace blockspec {

struct DraftConfig;  // formats/dflash_config.h

enum class SpecMethod { kNgram, kDFlash, kDFlash2 };

// n-gram lookup without num_speculative_tokens drafts adaptively up to this
// many tokens (vLLM requires the key for ngram; blockspec adapts instead:
// BENCHMARKS.md shows a fixed K of 4 costing 28% at concurrency 8 where the
// adaptive choice gains).
inline constexpr int64_t kNgramMaxDraft = 4;
const char* spec_method_name(SpecMethod m);  // "ngram" / "dflash" / "dflash2"

struct SpecConfig {
  SpecMethod method = SpecMethod::kNgram;
  std::string model;                 // drafter directory (dflash, dflash2); names it in messages
  std::shared_ptr<const DraftConfig> draft;  // its config.json, read once when the config was parsed
  // K. Given: the draft length of every step. 0 when the config omits it:
  // configure_spec() sets K = block_size - 1 and adaptive_k, and each step's
  // draft length is then chosen from the measured verify cost (k_selector.h).
  int64_t num_speculative_tokens = 0;
  bool adaptive_k = false;
  int64_t prompt_lookup_min = 1, prompt_lookup_max = 5;  // ngram only
  // draft_sample_method "greedy": drafters draft their argmax even at T > 0
  // (default "probabilistic": sampled drafts with their distribution q).
  bool greedy_draft = false;
  bool uses_drafter() const { return method != SpecMethod::kNgram; }
  const char* method_name() const { return spec_method_name(method); }
};

}  // namespace blockspec
