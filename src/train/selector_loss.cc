#include "train/selector_loss.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace blockspec {

namespace {

// The top-K ids of z [V], by value then lower id (DraftModel::select's order).
void top_k(const float* z, int64_t V, int64_t K, int32_t* out) {
  auto better = [z](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); };
  int64_t n = 0;
  for (int32_t v = 0; v < V; ++v) {
    if (n == K && !better(v, out[K - 1])) continue;
    int64_t i = n < K ? n++ : K - 1;
    for (; i > 0 && better(v, out[i - 1]); --i) out[i] = out[i - 1];
    out[i] = v;
  }
}

}  // namespace

SelectorResult selector_loss(const float* logits, const float* g, const int32_t* prev, const int32_t* labels,
                             const float* weight, double denom, double alpha, const float* pred, const float* succ,
                             const SelectorShape& s, float* dg, float* dpred, float* dsucc, ThreadPool& pool) {
  const int64_t n = s.n, V = s.V, r = s.r, K = s.K;
  if (K < 1 || K > V) fail("selector_loss: top-k ", K, " for a vocabulary of ", V);
  SelectorResult res;
  res.cand.assign(n * K, 0), res.dscore.assign(n * K, 0.f), res.correct.assign(n, 0);
  std::vector<double> row_loss(n, 0.0);
  std::vector<float> score(n * K);
  pool.parallel_for(n, [&](int64_t i0, int64_t i1) {
    std::vector<double> p(K);
    for (int64_t i = i0; i < i1; ++i) {
      int32_t* c = res.cand.data() + i * K;
      top_k(logits + i * V, V, K, c);
      const int32_t y = labels[i];
      int64_t lab = std::find(c, c + K, y) - c;
      const float* pr = pred + static_cast<int64_t>(prev[i]) * r;
      const float* gi = g + i * r;
      float* si = score.data() + i * K;
      auto fill_scores = [&] {
        for (int64_t k = 0; k < K; ++k) {
          const float* su = succ + static_cast<int64_t>(c[k]) * r;
          double acc = 0;
          for (int64_t e = 0; e < r; ++e) acc += static_cast<double>(pr[e]) * gi[e] * su[e];
          si[k] = static_cast<float>(logits[i * V + c[k]] + acc);
        }
      };
      fill_scores();
      if (lab < K) {
        int64_t best = 0;
        for (int64_t k = 1; k < K; ++k)
          if (si[k] > si[best]) best = k;
        res.correct[i] = best == lab;
      }
      if (weight[i] == 0) continue;
      if (lab == K) {  // not in the top-K: it replaces the weakest candidate
        c[K - 1] = y, lab = K - 1;
        fill_scores();
      }
      double mx = -INFINITY, sum = 0;
      for (int64_t k = 0; k < K; ++k) mx = std::max(mx, static_cast<double>(si[k]));
      for (int64_t k = 0; k < K; ++k) sum += (p[k] = std::exp(si[k] - mx));
      const double coef = alpha * weight[i] / denom;
      row_loss[i] = coef * (mx + std::log(sum) - si[lab]);
      for (int64_t k = 0; k < K; ++k) res.dscore[i * K + k] = static_cast<float>(coef * (p[k] / sum - (k == lab)));
    }
  });
  for (int64_t i = 0; i < n; ++i) res.loss += row_loss[i];
  if (dg == nullptr) return res;
  // g, pred, succ gradients (serial: rows share codebook rows).
  for (int64_t i = 0; i < n; ++i) {
    float* dgi = dg + i * r;
    std::fill(dgi, dgi + r, 0.f);
    if (weight[i] == 0) continue;
    const int64_t pv = prev[i];
    const float* pr = pred + pv * r;
    const float* gi = g + i * r;
    for (int64_t k = 0; k < K; ++k) {
      const double ds = res.dscore[i * K + k];
      const int64_t ck = res.cand[i * K + k];
      const float* su = succ + ck * r;
      float* dsu = dsucc + ck * r;
      float* dpr = dpred + pv * r;
      for (int64_t e = 0; e < r; ++e) {
        dgi[e] += static_cast<float>(ds * pr[e] * su[e]);
        dpr[e] += static_cast<float>(ds * gi[e] * su[e]);
        dsu[e] += static_cast<float>(ds * pr[e] * gi[e]);
      }
    }
  }
  return res;
}

}  // namespace blockspec
