// Page accounting of the shared KV pool (nano-vllm's BlockManager, without
// tensors): a free list and a reference count per page. Every page the
// serving engine holds is counted here and nowhere else; the pages' memory
// is a KvPool, which the model views through a KvCache's page table.
//
// Reference counts let several owners hold one page (a prompt prefix shared
// by several sequences): a page returns to the free list when its last
// owner frees it. Not thread-safe: the engine's step thread owns it.
//
// Prefix caching (vLLM's automatic prefix caching): a full page whose K/V
// are final can be published under the hash of every token up to and
// including its own (page_hash chains them). A later sequence whose prompt
// starts with the same tokens takes the page instead of computing it. A
// published page whose last owner frees it stays cached: it counts as free,
// and allocate() hands out never-cached pages first, then evicts cached ones
// least recently released first. The tokens are kept beside the hash and
// compared on lookup, so a hash collision can cost a miss, never a wrong hit.
#pragma once
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace blockspec {

// The hash of a page: its tokens and the hash of the pages before it (0 for the first page).
uint64_t page_hash(uint64_t parent, const int32_t* tokens, int64_t n);

class BlockAllocator {
 public:
  explicit BlockAllocator(int64_t n_blocks);

  int64_t n_blocks() const { return static_cast<int64_t>(refs_.size()); }
  int64_t n_free() const { return static_cast<int64_t>(free_.size() + lru_.size()); }  // cached-but-unowned included
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

  // Prefix caching. The page published under (hash, parent, tokens), or -1.
  int32_t find_cached(uint64_t hash, uint64_t parent, const int32_t* tokens, int64_t n) const;
  // Takes one more ownership of a cached page (owned or not).
  void take_cached(int32_t block);
  // Publishes an owned, full page; no-op when it or another page already holds the hash.
  void publish(int32_t block, uint64_t hash, uint64_t parent, const int32_t* tokens, int64_t n);
  // Forgets every published page (unowned ones become plain free pages); returns how many.
  int64_t reset_cache();
  int64_t n_cached() const { return static_cast<int64_t>(by_hash_.size()); }  // pages published
  int64_t n_cached_free() const { return static_cast<int64_t>(lru_.size()); }  // ... and unowned

 private:
  struct Published {
    uint64_t hash = 0, parent = 0;
    std::vector<int32_t> tokens;
    bool in_lru = false;
    std::list<int32_t>::iterator lru_pos;
  };
  void forget(int32_t block);  // drops a page's published hash

  std::vector<int32_t> free_;  // stack of never-cached free pages: back() is handed out next
  std::vector<int32_t> refs_;  // [n_blocks] owners of each page
  std::vector<Published> pub_;  // [n_blocks] (tokens empty: not published)
  std::unordered_map<uint64_t, int32_t> by_hash_;
  std::list<int32_t> lru_;  // published pages without owners, least recently released first
};

}  // namespace blockspec
