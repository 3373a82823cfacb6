// The GGUF block formats (Q4_0 .. Q8_0, Q2_K .. Q6_K) as one integer description, so the formats layer
// (which reads the file's blocks) and the kernels layer (which packs and multiplies them) share one
// definition of every weight's value. A block of `block` inputs of one row is
//   d, dm      two f16 numbers (dm only with has_min)
//   sc[j]      an integer scale per sub-block j of `sub` inputs (1 without has_scale)
//   mc[j]      an integer min multiplier per sub-block (1 without has_scale; only with has_min)
//   u[k]       an unsigned code of `bits` bits (Q8_0: the int8 code + 128)
// and the value of input k (sub-block j = k / sub) is, rounded step by step in f32 exactly as gguf-py 0.19.0
// (numpy float32) dequantizes it:
//   v = (f32(d) * sc[j]) * (u[k] - zero)        then, with has_min:   v = v + f32(dm) * mc[j]
// How each GGUF block maps onto this (formats/gguf_dequant.cc decodes them):
//   Q4_0  d,              u = q,          zero 8       (x = d * (q - 8))
//   Q4_1  d, dm = m,      u = q,          zero 0       (x = d * q + m)
//   Q5_0 / Q5_1           as Q4_0 / Q4_1 with 5-bit q, zero 16 / 0
//   Q8_0  d,              u = q + 128,    zero 128     (x = q * d)
//   Q2_K  d, dm = -dmin,  sc, mc 4-bit per 16, 2-bit q          (x = (d sc) q - dmin m)
//   Q3_K  d,              sc 6-bit signed per 16, u = q + 4, zero 4  (x = (d sc) q, q in [-4, 3])
//   Q4_K  d, dm = -dmin,  sc, mc 6-bit per 32, 4-bit q; Q5_K the same with 5-bit q
//   Q6_K  d,              sc int8 per 16, 6-bit u, zero 32
// (dm = -dmin is exact, and a + (-b) == a - b in IEEE arithmetic, so these are bitwise gguf's values.)
#pragma once
#include <cstdint>

#include "tensor/quant_tensor.h"

namespace blockspec {

struct BlockQuantSpec {
  int block;       // inputs per block (32 or 256): one d (and dm) per row and block
  int sub;         // inputs per sub-block (16 or 32): one sc (and mc) per row and sub-block
  int bits;        // code width: u < 2^bits
  int zero;        // subtracted from every code
  bool has_scale;  // sc / mc stored per sub-block (the K-quants); else 1
  bool has_min;    // the dm * mc term
  int subs() const { return block / sub; }
};

bool is_block_format(WeightFormat f);
// Throws Error for a format that is not a GGUF block format.
const BlockQuantSpec& block_spec(WeightFormat f);

// One block of one row, decoded (no rounding: every field as stored).
struct QBlock {
  uint16_t d = 0, dm = 0;  // f16 bits
  int8_t sc[16] = {};      // [block / sub]
  uint8_t mc[16] = {};     // [block / sub]
  uint8_t u[256] = {};     // [block]
};

// out[k] = the value of input k < s.block, as above (block_quant.cc compiles without FMA contraction).
void qblock_values(const BlockQuantSpec& s, const QBlock& b, float* out);

}  // namespace blockspec
