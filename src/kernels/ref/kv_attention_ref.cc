// Scalar twins of the KV row kernels: dequantize each value to f32 exactly as
// kv_dequantize_row does, then dot_ref / axpy_ref arithmetic (double
// accumulation for the dot). So attention on a compressed cache with the ref
// kernels equals, bit for bit, ref attention on the dequantized f32 cache.
#include "kernels/kv_attention.h"
#include "tensor/dtype.h"

namespace blockspec {

namespace {
template <class Deq>
float dot_t(const float* q, int64_t d, Deq deq) {
  double acc = 0;
  for (int64_t i = 0; i < d; ++i) acc += static_cast<double>(q[i]) * deq(i);
  return static_cast<float>(acc);
}
template <class Deq>
void axpy_t(float a, float* y, int64_t d, Deq deq) {
  for (int64_t i = 0; i < d; ++i) y[i] += a * deq(i);
}
}  // namespace

#define BS_KV_ROW_REF(name, DEQ)                                                               \
  float kv_dot_##name##_ref(const float* q, const void* codes, const float* scales, int64_t d) { \
    return dot_t(q, d, [&](int64_t i) -> float { return DEQ; });                               \
  }                                                                                            \
  void kv_axpy_##name##_ref(float a, const void* codes, const float* scales, float* y, int64_t d) { \
    axpy_t(a, y, d, [&](int64_t i) -> float { return DEQ; });                                  \
  }

BS_KV_ROW_REF(f32, ((void)scales, static_cast<const float*>(codes)[i]))
BS_KV_ROW_REF(bf16, ((void)scales, bf16_to_f32(static_cast<const uint16_t*>(codes)[i])))
BS_KV_ROW_REF(fp8, kFp8E4M3Table[static_cast<const uint8_t*>(codes)[i]] * scales[0])
BS_KV_ROW_REF(i8pth, static_cast<float>(static_cast<const int8_t*>(codes)[i]) * scales[0])
BS_KV_ROW_REF(i8g128, static_cast<float>(static_cast<const int8_t*>(codes)[i]) * scales[i / kKvGroup])
#undef BS_KV_ROW_REF

}  // namespace blockspec
