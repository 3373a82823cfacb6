// Building and multiplying QuantTensor weights. This is the API the model
// uses for every linear layer; the layouts of the quantized formats are
// private to the kernels layer (documented in quant.cc).
#pragma once
#include <cstdint>

#include "kernels/ops.h"
#include "tensor/quant_tensor.h"

namespace blockspec {

// Wraps (F32/BF16, zero-copy when the format matches) or quantizes (RTN,
// round-half-even, symmetric per group of 128) a [N, K] weight given as an
// F32, BF16 or F16 tensor. Quantizing runs on the pool's threads.
QuantTensor make_weight(const OpContext& ctx, const Tensor& w, WeightFormat fmt);

// The exact f32 values the weight stands for: [N, K] (for tests and checks).
Tensor dequantize_weight(const QuantTensor& w);

// y[M, N] = x[M, K] @ W^T (+ bias[N]).  Quantized formats quantize x per
// row internally (see quant.cc for the activation scheme).
void linear(const OpContext& ctx, const float* x, const QuantTensor& w, const float* bias, float* y, int64_t M);

}  // namespace blockspec
