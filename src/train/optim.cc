#include "train/optim.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace blockspec {

void AdamW::update(float* p, const float* g, int64_t i0, int64_t i1, int64_t t, double lr, const AdamWOptions& o) {
  const double c1 = 1.0 - std::pow(o.beta1, static_cast<double>(t));
  const double c2 = 1.0 - std::pow(o.beta2, static_cast<double>(t));
  for (int64_t i = i0; i < i1; ++i) {
    double pi = p[i] * (1.0 - lr * o.weight_decay);
    m_[i] = o.beta1 * m_[i] + (1.0 - o.beta1) * g[i];
    v_[i] = o.beta2 * v_[i] + (1.0 - o.beta2) * static_cast<double>(g[i]) * g[i];
    pi -= lr * (m_[i] / c1) / (std::sqrt(v_[i] / c2) + o.eps);
    p[i] = static_cast<float>(pi);
  }
}

void AdamW::step(float* p, const float* g, int64_t t, double lr, const AdamWOptions& o) {
  if (t < 1) fail("AdamW: step count must be >= 1, found ", t);
  update(p, g, 0, static_cast<int64_t>(m_.size()), t, lr, o);
}

void AdamW::step(float* p, const float* g, int64_t t, double lr, const AdamWOptions& o, ThreadPool& pool) {
  if (t < 1) fail("AdamW: step count must be >= 1, found ", t);
  pool.parallel_for(static_cast<int64_t>(m_.size()), [&](int64_t i0, int64_t i1) { update(p, g, i0, i1, t, lr, o); });
}

double clip_grad_norm(const std::vector<std::pair<float*, int64_t>>& grads, double max_norm) {
  double ss = 0;
  for (const auto& [g, n] : grads)
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(g[i]) * g[i];
  const double norm = std::sqrt(ss);
  if (max_norm > 0 && norm > max_norm) {
    const double s = max_norm / (norm + 1e-6);  // torch adds 1e-6 to the norm
    for (const auto& [g, n] : grads)
      for (int64_t i = 0; i < n; ++i) g[i] = static_cast<float>(g[i] * s);
  }
  return norm;
}

double lr_at(int64_t t, int64_t total, int64_t warmup, double peak, double floor_ratio, bool cosine) {
  if (total < 1 || warmup < 0 || t < 0) fail("lr schedule: need total >= 1, warmup >= 0, t >= 0");
  if (t < warmup) return peak * static_cast<double>(t + 1) / static_cast<double>(warmup);
  const int64_t span = std::max<int64_t>(1, total - 1 - warmup);
  const double f = std::min(1.0, static_cast<double>(t - warmup) / static_cast<double>(span));  // 0 .. 1
  const double shape = cosine ? 0.5 * (1.0 + std::cos(M_PI * f)) : 1.0 - f;  // 1 .. 0
  return peak * (floor_ratio + (1.0 - floor_ratio) * shape);
}

}  // namespace blockspec
