// Byte-level BPE model: ranked merges applied to the bytes of one
// pre-tokenized piece, lowest rank first and leftmost first among equal
// ranks, exactly as HF `tokenizers` BPE::merge_word does. Works on raw
// bytes: the vocab is converted out of the byte-level alphabet at load, so
// encoding never builds the mapped string.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace blockspec::tok {

// Open-addressing map from a (left id, right id) pair to its merge. Built
// once; lookups are the hot loop of BPE, so this avoids std::unordered_map's
// node chasing.
class MergeTable {
 public:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  void build(const std::vector<std::pair<uint64_t, Merge>>& entries);
  const Merge* find(int32_t left, int32_t right) const;
  size_t size() const { return n_entries_; }

  static uint64_t key(int32_t left, int32_t right) {
    return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  }

 private:
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge{};
  };
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  size_t slot_of(uint64_t key) const;
  std::vector<Slot> slots_;  // [capacity], capacity a power of two
  size_t n_entries_ = 0;
  int shift_ = 64;
};

// Scratch reused across the words of one encode call.
struct BpeScratch {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    int32_t len;  // bytes; 0 once merged into its left neighbour
  };
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
  };
  std::vector<Symbol> symbols;        // [n_bytes of the word]
  std::vector<Candidate> heap;        // min-heap by (rank, pos)
};

class BpeModel {
 public:
  BpeModel() = default;
  // vocab: raw token bytes -> id. merges: (left bytes, right bytes) in rank
  // order. `what` names the JSON for errors. Throws Error when a merge names
  // a token that is not in the vocab or, unless allow_missing_bytes, a byte
  // has no token. With allow_missing_bytes such bytes are dropped from the
  // input before merging, as HF's BPE does without an unk token (SmolLM2's
  // GGUF vocabulary has no token for 21 bytes, e.g. 0x04).
  BpeModel(std::unordered_map<std::string, int32_t> vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
           const std::string& what, bool allow_missing_bytes = false);

  // Appends the ids of one piece (non-empty raw bytes).
  void encode_word(std::string_view word, BpeScratch& scratch, std::vector<int32_t>* out) const;
  std::optional<int32_t> find(const std::string& bytes) const;
  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }
  size_t n_merges() const { return merges_.size(); }

 private:
  std::unordered_map<std::string, int32_t> vocab_;
  std::array<int32_t, 256> byte_ids_{};  // -1: no token for this byte
  MergeTable merges_;
  bool ignore_merges_ = false;
  bool has_missing_bytes_ = false;
};

}  // namespace blockspec::tok
