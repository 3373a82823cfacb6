// KV cache dtypes in the model: logits of prefill + decode on a compressed
// cache stay close to the f32 cache, memory per token is what
// docs/kv_cache.md defines, chunked prefill equals whole prefill, and "auto"
// follows the model dtype. Paged storage: the pool's bookkeeping, and paged
// caches whose pages are scattered over the pool giving logits bit-identical
// to contiguous caches, including speculative rollback across page boundaries.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kv/block_allocator.h"
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


// ---- paged storage ----

TEST(KvPool, PagesAndSectionsAreAligned) {
  KvPool pool(2, 2, 32, KvDType::kInt8BlockG128, 16, 3);
  EXPECT_EQ(pool.pages_total(), 3);
  // 64-byte aligned pages and sections; sections inside the page.
  for (int64_t p = 0; p < 3; ++p) EXPECT_EQ(reinterpret_cast<uintptr_t>(pool.page_data(p)) % 64, 0u);
  for (int64_t l = 0; l < 2; ++l)
    for (bool v : {false, true}) {
      EXPECT_EQ(pool.code_offset(l, v) % 64, 0);
      EXPECT_EQ(pool.scale_offset(l, v) % 64, 0);
      EXPECT_LE(pool.scale_offset(l, v) + 16 * pool.scale_row_floats() * 4, pool.page_bytes());
      EXPECT_LE(pool.code_offset(l, v) + 16 * pool.code_row_bytes(), pool.page_bytes());
    }
  EXPECT_THROW(KvPool(2, 2, 32, KvDType::kF32, 0, 3), Error);
}

// Grows a paged cache to hold n tokens with pages from `alloc`, as the
// engine's scheduler does at admission; false (taking nothing) when too few
// are free. Contiguous caches (alloc null) only check their capacity.
bool grow(KvCache& c, BlockAllocator* alloc, int64_t page_tokens, int64_t n) {
  if (!alloc) return n <= c.capacity();
  const int64_t need = (n + page_tokens - 1) / page_tokens - c.n_pages();
  if (need <= 0) return true;
  std::vector<int32_t> pages = alloc->allocate(need);
  if (pages.empty()) return false;
  c.append_pages(pages);
  return true;
}

TEST(KvPaged, ACacheViewsThePagesItIsGiven) {
  KvPool pool(3, 2, 32, KvDType::kBF16, 4, 5);
  KvCache a(pool);
  EXPECT_EQ(a.capacity(), 0);
  a.append_pages({3, 1});
  EXPECT_EQ(a.capacity(), 8);
  EXPECT_EQ(a.pages(), (std::vector<int32_t>{3, 1}));
  a.append_pages({4});
  EXPECT_EQ(a.capacity(), 12);
  EXPECT_THROW(a.append_pages({5}), Error);  // not a page of the pool
  a.set_size(10);
  a.set_size(3);  // rollback keeps the pages
  EXPECT_EQ(a.capacity(), 12);
  EXPECT_THROW(a.set_size(13), Error);
  KvCache b = std::move(a);  // the page table moves with the cache
  EXPECT_EQ(b.capacity(), 12);
  EXPECT_EQ(b.size(), 3);
  b.release();
  EXPECT_EQ(b.size(), 0);
  EXPECT_EQ(b.capacity(), 0);
  // Contiguous caches are one private page of their capacity.
  KvCache e(3, 10, 2, 32, KvDType::kF32);
  EXPECT_EQ(e.capacity(), 10);
  EXPECT_EQ(e.n_pages(), 1);
  EXPECT_EQ(KvCache(3, 0, 2, 32).capacity(), 0);
}

TEST(KvPool, RowsLiveWhereTheLayoutSays) {
  // Token pos's K row of layer l: page_data(page) + code_offset(l, K) + (pos % page_tokens) * code_row_bytes.
  const int64_t L = 2, H = 2, D = 40, pt = 3;
  KvPool pool(L, H, D, KvDType::kInt8PerTokenHead, pt, 4);
  KvCache c(pool);
  c.append_pages({2, 1, 3});  // not starting at page 0, not in order
  std::vector<float> k(7 * H * D), v(7 * H * D);
  for (size_t i = 0; i < k.size(); ++i) k[i] = std::sin(0.1f * i), v[i] = std::cos(0.3f * i);
  c.write(1, 0, 7, k.data(), v.data());
  for (int64_t pos = 0; pos < 7; ++pos) {
    const uint8_t* base = pool.page_data(c.pages()[pos / pt]);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t r = pos % pt * H + h;
      std::vector<int8_t> codes(D);
      float scale;
      kv_quantize_row(KvDType::kInt8PerTokenHead, k.data() + (pos * H + h) * D, D, 1.0f, codes.data(), &scale);
      EXPECT_EQ(std::memcmp(base + pool.code_offset(1, false) + r * D, codes.data(), D), 0) << pos;
      EXPECT_EQ(reinterpret_cast<const float*>(base + pool.scale_offset(1, false))[r], scale) << pos;
      kv_quantize_row(KvDType::kInt8PerTokenHead, v.data() + (pos * H + h) * D, D, 1.0f, codes.data(), &scale);
      EXPECT_EQ(std::memcmp(base + pool.code_offset(1, true) + r * D, codes.data(), D), 0) << pos;
      EXPECT_EQ(reinterpret_cast<const float*>(base + pool.scale_offset(1, true))[r], scale) << pos;
    }
  }
  EXPECT_THROW(c.write(0, 7, 3, k.data(), v.data()), Error);  // past capacity (9)
}

// Three sequences batched: prefills of 13 / 6 / 21 tokens in one forward
// (all logits), 5 batched decode steps, then a speculative block of 6 tokens
// on each, rolled back to 1 / 4 / 0 accepted (set_size), and 3 more batched
// decode steps after the rollback. Each cache grows to what every forward
// needs first (paged caches, from alloc; contiguous ones have room). Returns
// every logit.
std::vector<float> batched_run(Transformer& m, std::vector<KvCache>& caches, BlockAllocator* alloc = nullptr,
                               int64_t page_tokens = 0) {
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t n : {13, 6, 21}) {
    auto p = prompt(n + 7);
    prompts.emplace_back(p.begin() + 7, p.end());
  }
  std::vector<float> all, l;
  auto step = [&](const std::vector<std::vector<int32_t>>& toks, bool all_logits) {
    std::vector<Transformer::SeqChunk> chunks;
    for (size_t i = 0; i < caches.size(); ++i) {
      const auto n = static_cast<int64_t>(toks[i].size());
      EXPECT_TRUE(grow(caches[i], alloc, page_tokens, caches[i].size() + n));
      chunks.push_back({toks[i].data(), n, &caches[i], all_logits});
    }
    m.forward_batch(chunks, l);
    all.insert(all.end(), l.begin(), l.end());
  };
  step(prompts, true);
  for (int32_t t : {3, 99, 7, 250, 1}) step({{t}, {t + 1}, {t + 2}}, false);
  step({{5, 6, 7, 8, 9, 10}, {11, 12, 13, 14, 15, 16}, {17, 18, 19, 20, 21, 22}}, true);
  const int64_t accepted[] = {1, 4, 0};
  for (size_t i = 0; i < caches.size(); ++i) caches[i].set_size(caches[i].size() - 6 + accepted[i]);
  for (int32_t t : {42, 43, 44}) step({{t}, {t}, {t}}, false);
  return all;
}

TEST(KvPaged, ScatteredPagesGiveLogitsIdenticalToContiguousCaches) {
  const int64_t kPageTokens = 4;
  for (const DtypeCase& dc : kCases) {
    auto m = load("qwen3-tiny-f32", dc.t);
    const ModelConfig& c = m->config();
    std::vector<KvCache> contiguous;
    for (int i = 0; i < 3; ++i) contiguous.push_back(m->new_cache(48));
    const auto want = batched_run(*m, contiguous);

    KvPool pool(c.n_layers, c.n_kv_heads, c.head_dim, dc.t, kPageTokens, 64);
    BlockAllocator alloc(64);
    std::vector<KvCache> paged;
    for (int i = 0; i < 3; ++i) paged.emplace_back(pool);
    {
      // Scatter: the caches take pages in turn with a spacer between, and
      // the spacer's pages are freed so later growth refills the holes.
      KvCache spacer(pool);
      for (int64_t n = 1; n <= 3; ++n) {
        for (auto& pc : paged) ASSERT_TRUE(grow(pc, &alloc, kPageTokens, n * kPageTokens));
        ASSERT_TRUE(grow(spacer, &alloc, kPageTokens, n * kPageTokens));
      }
      alloc.free(spacer.pages());
    }
    const auto got = batched_run(*m, paged, &alloc, kPageTokens);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << kv_dtype_name(dc.t) << " i=" << i;
    for (const auto& pc : paged) {
      bool adjacent = true;
      for (int64_t i = 1; i < pc.n_pages(); ++i) adjacent &= pc.pages()[i] == pc.pages()[i - 1] + 1;
      EXPECT_FALSE(adjacent) << "pages should be scattered";
      EXPECT_GE(pc.n_pages(), 3);
    }
    for (auto& pc : paged) {
      alloc.free(pc.pages());
      pc.release();
    }
    EXPECT_EQ(alloc.n_free(), pool.pages_total());
  }
}

}  // namespace
}  // namespace blockspec
