// The trainer's matrix products on the engine's f32 matmul kernel
// (KernelTable::matmul_f32, the kernel serving's f32 linear() runs): the
// forward y = x w^T, and the backward's dx = dy w and dw += dy^T x through
// transposed copies, so all three are the one batch-invariant kernel.
// linear_backward (grad_ops.h, double accumulation) is the scalar reference
// twin; tests/train/gemm_test.cc checks one against the other. Also the
// threaded cross-entropy over the vocabulary, twin of grad_ops.h's.
// With OpContext::bf16_train_products (train-drafter --matmul bf16) gemm_nt
// and gemm_backward round both operands of every product to bf16 and sum in
// f32 on KernelTable::matmul_bf16_dp, as PyTorch's bf16 autocast computes
// x w^T, dy w and dy^T x (1.6-1.8x the f32 kernel's MACs/s on AVX-512 BF16,
// rounding included: kernels_bench train_gemm_*); the attention products
// stay f32.
#pragma once
#include <cstdint>

#include "kernels/ops.h"

namespace blockspec {

// out[C, R] = in[R, C]^T
void transpose(const OpContext& c, const float* in, int64_t R, int64_t C, float* out);

// y[M, N] = x[M, K] @ w[N, K]^T
void gemm_nt(const OpContext& c, const float* x, const float* w, int64_t M, int64_t K, int64_t N, float* y);

// Backward of y = x w^T:
//   dx[M, K] = dy[M, N] @ w[N, K]   (written; nullptr: not wanted)
//   dw[N, K] += dy^T @ x            (nullptr: a frozen weight)
// w_t: w^T [K, N] if the caller keeps one (a frozen head), else nullptr.
void gemm_backward(const OpContext& c, const float* x, const float* w, const float* w_t, const float* dy, int64_t M,
                   int64_t K, int64_t N, float* dx, float* dw);

// y[M, N] = bf16(x)[M, K] @ w[N, K]^T with bf16 w, f32 sums
// (KernelTable::matmul_bf16_dp, or the bf16-weight kernel on the rounded x
// where the CPU has no AVX-512 BF16): the frozen lm_head's products, as
// bf16 autocast runs them (training.md §4).
void gemm_nt_bf16(const OpContext& c, const float* x, const uint16_t* w, int64_t M, int64_t K, int64_t N, float* y);

// Causal GQA attention of one window of T tokens (query i sees keys 0..i) as per-head GEMMs on the same kernel;
// grad_ops.h masked_attention_forward / _backward with spans (0, i + 1, 0, 0) are its reference twins (f64 sums).
//   q: [T, n_heads, hd]  k, v: [T, n_kv_heads, hd]  out: [T, n_heads, hd]
//   probs (saved for the backward): [n_heads, T, T], 0 above the diagonal
void causal_attention_forward(const OpContext& c, const float* q, const float* k, const float* v, int64_t T,
                              int64_t n_heads, int64_t n_kv_heads, int64_t hd, float scale, float* out,
                              std::vector<float>& probs);
// dq [T, n_heads, hd], dk, dv [T, n_kv_heads, hd] written.
void causal_attention_backward(const OpContext& c, const float* q, const float* k, const float* v, const float* out,
                               const std::vector<float>& probs, const float* dout, int64_t T, int64_t n_heads,
                               int64_t n_kv_heads, int64_t hd, float scale, float* dq, float* dk, float* dv);

// grad_ops.h cross_entropy, threaded over rows, f32 exp with double sums;
// also correct[i] = (argmax z_i == label_i) for every row (weight 0
// included). dlogits may alias logits (written row by row after reading).
// row_loss (optional, [n]): each row's term weight_i / denom * CE_i (0 where weight_i is 0).
double cross_entropy_rows(const OpContext& c, const float* logits, const int32_t* labels, const float* weight,
                          int64_t n, int64_t V, double denom, float* dlogits, uint8_t* correct,
                          double* row_loss = nullptr);

// The same rows distilled: sum_i weight_i / denom * KL(softmax(t_i) || softmax(z_i)), t = teacher logits [n, V];
// dlogits_i = weight_i / denom * (softmax(z_i) - softmax(t_i)) (may alias logits); correct as above.
double kl_rows(const OpContext& c, const float* logits, const float* teacher, const int32_t* labels, const float* weight,
               int64_t n, int64_t V, double denom, float* dlogits, uint8_t* correct);

}  // namespace blockspec
