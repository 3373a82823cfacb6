#include "formats/quant_config.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "base/error.h"
#include "base/mapped_file.h"

namespace blockspec {

using nlohmann::json;

namespace {

struct Obj {
  const json& j;
  std::string what;  // "<file>: quantization_config" + path of this object

  const json* find(const char* key) const {
    auto it = j.find(key);
    return (it == j.end() || it->is_null()) ? nullptr : &*it;
  }
  int64_t get_int(const char* key, int64_t def) const {
    const json* v = find(key);
    if (v == nullptr) return def;
    if (!v->is_number_integer()) fail(what, ": field \"", key, "\" must be an integer, found ", v->dump());
    return v->get<int64_t>();
  }
  bool get_bool(const char* key, bool def) const {
    const json* v = find(key);
    if (v == nullptr) return def;
    if (!v->is_boolean()) fail(what, ": field \"", key, "\" must be true or false, found ", v->dump());
    return v->get<bool>();
  }
  std::string get_str(const char* key, const std::string& def) const {
    const json* v = find(key);
    if (v == nullptr) return def;
    if (!v->is_string()) fail(what, ": field \"", key, "\" must be a string, found ", v->dump());
    return v->get<std::string>();
  }
  std::vector<std::string> get_strs(const char* key) const {
    std::vector<std::string> out;
    const json* v = find(key);
    if (v == nullptr) return out;
    if (v->is_string()) return {v->get<std::string>()};
    if (!v->is_array()) fail(what, ": field \"", key, "\" must be a list of strings, found ", v->dump());
    for (const auto& x : *v) {
      if (!x.is_string()) fail(what, ": field \"", key, "\" must be a list of strings, found ", v->dump());
      out.push_back(x.get<std::string>());
    }
    return out;
  }
  bool non_empty(const char* key) const {
    const json* v = find(key);
    return v != nullptr && !(v->is_object() && v->empty()) && !(v->is_array() && v->empty());
  }
};

GptqConfig parse_gptq(const Obj& o) {
  GptqConfig g;
  g.bits = static_cast<int>(o.get_int("bits", o.get_int("w_bit", o.get_int("wbits", 4))));
  g.group_size = o.get_int("group_size", o.get_int("q_group_size", 128));
  if (g.group_size == 0 || g.group_size < -1)
    fail(o.what, ": field \"group_size\" must be > 0 or -1, found ", g.group_size);
  g.desc_act = o.get_bool("desc_act", false);
  g.sym = o.get_bool("sym", true);
  g.static_groups = o.get_bool("static_groups", false);
  g.checkpoint_format = o.get_str("checkpoint_format", o.get_str("format", "gptq"));
  if (o.get_bool("is_marlin_format", false) || o.get_str("quant_method", "") == "marlin") g.checkpoint_format = "marlin";
  g.has_dynamic = o.non_empty("dynamic");
  return g;
}

CtQuantArgs parse_args(const Obj& o) {
  CtQuantArgs a;
  a.num_bits = static_cast<int>(o.get_int("num_bits", 8));
  a.type = o.get_str("type", "int");
  a.symmetric = o.get_bool("symmetric", true);
  a.group_size = o.get_int("group_size", 0);
  a.strategy = o.get_str("strategy", "");
  if (a.strategy.empty()) a.strategy = a.group_size == 0 ? "tensor" : a.group_size == -1 ? "channel" : "group";
  if (const json* d = o.find("dynamic")) {
    if (d->is_boolean()) a.dynamic = d->get<bool>() ? "true" : "false";
    else if (d->is_string()) a.dynamic = d->get<std::string>();
    else fail(o.what, ": field \"dynamic\" must be true, false or \"local\", found ", d->dump());
  }
  if (const json* d = o.find("block_structure"); d != nullptr && !d->is_null()) {
    if (!d->is_array() || d->size() != 2 || !(*d)[0].is_number_integer() || !(*d)[1].is_number_integer())
      fail(o.what, ": field \"block_structure\" must be [rows, cols] (two integers), found ", d->dump());
    a.block_structure = {(*d)[0].get<int64_t>(), (*d)[1].get<int64_t>()};
  }
  if (const json* d = o.find("actorder")) {
    if (d->is_boolean()) a.actorder = d->get<bool>() ? "group" : "";
    else if (d->is_string()) a.actorder = d->get<std::string>();
    else fail(o.what, ": field \"actorder\" must be null, a string or a bool, found ", d->dump());
    if (a.actorder == "dynamic") a.actorder = "group";
    if (a.actorder == "static") a.actorder = "weight";
  }
  return a;
}

CtConfig parse_ct(const Obj& o) {
  CtConfig c;
  c.format = o.get_str("format", "");
  c.quantization_status = o.get_str("quantization_status", "compressed");
  c.ignore = o.get_strs("ignore");
  c.has_kv_cache_scheme = o.non_empty("kv_cache_scheme");
  if (c.has_kv_cache_scheme) {
    const json* kv = o.find("kv_cache_scheme");
    if (!kv->is_object()) fail(o.what, ": field \"kv_cache_scheme\" must be an object or null, found ", kv->dump());
    c.kv_cache_scheme = parse_args(Obj{*kv, o.what + ".kv_cache_scheme"});
  }
  c.has_transform = o.non_empty("transform_config");
  c.has_sparsity = o.non_empty("sparsity_config");
  const json* groups = o.find("config_groups");
  if (groups == nullptr || !groups->is_object() || groups->empty())
    fail(o.what, ": field \"config_groups\" must be a non-empty object");
  for (const auto& [name, gj] : groups->items()) {  // nlohmann orders keys: group_0, group_1, ...
    Obj go{gj, o.what + ".config_groups." + name};
    if (!gj.is_object()) fail(go.what, ": must be an object, found ", gj.dump());
    CtGroup g;
    g.name = name;
    g.targets = go.get_strs("targets");
    if (g.targets.empty()) fail(go.what, ": field \"targets\" must list at least one module");
    g.format = go.get_str("format", "");
    auto args = [&](const char* key) -> std::optional<CtQuantArgs> {
      const json* v = go.find(key);
      if (v == nullptr) return std::nullopt;
      if (!v->is_object()) fail(go.what, ": field \"", key, "\" must be an object or null, found ", v->dump());
      return parse_args(Obj{*v, go.what + "." + key});
    };
    g.weights = args("weights");
    g.input_activations = args("input_activations");
    g.output_activations = args("output_activations");
    c.groups.push_back(std::move(g));
  }
  return c;
}

}  // namespace

QuantConfig parse_quant_config(const std::string& json_text, const std::string& what) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    fail(what, ": invalid JSON (", e.what(), ")");
  }
  if (!j.is_object()) fail(what, ": expected a JSON object");
  Obj o{j, what};
  QuantConfig q;
  q.what = what;
  const std::string m = o.get_str("quant_method", "gptq");  // quantize_config.json may omit it
  if (m == "gptq" || m == "marlin") {
    q.method = QuantMethod::kGptq;
    q.gptq = parse_gptq(o);
  } else if (m == "compressed-tensors") {
    q.method = QuantMethod::kCompressedTensors;
    q.ct = parse_ct(o);
  } else {
    fail(what, ": quant_method ", quote_for_message(m),
         " is not supported (supported: gptq, compressed-tensors); dequantize the checkpoint to bf16 first");
  }
  return q;
}

std::optional<QuantConfig> load_quant_config(const std::string& model_dir) {
  namespace fs = std::filesystem;
  const std::string cfg_path = model_dir + "/config.json";
  std::error_code ec;
  if (fs::exists(cfg_path, ec)) {
    json j;
    try {
      j = json::parse(read_text_file(cfg_path));
    } catch (const json::exception& e) {
      fail(cfg_path, ": invalid JSON (", e.what(), ")");
    }
    auto it = j.is_object() ? j.find("quantization_config") : j.end();
    if (j.is_object() && it != j.end() && !it->is_null())
      return parse_quant_config(it->dump(), cfg_path + ": quantization_config");
  }
  const std::string qc = model_dir + "/quantize_config.json";
  if (fs::exists(qc, ec)) return parse_quant_config(read_text_file(qc), qc);
  return std::nullopt;
}

bool ct_target_matches(const std::string& target, const std::string& module, bool is_linear) {
  if (target.rfind("re:", 0) == 0) {
    try {
      const std::regex re(target.substr(3));
      return std::regex_search(module, re, std::regex_constants::match_continuous);
    } catch (const std::regex_error& e) {
      fail("compressed-tensors target ", quote_for_message(target), " is not a valid regex (", e.what(), ")");
    }
  }
  return target == module || (is_linear && target == "Linear");
}

}  // namespace blockspec
