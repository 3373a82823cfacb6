// The KV page accounting: allocation all-or-nothing in order, frees back in
// order, reference counts (a page shared by two owners returns when both let
// go), and misuse asserted.
#include "kv/block_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "base/error.h"

namespace blockspec {
namespace {

TEST(BlockAllocator, AllocatesAllOrNothingInOrder) {
  BlockAllocator a(5);
  EXPECT_EQ(a.n_blocks(), 5);
  EXPECT_EQ(a.n_free(), 5);
  EXPECT_EQ(a.allocate(3), (std::vector<int32_t>{0, 1, 2}));  // a fresh allocator hands pages out in order
  EXPECT_EQ(a.n_used(), 3);
  EXPECT_FALSE(a.can_allocate(3));
  EXPECT_TRUE(a.allocate(3).empty());  // 2 free: takes nothing
  EXPECT_EQ(a.n_free(), 2);
  EXPECT_EQ(a.allocate(2), (std::vector<int32_t>{3, 4}));
  EXPECT_TRUE(a.allocate(1).empty());
  EXPECT_TRUE(a.allocate(0).empty());
  EXPECT_TRUE(a.can_allocate(0));
  a.free(std::vector<int32_t>{0, 1, 2});
  EXPECT_EQ(a.n_free(), 3);
  EXPECT_EQ(a.allocate(3), (std::vector<int32_t>{0, 1, 2}));  // freed newest first: out again in order
}

TEST(BlockAllocator, ASharedPageReturnsWhenItsLastOwnerFreesIt) {
  BlockAllocator a(2);
  const auto p = a.allocate(1);
  ASSERT_EQ(p.size(), 1u);
  a.share(p[0]);
  EXPECT_EQ(a.ref_count(p[0]), 2);
  a.free(p[0]);
  EXPECT_EQ(a.ref_count(p[0]), 1);
  EXPECT_EQ(a.n_free(), 1);  // still held by the other owner
  a.free(p[0]);
  EXPECT_EQ(a.ref_count(p[0]), 0);
  EXPECT_EQ(a.n_free(), 2);
}

TEST(BlockAllocator, MisuseIsAsserted) {
  BlockAllocator a(2);
  const auto p = a.allocate(1);
  a.free(p[0]);
  EXPECT_THROW(a.free(p[0]), Error);  // double free
  EXPECT_THROW(a.free(2), Error);     // not a page
  EXPECT_THROW(a.free(-1), Error);
  EXPECT_THROW(a.share(1), Error);    // sharing a free page
  EXPECT_THROW(BlockAllocator(-1), Error);
}

// Prefix caching: a published page is found by its hash, parent and tokens
// (other tokens under the same hash: a miss), stays cached when its owners
// free it (counted free), comes back with take_cached, and is evicted only
// when no never-cached page is left, least recently released first.
TEST(BlockAllocator, PrefixCachePagesStayUntilEvictedLeastRecentFirst) {
  BlockAllocator a(4);
  const std::vector<int32_t> t1 = {1, 2, 3, 4}, t2 = {5, 6, 7, 8}, t3 = {9, 9, 9, 9};
  const uint64_t h1 = page_hash(0, t1.data(), 4), h2 = page_hash(h1, t2.data(), 4);
  EXPECT_NE(h1, page_hash(0, t2.data(), 4));
  EXPECT_NE(h2, page_hash(0, t2.data(), 4));  // the parent is part of the hash
  const auto p = a.allocate(3);
  a.publish(p[0], h1, 0, t1.data(), 4);
  a.publish(p[1], h2, h1, t2.data(), 4);
  a.publish(p[2], h1, 0, t1.data(), 4);  // the hash is taken: p[2] stays unpublished
  EXPECT_EQ(a.n_cached(), 2);
  EXPECT_EQ(a.find_cached(h1, 0, t1.data(), 4), p[0]);
  EXPECT_EQ(a.find_cached(h2, h1, t2.data(), 4), p[1]);
  EXPECT_EQ(a.find_cached(h2, 0, t2.data(), 4), -1);       // another parent
  EXPECT_EQ(a.find_cached(h1, 0, t3.data(), 4), -1);       // other tokens under the hash: never a wrong hit
  EXPECT_EQ(a.find_cached(h1 ^ 1, 0, t1.data(), 4), -1);
  // Owned and cached: another owner takes it.
  a.take_cached(p[0]);
  EXPECT_EQ(a.ref_count(p[0]), 2);
  a.free(p[0]);
  // Freed: p[1] released first, then p[0]; both stay cached and count as free.
  a.free(p[1]);
  a.free(p[0]);
  a.free(p[2]);
  EXPECT_EQ(a.n_free(), 4);
  EXPECT_EQ(a.n_used(), 0);
  EXPECT_EQ(a.n_cached_free(), 2);
  // Taken back from the cache: owned again, no longer evictable.
  a.take_cached(p[0]);
  EXPECT_EQ(a.ref_count(p[0]), 1);
  EXPECT_EQ(a.n_free(), 3);
  a.free(p[0]);  // now released after p[1]
  // Allocation uses never-cached pages first, then evicts p[1] (released longest ago), then p[0].
  const auto q = a.allocate(2);
  EXPECT_EQ(a.n_cached(), 2);
  EXPECT_EQ(std::count(q.begin(), q.end(), p[0]) + std::count(q.begin(), q.end(), p[1]), 0);
  EXPECT_EQ(a.allocate(1), (std::vector<int32_t>{p[1]}));
  EXPECT_EQ(a.find_cached(h2, h1, t2.data(), 4), -1);  // evicted: gone from the cache
  EXPECT_EQ(a.find_cached(h1, 0, t1.data(), 4), p[0]);
  EXPECT_EQ(a.n_cached(), 1);
  // Reset: every hash forgotten, the unowned cached page is a plain free page.
  EXPECT_EQ(a.reset_cache(), 1);
  EXPECT_EQ(a.n_cached(), 0);
  EXPECT_EQ(a.find_cached(h1, 0, t1.data(), 4), -1);
  EXPECT_EQ(a.n_free(), 1);
  EXPECT_THROW(a.take_cached(p[0]), Error);  // no longer cached
}

}  // namespace
}  // namespace blockspec
