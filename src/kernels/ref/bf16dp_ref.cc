// Scalar twin of the VDPBF16PS GEMM (kernels/x86/bf16dp_avx512.cc): the
// same lanes, pair order, denormal rules and reduction tree, so the AVX-512
// BF16 kernel must match it bit for bit.
#include <cmath>
#include <cstdint>

#include "kernels/kernel_table.h"
#include "tensor/dtype.h"

namespace blockspec {

namespace {

// VDPBF16PS reads denormal inputs as zero (DAZ) and flushes denormal
// results to zero (FTZ), keeping the sign (Intel SDM, "DAZ, FTZ, RNE").
inline float daz(float v) { return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v; }
inline float ftz(float v) { return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v; }

float dot_dp(const uint16_t* x, const uint16_t* w, int64_t K) {
  float lane[16] = {};
  for (int64_t c = 0; c < K; c += 32)
    for (int l = 0; l < 16; ++l)
      for (int64_t k : {c + 2 * l + 1, c + 2 * l}) {  // odd element of the pair first
        const float a = k < K ? daz(bf16_to_f32(x[k])) : 0.0f, b = k < K ? daz(bf16_to_f32(w[k])) : 0.0f;
        lane[l] = ftz(std::fma(a, b, lane[l]));
      }
  // _mm512_reduce_add_ps: halves 256, 128, then pairs {0,2},{1,3}, then the last two.
  float s8[8], s4[4];
  for (int i = 0; i < 8; ++i) s8[i] = lane[i + 8] + lane[i];
  for (int i = 0; i < 4; ++i) s4[i] = s8[i + 4] + s8[i];
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

}  // namespace

void matmul_bf16_dp_ref(const uint16_t* x, const uint16_t* w, float* y, int64_t M, int64_t K, int64_t N, int64_t n0,
                        int64_t n1) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = n0; n < n1; ++n) y[m * N + n] = dot_dp(x + m * K, w + n * K, K);
}

}  // namespace blockspec
