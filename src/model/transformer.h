// Decoder-only transformer: dense Qwen3 (q/k RMSNorm), Qwen2 (qkv bias),
// Llama, and hybrid Qwen3.5 (Gated DeltaNet layers between gated
// full-attention layers; a sequence's recurrent state rides in its KvCache).
// Pre-norm blocks: x += mixer(norm(x)); x += mlp(norm(x)).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/memory_bandwidth.h"
#include "base/thread_pool.h"
#include "formats/hf_config.h"
#include "kernels/ops.h"
#include "kv/kv_cache.h"
#include "model/weights.h"

namespace blockspec {

struct ModelOptions {
  int n_threads = 0;     // 0: all cores
  std::string isa;       // "" / "auto": best available
  int64_t prefill_chunk = 256;  // tokens per forward during prefill
  // Round activations to bf16 wherever transformers does when it runs a
  // bf16 checkpoint in bf16 (eager attention): after every linear, norm,
  // RoPE product, attention score/probability, activation and residual add.
  // Off by default: f32 activations are more accurate; on, the engine
  // reproduces HF's bf16 numerics (used by the golden tests).
  bool emulate_bf16_activations = false;
  // Compute format of every weight matrix; nullopt keeps the stored
  // precision class of each tensor (bf16 stays bf16, Q4_K becomes q4, ...).
  std::optional<WeightFormat> weights;
  bool progress = false;  // progress bar on stderr while loading (TTY only)
  // Storage dtype of the KV cache (docs/kv_cache.md). nullopt = "auto": bf16
  // when every weight matrix is bf16 (the model dtype), else f32. The library
  // default stays f32, so results are unchanged unless a caller asks.
  std::optional<KvDType> kv_cache_dtype = KvDType::kF32;
  // Hybrid models: prefill chunks run the Gated DeltaNet recurrence in its
  // chunked form (faster; the state then depends on how a prompt was split
  // into steps, up to summation order). Off: the recurrent form everywhere.
  bool gdn_chunked_prefill = false;
};

class Transformer {
 public:
  // Loads an HF directory (config.json + safetensors) or a GGUF file.
  static std::unique_ptr<Transformer> load(const std::string& path, const ModelOptions& opts);

  const ModelConfig& config() const { return cfg_; }
  const ModelWeights& weights() const { return w_; }
  const char* isa() const { return kt_.isa; }  // the kernels chosen at load ("avx512", "ref", ...)
  bool bf16_activations() const { return opts_.emulate_bf16_activations; }
  int n_threads() const { return pool_.n_threads(); }
  // CPU seconds of the calling thread, then of each pool worker (contention shows as CPU time < wall time).
  std::vector<double> thread_cpu_seconds() const;
  uint64_t weight_bytes() const;  // bytes of all weights read per decode step
  // This machine's read bandwidth as decode sees it: this model's threads stream a `bytes` buffer with this
  // model's ISA (KernelTable::read_stream), `repeats` times (base/memory_bandwidth.h).
  BandwidthResult measure_read_bandwidth(size_t bytes, int repeats = 9);

  KvCache new_cache(int64_t capacity) const;  // in kv_cache_dtype()
  KvCache new_cache(int64_t capacity, KvDType dtype) const;  // in another dtype (eval sweeps)
  KvDType kv_cache_dtype() const { return kv_dtype_; }  // resolved (never "auto")
  // The checkpoint's FP8 KV scales per layer (self_attn.k_scale / v_scale), empty when it has none (1.0 is used).
  const std::vector<float>& kv_k_scales() const { return w_.kv_k_scale; }
  const std::vector<float>& kv_v_scales() const { return w_.kv_v_scale; }
  // KV bytes held (and read by each decode step) per cached token.
  int64_t kv_bytes_per_token() const;
  // Model state a sequence holds besides its KV (the recurrent state of
  // hybrid models, which the engine keeps in a StatePool slot): none for a
  // dense transformer.
  int64_t state_floats_per_sequence() const { return cfg_.n_linear_layers() * cfg_.gdn.state_floats(); }

  // Runs n tokens at positions cache.size().. and appends their K/V.
  // logits: [n, vocab] if all_logits, else [1, vocab] for the last token.
  void forward(const int32_t* tokens, int64_t n, KvCache& cache, std::vector<float>& logits,
               bool all_logits);

  // One forward over several sequences at once: every weight is read once
  // for all their tokens (what makes batching and verification cheap on a
  // bandwidth-bound CPU); attention stays per sequence.
  struct SeqChunk {
    const int32_t* tokens;
    int64_t n;
    KvCache* cache;
    bool all_logits;
    // When non-null: resized to [n, n_taps * H], the hidden states after each
    // layer of tap_layers() for every token of the chunk (HF
    // output_hidden_states[t + 1]: the residual stream after layer t, or the
    // final-normed state for the last layer).
    std::vector<float>* taps = nullptr;
    // Speculative verification: only a prefix of these tokens may be kept
    // (commit). Hybrid models record what rolling their state back needs.
    bool verify = false;
  };
  // logits: rows of each chunk in order (n rows if all_logits, else 1).
  void forward_batch(const std::vector<SeqChunk>& chunks, std::vector<float>& logits);

  // Keeps the first `size` positions of the cache after a forward (speculative
  // rollback; size >= the size before the last forward). Dense models crop the
  // KV; hybrid ones also roll their recurrent state back to those tokens,
  // which needs the last forward of this cache to have been a verify chunk
  // (SeqChunk::verify) and fails otherwise.
  void commit(KvCache& cache, int64_t size);

  // Prefill in chunks of opts.prefill_chunk; returns logits like forward.
  // taps (optional): [n, n_taps * H] as in SeqChunk.
  void prefill(const int32_t* tokens, int64_t n, KvCache& cache, std::vector<float>& logits,
               bool all_logits, std::vector<float>* taps = nullptr);

  // Layers whose outputs forward() captures into SeqChunk::taps (DFlash
  // target_layer_ids). Throws if an id is not a layer of this model.
  void set_tap_layers(const std::vector<int64_t>& layers);
  const std::vector<int64_t>& tap_layers() const { return tap_layers_; }

  // Kernels and threads of this model, for a drafter that runs beside it.
  OpContext op_context() { return OpContext{&kt_, &pool_, opts_.emulate_bf16_activations}; }

 private:
  Transformer(const WeightSource& src, const ModelOptions& opts);
  ModelConfig cfg_;
  ModelWeights w_;
  ModelOptions opts_;
  KernelTable kt_;
  ThreadPool pool_;
  RopeTables rope_;
  KvDType kv_dtype_ = KvDType::kF32;
  std::vector<int64_t> tap_layers_;
};

}  // namespace blockspec
