// Masked multi-head attention over explicit key spans (the drafter's anchor blocks, grad_ops.h
// MaskedAttentionShape) as small GEMMs on the engine's f32 matmul kernel (KernelTable::matmul_f32): the
// trainer's hot path. grad_ops.h masked_attention_forward / _backward (f64 sums, dense probabilities) are the
// scalar reference twins; tests/train/span_attention_test.cc checks one against the other.
//
// Queries are taken in runs of consecutive rows with the same spans (a block's slots share them when the block
// is not causal) and, within a run, all heads of one KV head at once: a run's R = rows x group query vectors
// multiply the same gathered keys. The saved probabilities are compact: for query i (n_i = its span length),
// head h, key j of its spans (context span first): probs[off_i + h * n_i + j], off_i = H * sum_{i' < i} n_i'.
// The forward's threads take (run, KV head) tasks, the backward's whole KV heads with their runs in row order,
// so every result is independent of the pool's size.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/ops.h"
#include "train/grad_ops.h"

namespace blockspec {

//   q: [nq, n_heads, hd]  k, v: [nk, n_kv_heads, hd]  spans: [nq, 4]  out: [nq, n_heads, hd] (written)
void span_attention_forward(const OpContext& c, const float* q, const float* k, const float* v, const int32_t* spans,
                            const MaskedAttentionShape& s, float* out, std::vector<float>& probs);
// dq [nq, n_heads, hd] written; dk, dv [nk, n_kv_heads, hd] written.
void span_attention_backward(const OpContext& c, const float* q, const float* k, const float* v, const int32_t* spans,
                             const MaskedAttentionShape& s, const std::vector<float>& probs, const float* dout,
                             float* dq, float* dk, float* dv);

}  // namespace blockspec
