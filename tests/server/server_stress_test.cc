// Load and disconnects: 8 concurrent clients x 100 requests each, a mix of
// streaming and non-streaming completions, with random clients hanging up
// mid-stream. Zero 5xx (zero non-200 for well-formed requests), every
// request that finishes returns exactly the text the same request gets
// alone (greedy), and afterwards the engine holds no request and no KV page.
// CI runs this binary again in an AddressSanitizer build (scripts/test.sh).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "../spec_setup.h"
#include "model/transformer.h"
#include "server/generation.h"
#include "model/chat_files.h"
#include "server/server.h"

namespace blockspec {
namespace {

using json = nlohmann::json;
const std::string kDenseDir = std::string(BS_SOURCE_DIR) + "/tests/fixtures/golden/qwen3-tiny-f32";
// A hybrid Gated-DeltaNet target (Qwen3.5 layout) with the same tokenizer.
const std::string kHybridDir = std::string(BS_SOURCE_DIR) + "/tests/fixtures/hybrid/qwen35-serve";
const std::string kTemplate = std::string(BS_SOURCE_DIR) + "/tests/fixtures/chat/qwen3.jinja";

// A raw HTTP/1.1 POST on a fresh connection; returns the socket.
int open_post(int port, const std::string& path, const std::string& body) {
  const std::string http = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           "Connection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      send(fd, http.data(), http.size(), 0) != static_cast<ssize_t>(http.size())) {
    close(fd);
    return -1;
  }
  return fd;
}

// Concatenated "text" of the SSE chunks in a raw chunked HTTP response.
std::string sse_text(const std::string& raw, bool* done) {
  std::string text;
  *done = raw.find("data: [DONE]") != std::string::npos;
  size_t pos = 0;
  while ((pos = raw.find("data: {", pos)) != std::string::npos) {
    const size_t end = raw.find("\n\n", pos);
    if (end == std::string::npos) break;
    json j = json::parse(raw.substr(pos + 6, end - pos - 6), nullptr, false);
    if (j.is_object() && j.contains("choices") && !j["choices"].empty() && j["choices"][0]["text"].is_string())
      text += j["choices"][0]["text"].get<std::string>();
    pos = end;
  }
  return text;
}

void stress(std::optional<SpecConfig> spec, const std::string& kModelDir = kDenseDir) {
  ModelOptions mo;
  mo.n_threads = 1;
  EngineOptions eo;
  eo.max_num_seqs = 8;
  eo.spec = std::move(spec);
  eo.enable_prefix_caching = true;  // as `serve` runs (off by itself for the hybrid model)
  auto model = make_served_model(test_engine(Transformer::load(kModelDir, mo), eo),
                                 Tokenizer::from_file(kModelDir + "/tokenizer.json"),
                                 read_chat_assets(kModelDir, kTemplate), kModelDir);
  Server server(ServerOptions{"127.0.0.1", 0, "tiny", "", 32, false});
  const int port = server.start();
  server.set_model(model);

  constexpr int kPrompts = 8, kClients = 8, kPerClient = 100;
  static constexpr int kMaxTokens = 6;
  auto request = [](int p, bool stream) {
    json j = {{"model", "tiny"},        {"prompt", "Stress prompt number " + std::to_string(p) + ":"},
              {"max_tokens", kMaxTokens}, {"temperature", 0},
              {"ignore_eos", true},       {"stream", stream}};
    return j.dump();
  };
  // What each prompt gives alone.
  std::vector<std::string> expect(kPrompts);
  {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(120, 0);
    for (int p = 0; p < kPrompts; ++p) {
      auto r = c.Post("/v1/completions", request(p, false), "application/json");
      ASSERT_TRUE(r && r->status == 200);
      expect[p] = json::parse(r->body)["choices"][0]["text"].get<std::string>();
    }
  }
  std::atomic<int> non200{0}, wrong{0}, finished{0}, dropped{0}, io_errors{0};
  std::vector<std::thread> ts;
  for (int c = 0; c < kClients; ++c) {
    ts.emplace_back([&, c] {
      std::mt19937 rng(1234 + c);
      httplib::Client cli("127.0.0.1", port);
      cli.set_read_timeout(300, 0);
      for (int i = 0; i < kPerClient; ++i) {
        const int p = static_cast<int>(rng() % kPrompts);
        const int kind = static_cast<int>(rng() % 4);  // 0: JSON, 1-2: stream to the end, 3: hang up mid-stream
        if (kind == 0) {
          auto r = cli.Post("/v1/completions", request(p, false), "application/json");
          if (!r) {
            ++io_errors;
            continue;
          }
          if (r->status != 200) {
            ++non200;
            continue;
          }
          if (json::parse(r->body)["choices"][0]["text"].get<std::string>() != expect[p]) ++wrong;
          ++finished;
          continue;
        }
        const int fd = open_post(port, "/v1/completions", request(p, true));
        if (fd < 0) {
          ++io_errors;
          continue;
        }
        std::string raw;
        char buf[4096];
        for (;;) {
          const ssize_t n = recv(fd, buf, sizeof buf, 0);
          if (n <= 0) break;
          raw.append(buf, static_cast<size_t>(n));
          if (kind == 3 && raw.find("\"text\"") != std::string::npos) break;  // first token: hang up
        }
        close(fd);
        if (raw.rfind("HTTP/1.1 200", 0) != 0) {
          ++non200;
          continue;
        }
        if (kind == 3) {
          ++dropped;
          continue;
        }
        bool done = false;
        const std::string text = sse_text(raw, &done);
        if (!done || text != expect[p]) ++wrong;
        ++finished;
      }
    });
  }
  for (auto& t : ts) t.join();
  std::printf("stress: %d finished, %d dropped mid-stream, %d non-200, %d wrong, %d I/O errors\n", finished.load(),
              dropped.load(), non200.load(), wrong.load(), io_errors.load());
  EXPECT_EQ(non200.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(io_errors.load(), 0);
  EXPECT_EQ(finished.load() + dropped.load(), kClients * kPerClient);
  EXPECT_GT(dropped.load(), 0);
  // Afterwards: nothing running or waiting, no KV page held, the server healthy.
  EngineMetrics m;
  for (int i = 0; i < 400; ++i) {
    m = model->engine->metrics();
    if (m.running == 0 && m.waiting == 0 && m.kv_pages_used == 0 && m.state_slots_used == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(m.running, 0);
  EXPECT_EQ(m.waiting, 0);
  EXPECT_EQ(m.kv_pages_used, 0);
  EXPECT_EQ(m.state_slots_used, 0);  // hybrid models: no recurrent-state slot leaked either
  if (kModelDir == kHybridDir) EXPECT_EQ(m.state_slots_total, 8);
  httplib::Client c("127.0.0.1", port);
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  if (kModelDir == kHybridDir) {  // /metrics reports the recurrent-state memory
    auto mt = c.Get("/metrics");
    ASSERT_TRUE(mt);
    EXPECT_NE(mt->body.find("recurrent_state_slots_total"), std::string::npos);
    EXPECT_NE(mt->body.find("recurrent_state_bytes"), std::string::npos);
  }
  if (model->engine->prefix_caching()) {  // the repeated prompts hit; a flush leaves no cached page
    EXPECT_GT(m.prefix_cache_hits, 0u);
    EXPECT_GT(m.kv_pages_cached, 0);
    auto rs = c.Post("/reset_prefix_cache", "", "application/json");
    ASSERT_TRUE(rs);
    EXPECT_EQ(rs->status, 200);
    for (int i = 0; i < 100 && model->engine->metrics().kv_pages_cached != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(model->engine->metrics().kv_pages_cached, 0);
    EXPECT_EQ(model->engine->metrics().kv_pages_used, 0);
  } else {
    EXPECT_EQ(kModelDir, kHybridDir);
  }
  if (eo.spec) {
    const EngineMetrics em = model->engine->metrics();
    std::printf("stress with %s K=%lld: %lld drafts, %lld accepted\n", eo.spec->method_name(),
                static_cast<long long>(eo.spec->num_speculative_tokens), static_cast<long long>(em.spec.num_drafts),
                static_cast<long long>(em.spec.num_accepted_tokens));
    EXPECT_GT(em.spec.num_drafts, 0);
  }
}

TEST(ServerStress, EightClientsHundredRequestsWithDisconnects) { stress(std::nullopt); }

// The same load with n-gram speculation in every step: every finished answer
// equals what the same request gets alone (ServerSpec shows that equals the
// answer without speculation), and clients hanging up between verify steps
// leave no KV page behind.
TEST(ServerStress, EightClientsHundredRequestsWithSpeculation) {
  stress(test_spec("ngram", 3));
}

// A hybrid target under the same load with n-gram speculation: every verify
// that rejects drafts rolls the recurrent state back, and nothing leaks.
TEST(ServerStress, HybridTargetWithSpeculation) {
  stress(test_spec("ngram", 3), kHybridDir);
}

}  // namespace
}  // namespace blockspec
