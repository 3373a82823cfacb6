// One dense decoder layer (Qwen3 / Qwen2 / Llama) over the rows of several
// sequences: the one copy of the layer math. Transformer::forward_batch runs
// it for every layer; GPTQ calibration (quantize/calibration.cc) runs it one
// layer at a time with an observer, so what it calibrates is what serves.
//   pre-norm: x += o_proj(attn(rope(norm_qk(qkv(rmsnorm(x))))));  x += down(swiglu(gate_up(rmsnorm(x))))
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "formats/hf_config.h"
#include "kernels/ops.h"
#include "kv/kv_cache.h"
#include "model/weights.h"

namespace blockspec {

// What an observer sees: the input rows of each linear group, and the K / V
// rows the cache stores (after q/k norm and RoPE).
enum class LayerTap {
  kAttnIn,  // [n, H] input of q_proj, k_proj, v_proj
  kOIn,     // [n, nh*hd] input of o_proj
  kMlpIn,   // [n, H] input of gate_proj, up_proj
  kDownIn,  // [n, I] input of down_proj
  kKeys,    // [n, nkv*hd]
  kValues,  // [n, nkv*hd]
};
using LayerObserver = std::function<void(LayerTap tap, const float* rows, int64_t n, int64_t cols)>;

// The rows of one sequence, in order: n tokens whose K/V are written to
// cache layer `cache_layer` at positions cache->size().. (the caller
// advances the cache's size after its last layer).
struct LayerSeq {
  KvCache* cache;
  int64_t n;
};

// Buffers reused across layers and steps.
struct LayerScratch {
  std::vector<float> xn, q, kn, vn, att, tmp, gate, qkv, gu, scratch;
  std::vector<float> proj, conv, qk, z, alpha, beta, o, g;  // Gated DeltaNet layers (model/gdn_layer.h)
};

// x: [n, H] residual stream of all sequences' rows (updated in place);
// pos: [n] absolute position of each row. bf16: round activations as HF
// does running a bf16 model (ModelOptions::emulate_bf16_activations).
// A qwen3_5 full-attention layer (c.attn_output_gate) also gates the
// attention output: o = attn * sigmoid(gate) before o_proj (hybrid.md §4).
void decoder_layer(const OpContext& ctx, const ModelConfig& c, const RopeTables& rope, const LayerWeights& l,
                   int64_t cache_layer, const std::vector<LayerSeq>& seqs, const int64_t* pos, float* x,
                   LayerScratch& s, bool bf16, const LayerObserver* observer = nullptr);

// The second half of every layer, dense or Gated DeltaNet: x += down(swiglu(gate_up(rmsnorm(x)))).
//   x: [n, H]
void mlp_block(const OpContext& ctx, const ModelConfig& c, const LayerWeights& l, int64_t n, float* x, LayerScratch& s,
               bool bf16, const LayerObserver* observer = nullptr);

}  // namespace blockspec
