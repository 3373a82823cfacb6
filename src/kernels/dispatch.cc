#include <algorithm>

#include "base/error.h"
#include "kernels/kernel_table.h"

namespace blockspec {

namespace {
// F16C for the f16 scales of kernels/x86/block_avx2.cc (every AVX2 CPU has it).
bool cpu_has_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}
bool cpu_has_avx512() {
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}
bool cpu_has_avxvnni() { return cpu_has_avx2() && __builtin_cpu_supports("avxvnni"); }
bool cpu_has_avx512vnni() { return cpu_has_avx512() && __builtin_cpu_supports("avx512vnni"); }
bool cpu_has_avx512bf16() { return cpu_has_avx512() && __builtin_cpu_supports("avx512bf16"); }
// The block GEMMs' software prefetch at small M pays on Intel and not on AMD (kernels/x86/block_avx512.cc,
// block_avx2.cc; measurements below and there).
bool cpu_is_intel() { return __builtin_cpu_is("intel"); }
}  // namespace

std::vector<std::string> available_isas() {
  std::vector<std::string> v;
  if (cpu_has_avx512()) v.push_back("avx512");
  if (cpu_has_avx2()) v.push_back("avx2");
  v.push_back("ref");
  return v;
}

KernelTable select_kernels(const std::string& name) {
  auto isas = available_isas();
  std::string pick = (name.empty() || name == "auto") ? isas.front() : name;
  if (pick != "ref" && pick != "avx2" && pick != "avx512")
    fail("unknown ISA \"", name, "\" (expected auto, ref, avx2 or avx512)");
  if (std::find(isas.begin(), isas.end(), pick) == isas.end())
    fail("ISA \"", pick, "\" is not supported by this CPU (available: ", isas.front(), ")");
  KernelTable t;
  t.isa = pick == "avx512" ? "avx512" : pick == "avx2" ? "avx2" : "ref";
  t.matmul_f32 = matmul_f32_ref;
  t.matmul_bf16 = matmul_bf16_ref;
  t.matmul_bf16_dp = matmul_bf16_dp_ref;
  t.dot = dot_ref;
  t.read_stream = read_stream_ref;
  t.axpy = axpy_ref;
  t.swiglu = swiglu_ref;
  t.exp_sub_sum = exp_sub_sum_ref;
  t.quantize_acts = quantize_acts_ref;
  t.quantize_acts_token = quantize_acts_token_ref;
  t.gemm_q8g128 = gemm_q8g128_ref;
  t.gemm_q4g128 = gemm_q4g128_ref;
  t.gemm_q8g128_wo = gemm_q8g128_wo_ref;
  t.gemm_q4g128_wo = gemm_q4g128_wo_ref;
  t.gemm_fp = gemm_fp_ref;
  t.quantize_acts_block = quantize_acts_block_ref;
  t.gemm_block = gemm_block_ref;
  t.gdn_recurrent = gdn_recurrent_ref;  // AVX2 keeps the scalar twins
  t.gdn_chunked = gdn_chunked_ref;
  if (pick == "avx2" || pick == "avx512") {
    t.matmul_f32 = matmul_f32_avx2;
    t.matmul_bf16 = matmul_bf16_avx2;
    t.matmul_bf16_dp = nullptr;  // no bf16 dot product below AVX-512 BF16
    t.dot = dot_avx2;
    t.read_stream = read_stream_avx2;
    t.axpy = axpy_avx2;
    t.swiglu = swiglu_avx2;
    t.exp_sub_sum = exp_sub_sum_avx2;
    t.quantize_acts = quantize_acts_avx2;
    t.gemm_q8g128 = gemm_q8g128_avx2;
    t.gemm_q4g128 = gemm_q4g128_avx2;
    t.gemm_q8g128_wo = gemm_q8g128_wo_avx2;
    t.gemm_q4g128_wo = gemm_q4g128_wo_avx2;
    // vpmaddubsw, or AVX-VNNI's vpdpbusd on ymm where the CPU has it; AVX-512 VNNI overrides both below.
    if (cpu_has_avxvnni()) t.gemm_block = cpu_is_intel() ? gemm_block_avxvnni_prefetch : gemm_block_avxvnni;
    else t.gemm_block = cpu_is_intel() ? gemm_block_avx2_prefetch : gemm_block_avx2;
    // Scalar, it took 11% of SmolLM2 Q4_1 serving (perf, prefill-heavy requests).
    t.quantize_acts_block = quantize_acts_block_avx2;
  }
  if (pick == "avx512") {
    t.matmul_f32 = matmul_f32_avx512;
    t.matmul_bf16 = matmul_bf16_avx512;
    t.dot = dot_avx512;
    t.read_stream = read_stream_avx512;
    t.swiglu = swiglu_avx512;
    t.exp_sub_sum = exp_sub_sum_avx512;
    t.gemm_fp = gemm_fp_avx512;
    t.gdn_recurrent = gdn_recurrent_avx512;
    t.gdn_chunked = gdn_chunked_avx512;
    t.gemm_q8g128_wo = gemm_q8g128_wo_avx512;
    t.gemm_q4g128_wo = gemm_q4g128_wo_avx512;
    t.quantize_acts_block = quantize_acts_block_avx512;
    if (cpu_has_avx512bf16()) t.matmul_bf16_dp = matmul_bf16_dp_avx512bf16;
    // Without VNNI, maddubs-based AVX2 int8 kernels are the best we have.
    if (cpu_has_avx512vnni()) {
      t.gemm_q8g128 = gemm_q8g128_avx512vnni;
      t.gemm_q4g128 = gemm_q4g128_avx512vnni;
      // Up to 4 rows the block-format steps stream fastest with the hardware prefetchers alone on AMD (Zen 4: M = 1
      // q4_k 22-27 GB/s per thread without the software prefetch, 13-15 with; block_avx512.cc) but are latency-bound
      // without it on Intel Xeons. 2-core Xeon (family 6 model 207, AVX-512 VNNI), kernels_bench, weights from
      // DRAM, 2 rounds interleaved, us, without -> with: 1 thread, M = 1, q4_k up 619-632 -> 512-525, down 633-636
      // -> 517-531, q6_k up 988-993 -> 742-766, down 983-1014 -> 769-770; 2 threads (a compile running beside),
      // q4_0 up M = 1 600-608 -> 264-486, q4_1 up M = 1 661-673 -> 549-556, q8_0 up M = 8 1919-1939 -> 684-1313.
      // Decode of Qwen2.5-Coder-1.5B Q4_K_M (`bench --prompt-len 64 --gen-len 64 --repeats 2`, 2 rounds) 20.6 /
      // 21.9 -> 26.2 / 26.7 tok/s, bw fraction 0.72-0.77 -> 0.94.
      t.gemm_block = cpu_is_intel() ? gemm_block_avx512vnni_prefetch : gemm_block_avx512vnni;
      t.block_acts_interleave = kBlockVnniRows;
    }
  }
  t.kv = select_kv_kernels(t.isa);
  return t;
}

}  // namespace blockspec
