#include "kv/block_allocator.h"

#include "base/error.h"

namespace blockspec {

BlockAllocator::BlockAllocator(int64_t n_blocks) {
  if (n_blocks < 0 || n_blocks > INT32_MAX) fail("KV block allocator: bad page count ", n_blocks);
  refs_.assign(static_cast<size_t>(n_blocks), 0);
  free_.reserve(static_cast<size_t>(n_blocks));
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

std::vector<int32_t> BlockAllocator::allocate(int64_t n) {
  std::vector<int32_t> out;
  if (!can_allocate(n)) return out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t b = free_.back();
    free_.pop_back();
    refs_[b] = 1;
    out.push_back(b);
  }
  return out;
}

void BlockAllocator::share(int32_t block) {
  BS_ASSERT(block >= 0 && block < n_blocks() && refs_[block] > 0);  // sharing a free page
  ++refs_[block];
}

void BlockAllocator::free(int32_t block) {
  BS_ASSERT(block >= 0 && block < n_blocks() && refs_[block] > 0);  // double free or foreign page
  if (--refs_[block] == 0) free_.push_back(block);
}

void BlockAllocator::free(const std::vector<int32_t>& blocks) {
  // Newest first, so a fresh allocator hands a freed sequence's pages out again in order.
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) free(*it);
}

int32_t BlockAllocator::ref_count(int32_t block) const {
  BS_ASSERT(block >= 0 && block < n_blocks());
  return refs_[block];
}

}  // namespace blockspec
