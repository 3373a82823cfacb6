// A batched forward over several sequences equals running them one by one.
#include <gtest/gtest.h>

#include <cmath>

#include "model/transformer.h"

namespace blockspec {
namespace {

TEST(ForwardBatch, EqualsSeparateForwards) {
  auto model = Transformer::load(std::string(BS_SOURCE_DIR) + "/tests/fixtures/golden/qwen2-tiny-f32", ModelOptions{});
  const int64_t V = model->config().vocab_size;
  std::vector<std::vector<int32_t>> prompts = {{5, 17, 300, 42}, {7}, {100, 200, 300, 400, 500, 11, 12}};
  // Separately: prefill, then one decode token each.
  std::vector<std::vector<float>> want;
  for (const auto& p : prompts) {
    KvCache c = model->new_cache(16);
    std::vector<float> l;
    model->forward(p.data(), static_cast<int64_t>(p.size()), c, l, true);
    want.push_back(l);
    int32_t next = 3;
    model->forward(&next, 1, c, l, false);
    want.push_back(l);
  }
  // Batched: all prefills in one forward (all logits), then all decodes in one.
  std::vector<KvCache> caches;
  for (size_t i = 0; i < prompts.size(); ++i) caches.push_back(model->new_cache(16));
  std::vector<Transformer::SeqChunk> chunks;
  for (size_t i = 0; i < prompts.size(); ++i)
    chunks.push_back({prompts[i].data(), static_cast<int64_t>(prompts[i].size()), &caches[i], true});
  std::vector<float> got;
  model->forward_batch(chunks, got);
  int32_t next = 3;
  std::vector<Transformer::SeqChunk> dec;
  for (auto& c : caches) dec.push_back({&next, 1, &c, false});
  std::vector<float> got_dec;
  model->forward_batch(dec, got_dec);

  size_t off = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& w = want[2 * i];
    for (size_t j = 0; j < w.size(); ++j) ASSERT_NEAR(got[off + j], w[j], 1e-4f) << "seq " << i << " idx " << j;
    off += w.size();
    const auto& wd = want[2 * i + 1];
    for (int64_t j = 0; j < V; ++j) ASSERT_NEAR(got_dec[i * V + j], wd[j], 1e-4f) << "decode seq " << i;
    EXPECT_EQ(caches[i].size(), static_cast<int64_t>(prompts[i].size()) + 1);
  }
  EXPECT_EQ(off, got.size());
}

TEST(ForwardBatch, CacheOverflowIsAnError) {
  auto model = Transformer::load(std::string(BS_SOURCE_DIR) + "/tests/fixtures/golden/llama-tiny-f32", ModelOptions{});
  KvCache c = model->new_cache(2);
  std::vector<int32_t> p = {1, 2, 3};
  std::vector<float> l;
  EXPECT_THROW(model->forward(p.data(), 3, c, l, false), Error);
  EXPECT_EQ(c.size(), 0);
}

}  // namespace
}  // namespace blockspec
