#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "base/error.h"
#include "tokenizer/unicode_text.h"

namespace blockspec::tok {

struct RegexScratch::State {
  pcre2_match_data* match = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
};

RegexScratch::RegexScratch() : state_(std::make_unique<State>()) {
  // Only the whole-match offsets are read, so one ovector pair suffices for
  // every pattern. The JIT stack grows to 8 MiB: a run of tens of thousands
  // of spaces makes `\s+(?!\S)` backtrack deeply.
  state_->match = pcre2_match_data_create(1, nullptr);
  state_->context = pcre2_match_context_create(nullptr);
  state_->jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  if (!state_->match || !state_->context || !state_->jit_stack)
    fail("tokenizer: out of memory creating PCRE2 match state");
  pcre2_jit_stack_assign(state_->context, nullptr, state_->jit_stack);
}

RegexScratch::~RegexScratch() {
  pcre2_jit_stack_free(state_->jit_stack);
  pcre2_match_context_free(state_->context);
  pcre2_match_data_free(state_->match);
}

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

Regex::Regex(std::string_view pattern, const std::string& what)
    : pattern_(pattern), what_(what), code_(std::make_unique<Code>()) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(),
                              PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
  if (code_->code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    fail(what, ": regex does not compile at offset ", err_offset, ": ",
         reinterpret_cast<const char*>(msg), " (pattern ", std::string(pattern), ")");
  }
  // JIT is an optimisation only: without it pcre2_match interprets.
  pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

void Regex::find_all(std::string_view subject, RegexScratch& scratch,
                     std::vector<std::pair<size_t, size_t>>* out) const {
  auto& st = scratch.state();
  const auto* data = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t pos = 0;
  while (pos < subject.size()) {
    // The subject was validated once by the caller, hence NO_UTF_CHECK.
    int rc = pcre2_match(code_->code, data, subject.size(), pos, PCRE2_NO_UTF_CHECK, st.match,
                         st.context);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      fail(what_, ": regex match failed at byte ", pos, ": ", reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.match);
    size_t start = ov[0], end = ov[1];
    if (end > start) {
      out->emplace_back(start, end);
      pos = end;
    } else {
      // Empty match: HF drops empty splits; step one code point past it.
      size_t len = 1;
      if (start < subject.size()) decode_utf8_at(subject, start, &len);
      pos = start + len;
    }
  }
}

namespace {

// HF's Split: label every stretch of the piece as match or gap, flip the
// labels when `invert`, then combine according to `behavior`.
void apply_split(const PreTokenizerStep& step, std::string_view piece, PreTokenizeScratch& s,
                 std::vector<std::string_view>* out) {
  s.matches.clear();
  step.regex->find_all(piece, s.regex, &s.matches);
  struct Span {
    size_t start, end;
    bool is_match;
  };
  // Spans covering the piece; small, so a local vector is fine.
  std::vector<Span> spans;
  spans.reserve(s.matches.size() * 2 + 1);
  size_t prev = 0;
  for (auto [a, b] : s.matches) {
    if (a > prev) spans.push_back({prev, a, step.invert});
    spans.push_back({a, b, !step.invert});
    prev = b;
  }
  if (prev < piece.size()) spans.push_back({prev, piece.size(), step.invert});

  std::vector<std::pair<size_t, size_t>> merged;
  switch (step.behavior) {
    case SplitBehavior::kIsolated:
      for (auto& sp : spans) merged.emplace_back(sp.start, sp.end);
      break;
    case SplitBehavior::kRemoved:
      for (auto& sp : spans)
        if (!sp.is_match) merged.emplace_back(sp.start, sp.end);
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (auto& sp : spans) {
        if (sp.is_match && !prev_match && !merged.empty()) merged.back().second = sp.end;
        else merged.emplace_back(sp.start, sp.end);
        prev_match = sp.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev_match = false;
      for (size_t k = spans.size(); k-- > 0;) {
        auto& sp = spans[k];
        if (sp.is_match && !prev_match && !merged.empty()) merged.back().first = sp.start;
        else merged.emplace_back(sp.start, sp.end);
        prev_match = sp.is_match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    }
    case SplitBehavior::kContiguous: {
      bool prev_match = false;
      bool first = true;
      for (auto& sp : spans) {
        if (!first && sp.is_match == prev_match) merged.back().second = sp.end;
        else merged.emplace_back(sp.start, sp.end);
        prev_match = sp.is_match;
        first = false;
      }
      break;
    }
  }
  for (auto [a, b] : merged)
    if (b > a) out->push_back(piece.substr(a, b - a));
}

}  // namespace

void PreTokenizer::split(std::string_view segment, PreTokenizeScratch& s,
                         std::vector<std::string_view>* pieces) const {
  pieces->clear();
  s.owned.clear();
  if (segment.empty()) return;
  pieces->push_back(segment);
  for (const auto& step : steps_) {
    s.next.clear();
    for (std::string_view piece : *pieces) {
      if (step.kind == PreTokenizerStep::Kind::kSplit) {
        apply_split(step, piece, s, &s.next);
        continue;
      }
      std::string_view p = piece;
      if (step.add_prefix_space && (p.empty() || p.front() != ' ')) {
        s.owned.push_back(" " + std::string(p));
        p = s.owned.back();
      }
      if (step.regex) apply_split(step, p, s, &s.next);
      else s.next.push_back(p);
    }
    pieces->swap(s.next);
  }
}

}  // namespace blockspec::tok
