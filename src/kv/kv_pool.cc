#include "kv/kv_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "base/error.h"

namespace blockspec {

namespace {
constexpr int64_t kAlign = 64;
int64_t round_up(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

void KvPool::FreeDeleter::operator()(uint8_t* p) const { munmap(p, bytes); }

KvPool::KvPool(int64_t n_layers, int64_t n_kv_heads, int64_t head_dim, KvDType dtype, int64_t page_tokens,
               int64_t n_pages)
    : n_layers_(n_layers), n_kv_heads_(n_kv_heads), head_dim_(head_dim), page_tokens_(page_tokens),
      n_pages_(n_pages), dtype_(dtype) {
  if (n_layers < 0 || n_kv_heads <= 0 || head_dim <= 0)
    fail("KV pool: bad shape: n_layers ", n_layers, ", n_kv_heads ", n_kv_heads, ", head_dim ", head_dim,
         " (expected n_layers >= 0 and positive heads / head_dim)");
  if (page_tokens <= 0 || n_pages < 0)
    fail("KV pool: page_tokens must be positive and n_pages non-negative, got page_tokens ", page_tokens,
         ", n_pages ", n_pages);
  code_section_ = round_up(page_tokens * code_row_bytes());
  scale_section_ = round_up(page_tokens * scale_row_floats() * static_cast<int64_t>(sizeof(float)));
  layer_bytes_ = 2 * code_section_ + 2 * scale_section_;
  page_bytes_ = std::max<int64_t>(kAlign, n_layers * layer_bytes_);
  if (n_pages > 0 && page_bytes_ > std::numeric_limits<int64_t>::max() / n_pages)
    fail("KV pool: ", n_pages, " pages of ", page_bytes_, " bytes overflow; use fewer pages");
  const int64_t total = page_bytes_ * n_pages;
  if (total > 0) {
    // An anonymous mapping: page-aligned and zeroed, so no page ever holds
    // uninitialised bytes, and memory is taken only as pages are first
    // written (a large --gpu-memory-utilization budget costs nothing until used).
    void* p = mmap(nullptr, static_cast<size_t>(total), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED)
      fail("KV pool: cannot allocate ", total, " bytes (", n_pages, " pages of ", page_bytes_,
           " bytes); lower the KV cache budget");
    data_ = std::unique_ptr<uint8_t, FreeDeleter>(static_cast<uint8_t*>(p), FreeDeleter{static_cast<size_t>(total)});
  }
  k_scale_.assign(n_layers, 1.0f);
  v_scale_.assign(n_layers, 1.0f);
}

void KvPool::set_layer_scales(const std::vector<float>& k, const std::vector<float>& v) {
  if (static_cast<int64_t>(k.size()) != n_layers_ || static_cast<int64_t>(v.size()) != n_layers_)
    fail("KV pool: ", k.size(), " K and ", v.size(), " V layer scales for ", n_layers_, " layers");
  for (size_t i = 0; i < k.size(); ++i)
    if (!(k[i] > 0.f) || !(v[i] > 0.f) || !std::isfinite(k[i]) || !std::isfinite(v[i]))
      fail("KV pool: layer ", i, " scales k ", k[i], ", v ", v[i], " (expected finite and > 0)");
  k_scale_ = k;
  v_scale_ = v;
}

}  // namespace blockspec
