// What a GGUF file says about the model: the HF-style ModelConfig, the map
// from GGUF tensor names to HF names, the Q/K row order, and the tokenizer
// metadata. Architectures: llama, qwen2 (and qwen3, same keys plus
// attn_q_norm/attn_k_norm; not yet checked on a real file).
//
// Q/K row order (why unpermute_llama_qk_rows exists): llama.cpp's converter
// (convert_hf_to_gguf.py, LlamaModel.modify_tensors -> LlamaModel.permute)
// reorders the rows of q_proj/k_proj (weights and biases) of arch `llama`
// inside each head from HF's "rotate half" (NeoX) order to interleaved pairs,
// because llama.cpp runs `llama` with LLAMA_ROPE_TYPE_NORM (rotates
// consecutive pairs) and `qwen2`/`qwen3` with LLAMA_ROPE_TYPE_NEOX
// (llama_model_rope_type in src/llama-model.cpp). qwen2 tensors are written
// unpermuted. transformers' GGUF loader undoes the permutation for llama
// (LlamaTensorProcessor -> reverse_permute in modeling_gguf_pytorch_utils.py).
// An engine that applies NeoX rope to HF-ordered weights must therefore
// unpermute llama Q/K rows and leave qwen2 alone: needs_qk_unpermute().
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "formats/hf_config.h"

namespace blockspec {

// Fills ModelConfig from `<arch>.*` keys and the tensor list. Fails naming the
// key/tensor on a missing key, an unknown architecture, inconsistent sizes,
// or features ModelConfig cannot express (rope_freqs.weight, unknown rope
// scaling type), so a file never loads silently with the wrong shape.
ModelConfig config_from_gguf(const GgufFile& file);

// "blk.3.attn_q.weight" -> "model.layers.3.self_attn.q_proj.weight";
// nullopt for names outside the map (e.g. rope_freqs.weight).
std::optional<std::string> gguf_to_hf_name(const std::string& gguf_name);

// True for arch `llama`: its attn_q / attn_k rows (and biases) were permuted
// by the converter and must go through unpermute_llama_qk_rows before a NeoX
// ("rotate half") rope can use them.
bool needs_qk_unpermute(const GgufFile& file);

// Undoes LlamaModel.permute on a row-major matrix of `n_rows` rows of
// `row_bytes` bytes each (any element type, including quantized rows: the
// permutation moves whole rows). n_heads is n_heads for Q and n_kv_heads for
// K; head_dim = n_rows / n_heads must be even. Row mapping, per head h:
//   out[h*hd + s*hd/2 + i] = in[h*hd + 2*i + s]   for s in {0,1}, i < hd/2
// i.e. GGUF row 2i (first of pair i) goes to HF row i, GGUF row 2i+1 to HF
// row hd/2 + i.
void unpermute_llama_qk_rows(const uint8_t* in, uint8_t* out, int64_t n_rows, int64_t row_bytes,
                             int64_t n_heads);

// Tokenizer metadata, verbatim. Empty/absent fields stay empty/nullopt.
struct GgufTokenizerData {
  std::string model;  // tokenizer.ggml.model: "gpt2" (byte-level BPE), "llama" (SentencePiece), ...
  std::string pre;    // tokenizer.ggml.pre: pre-tokenizer id, e.g. "qwen2", "smollm"
  std::vector<std::string> tokens;     // id -> token text
  std::vector<int32_t> token_types;    // id -> llama_token_type (1 normal, 3 control, 4 user-defined, 6 byte)
  std::vector<std::string> merges;     // "a b" pairs, rank order
  std::optional<int32_t> bos_token_id, eos_token_id, padding_token_id, unknown_token_id, eot_token_id;
  std::optional<bool> add_bos_token, add_eos_token;
  std::string chat_template;  // tokenizer.chat_template
};
GgufTokenizerData gguf_tokenizer(const GgufFile& file);

}  // namespace blockspec
