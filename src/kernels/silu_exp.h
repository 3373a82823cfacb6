// The exp behind SiLU, spelled out so every ISA computes the same bits: a
// Cody-Waite range reduction and the degree-5 minimax polynomial of Cephes'
// expf (coefficients from Cephes expf.c, S. L. Moshier), every step a fused
// multiply-add in a fixed order. |relative error| < 2 ulp on [-87, 88]; the
// input is clamped there, so exp never over- or underflows (silu(g) is g or 0
// to f32 precision outside). The AVX-512 kernel mirrors these lines one for one.
// Private to the kernels layer.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace blockspec {

inline constexpr float kExpLo = -87.0f, kExpHi = 88.0f;
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;  // ln 2 = hi + lo
inline constexpr float kExpP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                   4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

inline float exp_fixed(float x) {
  x = std::fmin(std::fmax(x, kExpLo), kExpHi);
  const float n = std::nearbyint(x * kLog2e);  // round half to even
  float r = std::fma(n, -kLn2Hi, x);
  r = std::fma(n, -kLn2Lo, r);
  float p = kExpP[0];
  for (int i = 1; i < 6; ++i) p = std::fma(p, r, kExpP[i]);
  const float y = std::fma(p, r * r, r) + 1.0f;  // 1 + r + r^2 p(r)
  uint32_t b;
  std::memcpy(&b, &y, 4);
  b += static_cast<uint32_t>(static_cast<int32_t>(n)) << 23;  // y * 2^n, n in [-126, 127]
  float out;
  std::memcpy(&out, &b, 4);
  return out;
}

// The scalar steps of KernelTable::exp_sub_sum from element i on: x[j] = exp_fixed(x[j] - m), added to the
// partial sum s[j % 16]; then the 16 partial sums in turn. The vector kernels run the whole 16-element chunks in
// lanes (lane l adds into s[l]) and finish the tail and the total here, so every ISA gives the same bits.
inline void exp_sub_sum_tail(float* x, float m, int64_t i, int64_t n, double* s) {
  for (; i < n; ++i) {
    x[i] = exp_fixed(x[i] - m);
    s[i % 16] += x[i];
  }
}
inline double sum16(const double* s) {
  double t = 0;
  for (int l = 0; l < 16; ++l) t += s[l];
  return t;
}

}  // namespace blockspec
