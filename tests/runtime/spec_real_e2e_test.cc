// Greedy speculative decoding is lossless on a real pretrained model
// (SmolLM2-135M GGUF, fetched by scripts/fetch_models.sh; CI has it): through
// generate_speculative, n-gram lookup at K = 1, 3, 7, 15 and random DFlash /
// DFlash2 drafters written for SmolLM2's shape (hidden 576) produce exactly
// the tokens of plain greedy generate() on the three real-text prompts of the
// golden fixture (chat, plain text, code), 32 tokens each; so does a
// teacher-forced proposer (the greedy continuation with one corrupted token)
// whose long accepted spans are verified by multi-token target passes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "../spec_setup.h"
#include "formats/safetensors.h"
#include "random_drafter.h"
#include "runtime/generate.h"
#include "runtime/speculative.h"

namespace blockspec {
namespace {

namespace fs = std::filesystem;

// Proposes the plain greedy continuation `ref` (prompt + output) with one
// token at a random offset c in [0, k] corrupted (c == k: none), so each pass
// must accept exactly c drafts: long accepted spans, verified by multi-token
// target passes, on real weights.
class TeacherForced : public Proposer {
 public:
  TeacherForced(std::vector<int32_t> ref, int64_t V, uint64_t seed) : ref_(std::move(ref)), V_(V), gen_(seed) {}
  std::string method() const override { return "teacher-forced"; }
  void observe(const std::vector<int32_t>&, int64_t, int64_t, const float*) override {}
  void propose(const std::vector<int32_t>& seq, int64_t k, const SamplingParams&, Rng&, Draft& out) override {
    out.clear();
    const int64_t n = static_cast<int64_t>(seq.size()), c = std::uniform_int_distribution<int64_t>(0, k)(gen_);
    for (int64_t i = 0; i < k && n + i < static_cast<int64_t>(ref_.size()); ++i)
      out.tokens.push_back(i == c ? static_cast<int32_t>((ref_[n + i] + 1) % V_) : ref_[n + i]);
    expected += std::min<int64_t>(c, out.size());
  }
  void reset() override { expected = 0; }
  int64_t expected = 0;  // drafts that must be accepted

 private:
  std::vector<int32_t> ref_;
  int64_t V_;
  std::mt19937_64 gen_;
};

TEST(SpecRealModels, SmolLM2GreedySpeculationEqualsPlainGreedy) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string model_path = test_cache_dir() + "/models/smollm2.gguf";
  ASSERT_TRUE(fs::exists(model_path)) << model_path << " is missing: run scripts/fetch_models.sh smollm2";
  ModelOptions mo;
  mo.n_threads = 1;  // robust timing on shared CI cores (a pool over busy cores stalls on every hand-off)
  auto model = Transformer::load(model_path, mo);
  // Token ids of the golden fixture's prompts (tokenized by HF from the same GGUF).
  SafetensorsFile g(std::string(BS_SOURCE_DIR) + "/tests/fixtures/real/smollm2.golden.safetensors");
  std::vector<std::vector<int32_t>> prompts;
  for (int p = 0; p < std::stoi(g.metadata().at("n_prompts")); ++p) {
    Tensor ids = g.tensor("p" + std::to_string(p) + ".input_ids");
    prompts.emplace_back(ids.ptr<int32_t>(), ids.ptr<int32_t>() + ids.numel());
  }
  ASSERT_EQ(prompts.size(), 3u);

  const fs::path dir = fs::temp_directory_path() / ("bs_spec_real_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  testing::RandomDrafterOptions o;  // small: 2 layers, 4 heads x 64, window 8 on the causal sliding layer
  o.n_layers = 2, o.n_heads = 4, o.n_kv_heads = 2, o.head_dim = 64, o.intermediate_size = 256;
  o.layer_types = {"sliding_attention", "full_attention"};
  o.sliding_window = 8, o.seed = 31, o.weight_std = 0.05f;
  testing::write_random_drafter((dir / "dflash").string(), model->config(), o);
  testing::RandomDrafterOptions o2 = o;
  o2.dflash2 = true, o2.layer_types = {"sliding_attention", "sliding_attention"}, o2.is_causal = 0;
  o2.conv_group_size = 16, o2.selector_rank = 16, o2.selector_top_k = 8, o2.dtype = DType::kBF16, o2.seed = 32;
  testing::write_random_drafter((dir / "dflash2").string(), model->config(), o2);

  GenerateOptions go;
  go.max_new_tokens = 32, go.stop_at_eos = false;
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(generate(*model, p, go).tokens);

  struct Run {
    const char* method;
    int64_t K;
  };
  for (const Run& run : {Run{"ngram", 1}, Run{"ngram", 3}, Run{"ngram", 7}, Run{"ngram", 15}, Run{"dflash", 3},
                         Run{"dflash", 15}, Run{"dflash2", 7}, Run{"dflash2", 15}}) {
    const auto t1 = std::chrono::steady_clock::now();
    const std::string method = run.method;
    SpecConfig c = test_spec(method, run.K, method == "ngram" ? "" : (dir / method).string());
    auto prop = test_proposer(c, *model, 256);
    SpecStats st;
    int64_t passes = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      SCOPED_TRACE(std::string(run.method) + " K=" + std::to_string(run.K) + " prompt " + std::to_string(i));
      const SpecResult r = generate_speculative(*model, *prop, run.K, prompts[i], go);
      EXPECT_EQ(r.gen.tokens, want[i]);
      EXPECT_EQ(static_cast<int64_t>(r.gen.tokens.size()), 1 + r.target_passes + r.stats.num_accepted_tokens);
      st.merge(r.stats);
      passes += r.target_passes;
    }
    std::printf("[real spec] smollm2 %-7s K=%-2lld target passes=%3lld drafted=%4lld accepted=%3lld mean acceptance "
                "length %.3f  %.2f s\n",
                run.method, static_cast<long long>(run.K), static_cast<long long>(passes),
                static_cast<long long>(st.num_draft_tokens), static_cast<long long>(st.num_accepted_tokens),
                st.mean_acceptance_length(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
  }
  for (int64_t K : {3, 15}) {
    const auto t1 = std::chrono::steady_clock::now();
    SpecStats st;
    for (size_t i = 0; i < prompts.size(); ++i) {
      SCOPED_TRACE("teacher-forced K=" + std::to_string(K) + " prompt " + std::to_string(i));
      std::vector<int32_t> ref = prompts[i];
      ref.insert(ref.end(), want[i].begin(), want[i].end());
      TeacherForced tf(ref, model->config().vocab_size, 40 + K + i);
      const SpecResult r = generate_speculative(*model, tf, K, prompts[i], go);
      EXPECT_EQ(r.gen.tokens, want[i]);
      EXPECT_EQ(r.stats.num_accepted_tokens, tf.expected);
      st.merge(r.stats);
    }
    std::printf("[real spec] smollm2 teacher-forced K=%-2lld drafted=%4lld accepted=%3lld mean acceptance length %.3f  "
                "%.2f s\n",
                static_cast<long long>(K), static_cast<long long>(st.num_draft_tokens),
                static_cast<long long>(st.num_accepted_tokens), st.mean_acceptance_length(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
    EXPECT_GT(st.mean_acceptance_length(), 1.0 + 0.2 * K);
  }
  fs::remove_all(dir);
  std::printf("[real spec] %.2f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace
}  // namespace blockspec
