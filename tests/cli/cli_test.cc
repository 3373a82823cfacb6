// Runs the real `blockspec` binary as a user would: flags, JSON output,
// exit codes, and one-line errors for bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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

TEST(Cli, InspectReadsGguf) {
  const std::string dir = std::string(BS_SOURCE_DIR) + "/tests/fixtures/gguf/";
  CmdResult r = run("inspect " + dir + "tiny_qwen2.gguf --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["n_tensors"].get<int>(), 27);
  EXPECT_EQ(j["config"]["model_type"], "qwen2");
  EXPECT_EQ(j["tensors"][0]["name"], "token_embd.weight");
  EXPECT_EQ(j["tensors"][0]["dtype"], "F32");
  EXPECT_EQ(j["tensors"][0]["shape"], (std::vector<int64_t>{6, 8}));
  // A GGUF that is not a model: its tensors with their ggml types, and why there is no config.
  CmdResult t = run("inspect " + dir + "real_slices.gguf");
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("Q4_K"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("config: not a model blockspec runs"), std::string::npos) << t.out;
}

TEST(Cli, BenchJsonHasRooflineKeys) {
  CmdResult r = run("bench -m " + kModel + " --prompt-len 8 --gen-len 4 --concurrency 2 --repeats 1 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"model", "weights", "threads", "concurrency", "prompt_tokens", "gen_tokens",
                          "prefill_tok_s", "decode_tok_s", "ttft_ms_p50", "tpot_ms_p50", "achieved_gb_s",
                          "read_bw_gb_s", "read_bw_before_gb_s", "read_bw_after_gb_s", "bw_fraction", "bw_flag",
                          "llc_bytes", "peak_rss_mb", "thread_cpu_s", "wall_s"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["concurrency"], 2);
  // CPU time of the caller and each worker over the timed repeats (issue 22), never more than the wall time.
  ASSERT_EQ(j["thread_cpu_s"].size(), static_cast<size_t>(j["threads"].get<int>()));
  for (const auto& c : j["thread_cpu_s"]) EXPECT_LE(c.get<double>(), j["wall_s"].get<double>() + 0.05);
  EXPECT_NE(r.err.find("threads: "), std::string::npos);
  EXPECT_GT(j["read_bw_before_gb_s"].get<double>(), 0.0);
  EXPECT_GT(j["read_bw_after_gb_s"].get<double>(), 0.0);
  EXPECT_EQ(j["read_bw_gb_s"].get<double>(),
            std::max(j["read_bw_before_gb_s"].get<double>(), j["read_bw_after_gb_s"].get<double>()));
  EXPECT_GE(j["read_bw_probe_bytes"].get<double>(), double(1 << 30));
  // The tiny model's weights fit in any last-level cache: a fraction above 1.0 must come with the flag saying so.
  if (j["bw_fraction"].get<double>() > 1.0) {
    EXPECT_NE(j["bw_flag"].get<std::string>(), "");
  }
  // The 1 GiB probe buffer is not counted in the peak RSS (the tiny model needs far less).
  if (j["peak_rss_excludes_probe"].get<bool>()) {
    EXPECT_LT(j["peak_rss_mb"].get<double>(), 1000.0);
  }
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

// ---- eval ----

const std::string kText = std::string(BS_SOURCE_DIR) + "/data/text/tinyshakespeare.txt";

std::string eval_args(const std::string& model, const std::string& ref, const std::string& extra) {
  return "eval -m " + model + " --reference " + ref + " --text " + kText + " " + extra;
}

TEST(Cli, EvalSameModelHasZeroKlAndFullAgreement) {
  CmdResult r = run(eval_args(kModel, kModel, "--max-tokens 256 --json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(count_lines(r.out), 1);
  auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"ppl", "ppl_reference", "kld_mean", "kld_p99", "top1_agreement", "n_tokens", "n_windows",
                          "ctx", "model", "reference", "weights", "reference_weights", "seconds"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["n_tokens"], 256);
  EXPECT_EQ(j["n_windows"], 1);
  EXPECT_EQ(j["ctx"], 512);
  // Same weights, same arithmetic: the distributions are bit-identical.
  EXPECT_EQ(j["kld_mean"].get<double>(), 0.0);
  EXPECT_EQ(j["kld_p99"].get<double>(), 0.0);
  EXPECT_EQ(j["top1_agreement"].get<double>(), 1.0);
  EXPECT_EQ(j["ppl"].get<double>(), j["ppl_reference"].get<double>());
  EXPECT_GT(j["ppl"].get<double>(), 1.0);
  EXPECT_NE(r.err.find("KL mean"), std::string::npos);  // human table on stderr
}

TEST(Cli, EvalQ8AgainstF32IsCloseButNotIdentical) {
  CmdResult r = run(eval_args(kModel, kModel, "--weights q8 --reference-weights f32 --max-tokens 256 --json"));
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["n_tokens"], 256);
  EXPECT_GT(j["kld_mean"].get<double>(), 0.0);
  EXPECT_LT(j["kld_mean"].get<double>(), 0.05);
  EXPECT_GE(j["kld_p99"].get<double>(), j["kld_mean"].get<double>());
  EXPECT_GT(j["top1_agreement"].get<double>(), 0.5);
  EXPECT_LE(j["top1_agreement"].get<double>(), 1.0);
  EXPECT_NE(j["weights"], j["reference_weights"]);
}

TEST(Cli, KvCacheDtypeFlag) {
  // eval: an int8 KV cache against the f32 cache of the same weights.
  CmdResult r = run(eval_args(kModel, kModel, "--kv-cache-dtype int8_block_g128 --max-tokens 128 --json"));
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["kv_cache_dtype"], "int8_block_g128");
  EXPECT_EQ(j["reference_kv_cache_dtype"], "f32");
  EXPECT_GT(j["kld_mean"].get<double>(), 0.0);
  EXPECT_LT(j["kld_mean"].get<double>(), 0.05);
  r = run(eval_args(kModel, kModel, "--kv-cache-dtype bf16 --reference-kv-cache-dtype bf16 --max-tokens 64 --json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["kld_mean"].get<double>(), 0.0);
  // bench counts the KV bytes of the actual dtype.
  r = run("bench -m " + kModel + " --prompt-len 8 --gen-len 4 --repeats 1 --json --kv-cache-dtype fp8_e4m3");
  ASSERT_EQ(r.code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["kv_cache_dtype"], "fp8_e4m3");
  EXPECT_EQ(j["kv_bytes_per_token"], 2 * 3 * 2 * 32);  // 3 layers, 2 KV heads, head_dim 32, 1 byte
  // A bad value: one line naming the valid values, non-zero exit.
  for (const std::string& c : {"generate -m " + kModel + " -p hi --kv-cache-dtype int4",
                              eval_args(kModel, kModel, "--reference-kv-cache-dtype fp16")}) {
    r = run(c);
    EXPECT_NE(r.code, 0) << c;
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("auto, f32, bf16, fp8_e4m3, int8_per_token_head, int8_block_g128"), std::string::npos)
        << r.err;
  }
}

// --candidates: one reference pass, several variants; each result equals
// the single-variant run of the same settings exactly.
TEST(Cli, EvalCandidatesEqualSeparateRuns) {
  CmdResult r = run(eval_args(kModel, kModel, "--max-tokens 128 --candidates q8,f32:int8_block_g128,stored --json"));
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["results"].size(), 3u);
  EXPECT_EQ(j["n_tokens"], 128);
  const std::string singles[] = {"--weights q8", "--weights f32 --kv-cache-dtype int8_block_g128", ""};
  for (int i = 0; i < 3; ++i) {
    CmdResult s = run(eval_args(kModel, kModel, "--max-tokens 128 --json " + singles[i]));
    ASSERT_EQ(s.code, 0) << s.err;
    auto one = nlohmann::json::parse(s.out);
    const auto& got = j["results"][i];
    for (const char* key : {"weights", "kv_cache_dtype", "ppl", "ppl_reference", "kld_mean", "kld_p99",
                            "top1_agreement", "n_tokens"})
      EXPECT_EQ(got[key], one[key]) << i << " " << key;
  }
  EXPECT_EQ(j["results"][2]["kld_mean"].get<double>(), 0.0);  // stored weights, f32 KV = the reference
  EXPECT_GT(j["results"][0]["kld_mean"].get<double>(), 0.0);
  EXPECT_NE(r.err.find("int8_block_g128"), std::string::npos);  // human table lists every variant
  for (const std::string& bad : {"--candidates q8,zz", "--candidates q8: --weights q4", "--candidates q8,,q4",
                                 "--candidates q8:int4", "--reference-activations fp16"}) {
    CmdResult b = run(eval_args(kModel, kModel, bad));
    EXPECT_NE(b.code, 0) << bad;
    EXPECT_EQ(count_lines(b.err), 1) << bad << "\n" << b.err;
  }
}

// --state: an eval stopped after 2 windows and resumed gives exactly the uninterrupted result; a state of
// another command is refused in one line.
TEST(Cli, EvalStateResumesToTheSameResult) {
  const std::string st = ::testing::TempDir() + "/eval_state.json";
  std::filesystem::remove(st);
  const std::string common = "--ctx 32 --max-tokens 160 --candidates q8,q4 --json";
  CmdResult full = run(eval_args(kModel, kModel, common));
  ASSERT_EQ(full.code, 0) << full.err;
  CmdResult part = run(eval_args(kModel, kModel, common + " --state " + st + " --stop-after-windows 2"));
  ASSERT_EQ(part.code, 0) << part.err;
  EXPECT_LT(nlohmann::json::parse(part.out)["n_tokens"].get<int>(), 160);
  CmdResult rest = run(eval_args(kModel, kModel, common + " --state " + st));
  ASSERT_EQ(rest.code, 0) << rest.err;
  EXPECT_NE(rest.err.find("resuming after window 2"), std::string::npos) << rest.err;
  const auto a = nlohmann::json::parse(full.out), b = nlohmann::json::parse(rest.out);
  for (int i = 0; i < 2; ++i)
    for (const char* key : {"ppl", "ppl_reference", "kld_mean", "kld_p99", "kld_max", "top1_agreement", "n_tokens"})
      EXPECT_EQ(a["results"][i][key], b["results"][i][key]) << i << " " << key;
  CmdResult other = run(eval_args(kModel, kModel, "--ctx 32 --max-tokens 160 --candidates q8 --json --state " + st));
  EXPECT_NE(other.code, 0);
  EXPECT_EQ(count_lines(other.err), 1) << other.err;
  EXPECT_NE(other.err.find("another eval command"), std::string::npos) << other.err;
  std::filesystem::remove(st);
}

// PATH=WEIGHTS candidates: another checkpoint scored in the same reference
// pass equals its own single run; a missing path is a one-line error.
TEST(Cli, EvalCandidatesOtherCheckpoints) {
  const std::string other = std::string(BS_SOURCE_DIR) + "/tests/fixtures/golden/qwen3-tiny-bf16";
  CmdResult r = run(eval_args(kModel, kModel, "--max-tokens 128 --json --candidates q8," + other + "=stored," +
                                                  other + "=stored:int8_per_token_head"));
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["results"].size(), 3u);
  EXPECT_EQ(j["results"][0]["model"], kModel);
  EXPECT_EQ(j["results"][1]["model"], other);
  const std::string singles[] = {"-m " + kModel + " --weights q8", "-m " + other,
                                 "-m " + other + " --kv-cache-dtype int8_per_token_head"};
  for (int i = 0; i < 3; ++i) {
    CmdResult s = run("eval " + singles[i] + " --reference " + kModel + " --text " + kText + " --max-tokens 128 --json");
    ASSERT_EQ(s.code, 0) << s.err;
    auto one = nlohmann::json::parse(s.out);
    for (const char* key : {"weights", "kv_cache_dtype", "ppl", "kld_mean", "kld_p99", "top1_agreement"})
      EXPECT_EQ(j["results"][i][key], one[key]) << i << " " << key;
  }
  EXPECT_GT(j["results"][1]["kld_mean"].get<double>(), 0.0);  // bf16 weights differ from the f32 reference
  EXPECT_NE(j["results"][1]["kld_mean"], j["results"][2]["kld_mean"]);
  EXPECT_NE(r.err.find(other), std::string::npos);
  for (const std::string& bad : {"--candidates /nonexistent/model=stored", "--candidates =q8"}) {
    CmdResult b = run(eval_args(kModel, kModel, bad));
    EXPECT_NE(b.code, 0) << bad;
    EXPECT_EQ(count_lines(b.err), 1) << bad << "\n" << b.err;
  }
}

TEST(Cli, EvalCutsWindowsAndCapsScoredTokens) {
  // Windows of 100 tokens score 99 each: 99 + 99 + 58 = 256.
  CmdResult r = run(eval_args(kModel, kModel, "--ctx 100 --max-tokens 256 --threads 1 --json"));
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["n_tokens"], 256);
  EXPECT_EQ(j["n_windows"], 3);
  EXPECT_EQ(j["ctx"], 100);
}

// Writes qwen3-tiny-f32 with embed_tokens (tied, so also the LM head) padded
// with zero rows to 1024: same tokenizer, different vocab_size.
void write_padded_vocab_model(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  std::ifstream in(kModel + "/model.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  uint64_t hlen = 0;
  std::memcpy(&hlen, bytes.data(), 8);
  auto header = nlohmann::json::parse(bytes.substr(8, hlen));
  const std::string data = bytes.substr(8 + hlen);
  nlohmann::json out_header;
  std::string out_data;
  for (auto& [name, t] : header.items()) {
    if (name == "__metadata__") {
      out_header[name] = t;
      continue;
    }
    const size_t b = t["data_offsets"][0], e = t["data_offsets"][1];
    std::string d = data.substr(b, e - b);
    if (name == "model.embed_tokens.weight") {
      t["shape"][0] = 1024;
      d.resize(d.size() * 2, '\0');
    }
    t["data_offsets"] = {out_data.size(), out_data.size() + d.size()};
    out_data += d;
    out_header[name] = t;
  }
  std::string h = out_header.dump();
  h.resize((h.size() + 7) / 8 * 8, ' ');
  const uint64_t n = h.size();
  std::ofstream out(dir + "/model.safetensors", std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << h << out_data;
  std::ifstream cin(kModel + "/config.json");
  auto cfg = nlohmann::json::parse(cin);
  cfg["vocab_size"] = 1024;
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  fs::copy_file(kModel + "/tokenizer.json", dir + "/tokenizer.json", fs::copy_options::overwrite_existing);
}

// qwen3-tiny-f32 with its tokenizer's ids reversed (id -> 508 - id), so
// every text tokenizes to different ids.
void write_other_tokenizer_model(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"})
    fs::copy_file(kModel + "/" + f, dir + "/" + f, fs::copy_options::overwrite_existing);
  std::ifstream in(kModel + "/tokenizer.json");
  auto tok = nlohmann::json::parse(in);
  for (auto& [piece, id] : tok["model"]["vocab"].items()) id = 508 - id.get<int>();
  std::ofstream(dir + "/tokenizer.json") << tok.dump();
}

TEST(Cli, EvalBadInputIsOneLineErrorAndNonZeroExit) {
  const std::string tmp = std::string(BS_BINARY_DIR) + "/cli_eval_fixtures";
  std::filesystem::create_directories(tmp);
  std::ofstream(tmp + "/empty.txt").close();
  std::ofstream(tmp + "/one_token.txt") << "a";
  write_padded_vocab_model(tmp + "/vocab1024");
  write_other_tokenizer_model(tmp + "/other_tokenizer");
  const std::string base = "eval -m " + kModel + " --reference " + kModel;
  struct Case {
    std::string args, expect;  // expect: a substring of the error line
  };
  const Case cases[] = {
      {base + " --text /nonexistent/file.txt", "cannot open"},
      {base + " --text " + tmp + "/empty.txt", "empty"},
      {base + " --text " + tmp + "/one_token.txt", "at least 2"},
      {base + " --text " + kText + " --ctx 1", "--ctx"},
      {base + " --text " + kText + " --ctx 513", "max_position_embeddings"},
      {base + " --text " + kText + " --max-tokens 0", "--max-tokens"},
      {base + " --text " + kText + " --reference-weights q3", "--reference-weights"},
      {base + " --text " + kText + " --kv-cache-dtype int4", "int8_block_g128"},
      {base + " --text " + kText + " --reference-kv-cache-dtype fp16", "--reference-kv-cache-dtype"},
      {base + " --text " + kText + " --bogus", "unknown flag"},
      {"eval -m " + kModel + " --text " + kText, "--reference"},
      {"eval -m " + kModel + " --reference /nonexistent/dir --text " + kText, "nonexistent"},
      {"eval -m " + kModel + " --reference " + tmp + "/vocab1024 --text " + kText + " --max-tokens 8", "vocab_size"},
      {"eval -m " + kModel + " --reference " + tmp + "/other_tokenizer --text " + kText, "disagree on the text at token 0"},
  };
  for (const auto& c : cases) {
    CmdResult r = run(c.args);
    EXPECT_NE(r.code, 0) << c.args;
    EXPECT_EQ(count_lines(r.err), 1) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << c.args;
  }
}

}  // namespace

namespace blockspec {
namespace {

// quantize closes with an eval of OUT against IN: on the calibration text's held-out tokens by default, on
// --eval-text when given (then equal to `blockspec eval` with an f32 cache), skipped with --no-eval.
TEST(Cli, QuantizeClosingEval) {
  const std::string out = std::string(BS_BINARY_DIR) + "/cli_test_quantize_eval";
  std::filesystem::remove_all(out);
  CmdResult r = run("quantize " + kModel + " " + out + " --scheme w8a16 --calib " + kText +
                    " --calib-tokens 256 --eval-tokens 200 --threads 1 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("eval")) << r.out;
  EXPECT_EQ(j["eval"]["n_tokens"], 200);
  EXPECT_GT(j["eval"]["kld_mean"].get<double>(), 0.0);
  EXPECT_LT(j["eval"]["kld_mean"].get<double>(), 0.1);
  EXPECT_NE(j["eval"]["text"].get<std::string>().find("after its 256 calibration tokens"), std::string::npos);
  EXPECT_NE(r.err.find("top-1 agreement"), std::string::npos);
  std::filesystem::remove_all(out);

  r = run("quantize " + kModel + " " + out + " --scheme w4a16 --eval-text " + kText +
          " --eval-tokens 128 --threads 1 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  CmdResult e = run(eval_args(out, kModel, "--max-tokens 128 --kv-cache-dtype f32 --threads 1 --json"));
  ASSERT_EQ(e.code, 0) << e.err;
  auto ej = nlohmann::json::parse(e.out);
  for (const char* k : {"kld_mean", "kld_p99", "top1_agreement", "ppl", "ppl_reference", "n_tokens"})
    EXPECT_EQ(j["eval"][k], ej[k]) << k;
  std::filesystem::remove_all(out);

  // A GGUF input (its blocks would load as q8) is the reference at bf16, as `eval --reference-weights bf16`.
  const std::string gguf = std::string(BS_SOURCE_DIR) + "/tests/fixtures/gguf/tiny_qwen2.gguf";
  r = run("quantize " + gguf + " " + out + " --scheme w8a16 --eval-text " + kText + " --eval-tokens 64 --threads 1 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["eval"]["reference_weights"].get<std::string>().rfind("bf16", 0), 0u) << j["eval"];
  std::filesystem::remove_all(out);

  r = run("quantize " + kModel + " " + out + " --scheme w4a16 --no-eval --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(nlohmann::json::parse(r.out).contains("eval"));
  std::filesystem::remove_all(out);
  for (const std::string& bad : {" --eval-tokens 0", " --eval-text /nonexistent/text.txt", " --no-act-target"}) {
    r = run("quantize " + kModel + " " + out + " --scheme w4a16" + bad);
    EXPECT_NE(r.code, 0) << bad;
    EXPECT_EQ(count_lines(r.err), 1) << bad << "\n" << r.err;
    EXPECT_FALSE(std::filesystem::exists(out)) << bad;
  }
}

}  // namespace
}  // namespace blockspec
