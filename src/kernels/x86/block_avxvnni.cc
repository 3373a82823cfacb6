// The AVX2 block GEMM with AVX-VNNI (kernels/x86/block_avx2.cc compiled with BS_BLOCK_AVXVNNI): for CPUs with
// AVX-VNNI but no AVX-512 VNNI (Intel client cores from Alder Lake on); kernels/dispatch.cc picks it.
#define BS_BLOCK_AVXVNNI 1
#include "kernels/x86/block_avx2.cc"  // NOLINT(bugprone-suspicious-include)
