// generation_config.json as request defaults (`blockspec serve
// --generation-config auto|vllm|DIR`): parsing and its errors, how defaults
// meet request fields, and a server on a copy of the tiny Qwen3 fixture with
// a generation_config.json written by the test (committed fixtures stay as
// they are).
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <mutex>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "model/transformer.h"
#include "server/generation_config.h"
#include "server/openai_request.h"
#include "server/server.h"

namespace blockspec {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
const std::string kFixture = std::string(BS_SOURCE_DIR) + "/tests/fixtures/golden/qwen3-tiny-f32";

// A fresh copy of the tiny model in a temporary directory.
struct ModelCopy {
  fs::path dir;
  ModelCopy() {
    dir = fs::temp_directory_path() / ("bs_genconfig_" + std::to_string(getpid()) + "_" +
                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"}) fs::copy_file(fs::path(kFixture) / f, dir / f);
  }
  ~ModelCopy() { fs::remove_all(dir); }
  std::string path() const { return dir.string(); }
  std::string file() const { return (dir / "generation_config.json").string(); }
  void write(const std::string& text) const { std::ofstream(file()) << text; }
};

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(GenerationConfig, ParsesTheKeysVllmTakes) {
  RequestDefaults d = parse_generation_config(
      json::parse(R"({"temperature": 0.6, "top_p": 0.95, "top_k": 20, "max_new_tokens": 64, "eos_token_id": [7, 9],
                      "do_sample": true, "bos_token_id": 1, "repetition_penalty": 1.05, "transformers_version": "4.51"})"),
      "G", 100);
  EXPECT_FLOAT_EQ(d.temperature.value(), 0.6f);
  EXPECT_FLOAT_EQ(d.top_p.value(), 0.95f);
  EXPECT_EQ(d.top_k.value(), 20);
  EXPECT_EQ(d.max_tokens.value(), 64);
  EXPECT_EQ(d.eos_token_ids, (std::vector<int32_t>{7, 9}));
  EXPECT_EQ(d.ignored, std::vector<std::string>{"repetition_penalty 1.05"});
  const std::string line = d.describe();
  for (const char* want : {"from G", "temperature 0.6", "top_p 0.95", "top_k 20", "max_tokens 64", "[7,9]", "repetition_penalty"})
    EXPECT_NE(line.find(want), std::string::npos) << want << " missing from: " << line;
  EXPECT_EQ(line.find('\n'), std::string::npos);

  RequestDefaults one = parse_generation_config(json::parse(R"({"eos_token_id": 5, "top_k": -1, "temperature": null})"), "G", 100);
  EXPECT_EQ(one.eos_token_ids, std::vector<int32_t>{5});
  EXPECT_EQ(one.top_k.value(), 0);  // -1: off
  EXPECT_FALSE(one.temperature);
  EXPECT_NE(RequestDefaults{}.describe().find("built-in"), std::string::npos);
}

TEST(GenerationConfig, BadValuesNameTheFileAndTheKey) {
  ModelCopy m;
  struct Case {
    std::string text, key;
  };
  for (const Case& c : std::vector<Case>{{R"({"top_p": "high"})", "'top_p'"},
                                         {R"({"top_p": 0})", "'top_p'"},
                                         {R"({"temperature": -1})", "'temperature'"},
                                         {R"({"top_k": 2.5})", "'top_k'"},
                                         {R"({"max_new_tokens": 0})", "'max_new_tokens'"},
                                         {R"({"eos_token_id": [1, "x"]})", "'eos_token_id'"},
                                         {R"({"eos_token_id": 100000000})", "'eos_token_id'"},
                                         {R"({"top_p": 0.9,})", "not valid JSON"},
                                         {R"([1, 2])", "expected a JSON object"}}) {
    SCOPED_TRACE(c.text);
    m.write(c.text);
    const std::string e = error_of([&] { load_request_defaults("auto", m.path(), 1000); });
    EXPECT_EQ(e.rfind(m.file() + ": ", 0), 0u) << e;
    EXPECT_NE(e.find(c.key), std::string::npos) << e;
    EXPECT_NE(e.find("--generation-config vllm"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    // vllm: the file is not read at all.
    EXPECT_TRUE(load_request_defaults("vllm", m.path(), 1000).source.empty());
  }
}

TEST(GenerationConfig, Modes) {
  ModelCopy m;
  EXPECT_TRUE(load_request_defaults("auto", m.path(), 1000).source.empty());  // no file: built-in
  m.write(R"({"temperature": 0.25})");
  EXPECT_EQ(load_request_defaults("auto", m.path(), 1000).temperature.value(), 0.25f);
  EXPECT_EQ(load_request_defaults("auto", m.path() + "/model.safetensors", 1000).source, "");  // not a directory
  EXPECT_EQ(load_request_defaults(m.path(), "/elsewhere", 1000).temperature.value(), 0.25f);  // a directory
  EXPECT_NE(error_of([&] { load_request_defaults("autoo", m.path(), 1000); }).find("auto, vllm or a directory"),
            std::string::npos);
}

// --override-generation-config: its keys replace the file's, the others stay;
// with no file (or vllm) it alone sets the defaults; bad JSON is one line.
TEST(GenerationConfig, OverridesReplaceTheFilesKeys) {
  ModelCopy m;
  m.write(R"({"temperature": 0.25, "top_p": 0.9, "eos_token_id": 5})");
  RequestDefaults d = load_request_defaults("auto", m.path(), 1000, R"({"temperature": 0.5, "top_k": 7})");
  EXPECT_EQ(d.temperature.value(), 0.5f);
  EXPECT_EQ(d.top_p.value(), 0.9f);
  EXPECT_EQ(d.top_k.value(), 7);
  EXPECT_EQ(d.eos_token_ids, std::vector<int32_t>{5});
  EXPECT_NE(d.source.find("with --override-generation-config"), std::string::npos) << d.source;
  d = load_request_defaults("vllm", m.path(), 1000, R"({"max_new_tokens": 12})");
  EXPECT_EQ(d.max_tokens.value(), 12);
  EXPECT_FALSE(d.temperature);
  EXPECT_EQ(d.source, "--override-generation-config");
  EXPECT_TRUE(load_request_defaults("vllm", m.path(), 1000, "").source.empty());
  std::string e = error_of([&] { load_request_defaults("auto", m.path(), 1000, "{"); });
  EXPECT_NE(e.find("--override-generation-config: not valid JSON"), std::string::npos) << e;
  e = error_of([&] { load_request_defaults("auto", m.path(), 1000, R"({"temperature": -1})"); });
  EXPECT_NE(e.find("'temperature' must be a number"), std::string::npos) << e;
}

TEST(GenerationConfig, DefaultsFillOnlyWhatTheRequestOmits) {
  RequestDefaults d;
  d.temperature = 0.5f;
  d.top_p = 0.8f;
  d.top_k = 12;
  d.max_tokens = 40;
  d.eos_token_ids = {3, 4};
  GenRequest r = parse_completion_request(json{{"prompt", "x"}, {"stop_token_ids", {4, 8}}}, d);
  EXPECT_EQ(r.params.sampling.temperature, 0.5f);
  EXPECT_EQ(r.params.sampling.top_p, 0.8f);
  EXPECT_EQ(r.params.sampling.top_k, 12);
  EXPECT_EQ(r.params.stop_token_ids, (std::vector<int32_t>{4, 8, 3}));
  resolve_max_tokens(r, 10, 1000);
  EXPECT_EQ(r.params.max_tokens, 40);
  GenRequest near_end = parse_chat_request(json{{"messages", {{{"role", "user"}, {"content", "x"}}}}}, d);
  resolve_max_tokens(near_end, 980, 1000);
  EXPECT_EQ(near_end.params.max_tokens, 20);  // a default is cut to what fits, never a 400

  GenRequest own = parse_completion_request(
      json{{"prompt", "x"}, {"temperature", 1.5}, {"top_p", 1}, {"top_k", -1}, {"max_tokens", 5}, {"ignore_eos", true}}, d);
  EXPECT_EQ(own.params.sampling.temperature, 1.5f);
  EXPECT_EQ(own.params.sampling.top_p, 1.f);
  EXPECT_EQ(own.params.sampling.top_k, 0);
  EXPECT_TRUE(own.params.stop_token_ids.empty());  // ignore_eos: no eos ids from the file
  resolve_max_tokens(own, 10, 1000);
  EXPECT_EQ(own.params.max_tokens, 5);

  GenRequest plain = parse_completion_request(json{{"prompt", "x"}});  // no file: built-in defaults
  EXPECT_EQ(plain.params.sampling.temperature, 1.f);
  EXPECT_EQ(plain.params.sampling.top_k, 0);
  resolve_max_tokens(plain, 10, 1000);
  EXPECT_EQ(plain.params.max_tokens, 16);
}

// The tokens the tiny model generates greedily after `prompt` (no eos stop).
std::vector<int32_t> greedy_tokens(Engine& engine, const std::vector<int32_t>& prompt, int n) {
  RequestParams p;
  p.prompt = prompt;
  p.max_tokens = n;
  p.ignore_eos = true;
  p.sampling.temperature = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> out;
  bool done = false;
  engine.submit(p, [&](const TokenEvent& ev) {
    std::lock_guard<std::mutex> lock(mu);
    out.insert(out.end(), ev.tokens.begin(), ev.tokens.end());
    done = ev.finished;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  return out;
}

json post(int port, const json& body) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  auto r = c.Post("/v1/completions", body.dump(), "application/json");
  if (!r) return json();
  EXPECT_EQ(r->status, 200) << r->body;
  return json::parse(r->body, nullptr, false);
}

// A server on a model directory with generation_config.json: requests that
// omit temperature / max_tokens get the file's, and its eos id ends them.
TEST(GenerationConfig, ServedModelUsesTheFile) {
  ModelCopy m;
  ModelOptions mo;
  mo.n_threads = 1;
  EngineOptions eo;
  auto engine = std::make_unique<Engine>(Transformer::load(m.path(), mo), eo);
  const std::vector<int32_t> prompt = {10, 20, 30, 40};
  const std::vector<int32_t> greedy = greedy_tokens(*engine, prompt, 12);
  ASSERT_EQ(greedy.size(), 12u);
  // The eos: the first greedy token from position 3 on that did not come before.
  size_t at = 3;
  while (at < greedy.size() && std::find(greedy.begin(), greedy.begin() + at, greedy[at]) != greedy.begin() + at) ++at;
  ASSERT_LT(at, greedy.size()) << "the tiny model repeats one token";
  const auto& eos = engine->model_config().eos_token_ids;
  for (size_t i = 0; i < at; ++i)
    ASSERT_EQ(std::find(eos.begin(), eos.end(), greedy[i]), eos.end()) << "the model's own eos comes first";
  m.write(json{{"temperature", 0}, {"top_k", 3}, {"max_new_tokens", 9}, {"eos_token_id", {greedy[at]}}}.dump());

  RequestDefaults d = load_request_defaults("auto", m.path(), engine->model_config().vocab_size);
  Server s(ServerOptions{"127.0.0.1", 0, "tiny", "", 8, false});
  const int port = s.start();
  s.set_model(make_served_model(std::move(engine), Tokenizer::from_file(m.path() + "/tokenizer.json"), ChatAssets{},
                                m.path(), d));

  // No temperature, no max_tokens: greedy (the file's 0) for the file's 9 tokens.
  json a = post(port, {{"prompt", prompt}, {"ignore_eos", true}});
  json b = post(port, {{"prompt", prompt}, {"ignore_eos", true}});
  EXPECT_EQ(a["usage"]["completion_tokens"], 9) << a;
  EXPECT_EQ(a["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]) << "unseeded requests differ: the temperature default was not used";
  // Without ignore_eos the file's eos id ends the request on that token.
  json c = post(port, {{"prompt", prompt}, {"max_tokens", 12}});
  EXPECT_EQ(c["usage"]["completion_tokens"], static_cast<int>(at + 1)) << c;
  EXPECT_EQ(c["choices"][0]["finish_reason"], "stop");
}

// `blockspec serve` prints the defaults it took, and a bad file stops it
// before the weights load with one line that names the file and the key.
TEST(GenerationConfig, ServeFlag) {
  const std::string bin = std::string(BS_BINARY_DIR) + "/blockspec";
  if (!fs::exists(bin)) GTEST_SKIP() << bin << " is not built";
  ModelCopy m;
  auto run = [&](const std::string& flags) {
    // --max-model-len beyond the model's: the engine refuses after the config lines, so serve exits.
    const std::string cmd = bin + " serve " + m.path() + " --port 0 --max-model-len 16000000 " + flags + " 2>&1";
    std::string out;
    FILE* p = popen(cmd.c_str(), "r");
    char buf[4096];
    for (size_t n; p && (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    const int rc = p ? pclose(p) : -1;
    EXPECT_NE(rc, 0) << out;
    return out;
  };
  m.write(R"({"temperature": 0.7, "top_p": 0.8, "eos_token_id": 5})");
  std::string out = run("");
  EXPECT_NE(out.find("generation config: from " + m.file() + ": temperature 0.7, top_p 0.8, stop token ids [5]"),
            std::string::npos)
      << out;
  out = run("--generation-config vllm");
  EXPECT_NE(out.find("generation config: built-in defaults"), std::string::npos) << out;
  out = run("--generation-config nonsense");
  EXPECT_NE(out.find("error: --generation-config must be auto, vllm or a directory"), std::string::npos) << out;
  m.write(R"({"top_k": "many"})");
  out = run("");
  EXPECT_NE(out.find("error: " + m.file() + ": 'top_k' must be an integer"), std::string::npos) << out;
  EXPECT_EQ(out.find("max-model-len"), std::string::npos) << "the weights loaded before the bad file was found:\n" << out;
}

}  // namespace
}  // namespace blockspec
