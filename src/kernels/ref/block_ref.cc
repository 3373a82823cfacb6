// Scalar twins of the GGUF block-format kernels: the exact integer sums and the exact sequence of float
// operations of kernels/block_layout.h, which every optimised variant must match bit for bit.
#include <algorithm>
#include <cmath>

#include "kernels/kernel_table.h"
#include "tensor/dtype.h"

namespace blockspec {

void quantize_acts_block_ref(const float* x, int64_t M, int64_t K, int B, int S, int8_t* q, float* d, int32_t* sums) {
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * K;  // [K]
    int8_t* qr = q + m * K;       // [K]
    for (int64_t s = 0; s < K / B; ++s) {
      float amax = 0.f;
      for (int64_t k = s * B; k < (s + 1) * B; ++k) amax = std::max(amax, std::fabs(xr[k]));
      const float inv = amax > 0.f ? 127.0f / amax : 0.f;
      d[m * (K / B) + s] = amax / 127.0f;
      for (int64_t k = s * B; k < (s + 1) * B; ++k) {
        // nearbyint rounds half to even in the default rounding mode, like cvtps2dq.
        const float c = std::min(127.f, std::max(-127.f, std::nearbyint(xr[k] * inv)));
        qr[k] = static_cast<int8_t>(c);
      }
    }
    for (int64_t j = 0; j < K / S; ++j) {
      int32_t sum = 0;
      for (int64_t k = j * S; k < (j + 1) * S; ++k) sum += qr[k];
      sums[m * (K / S) + j] = sum;
    }
  }
}

void gemm_block_ref(const BlockActs& a, const BlockWeights& w, float* y, int64_t tile0, int64_t tile1) {
  const BlockQuantSpec& sp = w.spec;
  const int64_t K = w.K, B = sp.block, S = sp.sub, A = block_act_size(B), n_end = std::min(tile1 * kQTile, w.N);
  for (int64_t m = 0; m < a.M; ++m) {
    const int8_t* xq = a.q + m * K;  // [K]
    for (int64_t n = tile0 * kQTile; n < n_end; ++n) {
      float acc = 0.f;
      QBlock b;
      for (int64_t ab = 0; ab < K / A; ++ab) {
        const int64_t s = ab * A / B;
        if ((ab * A) % B == 0) b = bq_block(w, n, s);
        int32_t si = 0, mi = 0;
        for (int64_t j = (ab * A) % B / S; j < ((ab * A) % B + A) / S; ++j) {  // sub-blocks of s inside ab
          const int32_t X = a.sums[m * (K / S) + s * sp.subs() + j];
          int32_t I = 0;
          for (int64_t k = j * S; k < (j + 1) * S; ++k) I += static_cast<int32_t>(b.u[k]) * xq[s * B + k];
          I -= sp.zero * X;
          si += (sp.has_scale ? b.sc[j] : 1) * I;
          if (sp.has_min) mi += (sp.has_scale ? b.mc[j] : 1) * X;
        }
        const float dx = a.d[m * (K / A) + ab];
        acc = std::fmaf(static_cast<float>(si), f16_to_f32(b.d) * dx, acc);
        if (sp.has_min) acc = std::fmaf(static_cast<float>(mi), f16_to_f32(b.dm) * dx, acc);
      }
      y[m * w.N + n] = acc;
    }
  }
}

}  // namespace blockspec
