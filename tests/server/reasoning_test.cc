// --reasoning-parser qwen3: the <think> ... </think> split of chat answers,
// whole (split_reasoning) and streamed in pieces (ReasoningStream), on cases
// written after vLLM's Qwen3 reasoning-parser tests (both template styles,
// truncated thinking, thinking disabled, empty spans, tags cut anywhere).
#include "server/reasoning.h"

#include <gtest/gtest.h>

#include <random>

namespace blockspec {
namespace {

struct Case {
  std::string text;
  bool thinking;
  std::optional<std::string> reasoning, content;
};

const Case kCases[] = {
    {"<think>I add 2 and 2.</think>4", true, "I add 2 and 2.", "4"},                   // the model opens the span
    {"I add 2 and 2.</think>\n\n4", true, "I add 2 and 2.", "\n\n4"},                  // the template opened it
    {"<think>\nstep one\n</think>\n\nThe answer.", true, "\nstep one\n", "\n\nThe answer."},
    {"<think>still thinking when max_tokens hit", true, "still thinking when max_tokens hit", std::nullopt},
    {"plain answer", false, std::nullopt, "plain answer"},                               // enable_thinking: false
    {"<think></think>only content", true, std::nullopt, "only content"},
    {"only reasoning</think>", true, "only reasoning", std::nullopt},
    {"a < b and </thin k> is not a tag</think>x<think>y", true, "a < b and </thin k> is not a tag", "x<think>y"},
    {"", true, std::nullopt, std::nullopt},
};

TEST(Reasoning, SplitWholeAnswers) {
  for (const Case& c : kCases) {
    const ReasoningSplit s = split_reasoning(c.text, c.thinking);
    EXPECT_EQ(s.reasoning, c.reasoning) << c.text;
    EXPECT_EQ(s.content, c.content) << c.text;
  }
  // Thinking disabled but the model closed a span anyway: split as vLLM does.
  EXPECT_EQ(split_reasoning("r</think>c", false).reasoning, "r");
}

// Streamed in pieces cut at every position (and at random ones), the deltas
// add up to the whole-answer split: no tag leaks, no text is lost.
TEST(Reasoning, StreamedPiecesAddUpToTheSplit) {
  std::mt19937 rng(7);
  for (const Case& c : kCases) {
    if (!c.thinking) continue;
    std::vector<std::vector<size_t>> cuts;
    for (size_t every = 1; every <= 9; ++every) {
      std::vector<size_t> v;
      for (size_t i = every; i < c.text.size(); i += every) v.push_back(i);
      cuts.push_back(v);
    }
    for (int r = 0; r < 20; ++r) {
      std::vector<size_t> v;
      for (size_t i = 1; i < c.text.size(); ++i)
        if (rng() % 3 == 0) v.push_back(i);
      cuts.push_back(v);
    }
    for (const auto& v : cuts) {
      ReasoningStream s(true);
      std::string reasoning, content;
      size_t from = 0;
      for (size_t at : v) {
        std::string r1, c1;
        s.feed(c.text.substr(from, at - from), r1, c1);
        EXPECT_EQ(r1.find("</think>"), std::string::npos);
        reasoning += r1, content += c1;
        from = at;
      }
      s.feed(c.text.substr(from), reasoning, content);
      s.finish(reasoning, content);
      EXPECT_EQ(reasoning, c.reasoning.value_or("")) << c.text;
      EXPECT_EQ(content, c.content.value_or("")) << c.text;
    }
  }
  ReasoningStream off(false);  // thinking disabled: every piece is content, at once
  std::string r, c;
  off.feed("<think>x", r, c);
  EXPECT_EQ(c, "<think>x");
  EXPECT_TRUE(r.empty());
}

}  // namespace
}  // namespace blockspec
