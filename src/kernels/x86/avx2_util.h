// Small AVX2 helpers shared by the x86 kernel files.
#pragma once
#include <immintrin.h>

namespace blockspec {

// Horizontal sum of 8 floats (fixed order, so every caller reduces alike).
__attribute__((target("avx2,fma"))) inline float hsum256(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

}  // namespace blockspec
