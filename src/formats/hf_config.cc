#include "formats/hf_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mapped_file.h"

namespace blockspec {

using nlohmann::json;

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::kQwen3: return "qwen3";
    case Arch::kQwen2: return "qwen2";
    case Arch::kLlama: return "llama";
    case Arch::kQwen35: return "qwen3_5";
  }
  return "?";
}

const char* draft_method_of_architecture(const std::string& a) {
  // NeMo AutoModel exports the Qwen3-prefixed spellings (dflash.md §1.1).
  if (a == "DFlashDraftModel" || a == "Qwen3DFlashDraftModel") return "dflash";
  if (a == "DFlash2DraftModel" || a == "Qwen3DFlash2DraftModel") return "dflash2";
  return nullptr;
}

const char* rope_type_name(RopeType t) {
  switch (t) {
    case RopeType::kDefault: return "default";
    case RopeType::kLinear: return "linear";
    case RopeType::kYarn: return "yarn";
    case RopeType::kLlama3: return "llama3";
  }
  return "?";
}

namespace {

struct Reader {
  const json& j;
  std::string what;

  const json* find(const char* key) const {
    auto it = j.find(key);
    return (it == j.end() || it->is_null()) ? nullptr : &*it;
  }
  int64_t get_int(const char* key, std::optional<int64_t> def = std::nullopt) const {
    const json* v = find(key);
    if (v == nullptr) {
      if (def) return *def;
      fail(what, ": missing required field \"", key, "\"");
    }
    if (!v->is_number_integer()) fail(what, ": field \"", key, "\" must be an integer, found ", v->dump());
    return v->get<int64_t>();
  }
  int64_t get_pos(const char* key, std::optional<int64_t> def = std::nullopt) const {
    int64_t v = get_int(key, def);
    if (v <= 0) fail(what, ": field \"", key, "\" must be > 0, found ", v);
    return v;
  }
  double get_num(const json& obj, const char* key, double def, const std::string& where) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return def;
    if (!it->is_number()) fail(what, ": field \"", where, key, "\" must be a number, found ", it->dump());
    return it->get<double>();
  }
  bool get_bool(const char* key, bool def) const {
    const json* v = find(key);
    if (v == nullptr) return def;
    if (!v->is_boolean()) fail(what, ": field \"", key, "\" must be true or false, found ", v->dump());
    return v->get<bool>();
  }
};

std::vector<int32_t> parse_token_ids(const json* v, const std::string& what, const char* key) {
  std::vector<int32_t> out;
  if (v == nullptr) return out;
  auto one = [&](const json& x) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0)
      fail(what, ": field \"", key, "\" must be a token id or a list of ids, found ", v->dump());
    out.push_back(static_cast<int32_t>(x.get<int64_t>()));
  };
  if (v->is_array()) {
    for (const auto& x : *v) one(x);
  } else {
    one(*v);
  }
  return out;
}

void parse_rope(const Reader& r, ModelConfig& c) {
  const json* rp = r.find("rope_parameters");
  const char* rp_name = "rope_parameters";
  if (rp == nullptr) {
    rp = r.find("rope_scaling");
    rp_name = "rope_scaling";
  }
  if (rp != nullptr && !rp->is_object()) fail(r.what, ": field \"", rp_name, "\" must be an object, found ", rp->dump());
  json empty = json::object();
  const json& p = rp ? *rp : empty;
  std::string where = std::string(rp_name) + ".";
  double theta_top = r.get_num(r.j, "rope_theta", 10000.0, "");
  c.rope.theta = r.get_num(p, "rope_theta", theta_top, where);
  c.rope.partial_rotary_factor =
      r.get_num(p, "partial_rotary_factor", r.get_num(r.j, "partial_rotary_factor", 1.0, ""), where);
  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    auto it = p.find(key);
    if (it != p.end() && !it->is_null()) {
      if (!it->is_string()) fail(r.what, ": field \"", where, key, "\" must be a string");
      type = it->get<std::string>();
      break;
    }
  }
  if (type == "default") c.rope.type = RopeType::kDefault;
  else if (type == "linear") c.rope.type = RopeType::kLinear;
  else if (type == "yarn") c.rope.type = RopeType::kYarn;
  else if (type == "llama3") c.rope.type = RopeType::kLlama3;
  else
    fail(r.what, ": ", where, "rope_type \"", type,
         "\" is not supported (supported: default, linear, yarn, llama3)");
  c.rope.factor = r.get_num(p, "factor", 1.0, where);
  if (c.rope.type != RopeType::kDefault && !(c.rope.factor > 0))
    fail(r.what, ": ", where, "factor must be > 0, found ", c.rope.factor);
  double omax = r.get_num(p, "original_max_position_embeddings",
                          r.get_num(r.j, "original_max_position_embeddings",
                                    static_cast<double>(c.max_position_embeddings), ""),
                          where);
  c.rope.original_max_position_embeddings = static_cast<int64_t>(omax);
  c.rope.low_freq_factor = r.get_num(p, "low_freq_factor", 1.0, where);
  c.rope.high_freq_factor = r.get_num(p, "high_freq_factor", 4.0, where);
  if (c.rope.type == RopeType::kLlama3 && c.rope.high_freq_factor == c.rope.low_freq_factor)
    fail(r.what, ": ", where, "high_freq_factor must differ from low_freq_factor");
  // transformers uses `get(...) or 32`, so 0 also means the default.
  double bf = r.get_num(p, "beta_fast", 0.0, where), bs = r.get_num(p, "beta_slow", 0.0, where);
  c.rope.beta_fast = bf != 0 ? bf : 32.0;
  c.rope.beta_slow = bs != 0 ? bs : 1.0;
  for (auto [key, dst] : {std::pair{"attention_factor", &c.rope.attention_factor},
                          std::pair{"mscale", &c.rope.mscale},
                          std::pair{"mscale_all_dim", &c.rope.mscale_all_dim}}) {
    auto it = p.find(key);
    if (it != p.end() && !it->is_null()) *dst = r.get_num(p, key, 0.0, where);
  }
  auto tr = p.find("truncate");
  if (tr != p.end() && tr->is_boolean()) c.rope.truncate = tr->get<bool>();
}

// qwen3_5 text fields (hybrid.md §1.2): layer types, the Gated DeltaNet
// shapes, the output gate and the (1 + w) norms.
void parse_hybrid(const Reader& r, ModelConfig& c) {
  const std::string& what = r.what;
  GdnConfig& g = c.gdn;
  g.conv_kernel = r.get_pos("linear_conv_kernel_dim", 4);
  g.key_head_dim = r.get_pos("linear_key_head_dim", 128);
  g.value_head_dim = r.get_pos("linear_value_head_dim", 128);
  g.n_key_heads = r.get_pos("linear_num_key_heads", 16);
  g.n_value_heads = r.get_pos("linear_num_value_heads", 32);
  if (g.n_value_heads % g.n_key_heads != 0)
    fail(what, ": linear_num_value_heads ", g.n_value_heads, " is not a multiple of linear_num_key_heads ", g.n_key_heads);
  if (g.conv_kernel < 2) fail(what, ": linear_conv_kernel_dim must be >= 2, found ", g.conv_kernel);
  c.linear_layers.assign(c.n_layers, false);
  if (const json* lt = r.find("layer_types")) {
    if (!lt->is_array() || static_cast<int64_t>(lt->size()) != c.n_layers)
      fail(what, ": field \"layer_types\" must list one type per layer (", c.n_layers, "), found ", lt->dump());
    for (int64_t i = 0; i < c.n_layers; ++i) {
      const json& t = (*lt)[i];
      const std::string s = t.is_string() ? t.get<std::string>() : t.dump();
      if (s == "linear_attention") c.linear_layers[i] = true;
      else if (s != "full_attention")
        fail(what, ": layer_types[", i, "] is \"", s, "\" (expected linear_attention or full_attention)");
    }
  } else {  // HF Qwen3_5TextConfig.__post_init__: every interval-th layer is full attention
    const int64_t every = r.get_pos("full_attention_interval", 4);
    for (int64_t i = 0; i < c.n_layers; ++i) c.linear_layers[i] = (i + 1) % every != 0;
  }
  // Keys HF does not read but published configs carry (hybrid.md §1.2): only what we implement.
  if (!r.get_bool("attn_output_gate", true))
    fail(what, ": attn_output_gate false is not supported (Qwen3.5 gates every attention output)");
  if (const json* og = r.find("output_gate_type"); og != nullptr && !(og->is_string() && og->get<std::string>() == "swish"))
    fail(what, ": output_gate_type ", og->dump(), " is not supported (only \"swish\")");
  c.attn_output_gate = true;
  c.offset_norms = true;
  // HF's default partial rotary factor for qwen3_5 is 0.25, not 1.
  const json* rp = r.find("rope_parameters");
  const bool has_prf = (rp != nullptr && rp->is_object() && rp->contains("partial_rotary_factor")) ||
                       r.find("partial_rotary_factor") != nullptr;
  if (!has_prf) c.rope.partial_rotary_factor = 0.25;
  const int64_t rot = static_cast<int64_t>(static_cast<double>(c.head_dim) * c.rope.partial_rotary_factor);
  if (rot <= 0 || rot % 2 != 0 || rot > c.head_dim)
    fail(what, ": partial_rotary_factor ", c.rope.partial_rotary_factor, " of head_dim ", c.head_dim,
         " gives ", rot, " rotary dims (need an even number in [2, head_dim])");
}

}  // namespace

ModelConfig parse_hf_config(const std::string& json_text, const std::string& what) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    fail(what, ": not valid JSON: ", e.what());
  }
  if (!j.is_object()) fail(what, ": expected a JSON object at the top level");
  Reader top{j, what};
  ModelConfig c;
  const json* mt = top.find("model_type");
  if (mt == nullptr || !mt->is_string()) fail(what, ": missing string field \"model_type\"");
  c.model_type = mt->get<std::string>();
  // The multimodal wrapper keeps the text model's fields in text_config and
  // its tensors under model.language_model. (hybrid.md §1.1).
  const json* text = &j;
  std::string text_what = what;
  if (c.model_type == "qwen3_5") {
    const json* tc = top.find("text_config");
    if (tc == nullptr || !tc->is_object()) fail(what, ": model_type \"qwen3_5\" needs a \"text_config\" object");
    auto tmt = tc->find("model_type");
    if (tmt != tc->end() && !(tmt->is_string() && tmt->get<std::string>() == "qwen3_5_text"))
      fail(what, ": text_config.model_type must be \"qwen3_5_text\", found ", tmt->dump());
    text = tc, text_what = what + " (text_config)";
    c.weight_prefix = "model.language_model.";
  }
  Reader r{*text, text_what};
  if (c.model_type == "qwen3") c.arch = Arch::kQwen3;
  else if (c.model_type == "qwen2") c.arch = Arch::kQwen2;
  else if (c.model_type == "llama") c.arch = Arch::kLlama;
  else if (c.model_type == "qwen3_5" || c.model_type == "qwen3_5_text") c.arch = Arch::kQwen35;
  else if (c.model_type == "qwen3_5_moe" || c.model_type == "qwen3_5_moe_text" || c.model_type == "qwen3_next")
    fail(what, ": model_type \"", c.model_type, "\" (a mixture-of-experts Gated-DeltaNet hybrid) is not supported yet "
         "(supported hybrids: the dense qwen3_5 and qwen3_5_text)");
  else
    fail(what, ": model_type \"", c.model_type, "\" is not supported (supported: qwen3, qwen2, llama, qwen3_5, qwen3_5_text)");
  if (const json* a = top.find("architectures")) {
    if (!a->is_array() || a->empty() || !(*a)[0].is_string())
      fail(what, ": field \"architectures\" must be a non-empty list of strings");
    c.architecture = (*a)[0].get<std::string>();
    static constexpr const char* kKnown[] = {"Qwen3ForCausalLM", "Qwen2ForCausalLM", "LlamaForCausalLM",
                                             "Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"};
    bool ok = false;
    for (const char* k : kKnown) ok |= c.architecture == k;
    c.is_draft = draft_method_of_architecture(c.architecture) != nullptr;
    if (c.is_draft && c.arch != Arch::kQwen3)
      fail(what, ": drafter architecture \"", c.architecture, "\" needs model_type \"qwen3\", found \"",
           c.model_type, "\"");
    if (!ok && !c.is_draft)
      fail(what, ": architecture \"", c.architecture,
           "\" is not supported (supported: Qwen3ForCausalLM, Qwen2ForCausalLM, LlamaForCausalLM, "
           "Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration; drafters DFlashDraftModel, DFlash2DraftModel)");
  }
  c.vocab_size = r.get_pos("vocab_size");
  c.hidden_size = r.get_pos("hidden_size");
  c.intermediate_size = r.get_pos("intermediate_size");
  c.n_layers = r.get_pos("num_hidden_layers");
  c.n_heads = r.get_pos("num_attention_heads");
  c.n_kv_heads = r.get_pos("num_key_value_heads", c.n_heads);
  if (c.n_heads % c.n_kv_heads != 0)
    fail(what, ": num_attention_heads ", c.n_heads, " is not a multiple of num_key_value_heads ", c.n_kv_heads);
  if (r.find("head_dim") != nullptr) {
    c.head_dim = r.get_pos("head_dim");
  } else {
    if (c.hidden_size % c.n_heads != 0)
      fail(what, ": hidden_size ", c.hidden_size, " is not divisible by num_attention_heads ", c.n_heads,
           " and no head_dim is given");
    c.head_dim = c.hidden_size / c.n_heads;
  }
  if (c.head_dim % 2 != 0) fail(what, ": head_dim must be even for RoPE, found ", c.head_dim);
  c.max_position_embeddings = r.get_pos("max_position_embeddings", 32768);
  c.rms_norm_eps = r.get_num(*text, "rms_norm_eps", 1e-6, "");
  if (!(c.rms_norm_eps > 0)) fail(what, ": field \"rms_norm_eps\" must be > 0, found ", c.rms_norm_eps);
  // The wrapper's own tie_word_embeddings decides (HF Qwen3_5Config); text_config's when it has none.
  c.tie_word_embeddings = top.get_bool("tie_word_embeddings", r.get_bool("tie_word_embeddings", false));
  switch (c.arch) {
    case Arch::kQwen2:  // Qwen2Attention: bias on q/k/v always, none on o
      c.attention_bias = true;
      c.attention_out_bias = false;
      break;
    case Arch::kQwen3:
    case Arch::kQwen35:
    case Arch::kLlama:
      c.attention_bias = r.get_bool("attention_bias", false);
      c.attention_out_bias = c.attention_bias;
      break;
  }
  c.mlp_bias = c.arch == Arch::kLlama ? r.get_bool("mlp_bias", false) : false;
  const Reader& ids = r.find("eos_token_id") || r.find("bos_token_id") ? r : top;
  c.eos_token_ids = parse_token_ids(ids.find("eos_token_id"), what, "eos_token_id");
  auto bos = parse_token_ids(ids.find("bos_token_id"), what, "bos_token_id");
  if (!bos.empty()) c.bos_token_id = bos[0];
  for (const char* key : {"dtype", "torch_dtype"}) {
    const json* d = top.find(key);
    if (d == nullptr) d = r.find(key);
    if (d != nullptr && d->is_string()) {
      c.torch_dtype = d->get<std::string>();
      break;
    }
  }
  parse_rope(r, c);
  if (c.arch == Arch::kQwen35) parse_hybrid(r, c);
  return c;
}

int64_t ModelConfig::n_attention_layers() const {
  int64_t n = 0;
  for (int64_t l = 0; l < n_layers; ++l) n += is_linear(l) ? 0 : 1;
  return n;
}

int64_t ModelConfig::kv_layer(int64_t layer) const {
  BS_ASSERT(layer >= 0 && layer < n_layers && !is_linear(layer));
  int64_t k = 0;
  for (int64_t l = 0; l < layer; ++l) k += is_linear(l) ? 0 : 1;
  return k;
}

ModelConfig load_hf_config(const std::string& model_dir) {
  std::string path = model_dir + "/config.json";
  return parse_hf_config(read_text_file(path), path);
}

RopeTables compute_rope(const ModelConfig& cfg) {
  const RopeConfig& rc = cfg.rope;
  RopeTables t;
  t.rotary_dim = static_cast<int64_t>(static_cast<double>(cfg.head_dim) * rc.partial_rotary_factor);
  int64_t dim = t.rotary_dim;
  int64_t half = dim / 2;
  float base = static_cast<float>(rc.theta);
  // pos_freqs[i] = base ** (2i / dim), in float32 like torch.
  std::vector<float> pos_freqs(half);
  for (int64_t i = 0; i < half; ++i)
    pos_freqs[i] = std::pow(base, static_cast<float>(2 * i) / static_cast<float>(dim));
  t.inv_freq.resize(half);
  for (int64_t i = 0; i < half; ++i) t.inv_freq[i] = 1.0f / pos_freqs[i];
  const float factor = static_cast<float>(rc.factor);
  switch (rc.type) {
    case RopeType::kDefault: break;
    case RopeType::kLinear:
      for (auto& f : t.inv_freq) f /= factor;
      break;
    case RopeType::kLlama3: {
      // transformers _compute_llama3_parameters: wavelengths longer than the
      // original context are interpolated by `factor`, short ones kept, the
      // band between blended linearly in (old_len / wavelen).
      const float old_len = static_cast<float>(rc.original_max_position_embeddings);
      const float lo = static_cast<float>(rc.low_freq_factor), hi = static_cast<float>(rc.high_freq_factor);
      const float low_wl = old_len / lo, high_wl = old_len / hi;
      for (auto& f : t.inv_freq) {
        float wl = static_cast<float>(2.0 * M_PI) / f;
        float scaled = wl > low_wl ? f / factor : f;
        if (!(wl < high_wl) && !(wl > low_wl)) {
          float smooth = (old_len / wl - lo) / (hi - lo);
          scaled = (1 - smooth) * scaled / factor + smooth * scaled;
        }
        f = scaled;
      }
      break;
    }
    case RopeType::kYarn: {
      // transformers _compute_yarn_parameters (YaRN, arXiv 2309.00071).
      auto get_mscale = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
      double att;
      if (rc.attention_factor) att = *rc.attention_factor;
      else if (rc.mscale && rc.mscale_all_dim && *rc.mscale != 0 && *rc.mscale_all_dim != 0)
        att = get_mscale(rc.factor, *rc.mscale) / get_mscale(rc.factor, *rc.mscale_all_dim);
      else att = get_mscale(rc.factor, 1.0);
      t.attention_scaling = static_cast<float>(att);
      double omax = static_cast<double>(rc.original_max_position_embeddings);
      auto corr_dim = [&](double rot) {
        return (dim * std::log(omax / (rot * 2 * M_PI))) / (2 * std::log(rc.theta));
      };
      double low = corr_dim(rc.beta_fast), high = corr_dim(rc.beta_slow);
      if (rc.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, static_cast<double>(dim - 1));
      if (low == high) high += 0.001;
      for (int64_t i = 0; i < half; ++i) {
        float ramp = (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low);
        ramp = std::min(1.0f, std::max(0.0f, ramp));
        float extrap_factor = 1.0f - ramp;
        float interp = 1.0f / (factor * pos_freqs[i]);
        float extrap = 1.0f / pos_freqs[i];
        t.inv_freq[i] = interp * (1 - extrap_factor) + extrap * extrap_factor;
      }
      break;
    }
  }
  return t;
}

}  // namespace blockspec
