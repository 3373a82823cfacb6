// Comparing logits rows against a reference in the golden tests.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace blockspec {

// max |a - b| over a row, relative to max |b|.
inline double rel_err(const float* a, const float* b, int64_t n) {
  double mx = 0, scale = 1e-30;
  for (int64_t i = 0; i < n; ++i) {
    mx = std::max(mx, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return mx / scale;
}

inline int32_t argmax_of(const float* x, int64_t n) { return static_cast<int32_t>(std::max_element(x, x + n) - x); }

}  // namespace blockspec
