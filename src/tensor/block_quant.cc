// Values of the GGUF block formats (tensor/block_quant.h). Every product and sum is rounded in the order
// gguf-py rounds it; a fused multiply-add would round once and break bit-exactness, so contraction is off.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "tensor/block_quant.h"

#include "base/error.h"
#include "tensor/dtype.h"

namespace blockspec {

bool is_block_format(WeightFormat f) {
  return f >= WeightFormat::kQ4_0 && f <= WeightFormat::kQ6_K;
}

const BlockQuantSpec& block_spec(WeightFormat f) {
  //                              block sub bits zero scale  min
  static const BlockQuantSpec q4_0{32, 32, 4, 8, false, false}, q4_1{32, 32, 4, 0, false, true},
      q5_0{32, 32, 5, 16, false, false}, q5_1{32, 32, 5, 0, false, true}, q8_0{32, 32, 8, 128, false, false},
      q2_k{256, 16, 2, 0, true, true}, q3_k{256, 16, 3, 4, true, false}, q4_k{256, 32, 4, 0, true, true},
      q5_k{256, 32, 5, 0, true, true}, q6_k{256, 16, 6, 32, true, false};
  switch (f) {
    case WeightFormat::kQ4_0: return q4_0;
    case WeightFormat::kQ4_1: return q4_1;
    case WeightFormat::kQ5_0: return q5_0;
    case WeightFormat::kQ5_1: return q5_1;
    case WeightFormat::kQ8_0: return q8_0;
    case WeightFormat::kQ2_K: return q2_k;
    case WeightFormat::kQ3_K: return q3_k;
    case WeightFormat::kQ4_K: return q4_k;
    case WeightFormat::kQ5_K: return q5_k;
    case WeightFormat::kQ6_K: return q6_k;
    default: fail("block_spec: ", weight_format_name(f), " is not a GGUF block format");
  }
}

void qblock_values(const BlockQuantSpec& s, const QBlock& b, float* out) {
  const float d = f16_to_f32(b.d), dm = f16_to_f32(b.dm);
  for (int j = 0; j < s.subs(); ++j) {
    const float ds = s.has_scale ? d * static_cast<float>(b.sc[j]) : d;
    const float ms = s.has_scale ? dm * static_cast<float>(b.mc[j]) : dm;
    for (int k = j * s.sub; k < (j + 1) * s.sub; ++k) {
      float v = ds * static_cast<float>(static_cast<int>(b.u[k]) - s.zero);
      if (s.has_min) v = v + ms;
      out[k] = v;
    }
  }
}

}  // namespace blockspec
