// The trainer's GEMMs on the engine's f32 kernel against their scalar
// reference twin (grad_ops.h linear_backward, double accumulation), at
// shapes with ragged tails, with and without a kept transpose.
#include "train/gemm.h"

#include <gtest/gtest.h>

#include <array>
#include <algorithm>
#include <cmath>
#include <string>

#include "tensor/dtype.h"
#include "train/grad_ops.h"
#include "../kernels/randv.h"
#include "max_rel.h"

namespace blockspec {
namespace {

TEST(TrainGemm, ForwardAndBackwardMatchTheReference) {
  ThreadPool pool(2);
  const KernelTable kt = select_kernels("");
  const OpContext c{&kt, &pool};
  for (auto [M, K, N] : {std::array<int64_t, 3>{1, 1, 1}, {5, 33, 7}, {37, 70, 19}, {64, 96, 130}}) {
    const std::vector<float> x = randv(M * K, 1), w = randv(N * K, 2), dy = randv(M * N, 3);
    std::vector<float> y(M * N), y_ref(M * N);
    gemm_nt(c, x.data(), w.data(), M, K, N, y.data());
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double a = 0;
        for (int64_t k = 0; k < K; ++k) a += static_cast<double>(x[m * K + k]) * w[n * K + k];
        y_ref[m * N + n] = static_cast<float>(a);
      }
    EXPECT_LT(max_rel(y, y_ref), 1e-5) << M << "x" << K << "x" << N;
    std::vector<float> w_t(K * N);
    transpose(c, w.data(), N, K, w_t.data());
    EXPECT_EQ(w_t[(K - 1) * N + (N - 1)], w[(N - 1) * K + (K - 1)]);
    std::vector<float> dx_ref(M * K), dw_ref(N * K, 0.5f);
    linear_backward(x.data(), w.data(), dy.data(), M, K, N, dx_ref.data(), dw_ref.data(), nullptr, pool);
    for (const float* kept : {static_cast<const float*>(nullptr), static_cast<const float*>(w_t.data())}) {
      std::vector<float> dx(M * K), dw(N * K, 0.5f);  // dw accumulates onto what is there
      gemm_backward(c, x.data(), w.data(), kept, dy.data(), M, K, N, dx.data(), dw.data());
      EXPECT_LT(max_rel(dx, dx_ref), 1e-5) << M << "x" << K << "x" << N;
      EXPECT_LT(max_rel(dw, dw_ref), 1e-5) << M << "x" << K << "x" << N;
    }
  }
}

// --matmul bf16 (OpContext::bf16_train_products): every product of gemm_nt and gemm_backward is the f32 product of
// the bf16-rounded operands (dy and w for dx, dy and x for dw), on every ISA (AVX-512 BF16's dot product, or the
// bf16-weight kernel where the CPU has none); and it did round (the f32 products differ).
TEST(TrainGemm, Bf16ProductsAreTheProductsOfRoundedOperands) {
  ThreadPool pool(2);
  const auto rounded = [](std::vector<float> v) {
    for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
    return v;
  };
  for (const std::string& isa : available_isas()) {  // select_kernels refuses an ISA this CPU lacks
    const KernelTable kt = select_kernels(isa);
    OpContext c{&kt, &pool}, cf{&kt, &pool};
    c.bf16_train_products = true;
    for (auto [M, K, N] : {std::array<int64_t, 3>{1, 1, 1}, {5, 33, 7}, {37, 70, 19}, {64, 96, 130}}) {
      const std::vector<float> x = randv(M * K, 1), w = randv(N * K, 2), dy = randv(M * N, 3);
      const std::vector<float> xr = rounded(x), wr = rounded(w), dyr = rounded(dy);
      std::vector<float> y(M * N), y_ref(M * N), y_f32(M * N);
      gemm_nt(c, x.data(), w.data(), M, K, N, y.data());
      gemm_nt(cf, xr.data(), wr.data(), M, K, N, y_ref.data());
      gemm_nt(cf, x.data(), w.data(), M, K, N, y_f32.data());
      EXPECT_LT(max_rel(y, y_ref), 1e-5) << isa << " " << M << "x" << K << "x" << N;
      if (K > 1) {
        EXPECT_GT(max_rel(y, y_f32), 1e-4) << isa << " " << M << "x" << K << "x" << N;
      }
      std::vector<float> w_t(K * N), dx_ref(M * K), dw_ref(N * K, 0.5f);
      transpose(cf, w.data(), N, K, w_t.data());
      gemm_backward(cf, xr.data(), wr.data(), nullptr, dyr.data(), M, K, N, dx_ref.data(), dw_ref.data());
      for (const float* kept : {static_cast<const float*>(nullptr), static_cast<const float*>(w_t.data())}) {
        std::vector<float> dx(M * K), dw(N * K, 0.5f);
        gemm_backward(c, x.data(), w.data(), kept, dy.data(), M, K, N, dx.data(), dw.data());
        EXPECT_LT(max_rel(dx, dx_ref), 1e-5) << isa << " " << M << "x" << K << "x" << N;
        EXPECT_LT(max_rel(dw, dw_ref), 1e-5) << isa << " " << M << "x" << K << "x" << N;
      }
    }
  }
}

TEST(TrainGemm, Bf16HeadProductIsTheF32OneToBf16Precision) {
  ThreadPool pool(2);
  const KernelTable kt = select_kernels("");
  const OpContext c{&kt, &pool};
  const int64_t M = 9, K = 70, N = 33;
  const std::vector<float> x = randv(M * K, 5), w = randv(N * K, 6);
  std::vector<uint16_t> wb(N * K);
  std::vector<float> wr(N * K), xr(M * K);
  for (int64_t i = 0; i < N * K; ++i) wb[i] = f32_to_bf16(w[i]), wr[i] = bf16_to_f32(wb[i]);
  for (int64_t i = 0; i < M * K; ++i) xr[i] = bf16_to_f32(f32_to_bf16(x[i]));
  std::vector<float> y(M * N), y_exact(M * N), y_f32(M * N);
  gemm_nt_bf16(c, x.data(), wb.data(), M, K, N, y.data());
  gemm_nt(c, xr.data(), wr.data(), M, K, N, y_exact.data());  // the same rounded operands in f32
  gemm_nt(c, x.data(), w.data(), M, K, N, y_f32.data());
  EXPECT_LT(max_rel(y, y_exact), 1e-5);
  EXPECT_LT(max_rel(y, y_f32), 3e-2);
  EXPECT_GT(max_rel(y, y_f32), 0);  // it did round
}

TEST(TrainGemm, CrossEntropyRowsMatchesTheReference) {
  ThreadPool pool(2);
  const KernelTable kt = select_kernels("");
  const OpContext c{&kt, &pool};
  const int64_t n = 7, V = 301;
  std::vector<float> z = randv(n * V, 4, 3.f);
  const std::vector<int32_t> labels = {0, 300, 17, 5, 99, 250, 1};
  const std::vector<float> w = {1, 0.5f, 0, 1, 0.25f, 1, 0.7f};
  z[3 * V + 5] = 40.f;  // row 3: its label is the argmax
  std::vector<float> dz_ref(n * V), dz(n * V);
  const double ref = cross_entropy(z.data(), labels.data(), w.data(), n, V, 4.5, dz_ref.data());
  std::vector<uint8_t> correct(n, 9);
  const double got = cross_entropy_rows(c, z.data(), labels.data(), w.data(), n, V, 4.5, dz.data(), correct.data());
  EXPECT_NEAR(got, ref, 1e-6 * std::fabs(ref));
  EXPECT_LT(max_rel(dz, dz_ref), 1e-5);
  for (int64_t i = 0; i < n; ++i) {
    const float* r = z.data() + i * V;
    EXPECT_EQ(correct[i], std::max_element(r, r + V) - r == labels[i]) << i;
  }
  EXPECT_EQ(correct[3], 1);
  std::vector<float> inplace = z;  // dlogits over the logits
  cross_entropy_rows(c, inplace.data(), labels.data(), w.data(), n, V, 4.5, inplace.data(), correct.data());
  EXPECT_EQ(inplace, dz);
}

// The GEMM form of causal attention against masked attention with causal spans (f64 sums), GQA, odd T.
TEST(TrainGemm, CausalAttentionMatchesMaskedAttention) {
  ThreadPool pool(2);
  const KernelTable kt = select_kernels("");
  const OpContext c{&kt, &pool};
  const int64_t T = 37, nh = 4, nkv = 2, hd = 24;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const std::vector<float> q = randv(T * nh * hd, 1), k = randv(T * nkv * hd, 2), v = randv(T * nkv * hd, 3),
                           dout = randv(T * nh * hd, 4);
  std::vector<int32_t> spans(4 * T);
  for (int64_t i = 0; i < T; ++i) spans[4 * i] = 0, spans[4 * i + 1] = static_cast<int32_t>(i + 1), spans[4 * i + 2] = spans[4 * i + 3] = 0;
  const MaskedAttentionShape s{T, T, nh, nkv, hd, scale};
  std::vector<float> o_ref(T * nh * hd), p_ref, dq_ref(q.size()), dk_ref(k.size()), dv_ref(v.size());
  masked_attention_forward(q.data(), k.data(), v.data(), spans.data(), s, o_ref.data(), p_ref, pool);
  masked_attention_backward(q.data(), k.data(), v.data(), spans.data(), s, p_ref, dout.data(), dq_ref.data(),
                            dk_ref.data(), dv_ref.data(), pool);
  std::vector<float> o(T * nh * hd), p, dq(q.size()), dk(k.size()), dv(v.size());
  causal_attention_forward(c, q.data(), k.data(), v.data(), T, nh, nkv, hd, scale, o.data(), p);
  causal_attention_backward(c, q.data(), k.data(), v.data(), o.data(), p, dout.data(), T, nh, nkv, hd, scale, dq.data(),
                            dk.data(), dv.data());
  EXPECT_LT(max_rel(o, o_ref), 1e-5);
  EXPECT_LT(max_rel(dq, dq_ref), 1e-5);
  EXPECT_LT(max_rel(dk, dk_ref), 1e-5);
  EXPECT_LT(max_rel(dv, dv_ref), 1e-5);
}

}  // namespace
}  // namespace blockspec
