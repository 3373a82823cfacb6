// The frozen target pieces a drafter trains against (training.md §1): its
// embedding rows, read through the serving model's own weights, and its
// lm_head dequantized to f32 once, with the transpose the backward uses.
#pragma once
#include <vector>

#include "model/transformer.h"
#include "train/draft_step.h"

namespace blockspec {

struct FrozenTargetCopy {
  std::vector<float> lm_head, lm_head_t;  // [V, H], [H, V] (V: the draft vocabulary)
  std::vector<uint16_t> lm_head_bf16, lm_head_t_bf16;  // the same in bf16 (when asked for)
  FrozenTarget view;                      // points into this object and the model: keep both alive
};

// bf16_head: also keep bf16 copies so the head's products run in bf16.
// vocab: the head rows of a reduced draft vocabulary (target ids); empty:
// every row.
std::unique_ptr<FrozenTargetCopy> freeze_target(const Transformer& model, ThreadPool& pool, bool bf16_head,
                                                const std::vector<int32_t>& vocab = {});

}  // namespace blockspec
