// DFlash / DFlash2 block-diffusion drafter (../shared/docs/dflash.md §2, §5).
//
// A drafter is a small stack of Qwen3-style layers. Hidden states tapped from
// the target (after the layers in target_layer_ids) are projected by `fc` +
// `hidden_norm` into one context vector c_j per committed token; every draft
// layer turns c_j into context K/V (k_norm + RoPE on K, no input_layernorm),
// computed once per token and cached. A draft step runs the block
// [anchor, MASK x K] at positions P..P+K in one pass over
// [cached context (within each layer's window) ; block], with per-layer
// causality inside the block, and reads draft logits for slots 1..K through
// the TARGET's lm_head (the target's embedding fills the block): both are
// shared with the target, never copied. DFlash2 adds a two-tap grouped
// dynamic convolution around both sublayers and a low-rank path selector
// over the top-k candidates of each slot.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "formats/dflash_config.h"
#include "model/transformer.h"
#include <optional>

namespace blockspec {

// A drafter layer is a target decoder layer (one struct, one loader,
// model/weight_loader.h load_layer) plus DFlash2's convolutions.
struct DraftLayerWeights : LayerWeights {
  // DFlash2 convolutions: base kernels [2 side, kt tap, H] f32 and dynamic
  // kernel projections [2*kt*G, H] (output viewed [2 side, kt tap, G group]).
  Tensor attn_conv_base, mlp_conv_base;
  QuantTensor attn_conv_proj, mlp_conv_proj;
};

struct DraftWeights {
  QuantTensor fc;           // [H, T*H]
  Tensor hidden_norm;       // [H] f32
  Tensor norm;              // [H] f32
  std::vector<DraftLayerWeights> layers;
  // DFlash2 candidate selector
  QuantTensor predecessor_codebook, successor_codebook;  // [V, r]
  QuantTensor hidden_projection;                         // [r, H]
  // Reduced draft vocabulary (DraftConfig::draft_vocab_size > 0)
  QuantTensor lm_head;           // [Vd, H] the drafter's own frozen head: target rows d2t_ids
  std::vector<int32_t> d2t_ids;  // [Vd] target id of each draft id, ascending
  std::string format_summary;
};

// Context K/V of every draft layer for the committed tokens 0..size()-1,
// stored in one of the KV dtypes (docs/kv_cache.md; vLLM's speculative
// kv_cache_dtype): rows are quantized once when written, and attention reads
// their dequantized values (kv_dequantize_row). Full-attention layers keep
// every position; sliding layers keep a ring of their last W positions (all
// a block query can see), or every position too when rings is false (so
// that any position can be saved: prefix caching).
class DraftCache {
 public:
  DraftCache(const DraftConfig& cfg, int64_t capacity, KvDType dtype = KvDType::kF32, bool rings = true);
  int64_t size() const { return size_; }
  int64_t capacity() const { return capacity_; }
  KvDType dtype() const { return dtype_; }
  void reset() { size_ = 0; }
  // Stores position pos of layer l: k, v [nkv, hd] f32, quantized to dtype().
  void write(int64_t l, int64_t pos, const float* k, const float* v);
  // f32 rows [nkv, hd] of positions lo..hi-1 of layer l (hi - lo pointers
  // each): into the cache for f32, else dequantized into `scratch`, valid
  // until the next read with it.
  void read(int64_t l, int64_t lo, int64_t hi, std::vector<const float*>& k, std::vector<const float*>& v,
            std::vector<float>& scratch) const;
  // Bytes one position occupies over every layer, K and V, codes and scales.
  int64_t bytes_per_token() const;
  // Oldest position a block query of layer l can see (its window's).
  int64_t first_kept(int64_t l) const { return window_[l] > 0 ? std::max<int64_t>(0, size_ - window_[l]) : 0; }
  void set_size(int64_t n) { size_ = n; }
  // Raw copies of positions lo..lo+n-1 over every layer, codes and scales
  // as stored (bytes_per_token() each, position-major): the engine keeps a
  // cached prefix page's drafter context beside the page (prefix caching).
  // save is false, copying nothing, unless 0 <= lo, lo + n <= size() and
  // every ring layer still holds lo.
  bool save(int64_t lo, int64_t n, uint8_t* dst) const;
  // Writes such a copy back at positions size()..size()+n-1 and grows size() by n.
  void load(int64_t n, const uint8_t* src);

 private:
  // Where position pos of layer l is stored: bytes of its codes (K or V) and
  // of its scales, and their byte offsets in k_ / v_ [l] and ks_ / vs_ [l].
  struct Parts {
    int64_t codes, scales, code_at, scale_at;
  };
  Parts parts(int64_t l, int64_t pos) const;
  int64_t slot(int64_t l, int64_t pos) const { return ring_[l] > 0 ? pos % ring_[l] : pos; }
  int64_t capacity_, size_ = 0, nkv_, hd_;
  KvDType dtype_;
  int64_t code_row_, scale_row_;           // bytes of codes / f32 scales per (position, kv head)
  float unit_scale_ = 1.0f;                 // fp8_e4m3's layer scale (no calibrated drafter scales)
  std::vector<int64_t> window_;             // [L] the layer's window W (0: full attention)
  std::vector<int64_t> ring_;               // [L] ring length (W), 0 = contiguous
  std::vector<std::vector<uint8_t>> k_, v_;  // [L][slots, nkv, code_row_]
  std::vector<std::vector<float>> ks_, vs_;  // [L][slots, nkv, scale_row_]
};

// Calibration hook (quantize/drafter_calibration.h): the input rows of the
// drafter linears forward() runs, before each runs. modules: the checkpoint
// module names that read these rows ("fc", "layers.0.self_attn.q_proj", ...);
// rows: [n, cols]. q_proj sees the block rows only (the q of context rows is
// never used), k_proj / v_proj the new context rows then the block rows.
using DraftObserver =
    std::function<void(const std::vector<std::string>& modules, const float* rows, int64_t n, int64_t cols)>;

// The target id of each draft id of DIR's reduced vocabulary (its d2t offsets, target id = i + d2t[i]), validated:
// int64 [Vd], ids ascending inside [0, target_vocab). Throws naming DIR and the entry.
std::vector<int32_t> read_draft_vocab_ids(const std::string& dir, int64_t Vd, int64_t target_vocab);

struct DraftOptions {
  std::optional<WeightFormat> weights;  // nullopt: each tensor's stored precision class
  bool progress = false;
};

class DraftModel {
 public:
  // Loads DIR (config.json + safetensors, dense or quantized) for `target`,
  // whose embedding, lm_head and thread pool the drafter uses. Validates the
  // drafter against the target: fc input width = taps x target hidden, tap
  // ids < target layers, hidden sizes equal, mask_token_id inside the target
  // vocab. `target` must outlive the drafter.
  static std::unique_ptr<DraftModel> load(const std::string& dir, Transformer& target, const DraftOptions& opts);
  // The same with DIR/config.json already read (cfg = load_draft_config(dir)).
  static std::unique_ptr<DraftModel> load(const std::string& dir, const DraftConfig& cfg, Transformer& target,
                                          const DraftOptions& opts);

  const DraftConfig& config() const { return cfg_; }
  const DraftWeights& weights() const { return w_; }
  uint64_t weight_bytes() const;  // drafter-owned bytes read per draft step

  DraftCache new_cache(int64_t capacity, KvDType dtype = KvDType::kF32, bool rings = true) const {
    return DraftCache(cfg_, capacity, dtype, rings);
  }

  // One draft pass. First appends the context of n_ctx newly committed
  // tokens at positions cache.size().. (feats: [n_ctx, T*H] target taps in
  // target_layer_ids order), then runs the block [anchor, MASK x k] at
  // positions P = cache.size() (after the append) .. P+k.
  //   hidden: [k+1, H] final-normed block hidden states (slot 0 = anchor).
  void forward(DraftCache& cache, const float* feats, int64_t n_ctx, int32_t anchor, int64_t k,
               std::vector<float>& hidden);

  // forward() for several sequences at once (the serving engine's drafts):
  // every drafter weight, and every GEMM, runs once over the context and
  // block rows of all jobs; attention and DFlash2's convolutions stay per
  // job. The linear kernels are batch invariant, so each job's hidden
  // states equal, bit for bit, what forward() gives it alone.
  struct DraftJob {
    DraftCache* cache;
    const float* feats;  // [n_ctx, T*H]
    int64_t n_ctx;
    int32_t anchor;
    int64_t k;                   // -1: no block, the context is only appended (hidden comes back empty)
    std::vector<float>* hidden;  // out: [k+1, H]
  };
  void forward_batch(const std::vector<DraftJob>& jobs);

  // Observer of linear inputs (DraftObserver); empty (the default): one
  // branch per linear, numerics unchanged either way.
  void set_observer(DraftObserver f) { observer_ = std::move(f); }

  // Draft logits of n hidden rows through the target lm_head (or the
  // drafter's own reduced head, -inf outside its vocabulary), times
  // output_multiplier, softcapped: [n, V].
  void logits(const float* hidden, int64_t n, std::vector<float>& out);

  // DFlash2 path selector over slots 1..k (dflash.md §5.1b).
  //   hidden: [k, H] (slots 1..k), logits: [k, V] from logits().
  //   cand:   [k, C] top-C candidate ids per slot (C = selector_top_k), in
  //           descending logit order (ties: lower id first).
  //   scores: [k, C] realized path scores S_t(prev, c) along the walk.
  //   tokens: [k] chosen path. temperature <= 0: greedy walk (lowest index
  //   on ties); else index ~ softmax(scores / T) drawn with u (uniforms in
  //   [0,1), one per slot) and q: [k, C] those probabilities.
  struct Selection {
    std::vector<int32_t> tokens, cand;
    std::vector<float> scores, q;
  };
  void select(const float* hidden, const float* logits, int64_t k, int32_t anchor, float temperature,
              const std::vector<double>& u, Selection& out);

 private:
  DraftModel(const std::string& dir, DraftConfig cfg, Transformer& target, const DraftOptions& opts);
  DraftConfig cfg_;
  DraftWeights w_;
  Transformer& target_;
  RopeTables rope_;
  DraftObserver observer_;
  std::vector<float> reduced_;  // [n, draft_vocab_size] scratch of logits()
};

}  // namespace blockspec
