// GGUF block formats to f32. Bit-exact against the reference gguf-py 0.19.0
// (gguf.quants.dequantize, numpy float32 arithmetic): every product and sum is
// rounded in the same order the reference rounds it, and no expression is
// left for the compiler to fuse into an FMA (see gguf_dequant.cc).
// Block layouts: ggml/src/ggml-common.h.
#pragma once
#include <cstdint>
#include <string>

#include "formats/gguf.h"
#include "tensor/tensor.h"

namespace blockspec {

// F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
bool gguf_can_dequantize(GgmlType t);

// Dequantizes n elements (a multiple of the type's block size) stored as
// n / block_size consecutive blocks at src into dst[n]. Throws Error for a
// type gguf_can_dequantize() rejects.
void dequantize_gguf(GgmlType t, const uint8_t* src, float* dst, int64_t n);

// Whole tensor into an owned F32 tensor with the row-major shape (ne reversed).
Tensor dequantize_gguf_tensor(const GgufFile& file, const std::string& name);

}  // namespace blockspec
