// See quantize.h.
#include "quantize/quantize.h"

#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <sstream>

#include "base/error.h"
#include "base/thread_pool.h"
#include "formats/gguf.h"
#include "formats/gguf_model.h"
#include "formats/hf_config.h"
#include "model/quant_checkpoint.h"
#include "formats/quant_config.h"
#include "formats/safetensors.h"
#include "kernels/kernel_table.h"
#include "model/hf_names.h"
#include "model/weight_overlay.h"
#include "quantize/calibration.h"
#include "quantize/drafter_calibration.h"
#include "quantize/gptq.h"
#include "quantize/hf_export.h"
#include "quantize/linalg.h"
#include "quantize/smooth.h"
#include "quantize/smooth_attention.h"

namespace blockspec {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

bool matches_ignore(const std::vector<std::string>& patterns, const std::string& module) {
  for (const std::string& p : patterns) {
    if (p.rfind("re:", 0) == 0) {
      std::smatch m;
      try {
        if (std::regex_search(module, m, std::regex(p.substr(3)), std::regex_constants::match_continuous)) return true;
      } catch (const std::regex_error& e) {
        fail("--ignore \"", p, "\": not a valid regex (", e.what(), ")");
      }
    } else if (p == module || fnmatch(p.c_str(), module.c_str(), 0) == 0) {
      return true;
    }
  }
  return false;
}

namespace {

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}
std::string last_part(const std::string& m) { return m.substr(m.rfind('.') + 1); }

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, ": cannot open");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) fail(path, ": cannot create");
  f << text;
  if (!f) fail(path, ": write error");
}

std::vector<float> to_f32(const Tensor& t, const std::string& what) {
  std::vector<float> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype() == DType::kF32) v[i] = t.ptr<float>()[i];
    else if (t.dtype() == DType::kBF16) v[i] = bf16_to_f32(t.ptr<uint16_t>()[i]);
    else if (t.dtype() == DType::kF16) v[i] = f16_to_f32(t.ptr<uint16_t>()[i]);
    else fail(what, ": dtype ", dtype_name(t.dtype()), " cannot be quantized (expected F32, BF16 or F16)");
  }
  return v;
}

// The model being quantized: tensors by HF name, raw (to copy) and as f32 (to quantize).
struct Input {
  bool gguf = false;
  bool is_draft = false;
  bool hybrid = false;  // a Gated-DeltaNet hybrid (qwen3_5)
  std::unique_ptr<SafetensorsCheckpoint> ckpt;  // HF
  std::unique_ptr<WeightSource> src;            // GGUF (always), HF target (for calibration)
  std::vector<std::string> names;
  const TensorOverrides* over = nullptr;  // tensors replaced (QuantizeOptions::overrides, SmoothQuant)

  Tensor raw(const std::string& n) const { return gguf ? src->load(n) : ckpt->tensor(n); }
  Shape shape(const std::string& n) const { return gguf ? src->shape(n) : ckpt->entry(n).shape; }
  DType dtype(const std::string& n) const { return gguf ? raw(n).dtype() : ckpt->entry(n).dtype; }
  const std::vector<float>* replaced(const std::string& n) const {
    const auto it = over ? over->find(n) : TensorOverrides::const_iterator();
    return over && it != over->end() ? &it->second : nullptr;
  }
  // The values to quantize: the replacement, else the tensor as stored.
  std::vector<float> values(const std::string& n) const {
    const std::vector<float>* r = replaced(n);
    return r ? *r : to_f32(raw(n), n);
  }
  // What a tensor not quantized is written as: its replacement in the stored dtype, else the stored bytes.
  Tensor stored(const std::string& n) const {
    const std::vector<float>* r = replaced(n);
    if (!r) return raw(n);
    Tensor t(dtype(n), shape(n));
    for (size_t i = 0; i < r->size(); ++i) {
      if (t.dtype() == DType::kF32) t.mutable_ptr<float>()[i] = (*r)[i];
      else if (t.dtype() == DType::kBF16) t.mutable_ptr<uint16_t>()[i] = f32_to_bf16((*r)[i]);
      else if (t.dtype() == DType::kF16) t.mutable_ptr<uint16_t>()[i] = f32_to_f16((*r)[i]);
      else fail(n, ": stored as ", dtype_name(t.dtype()), "; an override can replace F32, BF16 or F16 tensors only");
    }
    return t;
  }
};

Input open_input(const std::string& path) {
  Input in;
  const std::string g = gguf_path_of(path);
  if (!g.empty()) {
    in.gguf = true;
    in.src = open_weight_source(g);
    GgufFile f(g);
    for (const auto& t : f.tensors())
      if (auto hf = gguf_to_hf_name(t.name)) in.names.push_back(*hf);
    std::sort(in.names.begin(), in.names.end());
    return in;
  }
  if (!fs::is_directory(path)) fail(path, ": not an HF model directory or a GGUF file");
  if (!fs::exists(path + "/config.json")) fail(path, ": no config.json (expected an HF model directory)");
  if (auto qc = load_quant_config(path))
    fail(path, ": already quantized (", qc->what, "); quantize a dense checkpoint");
  in.ckpt = std::make_unique<SafetensorsCheckpoint>(path);
  in.names = in.ckpt->names();
  const ojson cfg = ojson::parse(read_file(path + "/config.json"));
  if (cfg.contains("architectures") && cfg["architectures"].is_array() && !cfg["architectures"].empty() &&
      cfg["architectures"][0].is_string())
    in.is_draft = draft_method_of_architecture(cfg["architectures"][0].get<std::string>()) != nullptr;
  in.hybrid = load_hf_config(path).is_hybrid();
  return in;
}

bool tty() { return isatty(2) == 1; }

void progress(bool on, const char* what, int64_t done, int64_t total) {
  if (!on) return;
  const int w = 40, f = static_cast<int>(w * std::min(done, total) / std::max<int64_t>(total, 1));
  std::fprintf(stderr, "\r%s [%.*s%*s] %lld/%lld", what, f, "########################################", w - f, "",
               static_cast<long long>(done), static_cast<long long>(total));
  if (done >= total) std::fprintf(stderr, "\n");
}

// ||(W - Wq) X^T|| / ||W X^T|| from H = X^T X: sqrt(sum_n d_n^T H d_n / sum_n w_n^T H w_n) over (up to) 32
// evenly spaced rows (an estimate: the full sum costs N K^2); without H, over 16 random N(0, 1) inputs.
double relative_error(const float* w, const std::vector<float>& wq, int64_t N, int64_t K, const std::vector<double>* H,
                      ThreadPool& pool) {
  const int64_t rows = std::min<int64_t>(N, H != nullptr ? 32 : 128), step = N / rows;
  std::vector<double> num(rows, 0.0), den(rows, 0.0);
  if (H != nullptr) {
    pool.parallel_for(rows, [&](int64_t a, int64_t b) {
      std::vector<double> d(K), x(K), hd(K), hx(K);
      for (int64_t r = a; r < b; ++r) {
        const int64_t n = r * step;
        for (int64_t k = 0; k < K; ++k) x[k] = w[n * K + k], d[k] = x[k] - wq[n * K + k];
        std::fill(hd.begin(), hd.end(), 0.0);
        std::fill(hx.begin(), hx.end(), 0.0);
        for (int64_t i = 0; i < K; ++i) {  // H d and H x as axpy's over the rows of H (symmetric)
          axpy_sub_f64(hd.data(), H->data() + i * K, -d[i], K);
          axpy_sub_f64(hx.data(), H->data() + i * K, -x[i], K);
        }
        double sn = 0, sd = 0;
        for (int64_t i = 0; i < K; ++i) sn += d[i] * hd[i], sd += x[i] * hx[i];
        num[r] = sn, den[r] = sd;
      }
    });
  } else {
    std::mt19937 rng(1234);
    std::normal_distribution<float> nd;
    std::vector<float> xs(16 * K);
    for (float& v : xs) v = nd(rng);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t n = r * step;
      for (int64_t s = 0; s < 16; ++s) {
        double a = 0, b = 0;
        for (int64_t k = 0; k < K; ++k) a += double(w[n * K + k]) * xs[s * K + k], b += double(wq[n * K + k]) * xs[s * K + k];
        num[r] += (a - b) * (a - b), den[r] += a * a;
      }
    }
  }
  double sn = 0, sd = 0;
  for (int64_t r = 0; r < rows; ++r) sn += num[r], sd += den[r];
  return sd > 0 ? std::sqrt(std::max(0.0, sn) / sd) : 0.0;
}

}  // namespace

QuantSpec quant_spec_for(const QuantizeOptions& o, QScheme sch, DType wdt) {
  QuantSpec s;
  s.scheme = sch;
  s.weight_dtype = wdt;
  s.scale_dtype = o.format == QFormat::kGptq ? DType::kF16
                  : (wdt == DType::kBF16 || wdt == DType::kF16 || wdt == DType::kF32) ? wdt
                                                                                        : DType::kF16;
  switch (sch) {
    case QScheme::kW4A16: s.bits = 4, s.group = o.group, s.sym = !o.asym; break;
    case QScheme::kW8A16: s.bits = 8, s.group = o.group, s.sym = !o.asym; break;
    case QScheme::kW8A8: s.bits = 8, s.group = o.group; break;
    case QScheme::kFP8: s.bits = 8, s.is_float = true, s.group = o.fp8_strategy == "tensor" ? 0 : -1; break;
    case QScheme::kNVFP4: s.bits = 4, s.is_float = true, s.group = 16; break;
    case QScheme::kMXFP4: s.bits = 4, s.is_float = true, s.group = 32; break;
  }
  return s;
}

QuantizeReport quantize_model(const QuantizeOptions& o) {
  const auto t_start = std::chrono::steady_clock::now();
  QuantizeReport rep;
  const bool is_float = o.scheme == QScheme::kFP8 || o.scheme == QScheme::kNVFP4 || o.scheme == QScheme::kMXFP4;
  if (o.format == QFormat::kGptq && (is_float || o.scheme == QScheme::kW8A8))
    fail("--format gptq: only the weight-only integer schemes w4a16 and w8a16 (", qscheme_name(o.scheme),
         " needs --format compressed-tensors)");
  if (o.asym && (is_float || o.scheme == QScheme::kW8A8))
    fail("--asym: only for w4a16 and w8a16 (", qscheme_name(o.scheme), " is symmetric)");
  if (o.group != 128 && o.group != -1) fail("--group ", o.group, ": expected 128 or -1 (per channel)");
  if (o.fp8_strategy != "tensor" && o.fp8_strategy != "channel")
    fail("--fp8-strategy \"", o.fp8_strategy, "\": expected tensor or channel");
  if (o.fc_bits != 0 && o.fc_bits != 4 && o.fc_bits != 8 && o.fc_bits != 16) fail("--fc-bits ", o.fc_bits, ": expected 4, 8 or 16");
  if (o.smooth != 0 && !(o.smooth > 0 && o.smooth <= 1))
    fail("--smooth ", o.smooth, ": expected ALPHA in (0, 1] (typical 0.5; 0 = off)");
  if (o.smooth_attention != 0 && !(o.smooth_attention > 0 && o.smooth_attention <= 1))
    fail("--smooth-attention ", o.smooth_attention, ": expected ALPHA in (0, 1] (typical 0.5; 0 = off)");

  Input in = open_input(o.in);
  // Drafter calibration needs the target: checked before any work, so a bad command leaves no output.
  if (!in.is_draft && !o.target.empty())
    fail("--target ", o.target, ": only for a DFlash / DFlash2 drafter input (", o.in, " is not a drafter)");
  if (in.is_draft && o.gptq && o.target.empty())
    fail("--method gptq on drafter ", o.in, " needs --target TARGET (the model it drafts for: calibration runs "
         "the target over --calib and the drafter on its hidden states)");
  if (in.is_draft && !o.target.empty()) check_drafter_against_target(o.in, o.target);
  if (o.smooth != 0 && in.is_draft)
    fail("--smooth on drafter ", o.in, ": SmoothQuant is for target models (Qwen3 / Qwen2 / Llama)");
  if (o.smooth != 0 && in.hybrid)
    fail("--smooth on ", o.in, ": hybrid Qwen3.5 (Gated DeltaNet) targets are not supported yet (their (1 + w) norms)");
  if (o.smooth != 0 && o.calib_ids.empty())
    fail("--smooth on ", o.in, ": needs calibration text (--calib FILE), the activation ranges come from it");
  if (o.smooth_attention != 0 && (in.is_draft || in.hybrid))
    fail("--smooth-attention on ", o.in, ": SmoothAttention is for dense target models (Qwen3 / Qwen2 / Llama)");
  if (o.smooth_attention != 0 && o.calib_ids.empty())
    fail("--smooth-attention on ", o.in, ": needs calibration text (--calib FILE), the key ranges come from it");
  if (in.is_draft && !o.overrides.empty() && !o.calib_ids.empty() && !o.target.empty())
    fail("overrides on drafter ", o.in, ": not supported with calibration (the drafter's calibration reads its own "
         "tensors); quantize it with RTN");
  check_overrides(o.overrides, o.in, [&](const std::string& n) -> std::optional<Shape> {
    if (!std::binary_search(in.names.begin(), in.names.end(), n)) return std::nullopt;
    return in.shape(n);
  });
  in.over = &o.overrides;
  if (in.hybrid && o.kv_fp8)
    fail("--kv-cache-scheme on ", o.in, ": FP8 KV cache scales for hybrid (Gated DeltaNet) models are not "
         "supported yet");
  ThreadPool pool(o.n_threads);
  const KernelTable kt = select_kernels("");
  const OpContext ctx{&kt, &pool};
  const bool bar = o.progress && tty();
  const bool calibrate = !o.calib_ids.empty() && (!in.is_draft || !o.target.empty());
  if (o.kv_fp8 && in.is_draft) fail(o.in, ": --kv-cache-scheme is for a target model (a drafter has no KV cache of its own to serve)");
  if (o.kv_fp8 && o.format == QFormat::kGptq)
    fail("--kv-cache-scheme fp8 needs --format compressed-tensors (GPTQ checkpoints have no kv_cache_scheme)");
  if (o.kv_fp8 && o.calib_ids.empty()) fail("--kv-cache-scheme fp8 needs calibration text (--calib FILE)");
  if (o.gptq && o.calib_ids.empty()) fail("--method gptq needs calibration text (--calib FILE)");
  if (calibrate && o.calib_window <= 0) fail("--calib-window ", o.calib_window, ": expected > 0");
  std::vector<std::vector<int32_t>> windows;
  for (size_t i = 0; calibrate && i < o.calib_ids.size(); i += o.calib_window)
    windows.emplace_back(o.calib_ids.begin() + i,
                         o.calib_ids.begin() + std::min(o.calib_ids.size(), i + static_cast<size_t>(o.calib_window)));
  if (calibrate) rep.calib_tokens = static_cast<int64_t>(o.calib_ids.size());

  // SmoothQuant (quantize/smooth.h) on IN as the overrides leave it; its tensors join the overrides.
  TensorOverrides smoothed;
  if (o.smooth != 0) {
    if (!in.src) in.src = open_weight_source(o.in);
    const auto t0 = std::chrono::steady_clock::now();
    smoothed = smooth_model(OverlaySource(*in.src, o.overrides), ctx, windows, o.smooth, o.smooth_mappings);
    const size_t n_smoothed = smoothed.size();
    for (const auto& [n, v] : o.overrides) smoothed.emplace(n, v);  // the given overrides SmoothQuant left alone
    in.over = &smoothed;
    const std::string norm = hf::weight(hf::target_layer(0), hf::kAttnNorm);
    rep.notes.push_back(str_cat(
        "smoothquant alpha ", o.smooth, ": ", n_smoothed, " tensors rescaled (input_layernorm -> q/k/v_proj, "
        "post_attention_layernorm -> gate/up_proj",
        o.smooth_mappings == SmoothMappings::kAll ? ", v_proj -> o_proj, up_proj -> down_proj" : "",
        "; activation ranges over ", o.calib_ids.size(), " tokens, ",
        std::round(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 10) / 10, " s)",
        in.dtype(norm) == DType::kF32 ? ""
            : str_cat("; the norms are written as ", dtype_name(in.dtype(norm)), ", whose rounding of w / s changes "
                      "the function slightly")));
  }
  // SmoothAttention (quantize/smooth_attention.h) on the model as SmoothQuant left it; its q/k tensors win.
  TensorOverrides smoothed_attn;
  if (o.smooth_attention != 0) {
    if (!in.src) in.src = open_weight_source(o.in);
    const auto t0 = std::chrono::steady_clock::now();
    smoothed_attn = smooth_attention(OverlaySource(*in.src, *in.over), ctx, windows, o.smooth_attention);
    const size_t n_scaled = smoothed_attn.size();
    for (const auto& [n, v] : *in.over) smoothed_attn.emplace(n, v);
    in.over = &smoothed_attn;
    rep.notes.push_back(str_cat(
        "smoothattention alpha ", o.smooth_attention, ": ", n_scaled, " q/k tensors rescaled (key ranges over ",
        o.calib_ids.size(), " tokens, ",
        std::round(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 10) / 10, " s)"));
  }
  for (const auto& [n, v] : *in.over) rep.replaced.push_back(n);

  auto spec_for = [&](QScheme sch, DType wdt) { return quant_spec_for(o, sch, wdt); };
  // The drafter's fc: the scheme itself, or another integer width.
  auto fc_scheme = [&]() -> QScheme {
    const int bits = (o.scheme == QScheme::kW4A16 || o.scheme == QScheme::kNVFP4 || o.scheme == QScheme::kMXFP4) ? 4 : 8;
    if (o.fc_bits == 0 || o.fc_bits == bits) return o.scheme;
    if (is_float) fail("--fc-bits ", o.fc_bits, " with --scheme ", qscheme_name(o.scheme), ": only 16 (dense) or ", bits);
    if (o.format == QFormat::kGptq)
      fail("--fc-bits ", o.fc_bits, " with --format gptq: GPTQ checkpoints have one bit width (use compressed-tensors)");
    return o.fc_bits == 4 ? QScheme::kW4A16 : (o.scheme == QScheme::kW8A8 ? QScheme::kW8A8 : QScheme::kW8A16);
  };

  // ---- which modules ----
  std::vector<std::string> quant_mods;           // in name order
  std::map<std::string, QuantSpec> specs;
  std::vector<std::string> partial;  // K not a multiple of the group size
  for (const std::string& n : in.names) {
    if (!ends_with(n, ".weight") || in.shape(n).size() != 2) continue;
    const std::string m = n.substr(0, n.size() - 7);
    if (!is_linear_module(m)) continue;  // embeddings, norms, codebooks
    const std::string l = last_part(m);
    bool q = ends_with(l, "_proj") || l == "in_proj_qkv" || l == "in_proj_z" ||
             (l == "fc" && in.is_draft && o.fc_bits != 16) || (l == "lm_head" && o.quantize_lm_head);
    if (q && matches_ignore(o.ignore, m)) q = false;
    // Hybrid Qwen3.5 (hybrid.md §2.6, docs/quantize.md): the tiny per-head gate projections in_proj_a / in_proj_b
    // stay dense (as the official FP8 release and vLLM's Qwen3.5 loader have them), and nothing of the vision
    // tower or the MTP block is quantized (a text engine never runs them; they are copied as they are).
    if (q && in.hybrid && (l == "in_proj_a" || l == "in_proj_b" || m.rfind("model.visual.", 0) == 0 || m.rfind("mtp.", 0) == 0))
      q = false;
    if (!q) {
      rep.dense_linears.push_back(m);
      continue;
    }
    const DType wdt = in.dtype(n);
    specs[m] = spec_for(l == "fc" ? fc_scheme() : o.scheme, wdt);
    const int64_t K = in.shape(n)[1], G = specs[m].group;
    if (G > 0 && K % G != 0) partial.push_back(m);
    quant_mods.push_back(m);
  }
  if (!partial.empty())
    rep.notes.push_back(str_cat(partial.size(), " module(s) (", partial[0], partial.size() > 1 ? ", ..." : "",
                                ") have K not a multiple of the group size: the last group is partial; blockspec loads "
                                "it, compressed-tensors / vLLM do not (use --group -1 or --ignore for checkpoints "
                                "meant for them)"));
  // Tied embeddings: HF still builds an lm_head Linear, which the class target "Linear" would select.
  if (!in.is_draft && !o.quantize_lm_head &&
      std::find(rep.dense_linears.begin(), rep.dense_linears.end(), "lm_head") == rep.dense_linears.end())
    rep.dense_linears.push_back("lm_head");
  if (quant_mods.empty()) fail(o.in, ": no module to quantize (every linear is ignored or none is a *_proj)");

  // ---- quantize ----
  std::map<std::string, QuantWeight> done;
  int64_t n_done = 0;
  // D (W8A8 with act_target): GPTQ rounds the asymmetric target W + W D H^-1 (gptq.h) on the grid of w's own
  // scales; the report's error stays that of w.
  auto quantize_one = [&](const std::string& m, const float* w, const std::vector<double>* H, int64_t rows,
                          const std::vector<double>* D = nullptr) {
    const Shape s = in.shape(m + ".weight");
    QuantWeight qw = make_params(specs.at(m), w, s[0], s[1]);
    std::string how = specs.at(m).describe();
    if (const auto f = o.fixed.find(m); f != o.fixed.end()) {  // codes decided elsewhere (ptqr), written as given
      const QuantWeight& fq = f->second;
      if (fq.N != s[0] || fq.K != s[1] || fq.n_groups != qw.n_groups || fq.group_len != qw.group_len ||
          fq.spec.bits != qw.spec.bits || fq.spec.sym != qw.spec.sym || fq.spec.scale_dtype != qw.spec.scale_dtype ||
          fq.q.size() != qw.q.size() || fq.scale.size() != qw.scale.size())
        fail("quantize: the fixed codes of ", m, " (", fq.spec.describe(), ", ", fq.N, " x ", fq.K,
             ") do not match the module (", qw.spec.describe(), ", ", s[0], " x ", s[1], ")");
      qw = fq;
      how += " fixed (ptqr)";
    } else if (H != nullptr && o.gptq) {
      GptqOptions g;
      g.percdamp = o.damp;
      g.act_order = o.act_order;
      std::vector<float> target;
      if (D != nullptr) target = asymmetric_target(w, s[0], s[1], *H, *D, o.damp, ctx);
      const float* tw = target.empty() ? w : target.data();
      if (gptq_quantize(qw, tw, *H, g, ctx))
        how += str_cat(o.act_order ? " gptq act-order" : " gptq", target.empty() ? "" : " asym-target");
      else how += " rtn (GPTQ: H not positive definite)";
    } else {
      quantize_rtn(qw, w);
      how += " rtn";
    }
    const std::vector<float> deq = dequantize_all(qw);
    rep.layers.push_back({m, how, relative_error(w, deq, s[0], s[1], H, pool), H != nullptr, H != nullptr ? rows : 0});
    done.emplace(m, std::move(qw));
    progress(bar, "quantize", ++n_done, static_cast<int64_t>(quant_mods.size()));
    return deq;
  };

  if (calibrate && in.is_draft) {
    const auto t0 = std::chrono::steady_clock::now();
    DrafterCalibOptions dco;
    dco.anchor_stride = o.anchor_stride;
    dco.n_threads = o.n_threads;
    dco.progress = o.progress && !bar;
    const DrafterCalibration dc =
        calibrate_drafter(o.in, o.target, windows, [&](const std::string& m) { return specs.count(m) > 0; }, dco);
    rep.calib_blocks = dc.n_blocks;
    rep.calib_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const std::string& m : quant_mods) {
      auto it = dc.hessians.find(m);
      if (it == dc.hessians.end()) continue;  // not run by the drafter forward: RTN below
      const std::vector<float> w = in.values(m + ".weight");
      quantize_one(m, w.data(), it->second.get(), dc.rows.at(m));
    }
  } else if (calibrate && !o.gptq && !o.kv_fp8 && o.smooth != 0) {
    // RTN after SmoothQuant needs no second pass: the layer report's Hessians alone would cost a full f32
    // forward with X^T X per linear (about 20 minutes on a 1.5B model on 2 cores).
    rep.notes.push_back("rtn with --smooth: the layer errors are on random inputs (no Hessian pass)");
  } else if (calibrate) {
    if (!in.src) in.src = open_weight_source(o.in);
    const OverlaySource src(*in.src, *in.over);  // the model with its replaced tensors
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t n_layers = src.config().n_layers;
    KvAbsmax kv;
    const bool act_cross = o.gptq && o.act_target && o.scheme == QScheme::kW8A8;
    calibrate_layers(src, ctx, windows, [&](int64_t li, const LayerHessians& hs, const LayerHessians& cross) {
      // Calibration takes minutes on a real model: one line per layer when stderr is not a progress bar.
      if (o.progress && !bar)
        std::fprintf(stderr, "calibrate: layer %lld/%lld at %.0f s\n", static_cast<long long>(li + 1),
                     static_cast<long long>(n_layers),
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      std::map<std::string, std::vector<float>> repl;
      for (const auto& [m, H] : hs) {
        if (!specs.count(m)) continue;  // ignored: stays dense
        const Shape s = in.shape(m + ".weight");
        std::vector<float> w(s[0] * s[1]);
        src.load_rows(m + ".weight", 0, s[0], w.data());
        const auto d = cross.find(m);
        repl[m] = quantize_one(m, w.data(), H.get(), rep.calib_tokens, d == cross.end() ? nullptr : d->second.get());
      }
      return repl;
    }, [&](const std::string& m) { return specs.count(m) > 0; }, o.kv_fp8 ? &kv : nullptr,
    o.scheme == QScheme::kW8A8, act_cross);
    // FP8 KV scales as llm-compressor calibrates them (static, per tensor): absmax / 448, the E4M3 maximum,
    // so the largest calibration value lands on the largest code; an all-zero layer keeps 1.0.
    for (size_t i = 0; o.kv_fp8 && i < kv.k.size(); ++i) {
      rep.kv_k_scale.push_back(kv.k[i] > 0.f ? kv.k[i] / 448.f : 1.f);
      rep.kv_v_scale.push_back(kv.v[i] > 0.f ? kv.v[i] / 448.f : 1.f);
    }
    rep.calib_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  for (const std::string& m : quant_mods) {
    if (done.count(m)) continue;
    const std::vector<float> w = in.values(m + ".weight");
    quantize_one(m, w.data(), nullptr, 0);
  }
  std::sort(rep.layers.begin(), rep.layers.end(), [](const LayerReport& a, const LayerReport& b) { return a.module < b.module; });

  // ---- write ----
  fs::create_directories(o.out);
  NamedTensors tensors;
  for (const std::string& n : in.names) {
    const std::string m = ends_with(n, ".weight") ? n.substr(0, n.size() - 7) : "";
    if (!m.empty() && done.count(m)) continue;
    tensors.emplace_back(n, in.stored(n));
    ++rep.n_copied;
  }
  for (const std::string& m : quant_mods) {
    if (o.format == QFormat::kGptq) append_gptq_tensors(m, done.at(m), tensors);
    else append_ct_tensors(m, done.at(m), tensors);
  }
  for (size_t i = 0; i < rep.kv_k_scale.size(); ++i)
    for (const bool v : {false, true}) {
      Tensor t(DType::kF32, {1});
      t.mutable_ptr<float>()[0] = (v ? rep.kv_v_scale : rep.kv_k_scale)[i];
      tensors.emplace_back("model.layers." + std::to_string(i) + ".self_attn." + (v ? "v_scale" : "k_scale"), t);
    }
  const std::string st = o.out + "/model.safetensors";
  write_safetensors(st, tensors, {{"format", "pt"}});
  rep.out_bytes = fs::file_size(st);

  ojson cfg = in.gguf ? hf_config_json(in.src->config(), in.src->has("lm_head.weight"))
                      : ojson::parse(read_file(o.in + "/config.json"));
  ojson qc;
  if (o.format == QFormat::kGptq) {
    qc = gptq_quant_config(specs.at(quant_mods[0]), o.act_order, o.damp);
    write_file(o.out + "/quantize_config.json", qc.dump(2) + "\n");
  } else {
    std::vector<ConfigGroup> groups;
    for (const std::string& m : quant_mods) {
      const QuantSpec& s = specs.at(m);
      auto it = std::find_if(groups.begin(), groups.end(), [&](const ConfigGroup& g) {
        return g.spec.describe() == s.describe() && g.spec.scale_dtype == s.scale_dtype;
      });
      if (it == groups.end()) groups.push_back({s, {}}), it = groups.end() - 1;
      it->targets.push_back(m);
    }
    // One group: the class target "Linear" with every dense linear in "ignore"; several (a drafter's fc at another
    // width): the main group keeps "Linear", the others name their modules exactly (exact beats class).
    size_t main = 0;
    for (size_t i = 0; i < groups.size(); ++i)
      if (std::any_of(groups[i].targets.begin(), groups[i].targets.end(),
                      [](const std::string& m) { return last_part(m) != "fc"; }))
        main = i;
    groups[main].targets = {"Linear"};
    if (main != 0) std::swap(groups[0], groups[main]);
    qc = ct_quant_config(groups, rep.dense_linears, o.act_order && o.gptq ? "static" : "");
  }
  if (!rep.kv_k_scale.empty())
    qc["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"}, {"dynamic", false},
                             {"symmetric", true}};
  cfg["quantization_config"] = qc;
  write_file(o.out + "/config.json", cfg.dump(2) + "\n");

  // Tokenizer and the other small files.
  if (in.gguf) {
    for (const std::string& note : export_gguf_tokenizer(gguf_path_of(o.in), o.out)) rep.notes.push_back(note);
  } else {
    for (const auto& e : fs::directory_iterator(o.in)) {
      const std::string name = e.path().filename().string();
      if (!e.is_regular_file() || ends_with(name, ".safetensors") || name == "model.safetensors.index.json" ||
          name == "config.json" || name == "quantize_config.json")
        continue;
      fs::copy_file(e.path(), o.out + "/" + name, fs::copy_options::overwrite_existing);
    }
  }
  rep.total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  return rep;
}

}  // namespace blockspec
