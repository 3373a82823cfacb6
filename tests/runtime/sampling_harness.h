// Test utility: the exact-distribution chi-square harness of the sampled
// lossless tests (spec_sampling_lossless_test.cc for the one-sequence loop,
// engine_sampling_lossless_test.cc for the serving engine's step). exact()
// enumerates p(t1), p(t2 | t1), ... over the support from the target's own
// sampling_probs; chi_square() compares N samples with it (cells with
// expected count < 5 merged) and rejects at a Wilson-Hilferty z > kZCrit.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../spec_setup.h"
#include "model/transformer.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"
#include "runtime/spec_types.h"
#include "runtime/speculative.h"
#include "random_drafter.h"

namespace blockspec::testing {

constexpr int64_t kN = 3000;
constexpr double kZCrit = 4.0;  // Wilson-Hilferty z of chi2/df; one-sided p ~ 3e-5

using Dist = std::map<std::vector<int32_t>, double>;

// Exact joint distribution of the next L tokens after `prompt` under plain sampling with sp.
inline void exact(Transformer& m, std::vector<int32_t>& ctx, size_t n_prompt, int64_t L, const SamplingParams& sp, double prob,
           Dist& out) {
  if (static_cast<int64_t>(ctx.size() - n_prompt) == L) {
    out[std::vector<int32_t>(ctx.begin() + n_prompt, ctx.end())] = prob;
    return;
  }
  KvCache cache = m.new_cache(static_cast<int64_t>(ctx.size()));
  std::vector<float> logits, p;
  m.prefill(ctx.data(), static_cast<int64_t>(ctx.size()), cache, logits, false);
  const int64_t V = m.config().vocab_size;
  sampling_probs(logits.data(), V, sp, p);
  for (int32_t v = 0; v < V; ++v) {
    if (p[v] <= 0) continue;
    ctx.push_back(v);
    exact(m, ctx, n_prompt, L, sp, prob * p[v], out);
    ctx.pop_back();
  }
}

struct Verdict {
  double chi2 = 0, z = 0, tv = 0;
  int64_t df = 0, impossible = 0;
  bool rejected() const { return impossible > 0 || z > kZCrit; }
};

// Pearson's chi-square over (expected, observed) cells: cells with expected
// count < 5 are pooled into one bucket (folded into the smallest kept cell if
// the pool is still < 5); z is Wilson-Hilferty's normal score of chi2 / df,
// comparable across df.
struct ChiSquare {
  double chi2 = 0, z = 0;
  int64_t df = 0;
};
inline ChiSquare pooled_chi_square(const std::vector<std::pair<double, int64_t>>& cells) {
  std::vector<std::pair<double, int64_t>> buckets;
  double small_e = 0;
  int64_t small_o = 0;
  for (const auto& [e, o] : cells) {
    if (e < 5) small_e += e, small_o += o;
    else buckets.push_back({e, o});
  }
  if (small_e >= 5 || buckets.empty()) {
    buckets.push_back({small_e, small_o});
  } else if (small_e > 0) {
    auto it = std::min_element(buckets.begin(), buckets.end());
    it->first += small_e, it->second += small_o;
  }
  ChiSquare r;
  for (auto [e, o] : buckets) r.chi2 += (o - e) * (o - e) / e;
  r.df = static_cast<int64_t>(buckets.size()) - 1;
  const double k = static_cast<double>(std::max<int64_t>(r.df, 1)), a = 2.0 / (9.0 * k);
  r.z = (std::cbrt(r.chi2 / k) - (1 - a)) / std::sqrt(a);
  return r;
}

// Chi-square of counts against expect (N samples); sequences expect gives
// probability 0 count as impossible.
inline Verdict chi_square(const Dist& expect, const std::map<std::vector<int32_t>, int64_t>& count, int64_t N) {
  Verdict v;
  std::vector<std::pair<double, int64_t>> cells;  // (expected, observed)
  for (const auto& [seq, c] : count)
    if (!expect.count(seq)) v.impossible += c, v.tv += 0.5 * static_cast<double>(c) / N;
  for (const auto& [seq, p] : expect) {
    auto it = count.find(seq);
    const int64_t o = it == count.end() ? 0 : it->second;
    v.tv += 0.5 * std::fabs(p - static_cast<double>(o) / N);
    cells.push_back({p * N, o});
  }
  const ChiSquare c = pooled_chi_square(cells);
  v.chi2 = c.chi2, v.df = c.df, v.z = c.z;
  return v;
}

inline SamplingParams params(float t, int top_k, float top_p) {
  SamplingParams sp;
  sp.temperature = t, sp.top_k = top_k, sp.top_p = top_p;
  return sp;
}

inline std::string sp_name(const SamplingParams& sp) {
  char b[64];
  std::snprintf(b, sizeof b, "T=%.1f top_k=%d top_p=%.1f", sp.temperature, sp.top_k, sp.top_p);
  return b;
}

// The prompt: a few tokens and the target's own greedy continuation of them
// (it settles into a loop, so n-gram lookup finds matches that the target
// then samples with high probability).
inline std::vector<int32_t> make_prompt(Transformer& m) {
  std::vector<int32_t> p = {5, 6, 7};
  GenerateOptions go;
  go.max_new_tokens = 30, go.stop_at_eos = false;
  const GenerateResult r = generate(m, p, go);
  p.insert(p.end(), r.tokens.begin(), r.tokens.end());
  return p;
}

// Counts of the first L tokens of N samples; sample(i) returns one generation with seed i.
template <class F>
std::map<std::vector<int32_t>, int64_t> histogram(int64_t N, int64_t L, F&& sample) {
  std::map<std::vector<int32_t>, int64_t> count;
  for (int64_t i = 0; i < N; ++i) {
    const std::vector<int32_t> t = sample(i);
    ++count[std::vector<int32_t>(t.begin(), t.begin() + std::min<int64_t>(L, t.size()))];
  }
  return count;
}

// One case of the sampled lossless tests: a proposer and a sampling setting,
// compared over the first L tokens.
struct Case {
  const char* method;        // dflash, dflash2 (the drafters below) or ngram
  const char* draft_sample;  // draft_sample_method
  SamplingParams sp;
  int64_t L;  // length of the compared prefix
};

// The speculative config of a case: K drafts, the drafters written by
// write_overlapping_drafters into dir, n-gram lookup of 1..3 tokens.
inline SpecConfig case_spec(const std::string& method, int64_t K, const std::string& draft_sample,
                            const std::string& dir) {
  SpecConfig c = test_spec(method, K, method == "ngram" ? "" : dir + "/" + method);
  c.greedy_draft = draft_sample == "greedy";
  return c;
}

// A proposal bug a loop could have: drafts like the dense-q proposer it
// wraps (or owns), but reports a uniform proposal distribution, so the
// acceptance rule accepts far too often and the emitted distribution is
// biased. The harness must reject it (its power check).
class Mislabeled : public Proposer {
 public:
  explicit Mislabeled(Proposer& inner) : inner_(inner) {}
  explicit Mislabeled(std::unique_ptr<Proposer> owned) : owned_(std::move(owned)), inner_(*owned_) {}
  std::string method() const override { return "mislabeled"; }
  std::vector<int64_t> tap_layers() const override { return inner_.tap_layers(); }
  void observe(const std::vector<int32_t>& seq, int64_t n_seen, int64_t n_new, const float* taps) override {
    inner_.observe(seq, n_seen, n_new, taps);
  }
  void propose(const std::vector<int32_t>& seq, int64_t k, const SamplingParams& sp, Rng& rng, Draft& out) override {
    inner_.propose(seq, k, sp, rng, out);
    if (out.q_kind != Draft::Q::kDense) fail("Mislabeled wraps a proposer with a dense q");
    std::fill(out.q.begin(), out.q.end(), 1.0f / static_cast<float>(out.q.size() / out.size()));
  }
  void reset() override { inner_.reset(); }

 private:
  std::unique_ptr<Proposer> owned_;
  Proposer& inner_;
};

// Writes random DFlash (dir/dflash) and DFlash2 (dir/dflash2) drafters for
// `target` whose drafts overlap its distribution after make_prompt(target).
// Weak random layers leave each mask slot's hidden state close to the mask
// token's embedding, so (tied embeddings) the drafters propose the mask
// token and its neighbours; the mask token is the one the target emits most
// in its greedy continuation of the test prompt, so the proposals overlap the
// target's distribution and are often accepted.
inline void write_overlapping_drafters(Transformer& target, const std::string& dir) {
  constexpr float kWeightStd = 0.02f;
  const std::vector<int32_t> prompt = make_prompt(target);
  GenerateOptions go;
  go.max_new_tokens = 16, go.stop_at_eos = false;
  const std::vector<int32_t> cont = generate(target, prompt, go).tokens;
  int32_t mask = cont[0];
  for (int32_t t : cont)
    if (std::count(cont.begin(), cont.end(), t) > std::count(cont.begin(), cont.end(), mask)) mask = t;
  RandomDrafterOptions o;
  o.n_layers = 2, o.block_size = 16, o.seed = 21, o.weight_std = kWeightStd, o.mask_token_id = mask;
  o.layer_types = {"sliding_attention", "full_attention"};
  o.sliding_window = 4;
  write_random_drafter(dir + "/dflash", target.config(), o);
  RandomDrafterOptions o2;
  o2.dflash2 = true, o2.n_layers = 2, o2.block_size = 16, o2.seed = 22, o2.weight_std = kWeightStd;
  o2.mask_token_id = mask;
  o2.layer_types = {"sliding_attention", "sliding_attention"};
  o2.sliding_window = 8, o2.is_causal = 0, o2.selector_top_k = 8;
  write_random_drafter(dir + "/dflash2", target.config(), o2);
}

}  // namespace blockspec::testing
