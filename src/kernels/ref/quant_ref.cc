// Scalar twins of the integer-format kernels. Unlike basic_ref.cc they do not
// accumulate in double: they perform the exact integer sums and the exact
// sequence of float operations spelled out in kernels/quant_layout.h, so every
// optimised variant must match them bit for bit.
#include <algorithm>
#include <cmath>

#include "kernels/kernel_table.h"

namespace blockspec {

void quantize_acts_ref(const float* x, int64_t M, int64_t K, uint8_t* q, float* scales) {
  const int64_t Kp = q_padded_k(K), G = q_groups(K);
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * K;  // [K]
    uint8_t* qr = q + m * Kp;      // [Kp]
    for (int64_t g = 0; g < G; ++g) {
      const int64_t k0 = g * kQGroup, k1 = std::min(k0 + kQGroup, K);
      float amax = 0.f;
      for (int64_t k = k0; k < k1; ++k) amax = std::max(amax, std::fabs(xr[k]));
      const float inv = amax > 0.f ? 127.0f / amax : 0.f;
      scales[m * G + g] = amax / 127.0f;
      for (int64_t k = k0; k < k1; ++k) {
        // nearbyint rounds half to even in the default rounding mode, like cvtps2dq.
        float c = std::nearbyint(xr[k] * inv);
        c = std::min(127.f, std::max(-127.f, c));
        qr[k] = static_cast<uint8_t>(static_cast<int>(c) + 128);
      }
    }
    for (int64_t k = K; k < Kp; ++k) qr[k] = 128;
  }
}

// vLLM's dynamic per-token int8 (csrc int8_quant_kernels.cu, dynamic_scaled_int8_quant_kernel): one absmax over
// the whole row, scale = absmax / 127, code = rni(x * (127 / absmax)) saturated. The row's scale is written into
// every group slot so the GEMMs above run unchanged. absmax = 0 gives codes 0 and scale 0 (vLLM: NaN -> 0).
void quantize_acts_token_ref(const float* x, int64_t M, int64_t K, uint8_t* q, float* scales) {
  const int64_t Kp = q_padded_k(K), G = q_groups(K);
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * K;  // [K]
    uint8_t* qr = q + m * Kp;      // [Kp]
    float amax = 0.f;
    for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(xr[k]));
    const float inv = amax > 0.f ? 127.0f / amax : 0.f;
    for (int64_t g = 0; g < G; ++g) scales[m * G + g] = amax / 127.0f;
    for (int64_t k = 0; k < K; ++k) {
      float c = std::nearbyint(xr[k] * inv);  // half to even, like cvt.rni
      c = std::min(127.f, std::max(-128.f, c));
      qr[k] = static_cast<uint8_t>(static_cast<int>(c) + 128);
    }
    for (int64_t k = K; k < Kp; ++k) qr[k] = 128;
  }
}

namespace {

void gemm_ref(const QuantActs& a, const PackedWeights& w, float* y, int64_t tile0, int64_t tile1) {
  const int64_t n_end = std::min(tile1 * kQTile, w.N);
  for (int64_t m = 0; m < a.M; ++m) {
    const uint8_t* xq = a.q + m * w.Kp;  // [Kp]
    for (int64_t n = tile0 * kQTile; n < n_end; ++n) {
      const int64_t t = n / kQTile, r = n % kQTile;
      float acc = 0.f;
      for (int64_t g = 0; g < w.n_groups; ++g) {
        const int64_t k0 = g * kQGroup, k1 = std::min(k0 + kQGroup, w.Kp);
        int32_t d = 0;
        for (int64_t k = k0; k < k1; ++k) d += static_cast<int32_t>(xq[k]) * packed_code(w, n, k);
        const int64_t gi = (t * w.n_groups + g) * kQTile + r;
        d -= w.corr[gi];
        acc = std::fmaf(static_cast<float>(d), w.scales[gi] * a.scales[m * w.n_groups + g], acc);
      }
      y[m * w.N + n] = acc;
    }
  }
}

}  // namespace

void gemm_q8g128_ref(const QuantActs& a, const PackedWeights& w, float* y, int64_t tile0, int64_t tile1) {
  gemm_ref(a, w, y, tile0, tile1);
}

void gemm_q4g128_ref(const QuantActs& a, const PackedWeights& w, float* y, int64_t tile0, int64_t tile1) {
  gemm_ref(a, w, y, tile0, tile1);
}

}  // namespace blockspec
