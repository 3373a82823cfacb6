// Drafter data generation through the batched engine (issue 15): a request
// with on_taps receives the tapped hidden states of every token the target
// commits, in order, and they are the target's own: equal to one prefill of
// prompt + output with the same taps.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>

#include "../spec_setup.h"
#include "runtime/engine.h"

namespace blockspec {
namespace {

std::string golden(const std::string& n) { return std::string(BS_SOURCE_DIR) + "/tests/fixtures/golden/" + n; }

struct Capture {
  std::vector<int32_t> out;
  std::vector<float> taps;  // [rows, T * H]
  int64_t rows = 0;
  bool in_order = true, done = false;
};

TEST(EngineTaps, EveryCommittedTokenOnceEqualToAPrefill) {
  ModelOptions mo;
  mo.n_threads = 2;
  auto ref = Transformer::load(golden("qwen3-tiny-f32"), mo);
  const ModelConfig& mc = ref->config();
  const int64_t H = mc.hidden_size, L = mc.n_layers;
  const std::vector<int64_t> layers = {0, L - 1};  // a middle tap and the final-normed last layer
  EngineOptions eo;
  eo.max_num_seqs = 3;
  eo.max_model_len = 128;
  eo.max_step_tokens = 16;  // prompts of 21 tokens prefill in two chunks beside running decodes
  eo.capture_taps = layers;
  Engine eng(Transformer::load(golden("qwen3-tiny-f32"), mo), eo);
  std::mutex mu;
  std::condition_variable cv;
  std::map<int, Capture> cap;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p;
    for (int j = 0; j < 9 + 4 * i; ++j) p.push_back(static_cast<int32_t>((i * 131 + j * 17 + 5) % mc.vocab_size));
    prompts.push_back(p);
    RequestParams rp;
    rp.prompt = p;
    rp.max_tokens = 12 + 3 * i;
    rp.ignore_eos = true;
    rp.on_taps = [&, i](int64_t first, int64_t n, const float* t) {
      std::lock_guard<std::mutex> g(mu);
      Capture& c = cap[i];
      c.in_order &= first == c.rows;
      c.taps.insert(c.taps.end(), t, t + n * 2 * H);
      c.rows += n;
    };
    eng.submit(rp, [&, i](const TokenEvent& e) {
      std::lock_guard<std::mutex> g(mu);
      cap[i].out.insert(cap[i].out.end(), e.tokens.begin(), e.tokens.end());
      if (e.finished) cap[i].done = true, cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(120), [&] {
      for (int i = 0; i < 4; ++i)
        if (!cap[i].done) return false;
      return true;
    }));
  }
  ref->set_tap_layers(layers);
  for (int i = 0; i < 4; ++i) {
    const Capture& c = cap[i];
    std::vector<int32_t> all = prompts[i];
    all.insert(all.end(), c.out.begin(), c.out.end());
    EXPECT_TRUE(c.in_order) << i;
    // Every token but the last one (never run), the one run in the step that ended the request included.
    EXPECT_EQ(c.rows, static_cast<int64_t>(all.size()) - 1) << i;
    KvCache cache(mc.n_layers, 256, mc.n_kv_heads, mc.head_dim);
    std::vector<float> logits, taps;
    ref->prefill(all.data(), c.rows, cache, logits, false, &taps);
    ASSERT_EQ(taps.size(), c.taps.size());
    double worst = 0;
    for (size_t j = 0; j < taps.size(); ++j) worst = std::max(worst, std::fabs(double(taps[j]) - c.taps[j]));
    EXPECT_LT(worst, 1e-5) << "request " << i;
  }
}

TEST(EngineTaps, RejectsTapsWithSpecOrWithoutCapture) {
  ModelOptions mo;
  EngineOptions eo;
  eo.capture_taps = {0};
  eo.spec = test_spec("ngram", 2);
  EXPECT_THROW(Engine(Transformer::load(golden("qwen3-tiny-f32"), mo), eo), Error);
  Engine plain(Transformer::load(golden("qwen3-tiny-f32"), mo), EngineOptions{});
  RequestParams rp;
  rp.prompt = {1, 2};
  rp.on_taps = [](int64_t, int64_t, const float*) {};
  EXPECT_THROW(plain.submit(rp, {}), Error);
  eo.spec.reset();
  eo.capture_taps = {99};  // not a layer
  EXPECT_THROW(Engine(Transformer::load(golden("qwen3-tiny-f32"), mo), eo), Error);
}

}  // namespace
}  // namespace blockspec
