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

#include "random_drafter.h"
#include "runtime/generate.h"
#include "runtime/speculative.h"

namespace blockspec {
namespace {

namespace fs = std::filesystem;

const std::string kTarget = std::string(BS_SOURCE_DIR) + "/tests/fixtures/golden/qwen3-tiny-f32";
constexpr int64_t kN = 3000;
constexpr double kZCrit = 4.0;  // Wilson-Hilferty z of chi2/df; one-sided p ~ 3e-5

using Dist = std::map<std::vector<int32_t>, double>;

// Exact joint distribution of the next L tokens after `prompt` under plain sampling with sp.
void exact(Transformer& m, std::vector<int32_t>& ctx, size_t n_prompt, int64_t L, const SamplingParams& sp, double prob,
           Dist& out) {
  if (static_cast<int64_t>(ctx.size() - n_prompt) == L) {
    out[std::vector<int32_t>(ctx.begin() + n_prompt, ctx.end())] = prob;
    return;
  }
  KvCache cache = m.new_cache(static_cast<int64_t>(ctx.size()));
  std::vector<float> logits, p;
  m.prefill(ctx.data(), static_cast<int64_t>(ctx.size()), cache, logits, false);
  const int64_t V = m.config().vocab_size;
  sampling_probs(logits.data(), V, sp, p);
  for (int32_t v = 0; v < V; ++v) {
    if (p[v] <= 0) continue;
    ctx.push_back(v);
    exact(m, ctx, n_prompt, L, sp, prob * p[v], out);
    ctx.pop_back();
  }
}

struct Verdict {
  double chi2 = 0, z = 0, tv = 0;
  int64_t df = 0, impossible = 0;
  bool rejected() const { return impossible > 0 || z > kZCrit; }
};

// Chi-square of counts against expect (N samples), cells with expected count
// < 5 merged into one bucket (folded into the smallest kept cell if that is still < 5).
Verdict chi_square(const Dist& expect, const std::map<std::vector<int32_t>, int64_t>& count, int64_t N) {
  Verdict v;
  std::vector<std::pair<double, int64_t>> buckets;  // (expected, observed)
  double small_e = 0;
  int64_t small_o = 0;
  for (const auto& [seq, c] : count)
    if (!expect.count(seq)) v.impossible += c, v.tv += 0.5 * static_cast<double>(c) / N;
  for (const auto& [seq, p] : expect) {
    auto it = count.find(seq);
    const int64_t o = it == count.end() ? 0 : it->second;
    const double e = p * N;
    v.tv += 0.5 * std::fabs(p - static_cast<double>(o) / N);
    if (e < 5) {
      small_e += e, small_o += o;
    } else {
      buckets.push_back({e, o});
    }
  }
  if (small_e >= 5 || buckets.empty()) {
    buckets.push_back({small_e, small_o});
  } else if (small_e > 0) {
    auto it = std::min_element(buckets.begin(), buckets.end());
    it->first += small_e, it->second += small_o;
  }
  for (auto [e, o] : buckets) v.chi2 += (o - e) * (o - e) / e;
  v.df = static_cast<int64_t>(buckets.size()) - 1;
  const double k = static_cast<double>(std::max<int64_t>(v.df, 1)), a = 2.0 / (9.0 * k);
  v.z = (std::cbrt(v.chi2 / k) - (1 - a)) / std::sqrt(a);
  return v;
}

SamplingParams params(float t, int top_k, float top_p) {
  SamplingParams sp;
  sp.temperature = t, sp.top_k = top_k, sp.top_p = top_p;
  return sp;
}

std::string sp_name(const SamplingParams& sp) {
  char b[64];
  std::snprintf(b, sizeof b, "T=%.1f top_k=%d top_p=%.1f", sp.temperature, sp.top_k, sp.top_p);
  return b;
}

// The prompt: a few tokens and the target's own greedy continuation of them
// (it settles into a loop, so n-gram lookup finds matches that the target
// then samples with high probability).
std::vector<int32_t> make_prompt(Transformer& m) {
  std::vector<int32_t> p = {5, 6, 7};
  GenerateOptions go;
  go.max_new_tokens = 30, go.stop_at_eos = false;
  const GenerateResult r = generate(m, p, go);
  p.insert(p.end(), r.tokens.begin(), r.tokens.end());
  return p;
}

class SpecSamplingLossless : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ModelOptions mo;
    mo.n_threads = 1;  // tiny model: thread hand-offs cost more than they save
    model_ = Transformer::load(kTarget, mo).release();
    dir_ = fs::temp_directory_path() / ("bs_spec_sampling_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    // Weak random layers leave each mask slot's hidden state close to the
    // mask token's embedding, so (tied embeddings) the drafters propose the
    // mask token and its neighbours; the mask token is the one the target
    // emits most in its greedy continuation of the test prompt, so the
    // proposals overlap the target's distribution and are often accepted.
    const std::vector<int32_t> prompt = make_prompt(*model_);
    GenerateOptions go;
    go.max_new_tokens = 16, go.stop_at_eos = false;
    const std::vector<int32_t> cont = generate(*model_, prompt, go).tokens;
    int32_t mask = cont[0];
    for (int32_t t : cont)
      if (std::count(cont.begin(), cont.end(), t) > std::count(cont.begin(), cont.end(), mask)) mask = t;
    testing::RandomDrafterOptions o;
    o.n_layers = 2, o.block_size = 16, o.seed = 21, o.weight_std = kWeightStd, o.mask_token_id = mask;
    o.layer_types = {"sliding_attention", "full_attention"};
    o.sliding_window = 4;
    testing::write_random_drafter((dir_ / "dflash").string(), model_->config(), o);
    testing::RandomDrafterOptions o2;
    o2.dflash2 = true, o2.n_layers = 2, o2.block_size = 16, o2.seed = 22, o2.weight_std = kWeightStd;
    o2.mask_token_id = mask;
    o2.layer_types = {"sliding_attention", "sliding_attention"};
    o2.sliding_window = 8, o2.is_causal = 0, o2.selector_top_k = 8;
    testing::write_random_drafter((dir_ / "dflash2").string(), model_->config(), o2);
  }
  static void TearDownTestSuite() {
    fs::remove_all(dir_);
    delete model_;
  }

  static std::unique_ptr<Proposer> proposer(const std::string& method, int64_t K, const std::string& draft_sample) {
    SpecConfig c;
    c.method = method, c.num_speculative_tokens = K, c.draft_sample_method = draft_sample;
    if (method == "ngram") c.prompt_lookup_min = 1, c.prompt_lookup_max = 3;
    else c.model = (dir_ / method).string();
    return make_proposer(c, *model_, 256);
  }

  static constexpr float kWeightStd = 0.02f;
  static inline Transformer* model_ = nullptr;
  static inline fs::path dir_;
};

struct Case {
  const char* method;
  const char* draft_sample;
  SamplingParams sp;
  int64_t L;  // length of the compared prefix
};

// Counts of the first L tokens of N samples; sample(i) returns one generation with seed i.
template <class F>
std::map<std::vector<int32_t>, int64_t> histogram(int64_t N, int64_t L, F&& sample) {
  std::map<std::vector<int32_t>, int64_t> count;
  for (int64_t i = 0; i < N; ++i) {
    const std::vector<int32_t> t = sample(i);
    ++count[std::vector<int32_t>(t.begin(), t.begin() + std::min<int64_t>(L, t.size()))];
  }
  return count;
}

// K = 3 drafts and max_new_tokens K + 2: the first verification pass carries
// all K drafts, and decides tokens 2..K+1 of the compared prefix.
constexpr int64_t kK = 3;

TEST_F(SpecSamplingLossless, EmittedDistributionEqualsPlainSampling) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> prompt = make_prompt(*model_);
  const SamplingParams topk07 = params(0.7f, 8, 1.0f), topk10 = params(1.0f, 8, 1.0f);
  const SamplingParams topp07 = params(0.7f, 0, 0.9f), topp10 = params(1.0f, 0, 0.9f);
  const std::vector<Case> cases = {
      {"dflash", "probabilistic", topk07, 3}, {"dflash", "probabilistic", topp10, 2},
      {"dflash", "greedy", topk10, 3},        {"dflash", "greedy", topp07, 2},
      {"dflash2", "probabilistic", topk07, 3}, {"dflash2", "probabilistic", topp10, 2},
      {"ngram", "probabilistic", topk07, 3},  {"ngram", "probabilistic", topp10, 2},
  };
  uint64_t salt = 0;
  for (const Case& c : cases) {
    const auto t1 = std::chrono::steady_clock::now();
    std::vector<int32_t> ctx = prompt;
    Dist want;
    exact(*model_, ctx, prompt.size(), c.L, c.sp, 1.0, want);
    auto prop = proposer(c.method, kK, c.draft_sample);
    SpecStats st;
    ++salt;
    const auto count = histogram(kN, c.L, [&](int64_t i) {
      GenerateOptions go;
      go.max_new_tokens = kK + 2, go.stop_at_eos = false, go.sampling = c.sp;
      go.sampling.seed = salt * 1000003 + i;
      const SpecResult r = generate_speculative(*model_, *prop, kK, prompt, go);
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
// verified against another q (uniform over the vocabulary: drafts then pass
// far too often). The same harness, N and z threshold must reject the
// emitted distribution.
class Mislabeled : public Proposer {
 public:
  explicit Mislabeled(Proposer& inner) : inner_(inner) {}
  std::string method() const override { return "mislabeled"; }
  std::vector<int64_t> tap_layers() const override { return inner_.tap_layers(); }
  void observe(const std::vector<int32_t>& seq, int64_t n_seen, int64_t n_new, const float* taps) override {
    inner_.observe(seq, n_seen, n_new, taps);
  }
  void propose(const std::vector<int32_t>& seq, int64_t k, const SamplingParams& sp, Rng& rng, Draft& out) override {
    inner_.propose(seq, k, sp, rng, out);
    ASSERT_EQ(out.q_kind, Draft::Q::kDense);
    std::fill(out.q.begin(), out.q.end(), 1.0f / static_cast<float>(out.q.size() / out.size()));
  }
  void reset() override { inner_.reset(); }

 private:
  Proposer& inner_;
};

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
