// GGUF block formats to f32. Bit-exact against the reference gguf-py 0.19.0
// (gguf.quants.dequantize, numpy float32 arithmetic): every product and sum is
// rounded in the same order the reference rounds it, and no expression is
// left for the compiler to fuse into an FMA (see gguf_dequant.cc).
// Block layouts: ggml/src/ggml-common.h.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "formats/gguf.h"
#include "tensor/block_quant.h"
#include "tensor/tensor.h"

namespace blockspec {

// F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
bool gguf_can_dequantize(GgmlType t);

// The block format a ggml type decodes into (tensor/block_quant.h); nullopt for F32 / F16 / BF16 and types
// blockspec does not read.
std::optional<WeightFormat> block_format_of(GgmlType t);

// Decodes n_blocks consecutive blocks of type t at src into out[n_blocks] (fields and codes as stored; no
// rounding). Throws Error unless block_format_of(t).
void decode_gguf_blocks(GgmlType t, const uint8_t* src, int64_t n_blocks, QBlock* out);

// Dequantizes n elements (a multiple of the type's block size) stored as
// n / block_size consecutive blocks at src into dst[n]. Throws Error for a
// type gguf_can_dequantize() rejects.
void dequantize_gguf(GgmlType t, const uint8_t* src, float* dst, int64_t n);

// Whole tensor into an owned F32 tensor with the row-major shape (ne reversed).
Tensor dequantize_gguf_tensor(const GgufFile& file, const std::string& name);

}  // namespace blockspec
