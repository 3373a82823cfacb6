// Scalar twin of the FP8 / NVFP4 / MXFP4 weight-only GEMM (arithmetic in kernels/fp_formats.h).
#include <cmath>

#include "kernels/kernel_table.h"

namespace blockspec {

void gemm_fp_ref(const FpWeights& w, const float* x, float* y, int64_t M, int64_t n0, int64_t n1) {
  const int64_t K = w.K;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = n0; n < n1; ++n) {
      float acc[16] = {};
      for (int64_t k = 0; k < K; ++k) acc[k % 16] = std::fma(x[m * K + k], w.value(n, k), acc[k % 16]);
      for (int h = 8; h >= 1; h /= 2)
        for (int j = 0; j < h; ++j) acc[j] += acc[j + h];
      y[m * w.N + n] = acc[0];
    }
}

}  // namespace blockspec
