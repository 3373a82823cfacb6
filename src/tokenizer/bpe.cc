#include "tokenizer/bpe.h"

#include <algorithm>

#include "base/error.h"

namespace blockspec::tok {

size_t MergeTable::slot_of(uint64_t k) const {
  // Fibonacci hashing: multiply, keep the top bits.
  return size_t((k * 0x9E3779B97F4A7C15ull) >> shift_);
}

void MergeTable::build(const std::vector<std::pair<uint64_t, Merge>>& entries) {
  size_t capacity = 16;
  int bits = 4;
  while (capacity < entries.size() * 2) {
    capacity *= 2;
    ++bits;
  }
  shift_ = 64 - bits;
  slots_.assign(capacity, Slot{});
  n_entries_ = 0;
  for (const auto& [k, m] : entries) {
    size_t i = slot_of(k);
    while (slots_[i].key != kEmpty && slots_[i].key != k) i = (i + 1) & (capacity - 1);
    if (slots_[i].key == kEmpty) ++n_entries_;
    // A pair listed twice keeps its later rank, as HF's map insert does.
    slots_[i] = Slot{k, m};
  }
}

const MergeTable::Merge* MergeTable::find(int32_t left, int32_t right) const {
  uint64_t k = key(left, right);
  size_t mask = slots_.size() - 1;
  for (size_t i = slot_of(k);; i = (i + 1) & mask) {
    if (slots_[i].key == k) return &slots_[i].merge;
    if (slots_[i].key == kEmpty) return nullptr;
  }
}

BpeModel::BpeModel(std::unordered_map<std::string, int32_t> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges,
                   bool ignore_merges, const std::string& what, bool allow_missing_bytes)
    : vocab_(std::move(vocab)), ignore_merges_(ignore_merges) {
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(std::string(1, char(b)));
    if (it == vocab_.end() && !allow_missing_bytes)
      fail(what, ": model.vocab: expected a token for every byte (byte-level BPE), found none for "
                 "byte ", b);
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
    has_missing_bytes_ |= it == vocab_.end();
  }
  std::vector<std::pair<uint64_t, MergeTable::Merge>> entries;
  entries.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    auto ia = vocab_.find(a), ib = vocab_.find(b), iab = vocab_.find(a + b);
    if (ia == vocab_.end() || ib == vocab_.end() || iab == vocab_.end())
      fail(what, ": model.merges[", r, "]: expected both parts and their concatenation in "
                 "model.vocab, found ", (ia == vocab_.end() ? "left part" :
                 ib == vocab_.end() ? "right part" : "concatenation"), " missing");
    entries.emplace_back(MergeTable::key(ia->second, ib->second),
                         MergeTable::Merge{int32_t(r), iab->second});
  }
  merges_.build(entries);
}

std::optional<int32_t> BpeModel::find(const std::string& bytes) const {
  auto it = vocab_.find(bytes);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::encode_word(std::string_view word, BpeScratch& s, std::vector<int32_t>* out) const {
  if (has_missing_bytes_) {
    auto missing = [&](char c) { return byte_ids_[uint8_t(c)] < 0; };
    if (std::any_of(word.begin(), word.end(), missing)) {
      if (auto id = ignore_merges_ ? find(std::string(word)) : std::nullopt) {
        out->push_back(*id);
        return;
      }
      std::string kept;
      for (char c : word)
        if (!missing(c)) kept.push_back(c);
      if (!kept.empty()) encode_word(kept, s, out);
      return;
    }
  }
  const size_t n = word.size();
  if (n == 1) {
    out->push_back(byte_ids_[uint8_t(word[0])]);
    return;
  }
  if (ignore_merges_) {
    if (auto id = find(std::string(word))) {
      out->push_back(*id);
      return;
    }
  }
  if (n == 2) {  // one possible merge: skip the heap (common for short pieces)
    int32_t a = byte_ids_[uint8_t(word[0])], b = byte_ids_[uint8_t(word[1])];
    if (const auto* m = merges_.find(a, b)) {
      out->push_back(m->new_id);
      return;
    }
    out->push_back(a);
    out->push_back(b);
    return;
  }
  auto& sym = s.symbols;
  sym.resize(n);
  for (size_t i = 0; i < n; ++i)
    sym[i] = {byte_ids_[uint8_t(word[i])], int32_t(i) - 1, i + 1 < n ? int32_t(i + 1) : -1, 1};

  // Min-heap on (rank, pos): the lowest rank merges first and, among equal
  // ranks, the leftmost pair.
  auto later = [](const BpeScratch::Candidate& x, const BpeScratch::Candidate& y) {
    return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
  };
  auto& heap = s.heap;
  heap.clear();
  auto push = [&](int32_t pos) {
    int32_t next = sym[pos].next;
    if (next < 0) return;
    if (const auto* m = merges_.find(sym[pos].id, sym[next].id)) {
      heap.push_back({m->rank, pos, m->new_id});
      std::push_heap(heap.begin(), heap.end(), later);
    }
  };
  for (size_t i = 0; i + 1 < n; ++i) push(int32_t(i));

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    BpeScratch::Candidate top = heap.back();
    heap.pop_back();
    auto& left = sym[top.pos];
    if (left.len == 0 || left.next < 0) continue;  // stale: merged away
    int32_t right_pos = left.next;
    auto& right = sym[right_pos];
    // Stale if the pair changed since it was queued (same test as HF: the
    // current pair must still produce the queued token).
    const auto* m = merges_.find(left.id, right.id);
    if (m == nullptr || m->new_id != top.new_id) continue;
    left.id = top.new_id;
    left.len += right.len;
    left.next = right.next;
    if (right.next >= 0) sym[right.next].prev = top.pos;
    right.len = 0;
    if (left.prev >= 0) push(left.prev);
    push(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out->push_back(sym[i].id);
}

}  // namespace blockspec::tok
