// Runs the real `blockspec` binary as a user would: flags, JSON output,
// exit codes, and one-line errors for bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace {

struct CmdResult {
  int code;
  std::string out;  // stdout
  std::string err;  // stderr
};

CmdResult run(const std::string& args) {
  const std::string err_path = std::string(BS_BINARY_DIR) + "/cli_test_stderr.txt";
  std::string cmd = std::string(BS_BINARY_DIR) + "/blockspec " + args + " 2>" + err_path;
  FILE* p = popen(cmd.c_str(), "r");
  CmdResult r{-1, "", ""};
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream f(err_path);
  r.err.assign(std::istreambuf_iterator<char>(f), {});
  return r;
}

const std::string kModel = std::string(BS_SOURCE_DIR) + "/tests/fixtures/golden/qwen3-tiny-f32";

int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(Cli, GenerateJsonHasFieldsAndIsReproducible) {
  std::string args = "generate -m " + kModel + " -p 'Hello there' -n 12 --temp 0.9 --top-k 50 --top-p 0.9 --seed 3 --ignore-eos --json";
  CmdResult a = run(args), b = run(args);
  ASSERT_EQ(a.code, 0) << a.err;
  auto j = nlohmann::json::parse(a.out);
  for (const char* key : {"text", "tokens", "prompt_tokens", "prefill_tok_s", "decode_tok_s"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["tokens"].size(), 12u);
  EXPECT_GT(j["prompt_tokens"].get<int>(), 0);
  auto k = nlohmann::json::parse(b.out);
  EXPECT_EQ(j["tokens"], k["tokens"]);  // same seed, same tokens
  EXPECT_EQ(j["text"], k["text"]);
  CmdResult c = run("generate -m " + kModel + " -p 'Hello there' -n 12 --temp 0.9 --seed 4 --ignore-eos --json");
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(nlohmann::json::parse(c.out)["tokens"], j["tokens"]);
}

TEST(Cli, GreedyPrintsTextAndStats) {
  CmdResult r = run("generate -m " + kModel + " -p 'To be' -n 8 --threads 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  EXPECT_NE(r.err.find("decode"), std::string::npos);
  EXPECT_NE(r.err.find("tok/s"), std::string::npos);
}

TEST(Cli, InspectListsTensorsAndConfig) {
  CmdResult r = run("inspect " + kModel + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["n_tensors"].get<int>(), 10);
  EXPECT_GT(j["total_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["config"]["model_type"], "qwen3");
  CmdResult h = run("inspect " + kModel);
  ASSERT_EQ(h.code, 0);
  EXPECT_NE(h.out.find("model.embed_tokens.weight"), std::string::npos);
}

TEST(Cli, BenchJsonHasRooflineKeys) {
  CmdResult r = run("bench -m " + kModel + " --prompt-len 8 --gen-len 4 --concurrency 2 --repeats 1 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"model", "weights", "threads", "concurrency", "prompt_tokens", "gen_tokens",
                          "prefill_tok_s", "decode_tok_s", "ttft_ms_p50", "tpot_ms_p50", "achieved_gb_s",
                          "read_bw_gb_s", "bw_fraction", "peak_rss_mb"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["concurrency"], 2);
  EXPECT_GT(j["read_bw_gb_s"].get<double>(), 0.0);
  EXPECT_GT(j["decode_tok_s"].get<double>(), 0.0);
  EXPECT_NE(r.err.find("bw fraction"), std::string::npos);  // human table on stderr
}

TEST(Cli, BadInputIsOneLineErrorAndNonZeroExit) {
  const std::string cases[] = {
      "generate -m /nonexistent/dir -p hi",
      "generate -m " + kModel + " -p hi -n abc",
      "generate -m " + kModel + " -p hi --temp -1",
      "generate -m " + kModel + " -p hi --top-p 2",
      "generate -m " + kModel + " -p hi --bogus",
      "generate -m " + kModel,
      "generate -m " + kModel + " -p hi --isa sse9",
      "inspect /nonexistent/file.safetensors",
      "bench -m " + kModel + " --gen-len 1",
      "bench -m " + kModel + " --concurrency 0",
      "bench -m " + kModel + " --prompt-len 100000",
      "frobnicate",
  };
  for (const auto& c : cases) {
    CmdResult r = run(c);
    EXPECT_NE(r.code, 0) << c;
    EXPECT_EQ(count_lines(r.err), 1) << c << "\n" << r.err;
    EXPECT_EQ(r.err.find("Segmentation"), std::string::npos) << c;
  }
}

}  // namespace
