// blockspec inspect PATH [--json]: tensors, dtypes, shapes, bytes, config.
#include <sys/stat.h>

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "formats/gguf.h"
#include "formats/gguf_model.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"

namespace blockspec {

namespace {
const std::vector<FlagSpec> kFlags = {
    {"--json", "", false, "print one JSON object on stdout"},
    {"--help", "-h", false, "show this help"},
};

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

nlohmann::json config_summary(const ModelConfig& c) {
  nlohmann::json j;
  j["model_type"] = c.model_type;
  j["architecture"] = c.architecture;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_type"] = rope_type_name(c.rope.type);
  j["rope_theta"] = c.rope.theta;
  j["rope_factor"] = c.rope.factor;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["attention_bias"] = c.attention_bias;
  j["eos_token_id"] = c.eos_token_ids;
  j["dtype"] = c.torch_dtype;
  return j;
}
}  // namespace

int cmd_inspect(const std::vector<std::string>& argv) {
  Args a("inspect", kFlags, argv);
  if (a.has("--help")) {
    std::fputs(Args::usage("inspect", "PATH [--json]", kFlags).c_str(), stdout);
    return 0;
  }
  if (a.positionals().size() != 1) fail("inspect: expected exactly one PATH (a model directory, a .safetensors file or a .gguf file)");
  const std::string path = a.positionals()[0];
  if (!exists(path)) fail(path, ": no such file or directory");
  nlohmann::json out;
  out["path"] = path;
  nlohmann::json tensors = nlohmann::json::array();
  std::map<std::string, uint64_t> by_dtype;
  uint64_t total = 0, params = 0;
  auto add = [&](const std::string& name, const std::string& dtype, const Shape& shape, uint64_t bytes) {
    total += bytes;
    params += static_cast<uint64_t>(shape_numel(shape));
    by_dtype[dtype] += bytes;
    tensors.push_back({{"name", name}, {"dtype", dtype}, {"shape", shape}, {"bytes", bytes}});
  };
  const std::string gguf = path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0 ? path : "";
  if (!gguf.empty()) {
    // A GGUF: tensors in the file's order with their ggml types; the config blockspec derives from its keys.
    GgufFile f(gguf);
    for (const auto& t : f.tensors()) add(t.name, ggml_type_name(t.type), t.shape(), t.nbytes);
    try {
      out["config"] = config_summary(config_from_gguf(f));
    } catch (const Error& e) {
      out["config_error"] = e.what();
    }
  } else {
    SafetensorsCheckpoint ckpt(path);
    for (const auto& name : ckpt.names()) {
      const SafetensorsEntry& e = ckpt.entry(name);
      add(name, dtype_name(e.dtype), e.shape, e.end - e.begin);
    }
    if (is_dir(path) && exists(path + "/config.json")) out["config"] = config_summary(load_hf_config(path));
  }
  out["tensors"] = tensors;
  out["n_tensors"] = tensors.size();
  out["total_bytes"] = total;
  out["n_elements"] = params;
  out["bytes_by_dtype"] = by_dtype;
  const bool have_config = out.contains("config");
  if (a.has("--json")) {
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  for (const auto& t : tensors) {
    std::printf("%-60s %-8s %-20s %12llu\n", t["name"].get<std::string>().c_str(),
                t["dtype"].get<std::string>().c_str(), shape_str(t["shape"].get<Shape>()).c_str(),
                static_cast<unsigned long long>(t["bytes"].get<uint64_t>()));
  }
  std::printf("\n%zu tensors, %llu elements, %llu bytes (%.2f MB)\n", tensors.size(),
              static_cast<unsigned long long>(params), static_cast<unsigned long long>(total), total / 1e6);
  for (const auto& [d, b] : by_dtype)
    std::printf("  %-8s %llu bytes\n", d.c_str(), static_cast<unsigned long long>(b));
  if (have_config) {
    std::printf("\nconfig:\n");
    for (const auto& [k, v] : out["config"].items()) std::printf("  %-26s %s\n", k.c_str(), v.dump().c_str());
  }
  if (out.contains("config_error"))
    std::printf("\nconfig: not a model blockspec runs: %s\n", out["config_error"].get<std::string>().c_str());
  return 0;
}

}  // namespace blockspec
