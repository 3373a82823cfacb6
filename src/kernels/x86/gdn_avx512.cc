// AVX-512 Gated DeltaNet recurrence (kernels/gdn_kernel.h): 16 value columns
// per vector, the scalar twin's operations in its order, so the results are
// bitwise equal. The head's state (dk x dv f32, 64 KiB at 128 x 128) stays
// in L2 across the two passes of every token.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/kernel_table.h"
#include "kernels/x86/exp_avx512.h"

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

namespace blockspec {

namespace {

BS_AVX512 inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
}

// r[j] = x . k_j for the kGdnChunk rows of KT [dk, kGdnChunk], as the twin: fma over d in order.
BS_AVX512 void chunk_dots(const float* x, const float* KT, int64_t dk, float* r) {
  constexpr int64_t C = kGdnChunk;
  __m512 acc[C / 16];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (int64_t d = 0; d < dk; ++d) {
    const __m512 xs = _mm512_set1_ps(x[d]);
    for (int64_t jb = 0; jb < C / 16; ++jb) acc[jb] = _mm512_fmadd_ps(xs, _mm512_loadu_ps(KT + d * C + jb * 16), acc[jb]);
  }
  for (int64_t jb = 0; jb < C / 16; ++jb) _mm512_storeu_ps(r + jb * 16, acc[jb]);
}

}  // namespace

// The chunked form (kernels/gdn_kernel.h), the scalar twin's loops with the
// innermost index (a chunk row j, a value column e or a key column d) in the
// lanes and every reduction in the twin's order.
BS_AVX512 void gdn_chunked_avx512(const GdnHead& h) {
  constexpr int64_t C = kGdnChunk;
  const int64_t dk = h.dk, dv = h.dv;
  std::vector<float> gam(C), Gam(C), KT(dk * C), A(C * C), U(C * dv), W(C * dk), Vp(C * dv), r(C), m(C), qs(dv);
  for (int64_t t0 = 0; t0 < h.T; t0 += C) {
    const int64_t c = std::min(C, h.T - t0);
    auto q = [&](int64_t i) { return h.q + (t0 + i) * h.qk_stride; };
    auto k = [&](int64_t i) { return h.k + (t0 + i) * h.qk_stride; };
    auto beta = [&](int64_t i) { return h.beta[(t0 + i) * h.gb_stride]; };
    float acc = 0.f;
    for (int64_t i = 0; i < c; ++i) {
      acc += h.g[(t0 + i) * h.gb_stride];
      gam[i] = acc, Gam[i] = exp_fixed(acc);
    }
    for (int64_t i = c; i < C; ++i) gam[i] = 0.f;
    std::fill(KT.begin(), KT.end(), 0.f);
    for (int64_t i = 0; i < c; ++i)
      for (int64_t d = 0; d < dk; ++d) KT[d * C + i] = k(i)[d];
    // A_ij = (beta_i r_j) exp(gam_i - gam_j), j < i
    for (int64_t i = 0; i < c; ++i) {
      chunk_dots(k(i), KT.data(), dk, r.data());
      const __m512 b = _mm512_set1_ps(beta(i)), gi = _mm512_set1_ps(gam[i]);
      for (int64_t j = 0; j < i; j += 16) {
        const __mmask16 mk = tail_mask(i - j);
        const __m512 e = exp16(_mm512_sub_ps(gi, _mm512_maskz_loadu_ps(mk, gam.data() + j)));
        _mm512_mask_storeu_ps(A.data() + i * C + j, mk,
                              _mm512_mul_ps(_mm512_mul_ps(b, _mm512_maskz_loadu_ps(mk, r.data() + j)), e));
      }
    }
    for (int64_t i = 0; i < c; ++i) {
      const float* v = h.v + (t0 + i) * h.v_stride;
      float* u = U.data() + i * dv;
      float* w = W.data() + i * dk;
      const __m512 b = _mm512_set1_ps(beta(i)), bg = _mm512_set1_ps(beta(i) * Gam[i]);
      for (int64_t e = 0; e < dv; e += 16) {
        const __mmask16 mk = tail_mask(dv - e);
        _mm512_mask_storeu_ps(u + e, mk, _mm512_mul_ps(b, _mm512_maskz_loadu_ps(mk, v + e)));
      }
      for (int64_t d = 0; d < dk; d += 16) {
        const __mmask16 mk = tail_mask(dk - d);
        _mm512_mask_storeu_ps(w + d, mk, _mm512_mul_ps(bg, _mm512_maskz_loadu_ps(mk, k(i) + d)));
      }
      for (int64_t j = 0; j < i; ++j) {
        const __m512 a = _mm512_set1_ps(-A[i * C + j]);
        for (int64_t e = 0; e < dv; e += 16) {
          const __mmask16 mk = tail_mask(dv - e);
          _mm512_mask_storeu_ps(u + e, mk, _mm512_fmadd_ps(a, _mm512_maskz_loadu_ps(mk, U.data() + j * dv + e),
                                                           _mm512_maskz_loadu_ps(mk, u + e)));
        }
        for (int64_t d = 0; d < dk; d += 16) {
          const __mmask16 mk = tail_mask(dk - d);
          _mm512_mask_storeu_ps(w + d, mk, _mm512_fmadd_ps(a, _mm512_maskz_loadu_ps(mk, W.data() + j * dk + d),
                                                           _mm512_maskz_loadu_ps(mk, w + d)));
        }
      }
      float* vp = Vp.data() + i * dv;  // V'_i = U_i - W_i S
      for (int64_t e = 0; e < dv; e += 16) {
        const __mmask16 mk = tail_mask(dv - e);
        __m512 x = _mm512_maskz_loadu_ps(mk, u + e);
        for (int64_t d = 0; d < dk; ++d)
          x = _mm512_fmadd_ps(_mm512_set1_ps(-w[d]), _mm512_maskz_loadu_ps(mk, h.S + d * dv + e), x);
        _mm512_mask_storeu_ps(vp + e, mk, x);
      }
    }
    for (int64_t i = 0; i < c; ++i) {
      float* o = h.o + (t0 + i) * h.o_stride;
      for (int64_t e = 0; e < dv; e += 16) {
        const __mmask16 mk = tail_mask(dv - e);
        __m512 x = _mm512_setzero_ps();
        for (int64_t d = 0; d < dk; ++d)
          x = _mm512_fmadd_ps(_mm512_set1_ps(q(i)[d]), _mm512_maskz_loadu_ps(mk, h.S + d * dv + e), x);
        _mm512_mask_storeu_ps(qs.data() + e, mk, x);
      }
      chunk_dots(q(i), KT.data(), dk, r.data());
      const __m512 gi = _mm512_set1_ps(gam[i]);
      for (int64_t j = 0; j < i + 1; j += 16) {
        const __mmask16 mk = tail_mask((i + 1) - j);
        const __m512 e = exp16(_mm512_sub_ps(gi, _mm512_maskz_loadu_ps(mk, gam.data() + j)));
        _mm512_mask_storeu_ps(m.data() + j, mk, _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, r.data() + j), e));
      }
      const __m512 G = _mm512_set1_ps(Gam[i]);
      for (int64_t e = 0; e < dv; e += 16) {
        const __mmask16 mk = tail_mask(dv - e);
        __m512 x = _mm512_mul_ps(G, _mm512_maskz_loadu_ps(mk, qs.data() + e));
        for (int64_t j = 0; j <= i; ++j)
          x = _mm512_fmadd_ps(_mm512_set1_ps(m[j]), _mm512_maskz_loadu_ps(mk, Vp.data() + j * dv + e), x);
        _mm512_mask_storeu_ps(o + e, mk, x);
      }
    }
    for (int64_t j = 0; j < c; ++j) m[j] = exp_fixed(gam[c - 1] - gam[j]);
    const __m512 Gl = _mm512_set1_ps(Gam[c - 1]);
    for (int64_t d = 0; d < dk; ++d) {
      float* s = h.S + d * dv;
      for (int64_t e = 0; e < dv; e += 16) {
        const __mmask16 mk = tail_mask(dv - e);
        __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, s + e), Gl);
        for (int64_t j = 0; j < c; ++j)
          x = _mm512_fmadd_ps(_mm512_set1_ps(KT[d * C + j] * m[j]), _mm512_maskz_loadu_ps(mk, Vp.data() + j * dv + e), x);
        _mm512_mask_storeu_ps(s + e, mk, x);
      }
    }
  }
}

}  // namespace blockspec
