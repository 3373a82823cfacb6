// attention_block (ops.h): the DFlash drafter's masked / windowed attention
// of one block over its context and itself.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/attention_common.h"
#include "kernels/ops.h"

namespace blockspec {

namespace {

// Query i, head h: scores over its visible keys (context first, then block
// slots), softmax, weighted sum of the matching values.
void attend_block_query(const OpContext& ctx, const float* q, const float* const* ctx_k, const float* const* ctx_v,
                        const float* kb, const float* vb, const BlockAttentionShape& s, int64_t i, int64_t h,
                        std::vector<float>& sc, std::vector<const float*>& vrows, float* out) {
  const int64_t D = s.head_dim, kv_stride = s.n_kv_heads * D;
  const int64_t g = h / (s.n_heads / s.n_kv_heads);
  const float* qv = q + (i * s.n_heads + h) * D;
  int64_t c_lo = s.ctx_lo;
  if (s.window > 0) c_lo = std::max(c_lo, s.P + i - s.window + 1);
  sc.clear(), vrows.clear();
  float mx = -INFINITY;
  auto add = [&](const float* k, const float* v) {
    const float d = ctx.k->dot(qv, k, D) * s.scale;
    sc.push_back(d), vrows.push_back(v);
    mx = std::max(mx, d);
  };
  for (int64_t pk = c_lo; pk < s.P; ++pk) add(ctx_k[pk - s.ctx_lo] + g * D, ctx_v[pk - s.ctx_lo] + g * D);
  for (int64_t j = 0; j < s.nb; ++j) {
    if (s.causal && j > i) continue;
    if (s.window > 0 && (i - j >= s.window || j - i >= s.window)) continue;
    add(kb + j * kv_stride + g * D, vb + j * kv_stride + g * D);
  }
  float* o = out + (i * s.n_heads + h) * D;
  std::memset(o, 0, D * sizeof(float));
  const int64_t n = static_cast<int64_t>(sc.size());  // >= 1: slot i always sees itself
  softmax_rows(*ctx.k, sc.data(), &mx, 1, n, false);
  for (int64_t j = 0; j < n; ++j) ctx.k->axpy(sc[j], vrows[j], o, D);
}

}  // namespace

void attention_block(const OpContext& ctx, const float* q, const float* const* ctx_k, const float* const* ctx_v,
                     const float* kb, const float* vb, const BlockAttentionShape& s, float* out) {
  ctx.pool->parallel_for(s.nb * s.n_heads, [&](int64_t b, int64_t e) {
    std::vector<float> sc;
    std::vector<const float*> vrows;
    for (int64_t qi = b; qi < e; ++qi)
      attend_block_query(ctx, q, ctx_k, ctx_v, kb, vb, s, qi / s.n_heads, qi % s.n_heads, sc, vrows, out);
  });
}

}  // namespace blockspec
