// The memory of the KV cache shared by many sequences (continuous
// batching): one anonymous mapping (zeroed, page-aligned, memory taken as
// pages are first written) of n_pages pages, each holding
// page_tokens tokens of K and V (codes and per-token scales) for every
// layer. Storage only: which page belongs to whom is a BlockAllocator's
// business (kv/block_allocator.h), and a sequence's KvCache is a view
// through its page table. Attention only reads page memory, from the thread
// pool; rows are written by the forward that computes them.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/kv_kernels.h"

namespace blockspec {

class KvPool {
 public:
  KvPool(int64_t n_layers, int64_t n_kv_heads, int64_t head_dim, KvDType dtype, int64_t page_tokens,
         int64_t n_pages);

  int64_t pages_total() const { return n_pages_; }

  // Page layout, per layer l (sections rounded up to 64 bytes):
  //   K codes  [page_tokens, n_kv_heads, head_dim] of kv_code_bytes(dtype)
  //   V codes  [page_tokens, n_kv_heads, head_dim]
  //   K scales [page_tokens, n_kv_heads, kv_scales_per_row] f32 (int8 dtypes; else empty)
  //   V scales [page_tokens, n_kv_heads, kv_scales_per_row] f32
  // so token pos's K row of layer l starts at
  //   page_data(page) + code_offset(l, false) + (pos % page_tokens) * code_row_bytes().
  uint8_t* page_data(int64_t page) { return data_.get() + page * page_bytes_; }
  const uint8_t* page_data(int64_t page) const { return data_.get() + page * page_bytes_; }
  int64_t code_offset(int64_t layer, bool v) const { return layer * layer_bytes_ + (v ? code_section_ : 0); }
  int64_t scale_offset(int64_t layer, bool v) const {
    return layer * layer_bytes_ + 2 * code_section_ + (v ? scale_section_ : 0);
  }
  int64_t code_row_bytes() const { return n_kv_heads_ * head_dim_ * kv_code_bytes(dtype_); }  // one token, K or V
  int64_t scale_row_floats() const { return n_kv_heads_ * kv_scales_per_row(dtype_, head_dim_); }
  int64_t page_bytes() const { return page_bytes_; }

  int64_t n_layers() const { return n_layers_; }
  int64_t n_kv_heads() const { return n_kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  KvDType dtype() const { return dtype_; }
  int64_t page_tokens() const { return page_tokens_; }

  // fp8_e4m3: per-layer K and V scales (stored code = fp8(x / scale)); 1.0 until set (vLLM's default when a
  // checkpoint has no k_scale / v_scale). They hold for every sequence of the pool. k, v: [n_layers], > 0.
  void set_layer_scales(const std::vector<float>& k, const std::vector<float>& v);
  const float* layer_scale(int64_t layer, bool v) const { return &(v ? v_scale_ : k_scale_)[layer]; }

 private:
  struct FreeDeleter {  // unmaps the pool's anonymous mapping
    size_t bytes;
    void operator()(uint8_t* p) const;
  };
  int64_t n_layers_, n_kv_heads_, head_dim_, page_tokens_, n_pages_;
  KvDType dtype_;
  int64_t code_section_, scale_section_, layer_bytes_, page_bytes_;  // bytes
  std::unique_ptr<uint8_t, FreeDeleter> data_;                        // [n_pages, page_bytes]
  std::vector<float> k_scale_, v_scale_;                              // [n_layers] fp8_e4m3 layer scales
};

}  // namespace blockspec
