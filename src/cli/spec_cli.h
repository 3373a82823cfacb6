// What generate, bench (and later serve) share about speculative decoding:
// the --speculative-config flag, opening its proposer, and printing the
// acceptance metrics (text on stderr, and the JSON `spec` object).
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/args.h"
#include "runtime/k_selector.h"
#include "runtime/speculative.h"

namespace blockspec {

FlagSpec spec_flag();

struct SpecSetup {
  SpecConfig cfg;
  std::unique_ptr<Proposer> proposer;
  std::unique_ptr<KSelector> ksel;  // when cfg.adaptive_k: draft length from measured verify cost
};
// nullopt when the flag is absent. capacity: longest sequence.
std::optional<SpecSetup> open_spec(const Args& a, Transformer& target, int64_t capacity);

// {method, num_speculative_tokens, num_drafts, num_draft_tokens, num_accepted_tokens, accepted_per_pos,
//  acceptance_rate_per_pos, acceptance_length_hist, mean_acceptance_length}
nlohmann::json spec_json(const SpecConfig& cfg, const SpecStats& s);
std::string spec_text(const SpecConfig& cfg, const SpecStats& s);

}  // namespace blockspec
