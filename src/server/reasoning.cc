#include "server/reasoning.h"

#include <algorithm>

namespace blockspec {

namespace {

constexpr const char* kOpen = "<think>";
constexpr const char* kClose = "</think>";

// Drops every "<think>" of s.
std::string without_open(std::string s) {
  const std::string open = kOpen;
  for (size_t at = s.find(open); at != std::string::npos; at = s.find(open, at)) s.erase(at, open.size());
  return s;
}

// Length of the longest suffix of s that is a proper prefix of tag.
size_t partial_tag(const std::string& s, const std::string& tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.compare(s.size() - n, n, tag, 0, n) == 0) return n;
  return 0;
}

}  // namespace

ReasoningSplit split_reasoning(const std::string& text, bool thinking_enabled) {
  ReasoningSplit r;
  const size_t close = text.find(kClose);
  if (close != std::string::npos) {
    const std::string reasoning = without_open(text.substr(0, close));
    const std::string content = text.substr(close + std::string(kClose).size());
    if (!reasoning.empty()) r.reasoning = reasoning;
    if (!content.empty()) r.content = content;
    return r;
  }
  if (!thinking_enabled) {
    r.content = text;
    return r;
  }
  const std::string reasoning = without_open(text);  // cut short while thinking
  if (!reasoning.empty()) r.reasoning = reasoning;
  return r;
}

void ReasoningStream::feed(const std::string& piece, std::string& reasoning, std::string& content) {
  if (in_content_) {
    content += piece;
    return;
  }
  held_ += piece;
  const size_t close = held_.find(kClose);
  if (close != std::string::npos) {
    reasoning += without_open(held_.substr(0, close));
    content += held_.substr(close + std::string(kClose).size());
    held_.clear();
    in_content_ = true;
    return;
  }
  held_ = without_open(held_);
  const size_t keep = std::max(partial_tag(held_, kClose), partial_tag(held_, kOpen));
  reasoning += held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
}

void ReasoningStream::finish(std::string& reasoning, std::string&) {
  reasoning += held_;  // a partial tag at the very end is text
  held_.clear();
}

}  // namespace blockspec
