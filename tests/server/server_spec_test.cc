// Speculative decoding inside `blockspec serve`, over real HTTP on loopback:
// servers with n-gram and DFlash speculation at K = 1, 3, 7 answer every
// request (completions and chat, JSON and SSE, at concurrency 1 and 8)
// byte-identically to a server without speculation, with drafts accepted,
// partially accepted and rejected (the per-position counters of /metrics
// say so), and hold no request and no KV page afterwards.
//
// Drafters: n-gram prompt lookup as users run it; a random DFlash drafter
// made for the tiny target; and, for acceptance at every position, a test
// double in the DFlash slot (the engine loads the drafter and computes its
// taps; wrap_proposer swaps the proposer) that drafts the target's own greedy
// continuation, computed by a second copy of the target, with about one
// position in four made wrong on purpose.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "../spec_setup.h"
#include "../runtime/sampling_harness.h"
#include "model/transformer.h"
#include "prom_metrics.h"
#include "model/chat_files.h"
#include "server/server.h"

namespace blockspec {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
const std::string kModelDir = std::string(BS_SOURCE_DIR) + "/tests/fixtures/golden/qwen3-tiny-f32";
const std::string kTemplate = std::string(BS_SOURCE_DIR) + "/tests/fixtures/chat/qwen3.jinja";
constexpr int kMaxTokens = 40;

ModelOptions model_options() {
  ModelOptions mo;
  mo.n_threads = 1;
  return mo;
}

// Drafts the target's greedy continuation of seq (from its own copy of the
// target and a KV cache it keeps in step), except at the positions p where
// a fixed hash of p is 0 modulo wrong_every: there it drafts the next token
// id instead (wrong_every 1: every draft token is wrong; 4: about one in
// four, in runs long and short, so drafts of every length are fully,
// partly and not accepted).
class GreedyOracle : public Proposer {
 public:
  GreedyOracle(std::shared_ptr<Transformer> m, int64_t wrong_every)
      : m_(std::move(m)), wrong_every_(wrong_every), cache_(m_->new_cache(m_->config().max_position_embeddings + 16)) {}
  std::string method() const override { return "oracle"; }
  void observe(const std::vector<int32_t>&, int64_t, int64_t, const float*) override {}
  void propose(const std::vector<int32_t>& seq, int64_t k, const SamplingParams&, Rng&, Draft& out) override {
    size_t keep = 0;  // the cached prefix that seq still starts with
    while (keep < cached_.size() && keep < seq.size() && cached_[keep] == seq[keep]) ++keep;
    keep = std::min(keep, seq.size() - 1);  // at least one token to run
    cached_.assign(seq.begin(), seq.end());
    cache_.set_size(static_cast<int64_t>(keep));
    m_->forward(seq.data() + keep, static_cast<int64_t>(seq.size() - keep), cache_, logits_, false);
    const int64_t V = m_->config().vocab_size;
    for (int64_t j = 0; j < k; ++j) {
      int32_t t = argmax(logits_.data(), V);
      const int64_t pos = static_cast<int64_t>(seq.size()) + j;
      const bool wrong = mix(static_cast<uint64_t>(pos)) % static_cast<uint64_t>(wrong_every_) == 0;
      out.tokens.push_back(wrong ? (t + 1) % static_cast<int32_t>(V) : t);
      if (j + 1 == k) break;
      m_->forward(&t, 1, cache_, logits_, false);
      cached_.push_back(t);
    }
  }
  // splitmix64's finalizer: consecutive positions get unrelated bits.
  static uint64_t mix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  void reset() override {
    cached_.clear();
    cache_.set_size(0);
  }

 private:
  std::shared_ptr<Transformer> m_;
  int64_t wrong_every_;
  KvCache cache_;
  std::vector<int32_t> cached_;  // tokens whose K/V cache_ holds
  std::vector<float> logits_;
};

struct Served {
  std::shared_ptr<ServedModel> model;
  std::unique_ptr<Server> server;
  int port = 0;
};

std::unique_ptr<Served> serve(std::optional<SpecConfig> spec, EngineOptions eo = {}) {
  eo.max_num_seqs = 8;
  eo.spec = std::move(spec);
  auto s = std::make_unique<Served>();
  s->model = make_served_model(test_engine(Transformer::load(kModelDir, model_options()), eo),
                               Tokenizer::from_file(kModelDir + "/tokenizer.json"),
                               read_chat_assets(kModelDir, kTemplate), kModelDir);
  s->server = std::make_unique<Server>(ServerOptions{"127.0.0.1", 0, "tiny", "", 32, false});
  s->port = s->server->start();
  s->server->set_model(s->model);
  return s;
}

// The requests every server answers: completions and chat, JSON and SSE;
// some prompts repeat themselves so that n-gram lookup finds matches.
std::vector<json> requests() {
  std::vector<json> out;
  const std::vector<std::string> prompts = {
      "one two three one two three one two three one two",
      "The quick brown fox jumps over the lazy dog. The quick brown fox",
      "def f(x):\n    return x\n\ndef g(x):\n    return",
      "Speculative decoding",
  };
  for (size_t i = 0; i < prompts.size(); ++i) {
    json r = {{"model", "tiny"}, {"max_tokens", kMaxTokens}, {"temperature", 0}, {"ignore_eos", true}};
    if (i == 3) r["messages"] = json::array({{{"role", "user"}, {"content", prompts[i]}}});
    else r["prompt"] = prompts[i];
    out.push_back(r);
    r["stream"] = true;
    out.push_back(r);
  }
  // Structured output: the grammar masks the rows drafts are verified
  // against, so speculation stays lossless under it too.
  json js = {{"model", "tiny"}, {"max_tokens", kMaxTokens}, {"temperature", 0}, {"prompt", prompts[0]},
             {"response_format", {{"type", "json_object"}}}};
  out.push_back(js);
  json rx = {{"model", "tiny"}, {"max_tokens", kMaxTokens}, {"temperature", 0}, {"prompt", prompts[1]},
             {"guided_regex", "(one|two|three)( (one|two|three|four))*"}, {"stream", true}};
  out.push_back(rx);
  return out;
}

// The text of one answer (SSE chunks joined).
std::string answer(int port, const json& req) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  const bool chat = req.contains("messages");
  auto r = c.Post(chat ? "/v1/chat/completions" : "/v1/completions", req.dump(), "application/json");
  if (!r || r->status != 200) {
    ADD_FAILURE() << "no 200 answer: " << (r ? r->body : std::string("no response"));
    return "";
  }
  if (!req.value("stream", false)) {
    json j = json::parse(r->body);
    return chat ? j["choices"][0]["message"]["content"].get<std::string>() : j["choices"][0]["text"].get<std::string>();
  }
  std::string text;
  for (size_t pos = 0; (pos = r->body.find("data: {", pos)) != std::string::npos;) {
    const size_t end = r->body.find("\n\n", pos);
    json j = json::parse(r->body.substr(pos + 6, end - pos - 6));
    const json& ch = j["choices"][0];
    if (chat && ch["delta"].contains("content")) text += ch["delta"]["content"].get<std::string>();
    if (!chat) text += ch["text"].get<std::string>();
    pos = end;
  }
  EXPECT_NE(r->body.find("data: [DONE]"), std::string::npos);
  return text;
}

// Every request's answer, sent one at a time or by 8 clients at once.
std::vector<std::string> answers(int port, int concurrency) {
  const std::vector<json> reqs = requests();
  std::vector<std::string> out(reqs.size());
  if (concurrency == 1) {
    for (size_t i = 0; i < reqs.size(); ++i) out[i] = answer(port, reqs[i]);
    return out;
  }
  std::vector<std::thread> ts;
  for (size_t i = 0; i < reqs.size(); ++i) ts.emplace_back([&, i] { out[i] = answer(port, reqs[i]); });
  for (auto& t : ts) t.join();
  return out;
}

// Prometheus text -> {"name{labels}": value} (model_name label dropped).
std::map<std::string, double> metrics(int port) {
  httplib::Client c("127.0.0.1", port);
  auto r = c.Get("/metrics");
  return r ? testing::parse_metrics(r->body) : std::map<std::string, double>{};
}

double per_pos(std::map<std::string, double>& m, int i) {
  return m["blockspec:spec_decode_num_accepted_tokens_per_pos_total{position=\"" + std::to_string(i) + "\"}"];
}

void print_counters(const std::string& what, int64_t k, std::map<std::string, double>& m) {
  std::printf("[serve spec] %-8s K=%lld drafts %.0f, draft tokens %.0f, accepted %.0f, per position:", what.c_str(),
              static_cast<long long>(k), m["blockspec:spec_decode_num_drafts_total"],
              m["blockspec:spec_decode_num_draft_tokens_total"], m["blockspec:spec_decode_num_accepted_tokens_total"]);
  for (int i = 0; i < k; ++i) std::printf(" %.0f", per_pos(m, i));
  std::printf("\n");
}

// Waits until the engine holds no request and no KV page.
void expect_idle(const Served& s) {
  EngineMetrics m;
  for (int i = 0; i < 400; ++i) {
    m = s.model->engine->metrics();
    if (m.running == 0 && m.waiting == 0 && m.kv_pages_used == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_EQ(m.running, 0);
  EXPECT_EQ(m.waiting, 0);
  EXPECT_EQ(m.kv_pages_used, 0);
}

class ServerSpec : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("bs_server_spec_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    auto target = Transformer::load(kModelDir, model_options());
    testing::write_overlapping_drafters(*target, dir_.string());
    auto plain = serve(std::nullopt);
    plain_ = new std::vector<std::string>(answers(plain->port, 1));
    EXPECT_EQ(answers(plain->port, 8), *plain_) << "plain serving is not batch invariant";
    for (const std::string& t : *plain_) EXPECT_FALSE(t.empty());
  }
  static void TearDownTestSuite() {
    fs::remove_all(dir_);
    delete plain_;
  }
  static SpecConfig spec(const std::string& method, int64_t k) {
    return test_spec(method, k, method == "ngram" ? "" : (dir_ / method).string());
  }
  // Serves with `sc`, answers at concurrency 1 and 8, checks the answers
  // against plain serving; returns the server's metrics.
  static std::map<std::string, double> check_lossless(const SpecConfig& sc, EngineOptions eo = {}) {
    auto s = serve(sc, eo);
    for (int conc : {1, 8}) {
      SCOPED_TRACE("concurrency " + std::to_string(conc));
      const std::vector<std::string> got = answers(s->port, conc);
      for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], (*plain_)[i]) << "request " << i << " " << requests()[i];
    }
    expect_idle(*s);
    return metrics(s->port);
  }
  static inline fs::path dir_;
  static inline std::vector<std::string>* plain_ = nullptr;
};

TEST_F(ServerSpec, NgramIsLosslessAndAccepts) {
  for (int64_t k : {1, 3, 7}) {
    SCOPED_TRACE("ngram K=" + std::to_string(k));
    auto m = check_lossless(spec("ngram", k));
    print_counters("ngram", k, m);
    const double drafts = m["blockspec:spec_decode_num_drafts_total"];
    EXPECT_GT(drafts, 0);
    EXPECT_GT(m["blockspec:spec_decode_num_accepted_tokens_total"], 0);
    EXPECT_LE(m["blockspec:spec_decode_num_draft_tokens_total"], k * drafts);  // a lookup may find fewer
    EXPECT_LT(per_pos(m, 0), drafts) << "no draft was ever rejected";
  }
}

// The oracle in the DFlash slot: accepted up to its planted error, so every
// K sees full, partial and zero acceptance; and K tokens every draft.
TEST_F(ServerSpec, DFlashSlotIsLosslessWithPartialAcceptance) {
  auto oracle_model = std::shared_ptr<Transformer>(Transformer::load(kModelDir, model_options()));
  EngineOptions eo;
  eo.wrap_proposer = [oracle_model](std::unique_ptr<Proposer>) { return std::make_unique<GreedyOracle>(oracle_model, 4); };
  for (int64_t k : {1, 3, 7}) {
    SCOPED_TRACE("oracle K=" + std::to_string(k));
    auto m = check_lossless(spec("dflash", k), eo);
    print_counters("oracle", k, m);
    const double drafts = m["blockspec:spec_decode_num_drafts_total"];
    ASSERT_GT(drafts, 0);
    EXPECT_EQ(m["blockspec:spec_decode_num_draft_tokens_total"], k * drafts);
    // Position 0 accepted in most drafts, rejected in some (its planted
    // error); the last position accepted less often than the first (drafts
    // cut in the middle), yet sometimes (full acceptance).
    EXPECT_GT(per_pos(m, 0), drafts / 2);
    EXPECT_LT(per_pos(m, 0), drafts);
    EXPECT_GT(per_pos(m, static_cast<int>(k) - 1), 0);
    if (k > 1) {
      EXPECT_LT(per_pos(m, static_cast<int>(k) - 1), per_pos(m, 0));
    }
    for (int i = 1; i < k; ++i) EXPECT_LE(per_pos(m, i), per_pos(m, i - 1)) << "position " << i;
    double sum = 0;
    for (int i = 0; i < k; ++i) sum += per_pos(m, i);
    EXPECT_EQ(sum, m["blockspec:spec_decode_num_accepted_tokens_total"]);
  }
}

// A real (random) DFlash and DFlash2 drafter: lossless, and a given K is
// the draft length of every draft.
TEST_F(ServerSpec, RealDrafterWithFixedKDraftsExactlyK) {
  for (const char* method : {"dflash", "dflash2"}) {
    SCOPED_TRACE(method);
    auto m = check_lossless(spec(method, 4));
    print_counters(method, 4, m);
    const double drafts = m["blockspec:spec_decode_num_drafts_total"];
    EXPECT_GT(drafts, 0);
    EXPECT_EQ(m["blockspec:spec_decode_num_draft_tokens_total"], 4 * drafts);
  }
}

// n-gram lookup in front of a real (random) DFlash / DFlash2 drafter, as
// `"prompt_lookup_max"` with a drafter turns it on: lossless at concurrency 1
// and 8 (lookup drafts and drafter drafts side by side in one batch), both
// sources draft, lookup drafts are accepted in part, and /metrics counts them.
TEST_F(ServerSpec, DrafterBehindNgramLookupIsLosslessAndUsesBoth) {
  for (const char* method : {"dflash", "dflash2"}) {
    for (int64_t k : {1, 3}) {
      SCOPED_TRACE(std::string(method) + " K=" + std::to_string(k));
      SpecConfig sc = spec(method, k);
      sc.lookup_first = true;
      sc.prompt_lookup_min = 2, sc.prompt_lookup_max = 4;
      auto m = check_lossless(sc);
      print_counters(method, k, m);
      const double drafts = m["blockspec:spec_decode_num_drafts_total"];
      const double lookup = m["blockspec:spec_decode_num_lookup_drafts_total"];
      const double lookup_acc = m["blockspec:spec_decode_num_lookup_accepted_tokens_total"];
      std::printf("[serve spec] lookup drafts %.0f of %.0f, accepted %.0f\n", lookup, drafts, lookup_acc);
      EXPECT_GT(lookup, 0);
      EXPECT_LT(lookup, drafts) << "the drafter never drafted";
      EXPECT_GT(lookup_acc, 0);
      EXPECT_LE(lookup_acc, m["blockspec:spec_decode_num_accepted_tokens_total"]);
      EXPECT_LT(per_pos(m, 0), drafts) << "no draft was ever rejected";
      if (k == 3) EXPECT_LT(lookup_acc, 3 * lookup) << "every lookup draft accepted in full";
    }
  }
}

// No num_speculative_tokens: the draft length adapts to acceptance. With a
// proposer whose every draft is rejected, drafting stops once 8 drafts have
// shown it (KSelector's history), while the same proposer at a given K
// drafts on every step. The verify cost is given (flat: extra rows are free)
// and the tiny model's served forwards, which correct it, cost alike at 1 to
// 8 rows, so the choice depends on acceptance, not on this machine's timing.
TEST_F(ServerSpec, WithoutKTheDraftLengthAdapts) {
  auto oracle_model = std::shared_ptr<Transformer>(Transformer::load(kModelDir, model_options()));
  EngineOptions eo;
  eo.wrap_proposer = [oracle_model](std::unique_ptr<Proposer>) { return std::make_unique<GreedyOracle>(oracle_model, 1); };
  eo.verify_cost_ms = {{1, 100.0}, {256, 100.0}};
  SpecConfig adaptive = spec("dflash", 0);  // K: the drafter's block_size - 1, as a ceiling
  auto s = serve(adaptive, eo);
  const json req = requests()[0];
  double drafts = 0;
  for (int i = 0; i < 20 && drafts < 8; ++i) {
    EXPECT_EQ(answer(s->port, req), (*plain_)[0]);
    drafts = metrics(s->port)["blockspec:spec_decode_num_drafts_total"];
  }
  ASSERT_GE(drafts, 8) << "drafting never started (the prior alone should start it)";
  EXPECT_EQ(metrics(s->port)["blockspec:spec_decode_num_accepted_tokens_total"], 0);
  // The drafter's measured cost, decayed by the steps since its last draft but not to 0.
  EXPECT_GT(metrics(s->port)["blockspec:spec_decode_draft_cost_ms"], 0.0);
  // Where the time went: the forwards and the drafts inside the steps (this proposer keeps no drafter context).
  {
    auto t = metrics(s->port);
    const double step = t["blockspec:engine_step_seconds_total"], fwd = t["blockspec:engine_forward_seconds_total"];
    const double draft = t["blockspec:spec_decode_draft_seconds_total"];
    EXPECT_GT(fwd, 0.0);
    EXPECT_GT(draft, 0.0);
    EXPECT_EQ(t["blockspec:spec_decode_draft_context_seconds_total"], 0.0);
    EXPECT_GE(step, fwd + draft);
  }
  // The cost model as served: the given table (100 ms at any rows) times what this machine's forwards measured
  // (far less than 100 ms for the tiny model), for the row counts served.
  int costs = 0;
  for (const auto& [name, v] : metrics(s->port)) {
    if (name.rfind("blockspec:spec_decode_verify_cost_ms{rows=", 0) != 0) continue;
    ++costs;
    EXPECT_GT(v, 0.0) << name;
    EXPECT_LE(v, 100.0) << name;
  }
  EXPECT_GE(costs, 2) << "the plain and the drafting row counts";
  EXPECT_LT(metrics(s->port)["blockspec:spec_decode_verify_cost_ms{rows=\"1\"}"], 50.0) << "not corrected";
  for (int i = 0; i < 2; ++i) EXPECT_EQ(answer(s->port, req), (*plain_)[0]);
  EXPECT_EQ(metrics(s->port)["blockspec:spec_decode_num_drafts_total"], drafts) << "still drafting after 0 of "
                                                                                 << drafts << " accepted";
  expect_idle(*s);
  // The same proposer at K = 3 drafts 3 tokens on each of the 39 decode steps of a request.
  auto fixed = serve(spec("dflash", 3), eo);
  EXPECT_EQ(answer(fixed->port, req), (*plain_)[0]);
  auto m = metrics(fixed->port);
  EXPECT_EQ(m["blockspec:spec_decode_num_drafts_total"], kMaxTokens - 1);
  EXPECT_EQ(m["blockspec:spec_decode_num_draft_tokens_total"], 3 * (kMaxTokens - 1));
}

// Prefix caching with a real DFlash / DFlash2 drafter (the drafter's context
// of each cached page is kept beside it): a two-turn chat and a repeated
// completion, sent one after another and then by four clients at once, get
// plain serving's answers (without the cache); later requests report cached
// prompt tokens, drafts are made and accepted (in part: the lossless path).
TEST_F(ServerSpec, DFlashWithPrefixCachingIsLosslessAndHits) {
  std::string longer;
  for (int i = 0; i < 3; ++i) longer += "The quick brown fox jumps over the lazy dog. One two three one two three. ";
  const json first = {{"model", "tiny"}, {"max_tokens", kMaxTokens}, {"temperature", 0}, {"ignore_eos", true},
                      {"messages", json::array({{{"role", "user"}, {"content", longer}}})}};
  auto plain = serve(std::nullopt);  // prefix caching off
  const std::string answer1 = answer(plain->port, first);
  json second = first;
  second["messages"].push_back({{"role", "assistant"}, {"content", answer1}});
  second["messages"].push_back({{"role", "user"}, {"content", "And once more, please."}});
  // Token-id prompts after which the overlapping drafters' drafts are often
  // accepted: the harness's prompt, a repeat, and a continuation through its answer.
  auto target = Transformer::load(kModelDir, model_options());
  const std::vector<int32_t> ids = testing::make_prompt(*target);
  GenerateOptions go;
  go.max_new_tokens = kMaxTokens, go.stop_at_eos = false;
  std::vector<int32_t> continued = ids;
  for (int32_t t : generate(*target, ids, go).tokens) continued.push_back(t);
  continued.insert(continued.end(), {5, 6, 7});
  json completion = {{"model", "tiny"}, {"max_tokens", kMaxTokens}, {"temperature", 0}, {"ignore_eos", true},
                     {"prompt", ids}};
  json completion2 = completion;
  completion2["prompt"] = continued;
  const std::vector<json> reqs = {first, second, completion, completion, completion2};
  std::vector<std::string> want;
  for (const json& r : reqs) want.push_back(answer(plain->port, r));
  EngineOptions eo;
  eo.enable_prefix_caching = true;
  for (const char* method : {"dflash", "dflash2"}) {
    SCOPED_TRACE(method);
    auto s = serve(spec(method, 3), eo);
    ASSERT_TRUE(s->model->engine->prefix_caching()) << s->model->engine->prefix_caching_note();
    std::vector<int64_t> cached;
    for (const json& r : reqs) {
      httplib::Client c("127.0.0.1", s->port);
      c.set_read_timeout(120, 0);
      auto res = c.Post(r.contains("messages") ? "/v1/chat/completions" : "/v1/completions", r.dump(), "application/json");
      ASSERT_TRUE(res && res->status == 200);
      const json j = json::parse(res->body);
      const json& ch = j["choices"][0];
      EXPECT_EQ(r.contains("messages") ? ch["message"]["content"].get<std::string>() : ch["text"].get<std::string>(),
                want[cached.size()]) << "request " << cached.size();
      cached.push_back(j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>());
    }
    // The second turn starts with the first turn's prompt (its chat
    // template's user turn); the repeated completion finds all its pages.
    EXPECT_EQ(cached[0], 0);
    EXPECT_GE(cached[1], 16);
    EXPECT_EQ(cached[2], 0);
    EXPECT_EQ(cached[3], 32);  // the prompt's 2 full pages
    EXPECT_GE(cached[4], 32);
    std::vector<std::string> got(reqs.size());
    std::vector<std::thread> ts;
    for (size_t i = 0; i < reqs.size(); ++i) ts.emplace_back([&, i] { got[i] = answer(s->port, reqs[i]); });
    for (auto& t : ts) t.join();
    EXPECT_EQ(got, want) << "four clients at once";
    expect_idle(*s);
    auto m = metrics(s->port);
    print_counters(method, 3, m);
    EXPECT_GT(m["blockspec:prefix_cache_hits_total"], 0);
    EXPECT_GT(m["blockspec:spec_decode_num_drafts_total"], 0);
    EXPECT_GT(m["blockspec:spec_decode_num_accepted_tokens_total"], 0);
  }
}

}  // namespace
}  // namespace blockspec

namespace blockspec {
namespace {

// Logprobs (issue 19): a request's logprobs are the target's log_softmax
// (after its temperature) at the positions that chose each token, equal
// within 1e-5 to a teacher-forced forward over prompt + answer (eval's way
// of scoring), top lists included; and a speculative server (oracle drafts,
// K = 3: drafts fully, partly and not accepted) reports the same values for
// the same greedy tokens, JSON and SSE, completions and chat.
struct Scored {
  std::vector<int32_t> ids;
  std::vector<float> lps;
  std::vector<std::vector<std::pair<int32_t, float>>> tops;
};

int32_t id_of(const json& token) {
  const std::string t = token.get<std::string>();
  EXPECT_EQ(t.rfind("token_id:", 0), 0u) << t;
  return std::stoi(t.substr(9));
}

// The logprobs of one answer; completions or chat, JSON or SSE.
Scored scored(int port, const json& req) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  const bool chat = req.contains("messages");
  auto r = c.Post(chat ? "/v1/chat/completions" : "/v1/completions", req.dump(), "application/json");
  Scored out;
  if (!r || r->status != 200) {
    ADD_FAILURE() << (r ? r->body : std::string("no response"));
    return out;
  }
  std::vector<json> parts;
  if (req.value("stream", false)) {
    for (size_t pos = 0; (pos = r->body.find("data: {", pos)) != std::string::npos;) {
      const size_t end = r->body.find("\n\n", pos);
      parts.push_back(json::parse(r->body.substr(pos + 6, end - pos - 6)));
      pos = end;
    }
  } else {
    parts.push_back(json::parse(r->body));
  }
  for (const json& p : parts) {
    if (p["choices"].empty() || p["choices"][0]["logprobs"].is_null()) continue;
    const json& lp = p["choices"][0]["logprobs"];
    if (chat) {
      for (const json& e : lp["content"]) {
        out.ids.push_back(id_of(e["token"]));
        out.lps.push_back(e["logprob"]);
        out.tops.emplace_back();
        for (const json& t : e["top_logprobs"]) out.tops.back().emplace_back(id_of(t["token"]), t["logprob"].get<float>());
      }
    } else {
      for (size_t i = 0; i < lp["tokens"].size(); ++i) {
        out.ids.push_back(id_of(lp["tokens"][i]));
        out.lps.push_back(lp["token_logprobs"][i]);
        out.tops.emplace_back();
        // {token: logprob} of the top n and the chosen token: put in the reference's order below.
        for (const auto& [k, v] : lp["top_logprobs"][i].items()) out.tops.back().emplace_back(id_of(json(k)), v.get<float>());
      }
    }
  }
  return out;
}

TEST_F(ServerSpec, LogprobsEqualTheForwardWithAndWithoutSpeculation) {
  auto oracle_model = std::shared_ptr<Transformer>(Transformer::load(kModelDir, model_options()));
  EngineOptions eo;
  eo.wrap_proposer = [oracle_model](std::unique_ptr<Proposer>) { return std::make_unique<GreedyOracle>(oracle_model, 4); };
  auto plain = serve(std::nullopt);
  auto spec_server = serve(spec("dflash", 3), eo);
  auto ref = Transformer::load(kModelDir, model_options());
  const int64_t V = ref->config().vocab_size;
  const std::vector<int32_t> prompt = {11, 42, 7, 99, 300, 12, 5, 77};
  for (const float temp : {0.0f, 0.8f}) {
    for (bool chat : {false, true}) {
      for (bool stream : {false, true}) {
        SCOPED_TRACE(std::string(chat ? "chat" : "completions") + (stream ? " SSE" : " JSON") + " T=" + std::to_string(temp));
        json req = {{"max_tokens", 24}, {"temperature", temp}, {"seed", 5}, {"ignore_eos", true},
                    {"stream", stream}, {"return_tokens_as_token_ids", true}};
        if (chat) {
          req["messages"] = json::array({{{"role", "user"}, {"content", "Speculative decoding"}}});
          req["logprobs"] = true;
          req["top_logprobs"] = 4;
        } else {
          req["prompt"] = prompt;
          req["logprobs"] = 4;
        }
        std::vector<int32_t> prompt_ids = prompt;
        if (chat) {
          httplib::Client c("127.0.0.1", plain->port);
          auto t = c.Post("/tokenize", json{{"messages", req["messages"]}}.dump(), "application/json");
          prompt_ids = json::parse(t->body)["tokens"].get<std::vector<int32_t>>();
        }
        std::vector<Scored> got;
        for (int port : {plain->port, spec_server->port}) got.push_back(scored(port, req));
        for (const Scored& g : got) {
          ASSERT_EQ(g.ids.size(), 24u);
          // The reference: one teacher-forced forward over prompt + answer.
          std::vector<int32_t> all = prompt_ids;
          all.insert(all.end(), g.ids.begin(), g.ids.end() - 1);
          KvCache cache = ref->new_cache(static_cast<int64_t>(all.size()) + 8);
          std::vector<float> logits;
          ref->forward(all.data(), static_cast<int64_t>(all.size()), cache, logits, true);
          for (size_t i = 0; i < g.ids.size(); ++i) {
            const float* row = logits.data() + (prompt_ids.size() - 1 + i) * V;
            const TokenLogprob want = token_logprob(row, V, temp, g.ids[i], 4);
            EXPECT_NEAR(g.lps[i], want.logprob, 1e-5) << "token " << i;
            std::vector<std::pair<int32_t, float>> top = g.tops[i];
            if (!chat) {  // completions: a dict of the top 4 and the chosen token, largest first as the reference
              const bool chosen_in_top =
                  std::any_of(want.top.begin(), want.top.end(), [&](const auto& e) { return e.first == g.ids[i]; });
              ASSERT_EQ(top.size(), chosen_in_top ? 4u : 5u) << "token " << i;
              std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) {
                return a.second > b.second || (a.second == b.second && a.first < b.first);
              });
              if (!chosen_in_top) {
                auto it = std::find_if(top.begin(), top.end(), [&](const auto& e) { return e.first == g.ids[i]; });
                ASSERT_NE(it, top.end());
                EXPECT_NEAR(it->second, want.logprob, 1e-5);
                top.erase(it);
              }
            }
            ASSERT_EQ(top.size(), 4u) << "token " << i;
            for (size_t k = 0; k < 4; ++k) {
              EXPECT_EQ(top[k].first, want.top[k].first) << "token " << i << " top " << k;
              EXPECT_NEAR(top[k].second, want.top[k].second, 1e-5) << "token " << i << " top " << k;
            }
          }
        }
        if (temp == 0) {  // greedy: the same tokens, so the same logprobs
          EXPECT_EQ(got[1].ids, got[0].ids);
          for (size_t i = 0; i < got[0].lps.size() && i < got[1].lps.size(); ++i)
            EXPECT_NEAR(got[1].lps[i], got[0].lps[i], 1e-5) << "token " << i;
        }
      }
    }
  }
  auto m = metrics(spec_server->port);
  EXPECT_GT(m["blockspec:spec_decode_num_accepted_tokens_total"], 0);
  EXPECT_LT(m["blockspec:spec_decode_num_accepted_tokens_total"], m["blockspec:spec_decode_num_draft_tokens_total"]);
}

}  // namespace
}  // namespace blockspec
