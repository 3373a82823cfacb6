#include "model/kv_cache.h"

namespace blockspec {

namespace {
// f32 codes are stored as bytes; keep them float-aligned.
std::vector<std::vector<uint8_t>> layer_buffers(int64_t n_layers, int64_t bytes) {
  return std::vector<std::vector<uint8_t>>(n_layers, std::vector<uint8_t>(bytes));
}
}  // namespace

KvCache::KvCache(int64_t n_layers, int64_t capacity, int64_t n_kv_heads, int64_t head_dim, KvDType dtype)
    : n_layers_(n_layers), capacity_(capacity), n_kv_heads_(n_kv_heads), head_dim_(head_dim), dtype_(dtype) {
  const int64_t rows = capacity * n_kv_heads;
  k_codes_ = layer_buffers(n_layers, rows * head_dim * kv_code_bytes(dtype));
  v_codes_ = layer_buffers(n_layers, rows * head_dim * kv_code_bytes(dtype));
  const int64_t spr = kv_scales_per_row(dtype, head_dim);
  k_scales_.assign(n_layers, std::vector<float>(rows * spr));
  v_scales_.assign(n_layers, std::vector<float>(rows * spr));
  // fp8_e4m3: no calibrated scales are loaded yet, so every layer uses 1.0
  // (vLLM's default without checkpoint k_scale / v_scale); see docs/kv_cache.md.
  k_layer_scale_.assign(n_layers, 1.0f);
  v_layer_scale_.assign(n_layers, 1.0f);
}

void KvCache::write(int64_t layer, int64_t pos, int64_t n, const float* k, const float* v) {
  BS_ASSERT(layer >= 0 && layer < n_layers_ && pos >= 0 && pos + n <= capacity_);
  const int64_t cb = kv_code_bytes(dtype_) * head_dim_, spr = kv_scales_per_row(dtype_, head_dim_);
  for (int64_t r = pos * n_kv_heads_; r < (pos + n) * n_kv_heads_; ++r) {
    const int64_t src = (r - pos * n_kv_heads_) * head_dim_;
    kv_quantize_row(dtype_, k + src, head_dim_, k_layer_scale_[layer], k_codes_[layer].data() + r * cb,
                    k_scales_[layer].data() + r * spr);
    kv_quantize_row(dtype_, v + src, head_dim_, v_layer_scale_[layer], v_codes_[layer].data() + r * cb,
                    v_scales_[layer].data() + r * spr);
  }
}

KvView KvCache::view(const std::vector<std::vector<uint8_t>>& c, const std::vector<std::vector<float>>& s,
                     const std::vector<float>& layer_scale, int64_t layer) const {
  const float* scales = dtype_ == KvDType::kFP8E4M3 ? &layer_scale[layer] : s[layer].data();
  return KvView{dtype_, c[layer].data(), scales};
}

int64_t KvCache::bytes_per_token() const {
  const int64_t per_row = head_dim_ * kv_code_bytes(dtype_) + 4 * kv_scales_per_row(dtype_, head_dim_);
  return 2 * n_layers_ * n_kv_heads_ * per_row;
}

}  // namespace blockspec
