// The typed speculative-decoding configuration every path runs from
// (generate, bench, serve). cli/spec_config.cc parses vLLM's
// `--speculative-config` JSON into it and reads the drafter's config.json
// once; runtime reads no JSON and no files.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace blockspec {

struct DraftConfig;    // formats/dflash_config.h
enum class KvDType;    // kernels/kv_kernels.h (an int enum: complete here, its values invisible)

enum class SpecMethod { kNgram, kDFlash, kDFlash2 };

// n-gram lookup without num_speculative_tokens drafts adaptively up to this
// many tokens (vLLM requires the key for ngram; blockspec adapts instead:
// BENCHMARKS.md shows a fixed K of 4 costing 28% at concurrency 8 where the
// adaptive choice gains).
inline constexpr int64_t kNgramMaxDraft = 4;
// prompt_lookup_min of n-gram lookup in front of a drafter when the config
// gives only prompt_lookup_max: a one-token match is a weaker guess than the
// drafter's (measured: BENCHMARKS.md, "n-gram lookup in front of the drafter").
inline constexpr int64_t kLookupFirstMin = 2;
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
  int64_t prompt_lookup_min = 1, prompt_lookup_max = 5;  // ngram, and dflash / dflash2 with lookup_first
  // dflash / dflash2: each step, n-gram prompt lookup drafts first (its
  // tokens, one-hot q) and the drafter only for the sequences it finds no
  // match for, whose context taps wait until then (vLLM has no such key; the
  // config turns it on by giving prompt_lookup_min / _max with a drafter).
  // The lookup is free and right where text repeats (code, quoted numbers),
  // where a small drafter is weakest.
  bool lookup_first = false;
  // draft_sample_method "greedy": drafters draft their argmax even at T > 0
  // (default "probabilistic": sampled drafts with their distribution q).
  bool greedy_draft = false;
  // vLLM's num_speculative_tokens_per_batch_size: inclusive ranges of the
  // number of decoding sequences and the draft length for them, ranges
  // ascending and disjoint. See k_for_batch.
  struct BatchK {
    int64_t lo, hi, k;
  };
  std::vector<BatchK> k_by_batch;
  // The drafter's context K/V dtype (DFlash, DFlash2); nullopt: the
  // target's KV dtype (vLLM: the draft inherits --kv-cache-dtype).
  std::optional<KvDType> draft_kv_dtype;
  // vLLM's draft max_model_len: a sequence drafts only while its draft block
  // stays below this position (0: no limit beyond the target's).
  int64_t draft_max_model_len = 0;
  bool uses_drafter() const { return method != SpecMethod::kNgram; }
  const char* method_name() const { return spec_method_name(method); }
};

// The draft length for a step with n_decoding sequences decoding, under
// k_by_batch (vLLM's dynamic speculative decoding, vLLM#32374): the k of the
// range holding n; a count between or after the ranges keeps the k of the
// range before it; before the first range, num_speculative_tokens. Never
// above num_speculative_tokens. Without k_by_batch: num_speculative_tokens.
int64_t k_for_batch(const SpecConfig& c, int64_t n_decoding);

}  // namespace blockspec
