// Scalar reference kernels: the ground truth every optimised variant is
// tested against. Accumulate in double so the twin is the more exact side.
#include <cstring>

#include "kernels/kernel_table.h"
#include "kernels/silu_exp.h"
#include "tensor/dtype.h"

namespace blockspec {

void matmul_f32_ref(const float* x, const float* w, float* y, int64_t M, int64_t K, int64_t N,
                    int64_t n0, int64_t n1) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = n0; n < n1; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(x[m * K + k]) * w[n * K + k];
      y[m * N + n] = static_cast<float>(acc);
    }
}

void matmul_bf16_ref(const float* x, const uint16_t* w, float* y, int64_t M, int64_t K, int64_t N,
                     int64_t n0, int64_t n1) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = n0; n < n1; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(x[m * K + k]) * bf16_to_f32(w[n * K + k]);
      y[m * N + n] = static_cast<float>(acc);
    }
}

float dot_ref(const float* a, const float* b, int64_t n) {
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(a[i]) * b[i];
  return static_cast<float>(acc);
}

uint64_t read_stream_ref(const uint8_t* p, int64_t n) {
  uint64_t acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // eight independent chains keep loads in flight
  for (int64_t i = 0; i + 64 <= n; i += 64)
    for (int j = 0; j < 8; ++j) {
      uint64_t v;
      std::memcpy(&v, p + i + 8 * j, 8);
      acc[j] += v;
    }
  return acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7];
}

double exp_sub_sum_ref(float* x, float m, int64_t n) {
  double s[16] = {};
  exp_sub_sum_tail(x, m, 0, n, s);
  return sum16(s);
}

void swiglu_ref(const float* gate, const float* up, float* out, int64_t n, bool round_bf16) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    float s = g / (1.0f + exp_fixed(-g));
    if (round_bf16) s = bf16_to_f32(f32_to_bf16(s));
    if (up == nullptr) {  // silu alone
      out[i] = s;
      continue;
    }
    float o = s * up[i];
    if (round_bf16) o = bf16_to_f32(f32_to_bf16(o));
    out[i] = o;
  }
}

void axpy_ref(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace blockspec
