// Sampled speculative decoding is lossless through the serving engine's step
// (the path `serve` runs), at batch sizes 1 and 4: N requests with seeds
// 0..N-1 go through an Engine with a fixed K, and the joint distribution of
// their first L tokens is compared with the exact plain-sampling
// distribution by the chi-square harness of sampling_harness.h. At batch 4
// each step verifies four sequences with different seeds in one forward, so
// a sequence that drew from another's random stream, or a verify row read at
// the wrong offset, shows up as a biased distribution. The same harness
// rejects the engine when its acceptance rule is given a wrong proposal
// distribution (the Mislabeled proposer), so it has the power to see a
// broken rule.
#include <gtest/gtest.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>

#include "runtime/engine.h"
#include "sampling_harness.h"

namespace blockspec {
namespace {

namespace fs = std::filesystem;
using namespace blockspec::testing;  // the chi-square harness

const std::string kTarget = std::string(BS_SOURCE_DIR) + "/tests/fixtures/golden/qwen3-tiny-f32";
constexpr int64_t kK = 3;  // drafts per step; requests ask for kK + 2 tokens

class EngineSamplingLossless : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = Transformer::load(kTarget, options()).release();
    dir_ = fs::temp_directory_path() / ("bs_engine_sampling_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    write_overlapping_drafters(*model_, dir_.string());
  }
  static void TearDownTestSuite() {
    fs::remove_all(dir_);
    delete model_;
  }
  static ModelOptions options() {
    ModelOptions mo;
    mo.n_threads = 1;  // tiny model: thread hand-offs cost more than they save
    return mo;
  }

  static SpecConfig spec(const std::string& method, const std::string& draft_sample) {
    return case_spec(method, kK, draft_sample, dir_.string());
  }

  struct Run {
    std::map<std::vector<int32_t>, int64_t> count;  // first L tokens -> requests
    SpecStats stats;
  };
  // kN requests with seeds salt * 1000003 + i through one engine of
  // max_num_seqs = batch (all submitted at once, so every step is full).
  static Run run(const SpecConfig& sc, int64_t batch, const SamplingParams& sp, int64_t L, uint64_t salt,
                 std::function<std::unique_ptr<Proposer>(std::unique_ptr<Proposer>)> wrap = {}) {
    EngineOptions eo;
    eo.max_num_seqs = batch;
    eo.spec = sc;
    eo.wrap_proposer = std::move(wrap);
    auto eng_owner = test_engine(Transformer::load(kTarget, options()), eo);
    Engine& eng = *eng_owner;
    const std::vector<int32_t> prompt = make_prompt(*model_);
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::vector<int32_t>> out(kN);
    int64_t done = 0;
    for (int64_t i = 0; i < kN; ++i) {
      RequestParams rp;
      rp.prompt = prompt;
      rp.max_tokens = kK + 2;
      rp.ignore_eos = true;
      rp.sampling = sp;
      rp.sampling.seed = salt * 1000003 + static_cast<uint64_t>(i);
      eng.submit(rp, [&, i](const TokenEvent& ev) {
        std::lock_guard<std::mutex> lock(mu);
        out[i].insert(out[i].end(), ev.tokens.begin(), ev.tokens.end());
        if (ev.finished) {
          ++done;
          cv.notify_all();
        }
      });
    }
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return done == kN; });
    }
    Run r;
    r.count = histogram(kN, L, [&](int64_t i) { return out[i]; });
    r.stats = eng.metrics().spec;
    return r;
  }

  static inline Transformer* model_ = nullptr;
  static inline fs::path dir_;
};

TEST_F(EngineSamplingLossless, EmittedDistributionEqualsPlainSamplingAtBatch1And4) {
  const std::vector<int32_t> prompt = make_prompt(*model_);
  const std::vector<Case> cases = {
      {"dflash", "probabilistic", params(0.7f, 8, 1.0f), 3},  // dense q
      {"dflash2", "probabilistic", params(1.0f, 0, 0.9f), 2},  // candidate q
      {"ngram", "probabilistic", params(0.7f, 8, 1.0f), 3},  // one-hot q
  };
  uint64_t salt = 100;
  for (const Case& c : cases) {
    std::vector<int32_t> ctx = prompt;
    Dist want;
    exact(*model_, ctx, prompt.size(), c.L, c.sp, 1.0, want);
    for (int64_t batch : {1, 4}) {
      const Run r = run(spec(c.method, c.draft_sample), batch, c.sp, c.L, ++salt);
      const Verdict v = chi_square(want, r.count, kN);
      const int64_t rejected_at_d1 = r.stats.acceptance_hist.empty() ? 0 : r.stats.acceptance_hist[0];
      std::printf("[engine sampling] %-7s %-28s batch %lld L=%lld cells=%5zu chi2=%7.1f df=%3lld z=%6.2f "
                  "drafted=%5lld accepted=%5lld rejected at d1=%lld\n",
                  c.method, sp_name(c.sp).c_str(), static_cast<long long>(batch), static_cast<long long>(c.L),
                  want.size(), v.chi2, static_cast<long long>(v.df), v.z,
                  static_cast<long long>(r.stats.num_draft_tokens), static_cast<long long>(r.stats.num_accepted_tokens),
                  static_cast<long long>(rejected_at_d1));
      EXPECT_FALSE(v.rejected()) << c.method << " batch " << batch << " z " << v.z << " impossible " << v.impossible;
      EXPECT_GT(r.stats.num_accepted_tokens, 0) << c.method << " batch " << batch << ": the accept path never ran";
      EXPECT_GT(rejected_at_d1, 0) << c.method << " batch " << batch << ": the reject path never ran";
    }
  }
}

TEST_F(EngineSamplingLossless, ChiSquareRejectsAnEngineVerifyingAgainstTheWrongProposal) {
  const std::vector<int32_t> prompt = make_prompt(*model_);
  const SamplingParams sp = params(1.0f, 8, 1.0f);
  std::vector<int32_t> ctx = prompt;
  Dist want;
  exact(*model_, ctx, prompt.size(), 3, sp, 1.0, want);
  for (int64_t batch : {1, 4}) {
    const Run r = run(spec("dflash", "probabilistic"), batch, sp, 3, 900 + static_cast<uint64_t>(batch),
                      [](std::unique_ptr<Proposer> p) { return std::make_unique<Mislabeled>(std::move(p)); });
    const Verdict v = chi_square(want, r.count, kN);
    std::printf("[engine power] batch %lld, dflash drafts verified against a uniform q: chi2=%7.1f df=%lld z=%6.2f\n",
                static_cast<long long>(batch), v.chi2, static_cast<long long>(v.df), v.z);
    EXPECT_TRUE(v.rejected()) << "batch " << batch << ": the harness cannot see a broken acceptance at N " << kN;
  }
}

}  // namespace
}  // namespace blockspec
