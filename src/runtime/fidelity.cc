#include "runtime/fidelity.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "runtime/sampler.h"

namespace blockspec {

void log_softmax(const float* x, int64_t n, std::vector<double>& out) {
  BS_ASSERT(n > 0);
  out.resize(static_cast<size_t>(n));
  double m = x[0];
  for (int64_t i = 1; i < n; ++i) m = std::max(m, static_cast<double>(x[i]));
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i]) - m);
  const double lse = m + std::log(s);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<double>(x[i]) - lse;
}

double kl_divergence(const std::vector<double>& log_p, const std::vector<double>& log_q) {
  BS_ASSERT(log_p.size() == log_q.size());
  double kl = 0;
  for (size_t i = 0; i < log_p.size(); ++i) {
    // p == 0 contributes 0 (the limit of p log p), whatever q is.
    const double p = std::exp(log_p[i]);
    if (p > 0) kl += p * (log_p[i] - log_q[i]);
  }
  return kl;
}

double percentile_nearest_rank(std::vector<double> values, double pct) {
  if (values.empty()) return 0;
  BS_ASSERT(pct >= 0 && pct <= 100, "pct = ", pct);
  std::sort(values.begin(), values.end());
  const double n = static_cast<double>(values.size());
  int64_t rank = static_cast<int64_t>(std::ceil(pct / 100.0 * n));
  rank = std::clamp<int64_t>(rank, 1, static_cast<int64_t>(values.size()));
  return values[static_cast<size_t>(rank - 1)];
}

namespace {
bool all_finite(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}
}  // namespace

void FidelityStats::add(const float* logits_a, const float* logits_b, int64_t vocab, int32_t target) {
  if (vocab <= 0) fail("fidelity: vocab must be > 0, found ", vocab);
  if (target < 0 || target >= vocab)
    fail("fidelity: target token ", target, " is outside the vocabulary [0, ", vocab, ")");
  if (!all_finite(logits_a, vocab))
    fail("fidelity: model logits at position ", n_tokens(), " are not finite (NaN or inf)");
  if (!all_finite(logits_b, vocab))
    fail("fidelity: reference logits at position ", n_tokens(), " are not finite (NaN or inf)");
  log_softmax(logits_a, vocab, log_pa_);
  log_softmax(logits_b, vocab, log_pb_);
  sum_nll_a_ -= log_pa_[target];
  sum_nll_b_ -= log_pb_[target];
  kl_.push_back(kl_divergence(log_pb_, log_pa_));
  n_agree_ += argmax(logits_a, vocab) == argmax(logits_b, vocab);
}

double FidelityStats::nll_mean() const { return kl_.empty() ? 0 : sum_nll_a_ / static_cast<double>(kl_.size()); }
double FidelityStats::nll_mean_reference() const {
  return kl_.empty() ? 0 : sum_nll_b_ / static_cast<double>(kl_.size());
}
double FidelityStats::ppl() const { return std::exp(nll_mean()); }
double FidelityStats::ppl_reference() const { return std::exp(nll_mean_reference()); }

double FidelityStats::kld_mean() const {
  double s = 0;
  for (double v : kl_) s += v;
  return kl_.empty() ? 0 : s / static_cast<double>(kl_.size());
}

double FidelityStats::kld_p99() const { return percentile_nearest_rank(kl_, 99.0); }

double FidelityStats::kld_max() const { return kl_.empty() ? 0 : *std::max_element(kl_.begin(), kl_.end()); }

double FidelityStats::top1_agreement() const {
  return kl_.empty() ? 0 : static_cast<double>(n_agree_) / static_cast<double>(kl_.size());
}

}  // namespace blockspec
