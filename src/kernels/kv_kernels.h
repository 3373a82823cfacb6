// KV cache storage dtypes and the per-row kernels attention uses to read a
// compressed K/V row directly (dequantizing inside the dot / axpy loop, no
// dequantized copy). Definitions of every dtype: docs/kv_cache.md.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace blockspec {

enum class KvDType { kF32, kBF16, kFP8E4M3, kInt8PerTokenHead, kInt8BlockG128 };
inline constexpr int kNumKvDTypes = 5;
inline constexpr int64_t kKvGroup = 128;  // int8_block_g128: head-dim values per scale

const char* kv_dtype_name(KvDType t);  // "f32", "bf16", "fp8_e4m3", ...
std::optional<KvDType> kv_dtype_from_name(std::string_view name);
// "f32, bf16, fp8_e4m3, int8_per_token_head, int8_block_g128"
std::string kv_dtype_names();

// Bytes of one stored code, and f32 scales stored per (token, kv head).
int64_t kv_code_bytes(KvDType t);
int64_t kv_scales_per_row(KvDType t, int64_t head_dim);

// One (token, kv head) row of head_dim codes: `codes` points at its first code,
// `scales` at its scales (per-token dtypes), at the layer scale (fp8_e4m3) or
// is unused (f32, bf16).
struct KvRowKernels {
  // sum_i q[i] * deq(row)[i], summed exactly like KernelTable::dot of the
  // dequantized f32 row.
  float (*dot)(const float* q, const void* codes, const float* scales, int64_t d) = nullptr;
  // y[i] += a * deq(row)[i], exactly like KernelTable::axpy of the dequantized row.
  void (*axpy)(float a, const void* codes, const float* scales, float* y, int64_t d) = nullptr;
  // A run of n_rows rows, row r at (const uint8_t*)codes + r * code_stride and
  // scales + r * scale_stride, against n_h query vectors q [n_h, d]:
  //   out[i * out_stride + r] = dot(q + i * d, row r)
  // with exactly dot's arithmetic per output (one row read serves all heads).
  void (*dot_rows)(const float* q, int64_t n_h, const void* codes, int64_t code_stride, const float* scales,
                   int64_t scale_stride, int64_t n_rows, int64_t d, float* out, int64_t out_stride) = nullptr;
  // y [n_h, d]: for r = 0 .. n_rows - 1 in order, y[i, :] += p[i * p_stride + r] * row r,
  // exactly the FMA chain of repeated axpy calls (accumulators stay in registers).
  void (*axpy_rows)(const float* p, int64_t p_stride, int64_t n_h, const void* codes, int64_t code_stride,
                    const float* scales, int64_t scale_stride, int64_t n_rows, float* y, int64_t d) = nullptr;
};

struct KvKernelTable {
  KvRowKernels row[kNumKvDTypes];  // indexed by KvDType
};

// isa: a validated name from select_kernels ("ref", "avx2", "avx512").
KvKernelTable select_kv_kernels(const std::string& isa);

// fp8 E4M3FN (OCP): code -> f32, exact for all 256 codes (0x7f / 0xff: NaN).
float fp8_e4m3_to_f32(uint8_t code);
// f32 -> E4M3FN, round to nearest even, saturating: |x| > 448 (and +-inf)
// becomes +-448; NaN becomes 0x7f.
uint8_t f32_to_fp8_e4m3(float x);

// Quantizes one (token, kv head) row x[d] into codes (+ scales) of dtype t.
// fp8_e4m3: layer_scale divides x (stored code = fp8(x / layer_scale)).
void kv_quantize_row(KvDType t, const float* x, int64_t d, float layer_scale, void* codes, float* scales);
// out[d] = deq(row), the values attention effectively reads.
void kv_dequantize_row(KvDType t, const void* codes, const float* scales, int64_t d, float* out);

}  // namespace blockspec
