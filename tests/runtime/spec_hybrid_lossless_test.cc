// Speculative decoding on a hybrid Gated-DeltaNet target (the tiny random
// Qwen3.5 of tests/fixtures/hybrid, layers L L L F L) is lossless through
// the serving step (generate_speculative: scheduler + ModelRunner, so every
// verify ends in Transformer::commit's state rollback): DFlash and DFlash2
// with random drafters whose taps sit on GDN layers and on the attention
// layer, and n-gram lookup, at K = 1, 3, 7, give plain greedy's tokens; a
// teacher-forced proposer that corrupts one draft at a random offset makes
// every acceptance length 0..K happen with known counts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "../spec_setup.h"
#include "random_drafter.h"
#include "runtime/generate.h"
#include "runtime/speculative.h"
#include "teacher_forced.h"

namespace blockspec {
namespace {

namespace fs = std::filesystem;

const std::string kTarget = std::string(BS_SOURCE_DIR) + "/tests/fixtures/hybrid/qwen35-text-a";
constexpr int64_t kNew = 40;

class SpecHybridLossless : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ModelOptions mo;
    mo.n_threads = 1;
    model_ = Transformer::load(kTarget, mo).release();
    dir_ = fs::temp_directory_path() / ("bs_spec_hybrid_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    testing::RandomDrafterOptions o;
    o.n_layers = 2, o.block_size = 8, o.seed = 21, o.target_layer_ids = {0, 2, 3};  // GDN, GDN, attention
    testing::write_random_drafter((dir_ / "dflash").string(), model_->config(), o);
    testing::RandomDrafterOptions o2;
    o2.dflash2 = true, o2.n_layers = 1, o2.block_size = 8, o2.seed = 22, o2.target_layer_ids = {1, 4};
    o2.layer_types = {"sliding_attention"}, o2.sliding_window = 6, o2.is_causal = 0;
    testing::write_random_drafter((dir_ / "dflash2").string(), model_->config(), o2);
  }
  static void TearDownTestSuite() {
    fs::remove_all(dir_);
    delete model_;
  }
  static std::vector<std::vector<int32_t>> prompts() {
    std::mt19937_64 g(5);
    std::vector<std::vector<int32_t>> ps;
    for (int64_t len : {1, 4, 9, 23}) {
      std::vector<int32_t> p;
      for (int64_t i = 0; i < len; ++i) p.push_back(static_cast<int32_t>(g() % 255));
      ps.push_back(p);
    }
    std::vector<int32_t> rep;  // n-gram lookup finds matches
    for (int i = 0; i < 6; ++i) rep.insert(rep.end(), {17, 254, 3, 99});
    ps.push_back(rep);
    return ps;
  }
  static GenerateOptions greedy(int64_t n) {
    GenerateOptions go;
    go.max_new_tokens = n, go.stop_at_eos = false;
    return go;
  }
  static inline Transformer* model_ = nullptr;
  static inline fs::path dir_;
};

TEST_F(SpecHybridLossless, EveryMethodAndKMatchesPlainGreedy) {
  const auto ps = prompts();
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : ps) want.push_back(generate(*model_, p, greedy(kNew)).tokens);
  for (const char* method : {"dflash", "dflash2", "ngram"}) {
    for (int64_t K : {1, 3, 7}) {
      SpecConfig c = test_spec(method, K, std::string(method) == "ngram" ? "" : (dir_ / method).string());
      auto prop = test_proposer(c, *model_, 512);
      SpecStats st;
      for (size_t i = 0; i < ps.size(); ++i) {
        SCOPED_TRACE(std::string(method) + " K=" + std::to_string(K) + " prompt " + std::to_string(i));
        const SpecResult r = generate_speculative(*model_, *prop, K, ps[i], greedy(kNew));
        ASSERT_EQ(r.gen.tokens, want[i]);
        st.merge(r.stats);
      }
      std::printf("[hybrid greedy] %-7s K=%lld drafts=%lld accepted=%lld\n", method, static_cast<long long>(K),
                  static_cast<long long>(st.num_drafts), static_cast<long long>(st.num_accepted_tokens));
    }
  }
}

TEST_F(SpecHybridLossless, TeacherForcedPartialAcceptance) {
  const auto ps = prompts();
  const int64_t V = model_->config().vocab_size;
  for (int64_t K : {1, 3, 7}) {
    SpecStats st;
    for (size_t i = 0; i < ps.size(); ++i) {
      SCOPED_TRACE("K=" + std::to_string(K) + " prompt " + std::to_string(i));
      const std::vector<int32_t> more = generate(*model_, ps[i], greedy(kNew + 8)).tokens;
      std::vector<int32_t> ref = ps[i];
      ref.insert(ref.end(), more.begin(), more.end());
      testing::TeacherForced tf(ref, V, 31 * K + i, static_cast<int64_t>(ps[i].size()) + kNew);
      const SpecResult r = generate_speculative(*model_, tf, K, ps[i], greedy(kNew));
      ASSERT_EQ(r.gen.tokens, std::vector<int32_t>(more.begin(), more.begin() + kNew));
      EXPECT_EQ(r.stats.num_accepted_tokens, tf.expected_accepted);
      st.merge(r.stats);
    }
    EXPECT_GT(st.mean_acceptance_length(), 1.0 + 0.3 * K);  // long and partial acceptances both ran
    std::printf("[hybrid teacher-forced] K=%lld mean acceptance length %.3f\n", static_cast<long long>(K),
                st.mean_acceptance_length());
  }
}

}  // namespace
}  // namespace blockspec
