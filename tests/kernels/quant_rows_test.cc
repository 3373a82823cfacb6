// dequantize_rows agrees with dequantize_weight for every format.
#include "kernels/quant_rows.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace blockspec
