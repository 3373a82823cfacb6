// GGUF block-format weights (tensor/block_quant.h) in the engine: packing decoded blocks into the GEMM layout
// of kernels/block_layout.h (no value changes), and linear() on them (W-block x A-int8, llama.cpp's scheme).
// The model uses these through kernels/quant.h's linear / dequantize_weight / dequantize_rows like any format.
#pragma once
#include <cstdint>
#include <functional>

#include "kernels/ops.h"
#include "tensor/block_quant.h"

namespace blockspec {

// Packs an [N, K] weight of block format fmt whose rows arrive decoded, in chunks of up to chunk_rows rows:
// rows(r0, r1, out[(r1 - r0) * K / B]) fills the blocks of rows [r0, r1) in row-major order (row, block). rows
// is called from ctx's pool threads at once, for disjoint ranges, so it must be safe to call concurrently.
// K must be a multiple of the format's block B (GGUF guarantees it). Peak memory: the result plus one chunk
// per thread.
QuantTensor make_block_weight(const OpContext& ctx, WeightFormat fmt, int64_t N, int64_t K,
                              const std::function<void(int64_t, int64_t, QBlock*)>& rows, int64_t chunk_rows = 64);

// y[M, N] = x[M, K] @ W^T (+ bias[N]) for a block-format W (kernels/block_layout.h's exact sequence).
void block_linear(const OpContext& ctx, const float* x, const QuantTensor& w, const float* bias, float* y, int64_t M);

// out[K] = the exact values of row n of a block-format W (bitwise gguf-py's dequantize of the file's row).
void block_dequantize_row(const QuantTensor& w, int64_t n, float* out);

}  // namespace blockspec
