// GGUF metadata -> ModelConfig, tensor names -> HF names, llama Q/K row
// order, tokenizer metadata. Key names: gguf-py 0.19.0 constants.py (Keys).
#include "formats/gguf_model.h"

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "base/error.h"
#include "formats/gguf_qwen35.h"

namespace blockspec {
namespace {

// GGUF stores epsilons and rope bases as float32; HF configs hold the decimal
// the converter read (1e-05, not 9.99999974738e-06). The shortest decimal
// that round-trips the float recovers that value, so a config from GGUF
// compares equal to the same model's config.json.
double shortest_double(double f32_value) {
  float f = static_cast<float>(f32_value);
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf) - 1, f);
  *res.ptr = '\0';
  return std::strtod(buf, nullptr);
}

double get_f32_decimal(const GgufFile& f, const std::string& key) {
  const GgufValue& v = f.value(key);
  double d = f.get_float(key);
  return v.type == GgufType::kF32 ? shortest_double(d) : d;
}

int64_t get_positive(const GgufFile& f, const std::string& key) {
  int64_t v = f.get_int(key);
  if (v <= 0) fail(f.path(), ": metadata key \"", key, "\" = ", v, ", expected > 0");
  return v;
}

void read_rope(const GgufFile& f, const std::string& a, ModelConfig& c) {
  if (f.has(a + ".rope.freq_base")) c.rope.theta = get_f32_decimal(f, a + ".rope.freq_base");
  if (f.has_tensor("rope_freqs.weight"))
    fail(f.path(), ": tensor \"rope_freqs.weight\" holds per-dimension rope frequency factors (llama3-style "
         "scaling baked in by the converter), which blockspec cannot express yet");
  std::string type = f.find_string(a + ".rope.scaling.type").value_or("none");
  if (type == "none") {
    c.rope.type = RopeType::kDefault;
  } else if (type == "linear") {
    c.rope.type = RopeType::kLinear;
  } else if (type == "yarn") {
    c.rope.type = RopeType::kYarn;
  } else {
    fail(f.path(), ": metadata key \"", a, ".rope.scaling.type\" = \"", type,
         "\" is not supported (supported: none, linear, yarn)");
  }
  if (c.rope.type != RopeType::kDefault) {
    c.rope.factor = get_f32_decimal(f, a + ".rope.scaling.factor");
    if (!(c.rope.factor > 0))
      fail(f.path(), ": metadata key \"", a, ".rope.scaling.factor\" = ", c.rope.factor, ", expected > 0");
    c.rope.original_max_position_embeddings = f.find_int(a + ".rope.scaling.original_context_length").value_or(0);
  }
  if (c.rope.type == RopeType::kYarn) {
    if (f.has(a + ".rope.scaling.yarn_beta_fast")) c.rope.beta_fast = get_f32_decimal(f, a + ".rope.scaling.yarn_beta_fast");
    if (f.has(a + ".rope.scaling.yarn_beta_slow")) c.rope.beta_slow = get_f32_decimal(f, a + ".rope.scaling.yarn_beta_slow");
    if (f.has(a + ".rope.scaling.attn_factor"))
      c.rope.attention_factor = get_f32_decimal(f, a + ".rope.scaling.attn_factor");
  }
}

// Fails unless tensor `name` exists with GGUF dims `ne`.
void expect_ne(const GgufFile& f, const std::string& name, std::vector<int64_t> ne) {
  const GgufTensorInfo& t = f.tensor_info(name);
  if (t.ne != ne)
    fail(f.path(), ": tensor \"", name, "\" has ne ", shape_str(Shape(t.ne.begin(), t.ne.end())), ", expected ",
         shape_str(Shape(ne.begin(), ne.end())), " from the metadata");
}

}  // namespace

ModelConfig config_from_gguf(const GgufFile& f) {
  ModelConfig c;
  const std::string a = f.get_string("general.architecture");
  if (a == "llama") {
    c.arch = Arch::kLlama;
    c.architecture = "LlamaForCausalLM";
  } else if (a == "qwen2") {
    c.arch = Arch::kQwen2;
    c.architecture = "Qwen2ForCausalLM";
  } else if (a == "qwen3") {
    c.arch = Arch::kQwen3;
    c.architecture = "Qwen3ForCausalLM";
  } else if (a == "qwen35") {
    c.arch = Arch::kQwen35;  // the rest after the common keys (formats/gguf_qwen35.h)
  } else {
    fail(f.path(), ": metadata key \"general.architecture\" = \"", a,
         "\" is not supported (supported: llama, qwen2, qwen3, qwen35)");
  }
  c.model_type = a;
  c.hidden_size = get_positive(f, a + ".embedding_length");
  c.n_layers = get_positive(f, a + ".block_count");
  c.intermediate_size = get_positive(f, a + ".feed_forward_length");
  c.n_heads = get_positive(f, a + ".attention.head_count");
  c.n_kv_heads = f.has(a + ".attention.head_count_kv") ? get_positive(f, a + ".attention.head_count_kv") : c.n_heads;
  if (c.n_heads % c.n_kv_heads != 0)
    fail(f.path(), ": ", a, ".attention.head_count = ", c.n_heads, " is not a multiple of head_count_kv = ", c.n_kv_heads);
  if (f.has(a + ".attention.key_length")) {
    c.head_dim = get_positive(f, a + ".attention.key_length");
  } else {
    if (c.hidden_size % c.n_heads != 0)
      fail(f.path(), ": ", a, ".embedding_length = ", c.hidden_size, " is not a multiple of head_count = ", c.n_heads);
    c.head_dim = c.hidden_size / c.n_heads;
  }
  if (f.has(a + ".rope.dimension_count")) {
    int64_t rot = get_positive(f, a + ".rope.dimension_count");
    if (rot > c.head_dim || rot % 2 != 0)
      fail(f.path(), ": metadata key \"", a, ".rope.dimension_count\" = ", rot, ", expected an even value <= head_dim ",
           c.head_dim);
    c.rope.partial_rotary_factor = static_cast<double>(rot) / static_cast<double>(c.head_dim);
  }
  c.max_position_embeddings = get_positive(f, a + ".context_length");
  c.rms_norm_eps = get_f32_decimal(f, a + ".attention.layer_norm_rms_epsilon");
  read_rope(f, a, c);

  // Vocabulary: the token list when present, else the embedding's rows.
  const GgufTensorInfo& embd = f.tensor_info("token_embd.weight");
  if (f.has("tokenizer.ggml.tokens")) {
    c.vocab_size = static_cast<int64_t>(f.get_string_array("tokenizer.ggml.tokens").size());
  } else {
    if (embd.ne.size() != 2) fail(f.path(), ": tensor \"token_embd.weight\" must be 2-D");
    c.vocab_size = embd.ne[1];
  }
  expect_ne(f, "token_embd.weight", {c.hidden_size, c.vocab_size});
  c.tie_word_embeddings = !f.has_tensor("output.weight");
  if (!c.tie_word_embeddings) expect_ne(f, "output.weight", {c.hidden_size, c.vocab_size});
  if (c.arch == Arch::kQwen35) {
    qwen35_config_from_gguf(f, c);
  } else {
    expect_ne(f, "blk.0.attn_q.weight", {c.hidden_size, c.n_heads * c.head_dim});
    expect_ne(f, "blk.0.attn_k.weight", {c.hidden_size, c.n_kv_heads * c.head_dim});
  }
  expect_ne(f, "blk.0.ffn_up.weight", {c.hidden_size, c.intermediate_size});
  if (!f.has_tensor(str_cat("blk.", c.n_layers - 1, ".attn_norm.weight")))
    fail(f.path(), ": tensor \"blk.", c.n_layers - 1, ".attn_norm.weight\" missing, but ", a, ".block_count = ",
         c.n_layers);
  c.attention_bias = f.has_tensor("blk.0.attn_q.bias");
  c.attention_out_bias = f.has_tensor("blk.0.attn_output.bias");
  c.mlp_bias = f.has_tensor("blk.0.ffn_up.bias");

  if (auto eos = f.find_int("tokenizer.ggml.eos_token_id")) c.eos_token_ids.push_back(static_cast<int32_t>(*eos));
  if (auto bos = f.find_int("tokenizer.ggml.bos_token_id")) c.bos_token_id = static_cast<int32_t>(*bos);
  return c;
}

std::optional<std::string> gguf_to_hf_name(const std::string& g) {
  if (g == "token_embd.weight") return "model.embed_tokens.weight";
  if (g == "output_norm.weight") return "model.norm.weight";
  if (g == "output.weight") return "lm_head.weight";
  if (g.rfind("blk.", 0) != 0) return std::nullopt;
  size_t dot = g.find('.', 4);
  if (dot == std::string::npos || dot == 4) return std::nullopt;
  std::string layer = g.substr(4, dot - 4);
  for (char ch : layer)
    if (ch < '0' || ch > '9') return std::nullopt;
  std::string rest = g.substr(dot + 1);  // "attn_q.weight"
  if (auto q = qwen35_hf_name(layer, rest)) return q;  // Gated DeltaNet tensors of qwen35
  size_t last = rest.rfind('.');
  if (last == std::string::npos) return std::nullopt;
  std::string module = rest.substr(0, last), suffix = rest.substr(last);  // ".weight" / ".bias"
  static constexpr std::pair<const char*, const char*> kMap[] = {
      {"attn_norm", "input_layernorm"},     {"attn_q", "self_attn.q_proj"},
      {"attn_k", "self_attn.k_proj"},       {"attn_v", "self_attn.v_proj"},
      {"attn_output", "self_attn.o_proj"},  {"attn_q_norm", "self_attn.q_norm"},
      {"attn_k_norm", "self_attn.k_norm"},  {"ffn_norm", "post_attention_layernorm"},
      {"ffn_gate", "mlp.gate_proj"},        {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"},
  };
  for (const auto& [from, to] : kMap)
    if (module == from) return str_cat("model.layers.", layer, ".", to, suffix);
  return std::nullopt;
}

bool needs_qk_unpermute(const GgufFile& file) { return file.get_string("general.architecture") == "llama"; }

void unpermute_llama_qk_rows(const uint8_t* in, uint8_t* out, int64_t n_rows, int64_t row_bytes, int64_t n_heads) {
  if (n_heads <= 0 || n_rows % n_heads != 0 || (n_rows / n_heads) % 2 != 0)
    fail("unpermute_llama_qk_rows: ", n_rows, " rows do not split into ", n_heads, " heads of even size");
  const int64_t hd = n_rows / n_heads, half = hd / 2;
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t s = 0; s < 2; ++s)
      for (int64_t i = 0; i < half; ++i)
        std::memcpy(out + (h * hd + s * half + i) * row_bytes, in + (h * hd + 2 * i + s) * row_bytes,
                    static_cast<size_t>(row_bytes));
}

GgufTokenizerData gguf_tokenizer(const GgufFile& f) {
  GgufTokenizerData t;
  t.model = f.find_string("tokenizer.ggml.model").value_or("");
  t.pre = f.find_string("tokenizer.ggml.pre").value_or("");
  if (f.has("tokenizer.ggml.tokens")) t.tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (f.has("tokenizer.ggml.token_type")) {
    for (int64_t v : f.get_int_array("tokenizer.ggml.token_type")) t.token_types.push_back(static_cast<int32_t>(v));
    if (t.token_types.size() != t.tokens.size())
      fail(f.path(), ": metadata key \"tokenizer.ggml.token_type\" has ", t.token_types.size(),
           " entries, expected one per token (", t.tokens.size(), ")");
  }
  if (f.has("tokenizer.ggml.merges")) t.merges = f.get_string_array("tokenizer.ggml.merges");
  auto id = [&](const char* key) -> std::optional<int32_t> {
    auto v = f.find_int(key);
    if (!v) return std::nullopt;
    if (*v < 0 || *v >= static_cast<int64_t>(t.tokens.size()))
      fail(f.path(), ": metadata key \"", key, "\" = ", *v, " is not a token id (vocabulary has ", t.tokens.size(),
           " tokens)");
    return static_cast<int32_t>(*v);
  };
  t.bos_token_id = id("tokenizer.ggml.bos_token_id");
  t.eos_token_id = id("tokenizer.ggml.eos_token_id");
  t.padding_token_id = id("tokenizer.ggml.padding_token_id");
  t.unknown_token_id = id("tokenizer.ggml.unknown_token_id");
  t.eot_token_id = id("tokenizer.ggml.eot_token_id");
  if (f.has("tokenizer.ggml.add_bos_token")) t.add_bos_token = f.get_bool("tokenizer.ggml.add_bos_token");
  if (f.has("tokenizer.ggml.add_eos_token")) t.add_eos_token = f.get_bool("tokenizer.ggml.add_eos_token");
  t.chat_template = f.find_string("tokenizer.chat_template").value_or("");
  return t;
}

}  // namespace blockspec
