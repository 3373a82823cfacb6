#include "kv/block_allocator.h"

#include "base/error.h"

namespace blockspec {

uint64_t page_hash(uint64_t parent, const int32_t* tokens, int64_t n) {
  // splitmix64's finalizer over (parent, n, tokens...): every input bit reaches every output bit.
  auto mix = [](uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  uint64_t h = mix(parent ^ 0x6A09E667F3BCC908ull) ^ mix(static_cast<uint64_t>(n));
  for (int64_t i = 0; i < n; ++i) h = mix(h ^ static_cast<uint32_t>(tokens[i]));
  return h == 0 ? 1 : h;  // 0 means "no parent"
}

BlockAllocator::BlockAllocator(int64_t n_blocks) {
  if (n_blocks < 0 || n_blocks > INT32_MAX) fail("KV block allocator: bad page count ", n_blocks);
  refs_.assign(static_cast<size_t>(n_blocks), 0);
  pub_.resize(static_cast<size_t>(n_blocks));
  free_.reserve(static_cast<size_t>(n_blocks));
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

std::vector<int32_t> BlockAllocator::allocate(int64_t n) {
  std::vector<int32_t> out;
  if (!can_allocate(n)) return out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int32_t b;
    if (!free_.empty()) {
      b = free_.back();
      free_.pop_back();
    } else {  // evict the cached page released longest ago
      b = lru_.front();
      forget(b);
    }
    refs_[b] = 1;
    out.push_back(b);
  }
  return out;
}

void BlockAllocator::forget(int32_t b) {
  Published& p = pub_[b];
  if (p.tokens.empty()) return;
  by_hash_.erase(p.hash);
  if (p.in_lru) lru_.erase(p.lru_pos);
  p = Published{};
}

int32_t BlockAllocator::find_cached(uint64_t hash, uint64_t parent, const int32_t* tokens, int64_t n) const {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return -1;
  const Published& p = pub_[it->second];
  if (p.parent != parent || static_cast<int64_t>(p.tokens.size()) != n) return -1;
  for (int64_t i = 0; i < n; ++i)
    if (p.tokens[i] != tokens[i]) return -1;
  return it->second;
}

void BlockAllocator::take_cached(int32_t b) {
  BS_ASSERT(b >= 0 && b < n_blocks() && !pub_[b].tokens.empty());  // taking a page that is not cached
  Published& p = pub_[b];
  if (p.in_lru) {
    lru_.erase(p.lru_pos);
    p.in_lru = false;
  }
  ++refs_[b];
}

void BlockAllocator::publish(int32_t b, uint64_t hash, uint64_t parent, const int32_t* tokens, int64_t n) {
  BS_ASSERT(b >= 0 && b < n_blocks() && refs_[b] > 0 && n > 0);  // publishing a page nobody owns
  if (!pub_[b].tokens.empty() || by_hash_.count(hash)) return;
  Published& p = pub_[b];
  p.hash = hash;
  p.parent = parent;
  p.tokens.assign(tokens, tokens + n);
  by_hash_.emplace(hash, b);
}

int64_t BlockAllocator::reset_cache() {
  const int64_t n = n_cached();
  for (int32_t b : lru_) {
    pub_[b] = Published{};
    free_.push_back(b);
  }
  lru_.clear();
  for (auto& [h, b] : by_hash_) pub_[b] = Published{};
  by_hash_.clear();
  return n;
}

void BlockAllocator::share(int32_t block) {
  BS_ASSERT(block >= 0 && block < n_blocks() && refs_[block] > 0);  // sharing a free page
  ++refs_[block];
}

void BlockAllocator::free(int32_t block) {
  BS_ASSERT(block >= 0 && block < n_blocks() && refs_[block] > 0);  // double free or foreign page
  if (--refs_[block] > 0) return;
  Published& p = pub_[block];
  if (p.tokens.empty()) {
    free_.push_back(block);
  } else {  // stays cached until evicted
    p.in_lru = true;
    p.lru_pos = lru_.insert(lru_.end(), block);
  }
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
