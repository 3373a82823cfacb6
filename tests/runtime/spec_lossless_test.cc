// Losslessness of verify_sampled, statistically: full speculative decoding of
// L tokens against a synthetic context-dependent target and drafter must emit
// sequences distributed exactly as plain sampling from the target (enumerated
// exactly). A chi-square test compares the two; the same harness must REJECT
// deliberately broken rejection steps, so the test has the power to see a bug.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <numeric>
#include <string>

#include "runtime/spec_verify.h"
#include "sampling_harness.h"

namespace blockspec {
namespace {

using VerifyFn = std::function<VerifyOutcome(const Draft&, const float*, int64_t, const SamplingParams&, Rng&)>;

uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Deterministic logits in [-3, 3) from a hash of (salt, context).
//   out: [V]
void hash_logits(const std::vector<int32_t>& ctx, uint64_t salt, int64_t V, float* out) {
  uint64_t h = mix(salt * 0x9e3779b97f4a7c15ull + 1);
  for (int32_t t : ctx) h = mix(h ^ (static_cast<uint64_t>(t) + 0x632be59bd9b4e019ull));
  for (int64_t v = 0; v < V; ++v) {
    const double u = (mix(h + 0x9e37u * (v + 1)) >> 11) * 0x1.0p-53;  // [0, 1)
    out[v] = static_cast<float>(6.0 * u - 3.0);
  }
}

void target_logits(const std::vector<int32_t>& ctx, int64_t V, float* out) { hash_logits(ctx, 1, V, out); }

// The drafter: correlated with the target (so some drafts pass) but its own.
void drafter_logits(const std::vector<int32_t>& ctx, int64_t V, float* out) {
  std::vector<float> t(V), n(V);  // [V] each
  target_logits(ctx, V, t.data());
  hash_logits(ctx, 2, V, n.data());
  for (int64_t v = 0; v < V; ++v) out[v] = 0.8f * t[v] + 0.5f * n[v];
}

enum class Kind { kOneHot, kDense, kCandScrambled, kCandAscending, kCandDuplicate };
const char* kind_name(Kind k) {
  const char* names[] = {"one-hot", "dense", "cand-scrambled", "cand-ascending", "cand-duplicate"};
  return names[static_cast<int>(k)];
}

struct Config {
  Kind kind;
  int64_t K, V, L;
  SamplingParams sp;
};

SamplingParams params(float t, int top_k, float top_p) {
  SamplingParams sp;
  sp.temperature = t, sp.top_k = top_k, sp.top_p = top_p;
  return sp;
}
const SamplingParams kSpA = params(0.7f, 0, 0.9f);  // V 8, L 3
const SamplingParams kSpB = params(1.0f, 5, 1.0f);  // V 12, L 4
Config config(Kind kind, int64_t K, bool b) { return b ? Config{kind, K, 12, 4, kSpB} : Config{kind, K, 8, 3, kSpA}; }

// Appends the drafter's slot to d after ctx, drawing per cfg.kind.
void draft_one(const Config& cfg, const std::vector<int32_t>& ctx, Rng& rng, Draft& d) {
  const int64_t V = cfg.V;
  std::vector<float> z(V), q;  // [V]
  drafter_logits(ctx, V, z.data());
  if (cfg.kind == Kind::kOneHot) {
    d.tokens.push_back(argmax(z.data(), V));
    return;
  }
  if (cfg.kind == Kind::kDense) {
    sampling_probs(z.data(), V, cfg.sp, q);
    d.tokens.push_back(sample_from_probs(q.data(), V, rng));
    d.q.insert(d.q.end(), q.begin(), q.end());
    d.q_kind = Draft::Q::kDense;
    return;
  }
  // The selector's top-3 candidates, q = plain temperature softmax of their scores.
  std::vector<int32_t> top(V);  // [V]
  std::iota(top.begin(), top.end(), 0);
  std::stable_sort(top.begin(), top.end(), [&](int32_t a, int32_t b) { return z[a] > z[b]; });
  std::vector<int32_t> cand = {top[0], top[1], top[2]};  // [C]
  std::vector<float> s = {z[top[0]], z[top[1]], z[top[2]]};
  if (cfg.kind == Kind::kCandScrambled) {  // one of the 5 non-identity orders, by hash
    const int perms[5][3] = {{0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    const int* pm = perms[mix(ctx.size() * 31 + d.tokens.size() + static_cast<uint64_t>(ctx.back()) * 7) % 5];
    cand = {top[pm[0]], top[pm[1]], top[pm[2]]};
    s = {z[cand[0]], z[cand[1]], z[cand[2]]};
  } else if (cfg.kind == Kind::kCandAscending) {
    std::reverse(cand.begin(), cand.end());
    std::reverse(s.begin(), s.end());
  } else {  // a duplicate id: the top token twice, q(x) sums both entries
    cand = {top[0], top[1], top[0]};
    s = {z[top[0]], z[top[1]], z[top[0]] - 0.7f};
  }
  double mx = *std::max_element(s.begin(), s.end()), sum = 0;
  std::vector<float> qc(3);  // [C]
  for (int c = 0; c < 3; ++c) sum += qc[c] = static_cast<float>(std::exp((s[c] - mx) / cfg.sp.temperature));
  for (float& v : qc) v = static_cast<float>(v / sum);
  const int32_t i = sample_from_probs(qc.data(), 3, rng);
  d.tokens.push_back(cand[i]);
  d.q.insert(d.q.end(), qc.begin(), qc.end());
  d.cand.insert(d.cand.end(), cand.begin(), cand.end());
  d.q_kind = Draft::Q::kCandidates, d.n_cand = 3;
}

const std::vector<int32_t> kPrefix = {3, 1, 4};

// Exact probability of every L-token continuation (index base V) under plain sampling.
//   out: [V^L]
void exact(const Config& cfg, std::vector<int32_t>& ctx, double prob, int64_t idx, std::vector<double>& out) {
  if (static_cast<int64_t>(ctx.size() - kPrefix.size()) == cfg.L) {
    out[idx] = prob;
    return;
  }
  std::vector<float> z(cfg.V), p;  // [V]
  target_logits(ctx, cfg.V, z.data());
  sampling_probs(z.data(), cfg.V, cfg.sp, p);
  for (int32_t v = 0; v < cfg.V; ++v) {
    if (p[v] <= 0) continue;
    ctx.push_back(v);
    exact(cfg, ctx, prob * p[v], idx * cfg.V + v, out);
    ctx.pop_back();
  }
}

struct Verdict {
  double chi2 = 0, z = 0, tv = 0;
  int64_t df = 0, impossible = 0;
  bool rejected(double z_crit) const { return impossible > 0 || z > z_crit; }
};

Verdict run_harness(const Config& cfg, const VerifyFn& verify, int64_t N, uint64_t seed, double* mean_len) {
  int64_t n_cells = 1;
  for (int64_t i = 0; i < cfg.L; ++i) n_cells *= cfg.V;
  std::vector<double> expect(n_cells, 0.0);  // [V^L]
  std::vector<int32_t> ctx = kPrefix;
  exact(cfg, ctx, 1.0, 0, expect);
  std::vector<int64_t> count(n_cells, 0);  // [V^L]
  Rng rng(seed);
  Draft d;
  std::vector<float> logits;  // [K+1, V]
  int64_t n_steps = 0, n_tokens = 0;
  for (int64_t s = 0; s < N; ++s) {
    ctx = kPrefix;
    while (static_cast<int64_t>(ctx.size() - kPrefix.size()) < cfg.L) {
      d.clear();
      std::vector<int32_t> dctx = ctx;
      for (int64_t j = 0; j < cfg.K; ++j) {
        draft_one(cfg, dctx, rng, d);
        dctx.push_back(d.tokens.back());
      }
      logits.resize((cfg.K + 1) * cfg.V);
      for (int64_t j = 0; j <= cfg.K; ++j) {
        std::vector<int32_t> row(dctx.begin(), dctx.begin() + ctx.size() + j);
        target_logits(row, cfg.V, logits.data() + j * cfg.V);
      }
      VerifyOutcome o = verify(d, logits.data(), cfg.V, cfg.sp, rng);
      ctx.insert(ctx.end(), d.tokens.begin(), d.tokens.begin() + o.accepted);
      ctx.push_back(o.next);
      ++n_steps, n_tokens += o.accepted + 1;
    }
    int64_t idx = 0;
    for (int64_t t = 0; t < cfg.L; ++t) idx = idx * cfg.V + ctx[kPrefix.size() + t];
    ++count[idx];
  }
  *mean_len = static_cast<double>(n_tokens) / n_steps;
  // Chi-square over the possible cells (sampling_harness.h pools the small ones).
  Verdict v;
  std::vector<std::pair<double, int64_t>> cells;  // (expected, observed)
  for (int64_t c = 0; c < n_cells; ++c) {
    v.tv += 0.5 * std::fabs(expect[c] - static_cast<double>(count[c]) / N);
    if (expect[c] == 0) v.impossible += count[c];
    else cells.push_back({expect[c] * N, count[c]});
  }
  const testing::ChiSquare cs = testing::pooled_chi_square(cells);
  v.chi2 = cs.chi2, v.df = cs.df, v.z = cs.z;
  return v;
}

// The real verify_sampled with one deliberate bug.
enum class Bug { kResidualFromP, kAcceptIgnoresQ, kAcceptSwapped };
const char* bug_name(Bug b) {
  const char* names[] = {"residual-from-p", "accept-ignores-q", "accept-swapped"};
  return names[static_cast<int>(b)];
}

VerifyFn broken(Bug bug) {
  return [bug](const Draft& d, const float* logits, int64_t V, const SamplingParams& sp, Rng& rng) {
    VerifyOutcome out;
    std::vector<float> p, q(V), r(V);  // [V] each
    for (int64_t i = 0; i < d.size(); ++i) {
      sampling_probs(logits + i * V, V, sp, p);
      std::fill(q.begin(), q.end(), 0.0f);  // the full proposal row of slot i
      if (d.q_kind == Draft::Q::kOneHot) q[d.tokens[i]] = 1;
      if (d.q_kind == Draft::Q::kDense) std::copy(d.q.begin() + i * V, d.q.begin() + (i + 1) * V, q.begin());
      if (d.q_kind == Draft::Q::kCandidates)
        for (int64_t c = 0; c < d.n_cand; ++c) q[d.cand[i * d.n_cand + c]] += d.q[i * d.n_cand + c];
      const int32_t x = d.tokens[i];
      const double u = rng.uniform();
      const bool accept = bug == Bug::kAcceptIgnoresQ ? u < p[x] : bug == Bug::kAcceptSwapped ? u * p[x] < q[x]
                                                                                              : u * q[x] < p[x];
      if (accept) {
        ++out.accepted;
        continue;
      }
      double mass = 0;
      for (int64_t j = 0; j < V; ++j) mass += r[j] = bug == Bug::kResidualFromP ? p[j] : std::max(p[j] - q[j], 0.0f);
      if (mass <= 0) r = p;
      for (float& w : r) w = static_cast<float>(w / (mass > 0 ? mass : 1.0));
      out.next = sample_from_probs(r.data(), V, rng);
      return out;
    }
    sampling_probs(logits + d.size() * V, V, sp, p);
    out.next = sample_from_probs(p.data(), V, rng);
    return out;
  };
}

constexpr int64_t kN = 40000;
constexpr double kZCrit = 4.0;  // one-sided p ~ 3e-5 per config

std::string describe(const Config& c) {
  return std::string(kind_name(c.kind)) + " K=" + std::to_string(c.K) + " V=" + std::to_string(c.V) +
         " L=" + std::to_string(c.L) + (c.sp.top_k > 0 ? " T=1.0 top_k=5" : " T=0.7 top_p=0.9");
}

void report(const char* who, const Config& c, const Verdict& v, double mean_len) {
  printf("%-18s %-44s chi2=%9.1f df=%3lld z=%7.2f tv=%.4f impossible=%lld tau=%.2f\n", who, describe(c).c_str(),
         v.chi2, static_cast<long long>(v.df), v.z, v.tv, static_cast<long long>(v.impossible), mean_len);
}

TEST(SpecLossless, VerifySampledMatchesPlainSampling) {
  auto t0 = std::chrono::steady_clock::now();
  uint64_t seed = 100;
  for (Kind kind : {Kind::kOneHot, Kind::kDense, Kind::kCandScrambled, Kind::kCandAscending, Kind::kCandDuplicate})
    for (int64_t K : {1, 3})
      for (bool b : {false, true}) {
        const Config c = config(kind, K, b);
        double tau = 0;
        const Verdict v = run_harness(c, verify_sampled, kN, ++seed, &tau);
        report("verify_sampled", c, v, tau);
        EXPECT_FALSE(v.rejected(kZCrit)) << describe(c) << " z " << v.z;
        EXPECT_GT(tau, 1.05) << "drafts should sometimes be accepted";
      }
  printf("lossless: %.2f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

TEST(SpecLossless, BrokenRejectionStepsAreDetected) {
  auto t0 = std::chrono::steady_clock::now();
  // Every bug on configs where it changes the output distribution (ignoring q
  // is harmless for one-hot q = 1, so that bug is run on dense / candidates).
  const std::vector<std::pair<Bug, Config>> cases = {
      {Bug::kResidualFromP, config(Kind::kOneHot, 1, false)},
      {Bug::kResidualFromP, config(Kind::kDense, 3, true)},
      {Bug::kResidualFromP, config(Kind::kCandScrambled, 3, false)},
      {Bug::kAcceptIgnoresQ, config(Kind::kDense, 3, true)},
      {Bug::kAcceptIgnoresQ, config(Kind::kDense, 1, false)},
      {Bug::kAcceptIgnoresQ, config(Kind::kDense, 3, false)},
      {Bug::kAcceptIgnoresQ, config(Kind::kCandScrambled, 3, false)},
      {Bug::kAcceptSwapped, config(Kind::kOneHot, 1, false)},
      {Bug::kAcceptSwapped, config(Kind::kDense, 3, true)},
      {Bug::kAcceptSwapped, config(Kind::kCandScrambled, 3, false)},
  };
  uint64_t seed = 500;
  for (const auto& [bug, c] : cases) {
    double tau = 0;
    const Verdict v = run_harness(c, broken(bug), kN, ++seed, &tau);
    report(bug_name(bug), c, v, tau);
    EXPECT_TRUE(v.rejected(kZCrit)) << bug_name(bug) << " on " << describe(c) << " passed with z " << v.z;
  }
  printf("broken: %.2f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace
}  // namespace blockspec
