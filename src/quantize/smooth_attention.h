// SmoothAttention (QServe, Lin et al. 2024, arXiv:2405.04532, §4.2): moves the outlier channels of the keys
// into the queries, so a per-token int8 KV cache (int8_block_g128, int8_per_token_head) rounds the keys on a
// flatter range. Qwen2.5's k_proj biases put a few key channels tens of times above the rest, and the cache's
// one scale per token and head is set by them.
//
// For kv head h and key channel i, over every calibration token t (the keys as the cache stores them, after
// k_norm and RoPE):
//   m_hi = max_t sqrt(k_hi^2 + k_hp^2)  for a rotated channel, p = its RoPE partner (NeoX: i +- rotary_dim / 2;
//          the norm of a rotated pair does not depend on the position, so the scale commutes with RoPE),
//   m_hi = max_t |k_hi|                 for a channel past rotary_dim;
//   lambda_hi = max(m_hi, 1e-5)^alpha   (QServe's lambda = max |K|^alpha; alpha = 0.5 there);
//   keys / lambda, queries of every head of h's group * lambda: q . k, hence attention, is unchanged in exact
//   arithmetic, and V is untouched.
// Where it goes: Qwen2 / Llama: rows h * hd + i of k_proj (weight and bias) / lambda_hi, rows g * hd + i of
// q_proj (weight and bias) of each query head g of group h * lambda_hi. Qwen3 (per-head q_norm / k_norm of [hd],
// shared by the heads): lambda_i = max over h of m_hi, then ^alpha; k_norm / lambda_i, q_norm * lambda_i (the
// RMSNorm's output is linear in its weight). Scaling whole rows leaves a row-wise (group along the input) weight
// quantization the same up to f32 rounding: the int8 cache is the only thing that changes.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/ops.h"
#include "model/weight_overlay.h"
#include "model/weight_source.h"

namespace blockspec {

// Per layer, m [n_kv_heads * head_dim] as defined above, from one forward of src over windows (each a fresh
// causal sequence; calibrate_layers' loop).
std::vector<std::vector<float>> key_channel_absmax(const WeightSource& src, const OpContext& ctx,
                                                   const std::vector<std::vector<int32_t>>& windows);

// The rescaled q/k tensors of every layer (HF name -> f32 values), read through src (so the overrides of an
// OverlaySource, e.g. SmoothQuant's q/k_proj, are what gets scaled). alpha in (0, 1]. Hybrid models and the
// gated attention of Qwen3.5 fail.
TensorOverrides smooth_attention(const WeightSource& src, const OpContext& ctx,
                                 const std::vector<std::vector<int32_t>>& windows, double alpha);
// One layer of it (m: that layer's key absmaxes) into out, reading through src (ptqr --smooth-search).
void smooth_attention_layer(const WeightSource& src, int64_t layer, const std::vector<float>& m, double alpha,
                            TensorOverrides& out);
// The same from m as key_channel_absmax measured it before (ptqr keeps it across a --resume).
TensorOverrides smooth_attention_from_absmax(const WeightSource& src, const std::vector<std::vector<float>>& m,
                                             double alpha);

}  // namespace blockspec
