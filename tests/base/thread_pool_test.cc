#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "base/error.h"

namespace blockspec {
namespace {

TEST(ThreadPool, CoversRangeExactlyOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 100, 1001}) {
      for (int64_t grain : {1, 16}) {
        std::vector<std::atomic<int>> hits(n);
        pool.parallel_for_grain(n, grain, [&](int64_t b, int64_t e) {
          EXPECT_LT(b, e);
          for (int64_t i = b; i < e; ++i) hits[i]++;
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << threads << " " << n << " " << i;
      }
    }
  }
}

TEST(ThreadPool, DynamicCoversRangeExactlyOnceAndSharesWork) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 100, 1001}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for_dynamic(n, [&](int64_t b, int64_t e) {
        ASSERT_EQ(e, b + 1);
        hits[b]++;
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << threads << " " << n << " " << i;
    }
    // Interleaved with static jobs on the same pool.
    std::atomic<int64_t> sum{0};
    for (int r = 0; r < 200; ++r) {
      pool.parallel_for_dynamic(5, [&](int64_t b, int64_t e) { sum += e - b; });
      pool.parallel_for(5, [&](int64_t b, int64_t e) { sum += e - b; });
    }
    EXPECT_EQ(sum.load(), 2000);
  }
  // One slow item does not hold the others: with 2 threads, the thread that
  // is not stuck on item 0 takes every other item.
  ThreadPool pool(2);
  std::atomic<int> on_other{0};
  std::vector<std::thread::id> who(9);
  pool.parallel_for_dynamic(9, [&](int64_t b, int64_t) {
    who[b] = std::this_thread::get_id();
    if (b == 0) {
      while (on_other.load() < 8) std::this_thread::yield();
    } else {
      on_other++;
    }
  });
  EXPECT_EQ(on_other.load(), 8);
  for (int i = 1; i < 9; ++i) EXPECT_NE(who[i], who[0]) << i;
}

// A tile that throws, on a worker or on the caller, makes the job throw in the caller (a worker that let it escape
// would std::terminate the process), and the pool runs the next job as usual.
TEST(ThreadPool, ExceptionInATileReachesTheCaller) {
  ThreadPool pool(2);
  for (int rep = 0; rep < 20; ++rep) {
    std::atomic<int> ran{0};
    EXPECT_THROW(pool.parallel_for(64,
                                   [&](int64_t b, int64_t) {
                                     ++ran;
                                     std::this_thread::sleep_for(std::chrono::microseconds(200));  // workers join
                                     if (b != 0) fail("tile ", b, " failed");
                                   }),
                 Error);
    EXPECT_GE(ran.load(), 1);
    std::atomic<int64_t> sum{0};
    pool.parallel_for(100, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum += i;
    });
    EXPECT_EQ(sum.load(), 4950);
  }
}

TEST(ThreadPool, ReusableManyTimes) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int r = 0; r < 2000; ++r)
    pool.parallel_for(10, [&](int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum.load(), 20000);
}

// A worker the kernel does not run (here: one stuck in a slow tile, and one
// that never wakes for a job because every tile was taken) never blocks the
// caller beyond the tile it holds, and every region still completes exactly.
TEST(ThreadPool, DelayedWorkerStillCompletesEveryRegion) {
  ThreadPool pool(3);
  for (int r = 0; r < 300; ++r) {
    const int64_t n = 1 + r % 97;
    std::vector<std::atomic<int>> hits(n);
    std::atomic<int> slow{0};
    pool.parallel_for_grain(n, 1 + r % 3, [&](int64_t b, int64_t e) {
      if (r % 10 == 0 && slow.fetch_add(1) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(3));
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << r << " " << i;
  }
  // While one tile sleeps 20 ms, the other threads take every other tile.
  std::atomic<int> others{0};
  const int64_t n = 3 * ThreadPool::kTilesPerThread;
  pool.parallel_for(n, [&](int64_t b, int64_t) {
    if (b == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    else others++;
  });
  EXPECT_EQ(others.load(), n - 1);
}

// A worker that keeps losing its CPU while jobs keep coming (here it sleeps
// inside each tile it takes) is benched: jobs run on the other threads and
// still complete, and once it runs normally it is back after the bench.
TEST(ThreadPool, DescheduledWorkerIsBenchedAndComesBack) {
  ThreadPool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> slow{true};
  int most_benched = 0, least_benched = 1;
  auto run_for = [&](int ms) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end) {
      std::vector<std::atomic<int>> hits(64);
      pool.parallel_for(64, [&](int64_t b, int64_t e) {
        // Every tile computes for 100 us (so the worker joins before the caller took every tile) ...
        const auto busy_until = std::chrono::steady_clock::now() + std::chrono::microseconds(100);
        while (std::chrono::steady_clock::now() < busy_until) {
        }
        // ... and the worker's are off the CPU for 1 ms more.
        if (slow.load() && std::this_thread::get_id() != caller) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1);
      most_benched = std::max(most_benched, pool.benched_workers());
      if (!slow.load()) least_benched = std::min(least_benched, pool.benched_workers());
    }
  };
  // A machine loaded by other work may keep the worker from joining 32 jobs in a window for a while: give it up to 3 s.
  for (int t = 0; t < 8 && most_benched == 0; ++t) run_for(400);
  EXPECT_EQ(most_benched, 1) << "a worker off its CPU for whole windows was not benched";
  slow = false;  // back after the bench (a loaded machine may bench it again, but not at once)
  for (int t = 0; t < 60 && least_benched != 0; ++t) run_for(50);
  EXPECT_EQ(least_benched, 0) << "the worker never came back";
}

// The bench lengths: 0.5 s, doubled while the worker is benched again at once, capped at 2 s; back to 0.5 s after
// a healthy window or when the last bench ended long ago.
TEST(BenchBackoff, DoublesWhileBenchedAgainAndResets) {
  constexpr int64_t s = 1'000'000'000, first = BenchBackoff::kFirstNs, cap = BenchBackoff::kMaxNs;
  BenchBackoff b;
  EXPECT_EQ(b.bench(10 * s), 10 * s + first);
  EXPECT_EQ(b.bench(10 * s + first + s / 10), 10 * s + first + s / 10 + 2 * first);  // right after: twice as long
  const int64_t t = 12 * s;
  EXPECT_EQ(b.bench(t), t + 4 * first);
  EXPECT_EQ(b.bench(t + 4 * first), t + 4 * first + cap);  // capped
  EXPECT_EQ(b.next_ns(), cap);
  b.healthy();
  EXPECT_EQ(b.next_ns(), first);
  EXPECT_EQ(b.bench(20 * s), 20 * s + first);
  EXPECT_EQ(b.bench(20 * s + first), 20 * s + 3 * first);
  EXPECT_EQ(b.bench(100 * s), 100 * s + first) << "a bench long after the last one starts a new episode";
}

// The pool uses it: a worker that stays off its CPU (it sleeps inside every tile it takes) is benched again and
// again, each time longer.
TEST(ThreadPool, BenchGrowsWhileContentionLasts) {
  ThreadPool pool(2);
  EXPECT_EQ(pool.next_bench_ns(1), BenchBackoff::kFirstNs);
  const std::thread::id caller = std::this_thread::get_id();
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(8000);
  while (pool.next_bench_ns(1) < 4 * BenchBackoff::kFirstNs && std::chrono::steady_clock::now() < end) {
    pool.parallel_for(64, [&](int64_t, int64_t) {
      const auto busy_until = std::chrono::steady_clock::now() + std::chrono::microseconds(100);
      while (std::chrono::steady_clock::now() < busy_until) {
      }
      if (std::this_thread::get_id() != caller) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  }
  EXPECT_GE(pool.next_bench_ns(1), 4 * BenchBackoff::kFirstNs) << "the bench did not grow while the worker stayed slow";
}

// Tiles split the range finer than one chunk per thread, in order, and a kernel that writes each index from
// its own inputs gives the same result whatever the thread count.
TEST(ThreadPool, ResultsIndependentOfThreadsAndTiles) {
  std::vector<double> ref;
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    std::vector<double> out(1000);
    std::atomic<int> calls{0};
    pool.parallel_for_grain(1000, 8, [&](int64_t b, int64_t e) {
      calls++;
      EXPECT_EQ(b % 8, 0);
      for (int64_t i = b; i < e; ++i) out[i] = std::sin(0.01 * i) * i;
    });
    if (threads > 1) EXPECT_EQ(calls.load(), threads * ThreadPool::kTilesPerThread);
    if (ref.empty()) ref = out;
    EXPECT_EQ(out, ref) << threads;
  }
}

TEST(ThreadPool, AvailableCpusIsPositiveAndSaysWhy) {
  const CpuBudget b = available_cpus();
  EXPECT_GE(b.threads, 1);
  EXPECT_FALSE(b.why.empty());
  EXPECT_EQ(ThreadPool::hardware_threads(), b.threads);
  ThreadPool pool(2);
  pool.parallel_for(1 << 20, [&](int64_t b, int64_t e) {
    volatile double x = 0;
    for (int64_t i = b; i < e; ++i) x = x + std::sqrt(static_cast<double>(i));
  });
  ASSERT_EQ(pool.worker_cpu_seconds().size(), 1u);
  EXPECT_GE(pool.worker_cpu_seconds()[0], 0.0);
  EXPECT_GT(ThreadPool::this_thread_cpu_seconds(), 0.0);
}

TEST(Error, StrCatAndFail) {
  EXPECT_EQ(str_cat("a", 1, '-', 2.5), "a1-2.5");
  try {
    fail("file.json: field \"x\" expected ", 3, " found ", 4);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "file.json: field \"x\" expected 3 found 4");
  }
}

}  // namespace
}  // namespace blockspec
