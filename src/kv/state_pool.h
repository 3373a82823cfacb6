// Per-sequence model state other than KV -- the recurrent state of hybrid
// (Gated DeltaNet) targets: one fixed-size f32 slot per running sequence.
// Storage only, like KvPool: which slot a sequence holds is a BlockAllocator
// over the slots (the scheduler acquires one at admission and frees it when
// the sequence ends, kv/block_allocator.h). Dense models hold no state and
// get no pool.
#pragma once
#include <cstdint>
#include <vector>

namespace blockspec {

class StatePool {
 public:
  StatePool(int64_t n_slots, int64_t floats_per_slot);
  int64_t n_slots() const { return n_slots_; }
  int64_t floats_per_slot() const { return per_slot_; }
  // The slot's state: [floats_per_slot] f32.
  float* slot(int32_t s);
  const float* slot(int32_t s) const;
  // A sequence starts from zero state (what a recurrent layer's h_0 is).
  void clear(int32_t s);

 private:
  int64_t n_slots_, per_slot_;
  std::vector<float> data_;  // [n_slots, floats_per_slot]
};

}  // namespace blockspec
