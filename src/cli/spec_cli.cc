#include "cli/spec_cli.h"

#include <cstdio>

#include "base/error.h"
#include "cli/spec_config.h"

namespace blockspec {

FlagSpec spec_flag() {
  return {"--speculative-config", "", true,
          "speculative decoding, JSON as vLLM spells it: {\"method\":\"dflash\",\"model\":DIR,"
          "\"num_speculative_tokens\":K} (dflash2 recognised from the drafter), or {\"method\":\"ngram\","
          "\"prompt_lookup_max\":N}; prompt_lookup_max with a drafter puts n-gram lookup first (the drafter "
          "drafts where it finds no match); without num_speculative_tokens the draft length adapts to the "
          "measured verify cost, with it every step drafts K"};
}

std::optional<SpecSetup> open_spec(const Args& a, Transformer& target, int64_t capacity) {
  if (!a.has("--speculative-config")) return std::nullopt;
  SpecSetup s;
  std::vector<std::string> notes;
  s.cfg = parse_spec_config(a.str("--speculative-config"), &notes);
  for (const std::string& n : notes) std::fprintf(stderr, "--speculative-config: %s\n", n.c_str());
  s.proposer = make_proposer(s.cfg, load_spec_drafter(s.cfg, target), target, capacity);
  if (s.cfg.adaptive_k) s.ksel = std::make_unique<KSelector>(target, s.cfg.num_speculative_tokens, 1);
  return s;
}

nlohmann::json spec_json(const SpecConfig& cfg, const SpecStats& s) {
  nlohmann::json j;
  j["method"] = cfg.method_name();
  j["num_speculative_tokens"] = cfg.num_speculative_tokens;
  j["num_drafts"] = s.num_drafts;
  j["num_draft_tokens"] = s.num_draft_tokens;
  j["num_accepted_tokens"] = s.num_accepted_tokens;
  j["accepted_per_pos"] = s.accepted_per_pos;
  std::vector<double> rate;
  for (int64_t a : s.accepted_per_pos) rate.push_back(s.num_drafts ? static_cast<double>(a) / s.num_drafts : 0.0);
  j["acceptance_rate_per_pos"] = rate;
  j["acceptance_length_hist"] = s.acceptance_hist;  // [a] drafts that accepted exactly a tokens
  j["mean_acceptance_length"] = s.mean_acceptance_length();
  if (cfg.lookup_first) {
    j["num_lookup_drafts"] = s.num_lookup_drafts;
    j["num_lookup_accepted_tokens"] = s.num_lookup_accepted_tokens;
  }
  return j;
}

std::string spec_text(const SpecConfig& cfg, const SpecStats& s) {
  std::string out = "[spec " + std::string(cfg.method_name()) + " K=" + std::to_string(cfg.num_speculative_tokens) +
                    ": drafts " + std::to_string(s.num_drafts) + ", draft tokens " +
                    std::to_string(s.num_draft_tokens) + ", accepted " + std::to_string(s.num_accepted_tokens);
  char buf[64];
  std::snprintf(buf, sizeof buf, ", mean acceptance length %.3f", s.mean_acceptance_length());
  out += buf;
  out += "\n  accepted per position:";
  for (size_t i = 0; i < s.accepted_per_pos.size(); ++i) {
    std::snprintf(buf, sizeof buf, " %zu:%.3f", i + 1,
                  s.num_drafts ? static_cast<double>(s.accepted_per_pos[i]) / s.num_drafts : 0.0);
    out += buf;
  }
  if (cfg.lookup_first)
    out += "\n  n-gram lookup drafts " + std::to_string(s.num_lookup_drafts) + ", accepted " +
           std::to_string(s.num_lookup_accepted_tokens);
  out += "\n  accepted-length histogram:";
  for (size_t i = 0; i < s.acceptance_hist.size(); ++i)
    out += " " + std::to_string(i) + ":" + std::to_string(s.acceptance_hist[i]);
  return out + "]";
}

}  // namespace blockspec
