// The speculative half of `blockspec bench`: the cost of verifying 1+K
// tokens in one target pass relative to a 1-token decode step (on a CPU this
// ratio decides the best K), and speculative vs plain decoding on real
// prompts in the same run (tokens checked identical, speedup, acceptance).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/spec_cli.h"
#include "model/transformer.h"
#include "tokenizer/tokenizer.h"

namespace blockspec {

// Median time of a target pass over 1+k tokens (all logits, taps when the
// proposer uses them) after a prompt_len-token prefill, for each k, and its
// ratio to the 1-token pass; with a drafter, also the draft pass for k slots.
nlohmann::json bench_verify_cost(Transformer& model, Proposer* proposer, const std::vector<int64_t>& ks,
                                 int64_t prompt_len, int64_t repeats);

// Prompts from a JSONL file: each line's fields substituted into `tmpl`
// ("{prompt}" -> the line's "prompt" field, ...). Default template: the
// first of "prompt", "turns"[0], "question" found.
std::vector<std::string> load_prompts(const std::string& path, const std::string& tmpl, int64_t limit);

// For every prompt: plain greedy decode and speculative decode of gen_len
// tokens, timed; fails if the tokens differ (lossless check).
nlohmann::json bench_spec_decode(Transformer& model, SpecSetup& spec, const std::vector<std::vector<int32_t>>& prompts,
                                 int64_t gen_len, int64_t repeats);

}  // namespace blockspec
