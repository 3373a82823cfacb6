// Hand-written backward passes of the ops a DFlash drafter trains through
// (issue 15, ../shared/docs/training.md §11), llm.c style: each op's
// gradient given the forward's inputs and the gradient of its output.
// f32 in and out, sums of products accumulated in double. Gradients of
// parameters are ADDED to (accumulated over a batch); gradients of inputs
// are written unless the comment says "+=". Checked against central finite
// differences in f64 (tests/train/grad_ops_test.cc).
#pragma once
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"

namespace blockspec {

// y[M, N] = x[M, K] @ w[N, K]^T (+ b[N]).
// dx[M, K] = dy @ w (written; nullptr: not wanted); dw[N, K] += dy^T @ x
// (nullptr: a frozen weight); db[N] += sum over rows of dy (nullptr: no bias).
void linear_backward(const float* x, const float* w, const float* dy, int64_t M, int64_t K, int64_t N, float* dx,
                     float* dw, float* db, ThreadPool& pool);

// y[r, :] = x[r, :] * inv_rms(x[r, :]) * w,  inv_rms = 1 / sqrt(mean(x^2) + eps).
// dx[rows, dim] written; dw[dim] += (nullptr: frozen weight).
void rmsnorm_backward(const float* x, const float* w, float eps, const float* dy, int64_t rows, int64_t dim,
                      float* dx, float* dw);

// out[r, i] = silu(gu[r, i]) * gu[r, I + i]  (gate | up fused, as the forward reads them).
// dgu[rows, 2I] written.
void swiglu_backward(const float* gu, const float* dout, int64_t rows, int64_t I, float* dgu);

// NeoX RoPE is a rotation of each (i, i + half) pair by pos * inv_freq[i],
// times `scaling`; its backward is the transpose: the same rotation by the
// negated angle, in place on dx [n_tokens, n_heads, head_dim].
void rope_neox_backward(float* dx, const int64_t* positions, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                        const float* inv_freq, int64_t rotary_dim, float scaling);

// Masked multi-head attention over explicit key spans (training's anchor
// blocks: a query sees the context keys [lo0, hi0) and the block keys
// [lo1, hi1) of its row, dflash.md §2.3 / training.md §2.4).
//   q: [nq, n_heads, hd]  k, v: [nk, n_kv_heads, hd]  spans: [nq, 4] (lo0, hi0, lo1, hi1)
//   out: [nq, n_heads, hd]; probs (saved for the backward): [nq, n_heads, nk] (0 outside the spans)
struct MaskedAttentionShape {
  int64_t nq, nk, n_heads, n_kv_heads, head_dim;
  float scale;
};
// Fails with a one-line error naming the first query whose spans are out of [0, nk), reversed, or both empty.
void check_masked_spans(const int32_t* spans, const MaskedAttentionShape& s);
void masked_attention_forward(const float* q, const float* k, const float* v, const int32_t* spans,
                              const MaskedAttentionShape& s, float* out, std::vector<float>& probs,
                              ThreadPool& pool);
// dq [nq, n_heads, hd] written; dk, dv [nk, n_kv_heads, hd] written. Threads take whole KV heads, so the
// result does not depend on the pool's size.
void masked_attention_backward(const float* q, const float* k, const float* v, const int32_t* spans,
                               const MaskedAttentionShape& s, const std::vector<float>& probs, const float* dout,
                               float* dq, float* dk, float* dv, ThreadPool& pool);

// Backward of DFlash2's grouped_dynamic_conv (kernels/ops.h) over one block
// of n slots, one side: with out[t, c] = sum_j (base[j, c] + dyn[t, side, j,
// c / gs]) * u[t - j, c],
//   du[n, H] += ; dbase[kt, H] (this side) += ; ddyn[n, 2, kt, G] (this side) += .
void grouped_dynamic_conv_backward(const float* u, int64_t n, int64_t H, const float* base, const float* dyn,
                                   int64_t side, int64_t kt, int64_t gs, const float* dout, float* du, float* dbase,
                                   float* ddyn);

// Weighted cross-entropy of logits rows against labels (training.md §3):
//   loss = sum_i weight[i] * (logsumexp(z_i) - z_i[label_i]) / denom
// Rows with weight 0 contribute nothing. Returns the loss; dlogits [n, V]
// written (nullptr: loss only).
double cross_entropy(const float* logits, const int32_t* labels, const float* weight, int64_t n, int64_t V,
                     double denom, float* dlogits);

}  // namespace blockspec
