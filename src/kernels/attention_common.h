// Pieces every attention variant (f32 cache in ops.cc, compressed caches in
// kv_attention.cc) shares, so their arithmetic stays identical: the score
// scaling and the softmax over one query block. Private to the kernels layer.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/ops.h"
#include "tensor/dtype.h"

namespace blockspec {

// q.k scaled; under bf16 emulation both the dot and the product round to
// bf16 as eager HF attention does.
inline float attention_score(float d, const AttentionShape& s) {
  return s.round_bf16 ? bf16_to_f32(f32_to_bf16(bf16_to_f32(f32_to_bf16(d)) * s.scale)) : d * s.scale;
}

// scores: [n_h, n_ctx] -> probabilities in place, each row i stabilised by
// its max mx[i] and summed in double; bf16 emulation rounds the result.
inline void softmax_rows(float* scores, const float* mx, int64_t n_h, int64_t n_ctx, bool round_bf16) {
  for (int64_t i = 0; i < n_h; ++i) {
    float* sc = scores + i * n_ctx;
    double sum = 0;
    for (int64_t j = 0; j < n_ctx; ++j) {
      sc[j] = std::exp(sc[j] - mx[i]);
      sum += sc[j];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < n_ctx; ++j) {
      sc[j] *= inv;
      if (round_bf16) sc[j] = bf16_to_f32(f32_to_bf16(sc[j]));
    }
  }
}

}  // namespace blockspec
