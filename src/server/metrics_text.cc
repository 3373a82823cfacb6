#include "server/metrics_text.h"

#include <cstdio>
#include <sstream>

namespace blockspec {

namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// Label values escape \ " and newline (Prometheus text format 0.0.4).
std::string escape_label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

class Writer {
 public:
  explicit Writer(const std::string& model) : model_label_("model_name=\"" + escape_label(model) + "\"") {}

  void header(const std::string& name, const char* type, const char* help) {
    os_ << "# HELP blockspec:" << name << " " << help << "\n# TYPE blockspec:" << name << " " << type << "\n";
  }
  void sample(const std::string& name, double v, const std::string& labels = "") {
    os_ << "blockspec:" << name << "{" << model_label_ << (labels.empty() ? "" : ",") << labels << "} " << num(v)
        << "\n";
  }
  void metric(const std::string& name, const char* type, const char* help, double v) {
    header(name, type, help);
    sample(name, v);
  }
  void histogram(const std::string& name, const char* help, const Histogram& h) {
    header(name, "histogram", help);
    uint64_t cum = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cum += i < h.counts.size() ? h.counts[i] : 0;
      sample(name + "_bucket", static_cast<double>(cum), "le=\"" + num(h.bounds[i]) + "\"");
    }
    sample(name + "_bucket", static_cast<double>(h.count), "le=\"+Inf\"");
    sample(name + "_sum", h.sum);
    sample(name + "_count", static_cast<double>(h.count));
  }
  std::string str() const { return os_.str(); }

 private:
  std::string model_label_;
  std::ostringstream os_;
};

}  // namespace

std::string render_metrics(const EngineMetrics& m, const ServerCounters& c, const std::string& model_name) {
  Writer w(model_name);
  w.metric("num_requests_running", "gauge", "Number of requests in model execution batches.",
           static_cast<double>(m.running));
  w.metric("num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
           static_cast<double>(m.waiting));
  w.metric("kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", m.kv_usage());
  w.metric("kv_cache_pages_used", "gauge", "KV-cache pages held by requests.", static_cast<double>(m.kv_pages_used));
  w.metric("kv_cache_pages_total", "gauge", "KV-cache pages in the pool.", static_cast<double>(m.kv_pages_total));
  if (m.state_slots_total > 0) {  // hybrid (Gated DeltaNet) models: per-sequence recurrent state
    w.metric("recurrent_state_slots_used", "gauge", "Recurrent-state slots held by requests.",
             static_cast<double>(m.state_slots_used));
    w.metric("recurrent_state_slots_total", "gauge", "Recurrent-state slots in the pool.",
             static_cast<double>(m.state_slots_total));
    w.metric("recurrent_state_bytes", "gauge", "Bytes of recurrent state held by requests (f32).",
             static_cast<double>(m.state_slots_used * m.state_bytes_per_slot));
  }
  // Prefix caching, by vLLM's names (v1: prefix_cache_queries / _hits in
  // tokens; v0's gpu_prefix_cache_hit_rate as the running ratio).
  w.metric("prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.",
           static_cast<double>(m.prefix_cache_queries));
  w.metric("prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.",
           static_cast<double>(m.prefix_cache_hits));
  w.metric("gpu_prefix_cache_hit_rate", "gauge", "Prefix cache hit rate (cached / queried prompt tokens, all time).",
           m.prefix_cache_queries ? static_cast<double>(m.prefix_cache_hits) / static_cast<double>(m.prefix_cache_queries)
                                  : 0.0);
  w.metric("kv_cache_pages_cached", "gauge", "KV-cache pages holding a cached prefix (owned or not).",
           static_cast<double>(m.kv_pages_cached));
  w.metric("prompt_tokens_total", "counter", "Number of prefill tokens processed.",
           static_cast<double>(m.prompt_tokens));
  w.metric("generation_tokens_total", "counter", "Number of generation tokens processed.",
           static_cast<double>(m.generation_tokens));
  // blockspec's own: where the engine thread's time goes.
  w.metric("engine_step_seconds_total", "counter", "Time in engine steps (plan, drafts, forward, reporting).",
           m.step_seconds);
  w.metric("engine_forward_seconds_total", "counter", "Time in the target's forwards.", m.forward_seconds);
  w.metric("spec_decode_draft_seconds_total", "counter", "Time in drafting (drafter and n-gram lookup).",
           m.draft_seconds);
  w.metric("spec_decode_draft_context_seconds_total", "counter",
           "Time in the drafter's context passes outside drafts (catch-ups after steps without drafts, published pages).",
           m.draft_context_seconds);
  w.header("request_success_total", "counter", "Count of finished requests by finish reason.");
  std::map<std::string, uint64_t> fin = c.finished;
  for (const char* r : {"stop", "length", "abort", "error"}) fin.emplace(r, 0);  // every series from the start
  for (const auto& [reason, n] : fin)
    w.sample("request_success_total", static_cast<double>(n), "finished_reason=\"" + escape_label(reason) + "\"");
  w.histogram("time_to_first_token_seconds", "Histogram of time to first token in seconds.", m.ttft_s);
  w.histogram("time_per_output_token_seconds", "Histogram of time per output token in seconds.", m.tpot_s);
  w.histogram("e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", m.e2e_s);
  w.metric("spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.",
           static_cast<double>(m.spec.num_drafts));
  w.metric("spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.",
           static_cast<double>(m.spec.num_draft_tokens));
  w.metric("spec_decode_num_accepted_tokens_total", "counter", "Number of accepted tokens.",
           static_cast<double>(m.spec.num_accepted_tokens));
  // blockspec's own: the drafts n-gram lookup made in front of the drafter (lookup_first).
  w.metric("spec_decode_num_lookup_drafts_total", "counter", "Drafts made by n-gram lookup in place of the drafter.",
           static_cast<double>(m.spec.num_lookup_drafts));
  w.metric("spec_decode_num_lookup_accepted_tokens_total", "counter", "Accepted tokens of the n-gram lookup drafts.",
           static_cast<double>(m.spec.num_lookup_accepted_tokens));
  // A counter per draft position (0-based, as vLLM labels it); the
  // exposition name carries _total like every counter.
  w.header("spec_decode_num_accepted_tokens_per_pos_total", "counter", "Accepted tokens per draft position.");
  for (size_t i = 0; i < m.spec.accepted_per_pos.size(); ++i)
    w.sample("spec_decode_num_accepted_tokens_per_pos_total", static_cast<double>(m.spec.accepted_per_pos[i]),
             "position=\"" + std::to_string(i) + "\"");
  // Decoding steps by the draft length planned for them (blockspec's own:
  // num_speculative_tokens_per_batch_size or the adaptive K at work).
  w.header("spec_decode_steps_by_k_total", "counter", "Decoding steps by the draft length K planned for them.");
  for (const auto& [k, n] : m.steps_by_k)
    w.sample("spec_decode_steps_by_k_total", static_cast<double>(n), "k=\"" + std::to_string(k) + "\"");
  // The adaptive draft length's cost model as served (blockspec's own).
  w.header("spec_decode_verify_cost_ms", "gauge",
           "Target forward time by rows as the adaptive draft length sees it: start-up table x served correction.");
  for (const auto& [rows, ms] : m.verify_cost_ms)
    w.sample("spec_decode_verify_cost_ms", ms, "rows=\"" + std::to_string(rows) + "\"");
  w.metric("spec_decode_draft_cost_ms", "gauge",
           "Drafter time per drafting sequence and step as the adaptive draft length sees it (0: none measured).",
           m.draft_cost_ms);
  return w.str();
}

}  // namespace blockspec
