// parse_spec_config: vLLM's --speculative-config JSON into the typed
// SpecConfig, with the drafter's config.json read once.
#include "cli/spec_config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "base/error.h"
#include "formats/dflash_config.h"

namespace blockspec {
namespace {

const std::string kDrafters = std::string(BS_SOURCE_DIR) + "/tests/fixtures/dflash/";

std::string error_of(const std::string& json) {
  try {
    parse_spec_config(json);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SpecConfigParse, NgramTakesVllmDefaults) {
  SpecConfig c = parse_spec_config(R"({"method":"ngram","num_speculative_tokens":4})");
  EXPECT_EQ(c.method, SpecMethod::kNgram);
  EXPECT_STREQ(c.method_name(), "ngram");
  EXPECT_EQ(c.num_speculative_tokens, 4);
  EXPECT_FALSE(c.adaptive_k);
  EXPECT_EQ(c.prompt_lookup_min, 1);
  EXPECT_EQ(c.prompt_lookup_max, 5);
  EXPECT_FALSE(c.uses_drafter());
  // No K: adaptive (configure_spec sets the ceiling kNgramMaxDraft).
  EXPECT_EQ(parse_spec_config(R"({"method":"ngram"})").num_speculative_tokens, 0);
  c = parse_spec_config(R"({"method":"ngram","num_speculative_tokens":2,"prompt_lookup_min":7})");
  EXPECT_EQ(c.prompt_lookup_min, 7);
  EXPECT_EQ(c.prompt_lookup_max, 7);  // max follows a min above 5
}

TEST(SpecConfigParse, DrafterConfigReadOnceAndDecidesTheMethod) {
  SpecConfig c = parse_spec_config(R"({"method":"dflash","model":")" + kDrafters + R"(dflash"})");
  EXPECT_EQ(c.method, SpecMethod::kDFlash);
  ASSERT_TRUE(c.draft);
  EXPECT_EQ(c.draft->block_size, 8);
  EXPECT_EQ(c.num_speculative_tokens, 0);  // not given: adaptive, set when the drafter is attached
  // "dflash" naming a DFlash2 drafter runs it as dflash2; the method may be omitted.
  for (const char* j : {R"({"method":"dflash","model":")", R"({"model":")"}) {
    c = parse_spec_config(j + kDrafters + R"(dflash2","num_speculative_tokens":3,"draft_sample_method":"greedy"})");
    EXPECT_EQ(c.method, SpecMethod::kDFlash2) << j;
    EXPECT_EQ(c.num_speculative_tokens, 3);
    EXPECT_TRUE(c.greedy_draft);
  }
}

TEST(SpecConfigParse, ShippedDraftersByShortName) {
  // $BLOCKSPEC_DRAFTERS is searched first: the fixture drafters stand in for shipped ones.
  ASSERT_EQ(::setenv("BLOCKSPEC_DRAFTERS", kDrafters.c_str(), 1), 0);
  const SpecConfig c = parse_spec_config(R"({"method":"dflash","model":"dflash2"})");
  EXPECT_EQ(c.model, kDrafters + "dflash2");
  EXPECT_EQ(c.method, SpecMethod::kDFlash2);
  const std::string e = error_of(R"({"method":"dflash","model":"no-such-drafter"})");
  EXPECT_NE(e.find("no-such-drafter is neither a directory nor a shipped drafter"), std::string::npos) << e;
  EXPECT_NE(e.find("dflash2"), std::string::npos) << e;  // the names it knows
  ::unsetenv("BLOCKSPEC_DRAFTERS");
}

TEST(SpecConfigParse, BadConfigsNameWhatIsWrong) {
  const std::string d = kDrafters + "dflash";
  const std::pair<std::string, std::string> cases[] = {
      {"{", "not valid JSON"},
      {"[1]", "expected a JSON object"},
      {R"({"num_speculative_tokens":3})", "missing \"method\""},
      {R"({"method":"eagle3","num_speculative_tokens":3})", "\"eagle3\" is not supported"},
      {R"({"method":"ngram","num_speculative_tokens":3,"k":1})", "unknown key \"k\""},
      {R"({"method":"ngram","num_speculative_tokens":0})", "\"num_speculative_tokens\" must be an integer"},
      {R"({"method":"ngram","num_speculative_tokens":"3"})", "\"num_speculative_tokens\" must be an integer"},
      {R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":4,"prompt_lookup_max":2})",
       "prompt_lookup_max 2 < prompt_lookup_min 4"},
      {R"({"method":"ngram","num_speculative_tokens":3,"model":"x"})", "ngram takes no \"model\""},
      {R"({"method":"dflash"})", "needs \"model\""},
      {R"({"method":"dflash","model":")" + kDrafters + R"(target"})", "is not a DFlash drafter"},
      {R"({"method":"dflash","model":")" + d + R"(","prompt_lookup_max":3})", "apply to method ngram only"},
      {R"({"method":"dflash","model":")" + d + R"(","num_speculative_tokens":8})", "exceeds block_size - 1 = 7"},
      {R"({"method":"dflash","model":")" + d + R"(","draft_sample_method":"topk"})", "draft_sample_method must be"},
  };
  for (const auto& [json, want] : cases) {
    const std::string e = error_of(json);
    EXPECT_NE(e.find("--speculative-config"), std::string::npos) << json << " -> " << e;
    EXPECT_NE(e.find(want), std::string::npos) << json << " -> " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << "one line: " << e;
  }
}

}  // namespace
}  // namespace blockspec
