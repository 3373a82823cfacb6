// See quantizer.h; formulas from ../shared/docs/quant_formats.md §3.2, §3.5, §3.6.
#include "quantize/quantizer.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "kernels/fp_formats.h"

namespace blockspec {

const char* qscheme_name(QScheme s) {
  switch (s) {
    case QScheme::kW8A8: return "w8a8";
    case QScheme::kW4A16: return "w4a16";
    case QScheme::kW8A16: return "w8a16";
    case QScheme::kFP8: return "fp8";
    case QScheme::kNVFP4: return "nvfp4";
    case QScheme::kMXFP4: return "mxfp4";
  }
  return "?";
}

QScheme qscheme_from_name(const std::string& s) {
  for (QScheme q : {QScheme::kW8A8, QScheme::kW4A16, QScheme::kW8A16, QScheme::kFP8, QScheme::kNVFP4, QScheme::kMXFP4})
    if (s == qscheme_name(q)) return q;
  fail("--scheme \"", s, "\": unknown scheme (expected w8a8, w4a16, w8a16, fp8, nvfp4 or mxfp4)");
}

std::string QuantSpec::describe() const {
  if (scheme == QScheme::kNVFP4) return "nvfp4 g16";
  if (scheme == QScheme::kMXFP4) return "mxfp4 g32";
  if (scheme == QScheme::kFP8) return group == 0 ? "fp8 per-tensor" : "fp8 per-channel";
  return str_cat("int", bits, sym ? " sym" : " asym", group == -1 ? " per-channel" : str_cat(" g", group),
                 scheme == QScheme::kW8A8 ? " (a8 dynamic)" : "");
}

float round_to_dtype(float x, DType dt) {
  if (dt == DType::kBF16) return bf16_to_f32(f32_to_bf16(x));
  if (dt == DType::kF16) return f16_to_f32(f32_to_f16(x));
  return x;
}

namespace {

// torch.finfo(dtype).eps: what compressed-tensors puts in place of a zero scale.
float dtype_eps(DType dt) {
  if (dt == DType::kBF16) return 0.0078125f;           // 2^-7
  if (dt == DType::kF16) return 0.0009765625f;         // 2^-10
  return FLT_EPSILON;
}

int qmin(int bits) { return -(1 << (bits - 1)); }
int qmax(int bits) { return (1 << (bits - 1)) - 1; }

// MXFP4 scale exponent of a group absmax (quant_formats.md §3.6): round to a power of two by adding a
// quarter of the mantissa range to the raw bits (bf16 / f16 / f32 all align with f32 bit 21), keep
// sign + exponent, e = clamp(exponent(p) - 2, 0, 255) (127 + floor(log2 p) - 2).
uint8_t mx_exponent(float amax) {
  uint32_t b;
  std::memcpy(&b, &amax, 4);
  b += 1u << 21;
  b &= 0xFF800000u;
  const int ex = static_cast<int>((b >> 23) & 0xFF);
  if (ex == 0) return 0;  // amax 0 (log2 0 = -inf) clamps to 0
  return static_cast<uint8_t>(std::clamp(ex - 2, 0, 255));
}

}  // namespace

float QuantWeight::group_scale(int64_t n, int64_t g) const {
  switch (spec.scheme) {
    case QScheme::kMXFP4: return e8m0_to_f32(scale_code[n * n_groups + g]);
    case QScheme::kNVFP4: return scale[n * n_groups + g] / global;
    case QScheme::kFP8: return spec.group == 0 ? scale[0] : scale[n];
    default: return scale[n * n_groups + g];
  }
}

int8_t QuantWeight::quantize(int64_t n, int64_t k, float x) const {
  const int64_t g = group_of(k);
  const float s = group_scale(n, g);
  switch (spec.scheme) {
    case QScheme::kFP8: return static_cast<int8_t>(f32_to_e4m3(std::clamp(x / s, -448.f, 448.f)));
    case QScheme::kNVFP4:
    case QScheme::kMXFP4: return static_cast<int8_t>(f32_to_e2m1(std::clamp(x / s, -6.f, 6.f)));
    default: break;
  }
  const int lo = qmin(spec.bits), hi = qmax(spec.bits);
  float v = x / s;
  if (!spec.sym) v += static_cast<float>(zero[n * n_groups + g]);
  return static_cast<int8_t>(std::nearbyint(std::clamp(v, static_cast<float>(lo), static_cast<float>(hi))));
}

float QuantWeight::dequantize_code(int64_t n, int64_t k, int8_t code) const {
  const int64_t g = group_of(k);
  const float s = group_scale(n, g);
  switch (spec.scheme) {
    case QScheme::kFP8: return e4m3_to_f32(static_cast<uint8_t>(code)) * s;
    case QScheme::kNVFP4:
    case QScheme::kMXFP4: return e2m1_to_f32(static_cast<uint8_t>(code)) * s;
    default: break;
  }
  const int z = spec.sym ? 0 : zero[n * n_groups + g];
  return static_cast<float>(static_cast<int>(code) - z) * s;
}

QuantWeight make_params(const QuantSpec& spec, const float* w, int64_t N, int64_t K) {
  QuantWeight qw;
  qw.spec = spec;
  qw.N = N;
  qw.K = K;
  const bool per_row = spec.group == -1 || spec.group == 0;
  qw.group_len = per_row ? K : spec.group;
  qw.n_groups = per_row ? 1 : (K + spec.group - 1) / spec.group;
  const int64_t G = qw.n_groups;
  auto group_minmax = [&](int64_t n, int64_t g, float& mn, float& mx) {
    mn = 0.f, mx = 0.f;  // 0 must be representable (min <= 0 <= max)
    const int64_t k1 = std::min(K, (g + 1) * qw.group_len);
    for (int64_t k = g * qw.group_len; k < k1; ++k) mn = std::min(mn, w[n * K + k]), mx = std::max(mx, w[n * K + k]);
  };
  switch (spec.scheme) {
    case QScheme::kFP8: {
      const float eps = dtype_eps(spec.scale_dtype);
      auto fp8_scale = [&](float amax) {
        const float s = round_to_dtype(amax / 448.f, spec.scale_dtype);
        return s == 0.f ? eps : s;
      };
      if (spec.group == 0) {
        float amax = 0.f;
        for (int64_t i = 0; i < N * K; ++i) amax = std::max(amax, std::fabs(w[i]));
        qw.scale = {fp8_scale(amax)};
      } else {
        qw.scale.resize(N);
        for (int64_t n = 0; n < N; ++n) {
          float mn, mx;
          group_minmax(n, 0, mn, mx);
          qw.scale[n] = fp8_scale(std::max(-mn, mx));
        }
      }
      break;
    }
    case QScheme::kNVFP4: {
      float amax = 0.f;
      for (int64_t i = 0; i < N * K; ++i) amax = std::max(amax, std::fabs(w[i]));
      float gs = 448.f * 6.f / std::max(amax, FLT_MIN);
      if (!std::isfinite(gs)) gs = 1.f;
      qw.global = gs;
      qw.scale.resize(N * G);
      qw.scale_code.resize(N * G);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t g = 0; g < G; ++g) {
          float mn, mx;
          group_minmax(n, g, mn, mx);
          uint8_t c = f32_to_e4m3(std::clamp(gs * (std::max(-mn, mx) / 6.f), -448.f, 448.f));
          if (e4m3_to_f32(c) == 0.f) c = 0x20;  // 0 -> 0.125 (quant_formats.md §3.2: fp8 scale eps)
          qw.scale_code[n * G + g] = c;
          qw.scale[n * G + g] = e4m3_to_f32(c);
        }
      break;
    }
    case QScheme::kMXFP4: {
      qw.scale_code.resize(N * G);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t g = 0; g < G; ++g) {
          float mn, mx;
          group_minmax(n, g, mn, mx);
          qw.scale_code[n * G + g] = mx_exponent(round_to_dtype(std::max(-mn, mx), spec.weight_dtype));
        }
      break;
    }
    default: {
      const int lo = qmin(spec.bits), hi = qmax(spec.bits);
      const float range = static_cast<float>(hi - lo), eps = dtype_eps(spec.scale_dtype);
      qw.scale.resize(N * G);
      if (!spec.sym) qw.zero.resize(N * G);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t g = 0; g < G; ++g) {
          float mn, mx;
          group_minmax(n, g, mn, mx);
          float s = spec.sym ? std::max(-mn, mx) / (range / 2.f) : (mx - mn) / range;
          s = round_to_dtype(s, spec.scale_dtype);
          if (s == 0.f) s = eps;
          qw.scale[n * G + g] = s;
          if (!spec.sym)
            qw.zero[n * G + g] = static_cast<int32_t>(
                std::nearbyint(std::clamp(static_cast<float>(lo) - mn / s, static_cast<float>(lo), static_cast<float>(hi))));
        }
    }
  }
  qw.q.assign(N * K, 0);
  return qw;
}

void quantize_rtn(QuantWeight& qw, const float* w) {
  for (int64_t n = 0; n < qw.N; ++n)
    for (int64_t k = 0; k < qw.K; ++k) qw.q[n * qw.K + k] = qw.quantize(n, k, w[n * qw.K + k]);
}

std::vector<float> dequantize_all(const QuantWeight& qw) {
  std::vector<float> out(qw.N * qw.K);
  for (int64_t n = 0; n < qw.N; ++n)
    for (int64_t k = 0; k < qw.K; ++k) out[n * qw.K + k] = qw.value(n, k);
  return out;
}

}  // namespace blockspec
