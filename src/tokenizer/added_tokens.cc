#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/unicode_text.h"

namespace blockspec::tok {

void AddedTokenMatcher::build(const std::vector<std::string>& patterns,
                              const std::vector<AddedToken>& tokens) {
  patterns_ = patterns;
  tokens_ = tokens;
  nodes_.assign(1, Node{});
  first_byte_.fill(false);
  for (size_t p = 0; p < patterns.size(); ++p) {
    const std::string& s = patterns[p];
    if (s.empty()) continue;  // HF ignores empty contents
    first_byte_[uint8_t(s[0])] = true;
    int32_t node = 0;
    for (char ch : s) {
      uint8_t b = uint8_t(ch);
      auto& kids = nodes_[node].children;
      auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, int32_t(-1)));
      if (it != kids.end() && it->first == b) {
        node = it->second;
        continue;
      }
      int32_t fresh = int32_t(nodes_.size());
      kids.insert(it, {b, fresh});
      nodes_.push_back(Node{});  // may reallocate: `kids` is not used after
      node = fresh;
    }
    // The first token with a given content wins, as HF's trie keeps the
    // first pattern among equal ones.
    if (nodes_[node].pattern < 0) nodes_[node].pattern = int32_t(p);
  }
}

int32_t AddedTokenMatcher::longest_at(std::string_view text, size_t pos, size_t* len) const {
  int32_t node = 0, best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto& kids = nodes_[node].children;
    uint8_t b = uint8_t(text[i]);
    auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, int32_t(-1)));
    if (it == kids.end() || it->first != b) break;
    node = it->second;
    if (nodes_[node].pattern >= 0) {
      best = nodes_[node].pattern;
      *len = i + 1 - pos;
    }
  }
  return best;
}

namespace {

// The code point that ends text[0, end) (end > 0, valid UTF-8).
char32_t last_char(std::string_view text, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (uint8_t(text[i]) & 0xC0) == 0x80) --i;
  size_t len = 0;
  return decode_utf8_at(text, i, &len);
}

}  // namespace

void AddedTokenMatcher::split(std::string_view text, std::vector<TextSegment>* out) const {
  out->clear();
  size_t done = 0;  // end of the previous added token
  size_t pos = 0;   // where the next search starts
  while (!patterns_.empty() && pos < text.size()) {
    if (!first_byte_[uint8_t(text[pos])]) {
      ++pos;
      continue;
    }
    size_t len = 0;
    int32_t p = longest_at(text, pos, &len);
    if (p < 0) {
      ++pos;
      continue;
    }
    const AddedToken& tok = tokens_[p];
    size_t start = pos, stop = pos + len;
    // Matching resumes after this match even when the match is dropped,
    // like HF's non-overlapping find_iter.
    pos = stop;
    if (tok.single_word) {
      size_t clen = 0;
      bool word_before = start > 0 && is_word_char(last_char(text, start));
      bool word_after = stop < text.size() && is_word_char(decode_utf8_at(text, stop, &clen));
      if (word_before || word_after) continue;
    }
    if (tok.lstrip) {
      size_t s = start;
      while (s > done && is_unicode_whitespace(last_char(text, s))) {
        size_t i = s - 1;
        while (i > 0 && (uint8_t(text[i]) & 0xC0) == 0x80) --i;
        s = i;
      }
      start = s;
    }
    if (tok.rstrip) {
      size_t clen = 0;
      while (stop < text.size() && is_unicode_whitespace(decode_utf8_at(text, stop, &clen)))
        stop += clen;
      pos = stop;
    }
    start = std::max(start, done);
    if (done < start) out->push_back({done, start, -1});
    out->push_back({start, stop, p});
    done = stop;
  }
  if (done < text.size()) out->push_back({done, text.size(), -1});
}

}  // namespace blockspec::tok
