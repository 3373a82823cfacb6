// `blockspec check DRAFTER [--target TARGET] [--json]` run as a user would:
// exit 0 for a complete drafter, 1 for a broken one (every problem listed),
// 2 for a path that is not a drafter checkpoint; --json is one parseable
// object on stdout. The drafters are written here with a minimal safetensors
// writer (this test binary links no formats library).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct CmdResult {
  int code;
  std::string out;  // stdout
  std::string err;  // stderr
};

CmdResult run(const std::string& args) {
  const std::string err_path = std::string(BS_BINARY_DIR) + "/check_cli_test_stderr.txt";
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

const std::string kTarget = std::string(BS_SOURCE_DIR) + "/tests/fixtures/golden/qwen3-tiny-f32";

using Tensors = std::vector<std::pair<std::string, std::vector<int64_t>>>;  // name, shape (BF16 zeros)

// safetensors: u64 header length, JSON header padded with spaces to 8, data.
void write_bf16_safetensors(const fs::path& path, const Tensors& tensors) {
  json h = json::object();
  uint64_t off = 0;
  for (const auto& [name, shape] : tensors) {
    uint64_t n = 1;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    h[name] = {{"dtype", "BF16"}, {"shape", shape}, {"data_offsets", {off, off + 2 * n}}};
    off += 2 * n;
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t len = text.size();
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(&len), 8);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  const std::string zeros(off, '\0');
  f.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
}

// A DFlash drafter for qwen3-tiny-f32 (hidden 64, 3 layers, vocab 512): 2 taps.
Tensors drafter_tensors() {
  Tensors t = {{"fc.weight", {64, 128}}, {"hidden_norm.weight", {64}}, {"norm.weight", {64}}};
  for (int i = 0; i < 2; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    for (const char* n : {"input_layernorm.weight", "post_attention_layernorm.weight"}) t.push_back({p + n, {64}});
    t.push_back({p + "self_attn.q_proj.weight", {32, 64}});
    t.push_back({p + "self_attn.k_proj.weight", {16, 64}});
    t.push_back({p + "self_attn.v_proj.weight", {16, 64}});
    t.push_back({p + "self_attn.o_proj.weight", {64, 32}});
    t.push_back({p + "self_attn.q_norm.weight", {16}});
    t.push_back({p + "self_attn.k_norm.weight", {16}});
    t.push_back({p + "mlp.gate_proj.weight", {32, 64}});
    t.push_back({p + "mlp.up_proj.weight", {32, 64}});
    t.push_back({p + "mlp.down_proj.weight", {64, 32}});
  }
  return t;
}

json drafter_config() {
  return {{"architectures", {"DFlashDraftModel"}}, {"model_type", "qwen3"}, {"hidden_size", 64},
          {"intermediate_size", 32}, {"num_hidden_layers", 2}, {"num_attention_heads", 2},
          {"num_key_value_heads", 1}, {"head_dim", 16}, {"vocab_size", 512}, {"rope_theta", 1e6},
          {"dtype", "bfloat16"},
          {"dflash_config", {{"block_size", 16}, {"mask_token_id", 500}, {"target_layer_ids", {0, 1}}}}};
}

class CheckCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("bs_check_cli_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const json& cfg, const Tensors& t) {
    std::ofstream(dir_ / "config.json") << cfg.dump(2);
    write_bf16_safetensors(dir_ / "model.safetensors", t);
  }
  fs::path dir_;
};

TEST_F(CheckCli, ValidDrafterExitsZeroWithSummary) {
  write(drafter_config(), drafter_tensors());
  CmdResult r = run("check " + dir_.string() + " --target " + kTarget);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  for (const char* s : {"ok: dflash drafter", "2 layers", "taps [0, 1]", "block size 16", "mask id 500",
                        "down_proj: BF16",
                        "25 tensors"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  CmdResult j = run("check " + dir_.string() + " --target " + kTarget + " --json");
  ASSERT_EQ(j.code, 0) << j.err;
  const json o = json::parse(j.out);
  EXPECT_EQ(o["ok"], true);
  EXPECT_EQ(o["method"], "dflash");
  EXPECT_EQ(o["drafter"], dir_.string());
  EXPECT_TRUE(o["problems"].empty());
  EXPECT_EQ(o["summary"]["layers"], 2);
  EXPECT_EQ(o["summary"]["n_tensors"], 25);
  EXPECT_EQ(o["summary"]["linear_formats"]["fc"], "BF16");
  EXPECT_EQ(o["summary"]["target_checked"], true);
  EXPECT_NE(j.err.find("ok: dflash drafter"), std::string::npos);  // human text on stderr
  // Without --target: still 0, and the skipped checks are said.
  CmdResult n = run("check " + dir_.string());
  EXPECT_EQ(n.code, 0);
  EXPECT_NE(n.out.find("warning: --target"), std::string::npos) << n.out;
}

TEST_F(CheckCli, BrokenDrafterExitsOneListingEveryProblem) {
  Tensors t = drafter_tensors();
  std::erase_if(t, [](const auto& x) { return x.first == "fc.weight" || x.first == "layers.1.mlp.up_proj.weight"; });
  json cfg = drafter_config();
  cfg["dflash_config"]["mask_token_id"] = 600;  // outside the target's 512
  write(cfg, t);
  CmdResult r = run("check " + dir_.string() + " --target " + kTarget + " --json");
  ASSERT_EQ(r.code, 1) << r.err;
  const json o = json::parse(r.out);
  EXPECT_EQ(o["ok"], false);
  ASSERT_EQ(o["problems"].size(), 3u) << o.dump(2);
  std::vector<std::string> names;
  for (const json& p : o["problems"]) {
    names.push_back(p.contains("tensor") ? p["tensor"].get<std::string>() : p["key"].get<std::string>());
    EXPECT_FALSE(p["message"].get<std::string>().empty());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names,
            (std::vector<std::string>{"dflash_config.mask_token_id", "fc.weight", "layers.1.mlp.up_proj.weight"}));
  EXPECT_EQ(o["summary"]["problems"], 3);
  // Human form: one line per problem, then the summary line.
  CmdResult h = run("check " + dir_.string() + " --target " + kTarget);
  EXPECT_EQ(h.code, 1);
  int lines = 0;
  for (size_t p = h.out.find("problem: "); p != std::string::npos; p = h.out.find("problem: ", p + 1)) ++lines;
  EXPECT_EQ(lines, 3) << h.out;
  EXPECT_NE(h.out.find("3 problems"), std::string::npos) << h.out;
}

TEST_F(CheckCli, NotADrafterExitsTwo) {
  EXPECT_EQ(run("check " + (dir_ / "missing").string()).code, 2);
  CmdResult t = run("check " + kTarget + " --json");  // a target model, not a drafter
  EXPECT_EQ(t.code, 2);
  const json o = json::parse(t.out);
  EXPECT_EQ(o["ok"], false);
  EXPECT_EQ(o["problems"].size(), 1u);
  EXPECT_NE(o["problems"][0]["message"].get<std::string>().find("not a DFlash drafter"), std::string::npos);
  EXPECT_EQ(run("check " + dir_.string()).code, 2);  // empty directory: no config.json
  // A drafter config that parse_draft_config rejects is a broken checkpoint: 1.
  json cfg = drafter_config();
  cfg["dflash_config"].erase("mask_token_id");
  write(cfg, drafter_tensors());
  CmdResult r = run("check " + dir_.string());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("mask_token_id"), std::string::npos) << r.out;
  // A target that is not a model, or that is a drafter itself.
  write(drafter_config(), drafter_tensors());
  EXPECT_EQ(run("check " + dir_.string() + " --target " + (dir_ / "missing").string()).code, 2);
  EXPECT_EQ(run("check " + dir_.string() + " --target " + dir_.string()).code, 2);
}

}  // namespace
