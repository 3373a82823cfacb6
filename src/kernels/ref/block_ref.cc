// Scalar twins of the GGUF block-format kernels: the exact integer sums and the exact sequence of float
// operations of kernels/block_layout.h, which every optimised variant must match bit for bit.
#include <algorithm>
#include <cmath>

#include "kernels/kernel_table.h"
#include "tensor/dtype.h"

namespace blockspec {

void quantize_acts_block_ref(const float* x, int64_t M, int64_t K, int S, int8_t* q, float* d, int32_t* sums,
                             float* csums) {
  const int64_t A = kBlockActs;
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * K;  // [K]
    int8_t* qr = q + m * K;       // [K]
    for (int64_t s = 0; s < K / A; ++s) {
      float amax = 0.f;
      for (int64_t k = s * A; k < (s + 1) * A; ++k) amax = std::max(amax, std::fabs(xr[k]));
      const float inv = amax > 0.f ? 127.0f / amax : 0.f;
      d[m * (K / A) + s] = amax / 127.0f;
      for (int64_t k = s * A; k < (s + 1) * A; ++k) {
        // nearbyint rounds half to even in the default rounding mode, like cvtps2dq.
        const float c = std::min(127.f, std::max(-127.f, std::nearbyint(xr[k] * inv)));
        qr[k] = static_cast<int8_t>(c);
      }
    }
    for (int64_t j = 0; j < K / S; ++j) {
      int32_t sum = 0;
      for (int64_t k = j * S; k < (j + 1) * S; ++k) sum += qr[k];
      sums[m * (K / S) + j] = sum;
      csums[m * (K / S) + j] = static_cast<float>(sum) * d[m * (K / A) + j * S / A];
    }
  }
}

void gemm_block_ref(const BlockActs& a, const BlockWeights& w, float* y, int64_t tile0, int64_t tile1) {
  const BlockQuantSpec& sp = w.spec;
  const int64_t K = w.K, B = sp.block, S = sp.sub, A = kBlockActs, NS = sp.subs(), n_end = std::min(tile1 * kQTile, w.N);
  for (int64_t m = 0; m < a.M; ++m) {
    const int8_t* xq = a.q + m * K;  // [K]
    for (int64_t n = tile0 * kQTile; n < n_end; ++n) {
      float acc = 0.f;
      for (int64_t s = 0; s < K / B; ++s) {
        const QBlock b = bq_block(w, n, s);
        float blk = 0.f, mblk = 0.f;
        for (int64_t jb = 0; jb < NS; ++jb) {
          const int64_t j = s * NS + jb;  // sub-block of the whole row
          int32_t I = 0;
          for (int64_t k = jb * S; k < (jb + 1) * S; ++k) I += static_cast<int32_t>(b.u[k]) * xq[s * B + k];
          I -= sp.zero * a.sums[m * (K / S) + j];
          const int32_t P = sp.has_scale ? I * static_cast<int32_t>(b.sc[jb]) : I;
          blk = std::fmaf(static_cast<float>(P), a.d[m * (K / A) + j * S / A], blk);
          if (sp.has_min)
            mblk = std::fmaf(sp.has_scale ? static_cast<float>(b.mc[jb]) : 1.f, a.csums[m * (K / S) + j], mblk);
        }
        acc = std::fmaf(blk, f16_to_f32(b.d), acc);
        if (sp.has_min) acc = std::fmaf(mblk, f16_to_f32(b.dm), acc);
      }
      y[m * w.N + n] = acc;
    }
  }
}

}  // namespace blockspec
