// The Gated DeltaNet delta-rule recurrence for one value head (hybrid.md §3
// step 7), the KernelTable entry's argument. Private to the kernels layer and
// its callers in kernels/gdn.h.
#pragma once
#include <cstdint>

namespace blockspec {

// Per token t = 0..T-1, in order, with S [dk, dv] f32 row-major (HF layout):
//   S <- alpha_t S;  r = S^T k_t;  S <- S + k_t (beta_t (v_t - r))^T;  o_t = S^T q_t
// Exact arithmetic (both twins): pass 1 over rows i: S[i,:] *= alpha_t, then
// r = fma(S[i,:], k_t[i], r); delta = (v_t - r) * beta_t; pass 2 over rows i:
// S[i,:] = fma(k_t[i], delta, S[i,:]), then o_t = fma(S[i,:], q_t[i], o_t).
// q, k already l2-normalised (q also scaled by dk^-1/2). Rows of token t:
// q + t*qk_stride, k + t*qk_stride ([dk]), v + t*v_stride ([dv]),
// o + t*o_stride ([dv]); alpha = exp(g), beta: [T] at stride gb_stride.
struct GdnHead {
  const float* q;
  const float* k;
  const float* v;
  const float* alpha;
  const float* beta;
  float* o;
  float* S;
  int64_t T, dk, dv, qk_stride, v_stride, o_stride, gb_stride;
  const float* g = nullptr;  // log decay [T] at gb_stride (alpha = exp(g)); read by the chunked form only
};

// The chunked form (hybrid.md §3 step 8, FLA's naive_chunk_gated_delta_rule):
// chunks of kGdnChunk tokens (the last may be shorter), per chunk of c tokens
// with gam = cumsum(g), Gam = exp(gam):
//   A_ij = beta_i (k_i . k_j) exp(gam_i - gam_j) for j < i
//   U_i = beta_i v_i - sum_{j<i} A_ij U_j,  W_i = beta_i Gam_i k_i - sum_{j<i} A_ij W_j
//   V'_i = U_i - W_i S
//   o_i = Gam_i (q_i S) + sum_{j<=i} (q_i . k_j) exp(gam_i - gam_j) V'_j
//   S <- Gam_{c-1} S + sum_j exp(gam_{c-1} - gam_j) k_j V'_j^T
// Dot products over d_k run as fma chains over d in order with the other index
// (a chunk row, or a value column) in the vector lanes, so the scalar twin and
// the AVX-512 kernel agree bit for bit; every exp is exp_fixed (kernels/
// silu_exp.h: < 2 ulp, clamped at -87, where exp is 1.6e-38). Not bitwise
// equal to the recurrent form (a different summation).
inline constexpr int64_t kGdnChunk = 64;

}  // namespace blockspec
