// KV dtype names, the fp8 E4M3FN conversions, row quantization (written once
// per token, scalar: it is O(head_dim) per token and layer, far below the
// attention reads) and the choice of per-ISA row kernels.
#include "kernels/kv_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "kernels/kv_attention.h"
#include "tensor/dtype.h"

namespace blockspec {

namespace {
constexpr const char* kNames[kNumKvDTypes] = {"f32", "bf16", "fp8_e4m3", "int8_per_token_head", "int8_block_g128"};
}  // namespace

const char* kv_dtype_name(KvDType t) { return kNames[static_cast<int>(t)]; }

std::optional<KvDType> kv_dtype_from_name(std::string_view name) {
  for (int i = 0; i < kNumKvDTypes; ++i)
    if (name == kNames[i]) return static_cast<KvDType>(i);
  return std::nullopt;
}

std::string kv_dtype_names() {
  std::string s;
  for (int i = 0; i < kNumKvDTypes; ++i) s += (i ? ", " : "") + std::string(kNames[i]);
  return s;
}

int64_t kv_code_bytes(KvDType t) {
  switch (t) {
    case KvDType::kF32: return 4;
    case KvDType::kBF16: return 2;
    default: return 1;
  }
}

int64_t kv_scales_per_row(KvDType t, int64_t head_dim) {
  switch (t) {
    case KvDType::kInt8PerTokenHead: return 1;
    case KvDType::kInt8BlockG128: return (head_dim + kKvGroup - 1) / kKvGroup;
    default: return 0;
  }
}

float fp8_e4m3_to_f32(uint8_t code) { return kFp8E4M3Table[code]; }

uint8_t f32_to_fp8_e4m3(float x) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (a >= 448.0f) return sign | 0x7e;  // saturate (also +-inf)
  int e2;
  const float f = std::frexp(a, &e2);  // a = f * 2^e2, f in [0.5, 1)
  const int e = e2 - 1;                // a = (2f) * 2^e
  if (a == 0.0f || e < -6) {
    // Subnormal range (and the rounding up into the smallest normal): code
    // = round(a / 2^-9); 8 is exponent 1 mantissa 0, so it carries correctly.
    const int m = static_cast<int>(std::nearbyint(std::ldexp(a, 9)));
    return sign | static_cast<uint8_t>(m);
  }
  // (2f - 1) * 8 is exact; a rounded-up mantissa 8 carries into the exponent.
  const int m = static_cast<int>(std::nearbyint((2.0f * f - 1.0f) * 8.0f));
  return sign | static_cast<uint8_t>(((e + 7) << 3) + m);
}

void kv_quantize_row(KvDType t, const float* x, int64_t d, float layer_scale, void* codes, float* scales) {
  switch (t) {
    case KvDType::kF32: std::memcpy(codes, x, d * sizeof(float)); return;
    case KvDType::kBF16: {
      auto* c = static_cast<uint16_t*>(codes);
      for (int64_t i = 0; i < d; ++i) c[i] = f32_to_bf16(x[i]);
      return;
    }
    case KvDType::kFP8E4M3: {
      auto* c = static_cast<uint8_t*>(codes);
      for (int64_t i = 0; i < d; ++i) c[i] = f32_to_fp8_e4m3(x[i] / layer_scale);
      return;
    }
    case KvDType::kInt8PerTokenHead:
    case KvDType::kInt8BlockG128: {
      auto* c = static_cast<int8_t*>(codes);
      const int64_t g = t == KvDType::kInt8PerTokenHead ? d : kKvGroup;
      for (int64_t b = 0, gi = 0; b < d; b += g, ++gi) {
        const int64_t e = std::min(d, b + g);
        float amax = 0;
        for (int64_t i = b; i < e; ++i) amax = std::max(amax, std::fabs(x[i]));
        const float s = amax / 127.0f;
        scales[gi] = s;
        for (int64_t i = b; i < e; ++i) {
          const float r = s > 0 ? std::nearbyint(x[i] / s) : 0.0f;
          c[i] = static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f));
        }
      }
      return;
    }
  }
}

void kv_dequantize_row(KvDType t, const void* codes, const float* scales, int64_t d, float* out) {
  switch (t) {
    case KvDType::kF32: std::memcpy(out, codes, d * sizeof(float)); return;
    case KvDType::kBF16:
      for (int64_t i = 0; i < d; ++i) out[i] = bf16_to_f32(static_cast<const uint16_t*>(codes)[i]);
      return;
    case KvDType::kFP8E4M3:
      for (int64_t i = 0; i < d; ++i) out[i] = kFp8E4M3Table[static_cast<const uint8_t*>(codes)[i]] * scales[0];
      return;
    case KvDType::kInt8PerTokenHead:
      for (int64_t i = 0; i < d; ++i) out[i] = static_cast<float>(static_cast<const int8_t*>(codes)[i]) * scales[0];
      return;
    case KvDType::kInt8BlockG128:
      for (int64_t i = 0; i < d; ++i)
        out[i] = static_cast<float>(static_cast<const int8_t*>(codes)[i]) * scales[i / kKvGroup];
      return;
  }
}

namespace {

// dot_rows / axpy_rows as loops over one ISA's single-row kernels (ref): the
// definition the optimised AVX2 and AVX-512 versions must reproduce.
template <float (*Dot)(const float*, const void*, const float*, int64_t)>
void dot_rows_loop(const float* q, int64_t n_h, const void* codes, int64_t code_stride, const float* scales,
                   int64_t scale_stride, int64_t n_rows, int64_t d, float* out, int64_t out_stride) {
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t i = 0; i < n_h; ++i)
      out[i * out_stride + r] =
          Dot(q + i * d, static_cast<const uint8_t*>(codes) + r * code_stride, scales + r * scale_stride, d);
}

template <void (*Axpy)(float, const void*, const float*, float*, int64_t)>
void axpy_rows_loop(const float* p, int64_t p_stride, int64_t n_h, const void* codes, int64_t code_stride,
                    const float* scales, int64_t scale_stride, int64_t n_rows, float* y, int64_t d) {
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t i = 0; i < n_h; ++i)
      Axpy(p[i * p_stride + r], static_cast<const uint8_t*>(codes) + r * code_stride, scales + r * scale_stride,
           y + i * d, d);
}

}  // namespace

#define BS_KV_ROW_LOOP(name) \
  KvRowKernels{kv_dot_##name, kv_axpy_##name, dot_rows_loop<kv_dot_##name>, axpy_rows_loop<kv_axpy_##name>}
#define BS_KV_ROW_FAST(name) \
  KvRowKernels{kv_dot_##name, kv_axpy_##name, kv_dot_rows_##name, kv_axpy_rows_##name}

KvKernelTable select_kv_kernels(const std::string& isa) {
  KvKernelTable t;
  t.row[static_cast<int>(KvDType::kF32)] = BS_KV_ROW_LOOP(f32_ref);
  t.row[static_cast<int>(KvDType::kBF16)] = BS_KV_ROW_LOOP(bf16_ref);
  t.row[static_cast<int>(KvDType::kFP8E4M3)] = BS_KV_ROW_LOOP(fp8_ref);
  t.row[static_cast<int>(KvDType::kInt8PerTokenHead)] = BS_KV_ROW_LOOP(i8pth_ref);
  t.row[static_cast<int>(KvDType::kInt8BlockG128)] = BS_KV_ROW_LOOP(i8g128_ref);
  if (isa == "avx2") {
    t.row[static_cast<int>(KvDType::kF32)] = BS_KV_ROW_FAST(f32_avx2);
    t.row[static_cast<int>(KvDType::kBF16)] = BS_KV_ROW_FAST(bf16_avx2);
    t.row[static_cast<int>(KvDType::kFP8E4M3)] = BS_KV_ROW_FAST(fp8_avx2);
    t.row[static_cast<int>(KvDType::kInt8PerTokenHead)] = BS_KV_ROW_FAST(i8pth_avx2);
    t.row[static_cast<int>(KvDType::kInt8BlockG128)] = BS_KV_ROW_FAST(i8g128_avx2);
  }
  if (isa == "avx512") {
    t.row[static_cast<int>(KvDType::kF32)] = BS_KV_ROW_FAST(f32_avx512);
    t.row[static_cast<int>(KvDType::kBF16)] = BS_KV_ROW_FAST(bf16_avx512);
    t.row[static_cast<int>(KvDType::kFP8E4M3)] = BS_KV_ROW_FAST(fp8_avx512);
    t.row[static_cast<int>(KvDType::kInt8PerTokenHead)] = BS_KV_ROW_FAST(i8pth_avx512);
    t.row[static_cast<int>(KvDType::kInt8BlockG128)] = BS_KV_ROW_FAST(i8g128_avx512);
  }
  return t;
}
#undef BS_KV_ROW_LOOP
#undef BS_KV_ROW_FAST

}  // namespace blockspec
