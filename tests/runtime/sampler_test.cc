#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "base/error.h"

namespace blockspec {
namespace {

// sample_token with its own seeded stream, as a request holds one.
struct Sampler {
  explicit Sampler(const SamplingParams& p) : sp(p), rng(p.seed) {}
  int32_t sample(const float* logits, int64_t vocab) { return sample_token(logits, vocab, sp, rng, probs); }
  SamplingParams sp;
  Rng rng;
  std::vector<float> probs;
};

TEST(Sampler, GreedyIsArgmaxFirstOfTies) {
  std::vector<float> l = {0.1f, 3.0f, 3.0f, -1.0f};
  Sampler s(SamplingParams{});
  EXPECT_EQ(s.sample(l.data(), 4), 1);
}

TEST(Sampler, TopKAndTopPMasks) {
  std::vector<float> l = {2.0f, 1.0f, 0.0f, -1.0f};
  std::vector<float> p;
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 2;
  sampling_probs(l.data(), 4, sp, p);
  EXPECT_NEAR(p[0], 1 / (1 + std::exp(-1.0)), 1e-6);
  EXPECT_EQ(p[2], 0.0f);
  EXPECT_EQ(p[3], 0.0f);
  sp.top_k = 0;
  sp.top_p = 0.5f;  // the top token alone has mass 0.64 >= 0.5
  sampling_probs(l.data(), 4, sp, p);
  EXPECT_FLOAT_EQ(p[0], 1.0f);
  sp.top_p = 0.9f;  // needs the top three (0.64, 0.88, 0.96)
  sampling_probs(l.data(), 4, sp, p);
  EXPECT_GT(p[2], 0.0f);
  EXPECT_EQ(p[3], 0.0f);
}

TEST(Sampler, SeededAndReproducible) {
  std::vector<float> l = {0.5f, 0.4f, 0.3f, 0.2f, 0.1f};
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.seed = 42;
  Sampler a(sp), b(sp);
  std::vector<int32_t> ra, rb;
  for (int i = 0; i < 50; ++i) {
    ra.push_back(a.sample(l.data(), 5));
    rb.push_back(b.sample(l.data(), 5));
  }
  EXPECT_EQ(ra, rb);
  sp.seed = 43;
  Sampler c(sp);
  std::vector<int32_t> rc;
  for (int i = 0; i < 50; ++i) rc.push_back(c.sample(l.data(), 5));
  EXPECT_NE(ra, rc);
}

TEST(Sampler, FrequenciesFollowSoftmax) {
  // Chi-square goodness of fit over 20000 draws; df = 3, critical 16.27 at p=0.001.
  std::vector<float> l = {1.0f, 0.0f, -0.5f, 0.7f};
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.seed = 7;
  Sampler s(sp);
  std::vector<float> p;
  sampling_probs(l.data(), 4, sp, p);
  std::map<int, int> cnt;
  const int n = 20000;
  for (int i = 0; i < n; ++i) cnt[s.sample(l.data(), 4)]++;
  double chi = 0;
  for (int i = 0; i < 4; ++i) chi += std::pow(cnt[i] - n * p[i], 2) / (n * p[i]);
  EXPECT_LT(chi, 16.27);
}

TEST(Sampler, RejectsBadParams) {
  SamplingParams sp;
  sp.temperature = -1;
  EXPECT_THROW(validate_sampling(sp), Error);
  sp.temperature = 1;
  sp.top_p = 0;
  EXPECT_THROW(validate_sampling(sp), Error);
  sp.top_p = 1;
  sp.top_k = -2;
  EXPECT_THROW(validate_sampling(sp), Error);
}

}  // namespace
}  // namespace blockspec
