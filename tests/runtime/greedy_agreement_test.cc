// eval's greedy agreement (runtime/fidelity_run.h): the batched greedy
// continuations equal one-sequence greedy decoding token for token (the
// batch changes nothing), and the agreement counts identical continuations
// and common prefixes.
#include <gtest/gtest.h>

#include <algorithm>

#include "model/transformer.h"
#include "runtime/fidelity_run.h"

namespace blockspec {
namespace {

TEST(GreedyAgreement, BatchedContinuationsEqualOneByOneGreedy) {
  ModelOptions mo;
  mo.n_threads = 2;
  auto m = Transformer::load(std::string(BS_SOURCE_DIR) + "/tests/fixtures/golden/qwen2-tiny-f32", mo);
  const std::vector<std::vector<int32_t>> prompts = {{5, 17, 300, 41}, {9}, {100, 200, 300, 400, 12, 7, 8}};
  const int64_t n_new = 9;
  const auto got = greedy_continuations(*m, KvDType::kF32, prompts, n_new, /*batch_tokens=*/5);
  ASSERT_EQ(got.size(), prompts.size());
  const int64_t V = m->config().vocab_size;
  const auto& eos = m->config().eos_token_ids;
  for (size_t i = 0; i < prompts.size(); ++i) {
    KvCache cache = m->new_cache(64);
    std::vector<float> logits;
    m->forward(prompts[i].data(), static_cast<int64_t>(prompts[i].size()), cache, logits, false);
    std::vector<int32_t> want;
    while (static_cast<int64_t>(want.size()) < n_new) {
      const int32_t t = static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + V) - logits.begin());
      want.push_back(t);
      if (std::find(eos.begin(), eos.end(), t) != eos.end()) break;
      m->forward(&want.back(), 1, cache, logits, false);
    }
    EXPECT_EQ(got[i], want) << "prompt " << i;
  }
}

TEST(GreedyAgreement, CountsIdenticalAndCommonPrefix) {
  const std::vector<std::vector<int32_t>> ref = {{1, 2, 3}, {4, 5}, {6, 7, 8, 9}};
  const std::vector<std::vector<int32_t>> cand = {{1, 2, 3}, {4, 6}, {6, 7}};
  const GreedyAgreement g = greedy_agreement(ref, cand);
  EXPECT_EQ(g.n_prompts, 3);
  EXPECT_EQ(g.identical, 1);
  EXPECT_DOUBLE_EQ(g.mean_common_prefix, (3 + 1 + 2) / 3.0);
  EXPECT_DOUBLE_EQ(g.mean_length, 3.0);
}

}  // namespace
}  // namespace blockspec
