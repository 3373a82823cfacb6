#include "ptqr/student.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "kernels/quant_import.h"
#include "runtime/sampler.h"

namespace blockspec {

void requantize(StudentGroup& g, const QuantSpec& spec, double sigma, uint64_t seed, ThreadPool& pool) {
  if (spec.is_float || !spec.sym) fail("ptqr: only symmetric integer weight grids train (found ", spec.describe(), ")");
  g.deq.resize(g.N * g.K);
  const int lo = -(1 << (spec.bits - 1)), hi = (1 << (spec.bits - 1)) - 1;
  int64_t row0 = 0;
  for (size_t pi = 0; pi < g.parts.size(); ++pi) {
    StudentPart& p = g.parts[pi];
    p.qw = make_params(spec, p.w.data(), p.N, g.K);
    QuantWeight& qw = p.qw;
    qw.q.resize(p.N * g.K);
    if (sigma == 0.0) quantize_rtn(qw, p.w.data());
    pool.parallel_for(p.N, [&](int64_t r0, int64_t r1) {
      for (int64_t n = r0; n < r1; ++n) {
        const float* w = p.w.data() + n * g.K;
        int8_t* q = qw.q.data() + n * g.K;
        float* d = g.deq.data() + (row0 + n) * g.K;
        if (sigma > 0.0) {
          Rng rng(seed ^ (0x9E3779B97F4A7C15ull * (pi + 1)) ^ (static_cast<uint64_t>(n) << 20));
          for (int64_t k = 0; k < g.K; ++k) {
            const float u = w[k] / qw.group_scale(n, qw.group_of(k));
            const double xi = rng.uniform() - 0.5;
            const double r = std::floor(static_cast<double>(u) + 0.5 + sigma * xi);
            q[k] = static_cast<int8_t>(std::clamp(r, static_cast<double>(lo), static_cast<double>(hi)));
          }
        }
        for (int64_t k = 0; k < g.K; ++k) d[k] = qw.dequantize_code(n, k, q[k]);
      }
    });
    row0 += p.N;
  }
}

bool ptqr_acts_int8(const QuantSpec& spec) { return spec.scheme == QScheme::kW8A8; }

QuantTensor serving_weight(const OpContext& ctx, const StudentGroup& g) {
  const int64_t G = (g.K + 127) / 128;
  if (g.parts.empty()) fail("ptqr: a group without parts");
  const QuantSpec& spec = g.parts[0].qw.spec;
  for (const StudentPart& p : g.parts)
    if ((p.qw.spec.bits != 8 && p.qw.spec.bits != 4) || p.qw.spec.bits != spec.bits || p.qw.spec.scheme != spec.scheme ||
        p.qw.group_len != 128 || p.qw.n_groups != G)
      fail("ptqr: the serving weight needs int8 or int4 codes in groups of 128, one scheme per group (", p.module,
           " is ", p.qw.spec.describe(), ")");
  QuantTensor t = make_weight_from_codes(ctx, g.N, g.K, spec.bits == 4 ? WeightFormat::kQ4_G128 : WeightFormat::kQ8_G128,
                                         [&](int64_t r0, int64_t r1, int8_t* codes, float* scales) {
                                           int64_t base = 0;
                                           for (const StudentPart& p : g.parts) {
                                             const int64_t b = std::max(r0, base), e = std::min(r1, base + p.N);
                                             for (int64_t r = b; r < e; ++r) {
                                               std::copy_n(p.qw.q.data() + (r - base) * g.K, g.K,
                                                           codes + (r - r0) * g.K);
                                               std::copy_n(p.qw.scale.data() + (r - base) * G, G,
                                                           scales + (r - r0) * G);
                                             }
                                             base += p.N;
                                           }
                                         });
  t.act_int8 = t.act_per_token = ptqr_acts_int8(spec);
  return t;
}

double relative_dequant_error(const StudentGroup& g, size_t part) {
  int64_t row0 = 0;
  for (size_t i = 0; i < part; ++i) row0 += g.parts[i].N;
  const StudentPart& p = g.parts[part];
  double num = 0, den = 0;
  for (int64_t i = 0; i < p.N * g.K; ++i) {
    const double w = p.w[i], d = w - g.deq[row0 * g.K + i];
    num += d * d, den += w * w;
  }
  return den > 0 ? std::sqrt(num / den) : 0.0;
}

}  // namespace blockspec
