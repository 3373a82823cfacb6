// make_weight_from_codes / weight_codes: the packed layout of
// kernels/quant_layout.h filled from given codes instead of from RTN.
#include "kernels/quant_import.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/error.h"
#include "kernels/quant.h"
#include "kernels/quant_layout.h"

namespace blockspec {

namespace {

// Writes rows of tile t from codes/scales of rows row0.. ([*, K] / [*, G]).
void pack_tile(const int8_t* codes, const float* scales, int64_t row0, int64_t row1, const PackedWeights& p, int64_t t,
               uint8_t* out, float* wscales, int32_t* corr) {
  const int64_t K = p.K, G = p.n_groups;
  for (int64_t r = 0; r < kQTile; ++r) {
    const int64_t n = t * kQTile + r;
    if (n >= p.N) break;  // padding rows stay code 0, scale 0, corr 0
    BS_ASSERT(n >= row0 && n < row1);
    const int8_t* c = codes + (n - row0) * K;  // [K]
    for (int64_t g = 0; g < G; ++g) {
      const int64_t k0 = g * kQGroup, k1 = std::min(k0 + kQGroup, K);
      int32_t sum = 0;
      for (int64_t k = k0; k < k1; ++k) sum += c[k];
      const float s = scales[(n - row0) * G + g];
      if (!std::isfinite(s)) fail("make_weight_from_codes: scale of row ", n, " group ", g, " is ", s, ", not finite");
      wscales[(t * G + g) * kQTile + r] = s;
      corr[(t * G + g) * kQTile + r] = 128 * sum;
    }
    for (int64_t k = 0; k < K; ++k) {
      uint8_t& b = out[p.code_offset(n, k)];
      if (!p.q4) {
        b = static_cast<uint8_t>(c[k]);
        continue;
      }
      if (c[k] < -8 || c[k] > 7)
        fail("make_weight_from_codes: q4 code ", int(c[k]), " at row ", n, " input ", k, " is outside [-8, 7]");
      const uint8_t nib = static_cast<uint8_t>(c[k] + 8);
      b = (k % 8) < 4 ? static_cast<uint8_t>((b & 0xF0) | nib) : static_cast<uint8_t>((b & 0x0F) | (nib << 4));
    }
  }
}

}  // namespace

QuantTensor make_weight_from_codes(const OpContext& ctx, int64_t N, int64_t K, WeightFormat fmt, const CodeRowsFn& rows,
                                   int64_t chunk_rows) {
  if (N <= 0 || K <= 0) fail("make_weight_from_codes: bad shape [", N, ", ", K, "]");
  if (fmt != WeightFormat::kQ8_G128 && fmt != WeightFormat::kQ4_G128)
    fail("make_weight_from_codes: format ", weight_format_name(fmt), " has no integer codes (expected q8 or q4)");
  const int64_t align = kQPanel * kQTile;  // whole panels per chunk: tiles never straddle chunks
  chunk_rows = std::max<int64_t>(align, chunk_rows / align * align);
  const bool q4 = fmt == WeightFormat::kQ4_G128;
  QuantTensor q;
  q.format = fmt;
  q.rows = N;
  q.cols = K;
  const int64_t n_tiles = q_tiles(N), G = q_groups(K), Kp = q_padded_k(K);
  q.data = Tensor(DType::kU8, {n_tiles, q4 ? Kp * 8 : Kp * 16});
  q.scales = Tensor(DType::kF32, {n_tiles, G, kQTile});
  q.aux = Tensor(DType::kI32, {n_tiles, G, kQTile});
  uint8_t* out = q.data.mutable_ptr<uint8_t>();
  std::fill(out, out + q.data.nbytes(), static_cast<uint8_t>(q4 ? 0x88 : 0));  // code 0 everywhere
  std::fill(q.scales.mutable_ptr<float>(), q.scales.mutable_ptr<float>() + q.scales.numel(), 0.f);
  std::fill(q.aux.mutable_ptr<int32_t>(), q.aux.mutable_ptr<int32_t>() + q.aux.numel(), 0);
  const PackedWeights p = packed_weights(q);
  std::vector<int8_t> codes;   // [chunk, K]
  std::vector<float> scales;   // [chunk, G]
  for (int64_t r0 = 0; r0 < N; r0 += chunk_rows) {
    const int64_t r1 = std::min(N, r0 + chunk_rows);
    codes.assign((r1 - r0) * K, 0);
    scales.assign((r1 - r0) * G, 0.f);
    rows(r0, r1, codes.data(), scales.data());
    const int64_t t0 = r0 / kQTile, t1 = q_tiles(r1);
    // Tiles of one panel share interleaved lines: threads take whole panels
    // (chunks start on panel boundaries, so t0 is a panel start).
    ctx.pool->parallel_for_grain(t1 - t0, kQPanel, [&](int64_t a, int64_t b) {
      for (int64_t t = t0 + a; t < t0 + b; ++t)
        pack_tile(codes.data(), scales.data(), r0, r1, p, t, out, q.scales.mutable_ptr<float>(),
                  q.aux.mutable_ptr<int32_t>());
    });
  }
  return q;
}

void weight_codes(const QuantTensor& w, int64_t r0, int64_t r1, int8_t* codes, float* scales) {
  const PackedWeights p = packed_weights(w);
  BS_ASSERT(0 <= r0 && r0 <= r1 && r1 <= w.rows);
  for (int64_t n = r0; n < r1; ++n) {
    for (int64_t k = 0; k < w.cols; ++k) codes[(n - r0) * w.cols + k] = static_cast<int8_t>(packed_code(p, n, k));
    for (int64_t g = 0; g < p.n_groups; ++g) scales[(n - r0) * p.n_groups + g] = packed_scale(p, n, g * kQGroup);
  }
}

}  // namespace blockspec
