// Packing and linear() of GGUF block-format weights; layout and arithmetic in kernels/block_layout.h.
#include "kernels/block_quant.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "kernels/block_layout.h"

namespace blockspec {

BlockWeights block_weights(const QuantTensor& w) {
  BS_ASSERT(is_block_format(w.format), "block_weights of a ", weight_format_name(w.format), " weight");
  BlockWeights b;
  b.format = w.format;
  b.spec = block_spec(w.format);
  b.data = w.data.ptr<uint8_t>();
  b.N = w.rows;
  b.K = w.cols;
  b.n_blocks = w.cols / b.spec.block;
  b.n_tiles = q_tiles(w.rows);
  return b;
}

QBlock bq_block(const BlockWeights& w, int64_t n, int64_t s) {
  const BlockQuantSpec& sp = w.spec;
  const int64_t r = n % kQTile, t = n / kQTile;
  const uint8_t* st = w.step(t, s);
  QBlock b;
  for (int64_t k = 0; k < sp.block; ++k) b.u[k] = static_cast<uint8_t>(bq_code(w, n, s * sp.block + k));
  for (int64_t j = 0; j < sp.subs() && sp.has_scale; ++j) {
    b.sc[j] = static_cast<int8_t>(st[bq_sc_offset(w, t, r, j)]);
    if (sp.has_min) b.mc[j] = st[bq_mc_offset(w, t, r, j)];
  }
  std::memcpy(&b.d, st + bq_d_offset(w, t, r), 2);
  if (sp.has_min) std::memcpy(&b.dm, st + bq_dm_offset(w, t, r), 2);
  return b;
}

namespace {

// Writes block s of row n (b) into its step, line by line (the offsets of block_layout.h with the divisions
// hoisted: the packer of one weight at a time, bq_lo_offset per code, took 15 of the 19 s that loading
// Qwen2.5-Coder-1.5B Q4_K_M took on a 2-core Xeon). Every byte of the row's lanes is written once; the padding
// rows of the last tile stay as the zero-initialised buffer has them.
void pack_block(const BlockWeights& w, uint8_t* base, int64_t n, int64_t s, const QBlock& b) {
  const BlockQuantSpec& sp = w.spec;
  const int64_t r = n % kQTile, t = n / kQTile, Tp = w.panel_tiles(t), tt = t % kQPanel;
  int bad = 0;
  for (int64_t k = 0; k < sp.block; ++k) bad |= b.u[k] >> sp.bits;
  if (bad != 0) {
    for (int64_t k = 0; k < sp.block; ++k)
      if (b.u[k] >> sp.bits)
        fail("block format ", weight_format_name(w.format), ": code ", int{b.u[k]}, " of row ", n, " is out of range");
  }
  uint8_t* rec = base + (w.step(t, s) - w.data);
  const int64_t lol = bq_lo_lines(w), sub_bytes = bq_sub_bytes(w) * Tp;
  for (int64_t j = 0; j < sp.subs(); ++j) {
    uint8_t* sj = rec + j * sub_bytes;
    const uint8_t* u = b.u + j * sp.sub;  // the sub-block's codes
    for (int64_t l = 0; l < lol; ++l) {
      uint8_t* line = sj + (l * Tp + tt) * 64 + r * 4;
      for (int i = 0; i < 4; ++i)
        line[i] = sp.bits == 8 ? u[4 * l + i]
                               : static_cast<uint8_t>((u[8 * l + i] & 15) | (u[8 * l + 4 + i] & 15) << 4);
    }
    if (sp.bits == 5 || sp.bits == 6) {  // the hi line: bit 4 (or bits 4, 5) of u[4q + i] at bit q (or 2q)
      uint8_t* hi = sj + (lol * Tp + tt) * 64 + r * 4;
      const int per = sp.bits == 5 ? 1 : 2;
      for (int i = 0; i < 4; ++i) {
        int v = 0;
        for (int q = 0; q < 8 / per; ++q) v |= (u[4 * q + i] >> 4) << (per * q);
        hi[i] = static_cast<uint8_t>(v);
      }
    }
    if (sp.has_scale) {
      rec[bq_sc_offset(w, t, r, j)] = static_cast<uint8_t>(b.sc[j]);
      if (sp.has_min) rec[bq_mc_offset(w, t, r, j)] = b.mc[j];
    }
  }
  std::memcpy(rec + bq_d_offset(w, t, r), &b.d, 2);
  if (sp.has_min) std::memcpy(rec + bq_dm_offset(w, t, r), &b.dm, 2);
}

}  // namespace

QuantTensor make_block_weight(const OpContext& ctx, WeightFormat fmt, int64_t N, int64_t K,
                              const std::function<void(int64_t, int64_t, QBlock*)>& rows, int64_t chunk_rows) {
  const BlockQuantSpec& sp = block_spec(fmt);
  if (N <= 0 || K <= 0 || K % sp.block != 0)
    fail("make_block_weight: a ", weight_format_name(fmt), " weight needs K a multiple of ", sp.block, "; found [", N,
         ", ", K, "]");
  QuantTensor q;
  q.format = fmt;
  q.rows = N;
  q.cols = K;
  BlockWeights w;
  w.format = fmt;
  w.spec = sp;
  w.N = N;
  w.K = K;
  w.n_blocks = K / sp.block;
  w.n_tiles = q_tiles(N);
  q.data = Tensor::uninitialized(DType::kU8, {w.n_tiles, w.tile_bytes()});  // zeroed below, panel by panel
  uint8_t* base = q.data.mutable_ptr<uint8_t>();
  w.data = base;
  const int64_t nb = w.n_blocks;
  chunk_rows = std::max<int64_t>(kQTile, chunk_rows / kQTile * kQTile);
  // Threads take whole panels, a contiguous byte range each, which they zero (the padding rows of the last tile
  // stay so) and fill, decoding their own rows chunk by chunk into a buffer that stays in cache. Decoding in the
  // calling thread into one buffer per weight (2x the packed bytes, fresh pages every time) was a third of the
  // load time once packing was fast, and the first touch of the pages from one thread a quarter.
  ctx.pool->parallel_for_grain(w.n_tiles, kQPanel, [&](int64_t t0, int64_t t1) {
    std::memset(base + t0 * w.tile_bytes(), 0, (t1 - t0) * w.tile_bytes());
    std::vector<QBlock> buf;
    for (int64_t r0 = t0 * kQTile; r0 < std::min(N, t1 * kQTile); r0 += chunk_rows) {
      const int64_t r1 = std::min({N, r0 + chunk_rows, t1 * kQTile});
      buf.resize((r1 - r0) * nb);
      rows(r0, r1, buf.data());
      for (int64_t n = r0; n < r1; ++n)
        for (int64_t s = 0; s < nb; ++s) pack_block(w, base, n, s, buf[(n - r0) * nb + s]);
    }
  });
  return q;
}

void block_dequantize_row(const QuantTensor& w, int64_t n, float* out) {
  const BlockWeights b = block_weights(w);
  for (int64_t s = 0; s < b.n_blocks; ++s) qblock_values(b.spec, bq_block(b, n, s), out + s * b.spec.block);
}

namespace {

// Rows m0 .. m0 + mb - 1 of src [M, n] into dst at m0 * n as [n][mb].
template <class E>
void interleave_rows(const E* src, int64_t n, int64_t m0, int64_t mb, E* dst) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t m = 0; m < mb; ++m) dst[m0 * n + i * mb + m] = src[(m0 + m) * n + i];
}

}  // namespace

void interleave_block_acts(const BlockActs& a, int64_t K, int64_t S, int mb, int64_t m0, int64_t m1, int8_t* q,
                           float* d, int32_t* sums, float* csums) {
  const int64_t KS = K / S, KA = K / kBlockActs;
  for (int64_t b = m0; b < m1; b += mb) {
    const int64_t n = std::min<int64_t>(mb, a.M - b);
    // q moves in 4-code units (int32), the unit the kernels broadcast.
    interleave_rows<int32_t>(reinterpret_cast<const int32_t*>(a.q), K / 4, b, n, reinterpret_cast<int32_t*>(q));
    interleave_rows(a.sums, KS, b, n, sums);
    interleave_rows(a.csums, KS, b, n, csums);
    interleave_rows(a.d, KA, b, n, d);
  }
}

void block_linear(const OpContext& ctx, const float* x, const QuantTensor& w, const float* bias, float* y, int64_t M) {
  const BlockWeights b = block_weights(w);
  if (ctx.k->gemm_block == nullptr)
    fail("linear: the ", ctx.k->isa, " kernel table has no ", weight_format_name(w.format), " GEMM");
  const int64_t K = w.cols, N = w.rows, A = kBlockActs, S = b.spec.sub;
  std::vector<int8_t> xq(M * K);             // [M, K]
  std::vector<float> xd(M * (K / A));        // [M, K / 32]
  std::vector<int32_t> xs(M * (K / S));      // [M, K / S]
  std::vector<float> xc(M * (K / S));        // [M, K / S]
  auto quantize = [&](int64_t m0, int64_t m1) {
    ctx.k->quantize_acts_block(x + m0 * K, m1 - m0, K, static_cast<int>(S), xq.data() + m0 * K,
                               xd.data() + m0 * (K / A), xs.data() + m0 * (K / S), xc.data() + m0 * (K / S));
  };
  // A few rows (decode, verification) take microseconds: quantized here rather than behind a pool barrier.
  if (M <= 4) quantize(0, M);
  else ctx.pool->parallel_for(M, quantize);
  BlockActs a{xq.data(), xd.data(), xs.data(), xc.data(), M};
  // The kernel's row interleave, made once here instead of in every tile range's call (4 per thread).
  const int mb = ctx.k->block_acts_interleave;
  std::vector<int8_t> iq;
  std::vector<float> id, ic;
  std::vector<int32_t> is;
  if (mb > 1 && M > 1) {
    iq.resize(xq.size()), id.resize(xd.size()), is.resize(xs.size()), ic.resize(xc.size());
    auto inter = [&](int64_t m0, int64_t m1) {
      interleave_block_acts(a, K, S, mb, m0, m1, iq.data(), id.data(), is.data(), ic.data());
    };
    if (M <= 4 * mb) inter(0, M);
    else ctx.pool->parallel_for_grain(M, mb, inter);
    a = BlockActs{iq.data(), id.data(), is.data(), ic.data(), M, mb};
  }
  // Threads split the weight in whole panels, each one contiguous stream (as for Q8_G128 / Q4_G128).
  ctx.pool->parallel_for_grain(b.n_tiles, kQPanel, [&](int64_t t0, int64_t t1) {
    ctx.k->gemm_block(a, b, y, t0, t1);
    if (bias == nullptr) return;
    const int64_t n0 = t0 * kQTile, n1 = std::min(N, t1 * kQTile);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = n0; n < n1; ++n) y[m * N + n] += bias[n];
  });
}

}  // namespace blockspec
