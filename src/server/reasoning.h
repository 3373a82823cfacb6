// vLLM's `--reasoning-parser qwen3`: the <think> ... </think> span of a chat
// answer goes to `reasoning_content`, the rest to `content` (issue 19).
// Rules (vLLM's Qwen3ReasoningParser, vllm/reasoning/qwen3_reasoning_parser.py):
// a generated "<think>" is dropped (older templates let the model open the
// span; Qwen3.5-style templates open it in the prompt); text before
// "</think>" is reasoning, text after it content; without "</think>" the
// whole answer is reasoning (cut short while thinking) unless the request
// set chat_template_kwargs.enable_thinking = false, then it is all content.
// The tags are plain text in Qwen3's vocabulary (not special tokens), so the
// split works on the decoded text, in pieces as they stream.
#pragma once
#include <optional>
#include <string>

namespace blockspec {

struct ReasoningSplit {
  std::optional<std::string> reasoning, content;  // nullopt: none (JSON null)
};

// The whole answer at once (non-streaming).
ReasoningSplit split_reasoning(const std::string& text, bool thinking_enabled);

// The same split over streamed pieces: feed() appends to `reasoning` and
// `content` what is certain so far, holding back a tail that may be the
// start of a tag; finish() releases it. With thinking enabled the
// concatenated outputs equal split_reasoning of the concatenated input ("" for
// nullopt); with it disabled every piece is content (vLLM streams it so).
class ReasoningStream {
 public:
  explicit ReasoningStream(bool thinking_enabled) : in_content_(!thinking_enabled) {}
  void feed(const std::string& piece, std::string& reasoning, std::string& content);
  void finish(std::string& reasoning, std::string& content);

 private:
  bool in_content_;
  std::string held_;  // reasoning text not yet released (may end in a partial tag)
};

}  // namespace blockspec
