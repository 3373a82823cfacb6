// compressed-tensors weight_zero_point: layout checks and the exact
// dequantization of asymmetric integer weights. See quant_checkpoint_zp.h.
#include "model/quant_checkpoint_zp.h"

#include <vector>

#include "formats/quant_config.h"

namespace blockspec {

namespace {

int64_t unpacked_elem(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kI8: return elem<int8_t>(t, i);
    case DType::kI16: return elem<int16_t>(t, i);
    case DType::kI32: return elem<int32_t>(t, i);
    default: BS_ASSERT(false, "zero point of dtype ", dtype_name(t.dtype()));
  }
  return 0;
}

}  // namespace

std::string ct_zero_point_problem(const SafetensorsCheckpoint& ckpt, const CtZeroPoints& z) {
  const SafetensorsEntry& e = ckpt.entry(z.name);
  if (z.packed) {
    const Shape want{(z.N * z.bits + 31) / 32, z.n_groups};
    if (e.dtype != DType::kI32)
      return str_cat(e.name, " has dtype ", dtype_name(e.dtype), ", expected I32 (pack-quantized packs ", 32 / z.bits,
                     " zero points per int32 along N)");
    if (e.shape != want)
      return str_cat(e.name, " has shape ", shape_str(e.shape), ", expected ", shape_str(want), " (", z.bits,
                     "-bit zero points of ", z.N, " rows x ", z.n_groups, " groups packed along N)");
    return "";  // every b-bit field minus 2^(b-1) is in range
  }
  const Shape want{z.N, z.n_groups};
  if (e.dtype != DType::kI8 && e.dtype != DType::kI16 && e.dtype != DType::kI32)
    return str_cat(e.name, " has dtype ", dtype_name(e.dtype), ", expected I8 (zp_dtype int8; I16 / I32 when zp_dtype "
                   "says so)");
  if (e.shape != want)
    return str_cat(e.name, " has shape ", shape_str(e.shape), ", expected ", shape_str(want), " (one zero point per row and ",
                   z.n_groups == 1 ? "channel" : "group", ", unpacked)");
  const Tensor t = ckpt.tensor(z.name);
  const int64_t lo = -(int64_t{1} << (z.bits - 1)), hi = (int64_t{1} << (z.bits - 1)) - 1;
  for (int64_t i = 0; i < t.numel(); ++i)
    if (const int64_t v = unpacked_elem(t, i); v < lo || v > hi)
      return str_cat(e.name, "[", i / z.n_groups, ", ", i % z.n_groups, "] = ", v, " is outside [", lo, ", ", hi, "] for ",
                     z.bits, "-bit weights");
  return "";
}

int ct_zero_point(const Tensor& zt, const CtZeroPoints& z, int64_t n, int64_t g) {
  if (!z.packed) return static_cast<int>(unpacked_elem(zt, n * z.n_groups + g));
  const int pf = 32 / z.bits;
  return static_cast<int>(packed_field(elem<uint32_t>(zt, (n / pf) * z.n_groups + g), z.bits, n % pf)) -
         (1 << (z.bits - 1));
}

void ct_asym_rows(const CtAsymWeight& w, int64_t r0, int64_t r1, float* out) {
  const int b = w.z.bits, pf = 32 / b, off = 1 << (b - 1);
  const int64_t K = w.K, G = w.z.n_groups;
  const int64_t W = w.z.packed ? w.codes.dim(1) : K;
  std::vector<float> zf(G), sf(G);  // per group of this row: float(z), scale
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t g = 0; g < G; ++g) {
      zf[g] = static_cast<float>(ct_zero_point(w.zeros, w.z, r, g));
      sf[g] = float_elem(w.scales, r * G + g);
    }
    float* o = out + (r - r0) * K;
    for (int64_t k = 0; k < K; ++k) {
      const int q = w.z.packed ? static_cast<int>(packed_field(elem<uint32_t>(w.codes, r * W + k / pf), b, k % pf)) - off
                               : static_cast<int>(elem<int8_t>(w.codes, r * K + k));
      const int64_t g = k / w.group;
      o[k] = (static_cast<float>(q) - zf[g]) * sf[g];  // torch: x_q.to(f32) - zp.to(f32), then * scale
    }
  }
}

}  // namespace blockspec
