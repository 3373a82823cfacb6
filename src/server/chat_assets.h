// What the chat endpoints need from a model beyond its tokenizer: the Jinja
// chat template (tokenizer_config.json's or chat_template.jinja beside an HF
// checkpoint, the GGUF's tokenizer.chat_template, or a --chat-template file)
// and the bos/eos token strings the template may print.
#pragma once
#include <string>

namespace blockspec {

struct ChatAssets {
  std::string template_source;  // empty: the model has no chat template
  std::string template_what;    // names the source in errors
  std::string bos_token, eos_token;
  bool add_bos = false;  // completions prompts start with bos (GGUF / tokenizer_config add_bos_token)
};

// model_path: an HF directory or a GGUF file (or a directory holding one).
// chat_template_file: overrides the model's template when non-empty. Throws
// Error naming the file when a file exists but cannot be read or parsed.
ChatAssets read_chat_assets(const std::string& model_path, const std::string& chat_template_file = "");

}  // namespace blockspec
