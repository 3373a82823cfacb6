// Internal to the quantized-checkpoint loader (quant_checkpoint.cc): element
// readers of stored tensors, and compressed-tensors asymmetric integer weights
// (weight_zero_point) as compressed-tensors 0.20.1 writes them
// (quant_formats.md §3.2-3.4):
//  - pack-quantized (PackedQuantizationCompressor.compress): the signed zero
//    points + 2^(b-1) packed along N (dim 0) by pack_to_int32(zp, b,
//    packed_dim=0): I32 [ceil(N*b/32), ng]; column g holds rows 0..N-1 as one
//    dense bitstream (row n in word n / (32/b), bits b*(n % (32/b)) for b = 4, 8);
//  - int-quantized / naive-quantized (NaiveQuantizationCompressor): the signed
//    values as calculate_qparams returns them, [N, ng], of dtype zp_dtype (I8
//    by default; I16 / I32 when the config sets zp_dtype).
// ng = ceil(K / group_size) for strategy group, 1 for channel. Dequantization
// (forward_helpers.py _dequantize with f32 scales):
//   W[n, k] = (float(q[n, k]) - float(z[n, g])) * s[n, g],  g = k // group_size,
// exact in f32 (an integer of <= 9 bits times an f16 / bf16 scale).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

#include "base/error.h"
#include "formats/safetensors.h"

namespace blockspec {

// Element i of a tensor of the file (unaligned-safe).
template <class T>
T elem(const Tensor& t, int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const uint8_t*>(t.data()) + i * sizeof(T), sizeof(T));
  return v;
}

inline float float_elem(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32: return elem<float>(t, i);
    case DType::kF16: return f16_to_f32(elem<uint16_t>(t, i));
    case DType::kBF16: return bf16_to_f32(elem<uint16_t>(t, i));
    default: BS_ASSERT(false, "float_elem of ", dtype_name(t.dtype()));
  }
  return 0.f;
}

// Where the zero points of one module are and how they are stored.
struct CtZeroPoints {
  std::string name;     // "<module>.weight_zero_point"
  bool packed = false;  // pack-quantized layout; else unpacked integers
  int bits = 8;
  int64_t N = 0, n_groups = 1;
};

// What is wrong with the stored zero points (dtype, shape, a value outside [-2^(b-1), 2^(b-1) - 1]), as a
// phrase naming the expected vs found value; "" when they are what compressed-tensors writes.
std::string ct_zero_point_problem(const SafetensorsCheckpoint& ckpt, const CtZeroPoints& z);

// The signed zero point of row n, group g (layout already checked).
int ct_zero_point(const Tensor& zt, const CtZeroPoints& z, int64_t n, int64_t g);

// One asymmetric compressed-tensors module.
struct CtAsymWeight {
  Tensor codes;   // weight_packed I32 [N, ceil(K*b/32)] (packed along K) or weight I8 [N, K]
  Tensor scales;  // weight_scale [N, ng], F16 / BF16 / F32
  Tensor zeros;   // weight_zero_point, as CtZeroPoints describes
  CtZeroPoints z;
  int64_t K = 0, group = 0;  // group: group_size (K for channel)
};

// Rows [r0, r1) of the exact dequantization, out [r1 - r0, K].
void ct_asym_rows(const CtAsymWeight& w, int64_t r0, int64_t r1, float* out);

}  // namespace blockspec
