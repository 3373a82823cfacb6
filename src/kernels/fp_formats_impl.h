// Internal entry points of kernels/fp_formats.cc used by kernels/quant.cc.
#pragma once
#include "kernels/fp_formats.h"
#include "kernels/ops.h"

namespace blockspec {

// Zero-filled buffers of an [N, K] weight in fmt (NVFP4: aux = global divisor, to be set).
QuantTensor fp_alloc(WeightFormat fmt, int64_t N, int64_t K);
// NVFP4 global scale (a divisor) for a tensor whose max |w| is amax.
float nvfp4_global_scale(float amax);
// Quantizes rows [r0, r1) given as wf [r1 - r0, K] f32 into q (from fp_alloc).
void fp_quantize_rows(QuantTensor& q, const float* wf, int64_t r0, int64_t r1);
// y[M, N] = x[M, K] @ W^T (+ bias), activations in f32.
void fp_linear(const OpContext& ctx, const float* x, const QuantTensor& w, const float* bias, float* y, int64_t M);

}  // namespace blockspec
