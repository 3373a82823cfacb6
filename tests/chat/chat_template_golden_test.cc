// Byte-exact agreement with HF tokenizer.apply_chat_template (transformers
// version in cases.json) on Qwen3's, Qwen2.5-Coder's and SmolLM2's own chat
// templates. Fixtures: scripts/make_chat_template_golden.py.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "base/error.h"
#include "chat/chat_template.h"

namespace blockspec {
namespace {

using nlohmann::ordered_json;

std::string fixture_dir() { return std::string(BS_SOURCE_DIR) + "/tests/fixtures/chat"; }

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open ", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// First differing byte, with context, for a readable failure.
std::string first_difference(const std::string& got, const std::string& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  size_t from = i < 40 ? 0 : i - 40;
  return str_cat("first difference at byte ", i, "\n  got:  ", quote_for_message(got.substr(from, 100), 200),
                 "\n  want: ", quote_for_message(want.substr(from, 100), 200));
}

TEST(ChatTemplateGolden, EveryCaseMatchesHfByteForByte) {
  ordered_json fixture = ordered_json::parse(read_file(fixture_dir() + "/cases.json"));
  std::map<std::string, ChatTemplate> templates;
  for (const auto& [name, file] : fixture["templates"].items())
    templates.emplace(name, ChatTemplate(read_file(fixture_dir() + "/" + file.get<std::string>()), file.get<std::string>()));
  ASSERT_EQ(templates.size(), 4u);  // qwen3, qwen2.5-coder, smollm2, qwen3.5

  std::map<std::string, int> n_checked;
  for (const auto& c : fixture["cases"]) {
    const std::string label = c["template"].get<std::string>() + "/" + c["name"].get<std::string>();
    SCOPED_TRACE(label);
    const ChatTemplate& tmpl = templates.at(c["template"].get<std::string>());
    ChatTemplateOptions opts;
    opts.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    if (c.contains("enable_thinking")) opts.enable_thinking = c["enable_thinking"].get<bool>();
    if (c.contains("tools")) opts.tools = c["tools"];
    if (c.contains("error")) {
      EXPECT_THROW(tmpl.apply_json(c["messages"], opts), Error) << "HF failed with " << c["error"];
    } else {
      std::string got;
      ASSERT_NO_THROW(got = tmpl.apply_json(c["messages"], opts));
      const std::string want = c["expected"].get<std::string>();
      EXPECT_EQ(got, want) << first_difference(got, want);
    }
    ++n_checked[c["template"].get<std::string>()];
  }
  for (const auto& [name, tmpl] : templates) EXPECT_GE(n_checked[name], 12) << name;
}

// The ChatMessage API gives the same string as the JSON path.
TEST(ChatTemplateGolden, StructMessagesMatchJsonMessages) {
  ChatTemplate tmpl(read_file(fixture_dir() + "/qwen3.jinja"), "qwen3.jinja");
  std::vector<ChatMessage> msgs = {{"system", "sys", ""}, {"user", "2+2?", ""}, {"assistant", "4", "adding"}};
  ordered_json j = ordered_json::array();
  for (const auto& m : msgs) {
    ordered_json o = {{"role", m.role}, {"content", m.content}};
    if (!m.reasoning_content.empty()) o["reasoning_content"] = m.reasoning_content;
    j.push_back(o);
  }
  ChatTemplateOptions opts;
  opts.add_generation_prompt = false;
  opts.enable_thinking = false;
  EXPECT_EQ(tmpl.apply(msgs, opts), tmpl.apply_json(j, opts));
  EXPECT_NE(tmpl.apply(msgs, opts).find("<think>\nadding\n</think>\n\n4<|im_end|>"), std::string::npos);
}

}  // namespace
}  // namespace blockspec
