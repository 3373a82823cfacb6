// The serving engine: continuous batching gives every request exactly what
// plain generation gives it alone (greedy), with or without speculation;
// admission control queues requests when the KV budget is short and serves
// them all; cancellation frees KV at once; stop tokens and max_tokens end
// requests with the right reason.
#include "../spec_setup.h"
#include "runtime/engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include <unistd.h>

#include <filesystem>

#include "formats/safetensors.h"
#include "runtime/generate.h"
#include "runtime/ngram.h"

namespace blockspec {
namespace {

std::string golden(const std::string& n) { return std::string(BS_SOURCE_DIR) + "/tests/fixtures/golden/" + n; }
std::string dflash(const std::string& n) { return std::string(BS_SOURCE_DIR) + "/tests/fixtures/dflash/" + n; }

struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, std::vector<int32_t>> tokens;
  std::map<uint64_t, std::string> reason;
  std::function<void(const TokenEvent&)> make(uint64_t* slot) {
    return [this, slot](const TokenEvent& e) {
      std::lock_guard<std::mutex> g(mu);
      // The id is known once submit returns; events for it cannot arrive before
      // the engine thread sees the request, which is after submit stored it.
      auto& v = tokens[reinterpret_cast<uint64_t>(slot)];
      v.insert(v.end(), e.tokens.begin(), e.tokens.end());
      if (e.finished) {
        reason[reinterpret_cast<uint64_t>(slot)] = e.finish_reason;
        cv.notify_all();
      }
    };
  }
  void wait(size_t n) {
    std::unique_lock<std::mutex> lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(120), [&] { return reason.size() >= n; }));
  }
};

std::vector<int32_t> prompt_of(int i, int len, int64_t V) {
  std::vector<int32_t> p(len);
  for (int j = 0; j < len; ++j) p[j] = static_cast<int32_t>((i * 131 + j * 17 + (j % 5 == 0 ? 3 : 0)) % V);
  return p;
}

std::vector<std::vector<int32_t>> run_batch_matches_plain(const std::string& model_dir, std::optional<SpecConfig> spec,
                                                          int64_t kv_mb, int n_req, ModelOptions mo = {},
                                                          EngineMetrics* metrics = nullptr) {
  mo.n_threads = 2;
  auto ref = Transformer::load(model_dir, mo);
  const int64_t V = ref->config().vocab_size;
  std::vector<std::vector<int32_t>> prompts, expect;
  std::vector<int64_t> max_toks;
  for (int i = 0; i < n_req; ++i) {
    prompts.push_back(prompt_of(i, 3 + (i * 7) % 40, V));
    max_toks.push_back(5 + (i * 11) % 30);
    GenerateOptions go;
    go.max_new_tokens = max_toks.back();
    go.stop_at_eos = false;
    expect.push_back(generate(*ref, prompts.back(), go).tokens);
  }
  EngineOptions eo;
  eo.max_num_seqs = 4;
  eo.max_step_tokens = 32;  // forces chunked prefill next to decodes
  eo.kv_cache_mb = kv_mb;
  eo.spec = spec;
  auto eng_owner = test_engine(Transformer::load(model_dir, mo), eo);
  Engine& eng = *eng_owner;
  Collector col;
  std::vector<uint64_t> slots(n_req);
  for (int i = 0; i < n_req; ++i) {
    RequestParams rp;
    rp.prompt = prompts[i];
    rp.max_tokens = max_toks[i];
    rp.ignore_eos = true;
    eng.submit(rp, col.make(&slots[i]));
  }
  col.wait(n_req);
  for (int i = 0; i < n_req; ++i) {
    const uint64_t key = reinterpret_cast<uint64_t>(&slots[i]);
    EXPECT_EQ(col.tokens[key], expect[i]) << "request " << i;
    EXPECT_EQ(col.reason[key], "length");
  }
  EngineMetrics m = eng.metrics();
  if (metrics) *metrics = m;
  EXPECT_EQ(m.requests_finished, static_cast<uint64_t>(n_req));
  // Pages return when the engine drops finished sequences (the next step).
  for (int t = 0; t < 100 && eng.metrics().kv_pages_used != 0; ++t)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(eng.metrics().kv_pages_used, 0);
  EXPECT_EQ(eng.metrics().running, 0);
  if (spec) {
    EXPECT_GT(m.spec.num_drafts, 0);
    std::printf("spec %s: drafts %lld, accepted %lld, mean acceptance length %.3f\n", spec->method_name(),
                static_cast<long long>(m.spec.num_drafts), static_cast<long long>(m.spec.num_accepted_tokens),
                m.spec.mean_acceptance_length());
  }
  return expect;
}

TEST(Engine, ContinuousBatchingMatchesPlainGreedy) { run_batch_matches_plain(golden("qwen3-tiny-f32"), {}, 0, 10); }

// An fp8_e4m3 cache runs with the checkpoint's k_scale / v_scale in the engine's shared pool exactly as in a
// plain generate (which would differ without them: scales of 50 push the tiny model's K / V into E4M3's subnormals).
TEST(Engine, Fp8KvUsesCheckpointScales) {
  namespace fs = std::filesystem;
  const std::string src = golden("qwen3-tiny-f32");
  const std::string dir = (fs::temp_directory_path() / ("bs_engine_kvscales_" + std::to_string(getpid()))).string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(src))
    if (e.path().filename() != "model.safetensors") fs::copy_file(e.path(), dir + "/" + e.path().filename().string());
  SafetensorsCheckpoint ck(src);
  std::vector<std::pair<std::string, Tensor>> t;
  for (const std::string& n : ck.names()) t.emplace_back(n, ck.tensor(n));
  for (int l = 0; l < 3; ++l)
    for (const char* s : {"k_scale", "v_scale"}) {
      Tensor v(DType::kF32, {1});
      v.mutable_ptr<float>()[0] = 50.f;
      t.emplace_back("model.layers." + std::to_string(l) + ".self_attn." + s, v);
    }
  write_safetensors(dir + "/model.safetensors", t);
  ModelOptions mo;
  mo.kv_cache_dtype = KvDType::kFP8E4M3;
  const auto scaled = run_batch_matches_plain(dir, {}, 0, 6, mo);
  const auto unscaled = run_batch_matches_plain(src, {}, 0, 6, mo);
  EXPECT_NE(scaled, unscaled);
  fs::remove_all(dir);
}

TEST(Engine, SmallKvBudgetQueuesAndServesAll) {
  // 1 MiB holds a few requests' worst case at a time: the rest must wait.
  run_batch_matches_plain(golden("qwen3-tiny-f32"), {}, 1, 10);
}

TEST(Engine, NgramSpeculationMatchesPlainGreedy) {
  SpecConfig sc = test_spec("ngram", 4);
  run_batch_matches_plain(golden("qwen3-tiny-f32"), sc, 0, 8);
}

TEST(Engine, DFlashSpeculationMatchesPlainGreedy) {
  for (const char* d : {"dflash", "dflash2"}) {
    // A fixed K: the adaptive choice depends on measured timings, and may
    // turn drafting off on a slow or loaded machine (k_selector_test.cc
    // tests that choice on given costs).
    SpecConfig sc = test_spec("dflash", 3, dflash(d));
    run_batch_matches_plain(dflash("target"), sc, 0, 6);
  }
}

// vLLM's num_speculative_tokens_per_batch_size: K 3 while one sequence
// decodes, 1 from two on; the steps' K follow the running count (10 requests,
// 4 at a time, so both happen), and the outputs stay plain greedy.
TEST(Engine, SpeculativeTokensPerBatchSizeFollowTheRunningCount) {
  for (const char* method : {"ngram", "dflash"}) {
    SCOPED_TRACE(method);
    SpecConfig sc = test_spec(method, 3, std::string(method) == "ngram" ? "" : dflash("dflash"));
    sc.k_by_batch = {{1, 1, 3}, {2, 8, 1}};
    EngineMetrics m;
    run_batch_matches_plain(std::string(method) == "ngram" ? golden("qwen3-tiny-f32") : dflash("target"), sc, 0, 10,
                            {}, &m);
    EXPECT_GT(m.steps_by_k[1], 0u);
    EXPECT_GT(m.steps_by_k[3], 0u);
    EXPECT_EQ(m.steps_by_k.size(), 2u) << "a K the table does not give";
  }
}

// The drafter's context K/V in each KV dtype (vLLM's speculative
// kv_cache_dtype): drafts change with the stored precision, outputs never do.
TEST(Engine, DrafterContextKvDtypesStayLossless) {
  for (KvDType t : {KvDType::kInt8BlockG128, KvDType::kFP8E4M3, KvDType::kBF16}) {
    SCOPED_TRACE(kv_dtype_name(t));
    SpecConfig sc = test_spec("dflash", 3, dflash("dflash"));
    sc.draft_kv_dtype = t;
    run_batch_matches_plain(dflash("target"), sc, 0, 6);
  }
}

TEST(Engine, CancelFreesKvAndStopTokensEnd) {
  ModelOptions mo;
  mo.n_threads = 2;
  auto ref = Transformer::load(golden("qwen3-tiny-f32"), mo);
  GenerateOptions go;
  go.max_new_tokens = 40;
  go.stop_at_eos = false;
  const std::vector<int32_t> p = prompt_of(3, 12, ref->config().vocab_size);
  const std::vector<int32_t> plain = generate(*ref, p, go).tokens;
  Engine eng(Transformer::load(golden("qwen3-tiny-f32"), mo), EngineOptions{});
  Collector col;
  uint64_t a = 0, b = 0;
  RequestParams rp;
  rp.prompt = p;
  rp.max_tokens = 400;
  rp.ignore_eos = true;
  const uint64_t id = eng.submit(rp, col.make(&a));
  rp.max_tokens = 40;
  rp.stop_token_ids = {plain[6]};  // ends at the first occurrence of this token
  eng.submit(rp, col.make(&b));
  eng.cancel(id);
  col.wait(2);
  EXPECT_EQ(col.reason[reinterpret_cast<uint64_t>(&a)], "abort");
  EXPECT_EQ(col.reason[reinterpret_cast<uint64_t>(&b)], "stop");
  const auto& got = col.tokens[reinterpret_cast<uint64_t>(&b)];
  const size_t first = std::find(plain.begin(), plain.end(), plain[6]) - plain.begin();
  EXPECT_EQ(got, std::vector<int32_t>(plain.begin(), plain.begin() + first + 1));
  for (int t = 0; t < 100 && eng.metrics().kv_pages_used != 0; ++t)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(eng.metrics().kv_pages_used, 0);
  EXPECT_EQ(eng.metrics().requests_aborted, 1u);
}

// Prefix caching: requests whose prompts share leading pages with earlier
// prompts and answers (a repeat, a longer continuation, a multi-turn history
// that contains an earlier answer) take those pages from the cache and get
// exactly what plain generation gives them, greedy and seeded sampling;
// hits are counted in tokens; pages go back (cached pages count as free);
// a reset forgets them.
// Prompts that share pages: a 70-token base, a repeat, a continuation, a
// second turn (history + the base's 20-token greedy answer + more), and
// (with_unrelated) one that shares nothing.
std::vector<std::vector<int32_t>> shared_prefix_prompts(const std::string& dir, const ModelOptions& mo,
                                                        bool with_unrelated) {
  auto ref = Transformer::load(dir, mo);
  const int64_t V = ref->config().vocab_size;
  const std::vector<int32_t> base = prompt_of(3, 70, V);
  GenerateOptions go;
  go.max_new_tokens = 20;
  go.stop_at_eos = false;
  const std::vector<int32_t> first_answer = generate(*ref, base, go).tokens;
  std::vector<std::vector<int32_t>> prompts = {base, base, base, base};
  prompts[2].insert(prompts[2].end(), {5, 6, 7, 8, 9});
  prompts[3].insert(prompts[3].end(), first_answer.begin(), first_answer.end());
  prompts[3].insert(prompts[3].end(), {11, 12, 13});
  if (with_unrelated) prompts.push_back(prompt_of(9, 40, V));
  return prompts;
}

// Request i of those tests: 20 tokens, seeded by i.
RequestParams shared_prefix_request(const std::vector<int32_t>& prompt, float temp, size_t i) {
  RequestParams rp;
  rp.prompt = prompt;
  rp.max_tokens = 20;
  rp.ignore_eos = true;
  rp.sampling.temperature = temp;
  rp.sampling.seed = 100 + i;
  return rp;
}

TEST(Engine, PrefixCachingGivesTheSameTokensAndHits) {
  ModelOptions mo;
  mo.n_threads = 2;
  const std::string dir = golden("qwen3-tiny-f32");
  const std::vector<std::vector<int32_t>> prompts = shared_prefix_prompts(dir, mo, true);
  GenerateOptions go;
  go.max_new_tokens = 20;
  go.stop_at_eos = false;
  const std::vector<int32_t> first_answer = generate(*Transformer::load(dir, mo), prompts[0], go).tokens;
  for (const float temp : {0.0f, 0.9f}) {
    SCOPED_TRACE("temperature " + std::to_string(temp));
    std::vector<std::vector<int32_t>> got[2];
    EngineMetrics m_cached;
    for (int cached = 0; cached < 2; ++cached) {
      EngineOptions eo;
      eo.max_num_seqs = 4;
      eo.max_step_tokens = 32;
      eo.enable_prefix_caching = cached == 1;
      auto eng = test_engine(Transformer::load(dir, mo), eo);
      EXPECT_EQ(eng->prefix_caching(), cached == 1);
      // The first request alone (it fills the cache), then the rest at once.
      Collector col;
      std::vector<uint64_t> slots(prompts.size());
      for (size_t i = 0; i < prompts.size(); ++i) {
        eng->submit(shared_prefix_request(prompts[i], temp, i), col.make(&slots[i]));
        if (i == 0) col.wait(1);
      }
      col.wait(prompts.size());
      for (size_t i = 0; i < prompts.size(); ++i) got[cached].push_back(col.tokens[reinterpret_cast<uint64_t>(&slots[i])]);
      for (int t = 0; t < 100 && eng->metrics().kv_pages_used != 0; ++t)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      const EngineMetrics m = eng->metrics();
      EXPECT_EQ(m.kv_pages_used, 0);
      if (cached) {
        m_cached = m;
        EXPECT_GT(m.kv_pages_cached, 0);
        eng->reset_prefix_cache();
        for (int t = 0; t < 100 && eng->metrics().kv_pages_cached != 0; ++t)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        EXPECT_EQ(eng->metrics().kv_pages_cached, 0);
        EXPECT_EQ(eng->metrics().kv_pages_used, 0);
      } else {
        EXPECT_EQ(m.prefix_cache_queries, 0u);
      }
    }
    EXPECT_EQ(got[1], got[0]);
    if (temp == 0) EXPECT_EQ(got[0][0], first_answer);
    uint64_t queried = 0;
    for (const auto& p : prompts) queried += p.size();
    EXPECT_EQ(m_cached.prefix_cache_queries, queried);
    // Hits: the repeat and the continuation find the base's 4 full pages (64
    // tokens; never the page of the last prompt token); the second turn, whose
    // history holds the greedy answer, also the page that answer filled (70 +
    // 20 = 90 tokens: 5 full pages) when the first request answered greedily.
    EXPECT_EQ(m_cached.prefix_cache_hits, temp == 0 ? 64u + 64u + 80u : 64u + 64u + 64u);
  }
}

// A DFlash proposer that records every draft it makes (drafting alone: no
// batch key, so each propose() is one sequence's).
class DraftRecorder : public Proposer {
 public:
  // max_pending: the most committed tokens whose context waited for a draft (ModelRunner runs more than 16 apart).
  DraftRecorder(std::unique_ptr<Proposer> inner, std::vector<std::vector<int32_t>>* log, std::mutex* mu,
                int64_t* max_pending = nullptr)
      : inner_(std::move(inner)), log_(log), mu_(mu), max_pending_(max_pending) {}
  std::string method() const override { return inner_->method(); }
  std::vector<int64_t> tap_layers() const override { return inner_->tap_layers(); }
  void observe(const std::vector<int32_t>& seq, int64_t n_seen, int64_t n_new, const float* taps) override {
    inner_->observe(seq, n_seen, n_new, taps);
  }
  void propose(const std::vector<int32_t>& seq, int64_t k, const SamplingParams& sp, Rng& rng, Draft& out) override {
    const int64_t pending = static_cast<int64_t>(seq.size()) - 1 - inner_->context_size();
    inner_->propose(seq, k, sp, rng, out);
    std::lock_guard<std::mutex> g(*mu_);
    log_->push_back(out.tokens);
    if (max_pending_) *max_pending_ = std::max(*max_pending_, pending);
  }
  void reset() override { inner_->reset(); }
  int64_t context_bytes_per_token() const override { return inner_->context_bytes_per_token(); }
  int64_t context_size() const override { return inner_->context_size(); }
  void commit_context() override { inner_->commit_context(); }
  bool save_context(int64_t lo, int64_t n, uint8_t* dst) const override { return inner_->save_context(lo, n, dst); }
  void load_context(int64_t n, const uint8_t* src) override { inner_->load_context(n, src); }

 private:
  std::unique_ptr<Proposer> inner_;
  std::vector<std::vector<int32_t>>* log_;
  std::mutex* mu_;
  int64_t* max_pending_;
};

// Prefix caching with a DFlash / DFlash2 drafter: the drafter's context K/V
// of each cached page is kept beside it and loaded with it, so a request
// that takes cached pages (a repeat, a continuation, a second turn whose
// history holds the first answer) gets not only the same tokens but the
// same drafts, draft for draft, as with the cache off; and the pages are
// hits while the drafter does not draft (K = 0). Both fixture drafters have
// sliding layers (window 6), whose pages a ring would lose.
TEST(Engine, DFlashPrefixCachingKeepsTheDrafterContext) {
  ModelOptions mo;
  mo.n_threads = 2;
  const std::vector<std::vector<int32_t>> prompts = shared_prefix_prompts(dflash("target"), mo, false);
  for (const char* d : {"dflash", "dflash2"})
    for (const float temp : {0.0f, 0.9f}) {
      SCOPED_TRACE(std::string(d) + " temperature " + std::to_string(temp));
      // Pass 0: no cache; 1: cached; 2: cached, and the draft length is 0
      // throughout (so the drafter never drafts, and runs its context only
      // when a published page waits for it).
      std::vector<std::vector<int32_t>> got[3];
      std::vector<std::vector<std::vector<int32_t>>> drafts[3];  // [pass][request][draft]
      std::vector<int64_t> hits[3];
      for (int cached = 0; cached < 3; ++cached) {
        std::mutex mu;
        std::vector<std::vector<int32_t>> log;
        int64_t max_pending = 0;
        EngineOptions eo;
        eo.max_num_seqs = 4;
        eo.max_step_tokens = 32;
        eo.enable_prefix_caching = cached >= 1;
        eo.spec = test_spec("dflash", 3, dflash(d));
        if (cached == 2) eo.spec->k_by_batch = {{1, 8, 0}};
        eo.wrap_proposer = [&](std::unique_ptr<Proposer> p) {
          return std::make_unique<DraftRecorder>(std::move(p), &log, &mu, &max_pending);
        };
        auto eng = test_engine(Transformer::load(dflash("target"), mo), eo);
        ASSERT_EQ(eng->prefix_caching(), cached >= 1) << eng->prefix_caching_note();
        for (size_t i = 0; i < prompts.size(); ++i) {  // one at a time: the log is one request's
          Collector col;
          uint64_t slot = 0;
          int64_t cached_tokens = -1;
          auto sink = col.make(&slot);
          eng->submit(shared_prefix_request(prompts[i], temp, i), [&](const TokenEvent& e) {
            if (!e.tokens.empty()) cached_tokens = e.cached_tokens;
            sink(e);
          });
          col.wait(1);
          got[cached].push_back(col.tokens[reinterpret_cast<uint64_t>(&slot)]);
          std::lock_guard<std::mutex> g(mu);
          drafts[cached].push_back(log);
          log.clear();
          hits[cached].push_back(cached_tokens);
        }
        // The drafter's context outside drafts: a prompt's taps (or those of published pages, the cache on)
        // run apart, never more than 16 tokens' with a draft, so the drafts' time is the drafts' own.
        const EngineMetrics m = eng->metrics();
        EXPECT_GT(m.draft_context_seconds, 0.0);
        EXPECT_LE(max_pending, 16);
        if (cached == 0) EXPECT_GT(max_pending, 0);
        EXPECT_GE(m.step_seconds, m.forward_seconds + m.draft_seconds + m.draft_context_seconds);
        EXPECT_GT(m.forward_seconds, 0.0);
      }
      EXPECT_EQ(got[1], got[0]);
      if (temp == 0) EXPECT_EQ(got[2], got[0]);  // sampled: drafts change the draws, not the distribution
      ASSERT_EQ(drafts[1].size(), drafts[0].size());
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_GT(drafts[0][i].size(), 0u) << "request " << i;
        EXPECT_EQ(drafts[1][i], drafts[0][i]) << "request " << i;
        EXPECT_EQ(drafts[2][i].size(), 0u) << "request " << i << " drafted at K = 0";
      }
      // The repeat and the continuation take the base's 4 full pages; the
      // second turn, whose history holds the greedy answer, also the page
      // that answer filled (70 + 20 - 1 tokens in the KV: 5 full pages) when
      // the first request answered greedily, drafting or not.
      const int64_t turn = temp == 0 ? 80 : 64;
      EXPECT_EQ(hits[0], (std::vector<int64_t>{0, 0, 0, 0}));
      EXPECT_EQ(hits[1], (std::vector<int64_t>{0, 64, 64, turn}));
      EXPECT_EQ(hits[2], (std::vector<int64_t>{0, 64, 64, turn}));
    }
}

// Records every propose() of the proposer it wraps: the sequence length it
// drafted after, the tokens, and whether n-gram lookup made them.
struct ProposeLog {
  std::mutex mu;
  std::vector<std::tuple<size_t, std::vector<int32_t>, bool>> calls;
};
class ProposeRecorder : public DraftRecorder {
 public:
  ProposeRecorder(std::unique_ptr<Proposer> inner, ProposeLog* log) : DraftRecorder(std::move(inner), &sink_, &log->mu), log_(log) {}
  void propose(const std::vector<int32_t>& seq, int64_t k, const SamplingParams& sp, Rng& rng, Draft& out) override {
    DraftRecorder::propose(seq, k, sp, rng, out);
    std::lock_guard<std::mutex> g(log_->mu);
    log_->calls.emplace_back(seq.size(), out.tokens, out.from_lookup);
  }

 private:
  std::vector<std::vector<int32_t>> sink_;
  ProposeLog* log_;
};

// n-gram lookup in front of a DFlash / DFlash2 drafter (SpecConfig::lookup_first):
// greedy answers stay plain decoding's; lookup drafts where the sequence
// repeats and the drafter elsewhere; and every draft the drafter makes equals
// the draft the drafter alone makes after the same tokens, although its
// context taps waited through the steps lookup drafted (a drafter that lost or
// misplaced them drafts differently). Lookup drafts are the lookup's own.
TEST(Engine, LookupFirstDraftsTheDrafterWhereTheLookupFindsNothing) {
  ModelOptions mo;
  mo.n_threads = 2;
  auto ref = Transformer::load(dflash("target"), mo);
  const int64_t V = ref->config().vocab_size;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> expect;
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> p = prompt_of(i, 12 + 5 * i, V);
    if (i > 0) p.insert(p.end(), p.begin(), p.begin() + 8);  // a repeat for the lookup to find
    prompts.push_back(p);
    GenerateOptions go;
    go.max_new_tokens = 40;
    go.stop_at_eos = false;
    expect.push_back(generate(*ref, p, go).tokens);
  }
  for (const char* d : {"dflash", "dflash2"}) {
    SCOPED_TRACE(d);
    ProposeLog logs[2];  // [lookup first]
    for (int lookup = 0; lookup < 2; ++lookup) {
      EngineOptions eo;
      eo.max_num_seqs = 4;
      eo.spec = test_spec("dflash", 3, dflash(d));
      eo.spec->lookup_first = lookup == 1;
      eo.spec->prompt_lookup_min = 2, eo.spec->prompt_lookup_max = 4;
      ProposeLog* log = &logs[lookup];
      eo.wrap_proposer = [log](std::unique_ptr<Proposer> p) { return std::make_unique<ProposeRecorder>(std::move(p), log); };
      auto eng = test_engine(Transformer::load(dflash("target"), mo), eo);
      for (size_t i = 0; i < prompts.size(); ++i) {  // one at a time: the log is one request's
        Collector col;
        uint64_t slot = 0;
        RequestParams rp;
        rp.prompt = prompts[i];
        rp.max_tokens = 40;
        rp.ignore_eos = true;
        eng->submit(rp, col.make(&slot));
        col.wait(1);
        EXPECT_EQ(col.tokens[reinterpret_cast<uint64_t>(&slot)], expect[i]) << "request " << i;
        std::lock_guard<std::mutex> g(log->mu);
        log->calls.emplace_back(0, std::vector<int32_t>{}, false);  // request boundary
      }
      const EngineMetrics m = eng->metrics();
      if (lookup == 1) {
        EXPECT_GT(m.spec.num_lookup_drafts, 0);
        EXPECT_LT(m.spec.num_lookup_drafts, m.spec.num_drafts) << "the drafter never drafted";
        EXPECT_GT(m.spec.num_lookup_accepted_tokens, 0);
      } else {
        EXPECT_EQ(m.spec.num_lookup_drafts, 0);
      }
    }
    // Per request: the drafter's draft after each sequence length, alone and behind the lookup.
    auto by_len = [](const ProposeLog& log, bool want_lookup) {
      std::vector<std::map<size_t, std::vector<int32_t>>> out(1);
      for (const auto& [len, tokens, from_lookup] : log.calls) {
        if (len == 0) out.emplace_back();
        else if (from_lookup == want_lookup && !tokens.empty()) out.back()[len] = tokens;
      }
      out.pop_back();
      return out;
    };
    const auto alone = by_len(logs[0], false), behind = by_len(logs[1], false), looked = by_len(logs[1], true);
    ASSERT_EQ(alone.size(), prompts.size());
    ASSERT_EQ(behind.size(), prompts.size());
    int64_t compared = 0, lookup_drafts = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      for (const auto& [len, tokens] : behind[i]) {
        auto it = alone[i].find(len);
        if (it == alone[i].end() || it->second.size() != tokens.size()) continue;  // not the same block
        EXPECT_EQ(tokens, it->second) << "request " << i << ", after " << len << " tokens";
        ++compared;
      }
      std::vector<int32_t> seq = prompts[i];
      seq.insert(seq.end(), expect[i].begin(), expect[i].end());
      NgramProposer ngram(2, 4);
      for (const auto& [len, tokens] : looked[i]) {
        Draft want;
        SamplingParams sp;
        Rng rng(0);
        ngram.propose(std::vector<int32_t>(seq.begin(), seq.begin() + static_cast<int64_t>(len)), 3, sp, rng, want);
        ASSERT_LE(tokens.size(), want.tokens.size());  // fewer near max_tokens
        EXPECT_EQ(tokens, std::vector<int32_t>(want.tokens.begin(), want.tokens.begin() + tokens.size()))
            << "request " << i << ", after " << len << " tokens";
        ++lookup_drafts;
      }
    }
    std::printf("[lookup first] %s: %lld drafter drafts compared, %lld lookup drafts\n", d,
                static_cast<long long>(compared), static_cast<long long>(lookup_drafts));
    EXPECT_GT(compared, 4) << "too few drafter drafts after the same tokens to compare";
    EXPECT_GT(lookup_drafts, 0);
  }
}

TEST(Engine, RejectsBadRequests) {
  ModelOptions mo;
  EngineOptions eo;
  eo.max_model_len = 64;
  Engine eng(Transformer::load(golden("qwen3-tiny-f32"), mo), eo);
  RequestParams rp;
  EXPECT_THROW(eng.submit(rp, {}), Error);  // empty prompt
  rp.prompt = {1, 2, 3};
  rp.max_tokens = 0;
  EXPECT_THROW(eng.submit(rp, {}), Error);
  rp.max_tokens = 62;  // 3 + 62 > 64
  EXPECT_THROW(eng.submit(rp, {}), Error);
  rp.max_tokens = 4;
  rp.prompt = {100000};
  EXPECT_THROW(eng.submit(rp, {}), Error);
  rp.prompt = {1};
  rp.sampling.top_p = 0;
  EXPECT_THROW(eng.submit(rp, {}), Error);
}

}  // namespace
}  // namespace blockspec
