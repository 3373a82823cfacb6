// Contiguous per-sequence KV cache: K and V of every layer, stored in one of
// the KV dtypes (docs/kv_cache.md) with their scales. Rows are written once,
// when a token's K/V is computed, and attention reads them in place.
// (Paged, multi-dtype storage comes with the server in src/kv.)
#pragma once
#include <cstdint>
#include <vector>

#include "base/error.h"
#include "kernels/kv_attention.h"

namespace blockspec {

class KvCache {
 public:
  KvCache(int64_t n_layers, int64_t capacity, int64_t n_kv_heads, int64_t head_dim,
          KvDType dtype = KvDType::kF32);

  int64_t capacity() const { return capacity_; }
  int64_t size() const { return size_; }  // committed positions
  void set_size(int64_t n) {
    BS_ASSERT(n >= 0 && n <= capacity_);
    size_ = n;
  }
  KvDType dtype() const { return dtype_; }
  int64_t row_size() const { return n_kv_heads_ * head_dim_; }  // values per token and layer (K or V)

  // f32 caches only: [capacity, n_kv_heads, head_dim]
  float* k(int64_t layer) { return f32_data(k_codes_, layer); }
  float* v(int64_t layer) { return f32_data(v_codes_, layer); }

  // Quantizes and stores n tokens of K and V at positions pos..pos+n-1.
  //   k, v: [n, n_kv_heads, head_dim] f32
  void write(int64_t layer, int64_t pos, int64_t n, const float* k, const float* v);
  KvView k_view(int64_t layer) const { return view(k_codes_, k_scales_, k_layer_scale_, layer); }
  KvView v_view(int64_t layer) const { return view(v_codes_, v_scales_, v_layer_scale_, layer); }

  // Bytes held per token over all layers, K and V, codes and per-token scales
  // (per-layer fp8 scales are not per token). f32: 8 * n_layers * row_size.
  int64_t bytes_per_token() const;

 private:
  float* f32_data(std::vector<std::vector<uint8_t>>& c, int64_t layer) {
    BS_ASSERT(dtype_ == KvDType::kF32);
    return reinterpret_cast<float*>(c[layer].data());
  }
  KvView view(const std::vector<std::vector<uint8_t>>& c, const std::vector<std::vector<float>>& s,
              const std::vector<float>& layer_scale, int64_t layer) const;

  int64_t n_layers_, capacity_, n_kv_heads_, head_dim_, size_ = 0;
  KvDType dtype_;
  std::vector<std::vector<uint8_t>> k_codes_, v_codes_;  // per layer [capacity, nkv, hd] codes
  std::vector<std::vector<float>> k_scales_, v_scales_;  // per layer [capacity, nkv, scales_per_row]
  std::vector<float> k_layer_scale_, v_layer_scale_;     // per layer (fp8_e4m3)
};

}  // namespace blockspec
