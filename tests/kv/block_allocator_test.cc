// The KV page accounting: allocation all-or-nothing in order, frees back in
// order, reference counts (a page shared by two owners returns when both let
// go), and misuse asserted.
#include "kv/block_allocator.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace blockspec
