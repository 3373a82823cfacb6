// exp_fixed (kernels/silu_exp.h) on 16 lanes, shared by the AVX-512 kernels
// that must match their scalar twins bit for bit (SwiGLU, the Gated DeltaNet
// chunked form).
#pragma once
#include <immintrin.h>

#ifndef BS_AVX512
#define BS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))
#endif

#include "kernels/silu_exp.h"

namespace blockspec {

// exp_fixed (kernels/silu_exp.h), line for line on 16 lanes.
BS_AVX512 inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(kExpLo)), _mm512_set1_ps(kExpHi));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kLn2Hi), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kExpP[0]);
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpP[i]));
  const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  const __m512i e = _mm512_slli_epi32(_mm512_cvtps_epi32(n), 23);
  return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(y), e));
}

}  // namespace blockspec
