#include "formats/dflash_config.h"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mapped_file.h"

namespace blockspec {

using nlohmann::json;

const char* draft_method_name(DraftMethod m) { return m == DraftMethod::kDFlash2 ? "dflash2" : "dflash"; }

std::vector<int64_t> default_target_layer_ids(int64_t n, int64_t l) {
  if (l == 1) return {n / 2};
  std::vector<int64_t> ids;
  const double span = static_cast<double>(n - 3 - 1);
  for (int64_t i = 0; i < l; ++i)
    ids.push_back(static_cast<int64_t>(std::nearbyint(1.0 + static_cast<double>(i) * span / static_cast<double>(l - 1))));
  return ids;  // nearbyint rounds half to even in the default FP mode, like Python's round
}

namespace {

struct Reader {
  const json& top;
  const json* dc;  // dflash_config, or nullptr
  const std::string& what;

  static const json* get(const json& o, const char* key) {
    auto it = o.find(key);
    return it == o.end() || it->is_null() ? nullptr : &*it;
  }
  // dflash_config.<key>, else the top-level key (the reference's _draft_value).
  std::pair<const json*, std::string> find(const char* key) const {
    if (dc != nullptr)
      if (const json* v = get(*dc, key)) return {v, std::string("dflash_config.") + key};
    if (const json* v = get(top, key)) return {v, key};
    return {nullptr, key};
  }
  int64_t integer(const char* key, std::optional<int64_t> def, int64_t min) const {
    auto [v, where] = find(key);
    if (v == nullptr) {
      if (def) return *def;
      fail(what, ": missing required field \"dflash_config.", key, "\" (or top-level \"", key, "\")");
    }
    if (!v->is_number_integer()) fail(what, ": field \"", where, "\" must be an integer, found ", v->dump());
    const int64_t x = v->get<int64_t>();
    if (x < min) fail(what, ": field \"", where, "\" must be >= ", min, ", found ", x);
    return x;
  }
  double number(const char* key, double def) const {
    auto [v, where] = find(key);
    if (v == nullptr) return def;
    if (!v->is_number()) fail(what, ": field \"", where, "\" must be a number, found ", v->dump());
    return v->get<double>();
  }
};

}  // namespace

DraftConfig parse_draft_config(const std::string& json_text, const std::string& what) {
  DraftConfig d;
  d.base = parse_hf_config(json_text, what);
  const ModelConfig& b = d.base;
  if (!b.is_draft)
    fail(what, ": not a DFlash drafter (architectures[0] is \"", b.architecture,
         "\"; expected DFlashDraftModel or DFlash2DraftModel)");
  d.method = std::string(draft_method_of_architecture(b.architecture)) == "dflash2" ? DraftMethod::kDFlash2
                                                                                  : DraftMethod::kDFlash;
  json j = json::parse(json_text);  // valid: parse_hf_config accepted it
  const json* dc = Reader::get(j, "dflash_config");
  if (dc != nullptr && !dc->is_object()) fail(what, ": field \"dflash_config\" must be an object, found ", dc->dump());
  Reader r{j, dc, what};

  // Variants with semantics blockspec does not implement (dflash.md §1.1):
  // running them as plain DFlash would draft garbage, so refuse by name.
  for (const char* key : {"attention_sink_bias", "attention_value_scale", "swa_window_size", "backbone_rotary_base",
                          "v_head_dim", "projector_type", "mask_token"}) {
    if (r.find(key).first != nullptr)
      fail(what, ": field \"", r.find(key).second, "\" belongs to a drafter variant blockspec does not support");
  }
  for (const char* key : {"use_swa", "sample_from_anchor", "use_aux_hidden_state"}) {
    auto [v, where] = r.find(key);
    if (v != nullptr && !(v->is_boolean() && !v->get<bool>()))
      fail(what, ": field \"", where, "\" = ", v->dump(), " is a drafter variant blockspec does not support");
  }
  if (b.rope.partial_rotary_factor != 1.0)
    fail(what, ": partial_rotary_factor ", b.rope.partial_rotary_factor,
         " is not supported for a drafter (DFlash rotates the full head_dim)");
  if (const json* act = Reader::get(j, "hidden_act"))
    if (!act->is_string() || act->get<std::string>() != "silu")
      fail(what, ": field \"hidden_act\" must be \"silu\" for a DFlash drafter, found ", act->dump());

  d.block_size = r.integer("block_size", 16, 2);
  if (auto [v, where] = r.find("draft_vocab_size"); v != nullptr) {
    d.draft_vocab_size = r.integer("draft_vocab_size", 0, 1);
    if (d.draft_vocab_size > b.vocab_size)
      fail(what, ": draft_vocab_size ", d.draft_vocab_size, " exceeds vocab_size ", b.vocab_size);
    if (d.method == DraftMethod::kDFlash2)
      fail(what, ": draft_vocab_size: a DFlash2 drafter drafts over the full vocabulary (its selector indexes it)");
  }
  d.mask_token_id = static_cast<int32_t>(r.integer("mask_token_id", std::nullopt, 0));
  if (auto [v, where] = r.find("num_target_layers"); v != nullptr) d.num_target_layers = r.integer("num_target_layers", 0, 1);
  if (auto [v, where] = r.find("target_layer_ids"); v != nullptr) {
    if (!v->is_array() || v->empty())
      fail(what, ": field \"", where, "\" must be a non-empty list of layer ids, found ", v->dump());
    for (const json& x : *v) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0)
        fail(what, ": field \"", where, "\" must hold non-negative integers, found ", x.dump());
      d.target_layer_ids.push_back(x.get<int64_t>());
    }
  } else {
    if (!d.num_target_layers)
      fail(what, ": needs \"dflash_config.target_layer_ids\" or \"num_target_layers\" to know which target layers "
                 "to tap");
    if (*d.num_target_layers < 4 && b.n_layers > 1)
      fail(what, ": num_target_layers ", *d.num_target_layers, " is too small to build default target_layer_ids");
    d.target_layer_ids = default_target_layer_ids(*d.num_target_layers, b.n_layers);
    d.target_layer_ids_defaulted = true;
  }
  if (d.num_target_layers)
    for (int64_t t : d.target_layer_ids)
      if (t >= *d.num_target_layers)
        fail(what, ": target layer id ", t, " is not below num_target_layers ", *d.num_target_layers);

  // Layer types: explicit list, else Qwen3Config's rule (sliding iff
  // use_sliding_window and i >= max_window_layers).
  std::vector<bool> sliding(b.n_layers, false);
  if (const json* lt = Reader::get(j, "layer_types")) {
    if (!lt->is_array() || static_cast<int64_t>(lt->size()) != b.n_layers)
      fail(what, ": field \"layer_types\" must list ", b.n_layers, " layer types, found ", lt->dump());
    for (int64_t i = 0; i < b.n_layers; ++i) {
      const json& t = (*lt)[i];
      if (!t.is_string() || (t.get<std::string>() != "full_attention" && t.get<std::string>() != "sliding_attention"))
        fail(what, ": layer_types[", i, "] must be \"full_attention\" or \"sliding_attention\", found ", t.dump());
      sliding[i] = t.get<std::string>() == "sliding_attention";
    }
  } else {
    const json* u = Reader::get(j, "use_sliding_window");
    const bool use = u != nullptr && u->is_boolean() && u->get<bool>();
    const int64_t mwl = Reader::get(j, "max_window_layers") ? r.integer("max_window_layers", 28, 0) : 28;
    for (int64_t i = 0; i < b.n_layers; ++i) sliding[i] = use && Reader::get(j, "sliding_window") && i >= mwl;
  }
  // The window of a sliding layer is `sliding_window` whatever
  // use_sliding_window says. (Deviation from transformers 5's Qwen3Config,
  // which nulls sliding_window unless use_sliding_window is true and so runs
  // a layer typed sliding_attention without a window; vLLM and SGLang take
  // the window from layer_types + sliding_window, as the drafters were
  // trained -- dflash.md §2.3.)
  int64_t window = 0;
  const json* sw = Reader::get(j, "sliding_window");
  for (int64_t i = 0; i < b.n_layers; ++i) {
    if (!sliding[i]) continue;
    if (sw == nullptr || !sw->is_number_integer() || sw->get<int64_t>() <= 0)
      fail(what, ": layer ", i, " is sliding_attention but \"sliding_window\" is not a positive integer");
    window = sw->get<int64_t>();
  }
  // Causality: is_causal, else dflash_config.causal (vLLM), else sliding
  // layers causal (ZL-new Qwen3DFlashAttention, dflash.md §2.3).
  std::optional<bool> causal;
  for (auto [obj, key] : {std::pair<const json*, const char*>{&j, "is_causal"}, std::pair<const json*, const char*>{dc, "causal"}}) {
    if (causal || obj == nullptr) continue;
    if (const json* v = Reader::get(*obj, key)) {
      if (!v->is_boolean()) fail(what, ": field \"", key, "\" must be true or false, found ", v->dump());
      causal = v->get<bool>();
    }
  }
  for (int64_t i = 0; i < b.n_layers; ++i) {
    d.layer_causal.push_back(causal.value_or(sliding[i]));
    d.layer_window.push_back(sliding[i] ? window : 0);
  }

  if (d.method == DraftMethod::kDFlash2) {
    // Defaults of NeMo's DFlash2 config class (the released Qwen3.8-27B-DFlash2).
    d.conv_kernel_size = r.integer("conv_kernel_size", 2, 1);
    d.conv_group_size = r.integer("conv_group_size", 16, 1);
    d.selector_rank = r.integer("selector_rank", 256, 1);
    d.selector_top_k = r.integer("selector_top_k", 16, 1);
    if (b.hidden_size % d.conv_group_size != 0)
      fail(what, ": hidden_size ", b.hidden_size, " is not a multiple of conv_group_size ", d.conv_group_size);
    if (d.selector_top_k > b.vocab_size)
      fail(what, ": selector_top_k ", d.selector_top_k, " exceeds vocab_size ", b.vocab_size);
  }
  d.output_multiplier = r.number("output_multiplier", 1.0);
  d.final_logit_softcapping = r.number("final_logit_softcapping", 0.0);
  d.input_embedding_scale = r.number("input_embedding_scale", 1.0);
  if (!std::isfinite(d.output_multiplier) || !std::isfinite(d.input_embedding_scale) ||
      !(d.final_logit_softcapping >= 0))
    fail(what, ": output_multiplier, input_embedding_scale and final_logit_softcapping must be finite "
               "(softcapping >= 0)");
  d.dtype = b.torch_dtype;
  return d;
}

DraftConfig load_draft_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  return parse_draft_config(read_text_file(path), path);
}

bool is_draft_checkpoint(const std::string& dir) {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::path(dir) / "config.json";
  if (!std::filesystem::is_regular_file(p, ec)) return false;
  try {
    json j = json::parse(read_text_file(p.string()));
    const json* a = Reader::get(j, "architectures");
    return a != nullptr && a->is_array() && !a->empty() && (*a)[0].is_string() &&
           draft_method_of_architecture((*a)[0].get<std::string>()) != nullptr;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace blockspec
