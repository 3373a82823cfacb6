// Largest absolute difference of a from the reference b, relative to b's largest magnitude.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

namespace blockspec {

inline double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return worst / scale;
}

}  // namespace blockspec
