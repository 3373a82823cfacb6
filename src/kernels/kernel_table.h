// The per-ISA kernel table, filled once at start-up from CPUID (or forced by
// name for tests). Model code calls kernels only through ops.h, which takes a
// table; nothing here is global.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/block_layout.h"
#include "kernels/kv_kernels.h"
#include "kernels/fp_formats.h"
#include "kernels/gdn_kernel.h"
#include "kernels/quant_layout.h"

namespace blockspec {

struct KernelTable {
  const char* isa = "ref";
  // y[m, n0:n1] = x[m, :] . w[n, :] for m in [0, M)
  //   x: [M, K] f32   w: [N, K] (f32 or bf16 bits)   y: [M, N] f32 (row stride N)
  void (*matmul_f32)(const float* x, const float* w, float* y, int64_t M, int64_t K, int64_t N,
                     int64_t n0, int64_t n1) = nullptr;
  void (*matmul_bf16)(const float* x, const uint16_t* w, float* y, int64_t M, int64_t K, int64_t N,
                      int64_t n0, int64_t n1) = nullptr;
  // bf16 activations x [M, K] (bf16 bits) times bf16 weights w [N, K]: the
  // VDPBF16PS pair-FMA arithmetic of kernels/x86/bf16dp_avx512.cc. Used for
  // bf16 weights when activations are bf16 (--activations bf16); nullptr
  // where the CPU has no AVX-512 BF16 (then matmul_bf16 runs on the rounded x).
  void (*matmul_bf16_dp)(const uint16_t* x, const uint16_t* w, float* y, int64_t M, int64_t K, int64_t N,
                         int64_t n0, int64_t n1) = nullptr;
  float (*dot)(const float* a, const float* b, int64_t n) = nullptr;
  // Reads p[0, n) (n a multiple of 64, p 64-byte aligned) with this ISA's widest loads and returns a fold of
  // the bytes (the wrapping sum of its 64-bit words), so that the reads must happen: the memory-bandwidth
  // probe of `bench` (model/bandwidth_probe.h) streams with the loads decode uses.
  uint64_t (*read_stream)(const uint8_t* p, int64_t n) = nullptr;
  // y[i] += a * x[i]
  void (*axpy)(float a, const float* x, float* y, int64_t n) = nullptr;
  // out[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp_fixed(-gate[i])) * up[i]; under round_bf16
  // the quotient and the product are each rounded to bf16. exp_fixed (kernels/silu_exp.h) makes
  // every ISA bitwise equal to the scalar twin. out may alias gate. up == nullptr: out[i] = silu(gate[i]).
  void (*swiglu)(const float* gate, const float* up, float* out, int64_t n, bool round_bf16) = nullptr;
  // Softmax's exponentials: x[i] = exp_fixed(x[i] - m) for i < n, and their sum in double as 16 partial sums
  // (element i into partial i % 16, in order of i) added partial 0 to 15 in turn. Every ISA bitwise equal to the
  // scalar twin (kernels/silu_exp.h).
  double (*exp_sub_sum)(float* x, float m, int64_t n) = nullptr;

  // Integer formats (layouts and exact arithmetic in kernels/quant_layout.h).
  // Quantizes activation rows: x [M, K] f32 -> q [M, Kp] u8, scales [M, G] f32.
  void (*quantize_acts)(const float* x, int64_t M, int64_t K, uint8_t* q, float* scales) = nullptr;
  // The same with one scale per row (vLLM's dynamic per-token int8, what compressed-tensors W8A8 checkpoints
  // declare), written into each of the row's G scale slots. Scalar on every ISA: O(M K), noise next to the GEMM.
  void (*quantize_acts_token)(const float* x, int64_t M, int64_t K, uint8_t* q, float* scales) = nullptr;
  // y[m, n] for all m < a.M and rows n of weight tiles [tile0, tile1) (clipped
  // to N); y: [M, N] f32. tile0 is a multiple of kQPanel, tile1 too or n_tiles. One kernel per format serves decode (M = 1),
  // verification (small M) and prefill (large M).
  void (*gemm_q8g128)(const QuantActs& a, const PackedWeights& w, float* y, int64_t tile0, int64_t tile1) = nullptr;
  void (*gemm_q4g128)(const QuantActs& a, const PackedWeights& w, float* y, int64_t tile0, int64_t tile1) = nullptr;
  // Weight-only Q8_G128 / Q4_G128 (W8A16 / W4A16, act_int8 = false): y[m, n] for m < M and rows n of
  // weight tiles [tile0, tile1) (clipped to N); x [M, K] f32, y [M, N]. Exact order in kernels/quant_layout.h.
  void (*gemm_q8g128_wo)(const PackedWeights& w, const float* x, float* y, int64_t M, int64_t tile0, int64_t tile1) = nullptr;
  void (*gemm_q4g128_wo)(const PackedWeights& w, const float* x, float* y, int64_t M, int64_t tile0, int64_t tile1) = nullptr;
  // Weight-only FP8 / NVFP4 / MXFP4 (kernels/fp_formats.h): y[m, n] for m < M, n in [n0, n1); x [M, K] f32.
  void (*gemm_fp)(const FpWeights& w, const float* x, float* y, int64_t M, int64_t n0, int64_t n1) = nullptr;
  // GGUF block formats (kernels/block_layout.h): activations x [M, K] f32 -> q [M, K] int8, d [M, K / 32] f32,
  // per sub-block of S inputs sums [M, K / S] int32 and csums [M, K / S] f32; then y[m, n] for m < a.M and rows n
  // of tiles [tile0, tile1) (clipped to N; tile0 a multiple of kQPanel, tile1 too or n_tiles), y: [M, N].
  void (*quantize_acts_block)(const float* x, int64_t M, int64_t K, int S, int8_t* q, float* d, int32_t* sums,
                              float* csums) = nullptr;
  // Every ISA has one (ref; AVX-512 VNNI: vpdpbusd; AVX2 and AVX-512 without VNNI: vpmaddubsw): GGUF blocks
  // always load as stored (model/weight_loader.h).
  void (*gemm_block)(const BlockActs& a, const BlockWeights& w, float* y, int64_t tile0, int64_t tile1) = nullptr;
  // The activation layout gemm_block reads fastest for M > 1 (BlockActs::interleave; 0: row-major). It takes
  // either layout; block_linear hands it this one.
  int block_acts_interleave = 0;
  // Gated DeltaNet recurrence of one value head over T tokens (kernels/gdn_kernel.h).
  void (*gdn_recurrent)(const GdnHead& h) = nullptr;
  // Its chunked form (the same state and outputs up to summation order; kernels/gdn_kernel.h), for prefill.
  void (*gdn_chunked)(const GdnHead& h) = nullptr;
  // Row kernels reading compressed KV cache rows (kernels/kv_kernels.h).
  KvKernelTable kv;
};

// ISAs this machine supports, best first, always ending in "ref".
std::vector<std::string> available_isas();
// name: "" or "auto" = best available; "ref", "avx2", "avx512" force one and
// throw Error if this CPU lacks it. The env var BLOCKSPEC_ISA is read by the
// CLI, not here.
KernelTable select_kernels(const std::string& name);

// Scalar reference twins (kernels/ref).
void matmul_f32_ref(const float* x, const float* w, float* y, int64_t M, int64_t K, int64_t N, int64_t n0, int64_t n1);
void matmul_bf16_ref(const float* x, const uint16_t* w, float* y, int64_t M, int64_t K, int64_t N, int64_t n0, int64_t n1);
void matmul_bf16_dp_ref(const uint16_t* x, const uint16_t* w, float* y, int64_t M, int64_t K, int64_t N, int64_t n0,
                        int64_t n1);
float dot_ref(const float* a, const float* b, int64_t n);
uint64_t read_stream_ref(const uint8_t* p, int64_t n);
void axpy_ref(float a, const float* x, float* y, int64_t n);
void swiglu_ref(const float* gate, const float* up, float* out, int64_t n, bool round_bf16);
double exp_sub_sum_ref(float* x, float m, int64_t n);
void quantize_acts_ref(const float* x, int64_t M, int64_t K, uint8_t* q, float* scales);
void quantize_acts_token_ref(const float* x, int64_t M, int64_t K, uint8_t* q, float* scales);
void gemm_q8g128_ref(const QuantActs& a, const PackedWeights& w, float* y, int64_t tile0, int64_t tile1);
void gemm_q4g128_ref(const QuantActs& a, const PackedWeights& w, float* y, int64_t tile0, int64_t tile1);
void gemm_q8g128_wo_ref(const PackedWeights& w, const float* x, float* y, int64_t M, int64_t tile0, int64_t tile1);
void gemm_q4g128_wo_ref(const PackedWeights& w, const float* x, float* y, int64_t M, int64_t tile0, int64_t tile1);
void quantize_acts_block_ref(const float* x, int64_t M, int64_t K, int S, int8_t* q, float* d, int32_t* sums,
                             float* csums);
void gemm_block_ref(const BlockActs& a, const BlockWeights& w, float* y, int64_t tile0, int64_t tile1);
void gemm_fp_ref(const FpWeights& w, const float* x, float* y, int64_t M, int64_t n0, int64_t n1);
void gdn_recurrent_ref(const GdnHead& h);
void gdn_chunked_ref(const GdnHead& h);

// x86 variants (kernels/x86), compiled with per-function target attributes.
void matmul_f32_avx2(const float* x, const float* w, float* y, int64_t M, int64_t K, int64_t N, int64_t n0, int64_t n1);
void matmul_bf16_avx2(const float* x, const uint16_t* w, float* y, int64_t M, int64_t K, int64_t N, int64_t n0, int64_t n1);
float dot_avx2(const float* a, const float* b, int64_t n);
uint64_t read_stream_avx2(const uint8_t* p, int64_t n);
void axpy_avx2(float a, const float* x, float* y, int64_t n);
void swiglu_avx2(const float* gate, const float* up, float* out, int64_t n, bool round_bf16);
double exp_sub_sum_avx2(float* x, float m, int64_t n);
void matmul_f32_avx512(const float* x, const float* w, float* y, int64_t M, int64_t K, int64_t N, int64_t n0, int64_t n1);
void matmul_bf16_avx512(const float* x, const uint16_t* w, float* y, int64_t M, int64_t K, int64_t N, int64_t n0, int64_t n1);
float dot_avx512(const float* a, const float* b, int64_t n);
uint64_t read_stream_avx512(const uint8_t* p, int64_t n);
void swiglu_avx512(const float* gate, const float* up, float* out, int64_t n, bool round_bf16);
double exp_sub_sum_avx512(float* x, float m, int64_t n);
void quantize_acts_avx2(const float* x, int64_t M, int64_t K, uint8_t* q, float* scales);
void gemm_q8g128_avx2(const QuantActs& a, const PackedWeights& w, float* y, int64_t tile0, int64_t tile1);
void gemm_q4g128_avx2(const QuantActs& a, const PackedWeights& w, float* y, int64_t tile0, int64_t tile1);
void gemm_block_avx2(const BlockActs& a, const BlockWeights& w, float* y, int64_t tile0, int64_t tile1);
// The same with the 256-blocks' steps prefetched at up to 4 rows too, for Intel (kernels/dispatch.cc).
void gemm_block_avx2_prefetch(const BlockActs& a, const BlockWeights& w, float* y, int64_t tile0, int64_t tile1);
// Both with AVX-VNNI's vpdpbusd on ymm for the products (kernels/x86/block_avxvnni.cc): CPUs with AVX-VNNI.
void gemm_block_avxvnni(const BlockActs& a, const BlockWeights& w, float* y, int64_t tile0, int64_t tile1);
void gemm_block_avxvnni_prefetch(const BlockActs& a, const BlockWeights& w, float* y, int64_t tile0, int64_t tile1);
void quantize_acts_block_avx2(const float* x, int64_t M, int64_t K, int S, int8_t* q, float* d, int32_t* sums,
                              float* csums);
void quantize_acts_block_avx512(const float* x, int64_t M, int64_t K, int S, int8_t* q, float* d, int32_t* sums,
                                float* csums);
void gemm_q8g128_wo_avx2(const PackedWeights& w, const float* x, float* y, int64_t M, int64_t tile0, int64_t tile1);
void gemm_q4g128_wo_avx2(const PackedWeights& w, const float* x, float* y, int64_t M, int64_t tile0, int64_t tile1);
void gemm_q8g128_wo_avx512(const PackedWeights& w, const float* x, float* y, int64_t M, int64_t tile0, int64_t tile1);
void gemm_q4g128_wo_avx512(const PackedWeights& w, const float* x, float* y, int64_t M, int64_t tile0, int64_t tile1);
// AVX-512 VNNI (vpdpbusd); the "avx512" level uses them when the CPU has VNNI.
void gemm_q8g128_avx512vnni(const QuantActs& a, const PackedWeights& w, float* y, int64_t tile0, int64_t tile1);
// Rows per micro-kernel of gemm_block_avx512vnni: the BlockActs interleave it reads.
inline constexpr int kBlockVnniRows = 8;
void gemm_block_avx512vnni(const BlockActs& a, const BlockWeights& w, float* y, int64_t tile0, int64_t tile1);
// The same with the steps prefetched in software at every M up to 16 (the one above: from 5 rows on), for Intel.
void gemm_block_avx512vnni_prefetch(const BlockActs& a, const BlockWeights& w, float* y, int64_t tile0,
                                    int64_t tile1);
void gemm_q4g128_avx512vnni(const QuantActs& a, const PackedWeights& w, float* y, int64_t tile0, int64_t tile1);
// AVX-512 BF16 (vdpbf16ps).
void matmul_bf16_dp_avx512bf16(const uint16_t* x, const uint16_t* w, float* y, int64_t M, int64_t K, int64_t N,
                               int64_t n0, int64_t n1);
void gemm_fp_avx512(const FpWeights& w, const float* x, float* y, int64_t M, int64_t n0, int64_t n1);
void gdn_recurrent_avx512(const GdnHead& h);
void gdn_chunked_avx512(const GdnHead& h);

}  // namespace blockspec
