// Scalar twins of the weight-only Q8_G128 / Q4_G128 kernels (W8A16 / W4A16):
// the exact sequence of float operations of kernels/quant_layout.h, which
// every optimised variant must match bit for bit.
#include <algorithm>
#include <cmath>

#include "kernels/kernel_table.h"

namespace blockspec {

namespace {

void gemm_wo_ref(const PackedWeights& w, const float* x, float* y, int64_t M, int64_t tile0, int64_t tile1) {
  const int64_t K = w.K, n_end = std::min(tile1 * kQTile, w.N);
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * K;  // [K]
    for (int64_t n = tile0 * kQTile; n < n_end; ++n) {
      const int64_t t = n / kQTile, r = n % kQTile;
      float acc = 0.f;
      for (int64_t g = 0; g < w.n_groups; ++g) {
        const int64_t k0 = g * kQGroup, k1 = std::min(k0 + kQGroup, K);
        float s = 0.f;
        for (int64_t k = k0; k < k1; ++k) s = std::fmaf(xr[k], static_cast<float>(packed_code(w, n, k)), s);
        acc = std::fmaf(s, w.scales[(t * w.n_groups + g) * kQTile + r], acc);
      }
      y[m * w.N + n] = acc;
    }
  }
}

}  // namespace

void gemm_q8g128_wo_ref(const PackedWeights& w, const float* x, float* y, int64_t M, int64_t tile0, int64_t tile1) {
  gemm_wo_ref(w, x, y, M, tile0, tile1);
}

void gemm_q4g128_wo_ref(const PackedWeights& w, const float* x, float* y, int64_t M, int64_t tile0, int64_t tile1) {
  gemm_wo_ref(w, x, y, M, tile0, tile1);
}

}  // namespace blockspec
