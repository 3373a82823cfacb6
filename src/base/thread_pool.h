// A fixed pool of worker threads running parallel_for over an index range.
// The calling thread takes part, so n_threads == 1 spawns no thread at all.
// A decode step issues a few hundred parallel_for calls of tens of
// microseconds each, so workers spin briefly on an atomic before sleeping on
// a condition variable: measured on a 2-core EPYC VM, condvar wake-ups alone
// ate the whole gain of the second thread (Qwen2.5-1.5B q4 decode 20.2 tok/s
// with 1 thread, 20.4 with 2).
//
// Contention (issue 22): when another process takes a core, the kernel
// deschedules one of our threads for milliseconds. So a job is cut into
// kTilesPerThread tiles per thread handed out by an atomic counter (a thread
// that runs takes the tiles of one that does not), and the caller waits only
// for the workers that actually joined the job: once every tile is claimed it
// closes the job, and a worker that wakes later skips it. The last polls of
// every spin yield the core. Results never depend on the split: every caller
// computes each index range the same way whoever runs it.
//
// A worker the kernel keeps descheduling (its CPU time over a window of
// kContentionWindow well below the wall time, while jobs kept coming and it
// never slept) is benched: it sleeps instead of joining, so the threads that
// do run stop sharing their cores with it. On a 2-core VM with one core busy,
// 1 thread decodes 40-42 tok/s where 2 got 36 (BENCHMARKS.md "Decoding on a
// busy machine"). It rejoins after the bench and is measured again; each
// rejoin costs a window of stalls while the contention lasts, so a worker
// benched again at once stays out twice as long (BenchBackoff).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace blockspec {

// The CPUs this process may use: online CPUs, cut to the affinity mask and to
// the cgroup CPU quota (v2 cpu.max or v1 cfs_quota_us / cfs_period_us,
// rounded up) as a container sets them; `why` says which limit decided.
struct CpuBudget {
  int threads = 1;
  std::string why;
};
CpuBudget available_cpus();

// How long the contention watch benches one worker: kFirstNs, doubled each
// time it is benched again (up to kMaxNs), kFirstNs again once a window
// judges it healthy or when its last bench ended long ago (a new episode).
// Clock-free, so tests drive it with made-up times.
class BenchBackoff {
 public:
  static constexpr int64_t kFirstNs = 500'000'000, kMaxNs = 2'000'000'000;
  // Judged descheduled at `now` (ns): the time it is benched until.
  int64_t bench(int64_t now);
  void healthy() { len_ = kFirstNs; }
  int64_t next_ns() const { return len_; }

 private:
  int64_t len_ = kFirstNs;
  int64_t last_end_ = 0;  // when the last bench ended (or ends); 0: never benched
};

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads <= 0: all cores
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Calls fn(begin, end) on disjoint contiguous tiles covering [0, n) (up to
  // kTilesPerThread per thread, taken by whichever thread is free), and
  // waits for all of them.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

  // Like parallel_for but chunks are multiples of `grain` (except the last).
  void parallel_for_grain(int64_t n, int64_t grain,
                          const std::function<void(int64_t, int64_t)>& fn);

  // fn(i, i + 1) for every i in [0, n), items handed out one at a time to
  // whichever thread is free (an atomic counter): for items of unequal cost,
  // e.g. causal attention rows, whose cost grows with the position.
  void parallel_for_dynamic(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

  // The default thread count: available_cpus().threads.
  static int hardware_threads();

  // CPU seconds each worker thread has run (threads 1..n-1; the caller's own: this_thread_cpu_seconds()).
  std::vector<double> worker_cpu_seconds() const;
  static double this_thread_cpu_seconds();

  static constexpr int64_t kTilesPerThread = 4;
  // Workers benched right now (contention); for tests and bench's report.
  int benched_workers() const;
  // How long worker i (1..n-1) is benched the next time it is judged descheduled.
  int64_t next_bench_ns(int i) const { return backoff_[i - 1].next_ns(); }

 private:
  void worker(int index);
  void run_job(int64_t n, int64_t grain, bool dynamic, const std::function<void(int64_t, int64_t)>& fn);
  void run_tiles();  // claims and runs tiles of the current job until none is left
  // Caller side, after a job: every kContentionWindow, benches the workers
  // that ran less than kMinCpuShare of the window.
  void watch_contention();
  int n_threads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  // Job fields are written before the generation in state_ is bumped
  // (release) and read by a worker after it joined the job (acquire); the
  // caller rewrites them only after every joined worker left.
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0, job_grain_ = 1, job_tiles_ = 0;
  bool job_dynamic_ = false;
  std::atomic<int64_t> next_{0};  // next tile of the current job
  // The first exception a tile of the current job threw (on any thread), rethrown by the caller once every joined
  // worker has left the job; the tiles not yet claimed are dropped.
  std::mutex error_mu_;
  std::exception_ptr job_error_;
  // Generation (bits 63..32), closed (bit 31), workers in the job (bits 30..0): one word, so joining and closing
  // are atomic with respect to each other.
  std::atomic<uint64_t> state_{0};
  std::atomic<bool> stop_{false};
  // Contention watch (caller thread only, but for the atomics): per worker
  // (index i - 1) the steady-clock ns until which it is benched (0: not),
  // and how often it went to sleep (a window it slept in says nothing).
  std::unique_ptr<std::atomic<int64_t>[]> bench_until_;
  std::unique_ptr<std::atomic<uint32_t>[]> sleeps_;
  std::condition_variable cv_bench_;
  int64_t window_start_ns_ = 0, window_jobs_ = 0;
  std::vector<double> window_cpu_;
  std::vector<uint32_t> window_sleeps_;
  std::vector<bool> window_benched_;  // benched at some point of the window
  std::vector<BenchBackoff> backoff_;  // per worker (caller thread only)
};

}  // namespace blockspec
