// Contiguous per-sequence KV cache: f32 K and V for every layer.
// (Paged, multi-dtype storage comes with the server in src/kv.)
#pragma once
#include <cstdint>
#include <vector>

#include "base/error.h"

namespace blockspec {

class KvCache {
 public:
  KvCache(int64_t n_layers, int64_t capacity, int64_t n_kv_heads, int64_t head_dim)
      : capacity_(capacity), row_(n_kv_heads * head_dim),
        k_(n_layers, std::vector<float>(capacity * n_kv_heads * head_dim)),
        v_(n_layers, std::vector<float>(capacity * n_kv_heads * head_dim)) {}

  int64_t capacity() const { return capacity_; }
  int64_t size() const { return size_; }  // committed positions
  void set_size(int64_t n) {
    BS_ASSERT(n >= 0 && n <= capacity_);
    size_ = n;
  }
  // [capacity, n_kv_heads, head_dim]
  float* k(int64_t layer) { return k_[layer].data(); }
  float* v(int64_t layer) { return v_[layer].data(); }
  int64_t row_size() const { return row_; }

 private:
  int64_t capacity_, row_, size_ = 0;
  std::vector<std::vector<float>> k_, v_;
};

}  // namespace blockspec
