// Microbenchmarks of linear(QuantTensor) at Qwen2.5-1.5B shapes, for every
// weight format, decode (M = 1) to prefill (M = 512), on 1 and 2 threads.
//
// Counters: bytes_per_second = weight bytes read per call (QuantTensor::nbytes,
// codes + scales + corrections) per second, to compare against the machine's
// read bandwidth (~33 GB/s with 2 threads on the 2-core EPYC of design.md);
// MAC/s = M * N * K multiply-accumulates per second, to compare against the
// int8 vpdpbusd peak (vnni_peak: ~445 GMAC/s with 2 threads on the Zen 4 EPYC of design.md). read_bw measures that
// roofline in the same run; quote kernel GB/s as a fraction of it. On a shared
// machine (other jobs on the cores) real time is inflated by time slicing;
// cpu_time of the 1-thread runs is then the steadier per-core figure.
//
//   ninja -C build kernels_bench
//   build/kernels_bench --benchmark_filter='q8/.*/M:1/' --benchmark_repetitions=5
//       (add --benchmark_report_aggregates_only=true for medians only)
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

#include "base/memory_bandwidth.h"
#include "kernels/block_quant.h"
#include "kernels/quant.h"
#include "train/gemm.h"

namespace blockspec {
namespace {

struct Shape2 {
  const char* name;
  int64_t K, N;
};
constexpr Shape2 kShapes[] = {{"up", 1536, 8960}, {"down", 8960, 1536}, {"qo", 1536, 1536}};
constexpr WeightFormat kFormats[] = {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kQ8_G128,
                                     WeightFormat::kQ4_G128, WeightFormat::kFP8_E4M3, WeightFormat::kNVFP4,
                                     WeightFormat::kMXFP4,    WeightFormat::kQ4_0,  WeightFormat::kQ4_1,
                                     WeightFormat::kQ8_0,     WeightFormat::kQ4_K,  WeightFormat::kQ5_K,
                                     WeightFormat::kQ6_K};

Tensor random_weight(int64_t N, int64_t K) {
  Tensor w(DType::kF32, {N, K});
  std::mt19937 g(1);
  std::normal_distribution<float> d(0.f, 0.02f);
  float* p = w.mutable_ptr<float>();
  for (int64_t i = 0; i < N * K; ++i) p[i] = d(g);
  return w;
}

// Random GGUF blocks (every field within its range) for the block formats.
QuantTensor random_block_weight(const OpContext& ctx, WeightFormat fmt, int64_t N, int64_t K) {
  const BlockQuantSpec& sp = block_spec(fmt);
  return make_block_weight(ctx, fmt, N, K, [&](int64_t r0, int64_t r1, QBlock* out) {
    std::mt19937 g(static_cast<uint32_t>(r0 + 1));  // per chunk: called from several threads at once
    std::uniform_int_distribution<int> code(0, (1 << sp.bits) - 1), small(0, 63);
    for (int64_t i = 0; i < (r1 - r0) * (K / sp.block); ++i) {
      QBlock& b = out[i];
      b.d = f32_to_f16(0.001f);
      b.dm = f32_to_f16(-0.001f);
      for (int j = 0; j < sp.subs(); ++j) {
        b.sc[j] = static_cast<int8_t>(small(g) % (sp.bits == 2 ? 16 : 32));
        b.mc[j] = static_cast<uint8_t>(small(g) % 16);
      }
      for (int k = 0; k < sp.block; ++k) b.u[k] = static_cast<uint8_t>(code(g));
    }
  });
}

// BLOCKSPEC_ISA=ref|avx2|avx512 forces a kernel level, as in the CLI.
KernelTable bench_kernels() {
  const char* e = std::getenv("BLOCKSPEC_ISA");
  return select_kernels(e != nullptr ? e : "");
}

Tensor deep_copy(const Tensor& t) {
  if (t.data() == nullptr) return t;  // absent buffer (scales of a float format)
  Tensor c(t.dtype(), t.shape());
  std::memcpy(c.mutable_data(), t.data(), t.nbytes());
  return c;
}

// Enough copies of one weight to fill twice the last-level cache (at least 128 MB): iterations cycle through
// them so each call reads its weight from DRAM, as a decode step over a whole model does, and not from an L3
// that one 13.8 MB matrix fits in (32 MB on the EPYC of design.md, 480 MB on some Xeons here).
// BS_BENCH_ROTATE_MB=0 keeps one copy instead, to see the kernels' compute ceiling with cache-resident weights.
size_t rotation_bytes() {
  const char* e = std::getenv("BS_BENCH_ROTATE_MB");
  if (e != nullptr) return std::strtoull(e, nullptr, 10) << 20;
  return std::max<size_t>(size_t{128} << 20, 2 * static_cast<size_t>(last_level_cache_bytes()));
}
const size_t kReadProbeBytes = std::max<size_t>(size_t{128} << 20, 2 * static_cast<size_t>(last_level_cache_bytes()));

// Weights quantized once per (format, shape) and shared by all M and thread
// counts: quantizing 13.8 M weights per benchmark would dominate the run.
class WeightCache {
 public:
  const std::vector<QuantTensor>& get(WeightFormat fmt, const Shape2& s) {
    auto key = std::make_tuple(static_cast<int>(fmt), s.K, s.N);
    if (key == key_) return copies_;
    copies_.clear();  // one (format, shape) at a time: benchmarks run grouped by it
    KernelTable kt = bench_kernels();
    ThreadPool pool(0);
    OpContext ctx{&kt, &pool};
    std::vector<QuantTensor> copies{is_block_format(fmt) ? random_block_weight(ctx, fmt, s.N, s.K)
                                                         : make_weight(ctx, random_weight(s.N, s.K), fmt)};
    const size_t n_copies = std::max<size_t>(1, (rotation_bytes() + copies[0].nbytes() - 1) / copies[0].nbytes());
    while (copies.size() < n_copies) {
      QuantTensor c = copies[0];
      c.data = deep_copy(c.data);
      c.scales = deep_copy(c.scales);
      c.aux = deep_copy(c.aux);
      copies.push_back(std::move(c));
    }
    key_ = key;
    copies_ = std::move(copies);
    return copies_;
  }

 private:
  std::tuple<int, int64_t, int64_t> key_{-1, 0, 0};
  std::vector<QuantTensor> copies_;
};

void bench_linear(benchmark::State& state, WeightCache* cache, WeightFormat fmt, Shape2 s) {
  const int64_t M = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const std::vector<QuantTensor>& ws = cache->get(fmt, s);
  KernelTable kt = bench_kernels();
  ThreadPool pool(threads);
  OpContext ctx{&kt, &pool};
  std::vector<float> x(M * s.K), y(M * s.N);  // [M, K], [M, N]
  std::mt19937 g(2);
  std::normal_distribution<float> d(0.f, 1.f);
  for (auto& v : x) v = d(g);
  size_t i = 0;
  for (auto _ : state) {
    linear(ctx, x.data(), ws[i], nullptr, y.data(), M);
    i = i + 1 == ws.size() ? 0 : i + 1;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(ws[0].nbytes()));
  state.counters["MAC/s"] = benchmark::Counter(static_cast<double>(M) * s.N * s.K,
                                               benchmark::Counter::kIsIterationInvariantRate,
                                               benchmark::Counter::kIs1000);
  state.SetLabel(kt.isa);
}

// The drafter trainer's products (train/gemm.h gemm_nt) at its shapes, M = 1024 rows of a step: f32, against
// --matmul bf16 (OpContext::bf16_train_products: both operands rounded each call, then KernelTable::matmul_bf16_dp,
// or the bf16-weight f32 kernel where the CPU has no AVX-512 BF16; the label says which).
void bench_train_gemm(benchmark::State& state, bool bf16, Shape2 s) {
  const int64_t M = 1024;
  const int threads = static_cast<int>(state.range(0));
  KernelTable kt = bench_kernels();
  ThreadPool pool(threads);
  OpContext ctx{&kt, &pool};
  ctx.bf16_train_products = bf16;
  std::vector<float> x(M * s.K), w(s.N * s.K), y(M * s.N);
  std::mt19937 g(2);
  std::normal_distribution<float> d(0.f, 1.f);
  for (auto& v : x) v = d(g);
  for (auto& v : w) v = d(g);
  for (auto _ : state) {
    gemm_nt(ctx, x.data(), w.data(), M, s.K, s.N, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["MAC/s"] = benchmark::Counter(static_cast<double>(M) * s.N * s.K,
                                               benchmark::Counter::kIsIterationInvariantRate,
                                               benchmark::Counter::kIs1000);
  state.SetLabel(std::string(kt.isa) + (bf16 ? (kt.matmul_bf16_dp != nullptr ? " bf16dp" : " bf16 on f32 FMAs") : ""));
}

// The roofline in the same run: a streaming read of kReadProbeBytes with the loads decode uses
// (KernelTable::read_stream), split between the threads like linear() does.
void bench_read_bandwidth(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  Tensor buf(DType::kU8, {static_cast<int64_t>(kReadProbeBytes)});
  std::memset(buf.mutable_data(), 1, kReadProbeBytes);
  ThreadPool pool(threads);
  const KernelTable kt = select_kernels("auto");  // the loads decode uses (KernelTable::read_stream)
  const int64_t n_lines = static_cast<int64_t>(kReadProbeBytes / 4096);  // 4 KB chunks
  for (auto _ : state) {
    pool.parallel_for(n_lines, [&](int64_t b, int64_t e) {
      benchmark::DoNotOptimize(kt.read_stream(buf.ptr<uint8_t>() + b * 4096, (e - b) * 4096));
    });
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(kReadProbeBytes));
}

// The int8 compute roof in the same run: 8 independent vpdpbusd chains on
// registers (no memory traffic), 64 MACs per instruction.
// 12 independent accumulators: vpdpbusd has a latency of 4-5 cycles, and on cores that issue it on two ports (the
// Intel Xeon of session 39: 5.5 G/s per core with 12 chains) 8 chains measured the latency instead (3.95 G/s).
__attribute__((target("avx512f,avx512vnni"))) int32_t vnni_chains(int64_t iters) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0,
          a9 = a0, a10 = a0, a11 = a0;
  const __m512i x = _mm512_set1_epi8(3), w = _mm512_set1_epi8(-2);
  // Inline asm with named registers: GCC 12 copies accumulators around the
  // intrinsic, which would measure moves instead of vpdpbusd.
  for (int64_t i = 0; i < iters; ++i) {
    asm volatile(
        "vpdpbusd %12, %13, %0\n\tvpdpbusd %12, %13, %1\n\tvpdpbusd %12, %13, %2\n\tvpdpbusd %12, %13, %3\n\t"
        "vpdpbusd %12, %13, %4\n\tvpdpbusd %12, %13, %5\n\tvpdpbusd %12, %13, %6\n\tvpdpbusd %12, %13, %7\n\t"
        "vpdpbusd %12, %13, %8\n\tvpdpbusd %12, %13, %9\n\tvpdpbusd %12, %13, %10\n\tvpdpbusd %12, %13, %11"
        : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9),
          "+v"(a10), "+v"(a11)
        : "v"(w), "v"(x));
  }
  __m512i s = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                               _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
  s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11)));
  return _mm512_reduce_add_epi32(s);
}

void bench_vnni_peak(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  ThreadPool pool(threads);
  constexpr int64_t kIters = 1 << 18;
  for (auto _ : state) {
    pool.parallel_for(threads, [&](int64_t, int64_t) { benchmark::DoNotOptimize(vnni_chains(kIters)); });
  }
  state.counters["MAC/s"] = benchmark::Counter(static_cast<double>(threads) * kIters * 12 * 64,
                                               benchmark::Counter::kIsIterationInvariantRate,
                                               benchmark::Counter::kIs1000);
}

}  // namespace
}  // namespace blockspec

int main(int argc, char** argv) {
  using namespace blockspec;
  WeightCache cache;  // lives for the whole run; benchmarks hold a pointer to it
  if (__builtin_cpu_supports("avx2"))
    benchmark::RegisterBenchmark("read_bw", bench_read_bandwidth)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();
  if (__builtin_cpu_supports("avx512vnni"))
    benchmark::RegisterBenchmark("vnni_peak", bench_vnni_peak)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();
  for (const Shape2& s : kShapes)
    for (bool bf16 : {false, true}) {
      std::string name = std::string("train_gemm_") + (bf16 ? "bf16" : "f32") + "/" + s.name + "_K" +
                         std::to_string(s.K) + "_N" + std::to_string(s.N) + "_M1024";
      benchmark::RegisterBenchmark(name.c_str(), bench_train_gemm, bf16, s)
          ->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
    }
  for (WeightFormat fmt : kFormats)
    for (const Shape2& s : kShapes) {
      std::string name = std::string(weight_format_name(fmt)) + "/" + s.name + "_K" + std::to_string(s.K) +
                         "_N" + std::to_string(s.N);
      benchmark::RegisterBenchmark(name.c_str(), bench_linear, &cache, fmt, s)
          ->ArgNames({"M", "threads"})
          ->ArgsProduct({{1, 2, 3, 4, 5, 6, 7, 8, 16, 64, 512}, {1, 2}})
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
