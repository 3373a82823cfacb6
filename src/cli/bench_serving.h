// `blockspec bench --url`: a serving benchmark against a running
// OpenAI-compatible server (ours or any other): C concurrent streaming chat
// clients over a JSONL prompt file; output tok/s, TTFT and TPOT p50/p99, and
// speculative acceptance read from the server's /metrics before and after.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "cli/args.h"

namespace blockspec {

std::vector<FlagSpec> bench_serving_flags();
nlohmann::json bench_serving(const Args& a);

}  // namespace blockspec
