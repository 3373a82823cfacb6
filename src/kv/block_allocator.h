// Page accounting of the shared KV pool (nano-vllm's BlockManager, without
// tensors): a free list and a reference count per page. Every page the
// serving engine holds is counted here and nowhere else; the pages' memory
// is a KvPool, which the model views through a KvCache's page table.
//
// Reference counts let several owners hold one page (a prompt prefix shared
// by two sequences, later): a page returns to the free list when its last
// owner frees it. Not thread-safe: the engine's step thread owns it.
#pragma once
#include <cstdint>
#include <vector>

namespace blockspec {

class BlockAllocator {
 public:
  explicit BlockAllocator(int64_t n_blocks);

  int64_t n_blocks() const { return static_cast<int64_t>(refs_.size()); }
  int64_t n_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t n_used() const { return n_blocks() - n_free(); }
  bool can_allocate(int64_t n) const { return n >= 0 && n <= n_free(); }

  // n pages with one owner each, in increasing order from a fresh allocator;
  // empty (taking nothing) when fewer than n are free.
  std::vector<int32_t> allocate(int64_t n);
  // One more owner of a held page.
  void share(int32_t block);
  // One owner fewer; the page is free again when none is left. Freeing a
  // page that is not held is a bug (asserted).
  void free(int32_t block);
  void free(const std::vector<int32_t>& blocks);  // newest first
  int32_t ref_count(int32_t block) const;

 private:
  std::vector<int32_t> free_;  // stack of free pages: back() is handed out next
  std::vector<int32_t> refs_;  // [n_blocks] owners of each page
};

}  // namespace blockspec
