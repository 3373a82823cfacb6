// Logits of the dense transformer against HF transformers on the tiny random
// checkpoints of tests/fixtures/golden (made by scripts/make_golden.py):
// full-prompt prefill logits, then 16 KV-cached decode steps fed with HF's
// greedy tokens. Greedy tokens must be identical; logits within a stated
// tolerance, relative to the largest logit magnitude of the prompt.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "formats/safetensors.h"
#include "model/transformer.h"

namespace blockspec {
namespace {

struct Case {
  std::string name;
  double tol;  // max |ours - HF| / max |HF logit|
};

// f32: HF and we both compute in f32; differences are summation order only.
// bf16: HF rounds every activation to bf16 while we keep them in f32 with
// bf16 weights, so the gap is bf16's 2^-8 relative precision compounded.
const Case kCases[] = {
    {"qwen3-tiny-f32", 2e-5},  {"qwen3-tiny-bf16", 4e-2}, {"qwen2-tiny-f32", 2e-5},
    {"qwen2-tiny-bf16", 4e-2}, {"llama-tiny-f32", 2e-5},  {"llama-tiny-linear-f32", 2e-5},
    {"llama-tiny-bf16", 4e-2},
};

std::string fixture(const std::string& name) { return std::string(BS_SOURCE_DIR) + "/tests/fixtures/golden/" + name; }

std::vector<float> as_floats(const Tensor& t) {
  Tensor f = to_f32(t);
  return std::vector<float>(f.ptr<float>(), f.ptr<float>() + f.numel());
}
std::vector<int32_t> as_ids(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::kI32);
  return std::vector<int32_t>(t.ptr<int32_t>(), t.ptr<int32_t>() + t.numel());
}

int32_t argmax_of(const float* x, int64_t n) {
  return static_cast<int32_t>(std::max_element(x, x + n) - x);
}

// max |a-b| over rows, relative to max |b|.
double rel_err(const float* a, const float* b, int64_t n) {
  double mx = 0, scale = 1e-30;
  for (int64_t i = 0; i < n; ++i) {
    mx = std::max(mx, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return mx / scale;
}

void check_model(const Case& c, const std::string& isa, int threads, int64_t chunk) {
  SCOPED_TRACE(c.name + " isa=" + isa + " threads=" + std::to_string(threads));
  ModelOptions mo;
  mo.isa = isa;
  mo.n_threads = threads;
  mo.prefill_chunk = chunk;
  auto model = Transformer::load(fixture(c.name), mo);
  SafetensorsFile g(fixture(c.name) + "/golden.safetensors");
  const int64_t V = model->config().vocab_size;
  const int n_prompts = std::stoi(g.metadata().at("n_prompts"));
  double worst = 0;
  for (int p = 0; p < n_prompts; ++p) {
    const std::string pre = "p" + std::to_string(p) + ".";
    auto ids = as_ids(g.tensor(pre + "input_ids"));
    auto ref_pre = as_floats(g.tensor(pre + "prefill_logits"));
    auto dec_ids = as_ids(g.tensor(pre + "decode_ids"));
    auto ref_dec = as_floats(g.tensor(pre + "decode_logits"));
    const int64_t T = static_cast<int64_t>(ids.size());
    ASSERT_EQ(static_cast<int64_t>(ref_pre.size()), T * V);
    KvCache cache = model->new_cache(T + static_cast<int64_t>(dec_ids.size()));
    std::vector<float> logits;
    model->prefill(ids.data(), T, cache, logits, /*all_logits=*/true);
    ASSERT_EQ(static_cast<int64_t>(logits.size()), T * V);
    for (int64_t t = 0; t < T; ++t) {
      double e = rel_err(&logits[t * V], &ref_pre[t * V], V);
      worst = std::max(worst, e);
      EXPECT_LE(e, c.tol) << "prompt " << p << " prefill position " << t;
    }
    // Greedy tokens identical: the first from the last prefill position.
    ASSERT_EQ(argmax_of(&logits[(T - 1) * V], V), dec_ids[0]) << "prompt " << p;
    for (size_t j = 0; j < dec_ids.size(); ++j) {
      model->forward(&dec_ids[j], 1, cache, logits, false);
      double e = rel_err(logits.data(), &ref_dec[j * V], V);
      worst = std::max(worst, e);
      EXPECT_LE(e, c.tol) << "prompt " << p << " decode step " << j;
      if (j + 1 < dec_ids.size())
        ASSERT_EQ(argmax_of(logits.data(), V), dec_ids[j + 1]) << "prompt " << p << " decode step " << j;
    }
  }
  std::printf("[golden] %-24s isa=%-6s threads=%d chunk=%lld  max rel err %.3g (tolerance %.3g)\n",
              c.name.c_str(), isa.c_str(), threads, static_cast<long long>(chunk), worst, c.tol);
}

class Golden : public ::testing::TestWithParam<Case> {};

TEST_P(Golden, MatchesTransformersAllIsas) {
  for (const std::string& isa : available_isas()) check_model(GetParam(), isa, 2, 256);
}

TEST_P(Golden, ChunkedPrefillAndOneThreadAgree) {
  check_model(GetParam(), "", 1, 5);  // 5-token chunks exercise the KV cache mid-prompt
}

INSTANTIATE_TEST_SUITE_P(Families, Golden, ::testing::ValuesIn(kCases),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace blockspec
