// A fixed pool of worker threads running parallel_for over an index range.
// The calling thread takes part, so n_threads == 1 spawns no thread at all.
// A decode step issues a few hundred parallel_for calls of tens of
// microseconds each, so workers spin briefly on an atomic before sleeping on
// a condition variable: measured on a 2-core EPYC VM, condvar wake-ups alone
// ate the whole gain of the second thread (Qwen2.5-1.5B q4 decode 20.2 tok/s
// with 1 thread, 20.4 with 2).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace blockspec {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads <= 0: all cores
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Calls fn(begin, end) on disjoint contiguous chunks covering [0, n), one
  // chunk per thread (thread t gets chunk t), and waits for all of them.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

  // Like parallel_for but chunks are multiples of `grain` (except the last).
  void parallel_for_grain(int64_t n, int64_t grain,
                          const std::function<void(int64_t, int64_t)>& fn);

  // fn(i, i + 1) for every i in [0, n), items handed out one at a time to
  // whichever thread is free (an atomic counter): for items of unequal cost,
  // e.g. causal attention rows, whose cost grows with the position.
  void parallel_for_dynamic(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

  static int hardware_threads();

 private:
  void worker(int index);
  void run_job(int64_t n, int64_t grain, bool dynamic, const std::function<void(int64_t, int64_t)>& fn);
  void run_share(int index);  // this thread's part of the current job
  int n_threads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  // Job fields are written before generation_ is bumped (release) and read
  // after a worker sees the new generation (acquire).
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0, job_grain_ = 1;
  bool job_dynamic_ = false;
  std::atomic<int64_t> next_{0};  // next item of a dynamic job
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace blockspec
