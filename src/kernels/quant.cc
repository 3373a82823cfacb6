// make_weight / dequantize_weight / linear(QuantTensor).
//
// Formats (byte layouts in kernels/quant_layout.h):
//   F32, BF16  data: [N, K], shared with the source tensor when its dtype
//              already matches (zero-copy), else converted once.
//   Q8_G128    RTN symmetric int8 per row and group of 128 inputs:
//              scale = max|w| / 127, code = round_half_even(w / scale) in [-127, 127].
//   Q4_G128    RTN symmetric int4: scale = max|w| / 7, code = round_half_even(w / scale)
//              clamped to [-7, 7]. We do not use the "-8 trick" (scale = max/8 with the
//              extremum mapped to -8): it gains half a step of resolution but an
//              opposite-sign value near max|w| then clips by a whole step, breaking
//              |error| <= scale / 2. Code -8 stays legal in the layout (kernels and
//              dequantize handle it) for importers of GPTQ checkpoints that use it.
//   An all-zero group has scale 0 and codes 0.
//
// linear() on Q8/Q4 is W8A8 / W4A8: activations are quantized per row and per
// group of 128 to int8 (quant_layout.h), multiplied with integer dot products,
// and each group's int32 sum is scaled by weight scale * activation scale.
// With act_int8 = false (weight-only W8A16 / W4A16, what weight-only checkpoints
// load as) activations stay f32 and the codes are dequantized in-register.
#include "kernels/quant.h"

#include <algorithm>
#include <functional>
#include <cmath>
#include <vector>

#include "base/error.h"
#include "kernels/block_quant.h"
#include "kernels/fp_formats_impl.h"

namespace blockspec {

namespace {

bool is_int_format(WeightFormat f) { return f == WeightFormat::kQ8_G128 || f == WeightFormat::kQ4_G128; }

}  // namespace

PackedWeights packed_weights(const QuantTensor& w) {
  BS_ASSERT(is_int_format(w.format), "packed_weights of a ", weight_format_name(w.format), " weight");
  PackedWeights p;
  p.codes = w.data.ptr<uint8_t>();
  p.scales = w.scales.ptr<float>();
  p.corr = w.aux.ptr<int32_t>();
  p.N = w.rows;
  p.K = w.cols;
  p.Kp = q_padded_k(w.cols);
  p.n_groups = q_groups(w.cols);
  p.n_tiles = q_tiles(w.rows);
  p.q4 = w.format == WeightFormat::kQ4_G128;
  return p;
}

namespace {

// Quantizes tile t (rows 16t..16t+15 of the weight) into the packed buffers
// described by p (codes zero-initialised; Q4 codes pre-filled with 0x88).
// wf holds rows row0.. of the weight: [rows, K] f32.
void quantize_tile(const float* wf, int64_t row0, const PackedWeights& p, int64_t t, uint8_t* codes, float* scales,
                   int32_t* corr) {
  const int64_t N = p.N, K = p.K, G = p.n_groups;
  const float qmax = p.q4 ? 7.f : 127.f;
  std::vector<int8_t> row(p.Kp);  // [Kp] codes of one row
  for (int64_t r = 0; r < kQTile; ++r) {
    const int64_t n = t * kQTile + r;
    std::fill(row.begin(), row.end(), 0);
    for (int64_t g = 0; g < G; ++g) {
      const int64_t k0 = g * kQGroup, k1 = std::min(k0 + kQGroup, K);
      float amax = 0.f;
      if (n < N)
        for (int64_t k = k0; k < k1; ++k) amax = std::max(amax, std::fabs(wf[(n - row0) * K + k]));
      const float scale = amax / qmax;
      int32_t sum = 0;
      if (scale > 0.f)
        for (int64_t k = k0; k < k1; ++k) {
          float c = std::nearbyint(wf[(n - row0) * K + k] / scale);
          row[k] = static_cast<int8_t>(std::min(qmax, std::max(-qmax, c)));
          sum += row[k];
        }
      scales[(t * G + g) * kQTile + r] = scale;
      corr[(t * G + g) * kQTile + r] = 128 * sum;
    }
    for (int64_t k = 0; k < p.Kp; ++k) {
      uint8_t& b = codes[p.code_offset(n, k)];
      if (!p.q4) {
        b = static_cast<uint8_t>(row[k]);
      } else {
        const uint8_t nib = static_cast<uint8_t>(row[k] + 8);
        b = (k % 8) < 4 ? static_cast<uint8_t>((b & 0xF0) | nib) : static_cast<uint8_t>((b & 0x0F) | (nib << 4));
      }
    }
  }
}

}  // namespace

QuantTensor make_weight(const OpContext& ctx, const Tensor& w, WeightFormat fmt) {
  if (w.ndim() != 2) fail("make_weight: expected a 2-D [N, K] weight, found shape ", shape_str(w.shape()));
  if (w.dtype() != DType::kF32 && w.dtype() != DType::kBF16 && w.dtype() != DType::kF16)
    fail("make_weight: expected an F32, BF16 or F16 weight, found ", dtype_name(w.dtype()),
         "; dequantize it first");
  if (is_block_format(fmt))
    fail("make_weight: ", weight_format_name(fmt), " weights come only from GGUF files as stored (make_block_weight)");
  QuantTensor q;
  q.format = fmt;
  q.rows = w.dim(0);
  q.cols = w.dim(1);
  const int64_t N = q.rows, K = q.cols;
  if (fmt == WeightFormat::kF32) {
    q.data = w.dtype() == DType::kF32 ? w : to_f32(w);
    return q;
  }
  if (fmt == WeightFormat::kBF16) {
    if (w.dtype() == DType::kBF16) {
      q.data = w;
      return q;
    }
    Tensor f = to_f32(w);
    q.data = Tensor(DType::kBF16, {N, K});
    uint16_t* d = q.data.mutable_ptr<uint16_t>();
    for (int64_t i = 0; i < N * K; ++i) d[i] = f32_to_bf16(f.ptr<float>()[i]);
    return q;
  }
  if (is_fp_format(fmt)) {
    const Tensor wf = w.dtype() == DType::kF32 ? w : to_f32(w);
    QuantTensor f = fp_alloc(fmt, N, K);
    if (fmt == WeightFormat::kNVFP4) {
      float amax = 0.f;
      for (int64_t i = 0; i < N * K; ++i) amax = std::max(amax, std::fabs(wf.ptr<float>()[i]));
      f.aux.mutable_ptr<float>()[0] = nvfp4_global_scale(amax);
    }
    ctx.pool->parallel_for(N, [&](int64_t r0, int64_t r1) {
      fp_quantize_rows(f, wf.ptr<float>() + r0 * K, r0, r1);
    });
    return f;
  }
  BS_ASSERT(is_int_format(fmt));
  const bool q4 = fmt == WeightFormat::kQ4_G128;
  const Tensor wf = w.dtype() == DType::kF32 ? w : to_f32(w);
  const int64_t n_tiles = q_tiles(N), G = q_groups(K), Kp = q_padded_k(K);
  q.data = Tensor(DType::kU8, {n_tiles, q4 ? Kp * 8 : Kp * 16});
  q.scales = Tensor(DType::kF32, {n_tiles, G, kQTile});
  q.aux = Tensor(DType::kI32, {n_tiles, G, kQTile});
  uint8_t* codes = q.data.mutable_ptr<uint8_t>();
  if (q4) std::fill(codes, codes + q.data.nbytes(), static_cast<uint8_t>(0x88));  // code 0 in both nibbles
  const PackedWeights p = packed_weights(q);
  // Threads take whole panels: tiles of a panel share interleaved lines.
  ctx.pool->parallel_for_grain(n_tiles, kQPanel, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      quantize_tile(wf.ptr<float>(), 0, p, t, codes, q.scales.mutable_ptr<float>(), q.aux.mutable_ptr<int32_t>());
  });
  return q;
}

QuantTensor make_weight_streamed(const OpContext& ctx, int64_t N, int64_t K, WeightFormat fmt,
                                 const std::function<void(int64_t, int64_t, float*)>& rows, int64_t chunk_rows) {
  if (N <= 0 || K <= 0) fail("make_weight_streamed: bad shape [", N, ", ", K, "]");
  if (is_block_format(fmt))
    fail("make_weight_streamed: ", weight_format_name(fmt),
         " weights come only from GGUF files as stored (make_block_weight)");
  // Chunks start on panel boundaries so every tile a chunk quantizes has all
  // its rows inside the chunk.
  const int64_t align = kQPanel * kQTile;
  chunk_rows = std::max<int64_t>(align, chunk_rows / align * align);
  QuantTensor q;
  q.format = fmt;
  q.rows = N;
  q.cols = K;
  std::vector<float> buf;  // [chunk_rows, K] f32 rows of the current chunk
  if (is_fp_format(fmt)) {
    QuantTensor f = fp_alloc(fmt, N, K);
    if (fmt == WeightFormat::kNVFP4) {  // the global scale needs max|W| first: one extra pass
      float amax = 0.f;
      for (int64_t r0 = 0; r0 < N; r0 += chunk_rows) {
        const int64_t r1 = std::min(N, r0 + chunk_rows);
        buf.resize((r1 - r0) * K);
        rows(r0, r1, buf.data());
        for (float v : buf) amax = std::max(amax, std::fabs(v));
      }
      f.aux.mutable_ptr<float>()[0] = nvfp4_global_scale(amax);
    }
    for (int64_t r0 = 0; r0 < N; r0 += chunk_rows) {
      const int64_t r1 = std::min(N, r0 + chunk_rows);
      buf.resize((r1 - r0) * K);
      rows(r0, r1, buf.data());
      ctx.pool->parallel_for(r1 - r0, [&](int64_t a, int64_t b) {
        fp_quantize_rows(f, buf.data() + a * K, r0 + a, r0 + b);
      });
    }
    return f;
  }
  if (!is_int_format(fmt)) {
    q.data = Tensor(fmt == WeightFormat::kF32 ? DType::kF32 : DType::kBF16, {N, K});
    for (int64_t r0 = 0; r0 < N; r0 += chunk_rows) {
      const int64_t r1 = std::min(N, r0 + chunk_rows);
      if (fmt == WeightFormat::kF32) {
        rows(r0, r1, q.data.mutable_ptr<float>() + r0 * K);
        continue;
      }
      buf.resize((r1 - r0) * K);
      rows(r0, r1, buf.data());
      uint16_t* d = q.data.mutable_ptr<uint16_t>() + r0 * K;
      for (int64_t i = 0; i < (r1 - r0) * K; ++i) d[i] = f32_to_bf16(buf[i]);
    }
    return q;
  }
  const bool q4 = fmt == WeightFormat::kQ4_G128;
  const int64_t n_tiles = q_tiles(N), G = q_groups(K), Kp = q_padded_k(K);
  q.data = Tensor(DType::kU8, {n_tiles, q4 ? Kp * 8 : Kp * 16});
  q.scales = Tensor(DType::kF32, {n_tiles, G, kQTile});
  q.aux = Tensor(DType::kI32, {n_tiles, G, kQTile});
  uint8_t* codes = q.data.mutable_ptr<uint8_t>();
  if (q4) std::fill(codes, codes + q.data.nbytes(), static_cast<uint8_t>(0x88));
  const PackedWeights p = packed_weights(q);
  for (int64_t r0 = 0; r0 < N; r0 += chunk_rows) {
    const int64_t r1 = std::min(N, r0 + chunk_rows);
    buf.resize((r1 - r0) * K);
    rows(r0, r1, buf.data());
    const int64_t t0 = r0 / kQTile, t1 = q_tiles(r1);
    ctx.pool->parallel_for_grain(t1 - t0, kQPanel, [&](int64_t a, int64_t b) {
      for (int64_t t = t0 + a; t < t0 + b; ++t)
        quantize_tile(buf.data(), r0, p, t, codes, q.scales.mutable_ptr<float>(), q.aux.mutable_ptr<int32_t>());
    });
  }
  return q;
}

Tensor dequantize_weight(const QuantTensor& w) {
  if (is_block_format(w.format)) {
    Tensor out(DType::kF32, {w.rows, w.cols});
    for (int64_t n = 0; n < w.rows; ++n) block_dequantize_row(w, n, out.mutable_ptr<float>() + n * w.cols);
    return out;
  }
  if (is_fp_format(w.format)) {
    Tensor out(DType::kF32, {w.rows, w.cols});
    const FpWeights f = fp_weights(w);
    for (int64_t n = 0; n < w.rows; ++n) fp_dequantize_row(f, n, out.mutable_ptr<float>() + n * w.cols);
    return out;
  }
  if (!is_int_format(w.format)) return to_f32(w.data);
  const PackedWeights p = packed_weights(w);
  Tensor out(DType::kF32, {w.rows, w.cols});
  float* o = out.mutable_ptr<float>();  // [N, K]
  for (int64_t n = 0; n < w.rows; ++n)
    for (int64_t k = 0; k < w.cols; ++k) o[n * w.cols + k] = static_cast<float>(packed_code(p, n, k)) * packed_scale(p, n, k);
  return out;
}

void linear(const OpContext& ctx, const float* x, const QuantTensor& w, const float* bias, float* y, int64_t M) {
  if (is_fp_format(w.format)) {
    fp_linear(ctx, x, w, bias, y, M);
    return;
  }
  if (is_block_format(w.format)) {
    block_linear(ctx, x, w, bias, y, M);
    return;
  }
  if (!is_int_format(w.format)) {
    linear(ctx, x, w.data, bias, y, M);
    return;
  }
  const PackedWeights p = packed_weights(w);
  const int64_t K = w.cols, N = w.rows;
  auto add_bias = [&](int64_t t0, int64_t t1) {
    if (bias == nullptr) return;
    const int64_t n0 = t0 * kQTile, n1 = std::min(N, t1 * kQTile);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = n0; n < n1; ++n) y[m * N + n] += bias[n];
  };
  if (!w.act_int8) {  // weight-only: same panel split, f32 activations
    auto gemm = p.q4 ? ctx.k->gemm_q4g128_wo : ctx.k->gemm_q8g128_wo;
    ctx.pool->parallel_for_grain(p.n_tiles, kQPanel, [&](int64_t t0, int64_t t1) {
      gemm(p, x, y, M, t0, t1);
      add_bias(t0, t1);
    });
    return;
  }
  std::vector<uint8_t> xq(M * p.Kp);      // [M, Kp] u8 codes + 128
  std::vector<float> xs(M * p.n_groups);  // [M, G]
  ctx.pool->parallel_for(M, [&](int64_t m0, int64_t m1) {
    (w.act_per_token ? ctx.k->quantize_acts_token : ctx.k->quantize_acts)(x + m0 * K, m1 - m0, K, xq.data() + m0 * p.Kp,
                                                                           xs.data() + m0 * p.n_groups);
  });
  const QuantActs a{xq.data(), xs.data(), M};
  auto gemm = p.q4 ? ctx.k->gemm_q4g128 : ctx.k->gemm_q8g128;
  // Threads split the weight in whole panels (4 tiles of 16 rows, the
  // kernels' register block), so each thread streams one contiguous slice of
  // the weight and both cores' bandwidth is used in decode.
  ctx.pool->parallel_for_grain(p.n_tiles, kQPanel, [&](int64_t t0, int64_t t1) {
    gemm(a, p, y, t0, t1);
    add_bias(t0, t1);
  });
}

void round_acts_token(const OpContext& ctx, const float* x, int64_t M, int64_t K, float* out) {
  const int64_t Kp = q_padded_k(K), G = q_groups(K);
  std::vector<uint8_t> q(M * Kp);
  std::vector<float> s(M * G);
  ctx.k->quantize_acts_token(x, M, K, q.data(), s.data());
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k)
      out[m * K + k] = static_cast<float>(static_cast<int>(q[m * Kp + k]) - 128) * s[m * G + k / kQGroup];
}

}  // namespace blockspec
