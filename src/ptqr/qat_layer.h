// The straight-through twin of a quantized dense decoder layer (Qwen2 /
// Qwen3 / Llama; issue 18, training.md §10.3): the layer of
// model/decoder_layer.h over one causal window with every rounding the
// serving kernels make done as fake quantization in f32 -- the weights are
// their dequantized codes, each linear's input is rounded per token to int8
// (kernel quantize_acts_token; W8A8 only, weight-only schemes keep it f32), K (after RoPE) and V rows are stored and read
// back in the KV cache dtype (kv_quantize_row) -- and a hand-written backward
// in which every rounding passes its gradient straight through. PTQR takes
// the loss and dL/dy from the exact serving forward and pushes dL/dy through
// this twin; the two forwards differ only by f32 summation order.
#pragma once
#include <cstdint>
#include <vector>

#include "formats/hf_config.h"
#include "kernels/kv_kernels.h"
#include "kernels/ops.h"
#include "ptqr/student.h"

namespace blockspec {

// The layer's frozen vectors and trained groups.
struct QatLayer {
  const ModelConfig* c = nullptr;
  const RopeTables* rope = nullptr;
  KvDType kv = KvDType::kF32;
  const float* attn_norm = nullptr;  // [H]
  const float* ffn_norm = nullptr;   // [H]
  const float* q_norm = nullptr;     // [hd] Qwen3 only, else nullptr
  const float* k_norm = nullptr;
  StudentGroup* qkv = nullptr;  // [nh hd + 2 nkv hd, H]
  StudentGroup* o = nullptr;    // [H, nh hd]
  StudentGroup* gu = nullptr;   // [2 I, H]
  StudentGroup* down = nullptr; // [H, I]
  // When the norms train: dL/d(attn_norm), dL/d(ffn_norm) [H] are added here (nullptr: frozen).
  float* attn_norm_grad = nullptr;
  float* ffn_norm_grad = nullptr;
  // W8A8: each linear's input is rounded per token to int8; weight-only schemes (W4A16, W8A16): it stays f32.
  bool act_int8 = true;
};

// What the backward needs, per window of T tokens.
struct QatSaved {
  int64_t T = 0;
  std::vector<float> x, a1, q_pre, k_pre, qr, kq, vq, probs, att, a2, x2, a3, gu, a4;
};

// y [T, H] = layer(x [T, H]) at positions 0 .. T - 1.
void qat_forward(const OpContext& ctx, const QatLayer& l, const float* x, int64_t T, float* y, QatSaved& s);

// Adds dL/d(deq) of every group (StudentGroup::grad, sized by the caller), of
// its biases (StudentGroup::bias_grad when not empty) and of the norms (when
// QatLayer has their gradient buffers) given dy = dL/dy [T, H]; dx [T, H] =
// dL/dx written unless nullptr.
void qat_backward(const OpContext& ctx, const QatLayer& l, const QatSaved& s, const float* dy, float* dx);

}  // namespace blockspec
