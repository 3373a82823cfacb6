// Per-sequence KV cache: K and V of every layer, stored in one of the KV
// dtypes (docs/kv_cache.md) with their scales, in pages of a KvPool. Rows are
// written once, when a token's K/V is computed, and attention reads them in
// place through the page table.
//
// Two modes:
//   - paged: KvCache(pool) is a view of pages the caller holds (a
//     BlockAllocator counts who holds which): append_pages() extends the page
//     table as the sequence's reservation grows, release() forgets it (the
//     caller frees the pages). The pool must outlive the cache.
//   - contiguous: KvCache(n_layers, capacity, ...) owns a private pool of one
//     page of `capacity` tokens, so every layer's K (and V) is one contiguous
//     [capacity, n_kv_heads, head_dim] buffer (what k() / v() return for f32).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "base/error.h"
#include "kernels/kv_attention.h"
#include "kv/kv_pool.h"

namespace blockspec {

class KvCache {
 public:
  KvCache(int64_t n_layers, int64_t capacity, int64_t n_kv_heads, int64_t head_dim,
          KvDType dtype = KvDType::kF32);
  explicit KvCache(KvPool& pool);
  ~KvCache() = default;
  KvCache(KvCache&& o) noexcept;
  KvCache& operator=(KvCache&& o) noexcept;
  KvCache(const KvCache&) = delete;  // pages have one owner
  KvCache& operator=(const KvCache&) = delete;

  int64_t capacity() const { return n_pages() * pool_->page_tokens(); }
  int64_t size() const { return size_; }  // committed positions
  // May shrink (speculative rollback) without returning pages.
  void set_size(int64_t n) {
    BS_ASSERT(n >= 0 && n <= capacity());
    size_ = n;
  }
  // Paged mode: pages (of the pool, held by the caller) follow the current
  // ones in token order.
  void append_pages(const std::vector<int32_t>& pages);
  // Paged mode: forgets the page table (the caller frees the pages); size
  // and capacity become 0.
  void release();
  int64_t n_pages() const { return static_cast<int64_t>(pages_.size()); }
  const std::vector<int32_t>& pages() const { return pages_; }  // page table, in token order

  KvDType dtype() const { return pool_->dtype(); }
  // fp8_e4m3 layer scales of the pool (every cache sharing it); see KvPool::set_layer_scales.
  void set_layer_scales(const std::vector<float>& k, const std::vector<float>& v) { pool_->set_layer_scales(k, v); }
  int64_t row_size() const { return pool_->n_kv_heads() * pool_->head_dim(); }  // values per token and layer

  // f32 caches held in one page (contiguous mode): [capacity, n_kv_heads, head_dim]
  float* k(int64_t layer) { return f32_data(layer, false); }
  float* v(int64_t layer) { return f32_data(layer, true); }

  // Quantizes and stores n tokens of K and V at positions pos..pos+n-1
  // (pos + n <= capacity()).
  //   k, v: [n, n_kv_heads, head_dim] f32
  void write(int64_t layer, int64_t pos, int64_t n, const float* k, const float* v);
  // Views through the page table; valid until the next reserve / release.
  KvView k_view(int64_t layer) const { return view(layer, false); }
  KvView v_view(int64_t layer) const { return view(layer, true); }

  // Bytes held per token over all layers, K and V, codes and per-token scales
  // (per-layer fp8 scales are not per token; page padding not counted).
  // f32: 8 * n_layers * row_size.
  int64_t bytes_per_token() const;

  // Hybrid targets: the sequence's fixed-size model state next to its KV (the
  // conv rows and recurrent state of every Gated DeltaNet layer, f32,
  // model/gdn_layer.h). A contiguous cache owns it (own_state, zeroed); a
  // paged one points at the StatePool slot its holder assigned (attach_state).
  // nullptr for dense models.
  float* state() { return state_; }
  int64_t state_floats() const { return state_floats_; }
  void own_state(int64_t floats);
  void attach_state(float* state, int64_t floats) { state_ = state, state_floats_ = floats, state_tokens_ = 0; }
  // Tokens the state has consumed. A recurrent state cannot be cropped like
  // KV: forward checks this equals size() (a rollback that did not restore
  // the state fails instead of computing on a stale state).
  int64_t state_tokens() const { return state_tokens_; }
  void set_state_tokens(int64_t n) { state_tokens_ = n; }
  // What the model recorded while verifying drafts, to roll the state back
  // to an accepted prefix of those n tokens from position `start`
  // (Transformer::commit; the layout is the model's).
  struct StateLog {
    std::vector<float> data;
    int64_t start = -1, n = 0;  // start < 0: nothing recorded
  };
  StateLog& state_log() { return log_; }

 private:
  float* f32_data(int64_t layer, bool v);
  KvView view(int64_t layer, bool v) const;

  std::unique_ptr<KvPool> own_pool_;  // contiguous mode: the private one-page pool
  KvPool* pool_;
  std::vector<int32_t> pages_;             // [n_pages] pool page of tokens [i*page_tokens, (i+1)*page_tokens)
  std::vector<const uint8_t*> page_ptrs_;  // [n_pages] their base addresses (KvView::pages)
  int64_t size_ = 0;
  std::vector<float> own_state_;
  float* state_ = nullptr;
  int64_t state_floats_ = 0;
  int64_t state_tokens_ = 0;
  StateLog log_;
};

}  // namespace blockspec
