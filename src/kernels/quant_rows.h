// Row access into QuantTensor weights of any format: the embedding lookup
// reads a handful of rows of a (possibly quantized) table per step, so the
// table never has to exist in f32.
#pragma once
#include <cstdint>

#include "tensor/quant_tensor.h"

namespace blockspec {

// out[i, :] = the exact f32 values of row rows[i] of w.  out: [n, w.cols]
// Throws Error naming the id if a row is out of range.
void dequantize_rows(const QuantTensor& w, const int32_t* rows, int64_t n, float* out);

}  // namespace blockspec
