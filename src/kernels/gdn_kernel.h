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
};

}  // namespace blockspec
