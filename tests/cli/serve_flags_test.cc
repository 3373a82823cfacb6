// `blockspec serve` flags as vLLM spells them: each honoured (its effect on
// the options serve runs from), accepted with a note, or refused with one
// line naming the flag (README.md "Serving flags").
#include "cli/serve_flags.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"

namespace blockspec {
namespace {

const std::string kModel = std::string(BS_SOURCE_DIR) + "/tests/fixtures/golden/qwen3-tiny-f32";

ServeSettings read(std::vector<std::string> argv) {
  Args a("serve", serve_flags(), argv);
  return read_serve_flags(a);
}

std::string error_of(const std::vector<std::string>& argv) {
  try {
    read(argv);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool noted(const ServeSettings& s, const std::string& what) {
  for (const std::string& n : s.notes)
    if (n.find(what) != std::string::npos) return true;
  return false;
}

TEST(ServeFlags, ModelAsPositionalOrFlag) {
  EXPECT_EQ(read({kModel}).model, kModel);
  EXPECT_EQ(read({"--model", kModel}).model, kModel);
  EXPECT_EQ(read({kModel, "--model", kModel}).model, kModel);
  EXPECT_EQ(read({kModel}).server.served_model_name, "qwen3-tiny-f32");
  EXPECT_NE(error_of({kModel, "--model", "/other"}).find("given twice"), std::string::npos);
  EXPECT_NE(error_of({}).find("no model"), std::string::npos);
  EXPECT_NE(error_of({kModel, "/other"}).find("expected one MODEL"), std::string::npos);
}

TEST(ServeFlags, ParallelismAboveOneIsRefused) {
  EXPECT_TRUE(read({kModel, "--tensor-parallel-size", "1", "-pp", "1", "-dp", "1"}).notes.empty());
  for (const std::vector<std::string>& v : {std::vector<std::string>{kModel, "--tensor-parallel-size", "4"},
                                            {kModel, "-tp", "4"},
                                            {kModel, "--pipeline-parallel-size", "2"},
                                            {kModel, "-dp", "2"}}) {
    const std::string e = error_of(v);
    EXPECT_NE(e.find("-parallel-size "), std::string::npos) << e;
    EXPECT_NE(e.find("use 1"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

TEST(ServeFlags, ToolCallAndReasoningParsers) {
  const ServeSettings s = read({kModel, "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_xml"});
  EXPECT_TRUE(s.server.enable_auto_tool_choice);
  EXPECT_EQ(s.server.tool_call_parser, "qwen3_xml");
  for (const char* p : {"hermes", "qwen3_coder"})
    EXPECT_EQ(read({kModel, "--enable-auto-tool-choice", "--tool-call-parser", p}).server.tool_call_parser, p);
  EXPECT_FALSE(read({kModel}).server.enable_auto_tool_choice);
  EXPECT_EQ(error_of({kModel, "--enable-auto-tool-choice"}),
            "--enable-auto-tool-choice: needs --tool-call-parser (hermes, qwen3_coder, qwen3_xml)");
  EXPECT_EQ(error_of({kModel, "--enable-auto-tool-choice", "--tool-call-parser", "mistral"}),
            "--tool-call-parser: \"mistral\" is not supported (supported: hermes, qwen3_coder, qwen3_xml)");
  EXPECT_EQ(read({kModel, "--reasoning-parser", "qwen3"}).server.reasoning_parser, "qwen3");
  EXPECT_TRUE(read({kModel}).server.reasoning_parser.empty());
  EXPECT_NE(error_of({kModel, "--reasoning-parser", "deepseek_r1"}).find("not supported (supported: qwen3"),
            std::string::npos);
}

TEST(ServeFlags, HonouredFlags) {
  ServeSettings s = read({kModel, "--dtype", "bfloat16", "--seed", "7", "--max-num-seqs", "12",
                          "--max-num-batched-tokens", "2048", "--max-model-len", "4096", "--kv-cache-memory-bytes",
                          "2G", "--kv-cache-dtype", "fp8", "--served-model-name", "m", "--port", "0"});
  EXPECT_TRUE(s.model_opts.emulate_bf16_activations);
  ASSERT_TRUE(s.server.seed);
  EXPECT_EQ(*s.server.seed, 7u);
  EXPECT_EQ(s.engine.max_num_seqs, 12);
  EXPECT_EQ(s.engine.max_step_tokens, 2048);
  EXPECT_EQ(s.engine.max_model_len, 4096);
  EXPECT_EQ(s.engine.kv_cache_mb, 2048);
  EXPECT_EQ(s.model_opts.kv_cache_dtype, KvDType::kFP8E4M3);  // vLLM's fp8 is e4m3
  EXPECT_EQ(s.server.served_model_name, "m");
  EXPECT_FALSE(read({kModel}).server.seed);
  EXPECT_FALSE(read({kModel, "--dtype", "float32"}).model_opts.emulate_bf16_activations);
  EXPECT_FALSE(read({kModel, "--dtype", "auto"}).model_opts.emulate_bf16_activations);
  EXPECT_EQ(read({kModel, "--kv-cache-memory", "300"}).engine.kv_cache_mb, 300);
  EXPECT_EQ(read({kModel, "--kv-cache-memory-bytes", "536870912"}).engine.kv_cache_mb, 512);
  EXPECT_DOUBLE_EQ(read({kModel, "--gpu-memory-utilization", "0.5"}).memory_fraction, 0.5);
  // Request logging: uvicorn's info level is its access log; --disable-log-requests is the default.
  EXPECT_TRUE(read({kModel, "--uvicorn-log-level", "info"}).server.log_requests);
  EXPECT_FALSE(read({kModel, "--uvicorn-log-level", "warning"}).server.log_requests);
  EXPECT_TRUE(read({kModel, "--enable-log-requests"}).server.log_requests);
  EXPECT_FALSE(read({kModel, "--disable-log-requests", "--uvicorn-log-level", "debug"}).server.log_requests);
  EXPECT_EQ(read({kModel, "--override-generation-config", R"({"temperature": 0.5})"}).override_generation_config,
            R"({"temperature": 0.5})");
}

TEST(ServeFlags, AcceptedWithANote) {
  ServeSettings s = read({kModel, "--trust-remote-code", "--language-model-only", "--max-logprobs", "5",
                          "--enable-prefix-caching", "--speculative-config", R"({"method":"ngram","enforce_eager":true})"});
  EXPECT_TRUE(noted(s, "--trust-remote-code: accepted; blockspec runs no code"));
  EXPECT_TRUE(noted(s, "--language-model-only: accepted"));
  EXPECT_EQ(s.server.max_logprobs, 5);  // honoured, no note
  EXPECT_EQ(read({kModel}).server.max_logprobs, 20);
  EXPECT_EQ(read({kModel, "--max-logprobs", "-1"}).server.max_logprobs, 1 << 30);
  EXPECT_TRUE(s.engine.enable_prefix_caching);  // honoured, no note
  EXPECT_TRUE(read({kModel}).engine.enable_prefix_caching);  // vLLM's default
  EXPECT_FALSE(read({kModel, "--no-enable-prefix-caching"}).engine.enable_prefix_caching);
  EXPECT_TRUE(noted(s, "--speculative-config: \"enforce_eager\" accepted, no effect here"));
  EXPECT_EQ(s.notes.size(), 3u);
  EXPECT_TRUE(read({kModel, "--no-enable-prefix-caching"}).notes.empty());
  // An explicit KV budget wins over the memory fraction (as in vLLM), and says so.
  s = read({kModel, "--gpu-memory-utilization", "0.9", "--kv-cache-memory", "64"});
  EXPECT_EQ(s.memory_fraction, 0);
  EXPECT_EQ(s.engine.kv_cache_mb, 64);
  EXPECT_TRUE(noted(s, "--gpu-memory-utilization: the KV budget is the one --kv-cache-memory"));
}

TEST(ServeFlags, BadValuesAreOneLineNamingTheFlag) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{kModel, "--dtype", "float16"}, "--dtype float16: blockspec has no fp16 compute"},
      {{kModel, "--dtype", "int8"}, "--dtype: \"int8\""},
      {{kModel, "--dtype", "bfloat16", "--activations", "f32"}, "contradicts --activations"},
      {{kModel, "--gpu-memory-utilization", "1.5"}, "--gpu-memory-utilization must be in (0, 1]"},
      {{kModel, "--gpu-memory-utilization", "x"}, "--gpu-memory-utilization expects a number"},
      {{kModel, "--kv-cache-memory-bytes", "lots"}, "--kv-cache-memory-bytes: expected a positive size"},
      {{kModel, "--kv-cache-memory", "1", "--kv-cache-memory-bytes", "1G"}, "give one"},
      {{kModel, "--uvicorn-log-level", "loud"}, "--uvicorn-log-level: \"loud\""},
      {{kModel, "--disable-log-requests", "--log-requests"}, "contradicts"},
      {{kModel, "--enable-prefix-caching", "--no-enable-prefix-caching"}, "contradicts"},
      {{kModel, "--max-num-batched-tokens", "8"}, "--max-num-batched-tokens must be in [16"},
      {{kModel, "--max-num-seqs", "0"}, "--max-num-seqs must be in [1"},
      {{kModel, "--seed", "-3"}, "--seed expects a non-negative integer"},
      {{kModel, "--override-generation-config", "[1]"}, "--override-generation-config: expected a JSON object"},
      {{kModel, "--kv-cache-dtype", "float16"}, "no fp16 KV cache"},
      {{kModel, "--mamba-ssm-cache-dtype", "bfloat16"}, "--mamba-ssm-cache-dtype"},
      {{kModel, "--chat-template", "/no/such/file"}, "--chat-template: /no/such/file does not exist"},
  };
  for (const auto& [argv, want] : cases) {
    const std::string e = error_of(argv);
    EXPECT_NE(e.find(want), std::string::npos) << argv[1] << " -> " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

TEST(ServeFlags, GpuMemoryUtilizationBudget) {
  // 0.5 of 8 GiB less 1 GiB of weights and 0.5 GiB of state: 2.5 GiB of KV.
  EXPECT_EQ(kv_budget_bytes(0.5, int64_t{8} << 30, int64_t{1} << 30, int64_t{1} << 29), int64_t{5} << 29);
  try {
    kv_budget_bytes(0.1, int64_t{8} << 30, int64_t{1} << 30, 0);
    ADD_FAILURE() << "no error when the weights take the whole fraction";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("leaves nothing for the KV cache"), std::string::npos) << e.what();
  }
  EXPECT_GT(usable_memory_bytes(), int64_t{1} << 28);
}

TEST(ServeFlags, HelpGroupsFlagsAsVllmDoes) {
  const std::string u = Args::usage("serve", "MODEL", serve_flags());
  size_t last = 0;
  for (const char* g : {"Frontend", "ModelConfig:", "CacheConfig:", "ParallelConfig:", "SchedulerConfig:",
                        "SpeculativeConfig:", "blockspec (CPU):"}) {
    const size_t at = u.find(std::string("\n") + g);
    ASSERT_NE(at, std::string::npos) << g;
    EXPECT_GT(at, last) << g << " out of order";
    EXPECT_EQ(u.find(std::string("\n") + g, at + 1), std::string::npos) << g << " twice";
    last = at;
  }
  EXPECT_GT(u.find("--kv-cache-dtype"), u.find("CacheConfig:"));
  EXPECT_LT(u.find("--kv-cache-dtype"), u.find("ParallelConfig:"));
}

}  // namespace
}  // namespace blockspec
