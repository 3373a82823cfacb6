// Speculative rollback on hybrid targets (hybrid.md §7.4): after verifying
// [anchor, d1..dK] and keeping the anchor and the first a drafts, the Gated
// DeltaNet states (recurrent and conv rows) must be bit for bit those of a
// plain forward that only ever saw the kept tokens, for every a in 0..K, over
// several rounds; the next logits must be identical too. A dense model's
// commit just crops its KV.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "model/transformer.h"

namespace blockspec {
namespace {

std::string fixture(const std::string& name) { return std::string(BS_SOURCE_DIR) + "/tests/fixtures/hybrid/" + name; }

bool same_state(KvCache& a, KvCache& b) {
  return a.state_floats() == b.state_floats() &&
         std::memcmp(a.state(), b.state(), static_cast<size_t>(a.state_floats()) * 4) == 0;
}

void check_rollback(const std::string& name, const std::string& isa) {
  SCOPED_TRACE(name + " isa " + isa);
  ModelOptions mo;
  mo.isa = isa, mo.n_threads = 2;
  auto model = Transformer::load(fixture(name), mo);
  const int64_t V = model->config().vocab_size, K = 5, P = 19;
  std::vector<int32_t> prompt(P);
  for (int64_t i = 0; i < P; ++i) prompt[i] = static_cast<int32_t>((i * 37 + 5) % V);
  std::vector<float> la, lb;
  for (int64_t a = 0; a <= K; ++a) {
    KvCache spec = model->new_cache(P + 4 * (K + 1)), plain = model->new_cache(P + 4 * (K + 1));
    model->prefill(prompt.data(), P, spec, la, false);
    model->prefill(prompt.data(), P, plain, lb, false);
    for (int round = 0; round < 3; ++round) {
      const int64_t keep = (a + round) % (K + 1) + 1;  // anchor + accepted drafts, varied per round
      std::vector<int32_t> block(K + 1);
      for (int64_t j = 0; j <= K; ++j) block[j] = static_cast<int32_t>((round * 101 + j * 53 + a * 7 + 3) % V);
      const int64_t start = spec.size();
      model->forward_batch({Transformer::SeqChunk{block.data(), K + 1, &spec, true, nullptr, true}}, la);
      model->commit(spec, start + keep);
      ASSERT_EQ(spec.size(), start + keep);
      for (int64_t j = 0; j < keep; ++j) model->forward(&block[j], 1, plain, lb, false);  // plain decode
      ASSERT_TRUE(same_state(spec, plain)) << "a=" << a << " round " << round << " keep " << keep;
    }
    // Both continue identically.
    const int32_t next = 7;
    model->forward(&next, 1, spec, la, false);
    model->forward(&next, 1, plain, lb, false);
    ASSERT_EQ(la, lb) << "a=" << a;
  }
}

TEST(HybridRollback, StateEqualsPlainForwardOverKeptTokensBitwise) {
  for (const std::string name : {"qwen35-text-a", "qwen35-text-tied", "qwen35-vl"})
    for (const std::string& isa : available_isas()) check_rollback(name, isa);
}

TEST(HybridRollback, CropWithoutAVerifyLogFails) {
  ModelOptions mo;
  mo.n_threads = 1;
  auto model = Transformer::load(fixture("qwen35-text-a"), mo);
  KvCache c = model->new_cache(32);
  std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6};
  std::vector<float> logits;
  model->forward(ids.data(), 6, c, logits, false);  // not a verify: nothing to roll back with
  EXPECT_THROW(model->commit(c, 4), Error);
  c.set_size(4);  // cropping the KV alone leaves the state 6 tokens ahead: the next forward refuses
  EXPECT_THROW(model->forward(ids.data(), 1, c, logits, false), Error);
}

}  // namespace
}  // namespace blockspec
