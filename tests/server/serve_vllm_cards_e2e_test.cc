// The `vllm serve` command lines of the model cards (issue 21), pasted into
// `blockspec serve` with the paths replaced by a tiny target and a random
// DFlash drafter made for it, and run as the real binary over HTTP on
// loopback:
//   1. card one (int8_block_g128 KV for target and drafter, K = 7,
//      --max-model-len 524288, 12 sequences): starts, logs the drafter's
//      context KV as int8_block_g128, and serves completions identical at
//      T = 0 to the same command without speculation, with drafts partly
//      accepted; with --tensor-parallel-size 4 kept it exits non-zero with
//      one line naming the flag.
//   2. card two (fp8 KV, K = 3, --gpu-memory-utilization 0.98, 2048 batched
//      tokens, --enable-auto-tool-choice --tool-call-parser qwen3_xml,
//      --reasoning-parser qwen3) as published: starts and serves, lossless,
//      and --seed makes unseeded sampled requests repeat.
//   3. num_speculative_tokens_per_batch_size: K per step follows the number
//      of running sequences (/metrics spec_decode_steps_by_k).
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "../runtime/sampling_harness.h"
#include "model/transformer.h"
#include "prom_metrics.h"

namespace blockspec {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kSrcModel = std::string(BS_SOURCE_DIR) + "/tests/fixtures/golden/qwen3-tiny-f32";
const std::string kBinary = std::string(BS_BINARY_DIR) + "/blockspec";

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// `blockspec serve` as a child process, its stdout + stderr in a log file.
class Served {
 public:
  Served(const std::vector<std::string>& args, const std::string& log) : log_(log) {
    pid_ = fork();
    if (pid_ == 0) {
      FILE* f = std::fopen(log.c_str(), "w");
      dup2(fileno(f), 1);
      dup2(fileno(f), 2);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(kBinary.c_str()));
      argv.push_back(const_cast<char*>("serve"));
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(kBinary.c_str(), argv.data());
      _exit(127);
    }
  }
  ~Served() {
    if (pid_ > 0 && exit_code_ < 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }
  // Waits until /health answers 200 (true) or the process exits (false).
  bool ready() {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    static const std::regex listening(R"(listening on http://127\.0\.0\.1:(\d+))");
    while (std::chrono::steady_clock::now() < until) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
        return false;
      }
      std::smatch m;
      const std::string text = slurp(log_);
      if (port_ == 0 && std::regex_search(text, m, listening)) port_ = std::stoi(m[1].str());
      if (port_ > 0) {
        httplib::Client c("127.0.0.1", port_);
        auto r = c.Get("/health");
        if (r && r->status == 200) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  int port() const { return port_; }
  int exit_code() const { return exit_code_; }
  std::string log() const { return slurp(log_); }

 private:
  std::string log_;
  pid_t pid_ = -1;
  int port_ = 0, exit_code_ = -1;
};

json complete(int port, const std::vector<int32_t>& prompt, int max_tokens, double temperature) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120);
  json req = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", temperature}};
  auto r = c.Post("/v1/completions", req.dump(), "application/json");
  if (!r) return json{{"error", "no answer"}};
  return json::parse(r->body);
}

std::map<std::string, double> metrics(int port) {
  httplib::Client c("127.0.0.1", port);
  auto r = c.Get("/metrics");
  return r ? testing::parse_metrics(r->body) : std::map<std::string, double>{};
}

// The last line of a log (serve's error line when it exits).
std::string last_line(const std::string& log) {
  std::string s = log;
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s.substr(s.rfind('\n') == std::string::npos ? 0 : s.rfind('\n') + 1);
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

std::vector<std::string> without(std::vector<std::string> a, const std::vector<std::string>& flags) {
  for (const std::string& f : flags) {
    auto it = std::find(a.begin(), a.end(), f);
    if (it == a.end()) continue;
    const bool takes_value = f != "--enable-auto-tool-choice" && f != "--trust-remote-code";
    a.erase(it, it + (takes_value ? 2 : 1));
  }
  return a;
}

class VllmCards : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("bs_vllm_cards_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    // The target: the tiny Qwen3 with room for card one's --max-model-len 524288 (RoPE needs no table).
    fs::create_directories(dir_ / "base");
    for (const auto& e : fs::directory_iterator(kSrcModel)) fs::copy_file(e.path(), dir_ / "base" / e.path().filename());
    json cfg = json::parse(slurp((dir_ / "base/config.json").string()));
    cfg["max_position_embeddings"] = 524288;
    std::ofstream((dir_ / "base/config.json").string()) << cfg.dump(2);
    ModelOptions mo;
    mo.n_threads = 1;
    auto target = Transformer::load(kSrcModel, mo);
    testing::write_overlapping_drafters(*target, (dir_ / "draft").string());  // draft/dflash, draft/dflash2
    const std::vector<int32_t> p = testing::make_prompt(*target);
    prompts_ = {p, std::vector<int32_t>(p.begin(), p.begin() + 12), {5, 6, 7, 9}, std::vector<int32_t>(p.begin() + 3, p.end())};
  }
  static void TearDownTestSuite() {
    if (!std::getenv("BS_KEEP_TMP")) fs::remove_all(dir_);
  }
  static std::string base() { return (dir_ / "base").string(); }
  static std::string draft() { return (dir_ / "draft/dflash").string(); }
  static std::string log(const std::string& name) { return (dir_ / (name + ".log")).string(); }

  // Greedy completions of every prompt, one request after another.
  static std::vector<std::string> answers(int port) {
    std::vector<std::string> out;
    for (const auto& p : prompts_) {
      const json r = complete(port, p, 40, 0.0);
      EXPECT_TRUE(r.contains("choices")) << r.dump();
      out.push_back(r.contains("choices") ? r["choices"][0]["text"].get<std::string>() : "");
    }
    return out;
  }
  // Serves `args`; expects a start, and the same greedy answers as without the speculative config.
  static std::map<std::string, double> check_lossless(const std::string& name, const std::vector<std::string>& args) {
    std::vector<std::string> plain_args = without(args, {"--speculative-config"});
    Served plain(with(plain_args, {"--port", "0"}), log(name + "-plain"));
    EXPECT_TRUE(plain.ready()) << plain.log();
    const std::vector<std::string> want = answers(plain.port());
    Served spec(with(args, {"--port", "0"}), log(name));
    EXPECT_TRUE(spec.ready()) << spec.log();
    const std::vector<std::string> got = answers(spec.port());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "prompt " << i;
    last_log_ = spec.log();
    return metrics(spec.port());
  }

  static inline fs::path dir_;
  static inline std::vector<std::vector<int32_t>> prompts_;
  static inline std::string last_log_;
};

std::vector<std::string> card_one(const std::string& target, const std::string& drafter, const std::string& tp) {
  return {target, "--tensor-parallel-size", tp, "--max-num-seqs", "12", "--dtype", "bfloat16", "--max-model-len",
          "524288", "--kv-cache-dtype", "int8_block_g128", "--mamba-ssm-cache-dtype", "float32",
          "--speculative-config",
          R"({"method": "dflash", "model": ")" + drafter + R"(", "num_speculative_tokens": 7,
             "kv_cache_dtype": "int8_block_g128"})"};
}

std::vector<std::string> card_two(const std::string& target, const std::string& drafter) {
  return {target, "--speculative-config",
          R"({"method":"dflash","model":")" + drafter + R"(","num_speculative_tokens":3})", "--trust-remote-code",
          "--dtype", "bfloat16", "--max-model-len", "8192", "--kv-cache-dtype", "fp8_e4m3",
          "--gpu-memory-utilization", "0.98", "--max-num-seqs", "8", "--max-num-batched-tokens", "2048",
          "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_xml", "--reasoning-parser", "qwen3"};
}

TEST_F(VllmCards, CardOneServesLosslesslyWithAnInt8DrafterKv) {
  auto m = check_lossless("card1", card_one(base(), draft(), "1"));
  EXPECT_NE(last_log_.find("drafter context KV cache dtype int8_block_g128 (speculative-config kv_cache_dtype)"),
            std::string::npos) << last_log_;
  EXPECT_NE(last_log_.find("KV cache: int8_block_g128"), std::string::npos) << last_log_;
  EXPECT_NE(last_log_.find("max_model_len 524288, max_num_seqs 12, speculative dflash K=7"), std::string::npos)
      << last_log_;
  const double drafts = m["blockspec:spec_decode_num_drafts_total"];
  const double drafted = m["blockspec:spec_decode_num_draft_tokens_total"];
  const double accepted = m["blockspec:spec_decode_num_accepted_tokens_total"];
  std::printf("[card one] drafts %.0f, draft tokens %.0f, accepted %.0f\n", drafts, drafted, accepted);
  EXPECT_GT(drafts, 0);
  EXPECT_GT(accepted, 0) << "no draft token accepted: the lossless check saw no acceptance";
  EXPECT_LT(accepted, drafted) << "every draft token accepted: the lossless check saw no rejection";
}

TEST_F(VllmCards, CardOneWithTensorParallelFourExitsNamingTheFlag) {
  Served s(with(card_one(base(), draft(), "4"), {"--port", "0"}), log("card1-tp4"));
  EXPECT_FALSE(s.ready());
  EXPECT_NE(s.exit_code(), 0);
  const std::string line = last_line(s.log());
  EXPECT_NE(line.find("error: --tensor-parallel-size 4: "), std::string::npos) << s.log();
  EXPECT_EQ(s.log().find("listening"), std::string::npos) << "started before refusing:\n" << s.log();
}

TEST_F(VllmCards, CardTwoServesAsPublished) {
  // Every flag of the card, the tool-call parser and the reasoning parser included.
  const std::vector<std::string> args = card_two(base(), draft());
  auto m = check_lossless("card2", args);
  EXPECT_NE(last_log_.find("--trust-remote-code: accepted"), std::string::npos) << last_log_;
  EXPECT_NE(last_log_.find("--gpu-memory-utilization 0.98 of"), std::string::npos) << last_log_;
  EXPECT_NE(last_log_.find("drafter context KV cache dtype fp8_e4m3 (as the target's)"), std::string::npos)
      << last_log_;
  EXPECT_GT(m["blockspec:spec_decode_num_drafts_total"], 0);
  // --seed: an unseeded sampled request is the same in a second server run.
  std::vector<std::string> sampled;
  for (int run = 0; run < 2; ++run) {
    Served s(with(args, {"--port", "0", "--seed", "11"}), log("card2-seed" + std::to_string(run)));
    ASSERT_TRUE(s.ready()) << s.log();
    std::string texts;
    for (int i = 0; i < 3; ++i) texts += complete(s.port(), prompts_[0], 24, 1.0)["choices"][0]["text"].get<std::string>() + "|";
    sampled.push_back(texts);
  }
  EXPECT_EQ(sampled[0], sampled[1]);
}

TEST_F(VllmCards, TokensPerBatchSizeFollowTheRunningSequences) {
  Served s({base(), "--port", "0", "--max-num-seqs", "8", "--speculative-config",
            R"({"method":"dflash","model":")" + draft() +
                R"(","num_speculative_tokens":7,"num_speculative_tokens_per_batch_size":[[1,1,7],[2,8,2]]})"},
           log("k-by-batch"));
  ASSERT_TRUE(s.ready()) << s.log();
  EXPECT_NE(s.log().find("K by batch size: 1-1: 7, 2-8: 2"), std::string::npos) << s.log();
  complete(s.port(), prompts_[0], 30, 0.0);  // alone: K 7
  std::vector<std::future<json>> f;
  for (int i = 0; i < 6; ++i) f.push_back(std::async(std::launch::async, [&, i] {
    return complete(s.port(), prompts_[i % prompts_.size()], 30, 0.0);
  }));
  for (auto& x : f) EXPECT_TRUE(x.get().contains("choices"));
  auto m = metrics(s.port());
  EXPECT_GT(m["blockspec:spec_decode_steps_by_k_total{k=\"7\"}"], 0);
  EXPECT_GT(m["blockspec:spec_decode_steps_by_k_total{k=\"2\"}"], 0);
  for (const auto& [name, v] : m)
    if (name.rfind("blockspec:spec_decode_steps_by_k_total", 0) == 0)
      EXPECT_TRUE(name.find("k=\"7\"") != std::string::npos || name.find("k=\"2\"") != std::string::npos) << name;
}

}  // namespace
}  // namespace blockspec
