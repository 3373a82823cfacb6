// FP8 E4M3 / NVFP4 / MXFP4 weights: views, RTN quantization from floats,
// dequantization and linear (layouts and arithmetic in kernels/fp_formats.h).
//
// Quantization (make_weight from floats; round to nearest even, saturating):
//   FP8    per row and group of 128: scale = max|w| / 448, code = e4m3(w / scale)
//          (an all-zero group has scale 0, codes 0).
//   MXFP4  per row and group of 32 (quant_formats.md 3.6): p = max|w| rounded to a power
//          of two (add a quarter of the mantissa range to the bits, keep the exponent),
//          e = clamp(exp(p) - 2, 0, 254), code = e2m1(clamp(w / 2^(e-127), +-6)).
//   NVFP4  (quant_formats.md 3.5) g = 448 * 6 / max(max|W|, FLT_MIN) (1 if not finite);
//          per row and group of 16: s = e4m3(clamp(g * (max|w| / 6), +-448)), 0 -> 0.125;
//          code = e2m1(clamp(w / (s / g), +-6)). One global scale per tensor.
#include "kernels/fp_formats_impl.h"

#include <algorithm>
#include <cfloat>
#include <vector>

#include "base/error.h"
#include "kernels/kernel_table.h"
#include "kernels/quant.h"

namespace blockspec {

FpWeights fp_weights(const QuantTensor& w) {
  BS_ASSERT(is_fp_format(w.format), "fp_weights of a ", weight_format_name(w.format), " weight");
  FpWeights f;
  f.format = w.format;
  f.codes = w.data.ptr<uint8_t>();
  f.scales = w.format == WeightFormat::kFP8_E4M3 ? static_cast<const void*>(w.scales.ptr<float>())
                                                 : static_cast<const void*>(w.scales.ptr<uint8_t>());
  f.N = w.rows;
  f.K = w.cols;
  f.group = fp_group_size(w.format);
  f.n_groups = (w.cols + f.group - 1) / f.group;
  f.row_bytes = w.format == WeightFormat::kFP8_E4M3 ? w.cols : (w.cols + 1) / 2;
  if (w.format == WeightFormat::kNVFP4) f.global_div = w.aux.ptr<float>()[0];
  return f;
}

void fp_dequantize_row(const FpWeights& w, int64_t n, float* out) {
  for (int64_t k = 0; k < w.K; ++k) out[k] = w.value(n, k);
}

QuantTensor fp_alloc(WeightFormat fmt, int64_t N, int64_t K) {
  QuantTensor q;
  q.format = fmt;
  q.rows = N;
  q.cols = K;
  const int64_t G = (K + fp_group_size(fmt) - 1) / fp_group_size(fmt);
  if (fmt == WeightFormat::kFP8_E4M3) {
    q.data = Tensor(DType::kU8, {N, K});
    q.scales = Tensor(DType::kF32, {N, G});
  } else {
    q.data = Tensor(DType::kU8, {N, (K + 1) / 2});
    q.scales = Tensor(DType::kU8, {N, G});
    if (fmt == WeightFormat::kNVFP4) q.aux = Tensor(DType::kF32, {1});
  }
  std::memset(q.data.mutable_ptr<uint8_t>(), 0, q.data.nbytes());
  return q;
}

float nvfp4_global_scale(float amax) {
  const float g = 448.f * 6.f / std::max(amax, FLT_MIN);
  return std::isfinite(g) ? g : 1.f;
}

void fp_quantize_rows(QuantTensor& q, const float* wf, int64_t r0, int64_t r1) {
  const int64_t K = q.cols, gsz = fp_group_size(q.format), G = (K + gsz - 1) / gsz;
  const bool fp8 = q.format == WeightFormat::kFP8_E4M3;
  const int64_t rb = fp8 ? K : (K + 1) / 2;
  uint8_t* codes = q.data.mutable_ptr<uint8_t>();
  const float gdiv = q.format == WeightFormat::kNVFP4 ? q.aux.ptr<float>()[0] : 1.f;
  for (int64_t n = r0; n < r1; ++n) {
    const float* row = wf + (n - r0) * K;
    uint8_t* crow = codes + n * rb;
    for (int64_t g = 0; g < G; ++g) {
      const int64_t k0 = g * gsz, k1 = std::min(K, k0 + gsz);
      float amax = 0.f;
      for (int64_t k = k0; k < k1; ++k) amax = std::max(amax, std::fabs(row[k]));
      if (fp8) {
        const float s = amax / 448.f;
        q.scales.mutable_ptr<float>()[n * G + g] = s;
        for (int64_t k = k0; k < k1; ++k) crow[k] = s > 0.f ? f32_to_e4m3(row[k] / s) : 0;
        continue;
      }
      float s;
      uint8_t sc;
      if (q.format == WeightFormat::kMXFP4) {
        uint32_t bits;
        std::memcpy(&bits, &amax, 4);
        bits = (bits + (1u << 21)) & 0xFF800000u;  // round to a power of two (3.6 step 2)
        const int e = std::clamp(static_cast<int>((bits >> 23) & 0xFF) - 2, 0, 254);
        sc = static_cast<uint8_t>(e);
        s = e8m0_to_f32(sc);
      } else {
        sc = f32_to_e4m3(std::min(gdiv * (amax / 6.f), 448.f));
        if ((sc & 0x7F) == 0) sc = 0x20;  // 0.125
        s = e4m3_to_f32(sc) / gdiv;
      }
      q.scales.mutable_ptr<uint8_t>()[n * G + g] = sc;
      for (int64_t k = k0; k < k1; ++k) {
        const uint8_t c = f32_to_e2m1(std::clamp(row[k] / s, -6.f, 6.f));
        crow[k / 2] = k % 2 == 0 ? static_cast<uint8_t>((crow[k / 2] & 0xF0) | c)
                                 : static_cast<uint8_t>((crow[k / 2] & 0x0F) | (c << 4));
      }
    }
  }
}

void fp_linear(const OpContext& ctx, const float* x, const QuantTensor& w, const float* bias, float* y, int64_t M) {
  const FpWeights f = fp_weights(w);
  const int64_t N = w.rows;
  ctx.pool->parallel_for_grain(N, 16, [&](int64_t n0, int64_t n1) {
    ctx.k->gemm_fp(f, x, y, M, n0, n1);
    if (bias != nullptr)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = n0; n < n1; ++n) y[m * N + n] += bias[n];
  });
}

QuantTensor concat_fp_rows(const std::vector<QuantTensor>& parts) {
  if (parts.empty() || !is_fp_format(parts[0].format)) return {};
  const QuantTensor& p0 = parts[0];
  int64_t N = 0;
  for (const QuantTensor& p : parts) {
    if (p.format != p0.format || p.cols != p0.cols) return {};
    if (p.format == WeightFormat::kNVFP4 && p.aux.ptr<float>()[0] != p0.aux.ptr<float>()[0]) return {};
    N += p.rows;
  }
  QuantTensor q = fp_alloc(p0.format, N, p0.cols);  // row-major [N, .] codes and scales: rows stack
  uint8_t* d = q.data.mutable_ptr<uint8_t>();
  uint8_t* s = static_cast<uint8_t*>(q.scales.mutable_data());
  for (const QuantTensor& p : parts) {
    std::memcpy(d, p.data.data(), p.data.nbytes());
    std::memcpy(s, p.scales.data(), p.scales.nbytes());
    d += p.data.nbytes();
    s += p.scales.nbytes();
  }
  if (p0.format == WeightFormat::kNVFP4) q.aux.mutable_ptr<float>()[0] = p0.aux.ptr<float>()[0];
  return q;
}

}  // namespace blockspec
