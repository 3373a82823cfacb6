// Scalar twin of the Gated DeltaNet recurrence (kernels/gdn_kernel.h): the
// AVX-512 kernel does the same operations per lane in the same order.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/kernel_table.h"
#include "kernels/silu_exp.h"

namespace blockspec {

void gdn_recurrent_ref(const GdnHead& h) {
  std::vector<float> r(h.dv), delta(h.dv);
  for (int64_t t = 0; t < h.T; ++t) {
    const float* q = h.q + t * h.qk_stride;
    const float* k = h.k + t * h.qk_stride;
    const float* v = h.v + t * h.v_stride;
    float* o = h.o + t * h.o_stride;
    const float a = h.alpha[t * h.gb_stride], b = h.beta[t * h.gb_stride];
    for (int64_t j = 0; j < h.dv; ++j) r[j] = 0.f;
    for (int64_t i = 0; i < h.dk; ++i) {
      float* s = h.S + i * h.dv;
      for (int64_t j = 0; j < h.dv; ++j) {
        s[j] *= a;
        r[j] = std::fma(s[j], k[i], r[j]);
      }
    }
    for (int64_t j = 0; j < h.dv; ++j) delta[j] = (v[j] - r[j]) * b;
    for (int64_t j = 0; j < h.dv; ++j) o[j] = 0.f;
    for (int64_t i = 0; i < h.dk; ++i) {
      float* s = h.S + i * h.dv;
      for (int64_t j = 0; j < h.dv; ++j) {
        s[j] = std::fma(k[i], delta[j], s[j]);
        o[j] = std::fma(s[j], q[i], o[j]);
      }
    }
  }
}

}  // namespace blockspec

namespace blockspec {

void gdn_chunked_ref(const GdnHead& h) {
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
    std::fill(KT.begin(), KT.end(), 0.f);
    for (int64_t i = 0; i < c; ++i)
      for (int64_t d = 0; d < dk; ++d) KT[d * C + i] = k(i)[d];
    // (x . k_j) for every j of the chunk into r, x = a row of dk values.
    auto dots = [&](const float* x) {
      std::fill(r.begin(), r.end(), 0.f);
      for (int64_t d = 0; d < dk; ++d)
        for (int64_t j = 0; j < C; ++j) r[j] = std::fma(x[d], KT[d * C + j], r[j]);
    };
    for (int64_t i = 0; i < c; ++i) {
      dots(k(i));
      for (int64_t j = 0; j < i; ++j) A[i * C + j] = beta(i) * r[j] * exp_fixed(gam[i] - gam[j]);
    }
    for (int64_t i = 0; i < c; ++i) {
      const float* v = h.v + (t0 + i) * h.v_stride;
      float* u = U.data() + i * dv;
      float* w = W.data() + i * dk;
      for (int64_t e = 0; e < dv; ++e) u[e] = beta(i) * v[e];
      const float bg = beta(i) * Gam[i];
      for (int64_t d = 0; d < dk; ++d) w[d] = bg * k(i)[d];
      for (int64_t j = 0; j < i; ++j) {
        const float a = -A[i * C + j];
        for (int64_t e = 0; e < dv; ++e) u[e] = std::fma(a, U[j * dv + e], u[e]);
        for (int64_t d = 0; d < dk; ++d) w[d] = std::fma(a, W[j * dk + d], w[d]);
      }
      float* vp = Vp.data() + i * dv;  // V'_i = U_i - W_i S
      for (int64_t e = 0; e < dv; ++e) vp[e] = u[e];
      for (int64_t d = 0; d < dk; ++d) {
        const float nw = -w[d];
        for (int64_t e = 0; e < dv; ++e) vp[e] = std::fma(nw, h.S[d * dv + e], vp[e]);
      }
    }
    for (int64_t i = 0; i < c; ++i) {
      float* o = h.o + (t0 + i) * h.o_stride;
      for (int64_t e = 0; e < dv; ++e) qs[e] = 0.f;
      for (int64_t d = 0; d < dk; ++d)
        for (int64_t e = 0; e < dv; ++e) qs[e] = std::fma(q(i)[d], h.S[d * dv + e], qs[e]);
      dots(q(i));
      for (int64_t j = 0; j <= i; ++j) m[j] = r[j] * exp_fixed(gam[i] - gam[j]);
      for (int64_t e = 0; e < dv; ++e) o[e] = Gam[i] * qs[e];
      for (int64_t j = 0; j <= i; ++j)
        for (int64_t e = 0; e < dv; ++e) o[e] = std::fma(m[j], Vp[j * dv + e], o[e]);
    }
    for (int64_t j = 0; j < c; ++j) m[j] = exp_fixed(gam[c - 1] - gam[j]);
    for (int64_t d = 0; d < dk; ++d) {
      float* s = h.S + d * dv;
      for (int64_t e = 0; e < dv; ++e) s[e] *= Gam[c - 1];
      for (int64_t j = 0; j < c; ++j) {
        const float coef = KT[d * C + j] * m[j];
        for (int64_t e = 0; e < dv; ++e) s[e] = std::fma(coef, Vp[j * dv + e], s[e]);
      }
    }
  }
}

}  // namespace blockspec
