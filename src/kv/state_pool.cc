#include "kv/state_pool.h"

#include <algorithm>

#include "base/error.h"

namespace blockspec {

StatePool::StatePool(int64_t n_slots, int64_t floats_per_slot) : n_slots_(n_slots), per_slot_(floats_per_slot) {
  if (n_slots < 0 || floats_per_slot < 0)
    fail("state pool: slots and floats per slot must be >= 0, found ", n_slots, " and ", floats_per_slot);
  data_.assign(static_cast<size_t>(n_slots * floats_per_slot), 0.f);
}

float* StatePool::slot(int32_t s) {
  BS_ASSERT(s >= 0 && s < n_slots_);
  return data_.data() + s * per_slot_;
}

const float* StatePool::slot(int32_t s) const {
  BS_ASSERT(s >= 0 && s < n_slots_);
  return data_.data() + s * per_slot_;
}

void StatePool::clear(int32_t s) { std::fill(slot(s), slot(s) + per_slot_, 0.f); }

}  // namespace blockspec
