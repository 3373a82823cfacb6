// See writer.h; layouts from ../shared/docs/quant_formats.md §2.1-2.3 and §3.1-3.6.
#include "quantize/writer.h"

#include <cstring>

#include "base/error.h"

namespace blockspec {

namespace {

using json = nlohmann::ordered_json;

// Scale values (already rounded to `dt`) as a tensor of that dtype.
Tensor scale_tensor(const std::vector<float>& v, DType dt, Shape shape) {
  Tensor t(dt, std::move(shape));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == DType::kF32) t.mutable_ptr<float>()[i] = v[i];
    else if (dt == DType::kBF16) t.mutable_ptr<uint16_t>()[i] = f32_to_bf16(v[i]);
    else if (dt == DType::kF16) t.mutable_ptr<uint16_t>()[i] = f32_to_f16(v[i]);
    else BS_ASSERT(false, "scale dtype ", dtype_name(dt));
  }
  return t;
}

// Unsigned b-bit fields packed LSB first: value i goes to word i / (32 / b), bits b * (i % (32 / b)).
void pack_fields(const std::vector<uint32_t>& vals, int bits, uint32_t* words) {
  const int pf = 32 / bits;
  for (size_t i = 0; i < vals.size(); ++i) words[i / pf] |= vals[i] << (bits * (i % pf));
}

Tensor fp4_packed(const QuantWeight& qw) {
  Tensor t(DType::kU8, {qw.N, qw.K / 2});
  uint8_t* p = t.mutable_ptr<uint8_t>();
  for (int64_t n = 0; n < qw.N; ++n)
    for (int64_t i = 0; i < qw.K / 2; ++i)
      p[n * (qw.K / 2) + i] = static_cast<uint8_t>((qw.q[n * qw.K + 2 * i] & 15) | ((qw.q[n * qw.K + 2 * i + 1] & 15) << 4));
  return t;
}

}  // namespace

std::string ct_format_of(const QuantSpec& s) {
  switch (s.scheme) {
    case QScheme::kW8A8: return "int-quantized";
    case QScheme::kFP8: return "float-quantized";
    case QScheme::kNVFP4: return "nvfp4-pack-quantized";
    case QScheme::kMXFP4: return "mxfp4-pack-quantized";
    default: return "pack-quantized";
  }
}

void append_ct_tensors(const std::string& m, const QuantWeight& qw, NamedTensors& out) {
  const QuantSpec& s = qw.spec;
  const int64_t N = qw.N, K = qw.K, G = qw.n_groups;
  switch (s.scheme) {
    case QScheme::kNVFP4:
    case QScheme::kMXFP4: {
      if (K % 2 != 0) fail(m, ": K=", K, " is odd; FP4 packs two inputs per byte");
      out.emplace_back(m + ".weight_packed", fp4_packed(qw));
      Tensor sc(s.scheme == QScheme::kNVFP4 ? DType::kF8_E4M3 : DType::kU8, {N, G});
      std::memcpy(sc.mutable_ptr<uint8_t>(), qw.scale_code.data(), N * G);
      out.emplace_back(m + ".weight_scale", sc);
      if (s.scheme == QScheme::kNVFP4) {
        Tensor g(DType::kF32, {1});
        g.mutable_ptr<float>()[0] = qw.global;
        out.emplace_back(m + ".weight_global_scale", g);
      }
      return;
    }
    case QScheme::kFP8: {
      Tensor w(DType::kF8_E4M3, {N, K});
      std::memcpy(w.mutable_ptr<uint8_t>(), qw.q.data(), N * K);
      out.emplace_back(m + ".weight", w);
      out.emplace_back(m + ".weight_scale", scale_tensor(qw.scale, s.scale_dtype, s.group == 0 ? Shape{1} : Shape{N, 1}));
      return;
    }
    case QScheme::kW8A8: {
      Tensor w(DType::kI8, {N, K});
      std::memcpy(w.mutable_ptr<int8_t>(), qw.q.data(), N * K);
      out.emplace_back(m + ".weight", w);
      out.emplace_back(m + ".weight_scale", scale_tensor(qw.scale, s.scale_dtype, {N, G}));
      return;
    }
    default: break;
  }
  const int b = s.bits, off = 1 << (b - 1);
  const int64_t W = (K * b + 31) / 32;
  Tensor wp(DType::kI32, {N, W});
  std::memset(wp.mutable_ptr<int32_t>(), 0, wp.nbytes());
  std::vector<uint32_t> row(K);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < K; ++k) row[k] = static_cast<uint32_t>(qw.q[n * K + k] + off);
    pack_fields(row, b, reinterpret_cast<uint32_t*>(wp.mutable_ptr<int32_t>()) + n * W);
  }
  out.emplace_back(m + ".weight_packed", wp);
  out.emplace_back(m + ".weight_scale", scale_tensor(qw.scale, s.scale_dtype, {N, G}));
  Tensor ws(DType::kI64, {2});
  ws.mutable_ptr<int64_t>()[0] = N;
  ws.mutable_ptr<int64_t>()[1] = K;
  out.emplace_back(m + ".weight_shape", ws);
  if (!s.sym) {  // signed zero points + 2^(b-1), packed along N (dim 0): [ceil(N*b/32), G]
    const int64_t NW = (N * b + 31) / 32;
    Tensor zp(DType::kI32, {NW, G});
    std::memset(zp.mutable_ptr<int32_t>(), 0, zp.nbytes());
    std::vector<uint32_t> col(N);
    std::vector<uint32_t> words(NW);
    for (int64_t g = 0; g < G; ++g) {
      for (int64_t n = 0; n < N; ++n) col[n] = static_cast<uint32_t>(qw.zero[n * G + g] + off);
      std::fill(words.begin(), words.end(), 0u);
      pack_fields(col, b, words.data());
      for (int64_t w = 0; w < NW; ++w) reinterpret_cast<uint32_t*>(zp.mutable_ptr<int32_t>())[w * G + g] = words[w];
    }
    out.emplace_back(m + ".weight_zero_point", zp);
  }
}

void append_gptq_tensors(const std::string& m, const QuantWeight& qw, NamedTensors& out) {
  const QuantSpec& s = qw.spec;
  if (s.is_float || s.scheme == QScheme::kW8A8) fail("--format gptq: scheme ", qscheme_name(s.scheme), " is not a GPTQ scheme");
  const int b = s.bits, pf = 32 / b, off = 1 << (b - 1);
  const int64_t N = qw.N, K = qw.K, G = qw.n_groups;
  if (K % pf != 0 || N % pf != 0)
    fail(m, ": GPTQ ", b, "-bit packing needs K and N multiples of ", pf, " (K=", K, ", N=", N, "); use --format compressed-tensors");
  Tensor qweight(DType::kI32, {K / pf, N});
  uint32_t* qwp = reinterpret_cast<uint32_t*>(qweight.mutable_ptr<int32_t>());
  std::memset(qwp, 0, qweight.nbytes());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      qwp[(k / pf) * N + n] |= static_cast<uint32_t>(qw.q[n * K + k] + off) << (b * (k % pf));
  Tensor qzeros(DType::kI32, {G, N / pf});
  uint32_t* qzp = reinterpret_cast<uint32_t*>(qzeros.mutable_ptr<int32_t>());
  std::memset(qzp, 0, qzeros.nbytes());
  // v1 (sym): stored z - 1 = 2^(b-1) - 1 in every field (0x77777777 / 0x7F7F7F7F); v2 (asym): z = zp + 2^(b-1).
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < N; ++n) {
      const uint32_t z = s.sym ? static_cast<uint32_t>(off - 1) : static_cast<uint32_t>(qw.zero[n * G + g] + off);
      qzp[g * (N / pf) + n / pf] |= z << (b * (n % pf));
    }
  std::vector<float> st(G * N);  // scales [ng, N]
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) st[g * N + n] = qw.scale[n * G + g];
  Tensor gidx(DType::kI32, {K});
  for (int64_t k = 0; k < K; ++k) gidx.mutable_ptr<int32_t>()[k] = static_cast<int32_t>(k / qw.group_len);
  out.emplace_back(m + ".qweight", qweight);
  out.emplace_back(m + ".qzeros", qzeros);
  out.emplace_back(m + ".scales", scale_tensor(st, DType::kF16, {G, N}));
  out.emplace_back(m + ".g_idx", gidx);
}

namespace {

// QuantizationArgs as compressed-tensors' model_dump writes them (sorted keys).
json weight_args(const QuantSpec& s, const std::string& actorder) {
  json a;
  const bool fp4 = s.scheme == QScheme::kNVFP4 || s.scheme == QScheme::kMXFP4;
  const bool fp8 = s.scheme == QScheme::kFP8;
  a["actorder"] = actorder.empty() || s.is_float ? json(nullptr) : json(actorder);
  a["block_structure"] = nullptr;
  a["dynamic"] = false;
  a["group_size"] = fp4 ? json(s.group) : (fp8 || s.group == -1) ? json(nullptr) : json(s.group);
  a["num_bits"] = s.bits;
  a["observer"] = "minmax";
  a["observer_kwargs"] = json::object();
  a["scale_dtype"] = s.scheme == QScheme::kNVFP4   ? json("torch.float8_e4m3fn")
                     : s.scheme == QScheme::kMXFP4 ? json("torch.uint8")
                                                   : json(nullptr);
  a["strategy"] = s.scheme == QScheme::kNVFP4 ? "tensor_group"
                  : fp8                       ? (s.group == 0 ? "tensor" : "channel")
                  : s.group == -1             ? "channel"
                                              : "group";
  a["symmetric"] = s.sym;
  a["type"] = s.is_float ? "float" : "int";
  a["zp_dtype"] = s.sym ? json(nullptr) : json("torch.int8");
  return a;
}

json input_args_w8a8() {
  json a;
  a["actorder"] = nullptr;
  a["block_structure"] = nullptr;
  a["dynamic"] = true;
  a["group_size"] = nullptr;
  a["num_bits"] = 8;
  a["observer"] = nullptr;
  a["observer_kwargs"] = json::object();
  a["scale_dtype"] = nullptr;
  a["strategy"] = "token";
  a["symmetric"] = true;
  a["type"] = "int";
  a["zp_dtype"] = nullptr;
  return a;
}

}  // namespace

json ct_quant_config(const std::vector<ConfigGroup>& groups, const std::vector<std::string>& ignore,
                     const std::string& actorder) {
  json cg = json::object();
  std::string top;
  for (size_t i = 0; i < groups.size(); ++i) {
    const ConfigGroup& g = groups[i];
    const std::string fmt = ct_format_of(g.spec);
    top = top.empty() || top == fmt ? fmt : "mixed-precision";
    json o;
    o["format"] = fmt;
    o["input_activations"] = g.spec.scheme == QScheme::kW8A8 ? input_args_w8a8() : json(nullptr);
    o["output_activations"] = nullptr;
    o["targets"] = g.targets;
    o["weights"] = weight_args(g.spec, actorder);
    cg["group_" + std::to_string(i)] = o;
  }
  json q;
  q["config_groups"] = cg;
  q["format"] = top;
  q["global_compression_ratio"] = nullptr;
  q["ignore"] = ignore;
  q["kv_cache_scheme"] = nullptr;
  q["quant_method"] = "compressed-tensors";
  q["quantization_status"] = "compressed";
  q["sparsity_config"] = json::object();
  q["transform_config"] = json::object();
  q["version"] = "0.20.1";
  return q;
}

json gptq_quant_config(const QuantSpec& s, bool desc_act, double damp) {
  json q;
  q["bits"] = s.bits;
  q["group_size"] = s.group;
  q["damp_percent"] = damp;
  // Act-order runs with static groups (quantize/gptq.h): the stored codes need no row reordering and g_idx is
  // trivial, so the checkpoint is a desc_act=false one (which every GPTQ kernel, Marlin included, serves).
  q["desc_act"] = false;
  q["static_groups"] = desc_act;
  q["sym"] = s.sym;
  q["true_sequential"] = false;
  q["model_name_or_path"] = nullptr;
  q["model_file_base_name"] = "model";
  q["quant_method"] = "gptq";
  q["checkpoint_format"] = s.sym ? "gptq" : "gptq_v2";
  return q;
}

}  // namespace blockspec
