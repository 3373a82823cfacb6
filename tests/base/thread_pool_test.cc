#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
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
