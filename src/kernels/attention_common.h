// Pieces every attention variant (f32 cache in ops.cc, compressed caches in
// kv_attention.cc) shares, so their arithmetic stays identical: the score
// scaling and the softmax over one query block. Private to the kernels layer.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/kernel_table.h"
#include "kernels/ops.h"
#include "tensor/dtype.h"

namespace blockspec {

// q.k scaled; under bf16 emulation both the dot and the product round to
// bf16 as eager HF attention does.
inline float attention_score(float d, const AttentionShape& s) {
  return s.round_bf16 ? bf16_to_f32(f32_to_bf16(bf16_to_f32(f32_to_bf16(d)) * s.scale)) : d * s.scale;
}

// scores: [n_h, n_ctx] -> probabilities in place, each row i stabilised by its max mx[i]: the exponentials and
// their double sum are KernelTable::exp_sub_sum's (exp_fixed, 16 partial sums: the same bits on every ISA; until
// session 36 std::exp and one running sum, a library call per score that cost SmolLM2-135M's 8-row verification
// more than its K rows' dot products); bf16 emulation rounds the result.
inline void softmax_rows(const KernelTable& k, float* scores, const float* mx, int64_t n_h, int64_t n_ctx,
                         bool round_bf16) {
  for (int64_t i = 0; i < n_h; ++i) {
    float* sc = scores + i * n_ctx;
    const double sum = k.exp_sub_sum(sc, mx[i], n_ctx);
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < n_ctx; ++j) {
      sc[j] *= inv;
      if (round_bf16) sc[j] = bf16_to_f32(f32_to_bf16(sc[j]));
    }
  }
}

}  // namespace blockspec
