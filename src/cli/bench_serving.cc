#include "cli/bench_serving.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "base/error.h"
#include "cli/bench_spec.h"

namespace blockspec {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

struct Url {
  std::string scheme_host_port;  // for httplib::Client
};

Url parse_url(const std::string& u) {
  if (u.rfind("http://", 0) != 0) fail("--url must start with http:// (found \"", u, "\")");
  std::string rest = u.substr(7);
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.empty() || rest.find('/') != std::string::npos)
    fail("--url must be http://HOST:PORT without a path (found \"", u, "\")");
  return {"http://" + rest};
}

// Sums of the spec-decode counters in Prometheus text (blockspec: or vllm:
// prefix); the per-position counter is kept per position ("...[i]").
std::map<std::string, double> spec_counters(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t colon = line.find(':');
    const size_t sp = line.rfind(' ');
    if (colon == std::string::npos || sp == std::string::npos || sp < colon) continue;
    std::string name = line.substr(colon + 1, sp - colon - 1);
    const size_t brace = name.find('{');  // labels (model_name) are summed over, except position
    if (brace != std::string::npos) {
      const size_t at = name.find("position=\"", brace);
      std::string pos;
      if (at != std::string::npos) pos = name.substr(at + 10, name.find('"', at + 10) - at - 10);
      name.erase(brace);
      if (!pos.empty()) name += "[" + pos + "]";
    }
    if (name.rfind("spec_decode_", 0) != 0) continue;
    try {
      out[name] += std::stod(line.substr(sp + 1));
    } catch (const std::exception&) {
    }
  }
  return out;
}

}  // namespace

std::vector<FlagSpec> bench_serving_flags() {
  return {
      {"--url", "", true, "benchmark a running server at http://HOST:PORT instead of a local model"},
      {"--max-tokens", "", true, "with --url: max_tokens per request (default 128)"},
      {"--served-model-name", "", true, "with --url: model name to request (default: the first of /v1/models)"},
      {"--api-key", "", true, "with --url: Bearer token"},
      {"--temperature", "", true, "with --url: sampling temperature (default 0)"},
  };
}

nlohmann::json bench_serving(const Args& a) {
  const Url url = parse_url(a.str("--url"));
  const int64_t C = a.integer("--concurrency", 1), N = a.integer("--num-prompts", 32);
  const int64_t max_tokens = a.integer("--max-tokens", 128);
  const double temperature = a.number("--temperature", 0.0);
  if (C < 1 || C > 256) fail("bench: --concurrency must be in [1, 256], found ", C);
  if (N < 1) fail("bench: --num-prompts must be >= 1, found ", N);
  const std::string key = a.str("--api-key");
  const std::string prompts_path = a.required("--prompts");
  std::vector<std::string> prompts = load_prompts(prompts_path, a.str("--prompt-template"), N);
  httplib::Headers headers;
  if (!key.empty()) headers.emplace("Authorization", "Bearer " + key);

  httplib::Client probe(url.scheme_host_port);
  probe.set_read_timeout(30, 0);
  std::string model = a.str("--served-model-name");
  if (model.empty()) {
    auto r = probe.Get("/v1/models", headers);
    if (!r || r->status != 200) fail("bench: GET ", url.scheme_host_port, "/v1/models failed");
    auto j = nlohmann::json::parse(r->body, nullptr, false);
    if (!j.is_object() || !j.contains("data") || j["data"].empty()) fail("bench: /v1/models lists no model");
    model = j["data"][0].value("id", "");
  }
  auto metrics = [&]() {
    auto r = probe.Get("/metrics", headers);
    return r && r->status == 200 ? spec_counters(r->body) : std::map<std::string, double>{};
  };
  const auto before = metrics();

  std::mutex mu;
  std::vector<double> ttft, tpot;
  std::vector<std::string> texts(prompts.size());  // each response, to compare runs token for token
  int64_t out_tokens = 0, errors = 0, done = 0;
  std::atomic<int64_t> next{0};
  const double t0 = now_s();
  auto worker = [&] {
    httplib::Client cli(url.scheme_host_port);
    cli.set_read_timeout(600, 0);
    for (;;) {
      const int64_t i = next.fetch_add(1);
      if (i >= static_cast<int64_t>(prompts.size())) return;
      nlohmann::json req = {{"model", model},
                            {"messages", {{{"role", "user"}, {"content", prompts[i]}}}},
                            {"max_tokens", max_tokens},
                            {"temperature", temperature},
                            {"stream", true},
                            {"stream_options", {{"include_usage", true}}}};
      const double start = now_s();
      double first = 0;
      int64_t completion = 0;
      std::string buf, text;
      bool ok = true;
      httplib::Request hreq;
      hreq.method = "POST";
      hreq.path = "/v1/chat/completions";
      hreq.headers = headers;
      hreq.set_header("Content-Type", "application/json");
      hreq.body = req.dump();
      hreq.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
        buf.append(data, n);
        size_t e;
        while ((e = buf.find("\n\n")) != std::string::npos) {
          std::string ev = buf.substr(0, e);
          buf.erase(0, e + 2);
          if (ev.rfind("data: ", 0) != 0) continue;
          ev.erase(0, 6);
          if (ev == "[DONE]") continue;
          auto j = nlohmann::json::parse(ev, nullptr, false);
          if (!j.is_object()) continue;
          if (j.contains("error")) ok = false;
          if (j.contains("choices") && !j["choices"].empty() && first == 0) {
            const auto& d = j["choices"][0]["delta"];
            if (d.is_object() && d.contains("content") && d["content"].is_string() &&
                !d["content"].get<std::string>().empty())
              first = now_s();
          }
          if (j.contains("choices") && !j["choices"].empty()) {
            const auto& d = j["choices"][0]["delta"];
            if (d.is_object() && d.contains("content") && d["content"].is_string()) text += d["content"].get<std::string>();
          }
          if (j.contains("usage") && j["usage"].is_object())
            completion = j["usage"].value("completion_tokens", int64_t{0});
        }
        return true;
      };
      httplib::Response hres;
      httplib::Error herr = httplib::Error::Success;
      const bool sent = cli.send(hreq, hres, herr);
      const double end = now_s();
      std::lock_guard<std::mutex> g(mu);
      ++done;
      if (!sent || hres.status != 200 || !ok) {
        ++errors;
        continue;
      }
      out_tokens += completion;
      texts[i] = text;
      if (first > 0) ttft.push_back((first - start) * 1e3);
      if (completion > 1 && first > 0) tpot.push_back((end - first) * 1e3 / static_cast<double>(completion - 1));
    }
  };
  std::vector<std::thread> ts;
  for (int64_t c = 0; c < C; ++c) ts.emplace_back(worker);
  for (auto& t : ts) t.join();
  const double wall = now_s() - t0;
  const auto after = metrics();

  nlohmann::json j;
  j["url"] = url.scheme_host_port;
  j["model"] = model;
  j["concurrency"] = C;
  j["requests"] = done;
  j["errors"] = errors;
  j["output_tokens"] = out_tokens;
  j["duration_s"] = wall;
  j["output_tok_s"] = wall > 0 ? static_cast<double>(out_tokens) / wall : 0.0;
  j["outputs"] = texts;
  j["ttft_ms_p50"] = pct(ttft, 0.5);
  j["ttft_ms_p99"] = pct(ttft, 0.99);
  j["tpot_ms_p50"] = pct(tpot, 0.5);
  j["tpot_ms_p99"] = pct(tpot, 0.99);
  auto delta = [&](const std::string& n) {
    auto b = before.find(n), e = after.find(n);
    return (e == after.end() ? 0.0 : e->second) - (b == before.end() ? 0.0 : b->second);
  };
  const double drafts = delta("spec_decode_num_drafts_total");
  const double acc = delta("spec_decode_num_accepted_tokens_total");
  nlohmann::json spec;
  spec["num_drafts"] = drafts;
  spec["num_draft_tokens"] = delta("spec_decode_num_draft_tokens_total");
  spec["num_accepted_tokens"] = acc;
  spec["mean_acceptance_length"] = drafts > 0 ? 1.0 + acc / drafts : 0.0;
  spec["num_lookup_drafts"] = delta("spec_decode_num_lookup_drafts_total");
  spec["num_lookup_accepted_tokens"] = delta("spec_decode_num_lookup_accepted_tokens_total");
  std::vector<double> per_pos;  // fraction of drafts whose token at position i was accepted
  for (int i = 0; drafts > 0 && after.count("spec_decode_num_accepted_tokens_per_pos_total[" + std::to_string(i) + "]");
       ++i)
    per_pos.push_back(delta("spec_decode_num_accepted_tokens_per_pos_total[" + std::to_string(i) + "]") / drafts);
  spec["acceptance_per_pos"] = per_pos;
  j["spec"] = spec;
  std::fprintf(stderr,
               "%s (%s) | concurrency %lld | %lld requests, %lld errors | %.1f s\n"
               "  output      %10.2f tok/s\n  TTFT        p50 %.1f ms, p99 %.1f ms\n"
               "  TPOT        p50 %.2f ms, p99 %.2f ms\n  acceptance  %.3f tokens per draft (%.0f drafts)\n",
               url.scheme_host_port.c_str(), model.c_str(), static_cast<long long>(C), static_cast<long long>(done),
               static_cast<long long>(errors), wall, j["output_tok_s"].get<double>(), j["ttft_ms_p50"].get<double>(),
               j["ttft_ms_p99"].get<double>(), j["tpot_ms_p50"].get<double>(), j["tpot_ms_p99"].get<double>(),
               spec["mean_acceptance_length"].get<double>(), drafts);
  return j;
}

}  // namespace blockspec
