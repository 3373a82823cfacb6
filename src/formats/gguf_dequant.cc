// GGUF blocks decoded into tensor/block_quant.h's QBlock, and dequantized through its one value definition
// (qblock_values mirrors gguf-py 0.19.0 quants.py dequantize_blocks rounding for rounding). These are load-time
// conversions, not the matmul path: clarity over speed.

#include "formats/gguf_dequant.h"

#include <cstring>

#include "base/error.h"

namespace blockspec {
namespace {

constexpr int kQK = 256;  // QK_K: elements per K-quant super-block

// Each decoder reads one GGUF block into the generic QBlock of tensor/block_quant.h (no arithmetic: fields and
// codes as stored); qblock_values gives the values, rounded as gguf-py rounds them.

uint16_t u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }
uint32_t u32(const uint8_t* p) { return p[0] | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24; }
uint16_t neg(uint16_t h) { return static_cast<uint16_t>(h ^ 0x8000u); }  // -x of an f16, exact

// ---- 32-element blocks ----

// Q4_0: {f16 d; u8 qs[16]}; element j < 16 in the low nibble of qs[j], j >= 16 in the high nibble of qs[j-16].
// Q4_1: {f16 d; f16 m; u8 qs[16]}: x = d * q + m.
void q4_01(const uint8_t* b, bool has_m, QBlock& o) {
  o.d = u16(b);
  if (has_m) o.dm = u16(b + 2);
  const uint8_t* qs = b + (has_m ? 4 : 2);
  for (int j = 0; j < 32; ++j) o.u[j] = (qs[j & 15] >> (j < 16 ? 0 : 4)) & 0xF;
}

// Q5_0: {f16 d; u32 qh; u8 qs[16]}: bit j of qh is the 5th bit of element j. Q5_1: {f16 d; f16 m; u32 qh; ...}.
void q5_01(const uint8_t* b, bool has_m, QBlock& o) {
  o.d = u16(b);
  if (has_m) o.dm = u16(b + 2);
  const uint32_t qh = u32(b + (has_m ? 4 : 2));
  const uint8_t* qs = b + (has_m ? 8 : 6);
  for (int j = 0; j < 32; ++j)
    o.u[j] = static_cast<uint8_t>(((qs[j & 15] >> (j < 16 ? 0 : 4)) & 0xF) | ((qh >> j) & 1u) << 4);
}

// Q8_0: {f16 d; i8 qs[32]}.
void q8_0(const uint8_t* b, QBlock& o) {
  o.d = u16(b);
  for (int j = 0; j < 32; ++j) o.u[j] = static_cast<uint8_t>(static_cast<int8_t>(b[2 + j]) + 128);
}

// ---- 256-element K-quant super-blocks ----

// Q2_K: {u8 scales[16]; u8 qs[64]; f16 d; f16 dmin}. Element e = 128h + 32s + l
// is bits 2s..2s+1 of qs[32h + l]; sub-block e/16 has scale (lo nibble) and min (hi nibble).
void q2_k(const uint8_t* b, QBlock& o) {
  const uint8_t* qs = b + 16;
  o.d = u16(b + 80);
  o.dm = neg(u16(b + 82));
  for (int j = 0; j < 16; ++j) {
    o.sc[j] = static_cast<int8_t>(b[j] & 0xF);
    o.mc[j] = b[j] >> 4;
  }
  for (int e = 0; e < kQK; ++e) o.u[e] = (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

// Q3_K: {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}. Low 2 bits as in
// Q2_K; bit e/32 of hmask[e%32] set means +0, clear means -4 (u = low + 4 * bit, zero 4). 16 signed 6-bit
// scales (stored + 32): low nibbles from scales[0..7], high 2 bits from scales[8..11].
void q3_k(const uint8_t* b, QBlock& o) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* sc = b + 96;
  o.d = u16(b + 108);
  for (int k = 0; k < 16; ++k) {
    const int lo = (sc[k % 8] >> (k < 8 ? 0 : 4)) & 0xF, hi = (sc[8 + k % 4] >> (2 * (k / 4))) & 3;
    o.sc[k] = static_cast<int8_t>((lo | hi << 4) - 32);
  }
  for (int e = 0; e < kQK; ++e) {
    const int ql = (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    o.u[e] = static_cast<uint8_t>(ql + 4 * ((hmask[e % 32] >> (e / 32)) & 1));
  }
}

// Q4_K / Q5_K 6-bit scale and min of sub-block j (get_scale_min_k4).
void scale_min_k4(const uint8_t* s, int j, QBlock& o) {
  if (j < 4) {
    o.sc[j] = static_cast<int8_t>(s[j] & 63);
    o.mc[j] = s[j + 4] & 63;
  } else {
    o.sc[j] = static_cast<int8_t>((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
    o.mc[j] = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Q4_K: {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}. Element e = 64c + 32s + l
// is nibble s of qs[32c + l]; x = (d*sc) * q - (dmin*m) of sub-block e/32.
// Q5_K: {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}: Q4_K plus
// a 5th bit, bit j of qh[l] for element 32j + l.
void q45_k(const uint8_t* b, bool q5, QBlock& o) {
  o.d = u16(b);
  o.dm = neg(u16(b + 2));
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + (q5 ? 48 : 16);
  for (int j = 0; j < 8; ++j) {
    scale_min_k4(b + 4, j, o);
    for (int l = 0; l < 32; ++l) {
      const int lo = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF;
      o.u[32 * j + l] = static_cast<uint8_t>(lo | (q5 ? ((qh[l] >> j) & 1) << 4 : 0));
    }
  }
}

// Q6_K: {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}. For e = 128h + r:
// low 4 bits are nibble r/64 of ql[64h + r%64], high 2 bits are bits
// 2(r/32).. of qh[32h + r%32]; q - 32 scaled by d * scales[e/16].
void q6_k(const uint8_t* b, QBlock& o) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  o.d = u16(b + 208);
  for (int j = 0; j < 16; ++j) o.sc[j] = static_cast<int8_t>(b[192 + j]);
  for (int e = 0; e < kQK; ++e) {
    const int h = e / 128, r = e % 128;
    const int lo = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0xF, hi = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
    o.u[e] = static_cast<uint8_t>(lo | hi << 4);
  }
}

}  // namespace

std::optional<WeightFormat> block_format_of(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_0: return WeightFormat::kQ4_0;
    case GgmlType::kQ4_1: return WeightFormat::kQ4_1;
    case GgmlType::kQ5_0: return WeightFormat::kQ5_0;
    case GgmlType::kQ5_1: return WeightFormat::kQ5_1;
    case GgmlType::kQ8_0: return WeightFormat::kQ8_0;
    case GgmlType::kQ2_K: return WeightFormat::kQ2_K;
    case GgmlType::kQ3_K: return WeightFormat::kQ3_K;
    case GgmlType::kQ4_K: return WeightFormat::kQ4_K;
    case GgmlType::kQ5_K: return WeightFormat::kQ5_K;
    case GgmlType::kQ6_K: return WeightFormat::kQ6_K;
    default: return std::nullopt;
  }
}

void decode_gguf_blocks(GgmlType t, const uint8_t* src, int64_t n_blocks, QBlock* out) {
  const GgmlTypeTraits& tr = ggml_traits(t);
  if (!block_format_of(t)) fail("decode_gguf_blocks: ggml type ", tr.name, " is not a block format");
  for (int64_t i = 0; i < n_blocks; ++i) {
    const uint8_t* b = src + i * tr.type_size;
    QBlock& o = out[i];
    o = QBlock{};
    switch (t) {
      case GgmlType::kQ4_0: q4_01(b, false, o); break;
      case GgmlType::kQ4_1: q4_01(b, true, o); break;
      case GgmlType::kQ5_0: q5_01(b, false, o); break;
      case GgmlType::kQ5_1: q5_01(b, true, o); break;
      case GgmlType::kQ8_0: q8_0(b, o); break;
      case GgmlType::kQ2_K: q2_k(b, o); break;
      case GgmlType::kQ3_K: q3_k(b, o); break;
      case GgmlType::kQ4_K: q45_k(b, false, o); break;
      case GgmlType::kQ5_K: q45_k(b, true, o); break;
      case GgmlType::kQ6_K: q6_k(b, o); break;
      default: break;
    }
  }
}

bool gguf_can_dequantize(GgmlType t) {
  return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16 || block_format_of(t).has_value();
}

void dequantize_gguf(GgmlType t, const uint8_t* src, float* dst, int64_t n) {
  const GgmlTypeTraits& tr = ggml_traits(t);
  if (!gguf_can_dequantize(t)) fail("dequantize_gguf: ggml type ", tr.name, " is not supported");
  BS_ASSERT(n >= 0 && n % tr.block_size == 0, "n = ", n, " for ", tr.name);
  if (t == GgmlType::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
  } else if (t == GgmlType::kF16) {
    for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(u16(src + 2 * i));
  } else if (t == GgmlType::kBF16) {
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(u16(src + 2 * i));
  } else {
    const BlockQuantSpec& s = block_spec(*block_format_of(t));
    QBlock b;
    for (int64_t i = 0; i < n / tr.block_size; ++i) {
      decode_gguf_blocks(t, src + i * tr.type_size, 1, &b);
      qblock_values(s, b, dst + i * tr.block_size);
    }
  }
}

Tensor dequantize_gguf_tensor(const GgufFile& file, const std::string& name) {
  const GgufTensorInfo& info = file.tensor_info(name);
  if (!gguf_can_dequantize(info.type))
    fail(file.path(), ": tensor \"", name, "\" has ggml type ", ggml_type_name(info.type),
         ", which blockspec cannot dequantize (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, "
         "Q3_K, Q4_K, Q5_K, Q6_K)");
  Tensor out(DType::kF32, info.shape());  // row-major, ne reversed
  dequantize_gguf(info.type, file.tensor_data(info), out.mutable_ptr<float>(), info.numel());
  return out;
}

}  // namespace blockspec
