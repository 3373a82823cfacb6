// Greedy speculative decoding is lossless through the real loop
// (generate_speculative) on the qwen3-tiny-f32 target: for DFlash (random
// drafter, mixed causal sliding + bidirectional full layers, window 4 so the
// context ring wraps), DFlash2 (random, all sliding, is_causal false) and
// n-gram lookup, at K = 1, 3, 7, 15, the generated tokens equal plain greedy
// generate() token for token, and the acceptance statistics add up. A
// teacher-forced proposer (the target's own greedy continuation with one
// token corrupted) makes acceptance long and partial, so the accept path, the
// cache crop and the drafter bookkeeping after a partial accept all run with
// known accepted counts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>

#include "../spec_setup.h"
#include "model/dflash.h"
#include "random_drafter.h"
#include "teacher_forced.h"
#include "runtime/generate.h"
#include "runtime/speculative.h"

namespace blockspec {
namespace {

namespace fs = std::filesystem;

const std::string kTarget = std::string(BS_SOURCE_DIR) + "/tests/fixtures/golden/qwen3-tiny-f32";
constexpr int64_t kNew = 48;

// Forwards to an inner proposer and records every draft it returns.
class Recording : public Proposer {
 public:
  explicit Recording(Proposer& inner) : inner_(inner) {}
  std::string method() const override { return inner_.method(); }
  std::vector<int64_t> tap_layers() const override { return inner_.tap_layers(); }
  void observe(const std::vector<int32_t>& seq, int64_t n_seen, int64_t n_new, const float* taps) override {
    inner_.observe(seq, n_seen, n_new, taps);
  }
  void propose(const std::vector<int32_t>& seq, int64_t k, const SamplingParams& sp, Rng& rng, Draft& out) override {
    inner_.propose(seq, k, sp, rng, out);
    EXPECT_LE(out.size(), k);
    sizes.push_back(out.size());
  }
  void reset() override {
    inner_.reset();
    sizes.clear();
  }
  std::vector<int64_t> sizes;  // per propose call

 private:
  Proposer& inner_;
};

// Stats invariants of one run, given the sizes of the drafts the loop received.
void check_stats(const SpecResult& r, const std::vector<int64_t>& sizes, bool truncated_end) {
  const SpecStats& s = r.stats;
  int64_t sum = 0, nonempty = 0;
  for (int64_t k : sizes) sum += k, nonempty += k > 0;
  EXPECT_EQ(s.num_draft_tokens, sum);
  EXPECT_EQ(s.num_drafts, nonempty);
  EXPECT_LE(s.num_accepted_tokens, s.num_draft_tokens);
  EXPECT_GE(s.num_accepted_tokens, 0);
  int64_t per_pos = 0, hist = 0, hist_acc = 0;
  for (size_t i = 0; i < s.accepted_per_pos.size(); ++i) {
    per_pos += s.accepted_per_pos[i];
    if (i > 0) {
      EXPECT_LE(s.accepted_per_pos[i], s.accepted_per_pos[i - 1]) << "position " << i;
    }
  }
  for (size_t a = 0; a < s.acceptance_hist.size(); ++a) hist += s.acceptance_hist[a], hist_acc += a * s.acceptance_hist[a];
  EXPECT_EQ(hist, s.num_drafts);
  EXPECT_EQ(per_pos, s.num_accepted_tokens);
  EXPECT_EQ(hist_acc, s.num_accepted_tokens);
  // Every verification pass commits accepted + 1 tokens after the first one.
  if (!truncated_end && !r.gen.tokens.empty()) {
    EXPECT_EQ(static_cast<int64_t>(r.gen.tokens.size()), 1 + r.target_passes + s.num_accepted_tokens);
  }
}

class SpecGreedyLossless : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ModelOptions mo;
    mo.n_threads = 1;  // tiny model: thread hand-offs cost more than they save
    model_ = Transformer::load(kTarget, mo).release();
    dir_ = fs::temp_directory_path() / ("bs_spec_greedy_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    testing::RandomDrafterOptions o;
    o.n_layers = 3, o.block_size = 16, o.seed = 11;
    o.layer_types = {"sliding_attention", "full_attention", "sliding_attention"};
    o.sliding_window = 4;
    testing::write_random_drafter((dir_ / "dflash").string(), model_->config(), o);
    testing::RandomDrafterOptions o2;
    o2.dflash2 = true, o2.n_layers = 2, o2.block_size = 16, o2.seed = 12;
    o2.layer_types = {"sliding_attention", "sliding_attention"};
    o2.sliding_window = 6, o2.is_causal = 0, o2.dtype = DType::kBF16;
    testing::write_random_drafter((dir_ / "dflash2").string(), model_->config(), o2);
  }
  static void TearDownTestSuite() {
    fs::remove_all(dir_);
    delete model_;
  }

  static std::unique_ptr<Proposer> proposer(const std::string& method, int64_t K) {
    SpecConfig c = test_spec(method, K, method == "ngram" ? "" : (dir_ / method).string());
    return test_proposer(c, *model_, 512);
  }

  static std::vector<std::vector<int32_t>> prompts() {
    std::mt19937_64 g(7);
    std::vector<std::vector<int32_t>> ps;
    for (int64_t len : {1, 2, 3, 5, 8, 13, 21, 34, 40}) {
      std::vector<int32_t> p;
      for (int64_t i = 0; i < len; ++i) p.push_back(static_cast<int32_t>(g() % 509));
      ps.push_back(p);
    }
    // Repetitive prompts (n-gram lookup finds matches) and a prompt made of the
    // target's own greedy output, which tends to continue its loops.
    std::vector<int32_t> rep;
    for (int i = 0; i < 6; ++i) rep.insert(rep.end(), {17, 254, 3, 99});
    ps.push_back(rep);
    ps.push_back(std::vector<int32_t>(12, 42));
    std::vector<int32_t> abab;
    for (int i = 0; i < 10; ++i) abab.insert(abab.end(), {300, 7});
    ps.push_back(abab);
    GenerateOptions go;
    go.max_new_tokens = 30, go.stop_at_eos = false;
    std::vector<int32_t> self = {5, 6, 7};
    const GenerateResult r = generate(*model_, self, go);
    self.insert(self.end(), r.tokens.begin(), r.tokens.end());
    ps.push_back(self);
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

TEST_F(SpecGreedyLossless, DrafterFilesLoad) {
  for (const char* m : {"dflash", "dflash2"}) {
    auto dm = DraftModel::load((dir_ / m).string(), *model_, {});
    EXPECT_EQ(draft_method_name(dm->config().method), std::string(m));
    EXPECT_EQ(dm->config().block_size, 16);
  }
  auto d1 = DraftModel::load((dir_ / "dflash").string(), *model_, {});
  EXPECT_EQ(d1->config().layer_causal, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(d1->config().layer_window, (std::vector<int64_t>{4, 0, 4}));
  auto d2 = DraftModel::load((dir_ / "dflash2").string(), *model_, {});
  EXPECT_EQ(d2->config().layer_causal, (std::vector<bool>{false, false}));
  EXPECT_EQ(d2->config().conv_group_size, 16);
}

TEST_F(SpecGreedyLossless, EveryMethodAndKMatchesPlainGreedy) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto ps = prompts();
  ASSERT_GE(ps.size(), 12u);
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : ps) want.push_back(generate(*model_, p, greedy(kNew)).tokens);
  for (const char* method : {"dflash", "dflash2", "ngram"}) {
    SpecStats all;
    for (int64_t K : {1, 3, 7, 15}) {
      auto inner = proposer(method, K);
      Recording rec(*inner);
      SpecStats st;
      for (size_t i = 0; i < ps.size(); ++i) {
        SCOPED_TRACE(std::string(method) + " K=" + std::to_string(K) + " prompt " + std::to_string(i));
        const SpecResult r = generate_speculative(*model_, rec, K, ps[i], greedy(kNew));
        ASSERT_EQ(r.gen.tokens, want[i]);
        EXPECT_EQ(r.gen.finish_reason, "length");
        for (int64_t k : rec.sizes) EXPECT_LE(k, K);
        check_stats(r, rec.sizes, false);
        st.merge(r.stats);
      }
      std::printf("[greedy] %-8s K=%-2lld drafts=%4lld drafted=%5lld accepted=%4lld mean acceptance length %.3f\n",
                  method, static_cast<long long>(K), static_cast<long long>(st.num_drafts),
                  static_cast<long long>(st.num_draft_tokens), static_cast<long long>(st.num_accepted_tokens),
                  st.mean_acceptance_length());
      all.merge(st);
    }
    if (std::string(method) == "ngram") {
      EXPECT_GT(all.mean_acceptance_length(), 1.0) << "n-gram never accepted";
    }
  }
  std::printf("[greedy] %.2f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

TEST_F(SpecGreedyLossless, TeacherForcedPartialAcceptance) {
  const auto ps = prompts();
  const int64_t V = model_->config().vocab_size;
  for (int64_t K : {1, 3, 7, 15}) {
    SpecStats st;
    for (size_t i = 0; i < ps.size(); ++i) {
      SCOPED_TRACE("K=" + std::to_string(K) + " prompt " + std::to_string(i));
      const std::vector<int32_t> more = generate(*model_, ps[i], greedy(kNew + 15)).tokens;
      const std::vector<int32_t> out(more.begin(), more.begin() + kNew);
      std::vector<int32_t> ref = ps[i];
      ref.insert(ref.end(), more.begin(), more.end());
      testing::TeacherForced tf(ref, V, 100 * K + i, static_cast<int64_t>(ps[i].size()) + kNew);
      Recording rec(tf);
      const SpecResult r = generate_speculative(*model_, rec, K, ps[i], greedy(kNew));
      ASSERT_EQ(r.gen.tokens, out);
      EXPECT_EQ(r.stats.num_accepted_tokens, tf.expected_accepted);
      check_stats(r, rec.sizes, false);
      st.merge(r.stats);
    }
    std::printf("[teacher-forced] K=%-2lld drafts=%4lld accepted=%5lld mean acceptance length %.3f\n",
                static_cast<long long>(K), static_cast<long long>(st.num_drafts),
                static_cast<long long>(st.num_accepted_tokens), st.mean_acceptance_length());
    EXPECT_GT(st.mean_acceptance_length(), 1.0 + 0.3 * K);
  }
}

TEST_F(SpecGreedyLossless, StopAtEosInsideAcceptedSpan) {
  const auto ps = prompts();
  const int64_t V = model_->config().vocab_size;
  int checked = 0;
  for (size_t i = 0; i < ps.size(); ++i) {
    const std::vector<int32_t> out = generate(*model_, ps[i], greedy(kNew)).tokens;
    // The eos: the token at output position 9; plain generate stops at its first occurrence.
    GenerateOptions go = greedy(kNew);
    go.stop_at_eos = true;
    go.eos_ids = {out[9]};
    const GenerateResult want = generate(*model_, ps[i], go);
    ASSERT_EQ(want.finish_reason, "stop");
    std::vector<int32_t> ref = ps[i];
    ref.insert(ref.end(), out.begin(), out.end());
    for (const char* method : {"teacher", "ngram", "dflash", "dflash2"}) {
      for (int64_t K : {3, 15}) {
        SCOPED_TRACE(std::string(method) + " K=" + std::to_string(K) + " prompt " + std::to_string(i));
        std::unique_ptr<Proposer> p =
            std::string(method) == "teacher"
                ? std::make_unique<testing::TeacherForced>(ref, V, i, static_cast<int64_t>(ps[i].size()) + kNew, false)
                : proposer(method, K);
        Recording rec(*p);
        const SpecResult r = generate_speculative(*model_, rec, K, ps[i], go);
        EXPECT_EQ(r.gen.tokens, want.tokens);
        EXPECT_EQ(r.gen.finish_reason, "stop");
        if (std::string(method) == "teacher" && K == 15) {  // the eos lies inside the first pass's accepted span
          EXPECT_EQ(r.target_passes, want.tokens.size() > 1 ? 1 : 0);
          EXPECT_LE(want.tokens.size(), 10u);
        }
        check_stats(r, rec.sizes, true);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0);
}

TEST_F(SpecGreedyLossless, ShortBudgetsAndOneTokenPrompt) {
  const std::vector<std::vector<int32_t>> ps = {{42}, {17, 254, 3, 99, 17, 254, 3, 99, 17, 254}};
  for (const auto& p : ps) {
    const std::vector<int32_t> out = generate(*model_, p, greedy(20 + 15)).tokens;
    std::vector<int32_t> ref = p;
    ref.insert(ref.end(), out.begin(), out.end());
    for (const char* method : {"teacher", "ngram", "dflash", "dflash2"}) {
      for (int64_t K : {1, 3, 7, 15}) {
        for (int64_t n : {0, 1, 2, 3, 5, 8, 16}) {
          if (n > K + 1 && n != 16) continue;  // budgets below K + 1, and one above
          SCOPED_TRACE(std::string(method) + " K=" + std::to_string(K) + " n=" + std::to_string(n) + " prompt len " +
                       std::to_string(p.size()));
          std::unique_ptr<Proposer> pr = std::string(method) == "teacher"
                                             ? std::make_unique<testing::TeacherForced>(ref, model_->config().vocab_size, n,
                                                                               static_cast<int64_t>(p.size()) + n)
                                             : proposer(method, K);
          Recording rec(*pr);
          const SpecResult r = generate_speculative(*model_, rec, K, p, greedy(n));
          EXPECT_EQ(r.gen.tokens, std::vector<int32_t>(out.begin(), out.begin() + n));
          EXPECT_EQ(r.gen.finish_reason, "length");
          check_stats(r, rec.sizes, false);
          if (n <= 1) {
            EXPECT_EQ(r.target_passes, 0);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace blockspec
