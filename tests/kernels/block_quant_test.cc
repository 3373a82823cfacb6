// GGUF block formats in the kernels (kernels/block_layout.h): packing keeps every value (bitwise against the
// format's value definition), every ISA's GEMM equals the scalar twin bit for bit over odd shapes, M and
// thread splits, and the GEMM is the dot product of the dequantized weights with the int8 activations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "base/error.h"
#include "kernels/block_layout.h"
#include "kernels/block_quant.h"
#include "kernels/kernel_table.h"
#include "kernels/quant.h"
#include "kernels/quant_rows.h"
#include "tensor/dtype.h"
#include "randv.h"

namespace blockspec {
namespace {

const WeightFormat kFormats[] = {WeightFormat::kQ4_0, WeightFormat::kQ4_1, WeightFormat::kQ5_0, WeightFormat::kQ5_1,
                                 WeightFormat::kQ8_0, WeightFormat::kQ2_K, WeightFormat::kQ3_K, WeightFormat::kQ4_K,
                                 WeightFormat::kQ5_K, WeightFormat::kQ6_K};

// Random blocks within each field's range: [N, K / B] in (row, block) order.
std::vector<QBlock> random_blocks(WeightFormat f, int64_t N, int64_t K, uint32_t seed) {
  const BlockQuantSpec& s = block_spec(f);
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> code(0, (1 << s.bits) - 1), byte(0, 255), small(0, 63);
  std::uniform_real_distribution<float> mag(0.001f, 0.05f);
  std::vector<QBlock> v(N * (K / s.block));
  for (QBlock& b : v) {
    b.d = f32_to_f16(mag(g));
    b.dm = s.has_min ? f32_to_f16((f == WeightFormat::kQ4_1 || f == WeightFormat::kQ5_1 ? 1.f : -1.f) * mag(g)) : 0;
    for (int j = 0; j < s.subs() && s.has_scale; ++j) {
      b.sc[j] = static_cast<int8_t>(f == WeightFormat::kQ6_K   ? byte(g) - 128
                                    : f == WeightFormat::kQ3_K ? small(g) - 32
                                    : f == WeightFormat::kQ2_K ? small(g) % 16
                                                               : small(g));
      if (s.has_min) b.mc[j] = static_cast<uint8_t>(f == WeightFormat::kQ2_K ? small(g) % 16 : small(g));
    }
    for (int k = 0; k < s.block; ++k) b.u[k] = static_cast<uint8_t>(code(g));
  }
  return v;
}

QuantTensor pack(const OpContext& ctx, WeightFormat f, int64_t N, int64_t K, const std::vector<QBlock>& blocks) {
  const int64_t nb = K / block_spec(f).block;
  // Small chunks, so the chunked path is exercised too.
  return make_block_weight(ctx, f, N, K, [&](int64_t r0, int64_t r1, QBlock* out) {
    std::copy(blocks.begin() + r0 * nb, blocks.begin() + r1 * nb, out);
  }, 16);
}

struct Fixture {
  KernelTable ref = select_kernels("ref");
  ThreadPool pool{2};
  OpContext ref_ctx{&ref, &pool};
};

int64_t k_of(WeightFormat f) { return block_spec(f).block == 256 ? 768 : 576; }

TEST(BlockQuant, PackingKeepsEveryValue) {
  Fixture fx;
  const int64_t N = 37;
  const int64_t file_bytes[] = {18, 20, 22, 24, 34, 84, 110, 144, 176, 210};  // per block, ggml-common.h
  for (size_t fi = 0; fi < std::size(kFormats); ++fi) {
    const WeightFormat f = kFormats[fi];
    const BlockQuantSpec& s = block_spec(f);
    const int64_t K = k_of(f), nb = K / s.block;
    const auto blocks = random_blocks(f, N, K, 7);
    const QuantTensor q = pack(fx.ref_ctx, f, N, K, blocks);
    const Tensor d = dequantize_weight(q);
    std::vector<float> want(s.block), row(K);
    std::vector<int32_t> ids(N);
    for (int64_t n = 0; n < N; ++n) ids[n] = static_cast<int32_t>(n);
    std::vector<float> rows(N * K);
    dequantize_rows(q, ids.data(), N, rows.data());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t b = 0; b < nb; ++b) {
        qblock_values(s, blocks[n * nb + b], want.data());
        for (int64_t k = 0; k < s.block; ++k) {
          const float got = d.ptr<float>()[n * K + b * s.block + k];
          ASSERT_EQ(std::memcmp(&got, &want[k], 4), 0) << weight_format_name(f) << " n=" << n << " k=" << b * s.block + k;
          ASSERT_EQ(std::memcmp(&rows[n * K + b * s.block + k], &want[k], 4), 0) << weight_format_name(f);
        }
      }
    // The record layout is as large as the file's blocks (K-quants with scale/min pairs: 4 bytes per row more;
    // Q2_K / Q3_K codes take a nibble).
    const int64_t fb = file_bytes[fi];
    const int64_t per_row = q.data.nbytes() / (q_tiles(N) * kQTile) / nb;
    if (s.bits >= 4) EXPECT_LE(per_row, fb + (s.has_scale && s.has_min ? 4 : 0)) << weight_format_name(f);
  }
}

// Every ISA's kernel table, and for each every block GEMM variant this CPU can run (dispatch picks one by CPU vendor,
// the software prefetch at small M or not, and for the AVX2 table by AVX-VNNI).
std::vector<std::pair<std::string, KernelTable>> block_tables() {
  using Gemm = decltype(KernelTable::gemm_block);
  const bool avxvnni = __builtin_cpu_supports("avxvnni");
  std::vector<std::pair<std::string, KernelTable>> v;
  for (const std::string& isa : available_isas()) {
    const KernelTable kt = select_kernels(isa);
    v.emplace_back(isa, kt);
    std::vector<std::pair<std::string, Gemm>> variants;
    if (kt.gemm_block == &gemm_block_avx512vnni || kt.gemm_block == &gemm_block_avx512vnni_prefetch)
      variants = {{"vnni", &gemm_block_avx512vnni}, {"vnni prefetch", &gemm_block_avx512vnni_prefetch}};
    if (isa == "avx2") {
      variants = {{"avx2", &gemm_block_avx2}, {"avx2 prefetch", &gemm_block_avx2_prefetch}};
      if (avxvnni)
        variants.insert(variants.end(),
                        {{"avxvnni", &gemm_block_avxvnni}, {"avxvnni prefetch", &gemm_block_avxvnni_prefetch}});
    }
    for (const auto& [name, g] : variants) {
      if (g == kt.gemm_block) continue;
      KernelTable other = kt;
      other.gemm_block = g;
      v.emplace_back(isa + " (" + name + ")", other);
    }
  }
  return v;
}

TEST(BlockQuant, EveryIsaMatchesTheScalarTwinBitwise) {
  Fixture fx;
  for (const auto& [isa, kt] : block_tables()) {
    if (isa == "ref") continue;
    ASSERT_NE(kt.gemm_block, nullptr) << isa;  // AVX-512 VNNI: vpdpbusd; AVX2 (and AVX-512 without VNNI): vpmaddubsw
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      OpContext ctx{&kt, &pool};
      for (WeightFormat f : kFormats) {
        for (int64_t N : {5, 16, 40, 70, 131}) {
          const int64_t K = N == 70 ? block_spec(f).block : k_of(f);
          const QuantTensor q = pack(fx.ref_ctx, f, N, K, random_blocks(f, N, K, static_cast<uint32_t>(N)));
          for (int64_t M : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 33}) {
            auto x = randv(M * K, static_cast<uint32_t>(M + 100), 1.f);
            if (M > 2) x[K + 3] = 40.f;  // an outlier in row 1
            std::vector<float> bias = randv(N, 3, 0.1f), y(M * N), yr(M * N);
            linear(ctx, x.data(), q, bias.data(), y.data(), M);
            linear(fx.ref_ctx, x.data(), q, bias.data(), yr.data(), M);
            ASSERT_EQ(std::memcmp(y.data(), yr.data(), y.size() * 4), 0)
                << isa << " " << weight_format_name(f) << " N=" << N << " K=" << K << " M=" << M << " t=" << threads;
          }
        }
      }
    }
  }
}

// A kernel that reads activation rows interleaved (KernelTable::block_acts_interleave; block_linear prepares
// them once per linear) gives the twin's result bit for bit from either layout, over whole panels and over a
// range of tiles as the pool hands them out.
TEST(BlockQuant, KernelTakesRowMajorOrInterleavedActivations) {
  Fixture fx;
  int checked = 0;
  for (const auto& [isa, kt] : block_tables()) {
    const int mb = kt.block_acts_interleave;
    if (mb <= 1) continue;
    ++checked;
    for (WeightFormat f : {WeightFormat::kQ4_0, WeightFormat::kQ4_K, WeightFormat::kQ6_K}) {
      const int64_t N = 131, K = k_of(f), S = block_spec(f).sub, KS = K / S, KA = K / kBlockActs;
      const QuantTensor w = pack(fx.ref_ctx, f, N, K, random_blocks(f, N, K, 9));
      const BlockWeights b = block_weights(w);
      for (int64_t M : {2, 5, 9, 17}) {
        const auto x = randv(M * K, static_cast<uint32_t>(M + 40), 1.f);
        std::vector<int8_t> q(M * K), iq(M * K);
        std::vector<float> d(M * KA), c(M * KS), id(M * KA), ic(M * KS);
        std::vector<int32_t> sm(M * KS), is(M * KS);
        quantize_acts_block_ref(x.data(), M, K, static_cast<int>(S), q.data(), d.data(), sm.data(), c.data());
        const BlockActs rows{q.data(), d.data(), sm.data(), c.data(), M};
        interleave_block_acts(rows, K, S, mb, 0, M, iq.data(), id.data(), is.data(), ic.data());
        const BlockActs inter{iq.data(), id.data(), is.data(), ic.data(), M, mb};
        for (auto [t0, t1] : {std::pair<int64_t, int64_t>{0, b.n_tiles}, {kQPanel, 2 * kQPanel}}) {
          std::vector<float> y0(M * N, 0.f), y1(M * N, 0.f), y2(M * N, 0.f);
          gemm_block_ref(rows, b, y0.data(), t0, t1);
          kt.gemm_block(rows, b, y1.data(), t0, t1);
          kt.gemm_block(inter, b, y2.data(), t0, t1);
          const std::string at = isa + " " + weight_format_name(f) + " M=" + std::to_string(M) + " tiles " +
                                 std::to_string(t0) + ".." + std::to_string(t1);
          EXPECT_EQ(std::memcmp(y1.data(), y0.data(), y0.size() * 4), 0) << "row-major " << at;
          EXPECT_EQ(std::memcmp(y2.data(), y0.data(), y0.size() * 4), 0) << "interleaved " << at;
        }
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no kernel of this CPU reads interleaved activations (AVX-512 VNNI does)";
}

// The activation quantizer of every ISA equals the scalar twin bit for bit: codes, scales, sub-block sums and
// their scaled copies, with values that round exactly half-way (x * 127 / amax = k + 0.5), zeros, an all-zero
// block and outliers.
TEST(BlockQuant, ActivationQuantizerMatchesTheTwinBitwise) {
  for (const std::string& isa : available_isas()) {
    if (isa == "ref") continue;
    const KernelTable kt = select_kernels(isa);
    for (int S : {16, 32}) {
      for (int64_t K : {32, 64, 256}) {
        for (int64_t M : {1, 3, 5}) {
          auto x = randv(M * K, static_cast<uint32_t>(K * 7 + M + S), 2.f);
          x[0] = 127.f;  // amax 127 in block 0 of row 0: x * inv = x exactly, so halves stay halves
          x[1] = 2.5f, x[2] = -3.5f, x[3] = 0.5f, x[4] = -0.5f, x[5] = 0.f;
          if (K >= 64) std::fill(x.begin() + 32, x.begin() + 64, 0.f);  // a block of zeros
          if (M > 1) x[K + 7] = -1e4f;
          std::vector<int8_t> q(M * K), qr(M * K);
          std::vector<float> d(M * K / 32), dr(M * K / 32), c(M * K / S), cr(M * K / S);
          std::vector<int32_t> sm(M * K / S), smr(M * K / S);
          kt.quantize_acts_block(x.data(), M, K, S, q.data(), d.data(), sm.data(), c.data());
          quantize_acts_block_ref(x.data(), M, K, S, qr.data(), dr.data(), smr.data(), cr.data());
          const std::string at = isa + " S=" + std::to_string(S) + " K=" + std::to_string(K) + " M=" + std::to_string(M);
          EXPECT_EQ(q, qr) << at;
          EXPECT_EQ(std::memcmp(d.data(), dr.data(), d.size() * 4), 0) << at;
          EXPECT_EQ(sm, smr) << at;
          EXPECT_EQ(std::memcmp(c.data(), cr.data(), c.size() * 4), 0) << at;
        }
      }
    }
  }
}

// The AVX2 kernel sums in int16 (vpmaddubsw, saturating, then vpaddw over several quads; kernels/x86/block_avx2.cc):
// rows of all-largest codes against activation codes all +127 or all -127 reach each int16 bound (Q4: 30480, Q5:
// 31496, Q6_K: 32004; Q8_0's |u - 128| = 128 at code 0: 32512), and must still equal the twin bit for bit.
TEST(BlockQuant, Avx2SumsDoNotSaturate) {
  const auto isas = available_isas();
  if (std::find(isas.begin(), isas.end(), "avx2") == isas.end()) GTEST_SKIP() << "no AVX2 on this CPU";
  Fixture fx;
  KernelTable kt = select_kernels("avx2");
  ThreadPool pool(1);
  OpContext ctx{&kt, &pool};
  // The vpmaddubsw kernel, and the AVX-VNNI one (int32 sums; the same extremes) where the CPU has it.
  std::vector<decltype(kt.gemm_block)> gemms = {&gemm_block_avx2};
  if (__builtin_cpu_supports("avxvnni")) gemms.push_back(&gemm_block_avxvnni);
  for (auto gemm : gemms)
  for (WeightFormat f : kFormats) {
    kt.gemm_block = gemm;
    const BlockQuantSpec& s = block_spec(f);
    const int umax = (1 << s.bits) - 1;
    for (int64_t N : {7, 37}) {
      const int64_t K = k_of(f);
      auto blocks = random_blocks(f, N, K, static_cast<uint32_t>(N + 1));
      // Row n: all umax, all 0, alternating umax / 0, or random codes with umax and 0 at every tenth input.
      for (int64_t n = 0; n < N; ++n)
        for (int64_t b = 0; b < K / s.block; ++b)
          for (int k = 0; k < s.block; ++k) {
            uint8_t& u = blocks[n * (K / s.block) + b].u[k];
            const int pattern = static_cast<int>(n % 4);
            if (pattern == 0) u = static_cast<uint8_t>(umax);
            if (pattern == 1) u = 0;
            if (pattern == 2) u = static_cast<uint8_t>(k % 2 ? umax : 0);
            if (pattern == 3 && k % 10 == 0) u = static_cast<uint8_t>(k % 20 ? umax : 0);
          }
      const QuantTensor q = pack(fx.ref_ctx, f, N, K, blocks);
      for (int64_t M : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17}) {
        // Row m: codes all +127, all -127, alternating +-127, or random with +-127 at every seventh input.
        auto x = randv(M * K, static_cast<uint32_t>(M), 1.f);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t k = 0; k < K; ++k) {
            float& v = x[m * K + k];
            const int pattern = static_cast<int>(m % 4);
            if (pattern == 0) v = 1.f;
            if (pattern == 1) v = -1.f;
            if (pattern == 2) v = k % 2 ? -1.f : 1.f;
            if (pattern == 3 && k % 7 == 0) v = k % 14 ? -8.f : 8.f;
          }
        std::vector<float> y(M * N), yr(M * N);
        linear(ctx, x.data(), q, nullptr, y.data(), M);
        linear(fx.ref_ctx, x.data(), q, nullptr, yr.data(), M);
        ASSERT_EQ(std::memcmp(y.data(), yr.data(), y.size() * 4), 0)
            << weight_format_name(f) << " N=" << N << " K=" << K << " M=" << M << " avxvnni "
            << (gemm == &gemm_block_avxvnni);
      }
    }
  }
}

TEST(BlockQuant, GemmIsTheDotOfDequantizedWeightsAndInt8Activations) {
  Fixture fx;
  const int64_t N = 21, M = 3;
  for (WeightFormat f : kFormats) {
    const int64_t K = k_of(f), B = kBlockActs;
    const QuantTensor q = pack(fx.ref_ctx, f, N, K, random_blocks(f, N, K, 11));
    const Tensor w = dequantize_weight(q);
    const auto x = randv(M * K, 5, 1.f);
    std::vector<float> y(M * N);
    linear(fx.ref_ctx, x.data(), q, nullptr, y.data(), M);
    // The activations as the kernel sees them: per block of 32, dx = amax / 127, codes rounded half to even.
    std::vector<double> xd(M * K);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t b = 0; b < K / B; ++b) {
        float amax = 0.f;
        for (int64_t k = b * B; k < (b + 1) * B; ++k) amax = std::max(amax, std::fabs(x[m * K + k]));
        for (int64_t k = b * B; k < (b + 1) * B; ++k)
          xd[m * K + k] = std::nearbyint(x[m * K + k] * (127.f / amax)) * static_cast<double>(amax / 127.f);
      }
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double ref = 0, mag = 0, exact = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double wv = w.ptr<float>()[n * K + k];
          ref += wv * xd[m * K + k];
          exact += wv * x[m * K + k];
          mag += std::fabs(wv * xd[m * K + k]);
        }
        // f32 rounding of the per-block terms only.
        EXPECT_NEAR(y[m * N + n], ref, 1e-5 * mag + 1e-6) << weight_format_name(f) << " m=" << m << " n=" << n;
        // and int8 activation rounding: |dx| / 2 per input at most.
        EXPECT_NEAR(y[m * N + n], exact, 0.03 * mag + 1e-4) << weight_format_name(f);
      }
  }
}

TEST(BlockQuant, RefusesWhatItCannotHold) {
  Fixture fx;
  EXPECT_THROW(make_block_weight(fx.ref_ctx, WeightFormat::kQ4_K, 4, 300, [](int64_t, int64_t, QBlock*) {}), Error);
  EXPECT_THROW(make_weight(fx.ref_ctx, Tensor(DType::kF32, {4, 256}), WeightFormat::kQ4_K), Error);
  {  // a kernel table without a block GEMM (the loader re-packs GGUF blocks as q8 for one): linear() refuses
    KernelTable kt = select_kernels("ref");
    kt.gemm_block = nullptr;
    OpContext ctx{&kt, &fx.pool};
    const QuantTensor q = pack(fx.ref_ctx, WeightFormat::kQ4_0, 16, 32, random_blocks(WeightFormat::kQ4_0, 16, 32, 1));
    std::vector<float> x(32), y(16);
    EXPECT_THROW(linear(ctx, x.data(), q, nullptr, y.data(), 1), Error);
  }
  QBlock bad;
  bad.u[0] = 16;  // a 5-bit code in a 4-bit format
  EXPECT_THROW(make_block_weight(fx.ref_ctx, WeightFormat::kQ4_0, 1, 32,
                                 [&](int64_t, int64_t, QBlock* out) { out[0] = bad; }),
               Error);
  // The same in the last row of a 256-row weight, packed by the pool's threads: an error, not a crash.
  EXPECT_THROW(make_block_weight(fx.ref_ctx, WeightFormat::kQ4_0, 256, 32,
                                 [&](int64_t r0, int64_t r1, QBlock* out) {
                                   for (int64_t r = r0; r < r1; ++r) out[r - r0] = r == 255 ? bad : QBlock{};
                                 }),
               Error);
}

}  // namespace
}  // namespace blockspec
