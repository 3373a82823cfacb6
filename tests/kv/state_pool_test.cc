// StatePool: fixed-size zeroed f32 slots, one per running sequence.
#include "kv/state_pool.h"

#include <gtest/gtest.h>

#include "base/error.h"

namespace blockspec {
namespace {

TEST(StatePool, SlotsAreDisjointAndClearToZero) {
  StatePool p(3, 5);
  EXPECT_EQ(p.n_slots(), 3);
  for (int32_t s = 0; s < 3; ++s)
    for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(p.slot(s)[i], 0.f);
  for (int64_t i = 0; i < 5; ++i) p.slot(1)[i] = 1.f + i;
  EXPECT_EQ(p.slot(0)[4], 0.f);
  EXPECT_EQ(p.slot(2)[0], 0.f);
  EXPECT_EQ(p.slot(1)[4], 5.f);
  p.clear(1);
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(p.slot(1)[i], 0.f);
  EXPECT_THROW(StatePool(-1, 4), Error);
}

}  // namespace
}  // namespace blockspec
