// The trainer's span attention (small GEMMs on the f32 kernel, compact probabilities) against its scalar
// reference twin, grad_ops.h masked_attention_* (f64 sums, dense probabilities), on the spans the drafter's
// anchor blocks make: shared spans per block, causal per-slot spans, and runs longer than one task takes.
#include "train/span_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "train/grad_ops.h"
#include "../kernels/randv.h"
#include "max_rel.h"

namespace blockspec {
namespace {

// S context keys, then n_blocks blocks of B keys; block j's queries see context [doc_start, anchor_j) and their
// block's keys (all of them, or slots <= k when causal). Block 3 is longer than a run (40 queries, one anchor)
// when `long_block`.
std::vector<int32_t> spans_for(int64_t S, int64_t n_blocks, int64_t B, bool causal, int64_t* nq, int64_t* nk) {
  std::vector<int32_t> sp;
  *nk = S + n_blocks * B;
  for (int64_t j = 0; j < n_blocks; ++j) {
    const int32_t anchor = static_cast<int32_t>(3 + (j * 7) % (S - 3)), doc = anchor > 20 ? 11 : 0;
    for (int64_t k = 0; k < B; ++k) {
      const int32_t b0 = static_cast<int32_t>(S + j * B);
      sp.insert(sp.end(), {doc, anchor, b0, static_cast<int32_t>(causal ? b0 + k + 1 : b0 + B)});
    }
  }
  *nq = static_cast<int64_t>(sp.size()) / 4;
  return sp;
}

void check_against_reference(int64_t S, int64_t n_blocks, int64_t B, bool causal, int64_t nh, int64_t nkv,
                             int64_t hd) {
  int64_t nq = 0, nk = 0;
  const std::vector<int32_t> spans = spans_for(S, n_blocks, B, causal, &nq, &nk);
  const MaskedAttentionShape s{nq, nk, nh, nkv, hd, 1.0f / std::sqrt(static_cast<float>(hd))};
  const std::vector<float> q = randv(nq * nh * hd, 1, 2.f), k = randv(nk * nkv * hd, 2, 2.f),
                           v = randv(nk * nkv * hd, 3), dout = randv(nq * nh * hd, 4);
  ThreadPool pool(2);
  std::vector<float> o_ref(nq * nh * hd), p_ref, dq_ref(q.size()), dk_ref(k.size()), dv_ref(v.size());
  masked_attention_forward(q.data(), k.data(), v.data(), spans.data(), s, o_ref.data(), p_ref, pool);
  masked_attention_backward(q.data(), k.data(), v.data(), spans.data(), s, p_ref, dout.data(), dq_ref.data(),
                            dk_ref.data(), dv_ref.data(), pool);
  const KernelTable kt = select_kernels("");
  std::vector<float> first[5];
  for (int threads : {1, 2, 3}) {
    ThreadPool tp(threads);
    const OpContext c{&kt, &tp};
    std::vector<float> o(o_ref.size(), 7.f), p, dq(q.size(), 7.f), dk(k.size(), 7.f), dv(v.size(), 7.f);
    span_attention_forward(c, q.data(), k.data(), v.data(), spans.data(), s, o.data(), p);
    span_attention_backward(c, q.data(), k.data(), v.data(), spans.data(), s, p, dout.data(), dq.data(), dk.data(),
                            dv.data());
    EXPECT_LT(max_rel(o, o_ref), 2e-5) << "threads " << threads;
    EXPECT_LT(max_rel(dq, dq_ref), 2e-5) << "threads " << threads;
    EXPECT_LT(max_rel(dk, dk_ref), 2e-5) << "threads " << threads;
    EXPECT_LT(max_rel(dv, dv_ref), 2e-5) << "threads " << threads;
    // The compact probabilities are the dense reference's entries inside the spans.
    std::vector<float> dense(p_ref.size(), 0.f);
    int64_t at = 0;
    for (int64_t i = 0; i < nq; ++i)
      for (int64_t h = 0; h < nh; ++h)
        for (int r = 0; r < 2; ++r)
          for (int32_t j = spans[4 * i + 2 * r]; j < spans[4 * i + 2 * r + 1]; ++j)
            dense[(i * nh + h) * nk + j] = p.at(at++);
    EXPECT_EQ(at, static_cast<int64_t>(p.size()));
    EXPECT_LT(max_rel(dense, p_ref), 2e-5);
    if (threads == 1) {
      first[0] = o, first[1] = p, first[2] = dq, first[3] = dk, first[4] = dv;
    } else {  // bitwise whatever the pool's size
      EXPECT_EQ(o, first[0]);
      EXPECT_EQ(p, first[1]);
      EXPECT_EQ(dq, first[2]);
      EXPECT_EQ(dk, first[3]);
      EXPECT_EQ(dv, first[4]);
    }
  }
}

TEST(SpanAttention, BlockSpansMatchTheReference) { check_against_reference(45, 6, 8, false, 6, 2, 16); }
TEST(SpanAttention, CausalBlockSpansMatchTheReference) { check_against_reference(45, 5, 8, true, 4, 4, 24); }
TEST(SpanAttention, RunsLongerThanATaskMatchTheReference) { check_against_reference(60, 3, 40, false, 9, 3, 8); }

TEST(SpanAttention, RejectsBadSpansAndMismatchedProbabilities) {
  const KernelTable kt = select_kernels("");
  ThreadPool tp(2);
  const OpContext c{&kt, &tp};
  const MaskedAttentionShape s{1, 4, 2, 1, 4, 0.5f};
  const std::vector<float> q(8, 1.f), k(16, 1.f), v(16, 1.f);
  std::vector<float> o(8), p;
  const std::vector<int32_t> empty = {0, 0, 2, 2}, outside = {0, 5, 0, 0}, good = {0, 2, 3, 4};
  EXPECT_THROW(span_attention_forward(c, q.data(), k.data(), v.data(), empty.data(), s, o.data(), p), Error);
  EXPECT_THROW(span_attention_forward(c, q.data(), k.data(), v.data(), outside.data(), s, o.data(), p), Error);
  span_attention_forward(c, q.data(), k.data(), v.data(), good.data(), s, o.data(), p);
  ASSERT_EQ(p.size(), 6u);
  p.pop_back();
  std::vector<float> dq(8), dk(16), dv(16);
  EXPECT_THROW(span_attention_backward(c, q.data(), k.data(), v.data(), good.data(), s, p, o.data(), dq.data(),
                                       dk.data(), dv.data()),
               Error);
}

}  // namespace
}  // namespace blockspec
