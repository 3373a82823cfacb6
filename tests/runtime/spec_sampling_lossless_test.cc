// Sampled speculative decoding is lossless through the real loop
// (generate_speculative) on the qwen3-tiny-f32 target: the joint
// distribution of the first L generated tokens equals plain sampling's, for
// every proposal kind the loop meets (DFlash probabilistic drafting -> dense
// q; DFlash greedy drafting at T > 0 -> one-hot q; DFlash2 -> candidate q;
// n-gram -> one-hot q), at T 0.7 / 1.0 with top-k and top-p. The reference is
// exact: p(t1), p(t2 | t1), ... enumerated over the support from the target's
// own sampling_probs. N speculative samples (seed = i) are compared with it by
// a chi-square test (cells with expected count < 5 merged); a separate test
// shows the same harness at the same N rejects plain sampling at T 0.7
// against the exact distribution at T 0.8, so it has the power to see a bias.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>

#include "runtime/generate.h"
#include "runtime/speculative.h"
#include "sampling_harness.h"

namespace blockspec {
namespace {

namespace fs = std::filesystem;
using namespace blockspec::testing;  // the chi-square harness

const std::string kTarget = std::string(BS_SOURCE_DIR) + "/tests/fixtures/golden/qwen3-tiny-f32";
class SpecSamplingLossless : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ModelOptions mo;
    mo.n_threads = 1;  // tiny model: thread hand-offs cost more than they save
    model_ = Transformer::load(kTarget, mo).release();
    dir_ = fs::temp_directory_path() / ("bs_spec_sampling_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    testing::write_overlapping_drafters(*model_, dir_.string());
  }
  static void TearDownTestSuite() {
    fs::remove_all(dir_);
    delete model_;
  }

  static std::unique_ptr<Proposer> proposer(const std::string& method, int64_t K, const std::string& draft_sample) {
    SpecConfig c = case_spec(method, K, draft_sample, dir_.string());
    return test_proposer(c, *model_, 256);
  }

  static inline Transformer* model_ = nullptr;
  static inline fs::path dir_;
};

// K = 3 drafts and max_new_tokens K + 2: the first verification pass carries
// all K drafts, and decides tokens 2..K+1 of the compared prefix.
constexpr int64_t kK = 3;

// Every case's speculative samples against the exact distribution of plain sampling.
void check_cases(Transformer& model, const fs::path& dir, const std::vector<Case>& cases) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> prompt = make_prompt(model);
  uint64_t salt = 0;
  for (const Case& c : cases) {
    const auto t1 = std::chrono::steady_clock::now();
    std::vector<int32_t> ctx = prompt;
    Dist want;
    exact(model, ctx, prompt.size(), c.L, c.sp, 1.0, want);
    SpecConfig sc = case_spec(c.method, kK, c.draft_sample, dir.string());
    auto prop = test_proposer(sc, model, 256);
    SpecStats st;
    ++salt;
    const auto count = histogram(kN, c.L, [&](int64_t i) {
      GenerateOptions go;
      go.max_new_tokens = kK + 2, go.stop_at_eos = false, go.sampling = c.sp;
      go.sampling.seed = salt * 1000003 + i;
      const SpecResult r = generate_speculative(model, *prop, kK, prompt, go);
      st.merge(r.stats);
      return r.gen.tokens;
    });
    const Verdict v = chi_square(want, count, kN);
    const double rate = st.num_draft_tokens > 0 ? static_cast<double>(st.num_accepted_tokens) / st.num_draft_tokens : 0;
    const int64_t rejected_drafts = st.acceptance_hist.empty() ? 0 : st.acceptance_hist[0];  // first draft rejected
    std::printf("[sampling] %-7s %-13s %-28s L=%lld cells=%5zu chi2=%7.1f df=%3lld z=%6.2f tv=%.3f drafted=%5lld "
                "accepted=%5lld (%.3f) drafts rejected at d1=%lld tau=%.3f %.2f s\n",
                c.method, c.draft_sample, sp_name(c.sp).c_str(), static_cast<long long>(c.L), want.size(), v.chi2,
                static_cast<long long>(v.df), v.z, v.tv, static_cast<long long>(st.num_draft_tokens),
                static_cast<long long>(st.num_accepted_tokens), rate, static_cast<long long>(rejected_drafts),
                st.mean_acceptance_length(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
    EXPECT_FALSE(v.rejected()) << c.method << " " << c.draft_sample << " " << sp_name(c.sp) << " z " << v.z
                               << " impossible " << v.impossible;
    EXPECT_GT(st.num_accepted_tokens, 0) << "the accept path never ran";
    EXPECT_GT(rejected_drafts, 0) << "the reject path never ran";
  }
  std::printf("[sampling] %.2f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

TEST_F(SpecSamplingLossless, EmittedDistributionEqualsPlainSampling) {
  const SamplingParams topk07 = params(0.7f, 8, 1.0f), topk10 = params(1.0f, 8, 1.0f);
  const SamplingParams topp07 = params(0.7f, 0, 0.9f), topp10 = params(1.0f, 0, 0.9f);
  check_cases(*model_, dir_, {
      {"dflash", "probabilistic", topk07, 3}, {"dflash", "probabilistic", topp10, 2},
      {"dflash", "greedy", topk10, 3},        {"dflash", "greedy", topp07, 2},
      {"dflash2", "probabilistic", topk07, 3}, {"dflash2", "probabilistic", topp10, 2},
      {"ngram", "probabilistic", topk07, 3},  {"ngram", "probabilistic", topp10, 2},
  });
}

// The same on a hybrid Gated-DeltaNet target (tests/fixtures/hybrid/qwen35-serve): every rejected draft rolls
// the recurrent state back (Transformer::commit), and the emitted distribution is still plain sampling's.
TEST(SpecSamplingLosslessHybrid, EmittedDistributionEqualsPlainSampling) {
  ModelOptions mo;
  mo.n_threads = 1;
  auto model = Transformer::load(std::string(BS_SOURCE_DIR) + "/tests/fixtures/hybrid/qwen35-serve", mo);
  const fs::path dir = fs::temp_directory_path() / ("bs_spec_sampling_hybrid_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  testing::write_overlapping_drafters(*model, dir.string());
  check_cases(*model, dir, {{"dflash", "probabilistic", params(0.7f, 8, 1.0f), 3},
                            {"dflash2", "probabilistic", params(1.0f, 0, 0.9f), 2},
                            {"dflash", "greedy", params(1.0f, 8, 1.0f), 3}});
  fs::remove_all(dir);
}

// Power: the harness at the same N rejects plain sampling at T 0.7 measured
// against the exact distribution at T 0.8 (and accepts it against T 0.7).
TEST_F(SpecSamplingLossless, ChiSquareDetectsABiasedSampler) {
  const std::vector<int32_t> prompt = make_prompt(*model_);
  for (const SamplingParams& sp : {params(0.7f, 8, 1.0f), params(0.7f, 0, 0.9f)}) {
    const int64_t L = sp.top_k > 0 ? 3 : 2;
    const auto count = histogram(kN, L, [&](int64_t i) {
      GenerateOptions go;
      go.max_new_tokens = L, go.stop_at_eos = false, go.sampling = sp;
      go.sampling.seed = 777000 + i;
      return generate(*model_, prompt, go).tokens;
    });
    SamplingParams hot = sp;
    hot.temperature = 0.8f;
    std::vector<int32_t> ctx = prompt;
    Dist right, wrong;
    exact(*model_, ctx, prompt.size(), L, sp, 1.0, right);
    exact(*model_, ctx, prompt.size(), L, hot, 1.0, wrong);
    const Verdict vr = chi_square(right, count, kN), vw = chi_square(wrong, count, kN);
    std::printf("[power] plain %s vs exact T=0.7: z=%6.2f; vs exact T=0.8: chi2=%7.1f df=%lld z=%6.2f impossible=%lld\n",
                sp_name(sp).c_str(), vr.z, vw.chi2, static_cast<long long>(vw.df), vw.z,
                static_cast<long long>(vw.impossible));
    EXPECT_FALSE(vr.rejected());
    EXPECT_TRUE(vw.rejected()) << "the harness cannot tell T 0.7 from T 0.8 at N " << kN;
  }
}

// A proposal bug the loop could have: DFlash drafts sampled from q but
// verified against another q (Mislabeled, sampling_harness.h). The same
// harness, N and z threshold must reject the emitted distribution.
TEST_F(SpecSamplingLossless, ChiSquareDetectsAMislabeledProposal) {
  const std::vector<int32_t> prompt = make_prompt(*model_);
  const SamplingParams sp = params(1.0f, 8, 1.0f);
  std::vector<int32_t> ctx = prompt;
  Dist want;
  exact(*model_, ctx, prompt.size(), 3, sp, 1.0, want);
  auto inner = proposer("dflash", kK, "probabilistic");
  Mislabeled bad(*inner);
  const auto count = histogram(kN, 3, [&](int64_t i) {
    GenerateOptions go;
    go.max_new_tokens = kK + 2, go.stop_at_eos = false, go.sampling = sp;
    go.sampling.seed = 555000 + i;
    return generate_speculative(*model_, bad, kK, prompt, go).gen.tokens;
  });
  const Verdict v = chi_square(want, count, kN);
  std::printf("[power] dflash sampled drafts verified against a uniform q, %s: chi2=%7.1f df=%lld z=%6.2f\n",
              sp_name(sp).c_str(), v.chi2, static_cast<long long>(v.df), v.z);
  EXPECT_TRUE(v.rejected()) << "the harness cannot see a mislabeled proposal at N " << kN;
}

}  // namespace
}  // namespace blockspec
