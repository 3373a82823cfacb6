// Scalar twin of the Gated DeltaNet recurrence (kernels/gdn_kernel.h): the
// AVX-512 kernel does the same operations per lane in the same order.
#include <cmath>
#include <vector>

#include "kernels/kernel_table.h"

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
