// Scalar GGUF dequantizers. Each function mirrors the reference
// gguf-py 0.19.0 quants.py dequantize_blocks step for step: the scale
// products (d * sc, dmin * m) are rounded to f32 first, then multiplied by
// the code, then the offset is subtracted/added, each a separate f32
// rounding, as numpy does. A fused multiply-add would round once and break
// bit-exactness, so contraction is switched off for this file (GCC fuses
// across statements when FMA is enabled, clang within an expression).
// These are load-time conversions, not the matmul path: clarity over speed.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "formats/gguf_dequant.h"

#include <cstring>

#include "base/error.h"

namespace blockspec {
namespace {

constexpr int kQK = 256;  // QK_K: elements per K-quant super-block

float bits_to_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Binary16 -> binary32 by bits, like numpy's npy_halfbits_to_floatbits:
// exact for every finite value and keeps the NaN payload (the shared
// f16_to_f32 in tensor/dtype.h returns a canonical NaN).
float half(const uint8_t* p) {
  uint32_t h = static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8;
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | (man << 13));
  if (exp != 0) return bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
  if (man == 0) return bits_to_f32(sign);
  // Subnormal: shift the mantissa up until its leading one is the implicit bit.
  int e = 113;
  while ((man & 0x400u) == 0) {
    man <<= 1;
    --e;
  }
  return bits_to_f32(sign | (static_cast<uint32_t>(e) << 23) | ((man & 0x3ffu) << 13));
}

// ---- 32-element blocks ----

// Q4_0: {f16 d; u8 qs[16]}; element j < 16 in the low nibble of qs[j], j >= 16 in the high nibble of qs[j-16].
void q4_0(const uint8_t* b, float* y) {
  float d = half(b);
  for (int j = 0; j < 32; ++j) {
    int q = ((b[2 + (j & 15)] >> (j < 16 ? 0 : 4)) & 0xF) - 8;
    y[j] = d * static_cast<float>(q);
  }
}

// Q4_1: {f16 d; f16 m; u8 qs[16]}: x = d * q + m.
void q4_1(const uint8_t* b, float* y) {
  float d = half(b), m = half(b + 2);
  for (int j = 0; j < 32; ++j) {
    float q = static_cast<float>((b[4 + (j & 15)] >> (j < 16 ? 0 : 4)) & 0xF);
    float dq = d * q;
    y[j] = dq + m;
  }
}

// Q5_0: {f16 d; u32 qh; u8 qs[16]}: bit j of qh is the 5th bit of element j.
void q5_0(const uint8_t* b, float* y) {
  float d = half(b);
  uint32_t qh = b[2] | b[3] << 8 | b[4] << 16 | static_cast<uint32_t>(b[5]) << 24;
  for (int j = 0; j < 32; ++j) {
    int lo = (b[6 + (j & 15)] >> (j < 16 ? 0 : 4)) & 0xF;
    int q = (lo | static_cast<int>(((qh >> j) & 1u) << 4)) - 16;
    y[j] = d * static_cast<float>(q);
  }
}

// Q5_1: {f16 d; f16 m; u32 qh; u8 qs[16]}: x = d * q + m.
void q5_1(const uint8_t* b, float* y) {
  float d = half(b), m = half(b + 2);
  uint32_t qh = b[4] | b[5] << 8 | b[6] << 16 | static_cast<uint32_t>(b[7]) << 24;
  for (int j = 0; j < 32; ++j) {
    int lo = (b[8 + (j & 15)] >> (j < 16 ? 0 : 4)) & 0xF;
    float q = static_cast<float>(lo | static_cast<int>(((qh >> j) & 1u) << 4));
    float dq = d * q;
    y[j] = dq + m;
  }
}

// Q8_0: {f16 d; i8 qs[32]}.
void q8_0(const uint8_t* b, float* y) {
  float d = half(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

// ---- 256-element K-quant super-blocks ----

// Q2_K: {u8 scales[16]; u8 qs[64]; f16 d; f16 dmin}. Element e = 128h + 32s + l
// is bits 2s..2s+1 of qs[32h + l]; sub-block e/16 has scale (lo nibble) and min (hi nibble).
void q2_k(const uint8_t* b, float* y) {
  const uint8_t* sc = b;
  const uint8_t* qs = b + 16;
  float d = half(b + 80), dmin = half(b + 82);
  for (int e = 0; e < kQK; ++e) {
    int h = e / 128, s = (e % 128) / 32, l = e % 32;
    float q = static_cast<float>((qs[32 * h + l] >> (2 * s)) & 3);
    float dl = d * static_cast<float>(sc[e / 16] & 0xF);
    float ml = dmin * static_cast<float>(sc[e / 16] >> 4);
    float dq = dl * q;
    y[e] = dq - ml;
  }
}

// Q3_K: {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}. Low 2 bits as in
// Q2_K; bit e/32 of hmask[e%32] set means +0, clear means -4. 16 signed 6-bit
// scales: low nibbles from scales[0..7], high 2 bits from scales[8..11].
void q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* sc = b + 96;
  float d = half(b + 108);
  for (int e = 0; e < kQK; ++e) {
    int h = e / 128, s = (e % 128) / 32, l = e % 32, k = e / 16;
    int lo = (sc[k % 8] >> (k < 8 ? 0 : 4)) & 0xF;
    int hi = (sc[8 + k % 4] >> (2 * (k / 4))) & 3;
    float scale = static_cast<float>((lo | hi << 4) - 32);
    int ql = (qs[32 * h + l] >> (2 * s)) & 3;
    int hbit = (hmask[l] >> (e / 32)) & 1;
    float q = static_cast<float>(ql - (hbit ? 0 : 4));
    float dl = d * scale;
    y[e] = dl * q;
  }
}

// Q4_K / Q5_K 6-bit scale and min of sub-block j (get_scale_min_k4).
void scale_min_k4(const uint8_t* s, int j, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K: {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}. Element e = 64c + 32s + l
// is nibble s of qs[32c + l]; x = (d*sc) * q - (dmin*m) of sub-block e/32.
void q4_k(const uint8_t* b, float* y) {
  float d = half(b), dmin = half(b + 2);
  const uint8_t* qs = b + 16;
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    scale_min_k4(b + 4, j, sc, m);
    float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(m);
    int c = j / 2, s = j % 2;
    for (int l = 0; l < 32; ++l) {
      float q = static_cast<float>((qs[32 * c + l] >> (4 * s)) & 0xF);
      float dq = dl * q;
      y[32 * j + l] = dq - ml;
    }
  }
}

// Q5_K: {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}: Q4_K plus
// a 5th bit, bit j of qh[l] for element 32j + l.
void q5_k(const uint8_t* b, float* y) {
  float d = half(b), dmin = half(b + 2);
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    scale_min_k4(b + 4, j, sc, m);
    float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(m);
    int c = j / 2, s = j % 2;
    for (int l = 0; l < 32; ++l) {
      int lo = (qs[32 * c + l] >> (4 * s)) & 0xF;
      float q = static_cast<float>(lo | (((qh[l] >> j) & 1) << 4));
      float dq = dl * q;
      y[32 * j + l] = dq - ml;
    }
  }
}

// Q6_K: {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}. For e = 128h + r:
// low 4 bits are nibble r/64 of ql[64h + r%64], high 2 bits are bits
// 2(r/32).. of qh[32h + r%32]; q - 32 scaled by d * scales[e/16].
void q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  float d = half(b + 208);
  for (int e = 0; e < kQK; ++e) {
    int h = e / 128, r = e % 128;
    int lo = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0xF;
    int hi = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
    float q = static_cast<float>((lo | hi << 4) - 32);
    float dl = d * static_cast<float>(sc[e / 16]);
    y[e] = dl * q;
  }
}

using BlockFn = void (*)(const uint8_t*, float*);

BlockFn block_fn(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_0: return q4_0;
    case GgmlType::kQ4_1: return q4_1;
    case GgmlType::kQ5_0: return q5_0;
    case GgmlType::kQ5_1: return q5_1;
    case GgmlType::kQ8_0: return q8_0;
    case GgmlType::kQ2_K: return q2_k;
    case GgmlType::kQ3_K: return q3_k;
    case GgmlType::kQ4_K: return q4_k;
    case GgmlType::kQ5_K: return q5_k;
    case GgmlType::kQ6_K: return q6_k;
    default: return nullptr;
  }
}

}  // namespace

bool gguf_can_dequantize(GgmlType t) {
  return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16 || block_fn(t) != nullptr;
}

void dequantize_gguf(GgmlType t, const uint8_t* src, float* dst, int64_t n) {
  const GgmlTypeTraits& tr = ggml_traits(t);
  if (!gguf_can_dequantize(t)) fail("dequantize_gguf: ggml type ", tr.name, " is not supported");
  BS_ASSERT(n >= 0 && n % tr.block_size == 0, "n = ", n, " for ", tr.name);
  if (t == GgmlType::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
  } else if (t == GgmlType::kF16) {
    for (int64_t i = 0; i < n; ++i) dst[i] = half(src + 2 * i);
  } else if (t == GgmlType::kBF16) {
    for (int64_t i = 0; i < n; ++i) dst[i] = bits_to_f32((static_cast<uint32_t>(src[2 * i]) | src[2 * i + 1] << 8) << 16);
  } else {
    BlockFn fn = block_fn(t);
    for (int64_t i = 0; i < n / tr.block_size; ++i) fn(src + i * tr.type_size, dst + i * tr.block_size);
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
