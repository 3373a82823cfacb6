// Causal GQA attention reading a compressed KV cache directly, plus the row
// kernels behind it (scalar ref twins in kernels/ref, AVX2 / AVX-512 in kernels/x86).
#pragma once
#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/kv_kernels.h"
#include "kernels/ops.h"

namespace blockspec {

namespace detail {
constexpr std::array<float, 256> make_fp8_e4m3_table() {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) {
    const int e = (c >> 3) & 15, m = c & 7;
    float v;
    if (e == 15 && m == 7) {
      v = std::numeric_limits<float>::quiet_NaN();
    } else {
      // e == 0: m * 2^-9 (subnormal); else (8 + m) * 2^(e - 10). Exact: powers of two.
      v = e == 0 ? static_cast<float>(m) : static_cast<float>(8 + m);
      const int p = e == 0 ? -9 : e - 10;
      for (int i = 0; i < p; ++i) v *= 2.0f;
      for (int i = 0; i > p; --i) v *= 0.5f;
    }
    t[c] = (c & 0x80) ? -v : v;
  }
  return t;
}
}  // namespace detail

// E4M3FN code -> f32 (0x7f, 0xff: NaN); immutable, built at compile time.
inline constexpr std::array<float, 256> kFp8E4M3Table = detail::make_fp8_e4m3_table();

// One layer's K or V in the cache, contiguous or paged.
// Contiguous (pages == nullptr):
//   codes:  [>= start+n_tokens, n_kv_heads, head_dim] of kv_code_bytes(dtype) each
//   scales: [>= start+n_tokens, n_kv_heads, kv_scales_per_row] f32 (int8 dtypes),
//           or -> the layer scale (fp8_e4m3), or unused (f32, bf16)
// Paged (pages != nullptr; codes unused): token j lives in page pages[j / page_tokens]
// at slot i = j % page_tokens, its rows at
//   codes:  pages[..] + code_offset,  [page_tokens, n_kv_heads, head_dim]
//   scales: pages[..] + scale_offset, [page_tokens, n_kv_heads, kv_scales_per_row] f32
//           (int8 dtypes; fp8_e4m3 reads the layer scale through `scales` as above)
struct KvView {
  KvDType dtype;
  const void* codes;
  const float* scales;
  const uint8_t* const* pages = nullptr;  // [>= ceil((start+n_tokens) / page_tokens)] page base addresses
  int64_t page_tokens = 0;
  int64_t code_offset = 0, scale_offset = 0;  // bytes from a page's base
};

// attention_causal with K and V read from compressed rows. Same operations
// and order as attention_causal on the dequantized f32 cache, each row read
// through ctx.k->kv.row[dtype] (dequantized inside the dot / axpy).
void attention_causal_kv(const OpContext& ctx, const float* q, const KvView& k, const KvView& v,
                         const AttentionShape& s, float* out);

// Several independent attention_causal_kv calls (e.g. every sequence of a
// batched step) in one parallel pass; each job's output is exactly what
// attention_causal_kv gives it alone.
struct KvAttentionJob {
  const float* q;  // [n_tokens, n_heads, head_dim]
  KvView k, v;
  AttentionShape s;
  float* out;      // [n_tokens, n_heads, head_dim]
};
void attention_causal_kv_batch(const OpContext& ctx, const std::vector<KvAttentionJob>& jobs);

// Row kernels (see KvRowKernels). f32 is included so the generic path can be
// checked against attention_causal.
#define BS_KV_ROW_DECL(name)                                                                   \
  float kv_dot_##name(const float* q, const void* codes, const float* scales, int64_t d);     \
  void kv_axpy_##name(float a, const void* codes, const float* scales, float* y, int64_t d);
BS_KV_ROW_DECL(f32_ref)
BS_KV_ROW_DECL(bf16_ref)
BS_KV_ROW_DECL(fp8_ref)
BS_KV_ROW_DECL(i8pth_ref)
BS_KV_ROW_DECL(i8g128_ref)
BS_KV_ROW_DECL(f32_avx2)
BS_KV_ROW_DECL(bf16_avx2)
BS_KV_ROW_DECL(fp8_avx2)
BS_KV_ROW_DECL(i8pth_avx2)
BS_KV_ROW_DECL(i8g128_avx2)
BS_KV_ROW_DECL(f32_avx512)
BS_KV_ROW_DECL(bf16_avx512)
BS_KV_ROW_DECL(fp8_avx512)
BS_KV_ROW_DECL(i8pth_avx512)
BS_KV_ROW_DECL(i8g128_avx512)
#undef BS_KV_ROW_DECL
// Multi-head, multi-row AVX2 and AVX-512 kernels (KvRowKernels::dot_rows / axpy_rows).
#define BS_KV_ROWS_DECL(name)                                                                              \
  void kv_dot_rows_##name(const float* q, int64_t n_h, const void* codes, int64_t code_stride,             \
                          const float* scales, int64_t scale_stride, int64_t n_rows, int64_t d, float* out, \
                          int64_t out_stride);                                                             \
  void kv_axpy_rows_##name(const float* p, int64_t p_stride, int64_t n_h, const void* codes,               \
                           int64_t code_stride, const float* scales, int64_t scale_stride, int64_t n_rows, \
                           float* y, int64_t d);
BS_KV_ROWS_DECL(f32_avx2)
BS_KV_ROWS_DECL(bf16_avx2)
BS_KV_ROWS_DECL(fp8_avx2)
BS_KV_ROWS_DECL(i8pth_avx2)
BS_KV_ROWS_DECL(i8g128_avx2)
BS_KV_ROWS_DECL(f32_avx512)
BS_KV_ROWS_DECL(bf16_avx512)
BS_KV_ROWS_DECL(fp8_avx512)
BS_KV_ROWS_DECL(i8pth_avx512)
BS_KV_ROWS_DECL(i8g128_avx512)
#undef BS_KV_ROWS_DECL

}  // namespace blockspec
