// attention_block (the DFlash drafter's masked / windowed block attention)
// on every ISA: against its scalar twin (the same op on the ref table) and
// against a naive double-precision attention that spells the visibility rule
// of dflash.md §2.3 out, over odd shapes, causal and bidirectional layers,
// sliding windows, and a context whose rows are not contiguous (a ring).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/kernel_table.h"
#include "kernels/ops.h"
#include "randv.h"

namespace blockspec {
namespace {

struct Case {
  int64_t nb, P, ctx_lo, H, KVH, D;
  bool causal;
  int64_t W;
};

// Visible keys of query i in the naive oracle: (is_context, index).
bool visible(const Case& c, int64_t i, bool ctx, int64_t j) {
  if (ctx) return c.W == 0 || c.P + i - j < c.W;  // j: context position
  if (c.causal && j > i) return false;
  return c.W == 0 || std::abs(i - j) < c.W;
}

class BlockAttentionTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BlockAttentionTest, MatchesRefTwinAndNaiveMask) {
  const Case cases[] = {
      {8, 21, 0, 4, 2, 24, false, 0},   // DFlash: bidirectional block, full context
      {5, 13, 4, 6, 3, 20, true, 0},    // causal layer, context trimmed below 4
      {7, 30, 18, 4, 1, 36, false, 6},  // sliding window 6: context and block both cut
      {3, 9, 0, 2, 2, 17, true, 2},     // causal + window
      {4, 0, 0, 4, 2, 8, false, 0},     // no context at all (first step)
  };
  KernelTable kt = select_kernels(GetParam()), ref = select_kernels("ref");
  ThreadPool pool(2);
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "nb " << c.nb << " P " << c.P << " lo " << c.ctx_lo << " causal " << c.causal
                                    << " W " << c.W);
    const int64_t kvs = c.KVH * c.D, n_ctx = c.P - c.ctx_lo;
    auto q = randv(c.nb * c.H * c.D, 1), kb = randv(c.nb * kvs, 2), vb = randv(c.nb * kvs, 3);
    // Context rows scattered in a ring-like buffer, newest first.
    auto ring_k = randv((n_ctx + 1) * kvs, 4), ring_v = randv((n_ctx + 1) * kvs, 5);
    std::vector<const float*> ck(n_ctx), cv(n_ctx);
    for (int64_t r = 0; r < n_ctx; ++r) {
      const int64_t slot = (n_ctx - r + 3) % (n_ctx + 1);
      ck[r] = ring_k.data() + slot * kvs, cv[r] = ring_v.data() + slot * kvs;
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
    const BlockAttentionShape s{c.nb, c.P, c.ctx_lo, c.H, c.KVH, c.D, scale, c.causal, c.W};
    std::vector<float> out(c.nb * c.H * c.D), out_ref(out.size());
    attention_block(OpContext{&kt, &pool}, q.data(), ck.data(), cv.data(), kb.data(), vb.data(), s, out.data());
    attention_block(OpContext{&ref, &pool}, q.data(), ck.data(), cv.data(), kb.data(), vb.data(), s, out_ref.data());
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], out_ref[i], 2e-6f) << "vs ref twin at " << i;
    for (int64_t i = 0; i < c.nb; ++i)
      for (int64_t h = 0; h < c.H; ++h) {
        const int64_t g = h / (c.H / c.KVH);
        const float* qv = q.data() + (i * c.H + h) * c.D;
        std::vector<std::pair<double, const float*>> sc;  // (score, value row)
        auto add = [&](const float* k, const float* v) {
          double d = 0;
          for (int64_t e = 0; e < c.D; ++e) d += static_cast<double>(qv[e]) * k[e];
          sc.push_back({d * scale, v});
        };
        for (int64_t pk = c.ctx_lo; pk < c.P; ++pk)
          if (visible(c, i, true, pk)) add(ck[pk - c.ctx_lo] + g * c.D, cv[pk - c.ctx_lo] + g * c.D);
        for (int64_t j = 0; j < c.nb; ++j)
          if (visible(c, i, false, j)) add(kb.data() + j * kvs + g * c.D, vb.data() + j * kvs + g * c.D);
        double mx = -1e300, sum = 0;
        for (auto& [d, v] : sc) mx = std::max(mx, d);
        for (auto& [d, v] : sc) sum += std::exp(d - mx);
        for (int64_t e = 0; e < c.D; ++e) {
          double o = 0;
          for (auto& [d, v] : sc) o += std::exp(d - mx) / sum * v[e];
          ASSERT_NEAR(out[(i * c.H + h) * c.D + e], o, 1e-5) << "query " << i << " head " << h << " dim " << e;
        }
      }
  }
}

// A broken mask must show: dropping the window makes a windowed case differ.
TEST(BlockAttention, WindowChangesTheResult) {
  KernelTable kt = select_kernels("ref");
  ThreadPool pool(1);
  const int64_t nb = 6, P = 12, H = 2, D = 8;
  auto q = randv(nb * H * D, 7), kb = randv(nb * H * D, 8), vb = randv(nb * H * D, 9), ck = randv(P * H * D, 10),
       cv = randv(P * H * D, 11);
  std::vector<const float*> kr(P), vr(P);
  for (int64_t r = 0; r < P; ++r) kr[r] = ck.data() + r * H * D, vr[r] = cv.data() + r * H * D;
  std::vector<float> a(nb * H * D), b(a.size());
  attention_block(OpContext{&kt, &pool}, q.data(), kr.data(), vr.data(), kb.data(), vb.data(),
                  BlockAttentionShape{nb, P, 0, H, H, D, 0.35f, false, 3}, a.data());
  attention_block(OpContext{&kt, &pool}, q.data(), kr.data(), vr.data(), kb.data(), vb.data(),
                  BlockAttentionShape{nb, P, 0, H, H, D, 0.35f, false, 0}, b.data());
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
  EXPECT_GT(diff, 1e-3);
}

INSTANTIATE_TEST_SUITE_P(AllIsas, BlockAttentionTest, ::testing::ValuesIn(available_isas()));

}  // namespace
}  // namespace blockspec
