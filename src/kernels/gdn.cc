#include "kernels/gdn.h"

#include <algorithm>
#include <cmath>

#include "base/thread_pool.h"
#include "kernels/kernel_table.h"

namespace blockspec {

void gdn_conv_silu(const OpContext& ctx, const float* x, int64_t T, int64_t x_stride, const float* w, int64_t K,
                   int64_t C, float* state, float* out) {
  auto run = [&](int64_t c0, int64_t c1) {
    for (int64_t t = 0; t < T; ++t) {
      float* o = out + t * C;
      for (int64_t c = c0; c < c1; ++c) o[c] = 0.f;
      for (int64_t j = 0; j < K; ++j) {
        const int64_t r = t - K + 1 + j;  // input row; < 0: from the carried state
        const float* in = r < 0 ? state + (K - 1 + r) * C : x + r * x_stride;
        const float* wj = w + j * C;
        for (int64_t c = c0; c < c1; ++c) o[c] += wj[c] * in[c];
      }
      ctx.k->swiglu(o + c0, nullptr, o + c0, c1 - c0, false);  // silu, the SwiGLU kernels' arithmetic
    }
  };
  if (T * C < 16384) {
    run(0, C);
  } else {
    ctx.pool->parallel_for_grain(C, 64, run);
  }
  // The state becomes the last K-1 inputs: older state rows shift up first.
  const int64_t keep = std::max<int64_t>(0, K - 1 - T);  // state rows that stay
  for (int64_t i = 0; i < keep; ++i) std::copy(state + (i + T) * C, state + (i + T + 1) * C, state + i * C);
  for (int64_t i = keep; i < K - 1; ++i) {
    const float* src = x + (T - (K - 1 - i)) * x_stride;
    std::copy(src, src + C, state + i * C);
  }
}

void gdn_recurrent_heads(const OpContext& ctx, const std::vector<GdnHead>& heads) {
  const int64_t n = static_cast<int64_t>(heads.size());
  const KernelTable* kt = ctx.k;
  auto one = [kt](const GdnHead& h) { h.g != nullptr ? kt->gdn_chunked(h) : kt->gdn_recurrent(h); };
  if (n == 1) {
    one(heads[0]);
    return;
  }
  ctx.pool->parallel_for_dynamic(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) one(heads[i]);
  });
}

}  // namespace blockspec
