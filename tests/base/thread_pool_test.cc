#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
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

TEST(ThreadPool, ReusableManyTimes) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int r = 0; r < 2000; ++r)
    pool.parallel_for(10, [&](int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum.load(), 20000);
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
