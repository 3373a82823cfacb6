// `blockspec check` logic; see dflash_check.h. Tensor names and shapes are
// ../shared/docs/dflash.md §1.2, the target-dependent checks §6-7.
#include "model/dflash_check.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "base/error.h"
#include "base/mapped_file.h"
#include "formats/safetensors.h"
#include "model/weight_source.h"
#include "tensor/dtype.h"
#include "model/hf_names.h"

namespace blockspec {

namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

// Tensors a quantized module stores beside or instead of "<module>.weight"
// (GPTQ and compressed-tensors, quant_formats.md §2-3).
constexpr const char* kQuantParts[] = {"weight_packed", "weight_scale", "weight_shape", "weight_zero_point",
                                       "weight_g_idx",  "weight_global_scale", "input_scale", "qweight",
                                       "qzeros",        "scales",        "g_idx"};

// The checkpoint's tensors in HF names: through the WeightSource when it
// opened (quantized modules validated, served as "<module>.weight" [N, K]);
// otherwise through the raw safetensors, where a quantized module counts as
// present and its shape is known only for unpacked codes.
class TensorView {
 public:
  TensorView(const WeightSource* src, const SafetensorsCheckpoint& raw) : src_(src), raw_(raw) {}

  bool has(const std::string& n) const {
    if (src_ != nullptr) return src_->has(n);
    if (raw_.has(n)) return true;
    const std::string m = module_of(n);
    return !m.empty() && (raw_.has(m + ".weight_packed") || raw_.has(m + ".qweight"));
  }
  std::optional<Shape> shape(const std::string& n) const {
    if (src_ != nullptr) return src_->shape(n);
    if (raw_.has(n)) return raw_.entry(n).shape;  // dense, or [N, K] int8 / fp8 codes
    return std::nullopt;                           // packed codes: shape not validated
  }
  // "BF16", ... for a dense tensor; the quantized format otherwise.
  std::string storage(const std::string& n) const {
    if (src_ != nullptr) return src_->storage_type(n);
    if (raw_.has(n) && !raw_quantized(n)) return dtype_name(raw_.entry(n).dtype);
    return "quantized (not validated)";
  }
  bool quantized(const std::string& n) const {
    if (src_ != nullptr) return !dtype_from_name(src_->storage_type(n)).has_value();
    return raw_quantized(n);
  }

 private:
  static std::string module_of(const std::string& n) {
    return ends_with(n, ".weight") ? n.substr(0, n.size() - 7) : std::string();
  }
  bool raw_quantized(const std::string& n) const {
    const std::string m = module_of(n);
    if (m.empty()) return false;
    if (raw_.has(m + ".weight_packed") || raw_.has(m + ".qweight")) return true;
    const DType t = raw_.entry(n).dtype;
    return t == DType::kI8 || t == DType::kU8 || t == DType::kF8_E4M3 || t == DType::kF8_E5M2;
  }
  const WeightSource* src_;
  const SafetensorsCheckpoint& raw_;
};

const char* kReexport = "re-export the drafter with every module (converters and quantizers must keep it)";
const char* kConfigFix = "config.json and the weights disagree: use the config.json the checkpoint was exported with";

struct Checker {
  const DraftConfig& d;
  const TensorView& v;
  std::vector<DraftProblem>& problems;
  std::set<std::string> expected;        // resolved names of the tensors checked
  std::vector<std::string> f16;          // F16 tensors (a DFlash2 problem)
  std::vector<std::pair<std::string, std::set<std::string>>> formats;  // linear kind -> storages

  void problem(const std::string& name, const std::string& msg) { problems.push_back({name, msg, false}); }

  // One required tensor: `name`, or else one of `alts`. `fix` replaces the
  // shape-mismatch advice.
  void tensor(const std::string& name, const Shape& want, bool linear, const std::string& what,
              const std::vector<std::string>& alts = {}, const std::string& fix = kConfigFix) {
    std::vector<std::string> names{name};
    names.insert(names.end(), alts.begin(), alts.end());
    std::string found;
    for (const std::string& n : names)
      if (found.empty() && v.has(n)) found = n;
    if (found.empty()) {
      if (v.has("model." + name))
        return problem(name, str_cat("missing; found model.", name, " instead: drafter tensors carry no \"model.\" "
                                     "prefix, rename them (strip \"model.\")"));
      return problem(name, str_cat("missing tensor ", shape_str(want), " (", what, "); fix: ", kReexport));
    }
    expected.insert(found);
    if (const auto s = v.shape(found); s && *s != want)
      problem(found, str_cat("has shape ", shape_str(*s), ", expected ", shape_str(want), " (", what, "); fix: ", fix));
    const std::string st = v.storage(found);
    if (v.quantized(found)) {
      if (!linear)
        problem(found, str_cat("is stored quantized (", st, ") but only linear layers may be; store it dense (BF16)"));
    } else {
      const DType t = *dtype_from_name(st);
      if (t != DType::kF32 && t != DType::kBF16 && t != DType::kF16)
        problem(found, str_cat("has dtype ", st, "; a dense tensor must be F32, BF16 or F16: convert it to BF16"));
      if (t == DType::kF16) f16.push_back(found);
    }
    if (linear) {
      std::string kind = found.substr(0, found.size() - 7);  // strip ".weight"
      kind = kind.substr(kind.rfind('.') + 1);
      auto it = std::find_if(formats.begin(), formats.end(), [&](const auto& f) { return f.first == kind; });
      if (it == formats.end()) {
        formats.emplace_back(kind, std::set<std::string>{});
        it = formats.end() - 1;
      }
      it->second.insert(st);
    }
  }

  void layers() {
    const ModelConfig& b = d.base;
    const int64_t H = b.hidden_size, F = b.intermediate_size;
    const int64_t q = b.n_heads * b.head_dim, kv = b.n_kv_heads * b.head_dim;
    for (int64_t i = 0; i < b.n_layers; ++i) {
      const std::string p = hf::draft_layer(i);
      tensor(hf::weight(p, hf::kAttnNorm), {H}, false, "RMSNorm [hidden_size]");
      tensor(hf::weight(p, hf::kFfnNorm), {H}, false, "RMSNorm [hidden_size]");
      tensor(hf::weight(p, hf::kQ), {q, H}, true, "[heads * head_dim, hidden_size]");
      tensor(hf::weight(p, hf::kK), {kv, H}, true, "[kv_heads * head_dim, hidden_size]");
      tensor(hf::weight(p, hf::kV), {kv, H}, true, "[kv_heads * head_dim, hidden_size]");
      tensor(hf::weight(p, hf::kO), {H, q}, true, "[hidden_size, heads * head_dim]");
      if (b.attention_bias) {
        const char* why = "attention_bias is true";
        tensor(hf::bias(p, hf::kQ), {q}, false, why);
        tensor(hf::bias(p, hf::kK), {kv}, false, why);
        tensor(hf::bias(p, hf::kV), {kv}, false, why);
        tensor(hf::bias(p, hf::kO), {H}, false, why);
      }
      tensor(hf::weight(p, hf::kQNorm), {b.head_dim}, false, "per-head RMSNorm [head_dim]");
      tensor(hf::weight(p, hf::kKNorm), {b.head_dim}, false, "per-head RMSNorm [head_dim]");
      tensor(hf::weight(p, hf::kGate), {F, H}, true, "[intermediate_size, hidden_size]");
      tensor(hf::weight(p, hf::kUp), {F, H}, true, "[intermediate_size, hidden_size]");
      tensor(hf::weight(p, hf::kDown), {H, F}, true, "[hidden_size, intermediate_size]");
      if (d.method != DraftMethod::kDFlash2) continue;
      const int64_t kt = d.conv_kernel_size, G = H / d.conv_group_size;
      for (const char* c : {"attention_conv", "mlp_conv"}) {
        tensor(p + c + ".base_kernel", {2, kt, H}, false, "DFlash2 conv [2 sides, conv_kernel_size, hidden_size]");
        tensor(p + c + ".kernel_projection.weight", {2 * kt * G, H}, true,
               "DFlash2 conv [2 * conv_kernel_size * hidden_size / conv_group_size, hidden_size]");
      }
    }
  }

  void selector() {
    const int64_t V = d.base.vocab_size, r = d.selector_rank;
    for (const char* c : {"candidate_selector.predecessor_codebook", "candidate_selector.successor_codebook"})
      tensor(c, {V, r}, false, "DFlash2 selector [vocab_size, selector_rank]", {std::string(c) + ".weight"});
    tensor("candidate_selector.hidden_projection.weight", {r, d.base.hidden_size}, true,
           "DFlash2 selector [selector_rank, hidden_size]");
  }
};

// The module a quantized loader's one-line error names ("DIR: module fc: ..."), else `fallback`.
std::string module_in_error(const std::string& msg, const std::string& fallback) {
  const auto pos = msg.find(": module ");
  if (pos == std::string::npos) return fallback;
  const auto start = pos + 9;
  const auto end = msg.find_first_of(": ", start);
  return msg.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

bool has_safetensors(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (ends_with(n, ".safetensors") || n == "model.safetensors.index.json") return true;
  }
  return false;
}

// Config-level checks (dtype, and the target's hidden size, depth and vocab).
void check_config(const DraftConfig& d, const ModelConfig* target, std::vector<DraftProblem>& problems,
                  std::vector<DraftProblem>& warnings) {
  const ModelConfig& b = d.base;
  if (d.method == DraftMethod::kDFlash2 && d.dtype == "float16")
    problems.push_back({"dtype", "is \"float16\" (dtype / torch_dtype): DFlash2 overflows in fp16 (vLLM #55250); "
                                 "convert to bfloat16", true});
  if (target == nullptr) {
    warnings.push_back({"--target", str_cat("no target given: fc is checked against ", d.n_taps(),
                                            " taps x the drafter's own hidden_size ", b.hidden_size,
                                            "; the target-dependent checks (hidden size, tap ids < target layers, "
                                            "mask_token_id < target vocab) were skipped: pass --target TARGET"), true});
    return;
  }
  const ModelConfig& t = *target;
  if (b.hidden_size != t.hidden_size)
    problems.push_back({"hidden_size", str_cat("drafter hidden_size ", b.hidden_size, " != target hidden_size ",
                                               t.hidden_size, ": the drafter belongs to another target; use the "
                                               "drafter trained for this target"), true});
  std::vector<int64_t> bad;
  for (int64_t id : d.target_layer_ids)
    if (id >= t.n_layers) bad.push_back(id);
  if (!bad.empty())
    problems.push_back({"dflash_config.target_layer_ids",
                        str_cat("tap id(s) ", shape_str(bad), " are not below the target's ", t.n_layers,
                                " layers (vLLM PR #48113): the drafter was made for a deeper target; use the drafter "
                                "trained for this target or fix target_layer_ids"), true});
  else if (std::find(d.target_layer_ids.begin(), d.target_layer_ids.end(), t.n_layers - 1) != d.target_layer_ids.end())
    warnings.push_back({"dflash_config.target_layer_ids",
                        str_cat("taps the target's last layer ", t.n_layers - 1, ", whose HF hidden state is after "
                                "the final norm (dflash.md §1.3); check the drafter was trained that way"), true});
  if (d.num_target_layers && *d.num_target_layers != t.n_layers)
    warnings.push_back({"num_target_layers", str_cat("is ", *d.num_target_layers, " but the target has ", t.n_layers,
                                                     " layers: the drafter may belong to another target"), true});
  if (d.mask_token_id >= t.vocab_size)
    problems.push_back({"dflash_config.mask_token_id",
                        str_cat("is ", d.mask_token_id, ", outside the target vocab (vocab_size ", t.vocab_size,
                                "): it must be a row of the target's embedding table; set the mask id the drafter "
                                "was trained with (never resize the target)"), true});
  if (b.vocab_size != t.vocab_size)
    warnings.push_back({"vocab_size", str_cat("drafter vocab_size ", b.vocab_size, " != target vocab_size ",
                                              t.vocab_size, ": the drafter drafts with the target's head"), true});
}

void check_extra(const SafetensorsCheckpoint& raw, const Checker& c, const ModelConfig& b,
                 std::vector<DraftProblem>& warnings) {
  for (const std::string& n : raw.names()) {
    if (c.expected.count(n)) continue;
    const auto dot = n.rfind('.');
    const std::string last = dot == std::string::npos ? n : n.substr(dot + 1);
    const bool part = dot != std::string::npos && std::any_of(std::begin(kQuantParts), std::end(kQuantParts),
                                                              [&](const char* s) { return last == s; });
    if (part && c.expected.count(n.substr(0, dot) + ".weight")) continue;  // scale / codes of a checked module
    if (!b.attention_bias && ends_with(n, "_proj.bias") && n.find(".self_attn.") != std::string::npos)
      warnings.push_back({n, "attention bias present but config.json has attention_bias false, so it is ignored; "
                             "set \"attention_bias\": true if the drafter was trained with biases"});
    else
      warnings.push_back({n, "unexpected tensor (not part of a drafter); it is ignored"});
  }
}

std::vector<DraftProblem>& not_checkpoint(DraftCheckInfo& info, std::vector<DraftProblem>& problems,
                                          const std::string& dir, const std::string& msg) {
  info.is_checkpoint = false;
  problems.push_back({dir, msg, true});
  return problems;
}

}  // namespace

std::vector<DraftProblem> check_drafter(const std::string& dir, const ModelConfig* target, DraftCheckInfo* info_out) {
  DraftCheckInfo local;
  DraftCheckInfo& info = info_out != nullptr ? *info_out : local;
  info = DraftCheckInfo{};
  std::vector<DraftProblem> problems;
  const char* kWhat = "pass the drafter's checkpoint directory (config.json + *.safetensors)";
  std::error_code ec;
  if (!fs::exists(dir, ec)) return not_checkpoint(info, problems, dir, str_cat("no such file or directory; ", kWhat));
  if (!fs::is_directory(dir, ec))
    return not_checkpoint(info, problems, dir, str_cat("is a file, not a drafter checkpoint; ", kWhat));
  const std::string cfg_path = (fs::path(dir) / "config.json").string();
  if (!fs::is_regular_file(cfg_path, ec))
    return not_checkpoint(info, problems, dir, str_cat("has no config.json; ", kWhat));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(cfg_path));
  } catch (const std::exception& e) {
    problems.push_back({"config.json", str_cat("is not valid JSON (", e.what(), "); fix: restore the drafter's "
                                               "config.json"), true});
    return problems;
  }
  std::string arch;
  if (j.is_object() && j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    arch = j["architectures"][0].get<std::string>();
  if (draft_method_of_architecture(arch) == nullptr)
    return not_checkpoint(info, problems, dir,
                          str_cat("config.json names architecture \"", arch, "\", not a DFlash drafter "
                                  "(DFlashDraftModel / DFlash2DraftModel); pass the drafter as DRAFTER and the target "
                                  "model with --target"));
  if (!has_safetensors(dir))
    return not_checkpoint(info, problems, dir, str_cat("has no *.safetensors files; ", kWhat));

  try {
    info.config = load_draft_config(dir);
  } catch (const Error& e) {
    problems.push_back({"config.json", str_cat(e.what(), "; fix: correct config.json (or use the one the drafter "
                                                         "was exported with)"), true});
    return problems;
  }
  const DraftConfig& d = *info.config;
  info.target_checked = target != nullptr;
  check_config(d, target, problems, info.warnings);

  std::unique_ptr<WeightSource> src;
  try {
    src = open_weight_source(dir);
  } catch (const Error& e) {
    problems.push_back({module_in_error(e.what(), "safetensors"),
                        str_cat(e.what(), "; fix: re-quantize the drafter keeping every module's codes and scales "
                                          "(or store the module dense in BF16)")});
  }
  std::optional<SafetensorsCheckpoint> raw;
  try {
    raw.emplace(dir);
  } catch (const Error& e) {
    problems.push_back({"safetensors", str_cat(e.what(), "; fix: re-download or re-export the weights")});
    return problems;
  }
  info.n_tensors = static_cast<int64_t>(raw->names().size());
  info.total_bytes = raw->total_bytes();

  const TensorView view(src.get(), *raw);
  Checker c{d, view, problems, {}, {}, {}};
  const int64_t H = d.base.hidden_size, T = d.n_taps();
  const int64_t Ht = target != nullptr ? target->hidden_size : H;
  c.tensor("fc.weight", {H, T * Ht}, true, str_cat("[hidden_size, ", T, " taps x ", target ? "target" : "drafter",
                                                   " hidden ", Ht, "]"), {},
           str_cat("fc must read ", T, " taps x ", target ? "target hidden_size " : "hidden_size ", Ht,
                   " (vLLM PR #48113): the drafter was made for another target or target_layer_ids is wrong; use "
                   "the drafter trained for this target"));
  c.tensor("hidden_norm.weight", {H}, false, "RMSNorm on the fc output [hidden_size]");
  c.tensor("norm.weight", {H}, false, "final RMSNorm [hidden_size]");
  c.layers();
  if (d.method == DraftMethod::kDFlash2) c.selector();
  if (d.draft_vocab_size > 0) {  // reduced vocabulary: its own frozen head and the id map (training.md §5)
    c.tensor("lm_head.weight", {d.draft_vocab_size, d.base.hidden_size}, true,
             "reduced draft head [draft_vocab_size, hidden_size]");
    if (raw->has("d2t")) c.expected.insert("d2t");
    else c.problem("d2t", "missing tensor [draft_vocab_size] int64 (draft id -> target id offsets)");
    if (raw->has("t2d")) c.expected.insert("t2d");
  }
  if (d.method == DraftMethod::kDFlash2 && !c.f16.empty())
    problems.push_back({c.f16.front(), str_cat(c.f16.size(), " tensor(s) stored F16 (first: ", c.f16.front(),
                                               "): DFlash2 overflows in fp16 (vLLM #55250); convert to bfloat16")});
  check_extra(*raw, c, d.base, info.warnings);
  for (const auto& [kind, storages] : c.formats) {
    std::string s;
    for (const std::string& x : storages) s += (s.empty() ? "" : " + ") + x;
    info.linear_formats.emplace_back(kind, s);
  }
  return problems;
}

}  // namespace blockspec
