#include "train/blocks.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace blockspec {

std::vector<int64_t> select_anchors(const std::vector<uint8_t>& loss_mask, const std::vector<int32_t>& doc,
                                    int64_t max_anchors, Rng& rng) {
  const int64_t S = static_cast<int64_t>(loss_mask.size());
  if (static_cast<int64_t>(doc.size()) != S) fail("select_anchors: loss_mask and doc differ in length");
  std::vector<int64_t> valid;
  for (int64_t a = 0; a + 1 < S; ++a)
    if (doc[a] >= 0 && doc[a + 1] == doc[a] && loss_mask[a + 1]) valid.push_back(a);
  const int64_t n = std::min<int64_t>(max_anchors, static_cast<int64_t>(valid.size()));
  for (int64_t i = 0; i < n; ++i) {  // partial Fisher-Yates: a uniform n-subset
    const int64_t j = i + static_cast<int64_t>(rng.next() % static_cast<uint64_t>(valid.size() - i));
    std::swap(valid[i], valid[j]);
  }
  valid.resize(n);
  std::sort(valid.begin(), valid.end());
  return valid;
}

BlockTargets block_targets(const std::vector<int64_t>& anchors, const std::vector<int32_t>& pred,
                           const std::vector<uint8_t>& loss_mask, const std::vector<int32_t>& doc, int64_t B) {
  const int64_t S = static_cast<int64_t>(pred.size()), nA = static_cast<int64_t>(anchors.size());
  BlockTargets t;
  t.labels.assign(nA * B, 0);
  t.mask.assign(nA * B, 0.f);
  for (int64_t j = 0; j < nA; ++j) {
    const int64_t a = anchors[j];
    if (a < 0 || a >= S) fail("block_targets: anchor ", a, " outside the row of ", S, " tokens");
    for (int64_t k = 1; k < B; ++k) {
      const int64_t i = a + k;
      if (i >= S || !loss_mask[i] || doc[i] != doc[a]) continue;
      t.labels[j * B + k] = pred[i];
      t.mask[j * B + k] = 1.f;
    }
  }
  return t;
}

std::vector<float> exp_decay_weights(int64_t B, double gamma) {
  if (gamma <= 0) fail("loss decay gamma must be > 0, found ", gamma);
  std::vector<float> w(B, 0.f);
  for (int64_t k = 1; k < B; ++k) w[k] = static_cast<float>(std::exp(-(k - 1) / gamma));
  return w;
}

std::vector<float> dpace_weights(const std::vector<float>& slot_loss, const std::vector<float>& mask, int64_t B,
                                 double alpha) {
  const int64_t n = static_cast<int64_t>(mask.size()) / B;
  std::vector<float> w(mask.size(), 0.f);
  std::vector<double> P(B);
  for (int64_t j = 0; j < n; ++j) {
    double prod = 1;
    for (int64_t k = 1; k < B; ++k) {
      const int64_t i = j * B + k;
      const double q = mask[i] > 0 ? (1 - alpha) * std::exp(-static_cast<double>(slot_loss[i])) + alpha : 1.0;
      prod *= q;
      P[k] = prod;
    }
    double suffix = 0;  // sum over m >= k of P_m mask_m
    for (int64_t k = B - 1; k >= 1; --k) {
      suffix += P[k] * mask[j * B + k];
      w[j * B + k] = static_cast<float>(mask[j * B + k] * suffix);
    }
  }
  return w;
}

double expected_acceptance_length(const std::vector<uint8_t>& correct, const std::vector<float>& mask, int64_t B) {
  const int64_t n = static_cast<int64_t>(mask.size()) / B;
  double sum = 0;
  int64_t blocks = 0;
  for (int64_t j = 0; j < n; ++j) {
    bool any = false;
    for (int64_t k = 1; k < B; ++k) any |= mask[j * B + k] > 0;
    if (!any) continue;
    int64_t run = 0;
    for (int64_t k = 1; k < B && mask[j * B + k] > 0 && correct[j * B + k]; ++k) ++run;
    sum += 1 + run;
    ++blocks;
  }
  return blocks ? sum / blocks : 0.0;
}

std::vector<int32_t> block_key_spans(const std::vector<int64_t>& anchors, const std::vector<int32_t>& doc, int64_t B,
                                     bool causal, int64_t window) {
  const int64_t S = static_cast<int64_t>(doc.size()), nA = static_cast<int64_t>(anchors.size());
  std::vector<int32_t> spans(nA * B * 4);
  for (int64_t j = 0; j < nA; ++j) {
    const int64_t a = anchors[j];
    int64_t start = a;  // first position of the anchor's document
    while (start > 0 && doc[start - 1] == doc[a]) --start;
    for (int64_t k = 0; k < B; ++k) {
      int32_t* sp = spans.data() + (j * B + k) * 4;
      int64_t lo = start;
      if (window > 0) lo = std::max(lo, a + k - window + 1);  // inference's rule pq - pk < W (§7.1)
      sp[0] = static_cast<int32_t>(std::min(lo, a));
      sp[1] = static_cast<int32_t>(a);
      int64_t b_lo = 0, b_hi = causal ? k + 1 : B;
      if (window > 0) b_lo = std::max<int64_t>(0, k - window + 1), b_hi = std::min(b_hi, k + window);
      sp[2] = static_cast<int32_t>(S + j * B + b_lo);
      sp[3] = static_cast<int32_t>(S + j * B + b_hi);
    }
  }
  return spans;
}

}  // namespace blockspec
