// Deterministic N(0, sd^2) test vectors for the kernel tests.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace blockspec {

inline std::vector<float> randv(size_t n, uint32_t seed, float sd = 1.f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

}  // namespace blockspec
