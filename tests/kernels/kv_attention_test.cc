// KV cache dtypes: the fp8 E4M3FN conversions (all 256 codes, RNE,
// saturation), the int8 row quantizers against their definitions
// (docs/kv_cache.md), every ISA's row kernels against the scalar twins, and
// attention on a compressed cache against attention on the f32 cache of the
// dequantized values; paged views (scattered pages) against contiguous ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "kernels/kernel_table.h"
#include "kernels/kv_attention.h"
#include "kernels/ops.h"
#include "randv.h"

namespace blockspec {
namespace {

constexpr KvDType kAll[] = {KvDType::kF32, KvDType::kBF16, KvDType::kFP8E4M3, KvDType::kInt8PerTokenHead,
                            KvDType::kInt8BlockG128};

// Independent E4M3FN decoding with ldexp.
float fp8_decode_ldexp(int c) {
  const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  if (e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7);
  return s ? -v : v;
}

// Brute force: the nearest finite code, ties to the even code (even
// mantissa), saturating at +-448.
uint8_t fp8_encode_brute(float x) {
  if (std::isnan(x)) return 0x7f;
  const float a = std::min(std::fabs(x), 448.0f);
  int best = 0;
  double bd = 1e30;
  for (int c = 0; c < 0x7f; ++c) {
    const double d = std::fabs(static_cast<double>(fp8_decode_ldexp(c)) - a);
    if (d < bd || (d == bd && (c & 1) == 0)) bd = d, best = c;
  }
  return static_cast<uint8_t>(best | (std::signbit(x) ? 0x80 : 0));
}

TEST(KvFp8, TableIsExactForAll256Codes) {
  for (int c = 0; c < 256; ++c) {
    const float t = fp8_e4m3_to_f32(static_cast<uint8_t>(c)), r = fp8_decode_ldexp(c);
    if (std::isnan(r)) {
      EXPECT_TRUE(std::isnan(t)) << c;
      continue;
    }
    uint32_t a, b;
    std::memcpy(&a, &t, 4), std::memcpy(&b, &r, 4);
    EXPECT_EQ(a, b) << "code " << c;  // bit-exact, including -0
    EXPECT_EQ(f32_to_fp8_e4m3(t), c) << "round trip of code " << c;
  }
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
}

TEST(KvFp8, EncodeIsRneAndSaturates) {
  // Every midpoint between neighbouring codes (ties), and points near them.
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = fp8_decode_ldexp(c), hi = fp8_decode_ldexp(c + 1), mid = (lo + hi) / 2;
    for (float x : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e9f), lo, hi}) {
      EXPECT_EQ(f32_to_fp8_e4m3(x), fp8_encode_brute(x)) << "x=" << x;
      EXPECT_EQ(f32_to_fp8_e4m3(-x), fp8_encode_brute(-x)) << "x=" << -x;
    }
    EXPECT_EQ(f32_to_fp8_e4m3(mid), (c & 1) ? c + 1 : c) << "tie between codes " << c << " and " << c + 1;
  }
  for (float x : randv(20000, 7, 60.f)) EXPECT_EQ(f32_to_fp8_e4m3(x), fp8_encode_brute(x)) << x;
  for (float x : randv(20000, 8, 0.01f)) EXPECT_EQ(f32_to_fp8_e4m3(x), fp8_encode_brute(x)) << x;
  // Saturation: beyond 448 (including 464, which a non-saturating cast
  // would round to NaN) and infinities clamp to +-448; NaN stays NaN.
  for (float x : {448.0f, 449.0f, 464.0f, 480.0f, 1e6f, std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(f32_to_fp8_e4m3(x), 0x7e) << x;
    EXPECT_EQ(f32_to_fp8_e4m3(-x), 0xfe) << -x;
  }
  EXPECT_EQ(f32_to_fp8_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(1.0f, -11)), 0x00);  // below half the smallest subnormal
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(1.0f, -10)), 0x00);  // tie between 0 and 2^-9: even (0)
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(3.0f, -10)), 0x02);  // tie between 1 and 2 (x 2^-9): even (2)
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(3.0f, -11)), 0x01);  // 0.75 x 2^-9 -> 1
}

TEST(KvInt8, PerTokenHeadAndBlockG128FollowTheDefinition) {
  for (int64_t d : {1, 17, 64, 128, 130, 200, 256}) {
    auto x = randv(d, 3 + static_cast<uint32_t>(d), 2.f);
    for (KvDType t : {KvDType::kInt8PerTokenHead, KvDType::kInt8BlockG128}) {
      const int64_t g = t == KvDType::kInt8PerTokenHead ? d : 128;
      const int64_t ng = kv_scales_per_row(t, d);
      ASSERT_EQ(ng, (d + g - 1) / g);
      std::vector<int8_t> c(d);
      std::vector<float> s(ng);
      kv_quantize_row(t, x.data(), d, 1.0f, c.data(), s.data());
      for (int64_t b = 0; b < ng; ++b) {
        float amax = 0;
        for (int64_t i = b * g; i < std::min(d, (b + 1) * g); ++i) amax = std::max(amax, std::fabs(x[i]));
        ASSERT_EQ(s[b], amax / 127.0f);
        for (int64_t i = b * g; i < std::min(d, (b + 1) * g); ++i) {
          const float r = std::nearbyint(x[i] / s[b]);
          ASSERT_EQ(c[i], static_cast<int8_t>(std::clamp(r, -127.f, 127.f)));
          ASSERT_LE(std::fabs(c[i] * s[b] - x[i]), s[b] * 0.5001f);
        }
      }
    }
  }
  EXPECT_EQ(kv_scales_per_row(KvDType::kInt8BlockG128, 64), 1);
  EXPECT_EQ(kv_scales_per_row(KvDType::kInt8BlockG128, 128), 1);
  EXPECT_EQ(kv_scales_per_row(KvDType::kInt8BlockG128, 256), 2);
  // Ties round to even: absmax 127 gives scale 1, so 2.5 -> 2, 3.5 -> 4, -0.5 -> 0.
  std::vector<float> x = {127.f, 2.5f, 3.5f, -0.5f, -1.5f, 0.f};
  std::vector<int8_t> c(x.size());
  float s;
  kv_quantize_row(KvDType::kInt8PerTokenHead, x.data(), 6, 1.f, c.data(), &s);
  EXPECT_EQ(s, 1.0f);
  EXPECT_EQ(c, (std::vector<int8_t>{127, 2, 4, 0, -2, 0}));
  // An all-zero row: scale 0, codes 0, dequantizes to 0 (no NaN).
  std::vector<float> z(5, 0.f), out(5, 1.f);
  kv_quantize_row(KvDType::kInt8BlockG128, z.data(), 5, 1.f, c.data(), &s);
  kv_dequantize_row(KvDType::kInt8BlockG128, c.data(), &s, 5, out.data());
  for (float v : out) EXPECT_EQ(v, 0.f);
}

// A compressed row: codes + per-row scales (or the layer scale).
struct Row {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};
Row quantize(KvDType t, const std::vector<float>& x, int64_t rows, int64_t d, float layer_scale) {
  Row r;
  const int64_t spr = kv_scales_per_row(t, d);
  r.codes.resize(rows * d * kv_code_bytes(t));
  r.scales.resize(std::max<int64_t>(1, rows * spr), layer_scale);
  for (int64_t i = 0; i < rows; ++i)
    kv_quantize_row(t, x.data() + i * d, d, layer_scale, r.codes.data() + i * d * kv_code_bytes(t),
                    r.scales.data() + i * spr);
  return r;
}
std::vector<float> dequantize(KvDType t, const Row& r, int64_t rows, int64_t d) {
  const int64_t spr = kv_scales_per_row(t, d);
  std::vector<float> out(rows * d);
  for (int64_t i = 0; i < rows; ++i)
    kv_dequantize_row(t, r.codes.data() + i * d * kv_code_bytes(t), spr ? r.scales.data() + i * spr : r.scales.data(),
                      d, out.data() + i * d);
  return out;
}

class KvIsaTest : public ::testing::TestWithParam<std::string> {};

TEST_P(KvIsaTest, RowKernelsMatchRefAndDequantizedF32) {
  const KernelTable kt = select_kernels(GetParam());
  const KernelTable ref = select_kernels("ref");
  for (KvDType t : kAll) {
    for (int64_t d : {1, 7, 16, 17, 33, 64, 100, 128, 129, 200, 256}) {
      const float ls = t == KvDType::kFP8E4M3 ? 0.5f : 1.0f;
      auto x = randv(d, 11 + static_cast<uint32_t>(d), 3.f), q = randv(d, 12);
      const Row r = quantize(t, x, 1, d, ls);
      const auto deq = dequantize(t, r, 1, d);
      const auto& kr = kt.kv.row[static_cast<int>(t)];
      const auto& kf = kt.kv.row[static_cast<int>(KvDType::kF32)];
      const float dot = kr.dot(q.data(), r.codes.data(), r.scales.data(), d);
      // Bitwise: the same ISA's f32 kernel on the dequantized row.
      ASSERT_EQ(dot, kf.dot(q.data(), deq.data(), nullptr, d)) << kv_dtype_name(t) << " d=" << d;
      // Tight bound against the ref twin (double accumulation): float
      // rounding of a length-d sum.
      double mag = 0;
      for (int64_t i = 0; i < d; ++i) mag += std::fabs(q[i] * deq[i]);
      const float dref = ref.kv.row[static_cast<int>(t)].dot(q.data(), r.codes.data(), r.scales.data(), d);
      ASSERT_NEAR(dot, dref, 1e-6 * mag + 1e-30) << kv_dtype_name(t) << " d=" << d;
      std::vector<float> y = randv(d, 13), yf = y, yr = y;
      kr.axpy(0.37f, r.codes.data(), r.scales.data(), y.data(), d);
      kf.axpy(0.37f, deq.data(), nullptr, yf.data(), d);
      ref.kv.row[static_cast<int>(t)].axpy(0.37f, r.codes.data(), r.scales.data(), yr.data(), d);
      for (int64_t i = 0; i < d; ++i) {
        ASSERT_EQ(y[i], yf[i]) << kv_dtype_name(t) << " d=" << d << " i=" << i;
        ASSERT_NEAR(y[i], yr[i], 2e-7f * (std::fabs(yr[i]) + std::fabs(0.37f * deq[i]))) << i;  // FMA vs mul+add
      }
    }
  }
}

TEST_P(KvIsaTest, AttentionOnCompressedCacheMatchesDequantizedF32Cache) {
  const KernelTable kt = select_kernels(GetParam());
  ThreadPool pool(3);
  OpContext ctx{&kt, &pool};
  struct Case { int64_t n_tokens, start, nh, nkv, d; };
  for (Case c : {Case{3, 5, 6, 2, 17}, Case{1, 40, 4, 1, 64}, Case{5, 0, 6, 3, 130}, Case{2, 9, 2, 2, 256}}) {
    const int64_t rows = (c.start + c.n_tokens) * c.nkv;
    auto q = randv(c.n_tokens * c.nh * c.d, 21), k = randv(rows * c.d, 22, 2.f), v = randv(rows * c.d, 23);
    for (KvDType t : kAll) {
      for (bool bf : {false, true}) {
        const Row kq = quantize(t, k, rows, c.d, 1.0f), vq = quantize(t, v, rows, c.d, 1.0f);
        const auto kd = dequantize(t, kq, rows, c.d), vd = dequantize(t, vq, rows, c.d);
        AttentionShape s{c.n_tokens, c.start, c.nh, c.nkv, c.d, 1.0f / std::sqrt(static_cast<float>(c.d)), bf};
        std::vector<float> out(q.size()), out_f(q.size()), out_ref(q.size());
        attention_causal_kv(ctx, q.data(), KvView{t, kq.codes.data(), kq.scales.data()},
                            KvView{t, vq.codes.data(), vq.scales.data()}, s, out.data());
        attention_causal_kv(ctx, q.data(), KvView{KvDType::kF32, kd.data(), nullptr},
                            KvView{KvDType::kF32, vd.data(), nullptr}, s, out_f.data());
        attention_causal(ctx, q.data(), kd.data(), vd.data(), s, out_ref.data());
        for (size_t i = 0; i < out.size(); ++i) {
          // Same kernels and order: bit-identical to the dequantized f32 cache.
          ASSERT_EQ(out[i], out_f[i]) << kv_dtype_name(t) << " d=" << c.d << " i=" << i;
          // attention_causal (f32 path) differs only by the axpy tail
          // (FMA vs mul+add) on some ISAs.
          ASSERT_NEAR(out[i], out_ref[i], bf ? 1e-2f * (1 + std::fabs(out_ref[i])) : 1e-5f)
              << kv_dtype_name(t) << " d=" << c.d << " i=" << i;
        }
        if (GetParam() == "ref" && !bf) {
          for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], out_ref[i]) << kv_dtype_name(t) << " i=" << i;
        }
      }
    }
  }
}

// Rows of n_tokens tokens copied into pages of page_tokens tokens, the pages
// taken from a larger pool in a scrambled order; every byte of a page that
// holds no row is 0x7f (NaN / huge / 127 in every dtype), so reading a wrong
// row changes the result.
struct PagedRows {
  std::vector<std::vector<uint8_t>> pool;  // pages; some never used
  std::vector<const uint8_t*> table;       // [n_pages] page of tokens [i*pt, (i+1)*pt)
  int64_t code_offset = 64, scale_offset = 0;
};
PagedRows to_pages(KvDType t, const Row& r, int64_t n_tokens, int64_t nkv, int64_t d, int64_t pt, uint32_t seed) {
  PagedRows p;
  const int64_t cb = nkv * d * kv_code_bytes(t), sb = nkv * kv_scales_per_row(t, d) * 4;  // per token
  p.scale_offset = p.code_offset + (pt * cb + 63) / 64 * 64 + 128;
  const int64_t n_pages = (n_tokens + pt - 1) / pt, page_bytes = p.scale_offset + pt * sb + 64;
  p.pool.assign(n_pages + 3, std::vector<uint8_t>(page_bytes, 0x7f));
  std::vector<int64_t> order(p.pool.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  for (int64_t i = 0; i < n_pages; ++i) p.table.push_back(p.pool[order[i]].data());
  for (int64_t j = 0; j < n_tokens; ++j) {
    uint8_t* base = p.pool[order[j / pt]].data();
    std::memcpy(base + p.code_offset + j % pt * cb, r.codes.data() + j * cb, cb);
    if (sb > 0) std::memcpy(base + p.scale_offset + j % pt * sb, r.scales.data() + j * sb / 4, sb);
  }
  return p;
}
KvView paged_view(KvDType t, const PagedRows& p, const Row& r, int64_t pt) {
  KvView v{t, nullptr, r.scales.data()};  // fp8_e4m3: the layer scale, as a contiguous view
  v.pages = p.table.data();
  v.page_tokens = pt;
  v.code_offset = p.code_offset;
  v.scale_offset = p.scale_offset;
  return v;
}

TEST_P(KvIsaTest, PagedViewEqualsContiguousView) {
  const KernelTable kt = select_kernels(GetParam());
  ThreadPool pool(3);
  OpContext ctx{&kt, &pool};
  struct Case { int64_t n_tokens, start, nh, nkv, d; };
  for (Case c : {Case{3, 5, 6, 2, 17}, Case{1, 40, 4, 1, 64}, Case{5, 0, 6, 3, 130}, Case{2, 9, 2, 2, 256}}) {
    const int64_t n_ctx = c.start + c.n_tokens, rows = n_ctx * c.nkv;
    auto q = randv(c.n_tokens * c.nh * c.d, 31), k = randv(rows * c.d, 32, 2.f), v = randv(rows * c.d, 33);
    for (KvDType t : kAll) {
      const float ls = t == KvDType::kFP8E4M3 ? 0.5f : 1.0f;
      const Row kq = quantize(t, k, rows, c.d, ls), vq = quantize(t, v, rows, c.d, ls);
      for (bool bf : {false, true}) {
        AttentionShape s{c.n_tokens, c.start, c.nh, c.nkv, c.d, 1.0f / std::sqrt(static_cast<float>(c.d)), bf};
        std::vector<float> want(q.size());
        attention_causal_kv(ctx, q.data(), KvView{t, kq.codes.data(), kq.scales.data()},
                            KvView{t, vq.codes.data(), vq.scales.data()}, s, want.data());
        for (int64_t pt : {1, 3, 4, 16, 64}) {
          const PagedRows kp = to_pages(t, kq, n_ctx, c.nkv, c.d, pt, 40 + static_cast<uint32_t>(pt));
          const PagedRows vp = to_pages(t, vq, n_ctx, c.nkv, c.d, pt, 50 + static_cast<uint32_t>(pt));
          std::vector<float> got(q.size(), -1.f);
          attention_causal_kv(ctx, q.data(), paged_view(t, kp, kq, pt), paged_view(t, vp, vq, pt), s, got.data());
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_EQ(got[i], want[i]) << kv_dtype_name(t) << " d=" << c.d << " page_tokens=" << pt << " i=" << i;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, KvIsaTest, ::testing::ValuesIn(available_isas()));

TEST(KvDTypes, NamesRoundTrip) {
  for (KvDType t : kAll) EXPECT_EQ(kv_dtype_from_name(kv_dtype_name(t)), t);
  EXPECT_FALSE(kv_dtype_from_name("int8"));
  EXPECT_EQ(kv_dtype_names(), "f32, bf16, fp8_e4m3, int8_per_token_head, int8_block_g128");
}

// dot_rows / axpy_rows (one call per page run, all heads of a KV group) are
// defined as loops over dot / axpy: bit for bit, on every ISA and dtype.
TEST_P(KvIsaTest, MultiRowKernelsEqualSingleRowLoops) {
  const KernelTable kt = select_kernels(GetParam());
  for (KvDType t : kAll) {
    const auto& kr = kt.kv.row[static_cast<int>(t)];
    // d over the kernels' chunk groups (4, 2, 1 chunks of 16 and a masked tail), rows over the 16-row blocks
    // of dot_rows and their tail.
    for (int64_t d : {1, 17, 48, 64, 80, 128, 130}) {
      for (int64_t n_h : {1, 3, 6, 7, 8, 9, 16}) {
        for (int64_t n_rows : {1, 5, 16, 21, 35}) {
          const int64_t nkv = 3;  // rows of one kv head are nkv rows apart
          const float ls = t == KvDType::kFP8E4M3 ? 0.5f : 1.0f;
          const Row r = quantize(t, randv(n_rows * nkv * d, 61, 2.f), n_rows * nkv, d, ls);
          const int64_t cs = nkv * d * kv_code_bytes(t), spr = kv_scales_per_row(t, d);
          const int64_t ss = spr > 0 ? nkv * spr : 0;
          const auto q = randv(n_h * d, 62);
          const int64_t os = n_rows + 2;
          std::vector<float> got(n_h * os, -7.f), want(n_h * os, -7.f);
          kr.dot_rows(q.data(), n_h, r.codes.data(), cs, r.scales.data(), ss, n_rows, d, got.data(), os);
          for (int64_t j = 0; j < n_rows; ++j)
            for (int64_t i = 0; i < n_h; ++i)
              want[i * os + j] = kr.dot(q.data() + i * d, r.codes.data() + j * cs, r.scales.data() + j * ss, d);
          ASSERT_EQ(got, want) << kv_dtype_name(t) << " d=" << d << " n_h=" << n_h << " rows=" << n_rows;
          const auto p = randv(n_h * os, 63);
          auto y = randv(n_h * d, 64), yw = y;
          kr.axpy_rows(p.data(), os, n_h, r.codes.data(), cs, r.scales.data(), ss, n_rows, y.data(), d);
          for (int64_t j = 0; j < n_rows; ++j)
            for (int64_t i = 0; i < n_h; ++i)
              kr.axpy(p[i * os + j], r.codes.data() + j * cs, r.scales.data() + j * ss, yw.data() + i * d, d);
          ASSERT_EQ(y, yw) << kv_dtype_name(t) << " d=" << d << " n_h=" << n_h << " rows=" << n_rows;
        }
      }
    }
  }
}

}  // namespace
}  // namespace blockspec
