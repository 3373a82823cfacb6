// /metrics in the Prometheus text format, with vLLM's metric names under the
// "blockspec:" prefix (vllm:num_requests_running -> blockspec:num_requests_running),
// so dashboards and scrapers written for vLLM read blockspec unchanged.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "runtime/engine.h"

namespace blockspec {

// Counted by the HTTP layer: it knows the finish reason the client saw. The
// engine's own counts (EngineMetrics::finished_by_reason) can differ: it may
// end a request by length or eos before it sees the "stop" cancel of a stop
// string the handler found in tokens it had already generated.
struct ServerCounters {
  std::map<std::string, uint64_t> finished;  // finished_reason -> requests (stop, length, abort, error)
};

std::string render_metrics(const EngineMetrics& m, const ServerCounters& c, const std::string& model_name);

}  // namespace blockspec
