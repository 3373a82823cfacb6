#include "base/thread_pool.h"

#include <chrono>

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <utility>

namespace blockspec {

namespace {
// State word: generation in bits 63..32, "closed" in bit 31, workers in the job in bits 30..0.
constexpr uint64_t kClosed = uint64_t(1) << 31;
constexpr uint64_t kActiveMask = kClosed - 1;
uint32_t gen_of(uint64_t s) { return static_cast<uint32_t>(s >> 32); }

// About 50-100 us of polling before sleeping: long enough to bridge the gaps
// between the kernels of one forward, short enough not to burn a core idle.
// The last kYieldIters polls yield the core, so a thread of ours (or another
// process) that the kernel descheduled gets it back first.
constexpr int kSpinIters = 20000;
constexpr int kYieldIters = 64;

// Contention watch: windows of at least this long and this many jobs; a
// worker with less CPU time than kMinCpuShare of the window's wall time is
// benched (ThreadPool::next_bench_ns). Idle, a worker runs (or spins) the
// whole window: its share is ~1. Beside a busy loop on its core it was ~0.3.
constexpr int64_t kContentionWindowNs = 50'000'000;
constexpr int64_t kMinWindowJobs = 32;
constexpr double kMinCpuShare = 0.6;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Polls `ready` with pause, then with sched_yield; true once ready.
template <class F>
bool spin_until(F ready) {
  for (int i = 0; i < kSpinIters; ++i) {
    if (ready()) return true;
    _mm_pause();
  }
  for (int i = 0; i < kYieldIters; ++i) {
    if (ready()) return true;
    sched_yield();
  }
  return ready();
}

double thread_cpu_seconds(clockid_t id) {
  timespec ts{};
  if (clock_gettime(id, &ts) != 0) return 0.0;
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The first line of a small file, or "".
std::string first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  if (f) std::getline(f, line);
  return line;
}
}  // namespace

CpuBudget available_cpus() {
  CpuBudget b;
  const unsigned hw = std::thread::hardware_concurrency();
  b.threads = hw == 0 ? 1 : static_cast<int>(hw);
  b.why = std::to_string(b.threads) + " online CPUs";
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0 && n < b.threads) b.threads = n, b.why = std::to_string(n) + " CPUs in the affinity mask";
  }
  // cgroup v2 "cpu.max": "<quota> <period>" or "max <period>"; v1: cfs_quota_us / cfs_period_us (-1: none).
  double quota = -1, period = 0;
  std::istringstream v2(first_line("/sys/fs/cgroup/cpu.max"));
  std::string q;
  if (v2 >> q >> period && q != "max") quota = std::atof(q.c_str());
  if (quota <= 0) {
    const std::string q1 = first_line("/sys/fs/cgroup/cpu/cpu.cfs_quota_us");
    const std::string p1 = first_line("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
    if (!q1.empty() && !p1.empty()) quota = std::atof(q1.c_str()), period = std::atof(p1.c_str());
  }
  if (quota > 0 && period > 0) {
    const int n = std::max(1, static_cast<int>(std::ceil(quota / period)));
    if (n < b.threads) {
      std::ostringstream w;
      w << n << " CPUs of cgroup quota (" << quota / period << ")";
      b.threads = n, b.why = w.str();
    }
  }
  return b;
}

int64_t BenchBackoff::bench(int64_t now) {
  if (last_end_ != 0 && now - last_end_ > 2 * kMaxNs) len_ = kFirstNs;  // a new episode
  last_end_ = now + len_;
  len_ = std::min(2 * len_, kMaxNs);
  return last_end_;
}

int ThreadPool::hardware_threads() { return available_cpus().threads; }

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads <= 0 ? hardware_threads() : n_threads) {
  const int w = n_threads_ - 1;
  bench_until_ = std::make_unique<std::atomic<int64_t>[]>(std::max(w, 1));
  sleeps_ = std::make_unique<std::atomic<uint32_t>[]>(std::max(w, 1));
  for (int i = 0; i < w; ++i) bench_until_[i].store(0), sleeps_[i].store(0);
  window_cpu_.assign(w, 0.0), window_sleeps_.assign(w, 0), window_benched_.assign(w, false);
  backoff_.assign(w, BenchBackoff());
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
  }
  cv_start_.notify_all();
  cv_bench_.notify_all();
  for (auto& t : threads_) t.join();
}

int ThreadPool::benched_workers() const {
  int n = 0;
  for (int i = 0; i + 1 < n_threads_; ++i) n += bench_until_[i].load(std::memory_order_relaxed) != 0;
  return n;
}

std::vector<double> ThreadPool::worker_cpu_seconds() const {
  std::vector<double> out;
  for (const std::thread& t : threads_) {
    clockid_t id;
    out.push_back(pthread_getcpuclockid(const_cast<std::thread&>(t).native_handle(), &id) == 0
                      ? thread_cpu_seconds(id)
                      : 0.0);
  }
  return out;
}

double ThreadPool::this_thread_cpu_seconds() { return thread_cpu_seconds(CLOCK_THREAD_CPUTIME_ID); }

void ThreadPool::worker(int index) {
  uint32_t seen = 0;
  std::atomic<int64_t>& bench = bench_until_[index - 1];
  std::atomic<uint32_t>& sleeps = sleeps_[index - 1];
  for (;;) {
    if (const int64_t until = bench.load(std::memory_order_acquire); until != 0) {
      // Benched: sleep out the bench (no job waits for this thread), then skip the jobs it missed.
      sleeps.fetch_add(1, std::memory_order_relaxed);
      std::unique_lock<std::mutex> lk(mu_);
      cv_bench_.wait_for(lk, std::chrono::nanoseconds(std::max<int64_t>(0, until - now_ns())),
                         [&] { return stop_.load(std::memory_order_relaxed); });
      lk.unlock();
      bench.store(0, std::memory_order_release);
      if (stop_.load()) return;
      seen = gen_of(state_.load(std::memory_order_acquire));
      continue;
    }
    auto fresh = [&] { return gen_of(state_.load(std::memory_order_acquire)) != seen || stop_.load(std::memory_order_relaxed); };
    if (!spin_until(fresh)) {
      sleeps.fetch_add(1, std::memory_order_relaxed);
      std::unique_lock<std::mutex> lk(mu_);
      cv_start_.wait(lk, fresh);
    }
    if (stop_.load()) return;
    // Join the job unless the caller closed it already (it then never waits for this thread).
    uint64_t s = state_.load(std::memory_order_acquire);
    const uint32_t g = gen_of(s);
    seen = g;
    bool joined = false;
    while (gen_of(s) == g && (s & kClosed) == 0) {
      if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
        joined = true;
        break;
      }
    }
    if (!joined) continue;
    run_tiles();
    s = state_.fetch_sub(1, std::memory_order_acq_rel);
    if ((s & kActiveMask) == 1 && (s & kClosed) != 0) {
      std::lock_guard<std::mutex> lk(mu_);
      cv_done_.notify_one();
    }
  }
}

void ThreadPool::run_tiles() {
  const int64_t units = (job_n_ + job_grain_ - 1) / job_grain_;
  // Claims alternate between threads that all run, so claim c maps to tile
  // (c % T) * k + c / T (k = tiles per thread): each thread then walks one
  // contiguous block of tiles, one memory stream as with a static split,
  // and a thread that runs alone still takes every tile.
  const int64_t T = n_threads_, k = job_tiles_ / T;
  const bool blocked = !job_dynamic_ && k > 1 && k * T == job_tiles_;
  for (int64_t c = next_.fetch_add(1, std::memory_order_relaxed); c < job_tiles_;
       c = next_.fetch_add(1, std::memory_order_relaxed)) {
    const int64_t t = blocked ? (c % T) * k + c / T : c;
    const int64_t u0 = t * units / job_tiles_, u1 = (t + 1) * units / job_tiles_;
    const int64_t b = std::min(job_n_, u0 * job_grain_), e = std::min(job_n_, u1 * job_grain_);
    try {
      if (job_dynamic_) {
        for (int64_t i = b; i < e; ++i) (*job_)(i, i + 1);
      } else if (b < e) {
        (*job_)(b, e);
      }
    } catch (...) {
      // An exception must not leave a worker thread (std::terminate): kept for the caller, the rest dropped.
      std::lock_guard<std::mutex> lk(error_mu_);
      if (!job_error_) job_error_ = std::current_exception();
      next_.store(job_tiles_, std::memory_order_relaxed);
    }
  }
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
  const int64_t units = (n + grain - 1) / grain;
  job_ = &fn;
  job_n_ = n;
  job_grain_ = grain;
  job_dynamic_ = dynamic;
  // Dynamic jobs hand out single items; others kTilesPerThread tiles per thread, so a thread that runs takes
  // the tiles of one the kernel descheduled.
  job_tiles_ = dynamic ? n : std::min<int64_t>(units, kTilesPerThread * n_threads_);
  next_.store(0, std::memory_order_relaxed);
  {
    // Under the mutex so a worker between its predicate check and its wait cannot miss the new generation.
    std::lock_guard<std::mutex> lk(mu_);
    const uint64_t g = gen_of(state_.load(std::memory_order_relaxed)) + uint64_t(1);
    state_.store((g & 0xFFFFFFFFu) << 32, std::memory_order_release);
  }
  cv_start_.notify_all();
  run_tiles();
  // Every tile is claimed: close the job; only workers that joined before are waited for.
  const uint64_t s = state_.fetch_or(kClosed, std::memory_order_acq_rel);
  if ((s & kActiveMask) != 0) {
    auto done = [&] { return (state_.load(std::memory_order_acquire) & kActiveMask) == 0; };
    if (!spin_until(done)) {
      std::unique_lock<std::mutex> lk(mu_);
      cv_done_.wait(lk, done);
    }
  }
  job_ = nullptr;
  watch_contention();
  if (job_error_) std::rethrow_exception(std::exchange(job_error_, nullptr));
}

void ThreadPool::watch_contention() {
  ++window_jobs_;
  const int64_t now = now_ns();
  const int w = n_threads_ - 1;
  for (int i = 0; i < w; ++i) window_benched_[i] = window_benched_[i] || bench_until_[i].load(std::memory_order_relaxed) != 0;
  if (now - window_start_ns_ < kContentionWindowNs) return;
  const std::vector<double> cpu = worker_cpu_seconds();
  const double wall = 1e-9 * static_cast<double>(now - window_start_ns_);
  const bool measured = window_start_ns_ != 0 && window_jobs_ >= kMinWindowJobs;
  for (int i = 0; i < w && i < static_cast<int>(cpu.size()); ++i) {
    const uint32_t slept = sleeps_[i].load(std::memory_order_relaxed);
    // Only a worker that was in every job's reach the whole window (never benched, never asleep) is judged.
    if (measured && !window_benched_[i] && slept == window_sleeps_[i]) {
      if (cpu[i] - window_cpu_[i] < kMinCpuShare * wall) {
        bench_until_[i].store(backoff_[i].bench(now), std::memory_order_release);
      } else {
        backoff_[i].healthy();
      }
    }
    window_cpu_[i] = cpu[i], window_sleeps_[i] = slept, window_benched_[i] = false;
  }
  window_start_ns_ = now, window_jobs_ = 0;
}

}  // namespace blockspec
