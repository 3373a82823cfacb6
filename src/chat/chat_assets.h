// What the chat endpoints need from a model beyond its tokenizer: the Jinja
// chat template and the bos/eos token strings the template may print.
// model/chat_files.h reads them from a checkpoint.
#pragma once
#include <string>

namespace blockspec {

struct ChatAssets {
  std::string template_source;  // empty: the model has no chat template
  std::string template_what;    // names the source in errors
  std::string bos_token, eos_token;
  bool add_bos = false;  // completions prompts start with bos (GGUF / tokenizer_config add_bos_token)
};

}  // namespace blockspec
