#include "kv/kv_cache.h"

#include <utility>

namespace blockspec {

KvCache::KvCache(int64_t n_layers, int64_t capacity, int64_t n_kv_heads, int64_t head_dim, KvDType dtype)
    : own_pool_(std::make_unique<KvPool>(n_layers, n_kv_heads, head_dim, dtype, std::max<int64_t>(1, capacity),
                                         capacity > 0 ? 1 : 0)),
      pool_(own_pool_.get()) {
  BS_ASSERT(capacity >= 0);
  if (capacity > 0) append_pages({0});  // the private pool's one page
}

KvCache::KvCache(KvPool& pool) : pool_(&pool) {}

KvCache::KvCache(KvCache&& o) noexcept
    : own_pool_(std::move(o.own_pool_)), pool_(o.pool_), pages_(std::move(o.pages_)),
      page_ptrs_(std::move(o.page_ptrs_)), size_(std::exchange(o.size_, 0)), own_state_(std::move(o.own_state_)),
      state_(std::exchange(o.state_, nullptr)), state_floats_(std::exchange(o.state_floats_, 0)),
      state_tokens_(std::exchange(o.state_tokens_, 0)), log_(std::move(o.log_)) {
  o.pages_.clear();
  o.page_ptrs_.clear();
}

void KvCache::own_state(int64_t floats) {
  own_state_.assign(floats, 0.f);
  state_ = own_state_.data(), state_floats_ = floats, state_tokens_ = 0;
}

KvCache& KvCache::operator=(KvCache&& o) noexcept {
  if (this != &o) {
    own_pool_ = std::move(o.own_pool_);
    pool_ = o.pool_;
    pages_ = std::move(o.pages_);
    page_ptrs_ = std::move(o.page_ptrs_);
    size_ = std::exchange(o.size_, 0);
    own_state_ = std::move(o.own_state_);
    state_ = std::exchange(o.state_, nullptr);
    state_floats_ = std::exchange(o.state_floats_, 0);
    state_tokens_ = std::exchange(o.state_tokens_, 0);
    log_ = std::move(o.log_);
    o.pages_.clear();
    o.page_ptrs_.clear();
  }
  return *this;
}

void KvCache::append_pages(const std::vector<int32_t>& pages) {
  for (int32_t p : pages) {
    BS_ASSERT(p >= 0 && p < pool_->pages_total());
    pages_.push_back(p);
    page_ptrs_.push_back(pool_->page_data(p));
  }
}

void KvCache::release() {
  pages_.clear();
  page_ptrs_.clear();
  size_ = 0;
}

float* KvCache::f32_data(int64_t layer, bool v) {
  BS_ASSERT(dtype() == KvDType::kF32 && n_pages() == 1 && layer >= 0 && layer < pool_->n_layers());
  return reinterpret_cast<float*>(pool_->page_data(pages_[0]) + pool_->code_offset(layer, v));
}

void KvCache::write(int64_t layer, int64_t pos, int64_t n, const float* k, const float* v) {
  BS_ASSERT(layer >= 0 && layer < pool_->n_layers() && pos >= 0 && n >= 0 && pos + n <= capacity());
  const KvDType t = dtype();
  const int64_t nkv = pool_->n_kv_heads(), hd = pool_->head_dim(), pt = pool_->page_tokens();
  const int64_t cb = kv_code_bytes(t) * hd, spr = kv_scales_per_row(t, hd);
  const int64_t k_codes = pool_->code_offset(layer, false), v_codes = pool_->code_offset(layer, true);
  const int64_t k_scales = pool_->scale_offset(layer, false), v_scales = pool_->scale_offset(layer, true);
  for (int64_t p = pos; p < pos + n; ++p) {
    uint8_t* base = pool_->page_data(pages_[p / pt]);
    const int64_t r0 = p % pt * nkv;  // first (token, kv head) row of p within its page
    for (int64_t h = 0; h < nkv; ++h) {
      const int64_t src = ((p - pos) * nkv + h) * hd, r = r0 + h;
      kv_quantize_row(t, k + src, hd, *pool_->layer_scale(layer, false), base + k_codes + r * cb,
                      reinterpret_cast<float*>(base + k_scales) + r * spr);
      kv_quantize_row(t, v + src, hd, *pool_->layer_scale(layer, true), base + v_codes + r * cb,
                      reinterpret_cast<float*>(base + v_scales) + r * spr);
    }
  }
}

KvView KvCache::view(int64_t layer, bool v) const {
  BS_ASSERT(layer >= 0 && layer < pool_->n_layers());
  KvView kv{dtype(), nullptr, dtype() == KvDType::kFP8E4M3 ? pool_->layer_scale(layer, v) : nullptr};
  kv.pages = page_ptrs_.data();
  kv.page_tokens = pool_->page_tokens();
  kv.code_offset = pool_->code_offset(layer, v);
  kv.scale_offset = pool_->scale_offset(layer, v);
  return kv;
}

int64_t KvCache::bytes_per_token() const {
  const KvDType t = dtype();
  const int64_t hd = pool_->head_dim();
  const int64_t per_row = hd * kv_code_bytes(t) + 4 * kv_scales_per_row(t, hd);
  return 2 * pool_->n_layers() * pool_->n_kv_heads() * per_row;
}

}  // namespace blockspec
