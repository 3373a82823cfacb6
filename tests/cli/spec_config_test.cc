// parse_spec_config: vLLM's --speculative-config JSON into the typed
// SpecConfig, with the drafter's config.json read once.
#include "cli/spec_config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "base/error.h"
#include "formats/dflash_config.h"
#include "runtime/speculative.h"

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

// prompt_lookup_min / _max with a drafter put n-gram lookup in front of it;
// without them the drafter drafts alone.
TEST(SpecConfigParse, LookupKeysWithADrafterPutTheLookupFirst) {
  const std::string d = kDrafters + "dflash";
  SpecConfig c = parse_spec_config(R"({"method":"dflash","model":")" + d + R"("})");
  EXPECT_FALSE(c.lookup_first);
  c = parse_spec_config(R"({"method":"dflash","model":")" + d + R"(","prompt_lookup_max":3})");
  EXPECT_TRUE(c.lookup_first);
  EXPECT_EQ(c.prompt_lookup_min, kLookupFirstMin);
  EXPECT_EQ(c.prompt_lookup_max, 3);
  c = parse_spec_config(R"({"model":")" + kDrafters + R"(dflash2","prompt_lookup_min":1})");
  EXPECT_TRUE(c.lookup_first);
  EXPECT_EQ(c.method, SpecMethod::kDFlash2);
  EXPECT_EQ(c.prompt_lookup_min, 1);
  EXPECT_EQ(c.prompt_lookup_max, 5);
  EXPECT_NE(error_of(R"({"method":"dflash","model":")" + d + R"(","prompt_lookup_min":4,"prompt_lookup_max":3})")
                .find("prompt_lookup_max 3 < prompt_lookup_min 4"),
            std::string::npos);
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
      {R"({"method":"ngram","num_speculative_tokens":3,"kv_cache_dtyp":"fp8"})", "unknown key \"kv_cache_dtyp\""},
      {R"({"method":"ngram","num_speculative_tokens":0})", "\"num_speculative_tokens\" must be an integer"},
      {R"({"method":"ngram","num_speculative_tokens":"3"})", "\"num_speculative_tokens\" must be an integer"},
      {R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":4,"prompt_lookup_max":2})",
       "prompt_lookup_max 2 < prompt_lookup_min 4"},
      {R"({"method":"ngram","num_speculative_tokens":3,"model":"x"})", "ngram takes no \"model\""},
      {R"({"method":"dflash"})", "needs \"model\""},
      {R"({"method":"dflash","model":")" + kDrafters + R"(target"})", "is not a DFlash drafter"},
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

// Every key of vLLM's SpeculativeConfig: honoured (its effect on the
// typed config), accepted with a note that says why it cannot matter here,
// or refused with a one-line reason. The one-line rule is checked for each.
TEST(SpecConfigKeys, KvCacheDtypeIsTheDraftersContextKv) {
  const std::string pre = R"({"method":"dflash","model":")" + kDrafters + R"(dflash","kv_cache_dtype":)";
  const std::pair<const char*, KvDType> named[] = {{"\"int8_block_g128\"", KvDType::kInt8BlockG128},
                                                   {"\"int8_per_token_head\"", KvDType::kInt8PerTokenHead},
                                                   {"\"fp8_e4m3\"", KvDType::kFP8E4M3},
                                                   {"\"fp8\"", KvDType::kFP8E4M3},
                                                   {"\"bfloat16\"", KvDType::kBF16},
                                                   {"\"f32\"", KvDType::kF32}};
  for (const auto& [v, want] : named) {
    const SpecConfig c = parse_spec_config(pre + v + "}");
    ASSERT_TRUE(c.draft_kv_dtype) << v;
    EXPECT_EQ(*c.draft_kv_dtype, want) << v;
  }
  // auto / absent / null: the target's (configure_spec fills it in).
  EXPECT_FALSE(parse_spec_config(pre + "\"auto\"}").draft_kv_dtype);
  EXPECT_FALSE(parse_spec_config(pre + "null}").draft_kv_dtype);
  const std::string e = error_of(pre + "\"float16\"}");
  EXPECT_NE(e.find("no fp16 KV cache"), std::string::npos) << e;
  EXPECT_NE(error_of(pre + "\"int4\"}").find("unknown KV cache dtype \"int4\""), std::string::npos);
  // ngram has no drafter KV: accepted, and said.
  std::vector<std::string> notes;
  parse_spec_config(R"({"method":"ngram","kv_cache_dtype":"fp8"})", &notes);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("method ngram has no drafter"), std::string::npos) << notes[0];
}

TEST(SpecConfigKeys, TokensPerBatchSizeTable) {
  std::vector<std::string> notes;
  const SpecConfig c = parse_spec_config(
      R"({"method":"ngram","num_speculative_tokens":5,"num_speculative_tokens_per_batch_size":[[1,1,7],[2,4,3],[8,8,0]]})",
      &notes);
  ASSERT_EQ(c.k_by_batch.size(), 3u);
  EXPECT_EQ(c.k_by_batch[1].lo, 2);
  EXPECT_EQ(c.k_by_batch[1].hi, 4);
  EXPECT_EQ(c.k_by_batch[1].k, 3);
  ASSERT_EQ(notes.size(), 1u);  // k 7 > num_speculative_tokens 5: runs as 5, and says so
  EXPECT_NE(notes[0].find("runs as 5"), std::string::npos) << notes[0];
  // k_for_batch: the range holding n; gaps and the tail keep the k before; clamped to K.
  const std::pair<int64_t, int64_t> want[] = {{1, 5}, {2, 3}, {4, 3}, {5, 3}, {7, 3}, {8, 0}, {64, 0}};
  for (const auto& [n, k] : want) EXPECT_EQ(k_for_batch(c, n), k) << "batch " << n;
  SpecConfig late = c;
  late.k_by_batch = {{3, 4, 2}};
  EXPECT_EQ(k_for_batch(late, 1), 5);  // before the first range: num_speculative_tokens
  EXPECT_EQ(k_for_batch(late, 3), 2);
  late.k_by_batch.clear();
  EXPECT_EQ(k_for_batch(late, 3), 5);  // no table: K
  const std::string pre = R"({"method":"ngram","num_speculative_tokens_per_batch_size":)";
  const std::pair<std::string, std::string> bad[] = {
      {"[]", "must be a list of [range_start"},
      {"[[1,2]]", "is not [start, end, k]"},
      {"[[0,2,3]]", "needs 1 <= start <= end"},
      {"[[3,2,3]]", "needs 1 <= start <= end"},
      {"[[1,2,-1]]", "needs 1 <= start <= end and 0 <= k"},
      {"[[1,4,3],[4,8,2]]", "ascend without overlap"},
  };
  for (const auto& [v, msg] : bad) {
    const std::string e = error_of(pre + v + "}");
    EXPECT_NE(e.find(msg), std::string::npos) << v << " -> " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos);
  }
}

TEST(SpecConfigKeys, HonouredKeys) {
  const std::string d = kDrafters + "dflash";
  EXPECT_EQ(parse_spec_config(R"({"method":"dflash","model":")" + d + R"(","max_model_len":300})").draft_max_model_len,
            300);
  // One process on the CPU: draft tensor parallelism 1 only (vLLM's tensor_parallel_size spelling noted).
  std::vector<std::string> notes;
  parse_spec_config(R"({"method":"ngram","draft_tensor_parallel_size":1,"rejection_sample_method":"standard"})", &notes);
  EXPECT_TRUE(notes.empty());
  parse_spec_config(R"({"method":"ngram","tensor_parallel_size":1})", &notes);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("draft_tensor_parallel_size"), std::string::npos);
  // quantization: checked against the drafter's own config.json.
  const SpecConfig q = parse_spec_config(R"({"method":"dflash","model":")" + kDrafters +
                                         R"(dflash-w8","quantization":"compressed-tensors"})");
  EXPECT_EQ(q.method, SpecMethod::kDFlash);
  const std::pair<std::string, std::string> bad[] = {
      {R"({"method":"ngram","draft_tensor_parallel_size":4})", "without tensor parallelism; use 1"},
      {R"({"method":"ngram","rejection_sample_method":"synthetic"})", "standard (lossless) rejection sampling"},
      {R"({"method":"ngram","quantization":"gptq"})", "method ngram has no drafter"},
      {R"({"method":"dflash","model":")" + d + R"(","quantization":"gptq"})", "is not quantized"},
      {R"({"method":"dflash","model":")" + kDrafters + R"(dflash-w8","quantization":"gptq"})", "is compressed-tensors"},
      {R"({"method":"dflash","model":")" + d + R"(","quantization":"awq"})", "dense, gptq or compressed-tensors"},
      {R"({"method":"dflash","model":")" + d + R"(","max_model_len":0})", "\"max_model_len\" must be an integer"},
  };
  for (const auto& [json, msg] : bad) {
    const std::string e = error_of(json);
    EXPECT_NE(e.find(msg), std::string::npos) << json << " -> " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos);
  }
}

TEST(SpecConfigKeys, AcceptedWithANoteOrRefusedWithAReason) {
  // Keys that cannot matter on the CPU: accepted, one note each, naming the key.
  for (const char* key : {"enforce_eager", "attention_backend", "moe_backend", "disable_padded_drafter_batch",
                          "disable_eagle_block_drop", "use_local_argmax_reduction", "index_share_for_mtp_iteration",
                          "revision", "code_revision", "draft_load_config", "suffix_decoding_max_tree_depth",
                          "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor",
                          "suffix_decoding_min_token_prob"}) {
    std::vector<std::string> notes;
    const SpecConfig c = parse_spec_config(std::string(R"({"method":"ngram",")") + key + R"(":true})", &notes);
    EXPECT_EQ(c.method, SpecMethod::kNgram);
    ASSERT_EQ(notes.size(), 1u) << key;
    EXPECT_NE(notes[0].find(std::string("\"") + key + "\" accepted, no effect here: "), std::string::npos) << notes[0];
    notes.clear();
    parse_spec_config(std::string(R"({"method":"ngram",")") + key + R"(":null})", &notes);
    EXPECT_TRUE(notes.empty()) << key << ": null is vLLM's unset";
  }
  // Keys of methods blockspec lacks: fine at vLLM's default, refused when set.
  for (const char* key : {"use_heterogeneous_vocab", "parallel_drafting", "enable_adaptive_verification",
                          "dspark_draft_topk", "synthetic_acceptance_rates", "synthetic_acceptance_length"}) {
    std::vector<std::string> notes;
    parse_spec_config(std::string(R"({"method":"ngram",")") + key + R"(":false})", &notes);
    EXPECT_TRUE(notes.empty()) << key;
    const std::string e = error_of(std::string(R"({"method":"ngram",")") + key + R"(":true})");
    EXPECT_NE(e.find(std::string("\"") + key + "\" "), std::string::npos) << e;
    EXPECT_NE(e.find("remove it"), std::string::npos) << e;
  }
  for (const char* key : {"target_model_config", "target_parallel_config", "draft_model_config",
                          "draft_parallel_config"}) {
    const std::string e = error_of(std::string(R"({"method":"ngram",")") + key + R"(":{}})");
    EXPECT_NE(e.find("set internally by vLLM"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace blockspec
