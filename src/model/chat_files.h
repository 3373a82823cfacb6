// Reads a checkpoint's ChatAssets: the chat template (tokenizer_config.json's
// or chat_template.jinja beside an HF checkpoint, the GGUF's
// tokenizer.chat_template, or a --chat-template file) and bos/eos strings.
#pragma once
#include <string>

#include "chat/chat_assets.h"

namespace blockspec {

// model_path: an HF directory or a GGUF file (or a directory holding one).
// chat_template_file: overrides the model's template when non-empty. Throws
// Error naming the file when a file exists but cannot be read or parsed.
ChatAssets read_chat_assets(const std::string& model_path, const std::string& chat_template_file = "");

}  // namespace blockspec
