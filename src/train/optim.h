// Optimizer pieces of the drafter trainer (training.md §4): AdamW with
// PyTorch's update rule (decoupled weight decay, bias-corrected moments),
// global-norm gradient clipping, and the learning-rate schedule (linear
// warm-up, then cosine or linear decay to a floor).
#pragma once
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"

namespace blockspec {

struct AdamWOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
};

// One parameter tensor's AdamW state: first and second moments.
class AdamW {
 public:
  explicit AdamW(int64_t n) : m_(n, 0.0), v_(n, 0.0) {}
  // torch.optim.AdamW, step t >= 1 (the count of updates including this one):
  //   p *= 1 - lr * wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
  //   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
  // p, g: [n]; lr is the scheduled rate of this step (o.lr is ignored).
  void step(float* p, const float* g, int64_t t, double lr, const AdamWOptions& o);
  // The same update split over the pool's threads (each element's arithmetic is unchanged).
  void step(float* p, const float* g, int64_t t, double lr, const AdamWOptions& o, ThreadPool& pool);
  const std::vector<double>& m() const { return m_; }
  const std::vector<double>& v() const { return v_; }
  // For checkpoints: the moments, restored as saved.
  std::vector<double>& m() { return m_; }
  std::vector<double>& v() { return v_; }

 private:
  void update(float* p, const float* g, int64_t i0, int64_t i1, int64_t t, double lr, const AdamWOptions& o);
  std::vector<double> m_, v_;
};

// Scales every gradient by min(1, max_norm / ||g||) where ||g|| is the L2
// norm over all of them together (torch.nn.utils.clip_grad_norm_); returns
// the norm before clipping. max_norm <= 0: no clipping.
double clip_grad_norm(const std::vector<std::pair<float*, int64_t>>& grads, double max_norm);

// Learning rate at step t (0-based) of `total`: linear warm-up from 0 over
// `warmup` steps to `peak`, then to `peak * floor_ratio` at the last step,
// along a cosine (cosine = true) or a straight line.
double lr_at(int64_t t, int64_t total, int64_t warmup, double peak, double floor_ratio, bool cosine);

}  // namespace blockspec
