// Loading a DFlash / DFlash2 drafter: config, every tensor of dflash.md §1.2
// through the same WeightLoader as the target (so a quantized fc or qkv_proj
// loads like any target linear: vLLM #51581 / SGLang #39087 are that bug),
// and the consistency checks against the target (§6: fc width, tap range,
// hidden size, mask id).
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "kernels/kv_kernels.h"
#include "model/dflash.h"
#include "formats/safetensors.h"
#include "model/hf_names.h"
#include "model/weight_loader.h"

namespace blockspec {

DraftCache::DraftCache(const DraftConfig& cfg, int64_t capacity, KvDType dtype, bool rings)
    : capacity_(capacity), nkv_(cfg.base.n_kv_heads), hd_(cfg.base.head_dim), dtype_(dtype),
      code_row_(cfg.base.head_dim * kv_code_bytes(dtype)), scale_row_(kv_scales_per_row(dtype, cfg.base.head_dim)) {
  const int64_t L = cfg.base.n_layers;
  ring_.resize(L), window_.resize(L);
  k_.resize(L), v_.resize(L), ks_.resize(L), vs_.resize(L);
  for (int64_t l = 0; l < L; ++l) {
    const int64_t w = cfg.layer_window[l];
    window_[l] = w > 0 ? w : 0;
    ring_[l] = (rings && w > 0 && w < capacity) ? w : 0;
    const int64_t slots = ring_[l] > 0 ? ring_[l] : capacity;
    k_[l].assign(slots * nkv_ * code_row_, 0);
    v_[l].assign(slots * nkv_ * code_row_, 0);
    ks_[l].assign(slots * nkv_ * scale_row_, 0.f);
    vs_[l].assign(slots * nkv_ * scale_row_, 0.f);
  }
}

void DraftCache::write(int64_t l, int64_t pos, const float* k, const float* v) {
  const int64_t s = slot(l, pos);
  for (int64_t h = 0; h < nkv_; ++h) {
    const int64_t r = s * nkv_ + h;
    kv_quantize_row(dtype_, k + h * hd_, hd_, 1.0f, k_[l].data() + r * code_row_, ks_[l].data() + r * scale_row_);
    kv_quantize_row(dtype_, v + h * hd_, hd_, 1.0f, v_[l].data() + r * code_row_, vs_[l].data() + r * scale_row_);
  }
}

void DraftCache::read(int64_t l, int64_t lo, int64_t hi, std::vector<const float*>& k, std::vector<const float*>& v,
                      std::vector<float>& scratch) const {
  const int64_t n = hi - lo, row = nkv_ * hd_;
  k.resize(n), v.resize(n);
  if (dtype_ == KvDType::kF32) {  // codes are the f32 values: no copy
    for (int64_t p = lo; p < hi; ++p) {
      k[p - lo] = reinterpret_cast<const float*>(k_[l].data() + slot(l, p) * nkv_ * code_row_);
      v[p - lo] = reinterpret_cast<const float*>(v_[l].data() + slot(l, p) * nkv_ * code_row_);
    }
    return;
  }
  scratch.resize(2 * n * row);  // [n, 2 (K, V), nkv, hd]
  for (int64_t p = lo; p < hi; ++p) {
    float* out = scratch.data() + (p - lo) * 2 * row;
    for (int64_t h = 0; h < nkv_; ++h) {
      const int64_t r = slot(l, p) * nkv_ + h;
      const float* ksc = dtype_ == KvDType::kFP8E4M3 ? &unit_scale_ : ks_[l].data() + r * scale_row_;
      const float* vsc = dtype_ == KvDType::kFP8E4M3 ? &unit_scale_ : vs_[l].data() + r * scale_row_;
      kv_dequantize_row(dtype_, k_[l].data() + r * code_row_, ksc, hd_, out + h * hd_);
      kv_dequantize_row(dtype_, v_[l].data() + r * code_row_, vsc, hd_, out + row + h * hd_);
    }
    k[p - lo] = out;
    v[p - lo] = out + row;
  }
}

int64_t DraftCache::bytes_per_token() const {
  return static_cast<int64_t>(ring_.size()) * 2 * nkv_ * (code_row_ + scale_row_ * static_cast<int64_t>(sizeof(float)));
}

DraftCache::Parts DraftCache::parts(int64_t l, int64_t pos) const {
  const int64_t s = slot(l, pos), codes = nkv_ * code_row_, scales = nkv_ * scale_row_ * int64_t(sizeof(float));
  return {codes, scales, s * codes, s * scales};
}

bool DraftCache::save(int64_t lo, int64_t n, uint8_t* dst) const {
  if (lo < 0 || n < 0 || lo + n > size_) return false;
  for (size_t l = 0; l < ring_.size(); ++l)
    if (ring_[l] > 0 && size_ - ring_[l] > lo) return false;  // overwritten on the ring
  for (int64_t p = lo; p < lo + n; ++p)
    for (size_t l = 0; l < ring_.size(); ++l) {
      const Parts q = parts(static_cast<int64_t>(l), p);
      std::memcpy(dst, k_[l].data() + q.code_at, q.codes), dst += q.codes;
      std::memcpy(dst, v_[l].data() + q.code_at, q.codes), dst += q.codes;
      std::memcpy(dst, reinterpret_cast<const uint8_t*>(ks_[l].data()) + q.scale_at, q.scales), dst += q.scales;
      std::memcpy(dst, reinterpret_cast<const uint8_t*>(vs_[l].data()) + q.scale_at, q.scales), dst += q.scales;
    }
  return true;
}

void DraftCache::load(int64_t n, const uint8_t* src) {
  if (n < 0 || size_ + n > capacity_)
    fail("dflash: loading ", n, " context positions after ", size_, " overflows the drafter cache (", capacity_, ")");
  for (int64_t p = size_; p < size_ + n; ++p)
    for (size_t l = 0; l < ring_.size(); ++l) {
      const Parts q = parts(static_cast<int64_t>(l), p);
      std::memcpy(k_[l].data() + q.code_at, src, q.codes), src += q.codes;
      std::memcpy(v_[l].data() + q.code_at, src, q.codes), src += q.codes;
      std::memcpy(reinterpret_cast<uint8_t*>(ks_[l].data()) + q.scale_at, src, q.scales), src += q.scales;
      std::memcpy(reinterpret_cast<uint8_t*>(vs_[l].data()) + q.scale_at, src, q.scales), src += q.scales;
    }
  size_ += n;
}

namespace {

// `name` with or without the ".weight" suffix (the DFlash2 codebooks are bare
// parameters in published checkpoints; NeMo / transformers saves add it).
std::string codebook_name(const WeightSource& src, const std::string& bare) {
  return src.has(bare) ? bare : bare + ".weight";
}

}  // namespace

DraftModel::DraftModel(const std::string& dir, DraftConfig cfg, Transformer& target, const DraftOptions& opts)
    : cfg_(std::move(cfg)), target_(target) {
  const ModelConfig& b = cfg_.base;
  const ModelConfig& tc = target.config();
  const std::string what = dir + "/config.json";
  // Consistency with the target (dflash.md §6: vLLM PR #48113, ROCmFPX #44, MO).
  if (b.hidden_size != tc.hidden_size)
    fail(what, ": drafter hidden_size ", b.hidden_size, " differs from the target's ", tc.hidden_size,
         " (the drafter reads the target's embeddings and lm_head)");
  for (int64_t t : cfg_.target_layer_ids)
    if (t >= tc.n_layers)
      fail(what, ": target layer id ", t, " is out of range for a target with ", tc.n_layers,
           " layers (drafter made for a deeper target?)");
  if (cfg_.mask_token_id < 0 || cfg_.mask_token_id >= tc.vocab_size)
    fail(what, ": mask_token_id ", cfg_.mask_token_id, " is outside the target vocabulary (", tc.vocab_size, " rows)");
  if (cfg_.method == DraftMethod::kDFlash2 && cfg_.selector_top_k > tc.vocab_size)
    fail(what, ": selector_top_k ", cfg_.selector_top_k, " exceeds the target vocabulary ", tc.vocab_size);

  auto src = open_weight_source(dir);
  OpContext ctx = target.op_context();
  WeightOptions wo{opts.weights, opts.progress};
  WeightLoader L{*src, wo, ctx, {}, 0, 0, false};
  L.tty = opts.progress && ::isatty(2);
  const int64_t H = b.hidden_size, hd = b.head_dim, nq = b.n_heads * hd, nkv = b.n_kv_heads * hd;
  const int64_t F = b.intermediate_size, T = cfg_.n_taps();
  const bool d2 = cfg_.method == DraftMethod::kDFlash2;
  const int64_t kt = cfg_.conv_kernel_size, G = d2 ? H / cfg_.conv_group_size : 0;
  const LayerSpec spec{H, nq, nkv, hd, F, b.attention_bias, b.attention_bias, true, false};
  L.total = 3 + b.n_layers * (spec.n_tensors() + (d2 ? 4 : 0)) + (d2 ? 3 : 0) + (cfg_.draft_vocab_size > 0 ? 1 : 0);

  // fc's input width decides which target it belongs to: say so plainly.
  if (src->has("fc.weight")) {
    const Shape s = src->shape("fc.weight");
    if (s.size() == 2 && s[1] != T * tc.hidden_size)
      fail(src->path(), ": fc.weight takes ", s[1], " inputs but ", T, " taps x target hidden ", tc.hidden_size,
           " = ", T * tc.hidden_size, " (drafter made for another target?)");
  }
  w_.fc = L.matrix("fc.weight", {H, T * tc.hidden_size});
  w_.hidden_norm = L.vec("hidden_norm.weight", H);
  w_.norm = L.vec("norm.weight", H);
  w_.layers.resize(b.n_layers);
  for (int64_t i = 0; i < b.n_layers; ++i) {
    const std::string p = hf::draft_layer(i);
    DraftLayerWeights& l = w_.layers[i];
    static_cast<LayerWeights&>(l) = load_layer(L, p, spec);
    if (d2) {
      l.attn_conv_base = L.dense(p + "attention_conv.base_kernel", {2, kt, H});
      l.mlp_conv_base = L.dense(p + "mlp_conv.base_kernel", {2, kt, H});
      l.attn_conv_proj = L.matrix(p + "attention_conv.kernel_projection.weight", {2 * kt * G, H});
      l.mlp_conv_proj = L.matrix(p + "mlp_conv.kernel_projection.weight", {2 * kt * G, H});
    }
  }
  if (d2) {
    const int64_t r = cfg_.selector_rank;
    // Codebooks are embedding tables: rows are gathered, never multiplied.
    // They keep their stored precision unless a float format is forced.
    WeightOptions keep{std::nullopt, opts.progress};
    WeightLoader K{*src, keep, ctx, {}, 0, 0, false};
    w_.predecessor_codebook =
        K.matrix(codebook_name(*src, "candidate_selector.predecessor_codebook"), {tc.vocab_size, r});
    w_.successor_codebook = K.matrix(codebook_name(*src, "candidate_selector.successor_codebook"), {tc.vocab_size, r});
    w_.hidden_projection = L.matrix("candidate_selector.hidden_projection.weight", {r, H});
  }
  if (const int64_t Vd = cfg_.draft_vocab_size; Vd > 0) {  // training.md §5
    w_.lm_head = L.matrix("lm_head.weight", {Vd, H});
    w_.d2t_ids = read_draft_vocab_ids(dir, Vd, tc.vocab_size);
  } else if (src->has("lm_head.weight")) {
    fail(src->path(), ": the drafter carries lm_head.weight but its config has no draft_vocab_size");
  }
  for (const auto& [f, n] : L.formats_used)
    w_.format_summary += (w_.format_summary.empty() ? "" : ", ") + f + " (" + std::to_string(n) + ")";
  rope_ = compute_rope(b);
}

std::unique_ptr<DraftModel> DraftModel::load(const std::string& dir, Transformer& target, const DraftOptions& opts) {
  return load(dir, load_draft_config(dir), target, opts);
}

std::unique_ptr<DraftModel> DraftModel::load(const std::string& dir, const DraftConfig& cfg, Transformer& target,
                                             const DraftOptions& opts) {
  return std::unique_ptr<DraftModel>(new DraftModel(dir, cfg, target, opts));
}

uint64_t DraftModel::weight_bytes() const {
  uint64_t n = w_.fc.nbytes() + w_.hidden_norm.nbytes() + w_.norm.nbytes() + w_.hidden_projection.nbytes() +
               w_.lm_head.nbytes();
  for (const auto& l : w_.layers) {
    n += l.nbytes() + l.attn_conv_proj.nbytes() + l.mlp_conv_proj.nbytes() + l.attn_conv_base.nbytes() +
         l.mlp_conv_base.nbytes();
  }
  return n;
}

std::vector<int32_t> read_draft_vocab_ids(const std::string& dir, int64_t Vd, int64_t target_vocab) {
  SafetensorsCheckpoint ck(dir);
  if (!ck.has("d2t")) fail(dir, ": draft_vocab_size is set but the tensor d2t is missing");
  const Tensor d2t = ck.tensor("d2t");  // int64: read as stored
  if (d2t.dtype() != DType::kI64 || d2t.ndim() != 1 || d2t.dim(0) != Vd)
    fail(dir, ": d2t must be int64 [", Vd, "], found ", dtype_name(d2t.dtype()), " ", shape_str(d2t.shape()));
  std::vector<int32_t> ids(Vd);
  for (int64_t i = 0; i < Vd; ++i) {
    const int64_t t = i + d2t.ptr<int64_t>()[i];  // d2t holds offsets
    if (t < 0 || t >= target_vocab || (i > 0 && t <= ids[i - 1]))
      fail(dir, ": d2t[", i, "] maps to target id ", t, " (ids must ascend inside the target vocabulary)");
    ids[i] = static_cast<int32_t>(t);
  }
  return ids;
}

}  // namespace blockspec
