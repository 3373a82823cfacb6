// Request defaults from the model's generation_config.json, as vLLM's
// default `--generation-config auto` takes them: temperature, top_p, top_k
// and max_new_tokens become the values of requests that omit those fields,
// and eos_token_id (an int or a list) joins every request's stop tokens
// (unless it sets ignore_eos). `--generation-config vllm` ignores the file.
// A request's own fields always win.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace blockspec {

struct RequestDefaults {
  std::optional<float> temperature, top_p;
  std::optional<int> top_k;            // 0: off
  std::optional<int64_t> max_tokens;   // HF max_new_tokens
  std::vector<int32_t> eos_token_ids;  // stop tokens added to every request unless ignore_eos
  std::string source;                  // the file they came from; empty: built-in defaults
  std::vector<std::string> ignored;    // "key value" of sampling settings this server does not implement
  std::string describe() const;        // one line for the start-up log
};

// Parses the contents of a generation_config.json (`file` names it in
// errors); token ids must be in [0, vocab_size). Throws Error with one line
// naming the file and the key.
RequestDefaults parse_generation_config(const nlohmann::json& j, const std::string& file, int64_t vocab_size);

// mode: "auto" (MODEL/generation_config.json when MODEL is a directory that
// holds one; built-in defaults otherwise), "vllm" (built-in defaults), or a
// directory that must hold a generation_config.json (as vLLM accepts).
// Throws Error for an unknown mode, an unreadable file or a bad value.
// overrides: a JSON object (vLLM's --override-generation-config) whose keys
// replace the file's ("" = none); with no file, the defaults are its keys.
RequestDefaults load_request_defaults(const std::string& mode, const std::string& model_path, int64_t vocab_size,
                                      const std::string& overrides = "");

}  // namespace blockspec
