// Where the weights of a model come from: an HF safetensors directory or a
// GGUF file. Both answer in HF tensor names and HF shapes ([out, in]), and
// hand out dense F32/BF16/F16 tensors (zero-copy where the file allows); the
// loader then converts each to the compute format chosen for it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "formats/hf_config.h"
#include "tensor/block_quant.h"
#include "tensor/quant_tensor.h"
#include "tensor/tensor.h"

namespace blockspec {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual const std::string& path() const = 0;
  virtual const ModelConfig& config() const = 0;
  virtual bool has(const std::string& hf_name) const = 0;
  // Every tensor name, where the format lists them (safetensors); {} otherwise.
  virtual std::vector<std::string> names() const { return {}; }
  virtual Shape shape(const std::string& hf_name) const = 0;
  // Storage type as the file names it ("BF16", "Q4_K", ...), for messages.
  virtual std::string storage_type(const std::string& hf_name) const = 0;
  // The compute format that keeps the stored precision class: F32 -> f32,
  // BF16 -> bf16, F16 -> f32 (bf16 would drop mantissa bits), GGUF block
  // formats -> themselves (has_blocks), or q8 where the loader moves their values.
  virtual WeightFormat natural_format(const std::string& hf_name) const = 0;
  // Dense values: F32, BF16 or F16. Throws naming the tensor on failure.
  virtual Tensor load(const std::string& hf_name) const = 0;
  // Rows [r0, r1) of a 2-D tensor as f32 into out [r1 - r0, K], so large
  // matrices convert chunk by chunk. Default: through load().
  virtual void load_rows(const std::string& hf_name, int64_t r0, int64_t r1, float* out) const;
  // Tells the source a tensor is converted and its file pages can go.
  virtual void release(const std::string& hf_name) const {}
  // Integer codes stored in the checkpoint (GPTQ, compressed-tensors; see
  // model/quant_checkpoint.h). When has_native(name), natural_format(name) is
  // q8 or q4 and load_native fills rows [r0, r1) of the [N, K] weight as
  // codes [r1 - r0, K] and f32 scales [r1 - r0, ceil(K / 128)], exactly as
  // stored, so the loader packs them without re-quantizing.
  virtual bool has_native(const std::string& hf_name) const { return false; }
  virtual void load_native(const std::string& hf_name, int64_t r0, int64_t r1, int8_t* codes, float* scales) const;
  // When has_native(name): whether the checkpoint also quantizes the module's
  // activations (compressed-tensors W8A8 with dynamic int8 input_activations:
  // QuantTensor::act_int8) or is weight-only (GPTQ, W4A16 / W8A16). Such activations are quantized per token
  // (QuantTensor::act_per_token), as the checkpoint declares and vLLM runs it.
  virtual bool native_act_int8(const std::string& hf_name) const { return false; }
  // Float codes stored in the checkpoint (compressed-tensors FP8 / NVFP4 /
  // MXFP4): natural_format(name) is that format and fp_native(name) gives the
  // stored codes and scales as a QuantTensor of it, never re-quantized.
  virtual bool has_fp_native(const std::string& hf_name) const { return false; }
  // GGUF block formats kept as stored: when has_blocks(name), natural_format(name) is the tensor's block
  // format (tensor/block_quant.h) and load_blocks fills the blocks of rows [r0, r1) of the [N, K] weight,
  // decoded, as out[(r1 - r0) * K / B] in (row, block) order.
  virtual bool has_blocks(const std::string& hf_name) const { return false; }
  virtual void load_blocks(const std::string& hf_name, int64_t r0, int64_t r1, QBlock* out) const;
  // The config declares a quantized KV cache (compressed-tensors kv_cache_scheme): every attention layer must
  // then store self_attn.k_scale and self_attn.v_scale.
  virtual bool requires_kv_scales() const { return false; }
  virtual QuantTensor fp_native(const std::string& hf_name) const;
};

// DIR with config.json + safetensors, a .gguf file, or a DIR holding exactly
// one .gguf file. Throws Error naming the path if it is none of these.
std::unique_ptr<WeightSource> open_weight_source(const std::string& path);

// Path of the GGUF file `path` designates, or "" if it is not a GGUF model.
std::string gguf_path_of(const std::string& path);

}  // namespace blockspec
