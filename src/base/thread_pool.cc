#include "base/thread_pool.h"

#include <immintrin.h>

#include <algorithm>

namespace blockspec {

namespace {
// Chunk t of n items split over k threads in units of grain.
void chunk_range(int64_t n, int64_t grain, int k, int t, int64_t* b, int64_t* e) {
  int64_t units = (n + grain - 1) / grain;
  int64_t per = units / k, rem = units % k;
  int64_t ub = t * per + std::min<int64_t>(t, rem);
  int64_t ue = ub + per + (t < rem ? 1 : 0);
  *b = std::min(n, ub * grain);
  *e = std::min(n, ue * grain);
}

// About 50-100 us of polling before sleeping: long enough to bridge the gaps
// between the kernels of one forward, short enough not to burn a core idle.
constexpr int kSpinIters = 20000;
}  // namespace

int ThreadPool::hardware_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads <= 0 ? hardware_threads() : n_threads) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
  }
  cv_start_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen && spin < kSpinIters && !stop_.load(std::memory_order_relaxed); ++spin) {
      _mm_pause();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      std::unique_lock<std::mutex> lk(mu_);
      cv_start_.wait(lk, [&] { return stop_.load() || generation_.load() != seen; });
      g = generation_.load(std::memory_order_acquire);
    }
    if (stop_.load()) return;
    seen = g;
    run_share(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lk(mu_);
      cv_done_.notify_one();
    }
  }
}

void ThreadPool::run_share(int index) {
  if (job_dynamic_) {
    for (int64_t i = next_.fetch_add(1, std::memory_order_relaxed); i < job_n_;
         i = next_.fetch_add(1, std::memory_order_relaxed))
      (*job_)(i, i + 1);
    return;
  }
  int64_t b, e;
  chunk_range(job_n_, job_grain_, n_threads_, index, &b, &e);
  if (b < e) (*job_)(b, e);
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  parallel_for_grain(n, 1, fn);
}

void ThreadPool::parallel_for_dynamic(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  run_job(n, 1, true, fn);
}

void ThreadPool::parallel_for_grain(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  run_job(n, grain, false, fn);
}

void ThreadPool::run_job(int64_t n, int64_t grain, bool dynamic, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (n_threads_ == 1 || n <= grain) {
    for (int64_t i = 0; dynamic && i < n; ++i) fn(i, i + 1);
    if (!dynamic) fn(0, n);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  job_grain_ = grain;
  job_dynamic_ = dynamic;
  next_.store(0, std::memory_order_relaxed);
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    // Under the mutex so a worker between its predicate check and its wait
    // cannot miss the bump.
    std::lock_guard<std::mutex> lk(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_start_.notify_all();
  run_share(0);
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0 && spin < kSpinIters; ++spin) _mm_pause();
  if (pending_.load(std::memory_order_acquire) != 0) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_done_.wait(lk, [&] { return pending_.load() == 0; });
  }
  job_ = nullptr;
}

}  // namespace blockspec
