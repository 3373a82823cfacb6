// Building and multiplying QuantTensor weights. This is the API the model
// uses for every linear layer; the layouts of the quantized formats are
// private to the kernels layer (documented in quant.cc).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/ops.h"
#include "tensor/quant_tensor.h"

namespace blockspec {

// Wraps (F32/BF16, zero-copy when the format matches) or quantizes (RTN,
// round-half-even, symmetric per group of 128) a [N, K] weight given as an
// F32, BF16 or F16 tensor. Quantizing runs on the pool's threads.
QuantTensor make_weight(const OpContext& ctx, const Tensor& w, WeightFormat fmt);

// Like make_weight, but the [N, K] weight arrives in row chunks through
// rows(r0, r1, out[r1 - r0, K]), so a large matrix (a 152k-token lm_head) is
// never held in f32 whole: peak memory is the result plus one chunk.
// Produces exactly what make_weight produces for the same values.
QuantTensor make_weight_streamed(const OpContext& ctx, int64_t N, int64_t K, WeightFormat fmt,
                                 const std::function<void(int64_t, int64_t, float*)>& rows,
                                 int64_t chunk_rows = 4096);

// Stacks FP8 / NVFP4 / MXFP4 weights of one format and K along the rows (N = sum of their rows), codes and
// scales as they are, so the result dequantizes to the parts' values exactly. Returns an empty QuantTensor
// (rows == 0) when they cannot fuse exactly: different formats or K, or NVFP4 parts with different global
// scales.
QuantTensor concat_fp_rows(const std::vector<QuantTensor>& parts);

// x [M, K] -> what the W8A8 kernels multiply for it with per-token activations (QuantTensor::act_per_token):
// kernel quantize_acts_token's int8 codes times their row scale. GPTQ calibration and PTQR's twin use it.
void round_acts_token(const OpContext& ctx, const float* x, int64_t M, int64_t K, float* out);

// The exact f32 values the weight stands for: [N, K] (for tests and checks).
Tensor dequantize_weight(const QuantTensor& w);

// y[M, N] = x[M, K] @ W^T (+ bias[N]).  Quantized formats quantize x per
// row internally (see quant.cc for the activation scheme).
void linear(const OpContext& ctx, const float* x, const QuantTensor& w, const float* bias, float* y, int64_t M);

}  // namespace blockspec
