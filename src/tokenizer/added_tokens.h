// Added tokens (special or not) from tokenizer.json `added_tokens`, matched
// in the text before the model sees it, as HF's AddedVocabulary does:
// leftmost-longest over all contents, then the single_word / lstrip /
// rstrip rules. Tokens with normalized=false are matched in the raw text,
// those with normalized=true in each normalized remainder.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace blockspec::tok {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = true;
};

// One stretch of a text: either an added token (token >= 0, an index into
// the tokens given to build) or plain text (token == -1).
struct TextSegment {
  size_t start;
  size_t end;
  int32_t token;
};

class AddedTokenMatcher {
 public:
  // patterns[i] is what to look for (the content, normalized when the
  // token is); tokens[i] carries the flags.
  void build(const std::vector<std::string>& patterns, const std::vector<AddedToken>& tokens);
  bool empty() const { return patterns_.empty(); }
  int32_t id_of(int32_t token) const { return tokens_[size_t(token)].id; }
  // Replaces *out with segments covering `text` (valid UTF-8) in order.
  // Plain segments are never empty; an empty text gives no segments.
  void split(std::string_view text, std::vector<TextSegment>* out) const;

 private:
  // Longest pattern starting at `pos`, or -1.
  int32_t longest_at(std::string_view text, size_t pos, size_t* len) const;

  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t pattern = -1;
  };
  std::vector<Node> nodes_;  // trie over pattern bytes; nodes_[0] is the root
  std::array<bool, 256> first_byte_{};
  std::vector<std::string> patterns_;
  std::vector<AddedToken> tokens_;
};

}  // namespace blockspec::tok
