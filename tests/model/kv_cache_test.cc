// KV cache dtypes in the model: logits of prefill + decode on a compressed
// cache stay close to the f32 cache, memory per token is what
// docs/kv_cache.md defines, chunked prefill equals whole prefill, and "auto"
// follows the model dtype.
#include <gtest/gtest.h>

#include <cmath>

#include "model/transformer.h"

namespace blockspec {
namespace {

const std::string kDir = std::string(BS_SOURCE_DIR) + "/tests/fixtures/golden/";

struct DtypeCase {
  KvDType t;
  double tol;  // max |logit - f32 cache logit| / max |f32 cache logit|
};
// Tolerances: about 2.5x the error measured on qwen3-tiny-f32 (bf16 5.0e-3,
// fp8_e4m3 8.0e-2, both int8 2.5e-2 at 2 threads, avx512); the quantization
// error of the stored K/V is the only difference.
constexpr DtypeCase kCases[] = {
    {KvDType::kF32, 0.0},
    {KvDType::kBF16, 1.5e-2},
    {KvDType::kFP8E4M3, 2e-1},
    {KvDType::kInt8PerTokenHead, 6e-2},
    {KvDType::kInt8BlockG128, 6e-2},
};

std::vector<int32_t> prompt(int64_t n) {
  std::vector<int32_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>((i * 37 + 11) % 500);
  return p;
}

// Logits of a 40-token prefill (all rows) followed by 6 greedy-free decode
// steps of fixed tokens (last rows).
std::vector<float> run(Transformer& m, int64_t chunk_prefill_every = 0) {
  const auto p = prompt(40);
  KvCache c = m.new_cache(64);
  std::vector<float> all, l;
  if (chunk_prefill_every) {
    for (int64_t b = 0; b < 40; b += chunk_prefill_every) {
      const int64_t n = std::min<int64_t>(chunk_prefill_every, 40 - b);
      m.forward(p.data() + b, n, c, l, true);
      all.insert(all.end(), l.begin(), l.end());
    }
  } else {
    m.forward(p.data(), 40, c, all, true);
  }
  for (int32_t t : {3, 99, 7, 250, 1, 42}) {
    m.forward(&t, 1, c, l, false);
    all.insert(all.end(), l.begin(), l.end());
  }
  return all;
}

std::unique_ptr<Transformer> load(const std::string& name, std::optional<KvDType> t) {
  ModelOptions mo;
  mo.n_threads = 2;
  mo.kv_cache_dtype = t;
  return Transformer::load(kDir + name, mo);
}

TEST(KvCacheDtypes, LogitsCloseToF32Cache) {
  const auto want = run(*load("qwen3-tiny-f32", KvDType::kF32));
  double scale = 0;
  for (float x : want) scale = std::max(scale, std::fabs(static_cast<double>(x)));
  for (const DtypeCase& c : kCases) {
    const auto got = run(*load("qwen3-tiny-f32", c.t));
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
    std::printf("[kv] %-20s max |dlogit| / max |logit| = %.3g (tolerance %.3g)\n", kv_dtype_name(c.t), worst / scale,
                c.tol);
    EXPECT_LE(worst / scale, c.tol) << kv_dtype_name(c.t);
    if (c.t != KvDType::kF32) {
      EXPECT_GT(worst, 0.0) << kv_dtype_name(c.t) << ": quantization had no effect?";
    }
  }
}

TEST(KvCacheDtypes, ChunkedPrefillEqualsWholePrefill) {
  for (const DtypeCase& c : kCases) {
    auto m = load("qwen3-tiny-f32", c.t);
    const auto whole = run(*m), chunked = run(*m, 7);
    ASSERT_EQ(whole.size(), chunked.size());
    for (size_t i = 0; i < whole.size(); ++i) ASSERT_EQ(whole[i], chunked[i]) << kv_dtype_name(c.t) << " i=" << i;
  }
}

TEST(KvCacheDtypes, BytesPerTokenFollowTheDefinitions) {
  // qwen3-tiny: 3 layers, 2 KV heads, head_dim 32; K and V per layer.
  const int64_t L = 3, H = 2, D = 32, KV = 2 * L * H;
  const std::pair<KvDType, int64_t> want[] = {
      {KvDType::kF32, KV * D * 4},
      {KvDType::kBF16, KV * D * 2},
      {KvDType::kFP8E4M3, KV * D},                  // + one f32 scale per layer for K and V, not per token
      {KvDType::kInt8PerTokenHead, KV * (D + 4)},   // + one f32 scale per (token, kv head)
      {KvDType::kInt8BlockG128, KV * (D + 4)},      // head_dim 32: one block of 32
  };
  for (auto [t, bytes] : want) {
    auto m = load("qwen3-tiny-f32", t);
    EXPECT_EQ(m->kv_bytes_per_token(), bytes) << kv_dtype_name(t);
    EXPECT_EQ(m->new_cache(8).bytes_per_token(), bytes) << kv_dtype_name(t);
  }
  // Larger heads: head_dim 256 -> two g128 blocks, 128 -> one.
  EXPECT_EQ(KvCache(1, 4, 1, 256, KvDType::kInt8BlockG128).bytes_per_token(), 2 * (256 + 2 * 4));
  EXPECT_EQ(KvCache(1, 4, 1, 128, KvDType::kInt8BlockG128).bytes_per_token(), 2 * (128 + 4));
  EXPECT_EQ(KvCache(1, 4, 1, 64, KvDType::kInt8BlockG128).bytes_per_token(), 2 * (64 + 4));
  EXPECT_EQ(KvCache(1, 4, 1, 256, KvDType::kInt8PerTokenHead).bytes_per_token(), 2 * (256 + 4));
}

TEST(KvCacheDtypes, AutoFollowsTheModelDtype) {
  EXPECT_EQ(load("qwen3-tiny-f32", std::nullopt)->kv_cache_dtype(), KvDType::kF32);
  EXPECT_EQ(load("qwen3-tiny-bf16", std::nullopt)->kv_cache_dtype(), KvDType::kBF16);
  EXPECT_EQ(load("qwen3-tiny-bf16", KvDType::kF32)->kv_cache_dtype(), KvDType::kF32);  // explicit wins
  EXPECT_EQ(ModelOptions{}.kv_cache_dtype, KvDType::kF32);  // library default: f32 (results unchanged)
}

}  // namespace
}  // namespace blockspec
