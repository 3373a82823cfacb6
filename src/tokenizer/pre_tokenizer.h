// Pre-tokenization: cuts a normalized text segment into the pieces BPE sees,
// following a tokenizer.json `pre_tokenizer` (a `Split` regex and/or the
// `ByteLevel` step, alone or in a `Sequence`). Regexes run on PCRE2 with
// UTF + UCP and JIT; HF runs them on Oniguruma, whose semantics for these
// patterns (leftmost-first alternation, greedy backtracking, \p classes)
// PCRE2 shares. Both also fold case beyond ASCII under (?i): "'ſ" (LONG S)
// matches the contraction 's in HF too, so the pattern is used as is.
#pragma once
#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace blockspec::tok {

// Per-call match state (match data and JIT stack), so one compiled Regex
// can serve many threads at once.
class RegexScratch {
 public:
  RegexScratch();
  ~RegexScratch();
  RegexScratch(const RegexScratch&) = delete;
  RegexScratch& operator=(const RegexScratch&) = delete;
  struct State;
  State& state() { return *state_; }

 private:
  std::unique_ptr<State> state_;
};

class Regex {
 public:
  // `what` names the JSON field for errors. Throws Error if PCRE2 rejects it.
  Regex(std::string_view pattern, const std::string& what);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Appends [start, end) of every non-empty, non-overlapping match in
  // `subject` (valid UTF-8), left to right.
  void find_all(std::string_view subject, RegexScratch& scratch,
                std::vector<std::pair<size_t, size_t>>* out) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  std::string what_;
  struct Code;
  std::unique_ptr<Code> code_;
};

// The regex HF's ByteLevel pre-tokenizer uses when use_regex is true.
inline constexpr std::string_view kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel } kind = Kind::kSplit;
  std::shared_ptr<const Regex> regex;  // Split, or ByteLevel with use_regex
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel only
};

// Scratch reused across segments of one encode call.
struct PreTokenizeScratch {
  RegexScratch regex;
  std::vector<std::pair<size_t, size_t>> matches;
  std::vector<std::string_view> next;
  std::deque<std::string> owned;  // pieces that gained a prefix space
};

class PreTokenizer {
 public:
  PreTokenizer() = default;
  explicit PreTokenizer(std::vector<PreTokenizerStep> steps) : steps_(std::move(steps)) {}
  // Replaces *pieces with the pieces of `segment`. Views point into
  // `segment` or into scratch.owned.
  void split(std::string_view segment, PreTokenizeScratch& scratch,
             std::vector<std::string_view>* pieces) const;

 private:
  std::vector<PreTokenizerStep> steps_;
};

}  // namespace blockspec::tok
