// GPTQ / compressed-tensors -> native Q8_G128 / Q4_G128 codes. See
// quant_checkpoint.h; the formulas are quant_formats.md §2.1-2.3 (GPTQ) and
// §3.3-3.4 (compressed-tensors; asymmetric zero points: quant_checkpoint_zp.h).
#include "model/quant_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include "base/error.h"
#include "formats/safetensors.h"
#include "kernels/fp_formats.h"
#include "model/quant_checkpoint_zp.h"

namespace blockspec {

namespace {

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

}  // namespace

bool is_linear_module(const std::string& m) {
  const std::string last = m.substr(m.rfind('.') + 1);
  return ends_with(last, "_proj") || last == "lm_head" || last == "fc" || last == "kernel_projection" ||
         last == "hidden_projection" || last == "in_proj_qkv" || last == "in_proj_z" || last == "in_proj_a" ||
         last == "in_proj_b";
}

namespace {

enum class Kind { kGptq, kCtPacked, kCtInt8 };

struct Module {
  Kind kind = Kind::kGptq;
  int bits = 4;
  int64_t N = 0, K = 0;
  bool per_channel = false;  // one scale per row (GPTQ group_size -1, CT strategy channel)
  bool act_int8 = false;     // W8A8: dynamic int8 input activations (CT int-quantized); else weight-only
  // Served as its exact f32 dequantization: GPTQ asymmetric, act-order g_idx or group size not 128 / -1;
  // compressed-tensors asymmetric (weight_zero_point, described by ct_zp):
  bool dense = false, v1 = false;
  int64_t group = 128;                 // GPTQ / CT group_size (K when per channel)
  std::string zeros_name, gidx_name;  // GPTQ qzeros, g_idx ("" when absent: k // group)
  CtZeroPoints ct_zp;                 // CT asymmetric: weight_zero_point (ct_zp.name empty when symmetric)
  bool act_int8_ignored = false;      // CT asymmetric int-quantized: dynamic int8 inputs run as f32 instead
  std::string codes_name, scale_name;
  std::string desc;  // "gptq int4 g128" ... for storage_type()
  // Float formats (compressed-tensors float-quantized FP8, nvfp4- / mxfp4-pack-quantized): the native form
  // is a QuantTensor of this format (kernels/fp_formats.h); kF32 = an integer module.
  WeightFormat fp = WeightFormat::kF32;
  std::string fp_scale_kind;  // FP8: "tensor" | "channel" | "block"
  std::string global_name;    // NVFP4: weight_global_scale
};

class QuantCheckpointSource : public WeightSource {
 public:
  QuantCheckpointSource(const std::string& dir, const QuantConfig& qc)
      : cfg_(load_hf_config(dir)), ckpt_(dir), qc_(qc) {
    if (qc_.method == QuantMethod::kCompressedTensors) check_ct_global();
    for (const std::string& n : ckpt_.names()) {
      const SafetensorsEntry& e = ckpt_.entry(n);
      if (ends_with(n, ".qweight")) {
        add(n.substr(0, n.size() - 8), gptq_module(n.substr(0, n.size() - 8)));
      } else if (ends_with(n, ".weight_packed")) {
        add(n.substr(0, n.size() - 14), ct_module(n.substr(0, n.size() - 14), Kind::kCtPacked));
      } else if (ends_with(n, ".weight") && (e.dtype == DType::kI8 || e.dtype == DType::kF8_E4M3 ||
                                             e.dtype == DType::kF8_E5M2 || e.dtype == DType::kU8)) {
        add(n.substr(0, n.size() - 7), ct_module(n.substr(0, n.size() - 7), Kind::kCtInt8));
      } else if (ends_with(n, ".weight") && qc_.method == QuantMethod::kCompressedTensors) {
        // A linear that the config quantizes must not be stored dense.
        const std::string m = n.substr(0, n.size() - 7);
        if (is_linear_module(m) && !ignored(m) && match_group(m) != nullptr)
          fail(where(m), ": config_groups.", match_group(m)->name, " targets this module, but it is stored dense (",
               n, " is ", dtype_name(e.dtype), ", no weight_packed / int8 weight)");
      }
    }
    int n_dense = 0, n_ct = 0, n_a8 = 0;
    for (const auto& [name, m] : mods_) {
      n_dense += m.dense ? 1 : 0;
      n_ct += m.dense && m.kind != Kind::kGptq ? 1 : 0;
      n_a8 += m.act_int8_ignored ? 1 : 0;
    }
    if (n_dense > 0)
      std::fprintf(stderr, "note: %s: %d modules (GPTQ asymmetric, act-order or group_size != 128: %d; compressed-tensors "
                   "asymmetric: %d) load as their exact f32 dequantization s * (q - z), weight-only%s\n", path().c_str(),
                   n_dense, n_dense - n_ct, n_ct,
                   n_a8 > 0 ? str_cat(" (", n_a8, " of them configure dynamic int8 input activations: run with f32 "
                                      "activations instead)").c_str() : "");
  }

  const std::string& path() const override { return ckpt_.path(); }
  const ModelConfig& config() const override { return cfg_; }
  bool has(const std::string& n) const override { return module_of(n) != nullptr || ckpt_.has(n); }
  bool requires_kv_scales() const override { return qc_.ct.has_kv_cache_scheme; }
  Shape shape(const std::string& n) const override {
    if (const Module* m = module_of(n)) return {m->N, m->K};
    return ckpt_.entry(n).shape;
  }
  std::string storage_type(const std::string& n) const override {
    if (const Module* m = module_of(n)) return m->desc;
    return dtype_name(ckpt_.entry(n).dtype);
  }
  WeightFormat natural_format(const std::string& n) const override {
    if (const Module* m = module_of(n)) {
      if (m->fp != WeightFormat::kF32) return m->fp;  // FP8 / NVFP4 / MXFP4 stay compressed (fp_native)
      if (m->dense) return WeightFormat::kF32;
      return m->bits == 4 ? WeightFormat::kQ4_G128 : WeightFormat::kQ8_G128;
    }
    return ckpt_.entry(n).dtype == DType::kBF16 ? WeightFormat::kBF16 : WeightFormat::kF32;
  }
  bool has_native(const std::string& n) const override {
    const Module* m = module_of(n);
    return m != nullptr && m->fp == WeightFormat::kF32 && !m->dense;
  }
  bool native_act_int8(const std::string& n) const override {
    const Module* m = module_of(n);
    return m != nullptr && m->act_int8;
  }

  void load_native(const std::string& n, int64_t r0, int64_t r1, int8_t* codes, float* scales) const override {
    const Module* m = module_of(n);
    BS_ASSERT(m != nullptr && m->fp == WeightFormat::kF32 && !m->dense && 0 <= r0 && r0 <= r1 && r1 <= m->N);
    const int64_t N = m->N, K = m->K, G = (K + 127) / 128;  // == q_groups(K): 128 is a multiple of 8
    const Tensor c = ckpt_.tensor(m->codes_name), s = ckpt_.tensor(m->scale_name);
    const int b = m->bits, pf = 32 / b, zero = 1 << (b - 1);
    if (m->kind == Kind::kGptq) {
      // qweight [K / pf, N] is packed along K: walk it row by row (contiguous
      // reads of [r0, r1)) and scatter each word's pf codes into their rows.
      for (int64_t kw = 0; kw < K / pf; ++kw)
        for (int64_t r = r0; r < r1; ++r) {
          const uint32_t w = elem<uint32_t>(c, kw * N + r);
          int8_t* out = codes + (r - r0) * K + kw * pf;
          for (int j = 0; j < pf; ++j) out[j] = static_cast<int8_t>(static_cast<int>(packed_field(w, b, j)) - zero);
        }
      for (int64_t g = 0; g < G; ++g)  // scales [ng, N]; per channel: ng = 1, repeated in every group
        for (int64_t r = r0; r < r1; ++r) scales[(r - r0) * G + g] = float_elem(s, (m->per_channel ? 0 : g) * N + r);
      return;
    }
    for (int64_t r = r0; r < r1; ++r) {
      int8_t* out = codes + (r - r0) * K;  // [K]
      if (m->kind == Kind::kCtPacked) {  // weight_packed [N, W], packed along K
        const int64_t W = c.dim(1);
        for (int64_t k = 0; k < K; ++k)
          out[k] = static_cast<int8_t>(static_cast<int>(packed_field(elem<uint32_t>(c, r * W + k / pf), b, k % pf)) - zero);
      } else {  // weight [N, K] int8
        std::memcpy(out, static_cast<const uint8_t*>(c.data()) + r * K, K);
      }
      for (int64_t g = 0; g < G; ++g)  // weight_scale [N, ng] or [N, 1]
        scales[(r - r0) * G + g] = float_elem(s, m->per_channel ? r : r * G + g);
    }
  }

  // Rows [r0, r1) of an FP module as a QuantTensor of its format, codes and scales as stored (FP8 scales
  // repeated per row and group of 128). Its dequantization is compressed-tensors' dequantize in f32.
  QuantTensor fp_rows(const Module& m, int64_t r0, int64_t r1) const {
    const int64_t K = m.K, R = r1 - r0, gsz = fp_group_size(m.fp), G = (K + gsz - 1) / gsz;
    QuantTensor q;
    q.format = m.fp;
    q.rows = R;
    q.cols = K;
    const Tensor c = ckpt_.tensor(m.codes_name), s = ckpt_.tensor(m.scale_name);
    const int64_t rb = m.fp == WeightFormat::kFP8_E4M3 ? K : K / 2;  // K is even for the FP4 formats
    q.data = Tensor(DType::kU8, {R, rb});
    std::memcpy(q.data.mutable_ptr<uint8_t>(), static_cast<const uint8_t*>(c.data()) + r0 * rb, R * rb);
    if (m.fp == WeightFormat::kFP8_E4M3) {
      q.scales = Tensor(DType::kF32, {R, G});
      float* o = q.scales.mutable_ptr<float>();
      const int64_t nbk = (K + 127) / 128;
      for (int64_t r = 0; r < R; ++r)
        for (int64_t g = 0; g < G; ++g)
          o[r * G + g] = float_elem(s, m.fp_scale_kind == "tensor"    ? 0
                                       : m.fp_scale_kind == "channel" ? r0 + r
                                                                      : (r0 + r) / 128 * nbk + g);
    } else {
      q.scales = Tensor(DType::kU8, {R, G});
      std::memcpy(q.scales.mutable_ptr<uint8_t>(), static_cast<const uint8_t*>(s.data()) + r0 * G, R * G);
      if (m.fp == WeightFormat::kNVFP4) {
        q.aux = Tensor(DType::kF32, {1});
        q.aux.mutable_ptr<float>()[0] = elem<float>(ckpt_.tensor(m.global_name), 0);
      }
    }
    return q;
  }
  // Rows [r0, r1) of a dense-served GPTQ module: W[n, k] = s[g, n] * float(q[k, n] - z[g, n]), g = g_idx[k]
  // (k // group when absent), the reference formula of quant_formats.md §2.1, exact in f32.
  void gptq_dense_rows(const Module& m, int64_t r0, int64_t r1, float* out) const {
    const int64_t N = m.N, K = m.K;
    const int b = m.bits, pf = 32 / b;
    const Tensor c = ckpt_.tensor(m.codes_name), s = ckpt_.tensor(m.scale_name), zt = ckpt_.tensor(m.zeros_name);
    std::vector<int32_t> gidx(K);
    if (m.gidx_name.empty()) {
      for (int64_t k = 0; k < K; ++k) gidx[k] = static_cast<int32_t>(k / m.group);
    } else {
      const Tensor gt = ckpt_.tensor(m.gidx_name);
      for (int64_t k = 0; k < K; ++k) gidx[k] = elem<int32_t>(gt, k);
    }
    for (int64_t kw = 0; kw < K / pf; ++kw)
      for (int64_t r = r0; r < r1; ++r) {
        const uint32_t w = elem<uint32_t>(c, kw * N + r);
        for (int j = 0; j < pf; ++j) {
          const int64_t k = kw * pf + j, gi = gidx[k];
          const int q = static_cast<int>(packed_field(w, b, j)) - gptq_zero(zt, N, b, m.v1, gi, r);
          out[(r - r0) * K + k] = float_elem(s, gi * N + r) * static_cast<float>(q);
        }
      }
  }
  CtAsymWeight ct_asym(const Module& m) const {
    CtAsymWeight w;
    w.codes = ckpt_.tensor(m.codes_name);
    w.scales = ckpt_.tensor(m.scale_name);
    w.zeros = ckpt_.tensor(m.ct_zp.name);
    w.z = m.ct_zp;
    w.K = m.K;
    w.group = m.group;
    return w;
  }
  bool has_fp_native(const std::string& n) const override {
    const Module* m = module_of(n);
    return m != nullptr && m->fp != WeightFormat::kF32;
  }
  QuantTensor fp_native(const std::string& n) const override {
    const Module* m = module_of(n);
    if (m == nullptr || m->fp == WeightFormat::kF32) fail(path(), ": \"", n, "\" is not stored as FP8 / NVFP4 / MXFP4");
    return fp_rows(*m, 0, m->N);
  }

  Tensor load(const std::string& n) const override {
    if (const Module* m = module_of(n)) {
      Tensor t(DType::kF32, {m->N, m->K});
      load_rows(n, 0, m->N, t.mutable_ptr<float>());
      return t;
    }
    Tensor t = ckpt_.tensor(n);
    if (t.dtype() != DType::kF32 && t.dtype() != DType::kBF16 && t.dtype() != DType::kF16)
      fail(path(), ": tensor \"", n, "\" has dtype ", dtype_name(t.dtype()), "; expected F32, BF16 or F16");
    return t;
  }
  // Exact dequantization: float(code) * scale.
  void load_rows(const std::string& n, int64_t r0, int64_t r1, float* out) const override {
    const Module* m = module_of(n);
    if (m == nullptr) return WeightSource::load_rows(n, r0, r1, out);
    if (m->dense && m->kind != Kind::kGptq) return ct_asym_rows(ct_asym(*m), r0, r1, out);
    if (m->dense) return gptq_dense_rows(*m, r0, r1, out);
    if (m->fp != WeightFormat::kF32) {
      const QuantTensor q = fp_rows(*m, r0, r1);
      const FpWeights f = fp_weights(q);
      for (int64_t r = 0; r < r1 - r0; ++r) fp_dequantize_row(f, r, out + r * m->K);
      return;
    }
    const int64_t K = m->K, G = (K + 127) / 128;
    std::vector<int8_t> c((r1 - r0) * K);
    std::vector<float> s((r1 - r0) * G);
    load_native(n, r0, r1, c.data(), s.data());
    for (int64_t r = 0; r < r1 - r0; ++r)
      for (int64_t k = 0; k < K; ++k) out[r * K + k] = static_cast<float>(c[r * K + k]) * s[r * G + k / 128];
  }

 private:
  std::string where(const std::string& module) const { return path() + ": module " + module; }

  const Module* module_of(const std::string& n) const {
    if (!ends_with(n, ".weight")) return nullptr;
    auto it = mods_.find(n.substr(0, n.size() - 7));
    return it == mods_.end() ? nullptr : &it->second;
  }
  void add(const std::string& name, Module m) {
    if (mods_.count(name)) fail(where(name), ": stored in two quantized forms");
    mods_.emplace(name, std::move(m));
  }
  const SafetensorsEntry& need(const std::string& module, const std::string& suffix, const std::string& why) const {
    const std::string n = module + "." + suffix;
    if (!ckpt_.has(n)) fail(where(module), ": missing tensor ", n, " (", why, ")");
    return ckpt_.entry(n);
  }
  void need_shape(const std::string& module, const SafetensorsEntry& e, const Shape& want, const std::string& why) const {
    if (e.shape != want)
      fail(where(module), ": ", e.name, " has shape ", shape_str(e.shape), ", expected ", shape_str(want), " (", why, ")");
  }
  void need_float(const std::string& module, const SafetensorsEntry& e) const {
    if (e.dtype != DType::kF16 && e.dtype != DType::kBF16 && e.dtype != DType::kF32)
      fail(where(module), ": ", e.name, " has dtype ", dtype_name(e.dtype), ", expected F16, BF16 or F32 scales");
  }

  // ---- GPTQ (quant_formats.md §2) ----
  // Zero point of group gi, column n, with the checkpoint's convention: v1 ("gptq") stores z - 1 by whole-word
  // subtraction (GPTQModel), so adding 0x11111111 / 0x01010101 to the word restores every field exactly (a
  // per-field +1 would misread the field after a z = 0); v2 stores z.
  int gptq_zero(const Tensor& zt, int64_t N, int b, bool v1, int64_t gi, int64_t n) const {
    const int pf = 32 / b;
    uint32_t w = elem<uint32_t>(zt, gi * (N / pf) + n / pf);
    if (v1) w += b == 4 ? 0x11111111u : 0x01010101u;
    return static_cast<int>(packed_field(w, b, n % pf));
  }

  Module gptq_module(const std::string& mod) const {
    if (qc_.method != QuantMethod::kGptq)
      fail(where(mod), ": has a GPTQ qweight but quant_method is compressed-tensors");
    const GptqConfig& g = qc_.gptq;
    const std::string& cf = g.checkpoint_format;
    if (cf != "gptq" && cf != "gptq_v2")
      fail(where(mod), ": GPTQ checkpoint_format \"", cf, "\" is not supported (only gptq and gptq_v2; marlin / gptq_p "
           "are pre-permuted layouts)");
    if (g.has_dynamic) fail(where(mod), ": GPTQModel per-module \"dynamic\" overrides are not supported yet");
    if (g.bits != 4 && g.bits != 8) fail(where(mod), ": GPTQ bits=", g.bits, " is not supported (4 or 8)");
    if (g.group_size != -1 && g.group_size <= 0)
      fail(where(mod), ": GPTQ group_size ", g.group_size, " is not valid (a positive size or -1)");
    Module m;
    m.kind = Kind::kGptq;
    m.bits = g.bits;
    m.per_channel = g.group_size == -1;
    const int b = g.bits, pf = 32 / b;
    const SafetensorsEntry& qw = need(mod, "qweight", "GPTQ codes");
    if (qw.dtype != DType::kI32 || qw.shape.size() != 2)
      fail(where(mod), ": qweight must be a 2-D I32 [K*bits/32, N] tensor, found ", dtype_name(qw.dtype), " ",
           shape_str(qw.shape));
    m.K = qw.shape[0] * pf;
    m.N = qw.shape[1];
    const int64_t G = m.per_channel ? m.K : g.group_size, ng = (m.K + G - 1) / G;
    const std::string gwhy = "group_size " + std::to_string(g.group_size) + ", K=" + std::to_string(m.K);
    const SafetensorsEntry& sc = need(mod, "scales", "GPTQ scales");
    need_float(mod, sc);
    need_shape(mod, sc, {ng, m.N}, gwhy);
    const SafetensorsEntry& qz = need(mod, "qzeros", "GPTQ zero points");
    if (m.N % pf != 0) fail(where(mod), ": N=", m.N, " is not a multiple of ", pf, " (qzeros pack ", pf, " per word)");
    if (qz.dtype != DType::kI32) fail(where(mod), ": qzeros has dtype ", dtype_name(qz.dtype), ", expected I32");
    need_shape(mod, qz, {ng, m.N / pf}, gwhy);
    // Symmetric zero points must all be 2^(b-1).
    const bool v1 = cf == "gptq";
    if (g.sym) {
      const Tensor zt = ckpt_.tensor(qz.name);
      for (int64_t gi = 0; gi < ng; ++gi)
        for (int64_t n = 0; n < m.N; ++n)
          if (const int z = gptq_zero(zt, m.N, b, v1, gi, n); z != (1 << (b - 1)))
            fail(where(mod), ": zero point of group ", gi, " column ", n, " is ", z, " (", cf, " stores ",
                 v1 ? "z-1" : "z", "), expected ", (1 << (b - 1)), " for sym=true");
    }
    // g_idx: the group of each input row. Without desc_act it must be k // group_size (vLLM ignores it then);
    // with desc_act it may be any map into [0, ng) (act-order), and is required.
    bool trivial = true;
    if (ckpt_.has(mod + ".g_idx")) {
      const SafetensorsEntry& gi = ckpt_.entry(mod + ".g_idx");
      if (gi.dtype != DType::kI32) fail(where(mod), ": g_idx has dtype ", dtype_name(gi.dtype), ", expected I32");
      if (gi.shape != Shape{m.K})
        fail(where(mod), ": g_idx has shape ", shape_str(gi.shape), ", expected [", m.K, "] (one group index per input)");
      const Tensor gt = ckpt_.tensor(gi.name);
      for (int64_t k = 0; k < m.K; ++k) {
        const int32_t v = elem<int32_t>(gt, k);
        if (v < 0 || v >= ng) fail(where(mod), ": g_idx[", k, "] = ", v, " is out of range [0, ", ng, ")");
        if (v != k / G) {
          if (!g.desc_act)
            fail(where(mod), ": g_idx[", k, "] = ", v, ", expected ", k / G, " (k // group_size): a non-trivial g_idx "
                 "with desc_act=false is ignored by vLLM; refusing rather than guessing");
          trivial = false;
        }
      }
      m.gidx_name = gi.name;
    } else if (g.desc_act) {
      fail(where(mod), ": desc_act=true but g_idx is missing (the act-order group of each input)");
    }
    m.codes_name = qw.name;
    m.scale_name = sc.name;
    m.zeros_name = qz.name;
    m.v1 = v1;
    m.group = G;
    // Native q4 / q8 codes when they map exactly onto the engine's symmetric groups of 128; otherwise
    // (asymmetric zero points, act-order groups, other group sizes) the exact dequantization s * (q - z),
    // which fits f32 exactly (an f16 scale times an integer of <= 9 bits), served as a dense f32 weight.
    m.dense = !g.sym || !trivial || !(m.per_channel || G == 128);
    m.desc = str_cat(cf, " int", b, m.per_channel ? " per-channel" : str_cat(" g", G), g.sym ? "" : " asym",
                     trivial ? "" : " act-order", m.dense ? " (dequantized to f32)" : str_cat(" w", b, "a16"));
    return m;
  }

  // ---- compressed-tensors (quant_formats.md §3) ----
  void check_ct_global() const {
    const CtConfig& c = qc_.ct;
    const std::string& w = qc_.what;
    if (c.quantization_status != "compressed")
      fail(w, ": quantization_status \"", c.quantization_status, "\" is not supported (expected \"compressed\")");
    if (c.has_transform) fail(w, ": transform_config (runtime Hadamard/rotation transforms) is not supported yet");
    if (c.has_sparsity) fail(w, ": sparsity_config is not supported yet");
    if (c.has_kv_cache_scheme) {  // vLLM's validator (quant_formats.md §6): FP8, one static scale per tensor
      const CtQuantArgs& a = *c.kv_cache_scheme;
      if (a.num_bits != 8 || a.type != "float" || (!a.strategy.empty() && a.strategy != "tensor") || !a.symmetric ||
          a.dynamic != "false")
        fail(w, ".kv_cache_scheme: only {num_bits 8, type float, strategy tensor, symmetric, dynamic false} (FP8 "
                "k_scale / v_scale per layer) is supported, found num_bits ", a.num_bits, ", type ", a.type,
             ", strategy ", a.strategy.empty() ? "(none)" : a.strategy, ", symmetric ", a.symmetric, ", dynamic ",
             a.dynamic);
    }
  }
  bool ignored(const std::string& m) const {
    const bool lin = is_linear_module(m);
    return std::any_of(qc_.ct.ignore.begin(), qc_.ct.ignore.end(),
                       [&](const std::string& t) { return ct_target_matches(t, m, lin); });
  }
  // The group that quantizes module m: an exact name beats a regex beats the
  // class name (vLLM's find_matched_target order); a tie between groups is an error.
  const CtGroup* match_group(const std::string& m) const {
    const bool lin = is_linear_module(m);
    const CtGroup* best = nullptr;
    int best_level = 0;
    bool tie = false;
    for (const CtGroup& g : qc_.ct.groups) {
      int level = 0;
      for (const std::string& t : g.targets) {
        if (!ct_target_matches(t, m, lin)) continue;
        level = std::max(level, t == m ? 3 : t.rfind("re:", 0) == 0 ? 2 : 1);
      }
      if (level > best_level) best = &g, best_level = level, tie = false;
      else if (level > 0 && level == best_level) tie = true;
    }
    if (tie) fail(where(m), ": matched by several config_groups at the same priority; the checkpoint is ambiguous");
    return best;
  }

  Module ct_module(const std::string& mod, Kind kind) const {
    if (qc_.method != QuantMethod::kCompressedTensors)
      fail(where(mod), ": has compressed-tensors tensors but quant_method is gptq");
    if (ignored(mod)) fail(where(mod), ": listed in \"ignore\" but stored quantized");
    const CtGroup* grp = match_group(mod);
    if (grp == nullptr) fail(where(mod), ": stored quantized but no config_groups target matches it");
    const std::string fmt = grp->format.empty() ? qc_.ct.format : grp->format;
    const std::string in = where(mod) + " (config_groups." + grp->name + ", format " + fmt + ")";
    if (fmt.find("mxfp8") != std::string::npos) fail(in, ": MXFP8 weights are not supported yet");
    if (!grp->weights) fail(in, ": the group has no \"weights\" quantization args");
    const CtQuantArgs& a = *grp->weights;
    if (fmt == "float-quantized" || fmt == "nvfp4-pack-quantized" || fmt == "mxfp4-pack-quantized" || a.type == "float")
      return fp_module(mod, *grp, fmt, in);
    if (a.type != "int") fail(in, ": weights of type \"", a.type, "\" (FP8/FP4) are not supported yet");
    if (a.num_bits != 4 && a.num_bits != 8) fail(in, ": num_bits ", a.num_bits, " is not supported (4 or 8)");
    if (a.actorder == "group") fail(in, ": actorder \"group\" (weight_g_idx) is not supported yet");
    if (a.dynamic != "false") fail(in, ": dynamic weight quantization is not a stored checkpoint");
    const bool has_zp = ckpt_.has(mod + ".weight_zero_point");
    if (a.symmetric && has_zp)
      fail(in, ": weight_zero_point present but the config says symmetric: true (set symmetric: false, or drop the "
           "zero points)");
    if (!a.symmetric && !has_zp)
      fail(in, ": symmetric: false but weight_zero_point is missing (asymmetric weights need their zero points)");
    const bool channel = a.strategy == "channel";
    // Symmetric: native codes, so groups of 128 or per channel. Asymmetric: served as the exact dequantization
    // (quant_checkpoint_zp.h), any group size or per channel (compressed-tensors packs zero points only for those).
    if (a.symmetric && !channel && !(a.strategy == "group" && a.group_size == 128))
      fail(in, ": weight strategy \"", a.strategy, "\" group_size ", a.group_size,
           " is not supported (group with group_size 128, or channel)");
    if (!a.symmetric && !channel && !(a.strategy == "group" && a.group_size > 0))
      fail(in, ": asymmetric weight strategy \"", a.strategy, "\" group_size ", a.group_size,
           " is not supported (group with a positive group_size, or channel)");
    if (ckpt_.has(mod + ".weight_g_idx")) fail(in, ": weight_g_idx present: actorder \"group\" is not supported yet");
    if (grp->output_activations) fail(in, ": output activation quantization is not supported");
    Module m;
    m.kind = kind;
    m.bits = a.num_bits;
    m.per_channel = channel;
    if (kind == Kind::kCtPacked) {
      if (fmt != "pack-quantized" && fmt != "mixed-precision")
        fail(in, ": has weight_packed but the format is not pack-quantized");
      if (grp->input_activations) fail(in, ": input activation quantization with pack-quantized is not supported");
      const SafetensorsEntry& wp = need(mod, "weight_packed", "packed codes");
      if (wp.dtype != DType::kI32 || wp.shape.size() != 2)
        fail(in, ": weight_packed must be a 2-D I32 tensor, found ", dtype_name(wp.dtype), " ", shape_str(wp.shape));
      const SafetensorsEntry& ws = need(mod, "weight_shape", "the unpacked [N, K]");
      if (ws.dtype != DType::kI64 || ws.shape != Shape{2})
        fail(in, ": weight_shape must be I64 [2], found ", dtype_name(ws.dtype), " ", shape_str(ws.shape));
      const Tensor wst = ckpt_.tensor(ws.name);
      m.N = elem<int64_t>(wst, 0);
      m.K = elem<int64_t>(wst, 1);
      if (m.N <= 0 || m.K <= 0) fail(in, ": weight_shape [", m.N, ", ", m.K, "] is not a valid shape");
      const Shape want{m.N, (m.K * m.bits + 31) / 32};
      if (wp.shape != want)
        fail(in, ": weight_packed has shape ", shape_str(wp.shape), ", expected ", shape_str(want), " for weight_shape [",
             m.N, ", ", m.K, "] at ", m.bits, " bits");
      m.codes_name = wp.name;
    } else {
      const SafetensorsEntry& w = need(mod, "weight", "int8 codes");
      if (w.dtype != DType::kI8) fail(in, ": weight of dtype ", dtype_name(w.dtype), " is not supported (FP8/FP4 later)");
      if (a.num_bits != 8) fail(in, ": an unpacked I8 weight with num_bits ", a.num_bits);
      if (fmt != "int-quantized" && fmt != "naive-quantized" && fmt != "mixed-precision")
        fail(in, ": has an I8 weight but the format is not int-quantized / naive-quantized");
      if (w.shape.size() != 2) fail(in, ": weight must be 2-D, found ", shape_str(w.shape));
      m.N = w.shape[0];
      m.K = w.shape[1];
      // W8A8: the engine quantizes activations dynamically per token exactly as
      // vLLM does (kernel quantize_acts_token, QuantTensor::act_per_token).
      // Dynamic per-tensor would make a row's result depend on the rest of the
      // batch (no batch invariance, so no lossless verification): refused.
      if (const auto& ia = grp->input_activations) {
        if (ia->type != "int" || ia->num_bits != 8 || !ia->symmetric || ia->dynamic != "true" ||
            ia->strategy != "token")
          fail(in, ": input activations (", ia->type, ia->num_bits, ", ", ia->symmetric ? "sym" : "asym", ", ",
               ia->strategy, ", dynamic=", ia->dynamic,
               ") are not supported: only dynamic symmetric int8 per token");
      }
      m.act_int8 = grp->input_activations.has_value();
      if (ckpt_.has(mod + ".input_scale")) fail(in, ": static input_scale present: static activation scales are not supported");
      m.codes_name = w.name;
    }
    m.group = channel ? m.K : a.group_size;
    const int64_t ng = (m.K + m.group - 1) / m.group;
    const SafetensorsEntry& sc = need(mod, "weight_scale", "scales");
    need_float(mod, sc);
    need_shape(mod, sc, {m.N, ng}, channel ? "strategy channel" : str_cat("strategy group, group_size ", m.group));
    m.scale_name = sc.name;
    if (!a.symmetric) {
      m.ct_zp = CtZeroPoints{mod + ".weight_zero_point", kind == Kind::kCtPacked, m.bits, m.N, ng};
      if (const std::string p = ct_zero_point_problem(ckpt_, m.ct_zp); !p.empty()) fail(in, ": ", p);
      m.dense = true;
      m.act_int8_ignored = m.act_int8;
      m.act_int8 = false;
    }
    m.desc = str_cat("compressed-tensors ", fmt, " int", m.bits, channel ? " per-channel" : str_cat(" g", m.group),
                     a.symmetric ? "" : " asym", m.dense ? " (dequantized to f32)"
                                                 : m.act_int8 ? " w8a8" : str_cat(" w", m.bits, "a16"));
    return m;
  }

  // ---- compressed-tensors float formats (quant_formats.md §3.5, §3.6, §5) ----
  Module fp_module(const std::string& mod, const CtGroup& grp, const std::string& fmt, const std::string& in) const {
    const CtQuantArgs& a = *grp.weights;
    if (a.type != "float") fail(in, ": weights of type \"", a.type, "\" in a float format");
    if (!a.symmetric) fail(in, ": asymmetric float weights are not supported");
    if (a.dynamic != "false") fail(in, ": dynamic weight quantization is not a stored checkpoint");
    if (ckpt_.has(mod + ".weight_zero_point")) fail(in, ": weight_zero_point present: asymmetric weights are not supported");
    if (ckpt_.has(mod + ".weight_g_idx")) fail(in, ": weight_g_idx present: actorder \"group\" is not supported");
    if (grp.output_activations) fail(in, ": output activation quantization is not supported");
    // Weight-only: activations stay f32. Dynamic activation quantization in the config is not emulated
    // (the engine runs W8A16 / W4A16); static activation scales would change the model, so they are refused.
    if (grp.input_activations && grp.input_activations->dynamic == "false")
      fail(in, ": static input activation quantization is not supported (the FP formats run weight-only)");
    for (const char* t : {"input_scale", "input_global_scale"})
      if (ckpt_.has(mod + "." + t)) fail(in, ": ", t, " present: static activation scales are not supported");
    Module m;
    m.kind = Kind::kCtPacked;
    m.bits = a.num_bits;
    if (a.num_bits == 8) {
      if (fmt != "float-quantized" && fmt != "naive-quantized" && fmt != "mixed-precision")
        fail(in, ": FP8 weights need format float-quantized");
      m.fp = WeightFormat::kFP8_E4M3;
      const SafetensorsEntry& w = need(mod, "weight", "FP8 E4M3 codes");
      if (w.dtype != DType::kF8_E4M3 || w.shape.size() != 2)
        fail(in, ": weight must be a 2-D F8_E4M3 tensor, found ", dtype_name(w.dtype), " ", shape_str(w.shape));
      m.N = w.shape[0];
      m.K = w.shape[1];
      m.codes_name = w.name;
      const SafetensorsEntry& sc = need(mod, "weight_scale", "FP8 scales");
      need_float(mod, sc);
      m.fp_scale_kind = a.strategy;
      if (a.strategy == "tensor") {
        if (!(sc.shape.empty() || sc.shape == Shape{1} || sc.shape == Shape{1, 1}))
          fail(in, ": weight_scale has shape ", shape_str(sc.shape), ", expected [1] (strategy tensor)");
      } else if (a.strategy == "channel") {
        if (!(sc.shape == Shape{m.N, 1} || sc.shape == Shape{m.N}))
          fail(in, ": weight_scale has shape ", shape_str(sc.shape), ", expected [", m.N, ", 1] (strategy channel)");
      } else if (a.strategy == "block") {
        if (a.block_structure != std::vector<int64_t>{128, 128})
          fail(in, ": block_structure ", a.block_structure.empty() ? std::string("(missing)") :
               str_cat("[", a.block_structure[0], ", ", a.block_structure[1], "]"),
               " is not supported (only [128, 128], which maps onto the engine's groups of 128)");
        need_shape(mod, sc, {(m.N + 127) / 128, (m.K + 127) / 128}, "strategy block [128, 128]");
      } else {
        fail(in, ": FP8 weight strategy \"", a.strategy, "\" is not supported (tensor, channel or block [128, 128])");
      }
      m.scale_name = sc.name;
      m.desc = str_cat("compressed-tensors float-quantized fp8 e4m3 per-", a.strategy);
      return m;
    }
    if (a.num_bits != 4) fail(in, ": float weights with num_bits ", a.num_bits, " are not supported (8 or 4)");
    const bool nv = a.group_size == 16;
    if (!nv && a.group_size != 32)
      fail(in, ": FP4 weights with group_size ", a.group_size, " are not supported (16: NVFP4, 32: MXFP4)");
    const std::string want_fmt = nv ? "nvfp4-pack-quantized" : "mxfp4-pack-quantized";
    if (fmt != want_fmt && fmt != "mixed-precision")
      fail(in, ": FP4 weights with group_size ", a.group_size, " need format ", want_fmt);
    if (nv && a.strategy != "tensor_group" && a.strategy != "group")
      fail(in, ": NVFP4 weight strategy \"", a.strategy, "\" is not supported (tensor_group)");
    if (!nv && a.strategy != "group") fail(in, ": MXFP4 weight strategy \"", a.strategy, "\" is not supported (group)");
    m.fp = nv ? WeightFormat::kNVFP4 : WeightFormat::kMXFP4;
    const SafetensorsEntry& wp = need(mod, "weight_packed", "packed E2M1 codes");
    if (wp.dtype != DType::kU8 || wp.shape.size() != 2)
      fail(in, ": weight_packed must be a 2-D U8 tensor, found ", dtype_name(wp.dtype), " ", shape_str(wp.shape));
    m.N = wp.shape[0];
    m.K = wp.shape[1] * 2;
    if (ckpt_.has(mod + ".weight_shape")) {  // optional; when present it must agree
      const SafetensorsEntry& ws = ckpt_.entry(mod + ".weight_shape");
      if (ws.dtype != DType::kI64 || ws.shape != Shape{2})
        fail(in, ": weight_shape must be I64 [2], found ", dtype_name(ws.dtype), " ", shape_str(ws.shape));
      const Tensor wst = ckpt_.tensor(ws.name);
      const int64_t N = elem<int64_t>(wst, 0), K = elem<int64_t>(wst, 1);
      if (N != m.N || K != m.K)
        fail(in, ": weight_packed has shape ", shape_str(wp.shape), ", expected [", N, ", ", K / 2, "] for weight_shape [",
             N, ", ", K, "] (two E2M1 codes per byte)");
    }
    const int64_t gsz = nv ? 16 : 32;
    if (m.K % gsz != 0) fail(in, ": K=", m.K, " is not a multiple of the group size ", gsz);
    const SafetensorsEntry& sc = need(mod, "weight_scale", nv ? "E4M3 scales per 16" : "E8M0 scales per 32");
    const DType sdt = nv ? DType::kF8_E4M3 : DType::kU8;
    if (sc.dtype != sdt && !(!nv && sc.dtype == DType::kF8_E8M0))
      fail(in, ": weight_scale has dtype ", dtype_name(sc.dtype), ", expected ", dtype_name(sdt));
    need_shape(mod, sc, {m.N, m.K / gsz}, nv ? "NVFP4: one scale per 16 inputs" : "MXFP4: one scale per 32 inputs");
    m.codes_name = wp.name;
    m.scale_name = sc.name;
    if (nv) {
      const SafetensorsEntry& gs = need(mod, "weight_global_scale", "NVFP4 global scale (a divisor)");
      if (gs.dtype != DType::kF32 || !(gs.shape == Shape{1} || gs.shape.empty()))
        fail(in, ": weight_global_scale must be F32 [1], found ", dtype_name(gs.dtype), " ", shape_str(gs.shape));
      const float g = elem<float>(ckpt_.tensor(gs.name), 0);
      if (!std::isfinite(g) || g <= 0.f) fail(in, ": weight_global_scale is ", g, ", expected a finite positive divisor");
      m.global_name = gs.name;
    } else {
      const Tensor st = ckpt_.tensor(sc.name);
      for (int64_t i = 0; i < st.numel(); ++i)
        if (elem<uint8_t>(st, i) == 0xFF)
          fail(in, ": weight_scale[", i / (m.K / 32), ", ", i % (m.K / 32), "] is 0xFF (E8M0 NaN)");
    }
    m.desc = str_cat("compressed-tensors ", fmt, nv ? " nvfp4 g16" : " mxfp4 g32");
    return m;
  }

  ModelConfig cfg_;
  SafetensorsCheckpoint ckpt_;
  QuantConfig qc_;
  std::map<std::string, Module> mods_;  // module name ("model.layers.0.mlp.up_proj") -> how it is stored
};

}  // namespace

std::unique_ptr<WeightSource> open_quant_checkpoint(const std::string& dir, const QuantConfig& qc) {
  return std::make_unique<QuantCheckpointSource>(dir, qc);
}

QuantTensor load_fp_native(const WeightSource& src, const std::string& hf_name) {
  const auto* q = dynamic_cast<const QuantCheckpointSource*>(&src);
  if (q == nullptr) fail(src.path(), ": \"", hf_name, "\" does not come from a quantized checkpoint");
  return q->fp_native(hf_name);
}

}  // namespace blockspec
