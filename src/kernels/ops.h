// The public kernel API: every op the model calls. Ops take an OpContext
// (kernel table + thread pool) and raw row-major buffers with shapes in the
// comments. Weights arrive as Tensor so the op can dispatch on their dtype.
#pragma once
#include <cstdint>

#include "base/thread_pool.h"
#include "kernels/kernel_table.h"
#include "tensor/tensor.h"

namespace blockspec {

struct OpContext {
  const KernelTable* k;
  ThreadPool* pool;
  // Activations are bf16 (--activations bf16): linear() rounds x to bf16
  // and multiplies bf16 weights with k->matmul_bf16_dp where the CPU has it.
  bool bf16_activations = false;
  // The drafter trainer's linear products (train/gemm.h gemm_nt, forward and
  // backward) round both operands to bf16 and sum in f32, as PyTorch's bf16
  // autocast does (train-drafter --matmul bf16). Nothing else reads it.
  bool bf16_train_products = false;
};

// y[M, N] = x[M, K] @ w[N, K]^T (+ bias[N]).  w: F32 or BF16.
void linear(const OpContext& ctx, const float* x, const Tensor& w, const float* bias, float* y, int64_t M);

// out[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * w[:]   (x may alias out)
//   x, out: [rows, dim]   w: [dim] f32
// round_bf16: out = bf16(w * bf16(x * inv)), transformers' RMSNorm on bf16.
void rmsnorm(const float* x, const float* w, float eps, int64_t rows, int64_t dim, float* out,
             bool round_bf16 = false);

// NeoX-style ("rotate_half") RoPE in place on the first rotary_dim dims of
// each head.  x: [n_tokens, n_heads, head_dim]  positions: [n_tokens]
// inv_freq: [rotary_dim / 2]; cos/sin are multiplied by `scaling` (YaRN).
// round_bf16: round cos/sin and every intermediate product to bf16 as
// transformers does when it runs a bf16 model (see ModelOptions).
void rope_neox(float* x, const int64_t* positions, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
               const float* inv_freq, int64_t rotary_dim, float scaling, bool round_bf16 = false);

// gate[i] = silu(gate[i]) * up[i]   gate, up: [n]   (scalar; KernelTable::swiglu's arithmetic)
void silu_mul(float* gate, const float* up, int64_t n, bool round_bf16 = false);

// SwiGLU over rows, threaded: out[r, i] = silu(gu[r, i]) * gu[r, I + i]
//   gu: [rows, 2I] (gate | up, as the fused gate_up projection writes it)   out: [rows, I]
void swiglu_rows(const OpContext& ctx, const float* gu, int64_t rows, int64_t I, float* out, bool round_bf16 = false);

// x[i] = bf16(x[i]) (round to nearest even), for bf16 activation emulation.
void round_to_bf16(float* x, int64_t n);

// Causal GQA attention of n_tokens new queries at positions start..start+n-1
// against a KV history of start+n_tokens rows.
//   q:   [n_tokens, n_heads, head_dim]
//   k,v: [>= start+n_tokens, n_kv_heads, head_dim] (row stride n_kv_heads*head_dim)
//   out: [n_tokens, n_heads, head_dim]
struct AttentionShape {
  int64_t n_tokens, start, n_heads, n_kv_heads, head_dim;
  float scale;
  bool round_bf16 = false;  // round scores, probabilities and output to bf16 like eager HF in bf16
};
void attention_causal(const OpContext& ctx, const float* q, const float* k, const float* v,
                      const AttentionShape& s, float* out);

// The DFlash drafter's block attention (dflash.md §2.3): nb block queries
// at positions P..P+nb-1 over context keys at positions ctx_lo..P-1 and the
// block's own keys. Query i sees context position pk when window == 0 or
// P+i - pk < window, and block slot j when (!causal || j <= i) and
// (window == 0 || |i - j| < window). GQA: query head h reads KV head
// h / (n_heads / n_kv_heads).
//   q:            [nb, n_heads, head_dim]
//   kb, vb:       [nb, n_kv_heads, head_dim]   the block's keys and values
//   ctx_k, ctx_v: [P - ctx_lo] row pointers, each [n_kv_heads, head_dim]
//                 (a ring cache's rows need not be contiguous)
//   out:          [nb, n_heads, head_dim]
// Scores, softmax and the weighted sum are attention_causal's (KernelTable
// dot / axpy, the softmax of kernels/attention_common.h), so every ISA
// agrees with the ref table up to those kernels' rounding.
struct BlockAttentionShape {
  int64_t nb, P, ctx_lo, n_heads, n_kv_heads, head_dim;
  float scale;
  bool causal;
  int64_t window;  // 0: none
};
void attention_block(const OpContext& ctx, const float* q, const float* const* ctx_k, const float* const* ctx_v,
                     const float* kb, const float* vb, const BlockAttentionShape& s, float* out);

// DFlash2's grouped dynamic depthwise convolution over the n slots of one
// block (dflash.md §5.1a, ZL-new _grouped_dynamic_convolve):
//   out[t, c] = sum_{j < kt, j <= t} (base[j, c] + dyn[t, side, j, c / gs]) * u[t - j, c]
// Taps never reach before slot 0 (the block boundary). Scalar; one block.
//   u, out: [n, H]   base: [kt, H] (one side)   dyn: [n, 2, kt, H / gs]
void grouped_dynamic_conv(const float* u, int64_t n, int64_t H, const float* base, const float* dyn, int64_t side,
                          int64_t kt, int64_t gs, float* out);

// out[t, :] = table[ids[t], :] as f32.  table: [vocab, dim] F32/BF16/F16.
void embedding_lookup(const Tensor& table, const int32_t* ids, int64_t n, float* out);

}  // namespace blockspec
