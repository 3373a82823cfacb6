// AVX-512 Gated DeltaNet recurrence (kernels/gdn_kernel.h): 16 value columns
// per vector, the scalar twin's operations in its order, so the results are
// bitwise equal. The head's state (dk x dv f32, 64 KiB at 128 x 128) stays
// in L2 across the two passes of every token.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "kernels/kernel_table.h"

#define BS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

namespace blockspec {

BS_AVX512 void gdn_recurrent_avx512(const GdnHead& h) {
  constexpr int64_t kMaxDv = 1024;
  alignas(64) float r[kMaxDv], delta[kMaxDv];
  if (h.dv > kMaxDv) {  // no real model is that wide; keep the twin's answer
    gdn_recurrent_ref(h);
    return;
  }
  const int64_t dv = h.dv, full = dv / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (dv - full)) - 1u);
  for (int64_t t = 0; t < h.T; ++t) {
    const float* q = h.q + t * h.qk_stride;
    const float* k = h.k + t * h.qk_stride;
    const float* v = h.v + t * h.v_stride;
    float* o = h.o + t * h.o_stride;
    const __m512 a = _mm512_set1_ps(h.alpha[t * h.gb_stride]), b = _mm512_set1_ps(h.beta[t * h.gb_stride]);
    for (int64_t j = 0; j < dv; j += 16) _mm512_store_ps(r + j, _mm512_setzero_ps());
    for (int64_t i = 0; i < h.dk; ++i) {
      float* s = h.S + i * dv;
      const __m512 ki = _mm512_set1_ps(k[i]);
      int64_t j = 0;
      for (; j < full; j += 16) {
        const __m512 sv = _mm512_mul_ps(_mm512_loadu_ps(s + j), a);
        _mm512_storeu_ps(s + j, sv);
        _mm512_store_ps(r + j, _mm512_fmadd_ps(sv, ki, _mm512_load_ps(r + j)));
      }
      if (tail) {
        const __m512 sv = _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, s + j), a);
        _mm512_mask_storeu_ps(s + j, tail, sv);
        _mm512_store_ps(r + j, _mm512_fmadd_ps(sv, ki, _mm512_load_ps(r + j)));
      }
    }
    for (int64_t j = 0; j < dv; j += 16) {
      const __m512 vv = j < full ? _mm512_loadu_ps(v + j) : _mm512_maskz_loadu_ps(tail, v + j);
      _mm512_store_ps(delta + j, _mm512_mul_ps(_mm512_sub_ps(vv, _mm512_load_ps(r + j)), b));
      _mm512_store_ps(r + j, _mm512_setzero_ps());  // r now accumulates o_t
    }
    for (int64_t i = 0; i < h.dk; ++i) {
      float* s = h.S + i * dv;
      const __m512 ki = _mm512_set1_ps(k[i]), qi = _mm512_set1_ps(q[i]);
      int64_t j = 0;
      for (; j < full; j += 16) {
        const __m512 sv = _mm512_fmadd_ps(ki, _mm512_load_ps(delta + j), _mm512_loadu_ps(s + j));
        _mm512_storeu_ps(s + j, sv);
        _mm512_store_ps(r + j, _mm512_fmadd_ps(sv, qi, _mm512_load_ps(r + j)));
      }
      if (tail) {
        const __m512 sv = _mm512_fmadd_ps(ki, _mm512_load_ps(delta + j), _mm512_maskz_loadu_ps(tail, s + j));
        _mm512_mask_storeu_ps(s + j, tail, sv);
        _mm512_store_ps(r + j, _mm512_fmadd_ps(sv, qi, _mm512_load_ps(r + j)));
      }
    }
    int64_t j = 0;
    for (; j < full; j += 16) _mm512_storeu_ps(o + j, _mm512_load_ps(r + j));
    if (tail) _mm512_mask_storeu_ps(o + j, tail, _mm512_load_ps(r + j));
  }
}

}  // namespace blockspec
