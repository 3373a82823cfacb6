// Batched drafting: DraftModel::forward_batch over several sequences, and
// DFlashProposer::propose_together (what the engine runs for all its
// sequences at once), give every sequence bit for bit what it gets drafting
// alone: same hidden states, same drafts, same proposal distributions, over
// two steps (the second appends context, so sliding-window rings wrap), with
// different block lengths and a sequence that brings no new context.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "../spec_setup.h"
#include "kernels/kv_kernels.h"
#include "model/dflash.h"
#include "runtime/dflash_proposer.h"

namespace blockspec {
namespace {

std::string fixture(const std::string& n) { return std::string(BS_SOURCE_DIR) + "/tests/fixtures/dflash/" + n; }

std::vector<float> randv(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class DraftBatch : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ModelOptions mo;
    mo.n_threads = 2;
    target_ = Transformer::load(fixture("target"), mo);
    drafter_ = DraftModel::load(fixture(GetParam()), *target_, DraftOptions{});
  }
  std::unique_ptr<Transformer> target_;
  std::shared_ptr<DraftModel> drafter_;
};

TEST_P(DraftBatch, ForwardBatchEqualsForwardAlone) {
  const DraftConfig& c = drafter_->config();
  const int64_t TH = c.n_taps() * target_->config().hidden_size;
  // Per sequence and step: new context rows and block length k.
  const int64_t n_ctx[2][3] = {{5, 9, 3}, {2, 0, 7}};
  const int64_t ks[2][3] = {{7, 3, 5}, {4, 7, 1}};
  const int32_t anchors[3] = {11, 42, 7};
  std::vector<DraftCache> alone, together;
  for (int j = 0; j < 3; ++j) alone.push_back(drafter_->new_cache(64)), together.push_back(drafter_->new_cache(64));
  for (int step = 0; step < 2; ++step) {
    std::vector<std::vector<float>> feats(3), h_alone(3), h_together(3);
    std::vector<DraftModel::DraftJob> jobs;
    for (int j = 0; j < 3; ++j) {
      feats[j] = randv(n_ctx[step][j] * TH, 100 * step + j);
      drafter_->forward(alone[j], feats[j].data(), n_ctx[step][j], anchors[j] + step, ks[step][j], h_alone[j]);
      jobs.push_back({&together[j], feats[j].data(), n_ctx[step][j], anchors[j] + step, ks[step][j], &h_together[j]});
    }
    drafter_->forward_batch(jobs);
    for (int j = 0; j < 3; ++j) {
      EXPECT_EQ(together[j].size(), alone[j].size());
      EXPECT_TRUE(same_bits(h_together[j], h_alone[j])) << "step " << step << " sequence " << j;
    }
  }
}

TEST_P(DraftBatch, ProposeTogetherEqualsProposeAlone) {
  const int64_t TH = drafter_->config().n_taps() * target_->config().hidden_size;
  for (float temperature : {0.f, 0.8f}) {
    SamplingParams sp;
    sp.temperature = temperature;
    std::vector<std::unique_ptr<DFlashProposer>> alone, together;
    std::vector<std::vector<int32_t>> seqs = {{3, 9, 4, 1, 8}, {5, 6}, {2, 7, 7, 7}};
    for (size_t j = 0; j < seqs.size(); ++j) {
      alone.push_back(std::make_unique<DFlashProposer>(drafter_, 64, false));
      together.push_back(std::make_unique<DFlashProposer>(drafter_, 64, false));
      const int64_t n = static_cast<int64_t>(seqs[j].size()) - 1;  // all but the anchor are committed
      const auto taps = randv(n * TH, 7 + j);
      alone[j]->observe(seqs[j], 0, n, taps.data());
      together[j]->observe(seqs[j], 0, n, taps.data());
    }
    const int64_t ks[3] = {7, 2, 5};
    std::vector<Draft> d_alone(3), d_together(3);
    std::vector<Rng> r_alone, r_together;
    for (int j = 0; j < 3; ++j) r_alone.emplace_back(1000 + j), r_together.emplace_back(1000 + j);
    std::vector<ProposeCall> calls;
    for (int j = 0; j < 3; ++j) {
      alone[j]->propose(seqs[j], ks[j], sp, r_alone[j], d_alone[j]);
      calls.push_back({together[j].get(), &seqs[j], ks[j], &sp, &r_together[j], &d_together[j]});
    }
    propose_all(calls);
    for (int j = 0; j < 3; ++j) {
      SCOPED_TRACE(testing::Message() << "T " << temperature << " sequence " << j);
      EXPECT_EQ(d_together[j].tokens, d_alone[j].tokens);
      EXPECT_EQ(d_together[j].size(), ks[j]);
      EXPECT_EQ(d_together[j].q_kind, d_alone[j].q_kind);
      EXPECT_TRUE(same_bits(d_together[j].q, d_alone[j].q));
      EXPECT_EQ(d_together[j].cand, d_alone[j].cand);
    }
  }
}

// The context K/V in a quantized dtype (vLLM's speculative kv_cache_dtype):
// stored as its codes (fewer bytes per token), read back as exactly the
// values kv_dequantize_row gives for the rows written, and used by the
// forward pass (hidden states move off the f32 cache's, a little).
TEST_P(DraftBatch, ContextKvDtypesStoreCodesAndAttendToTheirValues) {
  const DraftConfig& c = drafter_->config();
  const int64_t row = c.base.n_kv_heads * c.base.head_dim, hd = c.base.head_dim;
  const int64_t TH = c.n_taps() * target_->config().hidden_size;
  const std::vector<float> feats = randv(9 * TH, 5);
  std::vector<float> h32;
  DraftCache f32 = drafter_->new_cache(64);
  drafter_->forward(f32, feats.data(), 9, 11, 5, h32);
  for (KvDType t : {KvDType::kInt8BlockG128, KvDType::kInt8PerTokenHead, KvDType::kFP8E4M3, KvDType::kBF16}) {
    SCOPED_TRACE(kv_dtype_name(t));
    DraftCache q = drafter_->new_cache(64, t);
    EXPECT_EQ(q.dtype(), t);
    EXPECT_LT(q.bytes_per_token(), f32.bytes_per_token());
    const std::vector<float> k = randv(row, 7), v = randv(row, 8);
    q.write(0, 3, k.data(), v.data());
    std::vector<const float*> kp, vp;
    std::vector<float> scratch;
    q.read(0, 3, 4, kp, vp, scratch);
    std::vector<uint8_t> codes(hd * 4);
    std::vector<float> scales(hd), want(hd);
    for (int64_t h = 0; h < c.base.n_kv_heads; ++h) {
      kv_quantize_row(t, k.data() + h * hd, hd, 1.0f, codes.data(), scales.data());
      const float one = 1.0f;
      kv_dequantize_row(t, codes.data(), t == KvDType::kFP8E4M3 ? &one : scales.data(), hd, want.data());
      for (int64_t i = 0; i < hd; ++i) ASSERT_EQ(kp[0][h * hd + i], want[i]) << "head " << h << " i " << i;
    }
    q.reset();
    std::vector<float> hq;
    drafter_->forward(q, feats.data(), 9, 11, 5, hq);
    ASSERT_EQ(hq.size(), h32.size());
    double diff = 0, norm = 0;
    for (size_t i = 0; i < hq.size(); ++i) diff += std::abs(hq[i] - h32[i]), norm += std::abs(h32[i]);
    EXPECT_GT(diff, 0.0) << "the quantized context changed nothing: is it used?";
    EXPECT_LT(diff, 0.1 * norm) << "far from the f32 cache's hidden states";
  }
}

// Prefix caching's copies of the drafter context: pages saved from one
// cache and loaded into a fresh one draft bit for bit what the first cache
// drafts, in every context dtype; a ring cache refuses positions it has
// overwritten, and nothing past its size is saved.
TEST_P(DraftBatch, SavedContextLoadsIntoANewCacheBitForBit) {
  const DraftConfig& c = drafter_->config();
  const int64_t TH = c.n_taps() * target_->config().hidden_size;
  const std::vector<float> feats = randv(34 * TH, 9);
  for (KvDType t : {KvDType::kF32, KvDType::kInt8BlockG128, KvDType::kBF16}) {
    SCOPED_TRACE(kv_dtype_name(t));
    DraftCache a = drafter_->new_cache(64, t, false);
    std::vector<float> ha, hb;
    drafter_->forward(a, feats.data(), 34, 11, 5, ha);
    const int64_t bpt = a.bytes_per_token();
    std::vector<uint8_t> pages(32 * bpt, 0xAB);
    ASSERT_TRUE(a.save(0, 16, pages.data()));
    ASSERT_TRUE(a.save(16, 16, pages.data() + 16 * bpt));
    EXPECT_FALSE(a.save(32, 16, pages.data())) << "positions 34.. are not in the cache";
    DraftCache b = drafter_->new_cache(64, t, false);
    b.load(16, pages.data());
    b.load(16, pages.data() + 16 * bpt);
    EXPECT_EQ(b.size(), 32);
    drafter_->forward(b, feats.data() + 32 * TH, 2, 11, 5, hb);
    EXPECT_TRUE(same_bits(ha, hb));
    // Pages loaded from zeros draft something else (the block at 34 sees loaded positions on every layer).
    DraftCache z = drafter_->new_cache(64, t, false);
    std::vector<uint8_t> zeros(32 * bpt, 0);
    z.load(32, zeros.data());
    std::vector<float> hz;
    drafter_->forward(z, feats.data() + 32 * TH, 2, 11, 5, hz);
    EXPECT_FALSE(same_bits(ha, hz));
    // A ring keeps the last W positions of a sliding layer: older ones cannot be saved.
    DraftCache r = drafter_->new_cache(64, t);
    std::vector<float> hr;
    drafter_->forward(r, feats.data(), 34, 11, 5, hr);
    EXPECT_TRUE(same_bits(ha, hr)) << "rings change what is drafted";
    int64_t w = 0;
    for (int64_t x : c.layer_window) w = std::max(w, x);
    ASSERT_GT(w, 0) << "the fixture drafters have sliding layers";
    int64_t w_min = w;
    for (int64_t x : c.layer_window) if (x > 0) w_min = std::min(w_min, x);
    EXPECT_FALSE(r.save(0, 16, pages.data()));
    EXPECT_TRUE(r.save(34 - w_min, w_min, pages.data()));
    EXPECT_FALSE(r.save(33 - w_min, w_min, pages.data()));
  }
}

INSTANTIATE_TEST_SUITE_P(Drafters, DraftBatch, ::testing::Values("dflash", "dflash2"));

}  // namespace
}  // namespace blockspec
