// dequantize_rows agrees with dequantize_weight for every format.
#include "kernels/quant_rows.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "base/error.h"
#include "kernels/quant.h"

namespace blockspec {
namespace {

TEST(QuantRows, MatchesFullDequantizeAllFormats) {
  const int64_t N = 37, K = 200;  // odd rows, K not a multiple of 128
  Tensor w(DType::kF32, {N, K});
  std::mt19937 g(5);
  std::normal_distribution<float> d(0.f, 1.f);
  for (int64_t i = 0; i < N * K; ++i) w.mutable_ptr<float>()[i] = d(g);
  KernelTable kt = select_kernels("");
  ThreadPool pool(2);
  OpContext ctx{&kt, &pool};
  for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kQ8_G128, WeightFormat::kQ4_G128}) {
    QuantTensor q = make_weight(ctx, w, f);
    Tensor full = dequantize_weight(q);
    std::vector<int32_t> rows = {0, 36, 17, 16, 15, 3};
    std::vector<float> out(rows.size() * K);
    dequantize_rows(q, rows.data(), static_cast<int64_t>(rows.size()), out.data());
    for (size_t i = 0; i < rows.size(); ++i)
      for (int64_t k = 0; k < K; ++k)
        ASSERT_EQ(out[i * K + k], full.ptr<float>()[rows[i] * K + k]) << weight_format_name(f) << " row " << rows[i];
    int32_t bad = static_cast<int32_t>(N);
    EXPECT_THROW(dequantize_rows(q, &bad, 1, out.data()), Error);
  }
}

TEST(QuantStreamed, ByteIdenticalToMakeWeight) {
  const int64_t N = 203, K = 576;  // N not a multiple of a panel, K with a short last group
  Tensor w(DType::kF32, {N, K});
  std::mt19937 g(9);
  std::normal_distribution<float> d(0.f, 1.f);
  for (int64_t i = 0; i < N * K; ++i) w.mutable_ptr<float>()[i] = d(g);
  KernelTable kt = select_kernels("");
  ThreadPool pool(2);
  OpContext ctx{&kt, &pool};
  for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kQ8_G128, WeightFormat::kQ4_G128}) {
    QuantTensor a = make_weight(ctx, w, f);
    int64_t calls = 0;
    QuantTensor b = make_weight_streamed(ctx, N, K, f, [&](int64_t r0, int64_t r1, float* out) {
      ++calls;
      std::copy(w.ptr<float>() + r0 * K, w.ptr<float>() + r1 * K, out);
    }, 64);
    EXPECT_EQ(calls, 4) << weight_format_name(f);  // 64-row chunks of 203 rows
    ASSERT_EQ(a.nbytes(), b.nbytes()) << weight_format_name(f);
    for (auto [x, y] : {std::pair{&a.data, &b.data}, std::pair{&a.scales, &b.scales}, std::pair{&a.aux, &b.aux}}) {
      ASSERT_EQ(x->nbytes(), y->nbytes());
      if (x->nbytes() > 0) {
        EXPECT_EQ(0, std::memcmp(x->data(), y->data(), x->nbytes())) << weight_format_name(f);
      }
    }
  }
}

}  // namespace
}  // namespace blockspec
