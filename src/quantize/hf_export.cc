// See hf_export.h.
#include "quantize/hf_export.h"

#include <fstream>

#include "base/error.h"
#include "formats/gguf.h"
#include "formats/gguf_model.h"
#include "tokenizer/gguf_vocab.h"

namespace blockspec {

using ojson = nlohmann::ordered_json;

ojson hf_config_json(const ModelConfig& c, bool has_lm_head) {
  ojson j;
  const char* arch = c.arch == Arch::kQwen3 ? "Qwen3ForCausalLM" : c.arch == Arch::kQwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
  j["architectures"] = {arch};
  j["model_type"] = arch_name(c.arch);
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope.theta;
  const RopeConfig& r = c.rope;
  if (r.type == RopeType::kDefault) {
    j["rope_scaling"] = nullptr;
  } else {
    ojson s;
    s["rope_type"] = rope_type_name(r.type);
    s["factor"] = r.factor;
    if (r.original_max_position_embeddings > 0) s["original_max_position_embeddings"] = r.original_max_position_embeddings;
    if (r.type == RopeType::kLlama3) s["low_freq_factor"] = r.low_freq_factor, s["high_freq_factor"] = r.high_freq_factor;
    if (r.type == RopeType::kYarn) {
      s["beta_fast"] = r.beta_fast, s["beta_slow"] = r.beta_slow;
      if (r.attention_factor) s["attention_factor"] = *r.attention_factor;
    }
    j["rope_scaling"] = s;
  }
  j["tie_word_embeddings"] = !has_lm_head;
  if (c.arch == Arch::kLlama) j["attention_bias"] = c.attention_bias, j["mlp_bias"] = c.mlp_bias;
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  else if (!c.eos_token_ids.empty()) j["eos_token_id"] = c.eos_token_ids;
  j["torch_dtype"] = c.torch_dtype.empty() ? "bfloat16" : c.torch_dtype;
  return j;
}

std::vector<std::string> export_gguf_tokenizer(const std::string& gguf, const std::string& dir) {
  GgufFile f(gguf);
  const GgufTokenizerData d = gguf_tokenizer(f);
  if (d.model != "gpt2")
    return {str_cat("tokenizer: GGUF tokenizer.ggml.model \"", d.model, "\" is not byte-level BPE; no tokenizer.json "
                    "written: pass the GGUF itself where a tokenizer is needed")};
  const std::vector<std::string> res = gguf_pre_regexes(d.pre.empty() ? "gpt2" : d.pre);
  if (res.empty())
    return {str_cat("tokenizer: GGUF tokenizer.ggml.pre \"", d.pre, "\" has no known split regex; no tokenizer.json "
                    "written: pass the GGUF itself where a tokenizer is needed")};
  ojson added = ojson::array();
  // A plain (sorted) json object: ordered_json looks keys up linearly, quadratic over a 150k-token vocab.
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < d.tokens.size(); ++i) {
    vocab[d.tokens[i]] = static_cast<int64_t>(i);
    const int32_t t = i < d.token_types.size() ? d.token_types[i] : 1;
    if (t == static_cast<int32_t>(GgufTokenType::kControl) || t == static_cast<int32_t>(GgufTokenType::kUserDefined)) {
      ojson a;
      a["id"] = static_cast<int64_t>(i);
      a["content"] = d.tokens[i];
      a["single_word"] = false;
      a["lstrip"] = false;
      a["rstrip"] = false;
      a["normalized"] = t != static_cast<int32_t>(GgufTokenType::kControl);
      a["special"] = t == static_cast<int32_t>(GgufTokenType::kControl);
      added.push_back(a);
    }
  }
  // blockspec's tokenizer.json reader (and byte-level BPE) needs a token for every byte: GPT-2's byte-to-unicode
  // map (printable bytes as themselves, the rest as U+0100 + n in order).
  {
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const uint32_t cp = self ? static_cast<uint32_t>(b) : 256u + static_cast<uint32_t>(extra++);
      std::string u;
      if (cp < 0x80) u = std::string(1, static_cast<char>(cp));
      else u = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
      if (!vocab.contains(u))
        return {str_cat("tokenizer: the GGUF vocab has no token for byte ", b, "; no tokenizer.json written (blockspec's "
                        "byte-level BPE reader needs all 256): pass the GGUF itself where a tokenizer is needed")};
    }
  }
  ojson pre = ojson::array();
  for (const std::string& re : res) {
    ojson s;
    s["type"] = "Split";
    s["pattern"] = {{"Regex", re}};
    s["behavior"] = "Isolated";
    s["invert"] = false;
    pre.push_back(s);
  }
  ojson bl = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  pre.push_back(bl);
  ojson model;
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = nullptr;
  model["continuing_subword_prefix"] = "";
  model["end_of_word_suffix"] = "";
  model["fuse_unk"] = false;
  model["byte_fallback"] = false;
  model["ignore_merges"] = false;
  model["vocab"] = "@@VOCAB@@";  // spliced in below as text
  model["merges"] = d.merges;
  ojson tj;
  tj["version"] = "1.0";
  tj["truncation"] = nullptr;
  tj["padding"] = nullptr;
  tj["added_tokens"] = added;
  tj["normalizer"] = nullptr;
  tj["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", pre}};
  tj["post_processor"] = nullptr;
  tj["decoder"] = bl;
  tj["model"] = model;
  {
    std::ofstream o(dir + "/tokenizer.json", std::ios::binary);
    std::string text = tj.dump(2);
    const size_t at = text.find("\"@@VOCAB@@\"");
    BS_ASSERT(at != std::string::npos);
    text.replace(at, 11, vocab.dump());
    o << text << "\n";
    if (!o) fail(dir, "/tokenizer.json: write error");
  }
  ojson tc;
  auto tok = [&](const std::optional<int32_t>& id) -> ojson {
    return id && *id >= 0 && static_cast<size_t>(*id) < d.tokens.size() ? ojson(d.tokens[*id]) : ojson(nullptr);
  };
  tc["bos_token"] = tok(d.bos_token_id);
  tc["eos_token"] = tok(d.eos_token_id);
  tc["pad_token"] = tok(d.padding_token_id);
  tc["add_bos_token"] = d.add_bos_token.value_or(false);
  if (!d.chat_template.empty()) tc["chat_template"] = d.chat_template;
  std::ofstream o(dir + "/tokenizer_config.json", std::ios::binary);
  o << tc.dump(2) << "\n";
  if (!o) fail(dir, "/tokenizer_config.json: write error");
  return {};
}

}  // namespace blockspec
